//! `getcontext`, `setcontext`, `swapcontext` and the return of a `makecontext` function: the C
//! library switches masks in these with its own system call, which would block the engine's
//! signals in the kernel (a coroutine made with a full mask kills the process at its first AMX
//! instruction) and leave the program's view of them behind (a fault handler left with
//! `setcontext` keeps SIGSEGV blocked, and the next fault ends the process).
//!
//! A saved context holds the program's mask, as the program sees it, where the C library puts
//! it (`uc_sigmask`): `getcontext` is the C library's, then the mask and the caller's return
//! (the C library's saved its call from this library) are written in. A context is entered
//! by this library's `setcontext`: the mask through [`change_mask`](crate::sig::change_mask),
//! then the registers, as the C library's function restores them (the x86-64 `ucontext_t`:
//! the x87 environment through `fpregs`, MXCSR from the context's own FP area, the stack
//! pointer, the callee-saved and argument registers, and a return to the saved RIP). A context
//! fresh from `makecontext` returns, when its function does, through [`start_context`], which
//! enters `uc_link` through this `setcontext` rather than through the C library's internal
//! call. Where the engine does not run (a CPU with AMX), all three forward to the C library.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::active;

/// Offsets in the C library's x86-64 `ucontext_t`.
const SIGMASK: usize = std::mem::offset_of!(libc::ucontext_t, uc_sigmask);
const MCONTEXT: usize = std::mem::offset_of!(libc::ucontext_t, uc_mcontext);
const FPREGS: usize = MCONTEXT + std::mem::offset_of!(libc::mcontext_t, fpregs);
/// The register `r` in `uc_mcontext.gregs`.
const fn greg(r: libc::c_int) -> usize {
    MCONTEXT + 8 * r as usize
}
/// MXCSR in the context's own FP area (`__fpregs_mem`, after the mask; MXCSR at byte 24 of
/// the FXSAVE layout), where the C library's functions keep and read it.
const MXCSR: usize = SIGMASK + std::mem::size_of::<libc::sigset_t>() + 24;

/// The C library's functions (0 until resolved).
static REAL_GETCONTEXT: AtomicUsize = AtomicUsize::new(0);
static REAL_SETCONTEXT: AtomicUsize = AtomicUsize::new(0);
static REAL_SWAPCONTEXT: AtomicUsize = AtomicUsize::new(0);
/// Where the C library's `makecontext` makes a context's function return (its internal
/// `__start_context`), found by making one; 0 where unknown.
static LIBRARY_START: AtomicUsize = AtomicUsize::new(0);

/// Finds the C library's functions, and the return address its `makecontext` gives.
pub(crate) fn resolve() {
    let get = crate::real::getcontext().unwrap_or(0);
    REAL_GETCONTEXT.store(get, Ordering::Relaxed);
    REAL_SETCONTEXT.store(crate::real::setcontext().unwrap_or(0), Ordering::Relaxed);
    REAL_SWAPCONTEXT.store(crate::real::swapcontext().unwrap_or(0), Ordering::Relaxed);
    let (true, Some(make)) = (get != 0, crate::real::makecontext()) else {
        return;
    };
    // SAFETY: a non-zero address dlsym returned for `getcontext` is the C library's function.
    let get = unsafe {
        std::mem::transmute::<usize, unsafe extern "C" fn(*mut libc::ucontext_t) -> libc::c_int>(
            get,
        )
    };
    extern "C" fn never() {}
    // The function never runs: only the stack `makecontext` prepares for it is read.
    let mut stack = [0u64; 64];
    // SAFETY: an all-zero ucontext_t is a valid value to fill.
    let mut uc: libc::ucontext_t = unsafe { std::mem::zeroed() };
    // SAFETY: `uc` is a live local, filled by getcontext; makecontext writes its registers and
    // the top of `stack`, which `uc_stack` describes and which outlives the call.
    let start = unsafe {
        if get(&mut uc) != 0 {
            return;
        }
        uc.uc_stack.ss_sp = stack.as_mut_ptr().cast();
        uc.uc_stack.ss_size = std::mem::size_of_val(&stack);
        uc.uc_link = std::ptr::null_mut();
        make(&mut uc, never, 0);
        let sp = uc.uc_mcontext.gregs[libc::REG_RSP as usize] as usize;
        let inside =
            (stack.as_ptr() as usize..stack.as_ptr() as usize + 8 * stack.len()).contains(&sp);
        if inside {
            (sp as *const usize).read()
        } else {
            0
        }
    };
    LIBRARY_START.store(start, Ordering::Relaxed);
}

