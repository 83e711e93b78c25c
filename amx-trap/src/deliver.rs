//! Delivering a signal to the program as the kernel would: its handler called with a siginfo
//! and the interrupted thread's own `ucontext_t` (so it may change the context, return to
//! retry, or `siglongjmp` out), under the mask and flags it installed; or, for the default
//! action, the process killed by that very signal.
//!
//! The engine owns SIGILL (and, when preloaded, SIGSEGV): for those the program's actions are
//! recorded here, installed behind the engine's back by the kernel never. For any other signal
//! the kernel's table is the truth and is read when needed.
//!
//! Everything here is async-signal-safe: atomics and raw system calls, no allocation, no lock.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};

use super::state;

/// The flag of a sigaction whose restorer is set (glibc sets its own).
const SA_RESTORER: i32 = 0x0400_0000;

/// The kernel's signal numbers run from 1 to 64.
const SIGNALS: usize = 65;

/// `sigaction` as the engine must call it: the C library's, not an interposed one.
pub type SigactionFn =
    unsafe extern "C" fn(libc::c_int, *const libc::sigaction, *mut libc::sigaction) -> libc::c_int;

static REAL_SIGACTION: AtomicUsize = AtomicUsize::new(0);

/// Makes the engine install handlers through `f` (the preload passes the C library's
/// `sigaction`, found behind its own interposed one).
pub fn set_real_sigaction(f: SigactionFn) {
    REAL_SIGACTION.store(f as usize, Ordering::Release);
}

/// Calls the C library's `sigaction`.
///
/// # Safety
/// As `sigaction(2)`: `act` and `old` are null or valid.
pub(crate) unsafe fn real_sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    let f = REAL_SIGACTION.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: forwarded from this function's contract.
        unsafe { libc::sigaction(sig, act, old) }
    } else {
        // SAFETY: `f` was stored from a `SigactionFn` by `set_real_sigaction`.
        unsafe {
            let f: SigactionFn = std::mem::transmute::<usize, SigactionFn>(f);
            f(sig, act, old)
        }
    }
}

/// A program's action for one signal, as `sigaction` describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    /// `sa_sigaction` / `sa_handler` (`SIG_DFL` = 0, `SIG_IGN` = 1).
    pub handler: usize,
    /// `sa_flags`.
    pub flags: i32,
    /// The first 64 signals of `sa_mask` (bit `n - 1` is signal `n`).
    pub mask: u64,
}

impl Action {
    /// The default action.
    pub const DEFAULT: Action = Action {
        handler: libc::SIG_DFL,
        flags: 0,
        mask: 0,
    };

    /// From a C `sigaction`.
    pub fn from_c(sa: &libc::sigaction) -> Action {
        Action {
            handler: sa.sa_sigaction,
            flags: sa.sa_flags,
            mask: sigset_bits(&sa.sa_mask),
        }
    }

    /// Into a C `sigaction` (with an empty restorer: the C library supplies its own).
    pub fn to_c(self) -> libc::sigaction {
        // SAFETY: an all-zero sigaction is a valid value of this plain C struct.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = self.handler;
        sa.sa_flags = self.flags & !SA_RESTORER;
        set_sigset_bits(&mut sa.sa_mask, self.mask);
        sa
    }
}

/// The first 64 signals of a `sigset_t`.
pub(crate) fn sigset_bits(set: &libc::sigset_t) -> u64 {
    // SAFETY: glibc's sigset_t is at least 8 bytes, its first 64 bits the kernel's mask.
    unsafe {
        (set as *const libc::sigset_t)
            .cast::<u64>()
            .read_unaligned()
    }
}

fn set_sigset_bits(set: &mut libc::sigset_t, bits: u64) {
    // SAFETY: as in `sigset_bits`; `set` is exclusively borrowed.
    unsafe {
        (set as *mut libc::sigset_t)
            .cast::<u64>()
            .write_unaligned(bits)
    }
}

/// The bit of signal `sig` in a 64-bit mask.
pub(crate) fn bit(sig: libc::c_int) -> u64 {
    if (1..=64).contains(&sig) {
        1 << (sig - 1)
    } else {
        0
    }
}

struct Entry {
    owned: AtomicBool,
    handler: AtomicUsize,
    flags: AtomicI32,
    mask: AtomicU64,
}

static TABLE: [Entry; SIGNALS] = [const {
    Entry {
        owned: AtomicBool::new(false),
        handler: AtomicUsize::new(libc::SIG_DFL),
        flags: AtomicI32::new(0),
        mask: AtomicU64::new(0),
    }
}; SIGNALS];

/// Records `action` as the program's action for `sig`, which the engine's handler occupies in
/// the kernel's table from now on.
pub fn record(sig: libc::c_int, action: Action) {
    if let Some(e) = TABLE.get(sig as usize) {
        e.handler.store(action.handler, Ordering::Relaxed);
        e.flags.store(action.flags, Ordering::Relaxed);
        e.mask.store(action.mask, Ordering::Relaxed);
        e.owned.store(true, Ordering::Release);
    }
}

/// Whether the engine's handler occupies `sig` (its program action is recorded here).
pub fn owned(sig: libc::c_int) -> bool {
    TABLE
        .get(sig as usize)
        .is_some_and(|e| e.owned.load(Ordering::Acquire))
}

/// The program's action for `sig`: the recorded one for a signal the engine occupies, else the
/// kernel's.
pub fn program_action(sig: libc::c_int) -> Action {
    if let Some(e) = TABLE
        .get(sig as usize)
        .filter(|e| e.owned.load(Ordering::Acquire))
    {
        return Action {
            handler: e.handler.load(Ordering::Relaxed),
            flags: e.flags.load(Ordering::Relaxed),
            mask: e.mask.load(Ordering::Relaxed),
        };
    }
    // SAFETY: an all-zero sigaction is valid; sigaction with a null new action only reads.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `old` is a live, writable sigaction.
    if unsafe { real_sigaction(sig, std::ptr::null(), &mut old) } == 0 {
        Action::from_c(&old)
    } else {
        Action::DEFAULT
    }
}

