//! The program's memory, accessed as the CPU's own loads and stores would access it.
//!
//! Every byte an emulated instruction reads or writes (its operand rows, a configuration image,
//! the instruction's own bytes, a signal frame the engine writes for the program) goes through
//! [`copy`]: plain loads and stores in a small assembly routine whose address range the
//! engine's SIGSEGV and SIGBUS entry knows. A fault inside it does not reach the program: the
//! entry records the signal the kernel raised (its siginfo, REG_TRAPNO and REG_ERR) in the
//! thread's slot and resumes the routine at its recovery label, which returns "faulted". The
//! engine then raises exactly that fault at the program's instruction. So an operand faults
//! with the CPU's own fault, whatever the memory is: a page fault with the CPU's error code,
//! a #GP for a non-canonical address, SIGBUS past the end of a file mapping, a protection-key
//! fault; and it works where the CPU works: write-only pages (readable on x86), `VM_PFNMAP`
//! mappings such as `[vvar]`, stack growth, processes whose seccomp filter denies
//! `process_vm_readv`.
//!
//! Protection keys: inside a signal handler Linux sets PKRU to its default, so around the
//! operand copies the engine loads the program's PKRU from the interrupted context (and reads
//! instruction bytes with every key enabled, as instruction fetches ignore PKRU).
//!
//! Async-signal-safe: no allocation, no lock, no system call on the way that succeeds.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

// The copy routine. `amx_trap_copy(dst, src, len)` returns 0, or 1 when an access faulted (the
// copy is then partial). 16 bytes at a time with SSE2, then single bytes, in address order:
// exactly the bytes asked for are touched. No stack use: the recovery label returns from any
// point of it.
core::arch::global_asm!(
    ".pushsection .text.amx_trap_copy,\"ax\",@progbits",
    ".p2align 4",
    ".hidden amx_trap_copy",
    ".globl amx_trap_copy",
    ".type amx_trap_copy, @function",
    "amx_trap_copy:",
    "    cmp rdx, 16",
    "    jb 3f",
    "2:",
    "    movdqu xmm0, xmmword ptr [rsi]",
    "    movdqu xmmword ptr [rdi], xmm0",
    "    add rsi, 16",
    "    add rdi, 16",
    "    sub rdx, 16",
    "    cmp rdx, 16",
    "    jae 2b",
    "3:",
    "    test rdx, rdx",
    "    jz 5f",
    "4:",
    "    movzx eax, byte ptr [rsi]",
    "    mov byte ptr [rdi], al",
    "    inc rsi",
    "    inc rdi",
    "    dec rdx",
    "    jnz 4b",
    "5:",
    "    xor eax, eax",
    "    ret",
    ".hidden amx_trap_copy_recover",
    ".globl amx_trap_copy_recover",
    "amx_trap_copy_recover:",
    "    mov eax, 1",
    "    ret",
    ".hidden amx_trap_copy_end",
    ".globl amx_trap_copy_end",
    "amx_trap_copy_end:",
    ".size amx_trap_copy, amx_trap_copy_end - amx_trap_copy",
    ".popsection",
);

extern "C" {
    fn amx_trap_copy(dst: *mut u8, src: *const u8, len: usize) -> u64;
    fn amx_trap_copy_recover();
    fn amx_trap_copy_end();
}

/// The fault a [`copy`] met, as the kernel reported it.
#[derive(Clone, Copy)]
pub(crate) struct Fault {
    /// The siginfo (SIGSEGV or SIGBUS, its code, address, protection key).
    pub(crate) info: [u8; 128],
    /// REG_TRAPNO: 14 for a page fault, 13 for a #GP.
    pub(crate) trapno: u64,
    /// REG_ERR: the page fault's error code.
    pub(crate) err: u64,
}

impl std::fmt::Debug for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fault")
            .field("signal", &self.signal())
            .field("code", &self.code())
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("trapno", &self.trapno)
            .field("err", &self.err)
            .finish()
    }
}

impl PartialEq for Fault {
    fn eq(&self, other: &Fault) -> bool {
        self.info == other.info && self.trapno == other.trapno && self.err == other.err
    }
}

impl Eq for Fault {}

impl Fault {
    /// The signal number.
    pub(crate) fn signal(&self) -> i32 {
        i32::from_le_bytes([self.info[0], self.info[1], self.info[2], self.info[3]])
    }

    /// `si_code`.
    pub(crate) fn code(&self) -> i32 {
        i32::from_le_bytes([self.info[8], self.info[9], self.info[10], self.info[11]])
    }

    /// `si_addr`.
    pub(crate) fn addr(&self) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.info[16..24]);
        u64::from_le_bytes(a)
    }
}

/// Whether `rip` lies in the copy routine (a fault there is the engine's to recover).
pub(crate) fn in_copy(rip: u64) -> bool {
    let start = amx_trap_copy as *const () as u64;
    let end = amx_trap_copy_end as *const () as u64;
    (start..end).contains(&rip)
}

/// Where a recovered copy resumes.
pub(crate) fn recover_at() -> u64 {
    amx_trap_copy_recover as *const () as u64
}

/// Copies `len` bytes from `src` to `dst`, either of which may be the program's memory; on a
/// fault, the fault (recorded by the signal entry in the thread's slot, where it has one; else
/// [`Fault::UNKNOWN`]).
///
/// # Safety
/// Whichever side is the engine's own is valid for `len` bytes; the program's side may be any
/// address. The engine is installed (its SIGSEGV and SIGBUS entry recovers the routine's
/// faults, in an activation or in the program's own context alike).
pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) -> Result<(), Fault> {
    // SAFETY: the routine touches exactly `dst..dst+len` and `src..src+len`; faults on them
    // are recovered (the caller's contract covers the rest).
    let faulted = unsafe { amx_trap_copy(dst, src, len) } != 0;
    if !faulted {
        return Ok(());
    }
    Err(crate::slot::current().map_or(Fault::UNKNOWN, |s| s.last_fault()))
}

