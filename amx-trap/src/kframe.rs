//! The x86-64 Linux signal frame, as the kernel builds it for a handler and `rt_sigreturn`
//! reads it back (arch/x86/include/asm/sigframe.h, uapi/asm/sigcontext.h):
//!
//! ```text
//!   higher addresses
//!   [red zone, 128 bytes]          below the interrupted RSP (or the alternate stack's top)
//!   [FP state, 64-byte aligned]    XSAVE format, its software bytes at 464, MAGIC2 at its end
//!   [info: siginfo, 128 bytes]
//!   [uc: ucontext, 304 bytes]      flags, link, stack, mcontext (gregs, fpregs, reserved), mask
//!   [pretcode: return address]     RSP on handler entry; RSP + 8 is 16-byte aligned
//! ```
//!
//! The kernel's `ucontext` differs from the C library's `ucontext_t` after the mask: the
//! kernel's mask is 8 bytes, and siginfo follows it. The engine builds frames of exactly this
//! layout for the program's handlers (deliver.rs) and returns through `rt_sigreturn` from
//! frames it prepared (entry.rs).

/// The unwind information of a restorer (the return address of a handler, where RSP is the
/// frame's `uc`), as the C library's restorer is described: a signal frame, the CFA and every
/// register read from the `uc` at RSP. It opens the FDE (`.cfi_startproc`), which must start
/// one byte before the restorer (at a `nop`): unwinders look up the caller of a frame at its
/// return address minus one.
macro_rules! signal_frame_cfi {
    () => {
        concat!(
            ".cfi_startproc simple\n",
            ".cfi_signal_frame\n",
            // CFA = *(rsp + 160): the interrupted RSP (uc + 40 + 8 * REG_RSP).
            ".cfi_escape 0x0f, 0x04, 0x77, 0xa0, 0x01, 0x06\n",
            // Each register at uc + 40 + 8 * REG_x (DWARF numbers: rax 0, rdx 1, rcx 2, rbx 3,
            // rsi 4, rdi 5, rbp 6, r8-r15 8-15, return address 16).
            ".cfi_escape 0x10, 0x00, 0x03, 0x77, 0x90, 0x01\n",
            ".cfi_escape 0x10, 0x01, 0x03, 0x77, 0x88, 0x01\n",
            ".cfi_escape 0x10, 0x02, 0x03, 0x77, 0x98, 0x01\n",
            ".cfi_escape 0x10, 0x03, 0x03, 0x77, 0x80, 0x01\n",
            ".cfi_escape 0x10, 0x04, 0x03, 0x77, 0xf0, 0x00\n",
            ".cfi_escape 0x10, 0x05, 0x03, 0x77, 0xe8, 0x00\n",
            ".cfi_escape 0x10, 0x06, 0x03, 0x77, 0xf8, 0x00\n",
            ".cfi_escape 0x10, 0x08, 0x02, 0x77, 0x28\n",
            ".cfi_escape 0x10, 0x09, 0x02, 0x77, 0x30\n",
            ".cfi_escape 0x10, 0x0a, 0x02, 0x77, 0x38\n",
            ".cfi_escape 0x10, 0x0b, 0x03, 0x77, 0xc0, 0x00\n",
            ".cfi_escape 0x10, 0x0c, 0x03, 0x77, 0xc8, 0x00\n",
            ".cfi_escape 0x10, 0x0d, 0x03, 0x77, 0xd0, 0x00\n",
            ".cfi_escape 0x10, 0x0e, 0x03, 0x77, 0xd8, 0x00\n",
            ".cfi_escape 0x10, 0x0f, 0x03, 0x77, 0xe0, 0x00\n",
            ".cfi_escape 0x10, 0x10, 0x03, 0x77, 0xa8, 0x01\n",
        )
    };
}
pub(crate) use signal_frame_cfi;

/// `stack_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Stack {
    pub(crate) sp: u64,
    pub(crate) flags: i32,
    pub(crate) pad: i32,
    pub(crate) size: u64,
}

