//! `syscall` and `arch_prctl`, interposed: the XSAVE permission requests answered as Linux on an
//! AMX CPU answers them while the engine is active, the signal system calls kept in front of the
//! engine as their C library functions are; everything else forwarded.

use amx_runtime::permit::{ARCH_GET_XCOMP_PERM, ARCH_REQ_XCOMP_PERM};
use engine::preload::{self as trap, Action};

use crate::{active, set_errno, sig};

/// `ARCH_GET_XCOMP_SUPP`: the XSAVE features the kernel supports.
const ARCH_GET_XCOMP_SUPP: libc::c_long = 0x1021;

/// The engine's answer to `arch_prctl(code, arg)`, or `None` to forward it. `kernel` makes the
/// real call (for the masks the answer builds on).
fn answer(
    code: libc::c_long,
    arg: libc::c_ulong,
    kernel: impl Fn() -> libc::c_long,
) -> Option<libc::c_long> {
    crate::start();
    if !engine::is_active() {
        return None;
    }
    // The kernel reads the option as an int.
    let code = libc::c_long::from(code as i32);
    match code {
        c if c == libc::c_long::from(ARCH_REQ_XCOMP_PERM) => {
            match engine::request_xcomp_perm(arg)? {
                Ok(()) => Some(0),
                Err(e) => {
                    set_errno(e);
                    Some(-1)
                }
            }
        }
        c if c == libc::c_long::from(ARCH_GET_XCOMP_PERM) || c == ARCH_GET_XCOMP_SUPP => {
            let out = arg as *mut u64;
            // The kernel writes its own mask first, and reports a bad pointer itself.
            let mut mask = 0u64;
            if kernel() == 0 {
                // SAFETY: the kernel just wrote 8 bytes at `out`, so they are writable memory
                // of the caller's.
                mask = unsafe { out.read_unaligned() };
            } else {
                // SAFETY: reads this thread's errno.
                let refused = unsafe { *libc::__errno_location() };
                if refused == libc::EFAULT {
                    return Some(-1);
                }
                // A kernel without the request (before Linux 5.16): the pointer is checked by
                // a call every kernel has that writes 8 bytes there, the pending signals.
                // SAFETY: rt_sigpending writes 8 bytes at `out` or fails with EFAULT.
                let probe = unsafe { engine::sys::call(libc::SYS_rt_sigpending, &[arg, 8]) };
                if probe != 0 {
                    set_errno(libc::EFAULT);
                    return Some(-1);
                }
            }
            let answer = if code == ARCH_GET_XCOMP_SUPP {
                engine::xcomp_supp(mask)
            } else {
                engine::xcomp_perm(mask)
            };
            // SAFETY: the kernel wrote 8 bytes at `out` just now, or accepted it for 8.
            unsafe { out.write_unaligned(answer) };
            Some(0)
        }
        _ => None,
    }
}

/// The result convention of `syscall`: the value, or -1 with errno.
fn result(r: Result<libc::c_long, i32>) -> libc::c_long {
    r.unwrap_or_else(|e| {
        set_errno(e);
        -1
    })
}

/// The kernel's `struct sigaction`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct KAction {
    handler: u64,
    flags: u64,
    restorer: u64,
    mask: u64,
}

/// `rt_sigaction` on the program's actions.
fn rt_sigaction(
    sig: libc::c_long,
    act: *const KAction,
    old: *mut KAction,
    size: libc::c_long,
    forward: impl FnOnce() -> libc::c_long,
) -> Result<libc::c_long, i32> {
    if size != 8 {
        return Err(libc::EINVAL);
    }
    let sig = i32::try_from(sig).map_err(|_| libc::EINVAL)?;
    // The kernel's layout: handler, flags, restorer, mask. A pointer it cannot read: EFAULT.
    let new = match act.is_null() {
        true => None,
        false => {
            let [handler, flags, restorer, mask] =
                trap::read_user::<4>(act as usize).ok_or(libc::EFAULT)?;
            Some(Action {
                handler: handler as usize,
                flags,
                mask,
                restorer: restorer as usize,
            })
        }
    };
    let before = sig::set_action(sig, new.as_ref(), || {
        if forward() == 0 {
            Ok(())
        } else {
            // SAFETY: __errno_location returns this thread's errno slot.
            Err(unsafe { *libc::__errno_location() })
        }
    })?;
    let words = [
        before.handler as u64,
        before.flags,
        before.restorer as u64,
        before.mask,
    ];
    if !old.is_null() && !trap::write_user(old as usize, &words) {
        return Err(libc::EFAULT);
    }
    Ok(0)
}

