//! The C library's own functions behind the interposed ones, found with
//! `dlsym(RTLD_NEXT, ..)` on first use (another library's constructor may call an interposed
//! function before this library's constructor ran).

use std::sync::atomic::{AtomicUsize, Ordering};

/// `sigaction`.
pub(crate) type Sigaction =
    unsafe extern "C" fn(libc::c_int, *const libc::sigaction, *mut libc::sigaction) -> libc::c_int;
/// `syscall`, with its six integer arguments (the x86-64 calling convention passes a variadic
/// call's integer arguments in the same registers).
pub(crate) type Syscall = unsafe extern "C" fn(
    libc::c_long,
    libc::c_long,
    libc::c_long,
    libc::c_long,
    libc::c_long,
    libc::c_long,
    libc::c_long,
) -> libc::c_long;
/// `arch_prctl`.
pub(crate) type ArchPrctl = unsafe extern "C" fn(libc::c_int, libc::c_ulong) -> libc::c_int;

static SIGACTION: AtomicUsize = AtomicUsize::new(0);
static SYSCALL: AtomicUsize = AtomicUsize::new(0);
static ARCH_PRCTL: AtomicUsize = AtomicUsize::new(0);

fn lookup(slot: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    let known = slot.load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only reads the loader's tables.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    slot.store(found, Ordering::Release);
    found
}

/// Resolves every function and hands `sigaction` to the engine.
pub(crate) fn resolve() {
    if let Some(f) = sigaction() {
        engine::preload::set_real_sigaction(f);
    }
    let _ = syscall();
    let _ = arch_prctl();
}

/// The C library's `sigaction`.
pub(crate) fn sigaction() -> Option<Sigaction> {
    let f = lookup(&SIGACTION, c"sigaction");
    // SAFETY: a non-null address dlsym returned for `sigaction` is that function.
    (f != 0).then(|| unsafe { std::mem::transmute::<usize, Sigaction>(f) })
}

/// The C library's `syscall`.
pub(crate) fn syscall() -> Option<Syscall> {
    let f = lookup(&SYSCALL, c"syscall");
    // SAFETY: as for `sigaction`.
    (f != 0).then(|| unsafe { std::mem::transmute::<usize, Syscall>(f) })
}

/// The C library's `arch_prctl` (older C libraries have none).
pub(crate) fn arch_prctl() -> Option<ArchPrctl> {
    let f = lookup(&ARCH_PRCTL, c"arch_prctl");
    // SAFETY: as for `sigaction`.
    (f != 0).then(|| unsafe { std::mem::transmute::<usize, ArchPrctl>(f) })
}