/// `getcontext(3)`: the C library's, called from here; then the context is made the one a
/// direct call would have saved (this function's caller's return address and stack pointer),
/// with the program's mask.
///
/// # Safety
/// As the C library's `getcontext`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn getcontext(ucp: *mut libc::ucontext_t) -> libc::c_int {
    core::arch::naked_asm!(
        "push rdi",
        "call {forward}",
        "pop rdi",
        "test rax, rax",
        "jz 1f",
        "jmp rax",
        "1:",
        "push rdi",
        "call qword ptr [rip + {real}]",
        "pop rdi",
        "test eax, eax",
        "jnz 2f",
        "mov rsi, rsp",
        "sub rsp, 8",
        "call {fixup}",
        "add rsp, 8",
        "2:",
        "ret",
        forward = sym forward_getcontext,
        real = sym REAL_GETCONTEXT,
        fixup = sym fixup,
    )
}

/// `swapcontext(3)`: the caller's context saved into `oucp` as [`getcontext`] saves it, then
/// `ucp` entered as [`setcontext`] enters it.
///
/// # Safety
/// As the C library's `swapcontext`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn swapcontext(
    oucp: *mut libc::ucontext_t,
    ucp: *const libc::ucontext_t,
) -> libc::c_int {
    core::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {forward}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 1f",
        "jmp rax",
        "1:",
        "push rsi",
        "push rdi",
        "sub rsp, 8",
        "call qword ptr [rip + {real}]",
        "add rsp, 8",
        "pop rdi",
        "pop rsi",
        "test eax, eax",
        "jnz 2f",
        "push rsi",
        "lea rsi, [rsp + 8]",
        "call {fixup}",
        "pop rdi",
        "jmp {setcontext}",
        "2:",
        "ret",
        forward = sym forward_swapcontext,
        real = sym REAL_GETCONTEXT,
        fixup = sym fixup,
        setcontext = sym setcontext,
    )
}

/// `setcontext(3)`: the mask `ucp` holds becomes the thread's, through the library's mask
/// calls, then its registers are loaded and its RIP returned to (on an error, -1 with `errno`,
/// as the C library's).
///
/// # Safety
/// As the C library's `setcontext`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn setcontext(ucp: *const libc::ucontext_t) -> libc::c_int {
    core::arch::naked_asm!(
        "push rdi",
        "call {prepare}",
        "pop rdx",
        "test eax, eax",
        "jz 1f",
        "js 2f",
        "mov rdi, rdx",
        "jmp qword ptr [rip + {real}]",
        "2:",
        "ret",
        "1:",
        "mov rcx, qword ptr [rdx + {fpregs}]",
        "fldenv [rcx]",
        "ldmxcsr dword ptr [rdx + {mxcsr}]",
        "mov rsp, qword ptr [rdx + {rsp}]",
        "mov rbx, qword ptr [rdx + {rbx}]",
        "mov rbp, qword ptr [rdx + {rbp}]",
        "mov r12, qword ptr [rdx + {r12}]",
        "mov r13, qword ptr [rdx + {r13}]",
        "mov r14, qword ptr [rdx + {r14}]",
        "mov r15, qword ptr [rdx + {r15}]",
        "push qword ptr [rdx + {rip}]",
        "mov rsi, qword ptr [rdx + {rsi}]",
        "mov rdi, qword ptr [rdx + {rdi}]",
        "mov rcx, qword ptr [rdx + {rcx}]",
        "mov r8, qword ptr [rdx + {r8}]",
        "mov r9, qword ptr [rdx + {r9}]",
        "mov rdx, qword ptr [rdx + {rdx}]",
        "xor eax, eax",
        "ret",
        prepare = sym prepare_enter,
        real = sym REAL_SETCONTEXT,
        fpregs = const FPREGS,
        mxcsr = const MXCSR,
        rsp = const greg(libc::REG_RSP),
        rbx = const greg(libc::REG_RBX),
        rbp = const greg(libc::REG_RBP),
        r12 = const greg(libc::REG_R12),
        r13 = const greg(libc::REG_R13),
        r14 = const greg(libc::REG_R14),
        r15 = const greg(libc::REG_R15),
        rip = const greg(libc::REG_RIP),
        rsi = const greg(libc::REG_RSI),
        rdi = const greg(libc::REG_RDI),
        rcx = const greg(libc::REG_RCX),
        r8 = const greg(libc::REG_R8),
        r9 = const greg(libc::REG_R9),
        rdx = const greg(libc::REG_RDX),
    )
}

