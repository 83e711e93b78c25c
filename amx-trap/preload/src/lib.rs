//! `libamx_trap_preload.so`: Intel AMX programs on x86-64 Linux CPUs without AMX, unmodified.
//!
//! ```sh
//! cargo build --release -p amx-trap-preload
//! LD_PRELOAD=$PWD/target/release/libamx_trap_preload.so ./my-amx-program
//! ```
//!
//! Loaded before the program, the library installs the `amx-trap` engine from an ELF
//! constructor, and stands between the program and the C library wherever the program could
//! otherwise get in the engine's way or see it:
//!
//! - **signal actions** (`sigaction`, `signal` and its System V and BSD forms, `sigset`,
//!   `sighold`, `sigrelse`, `sigignore`, `siginterrupt`, and `syscall(SYS_rt_sigaction)`):
//!   the engine keeps SIGILL, SIGSEGV, SIGBUS, SIGTRAP and SIGSYS, the program's actions for
//!   them are kept and honoured as the kernel would, and every other handler is entered by the
//!   engine, with the INIT tile state, as on the silicon;
//! - **signal masks** (`sigprocmask`, `pthread_sigmask`, `syscall(SYS_rt_sigprocmask)`,
//!   `sigblock`, `sigsetmask`, `siggetmask`, `sigsuspend`, `sigpending`, `ppoll`, `pselect`,
//!   `epoll_pwait`, `__sigsetjmp` and the `longjmp` family, `getcontext`, `setcontext`,
//!   `swapcontext` and the return of a `makecontext` function, threads, `posix_spawn`, `vfork`, `exec`): the kernel never blocks the
//!   engine's five signals, and the program sees and inherits the masks it set (a `vfork`
//!   child, which runs in its parent's memory, gets engine state of its own);
//! - **memory** (`mprotect`, `pkey_mprotect`, `munmap`, `mremap`, `madvise`, `mmap` over
//!   existing memory): the engine removes its patches from code before the program changes it;
//! - **the permission** (`arch_prctl` and `syscall(SYS_arch_prctl)`): `ARCH_REQ_XCOMP_PERM` and
//!   `ARCH_GET_XCOMP_PERM` are answered as Linux on an AMX CPU answers them;
//! - **signal stack sizes** (`getauxval(AT_MINSIGSTKSZ)`, `sysconf(_SC_MINSIGSTKSZ)` and
//!   `sysconf(_SC_SIGSTKSZ)`, `sigaltstack` and `syscall(SYS_sigaltstack)`): the smallest stack
//!   counts the tile state, and with the permission held a smaller alternate stack is refused,
//!   as Linux on an AMX CPU refuses it (`ENOMEM`, and `ENOSPC` for the permission request).
//!
//! Where the CPU has AMX itself, the library installs nothing and every interposed function
//! forwards to the C library. The engine's README says what the library promises and what it
//! cannot do.

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod bytes;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod jmp;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod mem;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod prctl;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod real;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod sig;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod spawn;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod stack;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod thread;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod ucontext;

/// Runs when the library is loaded (an ELF constructor in `.init_array`).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
extern "C" fn constructor() {
    start();
    // Here rather than in `start`, which a signal handler may run (`dladdr` takes the
    // loader's lock): ordinary context, once.
    if engine::is_active() {
        real::warn_if_interposed_after();
    }
}

/// Whether the library has started: 0 not yet, 1 starting, 2 done.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
static STARTED: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Finds the C library's functions and installs the engine, once: from the constructor, or
/// from the first interposed call that comes before it. The constructors of the libraries the
/// program links run before this library's (the loader runs a preload's last), and they may
/// ask for the AMX permission, run AMX instructions or start threads that block every signal,
/// as they would on the silicon. A call made while another thread starts the library (or from
/// a signal handler that interrupted the start) does not wait: it finds the engine as it is.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn start() {
    use std::sync::atomic::Ordering;
    if STARTED.load(Ordering::Acquire) != 0
        || STARTED
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        return;
    }
    real::resolve();
    spawn::resolve();
    jmp::resolve();
    ucontext::resolve();
    if engine::preload::install().is_ok() {
        stack::model();
    }
    STARTED.store(2, Ordering::Release);
}

/// The engine's hook, for the `amx-runtime` of the program this library is preloaded into.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static amx_trap_hook_v1: amx_runtime::engine::Hook = engine::HOOK;

/// Sets `errno`.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Whether the engine runs (and the interposed functions do more than forward); the first
/// call starts the library if its constructor has not run yet ([`start`]).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn active() -> bool {
    start();
    engine::is_active() && engine::preload::virtualized()
}