impl Fault {
    /// A fault the kernel reports with `si_code` SI_KERNEL and no address (#GP, #SS).
    const fn kernel(sig: i32, trapno: u64) -> Fault {
        let mut info = [0u8; 128];
        info[0] = sig as u8;
        info[8] = 0x80; // SI_KERNEL
        Fault {
            info,
            trapno,
            err: 0,
        }
    }

    /// #GP(0) of a memory reference (a non-canonical address), as Linux reports it: SIGSEGV.
    pub(crate) const GENERAL_PROTECTION: Fault = Fault::kernel(libc::SIGSEGV, 13);

    /// #SS(0): a non-canonical reference through the stack segment (a base of RSP or RBP
    /// without an FS or GS override), as Linux reports it (`exc_stack_segment`): SIGBUS.
    pub(crate) const STACK_SEGMENT: Fault = Fault::kernel(libc::SIGBUS, 12);

    /// Whether this is the CPU's #GP of a memory reference.
    pub(crate) fn is_general_protection(&self) -> bool {
        self.trapno == 13 && self.signal() == libc::SIGSEGV
    }

    /// Stands for a fault whose record is missing (a copy outside an activation: a bug).
    pub(crate) const UNKNOWN: Fault = Fault {
        info: {
            let mut info = [0u8; 128];
            info[0] = libc::SIGSEGV as u8;
            info[8] = 0x80; // SI_KERNEL
            info
        },
        trapno: 13,
        err: 0,
    };
}

/// Whether the OS enables protection keys (PKRU exists).
static PKU: AtomicBool = AtomicBool::new(false);
/// Where PKRU lies in XSAVE state (standard format).
static PKRU_OFFSET: AtomicUsize = AtomicUsize::new(2688);

/// Reads, once at installation, whether the OS enables protection keys, and where XSAVE puts
/// PKRU.
pub(crate) fn prepare() {
    let leaf7 = raw_cpuid::native_cpuid::cpuid_count(7, 0);
    PKU.store(leaf7.ecx & (1 << 4) != 0, Ordering::Relaxed);
    let leaf_d9 = raw_cpuid::native_cpuid::cpuid_count(0xD, 9);
    if leaf_d9.ebx != 0 {
        PKRU_OFFSET.store(leaf_d9.ebx as usize, Ordering::Relaxed);
    }
}

/// Where PKRU lies in XSAVE state (standard format).
pub(crate) fn pkru_offset() -> usize {
    PKRU_OFFSET.load(Ordering::Relaxed)
}

/// Whether the OS enables protection keys.
pub(crate) fn pku() -> bool {
    PKU.load(Ordering::Relaxed)
}

/// The current PKRU (0 where there are no protection keys).
pub(crate) fn rdpkru() -> u32 {
    if !pku() {
        return 0;
    }
    let pkru: u32;
    // SAFETY: RDPKRU with ECX = 0 exists where the OS enables protection keys (checked).
    unsafe {
        core::arch::asm!("rdpkru", in("ecx") 0, out("eax") pkru, out("edx") _,
            options(nomem, nostack, preserves_flags));
    }
    pkru
}

/// Sets PKRU (nothing where there are no protection keys).
pub(crate) fn wrpkru(pkru: u32) {
    if !pku() {
        return;
    }
    // SAFETY: WRPKRU with ECX = EDX = 0 exists where the OS enables protection keys; it changes
    // only which of this thread's data accesses the keys allow. Not `nomem`: memory accesses
    // must not move across it.
    unsafe {
        core::arch::asm!("wrpkru", in("eax") pkru, in("ecx") 0, in("edx") 0,
            options(nostack, preserves_flags));
    }
}

/// Runs `f` with PKRU set to `pkru`, then puts the current value back.
pub(crate) fn with_pkru<R>(pkru: u32, f: impl FnOnce() -> R) -> R {
    let was = rdpkru();
    if was == pkru {
        return f();
    }
    wrpkru(pkru);
    let r = f();
    wrpkru(was);
    r
}

/// Reads up to `out.len()` bytes of code at `addr`, stopping at the first byte that cannot be
/// read; returns how many were read. An instruction fetch ignores protection keys, so where a
/// key denies the read (execute-only memory) it is read again with every key enabled (only
/// then: loading PKRU costs more than the read).
pub(crate) fn fetch(addr: u64, out: &mut [u8]) -> usize {
    let read = |out: &mut [u8]| {
        // SAFETY: `out` is ours; the code bytes are any address.
        match unsafe { copy(out.as_mut_ptr(), addr as *const u8, out.len()) } {
            Ok(()) => Ok(out.len()),
            Err(f) => Err(f),
        }
    };
    let first = match read(out) {
        Ok(n) => return n,
        Err(f) if f.signal() == libc::SIGSEGV && f.code() == SEGV_PKUERR => {
            with_pkru(0, || read(out))
        }
        Err(f) => Err(f),
    };
    match first {
        Ok(n) => n,
        Err(f) => with_pkru(0, || {
            // Bytes before the faulting page are readable: read those alone.
            let readable = f.addr().wrapping_sub(addr);
            let n = usize::try_from(readable)
                .unwrap_or(0)
                .min(out.len().saturating_sub(1));
            out.get_mut(..n).map_or(0, |head| read(head).unwrap_or(0))
        }),
    }
}

/// `si_code` of a protection-key fault.
const SEGV_PKUERR: i32 = 4;