/// Resets `sig` to the default action, in the recorded table and in the kernel's as needed.
fn reset_to_default(sig: libc::c_int) {
    if owned(sig) {
        record(sig, Action::DEFAULT);
    } else {
        let dfl = Action::DEFAULT.to_c();
        // SAFETY: `dfl` is a valid sigaction.
        unsafe { real_sigaction(sig, &dfl, std::ptr::null_mut()) };
    }
}

/// Sets this thread's signal mask (first 64 signals).
pub(crate) fn set_mask(how: libc::c_int, bits: u64) {
    // SAFETY: rt_sigprocmask reads 8 bytes of mask from `bits`, a live local; no old mask.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            how,
            &bits as *const u64,
            std::ptr::null_mut::<u64>(),
            8usize,
        );
    }
}

/// Blocks every signal on this thread; returns the mask before.
pub(crate) fn block_all() -> u64 {
    let all: u64 = !0;
    let mut old: u64 = 0;
    // SAFETY: rt_sigprocmask reads 8 bytes from `all` and writes 8 to `old`, live locals.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_BLOCK,
            &all as *const u64,
            &mut old as *mut u64,
            8usize,
        );
    }
    old
}

/// Builds the siginfo of a signal the kernel raises for an exception.
pub(crate) fn siginfo(sig: libc::c_int, code: libc::c_int, addr: u64) -> libc::siginfo_t {
    // SAFETY: an all-zero siginfo_t is valid (it is plain data).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    info.si_signo = sig;
    info.si_errno = 0;
    info.si_code = code;
    // SAFETY: on x86-64 Linux si_addr is the first field of the union at offset 16, inside the
    // 128-byte siginfo_t.
    unsafe {
        (&mut info as *mut libc::siginfo_t)
            .cast::<u8>()
            .add(16)
            .cast::<u64>()
            .write_unaligned(addr)
    };
    info
}

/// Kills the process with `sig` as the kernel's default action would (core dump included),
/// `info` being what the signal carries.
fn die(sig: libc::c_int, info: &libc::siginfo_t) -> ! {
    // The kernel's table too, even for a signal the engine occupies: the default action must
    // be the kernel's.
    if owned(sig) {
        record(sig, Action::DEFAULT);
    }
    let dfl = Action::DEFAULT.to_c();
    // SAFETY: `dfl` is a valid sigaction.
    unsafe { real_sigaction(sig, &dfl, std::ptr::null_mut()) };
    // SAFETY: plain system calls on this process and thread; `info` is a valid siginfo_t that
    // the kernel copies. Queueing a kernel-style si_code is allowed to the own process.
    unsafe {
        let pid = libc::getpid();
        let tid = libc::syscall(libc::SYS_gettid);
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            pid,
            tid,
            sig,
            info as *const libc::siginfo_t,
        );
        set_mask(libc::SIG_UNBLOCK, bit(sig));
        // Only reached if the signal did not end the process when unblocked.
        libc::syscall(libc::SYS_tgkill, pid, tid, sig);
        libc::syscall(libc::SYS_exit_group, 128 + sig);
    }
    loop {
        std::hint::spin_loop();
    }
}

/// Delivers `sig` with `info` to the program, for the thread interrupted at `uc`. Returns when
/// the program's handler returns (the caller then returns to the context in `uc`); does not
/// return when the handler leaves by `siglongjmp` or the default action ends the process.
///
/// `synchronous` is a signal caused by the instruction (an exception): blocked or ignored, it
/// kills the process as the kernel's forced delivery does. A signal sent by a process
/// (`si_code <= 0`) that the program ignores is dropped.
///
/// # Safety
/// `uc` is the `ucontext_t` of the engine's running signal handler.
pub(crate) unsafe fn deliver(
    sig: libc::c_int,
    info: &mut libc::siginfo_t,
    uc: *mut libc::ucontext_t,
    synchronous: bool,
) {
    let action = program_action(sig);
    // SAFETY: the caller passes the handler's own context.
    let interrupted_mask = sigset_bits(unsafe { &(*uc).uc_sigmask });
    let blocked = interrupted_mask & bit(sig) != 0;
    match action.handler {
        libc::SIG_IGN if !synchronous => return,
        libc::SIG_DFL | libc::SIG_IGN => die(sig, info),
        _ if synchronous && blocked => die(sig, info),
        _ => {}
    }
    if action.flags & libc::SA_RESETHAND != 0 {
        reset_to_default(sig);
    }
    let mut mask = interrupted_mask | action.mask;
    if action.flags & libc::SA_NODEFER == 0 {
        mask |= bit(sig);
    }
    // The engine's own signals stay deliverable: a handler may itself run AMX instructions.
    mask &= !(bit(libc::SIGILL)
        | if owned(libc::SIGSEGV) {
            bit(libc::SIGSEGV)
        } else {
            0
        });
    let here = 0u8;
    state::enter_handler(&here as *const u8 as u64);
    set_mask(libc::SIG_SETMASK, mask);
    // SAFETY: the program installed this handler for `sig` with these flags; it gets what the
    // kernel would pass it: the signal number, a siginfo and the interrupted context.
    unsafe {
        if action.flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute::<usize, _>(action.handler);
            f(sig, info, uc.cast());
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute::<usize, _>(action.handler);
            f(sig);
        }
    }
    set_mask(libc::SIG_SETMASK, !0);
    state::leave_handler();
}