/// The kernel's `struct ucontext` on x86-64.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ucontext {
    pub(crate) flags: u64,
    pub(crate) link: u64,
    pub(crate) stack: Stack,
    /// `struct sigcontext`'s registers, in glibc's `REG_*` order.
    pub(crate) gregs: [u64; 23],
    /// The FP state's address (0: none; `rt_sigreturn` then resets the FP state).
    pub(crate) fpregs: u64,
    pub(crate) reserved: [u64; 8],
    /// The signal mask to restore (signals 1 to 64).
    pub(crate) sigmask: u64,
}

/// The kernel's `struct rt_sigframe` on x86-64 (the FP state follows it).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RtFrame {
    pub(crate) pretcode: u64,
    pub(crate) uc: Ucontext,
    pub(crate) info: [u8; 128],
}

const _: () = {
    assert!(std::mem::size_of::<Ucontext>() == 304);
    assert!(std::mem::size_of::<RtFrame>() == 440);
    assert!(std::mem::offset_of!(Ucontext, gregs) == 40);
    assert!(std::mem::offset_of!(Ucontext, sigmask) == 296);
};

/// `SS_ONSTACK`, `SS_DISABLE`, `SS_AUTODISARM` of `stack_t::ss_flags`.
pub(crate) const SS_ONSTACK: i32 = 1;
pub(crate) const SS_DISABLE: i32 = 2;
pub(crate) const SS_AUTODISARM: i32 = 1 << 31;

/// Register indices in `gregs` (glibc's `REG_*`).
pub(crate) mod reg {
    pub(crate) const R8: usize = 0;
    pub(crate) const RDI: usize = 8;
    pub(crate) const RSI: usize = 9;
    pub(crate) const RBP: usize = 10;
    pub(crate) const RBX: usize = 11;
    pub(crate) const RDX: usize = 12;
    pub(crate) const RAX: usize = 13;
    pub(crate) const RCX: usize = 14;
    pub(crate) const RSP: usize = 15;
    pub(crate) const RIP: usize = 16;
    pub(crate) const EFL: usize = 17;
    pub(crate) const ERR: usize = 19;
    pub(crate) const TRAPNO: usize = 20;
    pub(crate) const OLDMASK: usize = 21;
    pub(crate) const CR2: usize = 22;
}

/// The FP state's software bytes (`struct _fpx_sw_bytes`) at offset 464 of the legacy area.
pub(crate) mod sw {
    pub(crate) const AT: usize = 464;
    pub(crate) const MAGIC1: u32 = 0x4650_5853;
    /// Offsets within the FP state.
    pub(crate) const EXTENDED_SIZE: usize = AT + 4;
    /// The state components the frame holds (`rt_sigreturn` restores these).
    pub(crate) const XFEATURES: usize = AT + 8;
    /// The XSAVE state's size, without the trailing MAGIC2.
    pub(crate) const XSTATE_SIZE: usize = AT + 16;
    /// The reserved padding (28 bytes from 484) the kernel ignores: the engine's marker of a
    /// frame it built (deliver.rs).
    pub(crate) const PADDING: usize = AT + 20;
}

/// `FP_XSTATE_MAGIC2`, the word after the XSAVE state of a frame (at `XSTATE_SIZE`).
pub(crate) const MAGIC2: u32 = 0x4650_5845;

/// Offsets of the XSAVE header in the FP state.
pub(crate) const XSTATE_BV: usize = 512;

/// MXCSR in the legacy area.
pub(crate) const MXCSR: usize = 24;
/// XMM0 in the legacy area (16 bytes per register).
pub(crate) const XMM0: usize = 160;

/// The little-endian u32 at `at` of `b`, if `b` holds it.
pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The little-endian u64 at `at` of `b`, if `b` holds it.
pub(crate) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// The size of an FP state of the kernel's, read from its software bytes (the legacy 512
/// bytes when it carries no XSAVE state).
pub(crate) fn fp_size(fp_head: &[u8; 512]) -> usize {
    if u32_at(fp_head, sw::AT) == Some(sw::MAGIC1) {
        u32_at(fp_head, sw::EXTENDED_SIZE).map_or(512, |n| n as usize)
    } else {
        512
    }
}

impl Ucontext {
    /// The interrupted instruction pointer.
    pub(crate) fn rip(&self) -> u64 {
        self.gregs[reg::RIP]
    }

    /// The interrupted stack pointer.
    pub(crate) fn rsp(&self) -> u64 {
        self.gregs[reg::RSP]
    }
}
