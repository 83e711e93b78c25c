//! `sigaction`, `signal`, `bsd_signal` and `sigset`, interposed.
//!
//! For SIGILL and SIGSEGV, which the engine occupies, the program's action is recorded with the
//! engine (which delivers to it as the kernel would) and the kernel's table keeps the engine's
//! handler; `sigaction` reports the program's own action back. For every other signal a
//! program handler is installed behind a trampoline that gives it the INIT tile state and brings
//! the interrupted state back when it returns, as Linux does on the silicon.
//!
//! While the engine is inactive (a CPU with AMX) everything is forwarded.

use std::sync::atomic::{AtomicBool, Ordering};

use engine::{self as trap, preload};

use crate::real;

/// Signals whose kernel action is the trampoline.
static WRAPPED: [AtomicBool; 65] = [const { AtomicBool::new(false) }; 65];

fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Runs a wrapped program handler.
extern "C" fn trampoline(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    let action = preload::program_action(sig);
    if action.flags & libc::SA_RESETHAND != 0 {
        // The kernel reset its action when it delivered this signal.
        if let Some(w) = WRAPPED.get(sig as usize) {
            w.store(false, Ordering::Release);
        }
    }
    if matches!(action.handler, libc::SIG_DFL | libc::SIG_IGN) {
        return;
    }
    let here = 0u8;
    preload::enter_handler(&here as *const u8 as u64);
    // SAFETY: the program installed this handler for `sig` with these flags; it gets what the
    // kernel passed.
    unsafe {
        if action.flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute::<usize, _>(action.handler);
            f(sig, info, uc);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute::<usize, _>(action.handler);
            f(sig);
        }
    }
    preload::leave_handler();
}

/// Whether the trampoline may stand in for `sig`'s handler.
fn wrappable(sig: libc::c_int) -> bool {
    (1..=64).contains(&sig) && sig != libc::SIGKILL && sig != libc::SIGSTOP
}

/// `sigaction(2)`.
///
/// # Safety
/// As the C library's `sigaction`.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    let Some(real) = real::sigaction() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    if !trap::is_active() || !wrappable(sig) {
        // SAFETY: forwarded.
        return unsafe { real(sig, act, old) };
    }
    // SAFETY: the caller passes null or a valid sigaction.
    let new = unsafe { act.as_ref() }.map(preload::Action::from_c);
    if preload::engine_handler(sig).is_some() {
        let previous = preload::program_action(sig);
        if let Some(new) = new {
            preload::record(sig, new);
        }
        // SAFETY: the caller passes null or a writable sigaction.
        if let Some(old) = unsafe { old.as_mut() } {
            *old = previous.to_c();
        }
        return 0;
    }
    let wrapped = &WRAPPED[sig as usize];
    let previous = wrapped
        .load(Ordering::Acquire)
        .then(|| preload::program_action(sig));
    let rc = match new {
        Some(new) if !matches!(new.handler, libc::SIG_DFL | libc::SIG_IGN) => {
            preload::record(sig, new);
            let mut ours = new;
            ours.handler = trampoline as *const () as usize;
            ours.flags |= libc::SA_SIGINFO;
            let c = ours.to_c();
            wrapped.store(true, Ordering::Release);
            // SAFETY: `c` is a valid sigaction; the old action is read below if needed.
            unsafe {
                real(
                    sig,
                    &c,
                    if previous.is_none() {
                        old
                    } else {
                        std::ptr::null_mut()
                    },
                )
            }
        }
        Some(_) => {
            wrapped.store(false, Ordering::Release);
            // SAFETY: forwarded.
            unsafe {
                real(
                    sig,
                    act,
                    if previous.is_none() {
                        old
                    } else {
                        std::ptr::null_mut()
                    },
                )
            }
        }
        None if previous.is_none() => {
            // SAFETY: forwarded (a query).
            unsafe { real(sig, act, old) }
        }
        None => 0,
    };
    // SAFETY: the caller passes null or a writable sigaction.
    if let (Some(previous), Some(old)) = (previous, unsafe { old.as_mut() }) {
        *old = previous.to_c();
    }
    rc
}

/// `signal(3)` with glibc's BSD semantics (`SA_RESTART`, the handler stays installed).
///
/// # Safety
/// As the C library's `signal`.
#[no_mangle]
pub unsafe extern "C" fn signal(
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    // SAFETY: an all-zero sigaction is a valid value of this plain C struct.
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    new.sa_sigaction = handler;
    new.sa_flags = libc::SA_RESTART;
    // SAFETY: an all-zero sigaction is valid; it receives the old action.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `sigemptyset` writes the mask of `new`; both pointers are live sigactions.
    unsafe {
        libc::sigemptyset(&mut new.sa_mask);
        libc::sigaddset(&mut new.sa_mask, sig);
        if sigaction(sig, &new, &mut old) != 0 {
            return libc::SIG_ERR;
        }
    }
    old.sa_sigaction
}

/// `bsd_signal(3)`: [`signal`].
///
/// # Safety
/// As the C library's `bsd_signal`.
#[no_mangle]
pub unsafe extern "C" fn bsd_signal(
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    // SAFETY: forwarded.
    unsafe { signal(sig, handler) }
}

/// `SIG_HOLD`: `sigset`'s "block the signal" disposition.
const SIG_HOLD: libc::sighandler_t = 2;

/// `sigset(3)` (System V): installs `disp` and unblocks `sig`, or with `SIG_HOLD` blocks it;
/// returns `SIG_HOLD` when `sig` was blocked, else the previous disposition.
///
/// # Safety
/// As the C library's `sigset`.
#[no_mangle]
pub unsafe extern "C" fn sigset(sig: libc::c_int, disp: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: all-zero sigset_t and sigaction values are valid plain C structs.
    let (mut set, mut was, mut old): (libc::sigset_t, libc::sigset_t, libc::sigaction) =
        unsafe { std::mem::zeroed() };
    // SAFETY: every pointer is to a live local of the right type.
    unsafe {
        libc::sigemptyset(&mut set);
        if libc::sigaddset(&mut set, sig) != 0 {
            return libc::SIG_ERR;
        }
        if disp == SIG_HOLD {
            if sigaction(sig, std::ptr::null(), &mut old) != 0
                || libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut was) != 0
            {
                return libc::SIG_ERR;
            }
        } else {
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = disp;
            libc::sigemptyset(&mut new.sa_mask);
            if sigaction(sig, &new, &mut old) != 0
                || libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, &mut was) != 0
            {
                return libc::SIG_ERR;
            }
        }
        if libc::sigismember(&was, sig) == 1 {
            SIG_HOLD
        } else {
            old.sa_sigaction
        }
    }
}
