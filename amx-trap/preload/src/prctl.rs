//! `syscall` and `arch_prctl`, interposed: the XSAVE permission requests answered as Linux on an
//! AMX CPU answers them while the engine is active; everything else forwarded.

use amx_runtime::permit::{ARCH_GET_XCOMP_PERM, ARCH_REQ_XCOMP_PERM};
use engine as trap;

use crate::real;

/// `ARCH_GET_XCOMP_SUPP`: the XSAVE features the kernel supports.
const ARCH_GET_XCOMP_SUPP: libc::c_long = 0x1021;

fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// The engine's answer to `arch_prctl(code, arg)`, or `None` to forward it. `kernel` makes the
/// real call (for the masks the answer builds on).
fn answer(
    code: libc::c_long,
    arg: libc::c_ulong,
    kernel: impl Fn() -> libc::c_long,
) -> Option<libc::c_long> {
    if !trap::is_active() {
        return None;
    }
    match code {
        c if c == libc::c_long::from(ARCH_REQ_XCOMP_PERM) => match trap::request_xcomp_perm(arg)? {
            Ok(()) => Some(0),
            Err(e) => {
                set_errno(e);
                Some(-1)
            }
        },
        c if c == libc::c_long::from(ARCH_GET_XCOMP_PERM) || c == ARCH_GET_XCOMP_SUPP => {
            let out = arg as *mut u64;
            if out.is_null() {
                set_errno(libc::EFAULT);
                return Some(-1);
            }
            // The kernel writes its own mask first (and reports a bad pointer itself).
            let rc = kernel();
            let mut mask = 0u64;
            let read = std::ptr::addr_of_mut!(mask);
            if rc == 0 {
                // SAFETY: the kernel just wrote 8 bytes at `out`, so they are writable memory
                // of the caller's; read and written back unaligned.
                unsafe { read.write(out.read_unaligned()) };
            } else if code != libc::c_long::from(ARCH_GET_XCOMP_PERM) {
                return Some(rc);
            }
            let answer = if code == ARCH_GET_XCOMP_SUPP {
                mask | 3 << 17
            } else {
                trap::xcomp_perm(mask)
            };
            // SAFETY: the caller passed `out` for the kernel to write a u64 to.
            unsafe { out.write_unaligned(answer) };
            Some(0)
        }
        _ => None,
    }
}

/// `syscall(number, ...)`: `SYS_arch_prctl` goes through [`answer`].
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
    let Some(real) = real::syscall() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: forwarded with the caller's arguments, as the caller's contract allows.
    let forward = || unsafe { real(number, a1, a2, a3, a4, a5, a6) };
    if number == libc::SYS_arch_prctl {
        if let Some(rc) = answer(a1, a2 as libc::c_ulong, forward) {
            return rc;
        }
    }
    forward()
}

/// `arch_prctl(code, addr)`, as [`syscall`] treats `SYS_arch_prctl`.
///
/// # Safety
/// As the C library's `arch_prctl`.
#[no_mangle]
pub unsafe extern "C" fn arch_prctl(code: libc::c_int, addr: libc::c_ulong) -> libc::c_int {
    let forward = || -> libc::c_long {
        match real::arch_prctl() {
            // SAFETY: forwarded with the caller's arguments.
            Some(f) => libc::c_long::from(unsafe { f(code, addr) }),
            // SAFETY: the same request as a system call.
            None => unsafe { libc::syscall(libc::SYS_arch_prctl, libc::c_long::from(code), addr) },
        }
    };
    answer(libc::c_long::from(code), addr, forward).unwrap_or_else(forward) as libc::c_int
}