/// `rt_sigprocmask` on the program's mask.
fn rt_sigprocmask(
    how: libc::c_long,
    set: *const u64,
    old: *mut u64,
    size: libc::c_long,
) -> Result<libc::c_long, i32> {
    if size != 8 {
        return Err(libc::EINVAL);
    }
    let how = i32::try_from(how).map_err(|_| libc::EINVAL)?;
    // Masks the kernel cannot read or write: EFAULT (the new one before any change, the old
    // one after it, as the kernel orders them).
    let set = match set.is_null() {
        true => None,
        false => Some(trap::read_user::<1>(set as usize).ok_or(libc::EFAULT)?[0]),
    };
    let before = sig::change_mask(how, set)?;
    if !old.is_null() && !trap::write_user(old as usize, &[before]) {
        return Err(libc::EFAULT);
    }
    Ok(0)
}

/// `syscall(number, ...)`: the signal and `arch_prctl` requests through the engine.
///
/// # Safety
/// As the C library's `syscall`.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    number: libc::c_long,
    a1: libc::c_long,
    a2: libc::c_long,
    a3: libc::c_long,
    a4: libc::c_long,
    a5: libc::c_long,
    a6: libc::c_long,
) -> libc::c_long {
    let Some(real) = crate::real::syscall() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: forwarded with the caller's arguments, as the caller's contract allows.
    let forward = || unsafe { real(number, a1, a2, a3, a4, a5, a6) };
    if number == libc::SYS_arch_prctl {
        if let Some(rc) = answer(a1, a2 as libc::c_ulong, forward) {
            return rc;
        }
        return forward();
    }
    if !active() {
        return forward();
    }
    match number {
        libc::SYS_rt_sigaction => result(rt_sigaction(
            a1,
            a2 as *const KAction,
            a3 as *mut KAction,
            a4,
            forward,
        )),
        libc::SYS_rt_sigprocmask => {
            result(rt_sigprocmask(a1, a2 as *const u64, a3 as *mut u64, a4))
        }
        libc::SYS_sigaltstack if a1 != 0 => {
            libc::c_long::from(crate::stack::change(|| forward() == 0))
        }
        libc::SYS_rt_sigpending => {
            let rc = forward();
            if rc == 0 && a1 != 0 && a2 == 8 {
                let out = a1 as *mut u64;
                // SAFETY: the kernel just wrote the 8-byte set there.
                unsafe { out.write_unaligned(out.read_unaligned() | trap::pending()) };
            }
            rc
        }
        libc::SYS_rt_sigsuspend if a2 == 8 && a1 != 0 => {
            // SAFETY: the caller passes a readable 8-byte mask.
            let wanted = unsafe { (a1 as *const u64).read_unaligned() };
            libc::c_long::from(sig::suspend(wanted, |real_mask| {
                // SAFETY: the system call with our copy of the mask.
                unsafe {
                    real(
                        number,
                        &real_mask as *const u64 as libc::c_long,
                        8,
                        0,
                        0,
                        0,
                        0,
                    ) as i32
                }
            }))
        }
        _ => forward(),
    }
}

/// `arch_prctl(code, addr)`, as [`syscall`] treats `SYS_arch_prctl`.
///
/// # Safety
/// As the C library's `arch_prctl`.
#[no_mangle]
pub unsafe extern "C" fn arch_prctl(code: libc::c_int, addr: libc::c_ulong) -> libc::c_int {
    let forward = || -> libc::c_long {
        match crate::real::arch_prctl() {
            // SAFETY: forwarded with the caller's arguments.
            Some(f) => libc::c_long::from(unsafe { f(code, addr) }),
            None => {
                // SAFETY: the same request as a system call.
                let rc = unsafe { engine::sys::call(libc::SYS_arch_prctl, &[code as u64, addr]) };
                match engine::sys::check(rc) {
                    Ok(v) => v as libc::c_long,
                    Err(e) => {
                        set_errno(e);
                        -1
                    }
                }
            }
        }
    };
    answer(libc::c_long::from(code), addr, forward).unwrap_or_else(forward) as libc::c_int
}
