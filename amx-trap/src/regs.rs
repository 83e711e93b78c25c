//! The registers an AMX instruction reads: the 16 general-purpose registers (for its memory
//! operand) and RIP (advanced past it when it completes), with the conversions from and to a
//! signal handler's `ucontext_t`.

/// General-purpose registers in encoding order (0 = rax, 1 = rcx, 2 = rdx, 3 = rbx, 4 = rsp,
/// 5 = rbp, 6 = rsi, 7 = rdi, 8..15 = r8..r15) and the instruction pointer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    /// rax .. r15, in encoding order.
    pub gpr: [u64; 16],
    /// The address of the instruction; [`execute`](super::execute) advances it past the
    /// instruction when it completes.
    pub rip: u64,
}

/// `ucontext_t` access on x86-64 Linux.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) mod context {
    use super::Regs;

    /// The `gregs` slot of each register in encoding order (glibc's `REG_RAX`, ...).
    const SLOT: [usize; 16] = [
        libc::REG_RAX as usize,
        libc::REG_RCX as usize,
        libc::REG_RDX as usize,
        libc::REG_RBX as usize,
        libc::REG_RSP as usize,
        libc::REG_RBP as usize,
        libc::REG_RSI as usize,
        libc::REG_RDI as usize,
        libc::REG_R8 as usize,
        libc::REG_R9 as usize,
        libc::REG_R10 as usize,
        libc::REG_R11 as usize,
        libc::REG_R12 as usize,
        libc::REG_R13 as usize,
        libc::REG_R14 as usize,
        libc::REG_R15 as usize,
    ];

    /// The interrupted thread's registers.
    pub(crate) fn read(uc: &libc::ucontext_t) -> Regs {
        let g = &uc.uc_mcontext.gregs;
        Regs {
            gpr: SLOT.map(|s| g[s] as u64),
            rip: g[libc::REG_RIP as usize] as u64,
        }
    }

    /// The interrupted thread's RIP.
    pub(crate) fn rip(uc: &libc::ucontext_t) -> u64 {
        uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64
    }

    /// Sets the RIP the thread resumes at.
    pub(crate) fn set_rip(uc: &mut libc::ucontext_t, rip: u64) {
        uc.uc_mcontext.gregs[libc::REG_RIP as usize] = rip as i64;
    }

    /// Sets what the kernel reports for an exception: the vector (REG_TRAPNO), the error code
    /// (REG_ERR) and CR2 (the faulting address of a page fault, else left alone).
    pub(crate) fn set_exception(
        uc: &mut libc::ucontext_t,
        trapno: u64,
        err: u64,
        cr2: Option<u64>,
    ) {
        uc.uc_mcontext.gregs[libc::REG_TRAPNO as usize] = trapno as i64;
        uc.uc_mcontext.gregs[libc::REG_ERR as usize] = err as i64;
        if let Some(cr2) = cr2 {
            uc.uc_mcontext.gregs[libc::REG_CR2 as usize] = cr2 as i64;
        }
    }
}
