//! Alternate signal stacks sized as on an AMX CPU: `getauxval(AT_MINSIGSTKSZ)` and
//! `sysconf(_SC_MINSIGSTKSZ)`/`sysconf(_SC_SIGSTKSZ)` (and the C library's other names of both,
//! `__getauxval` and `__sysconf`) count the tile state the engine's frames carry, and `sigaltstack` refuses, once the permission is held, a stack that frame does not
//! fit (the engine's `sigstack` module has the rules).

use crate::set_errno;

/// `AT_MINSIGSTKSZ`: the kernel's smallest signal stack.
const AT_MINSIGSTKSZ: libc::c_ulong = 51;
/// glibc's `_SC_MINSIGSTKSZ` and `_SC_SIGSTKSZ`.
const SC_MINSIGSTKSZ: libc::c_int = 249;
const SC_SIGSTKSZ: libc::c_int = 250;
/// glibc's constant `MINSIGSTKSZ` and `SIGSTKSZ`, the floors of its `sysconf` answers.
const MINSIGSTKSZ: libc::c_long = 2048;
const SIGSTKSZ: libc::c_long = 8192;

/// Starts modelling the silicon's sizes (the engine is installed): the host's smallest stack
/// as the kernel tells it, else as the C library computes it (a kernel without
/// `AT_MINSIGSTKSZ`).
pub(crate) fn model() {
    // SAFETY: the C library's getauxval reads the auxiliary vector; no memory is passed.
    let auxv = crate::real::getauxval().map_or(0, |f| unsafe { f(AT_MINSIGSTKSZ) });
    // SAFETY: the C library's sysconf with a valid name.
    let libc_min = crate::real::sysconf().map_or(0, |f| unsafe { f(SC_MINSIGSTKSZ) });
    let host = if auxv != 0 {
        auxv as usize
    } else {
        usize::try_from(libc_min).unwrap_or(0)
    };
    engine::preload::model_signal_stacks(host);
}

/// `getauxval(3)`.
///
/// # Safety
/// As the C library's `getauxval`.
#[no_mangle]
pub unsafe extern "C" fn getauxval(kind: libc::c_ulong) -> libc::c_ulong {
    let Some(real) = crate::real::getauxval() else {
        set_errno(libc::ENOENT);
        return 0;
    };
    // SAFETY: forwarded.
    let value = unsafe { real(kind) };
    match engine::preload::signal_stack_minimum() {
        Some(min) if kind == AT_MINSIGSTKSZ && value != 0 => min as libc::c_ulong,
        _ => value,
    }
}

/// The C library's other name of `getauxval`, which libraries call in its place.
///
/// # Safety
/// As the C library's `__getauxval`.
#[no_mangle]
pub unsafe extern "C" fn __getauxval(kind: libc::c_ulong) -> libc::c_ulong {
    // SAFETY: the same contract.
    unsafe { getauxval(kind) }
}

/// `sysconf(3)`.
///
/// # Safety
/// As the C library's `sysconf`.
#[no_mangle]
pub unsafe extern "C" fn sysconf(name: libc::c_int) -> libc::c_long {
    let Some(real) = crate::real::sysconf() else {
        set_errno(libc::EINVAL);
        return -1;
    };
    // SAFETY: forwarded.
    let value = unsafe { real(name) };
    let Some(min) = engine::preload::signal_stack_minimum() else {
        return value;
    };
    let min = libc::c_long::try_from(min).unwrap_or(libc::c_long::MAX);
    match name {
        SC_MINSIGSTKSZ if value > 0 => min,
        // The C library's rule: four times the smallest, at least its constant SIGSTKSZ.
        SC_SIGSTKSZ if value > 0 => min.max(MINSIGSTKSZ).saturating_mul(4).max(SIGSTKSZ),
        _ => value,
    }
}

/// The C library's other name of `sysconf`, which libraries call in its place.
///
/// # Safety
/// As the C library's `__sysconf`.
#[no_mangle]
pub unsafe extern "C" fn __sysconf(name: libc::c_int) -> libc::c_long {
    // SAFETY: the same contract.
    unsafe { sysconf(name) }
}

/// `sigaltstack(2)`.
///
/// # Safety
/// As the C library's `sigaltstack`.
#[no_mangle]
pub unsafe extern "C" fn sigaltstack(
    new: *const libc::stack_t,
    old: *mut libc::stack_t,
) -> libc::c_int {
    let Some(real) = crate::real::sigaltstack() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: forwarded.
    let apply = || unsafe { real(new, old) } == 0;
    if new.is_null() {
        return if apply() { 0 } else { -1 };
    }
    change(apply)
}

/// A `sigaltstack` call with a new stack, made by `apply` (`true` on success, else `errno`
/// set), under the engine's rules: 0, or -1 with `errno`.
pub(crate) fn change(apply: impl FnOnce() -> bool) -> libc::c_int {
    match engine::preload::change_signal_stack(apply) {
        Ok(()) => 0,
        Err(None) => -1,
        Err(Some(e)) => {
            set_errno(e);
            -1
        }
    }
}
