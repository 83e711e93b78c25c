//! The program's signal actions and masks, through the engine.
//!
//! Actions: every way the C library offers to install one ends in [`set_action`]: the engine
//! keeps the program's action for its own signals and for handlers (entering the handler
//! itself), and passes `SIG_DFL` and `SIG_IGN` of other signals to the kernel. Queries report
//! the program's actions, as it set them.
//!
//! Masks: every way to change one ends in [`change_mask`]: the program's mask is recorded, the
//! kernel gets it without the engine's five signals, and signals of those the engine kept
//! pending while the program blocked them are raised when it unblocks them.

use engine::preload::{self as trap, Action};

use crate::{active, set_errno};

/// The first 64 signals of a C library `sigset_t` (the kernel's).
pub(crate) fn bits(set: &libc::sigset_t) -> u64 {
    // SAFETY: the C library's sigset_t is 128 bytes, its first 8 the kernel's mask.
    unsafe {
        (set as *const libc::sigset_t)
            .cast::<u64>()
            .read_unaligned()
    }
}

/// A `sigset_t` of the first 64 signals `mask`.
pub(crate) fn set_of(mask: u64) -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is the empty set.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as in `bits`; `set` is a live local.
    unsafe {
        (&mut set as *mut libc::sigset_t)
            .cast::<u64>()
            .write_unaligned(mask)
    };
    set
}

/// Writes the first 64 signals of `out` (the rest is left as is, as the kernel leaves it);
/// `Err(EFAULT)` where `out` cannot be written.
fn write_bits(out: *mut libc::sigset_t, mask: u64) -> Result<(), i32> {
    if trap::write_user(out as usize, &[mask]) {
        Ok(())
    } else {
        Err(libc::EFAULT)
    }
}

/// The first 64 signals of the program's `set` (null: none); `Err(EFAULT)` where it cannot be
/// read, as the kernel's `copy_from_user`.
fn read_bits(set: *const libc::sigset_t) -> Result<Option<u64>, i32> {
    if set.is_null() {
        return Ok(None);
    }
    match trap::read_user::<1>(set as usize) {
        Some([bits]) => Ok(Some(bits)),
        None => Err(libc::EFAULT),
    }
}