/// Where a function entered through `makecontext` returns (in place of the C library's own
/// return, whose call to its internal `setcontext` this library would not see): as the C
/// library does, `uc_link` (which `makecontext` left in the word RBX points to, and RBX is
/// callee-saved) is entered through [`setcontext`], and a NULL one ends the process with
/// `exit(0)`; a `setcontext` that fails ends it with `exit(-1)`.
#[unsafe(naked)]
unsafe extern "C" fn start_context() -> ! {
    core::arch::naked_asm!(
        "mov rsp, rbx",
        "mov rdi, qword ptr [rsp]",
        "test rdi, rdi",
        "je 2f",
        "call {setcontext}",
        "mov edi, eax",
        "2:",
        "call {exit}",
        "ud2",
        setcontext = sym setcontext,
        exit = sym libc::exit,
    )
}

/// The C library's `getcontext` where this library only forwards (the engine does not run),
/// else 0.
extern "C" fn forward_getcontext() -> usize {
    forward(&REAL_GETCONTEXT)
}

/// As [`forward_getcontext`], for `swapcontext`.
extern "C" fn forward_swapcontext() -> usize {
    forward(&REAL_SWAPCONTEXT)
}

/// The function in `real` (resolved on first use) where this library only forwards, else 0.
fn forward(real: &AtomicUsize) -> usize {
    if real.load(Ordering::Relaxed) == 0 {
        resolve();
    }
    if active() {
        0
    } else {
        real.load(Ordering::Relaxed)
    }
}

/// After the C library's `getcontext` filled `ucp` from inside [`getcontext`] or
/// [`swapcontext`]: the saved RIP and RSP become those of the caller's call (`entry` is the
/// stack pointer at the wrapper's entry, where the caller's return address is), and the mask
/// the program's (the C library stored the kernel's). Returns 0, `getcontext`'s result.
///
/// # Safety
/// `ucp` was just filled by the C library's `getcontext`; `entry` is the wrapper's entry stack
/// pointer.
unsafe extern "C" fn fixup(ucp: *mut libc::ucontext_t, entry: *const u64) -> libc::c_int {
    let at = ucp.cast::<u8>();
    // SAFETY: the C library just wrote the whole context, so it is writable; `entry` holds the
    // caller's return address.
    unsafe {
        at.add(greg(libc::REG_RIP))
            .cast::<u64>()
            .write_unaligned(entry.read());
        at.add(greg(libc::REG_RSP))
            .cast::<u64>()
            .write_unaligned(entry as u64 + 8);
        at.add(SIGMASK)
            .cast::<u64>()
            .write_unaligned(crate::sig::program_mask());
    }
    0
}

/// Before `ucp` is entered: 1 where this library only forwards; else its mask becomes the
/// thread's (signals the engine kept pending that it unblocks are raised, as the kernel
/// delivers them when the C library's call unblocks them) and 0, or -1 with `errno` EFAULT
/// where the mask cannot be read. A context fresh from `makecontext` gets [`start_context`] as
/// its function's return address.
extern "C" fn prepare_enter(ucp: *const libc::ucontext_t) -> libc::c_int {
    if REAL_SETCONTEXT.load(Ordering::Relaxed) == 0 {
        resolve();
    }
    if !active() {
        return 1;
    }
    let at = ucp as usize;
    let Some([mask]) = engine::preload::read_user::<1>(at.wrapping_add(SIGMASK)) else {
        crate::set_errno(libc::EFAULT);
        return -1;
    };
    if let Err(e) = crate::sig::change_mask(libc::SIG_SETMASK, Some(mask)) {
        crate::set_errno(e);
        return -1;
    }
    route_return(at);
    0
}

/// A context fresh from the C library's `makecontext`: its stack pointer points at the
/// library's return address for the function, and RBX at the `uc_link` word above it. That
/// return address becomes [`start_context`].
fn route_return(at: usize) {
    use engine::preload::{read_user, write_user};
    let library = LIBRARY_START.load(Ordering::Relaxed) as u64;
    if library == 0 {
        return;
    }
    let (Some([sp]), Some([rbx])) = (
        read_user::<1>(at.wrapping_add(greg(libc::REG_RSP))),
        read_user::<1>(at.wrapping_add(greg(libc::REG_RBX))),
    ) else {
        return;
    };
    // The C library's layout: the `uc_link` word a few words above the return address (past
    // the stack arguments beyond the sixth).
    if rbx <= sp || rbx - sp > 8 * 64 {
        return;
    }
    if read_user::<1>(sp as usize) == Some([library]) {
        write_user::<1>(sp as usize, &[start_context as *const () as u64]);
    }
}