/// `sigprocmask` on the program's mask through the C library's pointers: the new set read as
/// the C library reads it, itself (a fault there is the program's, as without the library),
/// the old one written as the kernel writes it for the C library (`EFAULT`, after the change).
fn mask_through(how: i32, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> Result<(), i32> {
    // SAFETY: the caller passes null or a valid sigset_t, as the C library's contract says;
    // the C library reads it the same way.
    let set = unsafe { set.as_ref() }.map(|s| bits(s) & !INTERNAL);
    let before = change_mask(how, set)?;
    if !old.is_null() {
        write_bits(old, before)?;
    }
    Ok(())
}

const SA_RESTORER: i32 = 0x0400_0000;

fn from_c(sa: &libc::sigaction) -> Action {
    Action {
        handler: sa.sa_sigaction,
        // The kernel keeps the C library's restorer; so do the engine's records.
        flags: (sa.sa_flags | SA_RESTORER) as u32 as u64,
        mask: bits(&sa.sa_mask),
        restorer: sa.sa_restorer.map_or(0, |f| f as usize),
    }
}

fn to_c(a: &Action) -> libc::sigaction {
    // SAFETY: an all-zero sigaction is a valid value of this plain C struct.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = a.handler;
    sa.sa_flags = a.flags as i32;
    sa.sa_mask = set_of(a.mask);
    // SAFETY: a restorer is a C function address or 0 (None).
    sa.sa_restorer = unsafe { std::mem::transmute::<usize, Option<extern "C" fn()>>(a.restorer) };
    sa
}

/// Installs `new` (if any) as the program's action for `sig`, through the engine; the action
/// before. `forward` installs it in the kernel, for the signals the engine leaves there.
pub(crate) fn set_action(
    sig: i32,
    new: Option<&Action>,
    forward: impl FnOnce() -> Result<(), i32>,
) -> Result<Action, i32> {
    trap::set_program_action(sig, new, true, forward)
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
    let Some(real) = crate::real::sigaction() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // The C library's own signals (cancellation, set*id) are its to refuse.
    if !active() || internal(sig) {
        // SAFETY: forwarded.
        return unsafe { real(sig, act, old) };
    }
    // SAFETY: the caller passes null or a valid sigaction.
    let new = unsafe { act.as_ref() }.map(from_c);
    let forward = || {
        // SAFETY: the caller's action, forwarded as is.
        if unsafe { real(sig, act, std::ptr::null_mut()) } == 0 {
            Ok(())
        } else {
            // SAFETY: __errno_location returns this thread's errno slot.
            Err(unsafe { *libc::__errno_location() })
        }
    };
    match set_action(sig, new.as_ref(), forward) {
        Ok(before) => {
            // SAFETY: the caller passes null or a writable sigaction.
            if let Some(old) = unsafe { old.as_mut() } {
                *old = to_c(&before);
            }
            0
        }
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// `sigaction` with a handler, flags and a mask; the handler before, or `SIG_ERR`.
fn install(sig: i32, handler: libc::sighandler_t, flags: i32, mask: u64) -> libc::sighandler_t {
    // SAFETY: an all-zero sigaction is valid.
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    new.sa_sigaction = handler;
    new.sa_flags = flags;
    new.sa_mask = set_of(mask);
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both are live sigactions.
    if unsafe { sigaction(sig, &new, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// The C library's own signals: SIGCANCEL (32) and SIGSETXID (33), which its `sigaction`
/// refuses and its mask functions never block.
fn internal(sig: i32) -> bool {
    sig == 32 || sig == 33
}

const INTERNAL: u64 = (1 << 31) | (1 << 32);

/// Signals `siginterrupt` made interrupting (no `SA_RESTART` for `signal`).
static INTERRUPTING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn bit(sig: i32) -> u64 {
    if (1..=64).contains(&sig) {
        1 << (sig - 1)
    } else {
        0
    }
}

/// `signal(3)` with the C library's BSD semantics: the handler stays, the signal is blocked in
/// it, system calls restart unless `siginterrupt` said otherwise.
///
/// # Safety
/// As the C library's `signal`.
#[no_mangle]
pub unsafe extern "C" fn signal(
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    let interrupting = INTERRUPTING.load(std::sync::atomic::Ordering::Relaxed) & bit(sig) != 0;
    let flags = if interrupting { 0 } else { libc::SA_RESTART };
    if !(1..=64).contains(&sig) {
        set_errno(libc::EINVAL);
        return libc::SIG_ERR;
    }
    install(sig, handler, flags, bit(sig))
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

/// `__sysv_signal`, which `signal` is in strict ISO C (`-std=c11`): System V semantics, the
/// action reset on delivery and the signal not blocked in its handler.
///
/// # Safety
/// As the C library's `__sysv_signal`.
#[no_mangle]
pub unsafe extern "C" fn __sysv_signal(
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    if !(1..=64).contains(&sig) {
        set_errno(libc::EINVAL);
        return libc::SIG_ERR;
    }
    install(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER, 0)
}

/// `siginterrupt(3)`.
///
/// # Safety
/// As the C library's `siginterrupt`.
#[no_mangle]
pub unsafe extern "C" fn siginterrupt(sig: libc::c_int, flag: libc::c_int) -> libc::c_int {
    if bit(sig) == 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: an all-zero sigaction is valid.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `action` is a live sigaction.
    if unsafe { sigaction(sig, std::ptr::null(), &mut action) } != 0 {
        return -1;
    }
    if flag != 0 {
        INTERRUPTING.fetch_or(bit(sig), std::sync::atomic::Ordering::Relaxed);
        action.sa_flags &= !libc::SA_RESTART;
    } else {
        INTERRUPTING.fetch_and(!bit(sig), std::sync::atomic::Ordering::Relaxed);
        action.sa_flags |= libc::SA_RESTART;
    }
    // SAFETY: as above.
    unsafe { sigaction(sig, &action, std::ptr::null_mut()) }
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
    if bit(sig) == 0 {
        set_errno(libc::EINVAL);
        return libc::SIG_ERR;
    }
    let Ok(was) = (if disp == SIG_HOLD {
        change_mask(libc::SIG_BLOCK, Some(bit(sig)))
    } else {
        Ok(0)
    }) else {
        return libc::SIG_ERR;
    };
    if disp == SIG_HOLD {
        if was & bit(sig) != 0 {
            return SIG_HOLD;
        }
        // SAFETY: an all-zero sigaction is valid; a query.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: `old` is a live sigaction.
        if unsafe { sigaction(sig, std::ptr::null(), &mut old) } != 0 {
            return libc::SIG_ERR;
        }
        return old.sa_sigaction;
    }
    let old = install(sig, disp, 0, 0);
    if old == libc::SIG_ERR {
        return old;
    }
    match change_mask(libc::SIG_UNBLOCK, Some(bit(sig))) {
        Ok(was) if was & bit(sig) != 0 => SIG_HOLD,
        Ok(_) => old,
        Err(_) => libc::SIG_ERR,
    }
}

/// `sighold(3)`.
///
/// # Safety
/// As the C library's `sighold`.
#[no_mangle]
pub unsafe extern "C" fn sighold(sig: libc::c_int) -> libc::c_int {
    mask_call(libc::SIG_BLOCK, sig)
}

/// `sigrelse(3)`.
///
/// # Safety
/// As the C library's `sigrelse`.
#[no_mangle]
pub unsafe extern "C" fn sigrelse(sig: libc::c_int) -> libc::c_int {
    mask_call(libc::SIG_UNBLOCK, sig)
}

fn mask_call(how: i32, sig: i32) -> i32 {
    if bit(sig) == 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    match change_mask(how, Some(bit(sig))) {
        Ok(_) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// `sigignore(3)`.
///
/// # Safety
/// As the C library's `sigignore`.
#[no_mangle]
pub unsafe extern "C" fn sigignore(sig: libc::c_int) -> libc::c_int {
    if bit(sig) == 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    if install(sig, libc::SIG_IGN, 0, 0) == libc::SIG_ERR {
        -1
    } else {
        0
    }
}

/// The BSD mask calls (`sigblock`, `sigsetmask`, `siggetmask`) as the C library defines them:
/// signals 1 to 32 as an int, the call `sigprocmask` with that set (the others cleared), the
/// int of the mask before. The C library makes them with its internal `sigprocmask`, which
/// the library does not see: without these, the program's view of the engine's signals would
/// not follow them (a shell's child, which unblocks everything with `sigsetmask(0)`, would
/// keep SIGSEGV and the others blocked).
fn bsd_mask(how: i32, mask: libc::c_int) -> libc::c_int {
    match change_mask(how, Some(u64::from(mask as u32) & !INTERNAL)) {
        Ok(before) => before as u32 as libc::c_int,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// `sigblock(3)`.
///
/// # Safety
/// As the C library's `sigblock`.
#[no_mangle]
pub unsafe extern "C" fn sigblock(mask: libc::c_int) -> libc::c_int {
    match (active(), crate::real::sigblock()) {
        // SAFETY: forwarded.
        (false, Some(real)) => unsafe { real(mask) },
        _ => bsd_mask(libc::SIG_BLOCK, mask),
    }
}

/// `sigsetmask(3)`.
///
/// # Safety
/// As the C library's `sigsetmask`.
#[no_mangle]
pub unsafe extern "C" fn sigsetmask(mask: libc::c_int) -> libc::c_int {
    match (active(), crate::real::sigsetmask()) {
        // SAFETY: forwarded.
        (false, Some(real)) => unsafe { real(mask) },
        _ => bsd_mask(libc::SIG_SETMASK, mask),
    }
}

/// `siggetmask(3)`.
///
/// # Safety
/// As the C library's `siggetmask`.
#[no_mangle]
pub unsafe extern "C" fn siggetmask() -> libc::c_int {
    match (active(), crate::real::siggetmask()) {
        // SAFETY: forwarded.
        (false, Some(real)) => unsafe { real() },
        _ => bsd_mask(libc::SIG_BLOCK, 0),
    }
}

/// The kernel's mask of this thread.
fn real_mask() -> u64 {
    engine::sys::program_sigprocmask(libc::SIG_BLOCK, None)
}

fn set_real_mask(mask: u64) {
    engine::sys::program_sigprocmask(libc::SIG_SETMASK, Some(mask));
}

/// This thread's mask as the program set it.
pub(crate) fn program_mask() -> u64 {
    trap::program_mask(real_mask())
}

/// Makes `mask` this thread's mask (the program's view, the kernel's without the engine's
/// signals), and raises what the engine kept pending that it unblocks.
pub(crate) fn set_program_mask(mask: u64) {
    let unblockable = bit(libc::SIGKILL) | bit(libc::SIGSTOP);
    set_real_mask(trap::set_program_view(mask & !unblockable));
    trap::release_pending();
}

/// `sigprocmask` on the program's mask: the mask before.
pub(crate) fn change_mask(how: i32, set: Option<u64>) -> Result<u64, i32> {
    let before = program_mask();
    if let Some(set) = set {
        let after = match how {
            libc::SIG_BLOCK => before | set,
            libc::SIG_UNBLOCK => before & !set,
            libc::SIG_SETMASK => set,
            _ => return Err(libc::EINVAL),
        };
        set_program_mask(after);
    }
    Ok(before)
}

/// `sigprocmask(2)`.
///
/// # Safety
/// As the C library's `sigprocmask`.
#[no_mangle]
pub unsafe extern "C" fn sigprocmask(
    how: libc::c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> libc::c_int {
    if !active() {
        return match crate::real::sigprocmask() {
            // SAFETY: forwarded.
            Some(real) => unsafe { real(how, set, old) },
            None => {
                set_errno(libc::ENOSYS);
                -1
            }
        };
    }
    match mask_through(how, set, old) {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// `pthread_sigmask(3)`: as [`sigprocmask`], the error returned.
///
/// # Safety
/// As the C library's `pthread_sigmask`.
#[no_mangle]
pub unsafe extern "C" fn pthread_sigmask(
    how: libc::c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> libc::c_int {
    if !active() {
        return match crate::real::pthread_sigmask() {
            // SAFETY: forwarded.
            Some(real) => unsafe { real(how, set, old) },
            None => libc::ENOSYS,
        };
    }
    match mask_through(how, set, old) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// `sigpending(2)`: the kernel's pending signals and the engine's.
///
/// # Safety
/// As the C library's `sigpending`.
#[no_mangle]
pub unsafe extern "C" fn sigpending(set: *mut libc::sigset_t) -> libc::c_int {
    let Some(real) = crate::real::sigpending() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: forwarded.
    let rc = unsafe { real(set) };
    if rc == 0 && active() && !set.is_null() {
        // SAFETY: the kernel just wrote the set.
        let now = bits(unsafe { &*set });
        // The kernel wrote these 8 bytes just now: writable.
        let _ = write_bits(set, now | trap::pending());
    }
    rc
}

/// `sigsuspend(2)` on the program's mask.
///
/// # Safety
/// As the C library's `sigsuspend`.
#[no_mangle]
pub unsafe extern "C" fn sigsuspend(mask: *const libc::sigset_t) -> libc::c_int {
    let Some(real) = crate::real::sigsuspend() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: the caller passes a valid sigset_t (a null one faults in the C library too).
    let Some(wanted) = (unsafe { mask.as_ref() }).map(bits) else {
        // SAFETY: forwarded, to fail as it would.
        return unsafe { real(mask) };
    };
    if !active() {
        // SAFETY: forwarded.
        return unsafe { real(mask) };
    }
    suspend(wanted, |m| {
        // SAFETY: a valid sigset_t.
        unsafe { real(&set_of(m)) }
    })
}

/// Waits with the program's mask `wanted`, as `sigsuspend`: `wait` gets the kernel's mask. A
/// signal the engine kept pending that `wanted` unblocks is delivered first, and ends the wait.
pub(crate) fn suspend(wanted: u64, wait: impl FnOnce(u64) -> i32) -> i32 {
    if trap::pending() & !wanted & trap::ENGINE != 0 {
        let before = program_mask();
        set_program_mask(wanted);
        set_program_mask(before);
        set_errno(libc::EINTR);
        return -1;
    }
    trap::waiting(wanted, || wait(wanted & !trap::ENGINE))
}

/// Runs a call that waits with the mask `mask` (null: the thread's): the kernel gets it
/// without the engine's signals, a handler run meanwhile the program's mask.
fn wait_with(mask: *const libc::sigset_t, call: impl FnOnce(*const libc::sigset_t) -> i32) -> i32 {
    // Without the engine nothing is read here (no entry would recover a fault); with it, a
    // mask it cannot read goes to the kernel as it is, which fails the call with EFAULT.
    if !active() {
        return call(mask);
    }
    let Some(m) = read_bits(mask).ok().flatten() else {
        return call(mask);
    };
    let copy = set_of(m & !trap::ENGINE);
    trap::waiting(m, || call(&copy))
}

/// `ppoll(2)`, its mask without the engine's signals.
///
/// # Safety
/// As the C library's `ppoll`.
#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> libc::c_int {
    let Some(real) = crate::real::ppoll() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: forwarded, with a valid mask of ours where it was valid.
    wait_with(mask, |mask| unsafe { real(fds, nfds, timeout, mask) })
}

/// `pselect(2)`, its mask without the engine's signals.
///
/// # Safety
/// As the C library's `pselect`.
#[no_mangle]
pub unsafe extern "C" fn pselect(
    n: libc::c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> libc::c_int {
    let Some(real) = crate::real::pselect() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: as in `ppoll`.
    wait_with(mask, |mask| unsafe { real(n, r, w, e, timeout, mask) })
}

/// `epoll_pwait(2)`, its mask without the engine's signals.
///
/// # Safety
/// As the C library's `epoll_pwait`.
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    fd: libc::c_int,
    events: *mut libc::epoll_event,
    max: libc::c_int,
    timeout: libc::c_int,
    mask: *const libc::sigset_t,
) -> libc::c_int {
    let Some(real) = crate::real::epoll_pwait() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: as in `ppoll`.
    wait_with(mask, |mask| unsafe { real(fd, events, max, timeout, mask) })
}
