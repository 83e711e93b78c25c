//! The kernel's signal table and masks as the engine drives them, and the program's actions it
//! keeps for the signals it takes.
//!
//! The engine takes five signals for itself: SIGILL (every AMX instruction on a CPU without
//! AMX), SIGSEGV and SIGBUS (the faults of its copy routine, and with CPUID faulting every
//! `cpuid`), SIGTRAP (the `int3` of a site being patched), SIGSYS (a seccomp filter trapping
//! one of the engine's own system calls, which the program did not make). For these the
//! kernel's action is the engine's entry; the program's own action is kept here, and the
//! engine delivers to it as the kernel would. Under the preload every other signal the program
//! handles goes through the entry too (*wrapped*), with the program's flags, so that its
//! handler gets the INIT tile state and the interrupted state back on return, as on the
//! silicon.
//!
//! Under the preload the program's signal masks are *virtualized* for the engine's five
//! signals: the kernel never blocks them (an AMX instruction, a copy fault or a trapped system
//! call of the engine's with SIGILL, SIGSEGV or SIGSYS blocked would kill the process, where
//! the silicon needs no signal), and each thread keeps the program's view of them
//! (`tls::view`). Such a signal sent by a process while the program's view blocks it is kept
//! pending by the engine and raised when the view unblocks it.
//!
//! Everything here is async-signal-safe: atomics and raw system calls.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::{sys, tls};

/// The bit of signal `sig` in a 64-bit mask (signals 1 to 64).
pub(crate) const fn bit(sig: i32) -> u64 {
    if sig >= 1 && sig <= 64 {
        1 << (sig - 1)
    } else {
        0
    }
}

/// The engine's own signals.
pub const ENGINE: u64 = bit(libc::SIGILL)
    | bit(libc::SIGSEGV)
    | bit(libc::SIGBUS)
    | bit(libc::SIGTRAP)
    | bit(libc::SIGSYS);

/// What the engine's entry blocks while it works: everything but the copy routine's faults
/// and the SIGSYS of a seccomp filter that traps one of the engine's own system calls (blocked,
/// the kernel would end the process with it: see `sys::issued_by_engine`).
pub(crate) const ENTRY_MASK: u64 = !(bit(libc::SIGSEGV) | bit(libc::SIGBUS) | bit(libc::SIGSYS));

/// `SA_RESTORER`.
pub(crate) const SA_RESTORER: u64 = 0x0400_0000;

/// The kernel's `struct sigaction` (rt_sigaction's).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct KAction {
    pub(crate) handler: u64,
    pub(crate) flags: u64,
    pub(crate) restorer: u64,
    pub(crate) mask: u64,
}

// The restorer of the engine's own handler frames: the C library's instruction sequence, so that
// unwinders that recognise a signal frame by its bytes recognise these, and the unwind
// information of one, for those that read it (a walk from the engine's code then goes on
// through the kernel's frame into the interrupted code).
core::arch::global_asm!(
    ".pushsection .text.amx_trap_kernel_restorer,\"ax\",@progbits",
    ".p2align 4",
    crate::kframe::signal_frame_cfi!(),
    "    nop",
    ".hidden amx_trap_kernel_restorer",
    ".globl amx_trap_kernel_restorer",
    ".type amx_trap_kernel_restorer, @function",
    "amx_trap_kernel_restorer:",
    "    mov rax, 15",
    "    syscall",
    "    ud2",
    ".cfi_endproc",
    ".size amx_trap_kernel_restorer, . - amx_trap_kernel_restorer",
    ".popsection",
);

extern "C" {
    fn amx_trap_kernel_restorer();
}

/// `rt_sigaction(sig, act, old)` as a system call (the C library's `sigaction` may be the
/// preload's own).
pub(crate) fn rt_sigaction(
    sig: i32,
    act: Option<&KAction>,
    old: Option<&mut KAction>,
) -> Result<(), i32> {
    let act = act.map_or(0, |a| a as *const KAction as u64);
    let old = old.map_or(0, |o| o as *mut KAction as u64);
    // SAFETY: both pointers are null or live KActions of the kernel's layout.
    let rc = unsafe { sys::call(libc::SYS_rt_sigaction, &[sig as u64, act, old, 8]) };
    sys::check(rc).map(|_| ())
}

/// [`rt_sigaction`] made for the program (its `sigaction`, through the preload): a seccomp
/// filter's SIGSYS for it is the program's (see `sys::program_call6`).
fn program_rt_sigaction(sig: i32, act: &KAction) -> Result<(), i32> {
    // SAFETY: a live KAction of the kernel's layout; no old action asked for.
    let rc = unsafe {
        sys::program_call(
            libc::SYS_rt_sigaction,
            &[sig as u64, act as *const KAction as u64, 0, 8],
        )
    };
    sys::check(rc).map(|_| ())
}

/// The kernel's current action for `sig`.
pub(crate) fn kernel_action(sig: i32) -> Option<KAction> {
    let mut old = KAction::default();
    rt_sigaction(sig, None, Some(&mut old)).ok().map(|()| old)
}

/// Puts the default action in the kernel's table for `sig`; whether it could (a sandbox may
/// refuse `rt_sigaction`).
pub(crate) fn kernel_default(sig: i32) -> bool {
    rt_sigaction(sig, Some(&KAction::default()), None).is_ok()
}

/// Blocks `mask` on this thread (the current mask before).
pub(crate) fn block(mask: u64) -> u64 {
    sigprocmask(libc::SIG_BLOCK, mask)
}

/// Unblocks `mask` on this thread (the current mask before).
pub(crate) fn unblock(mask: u64) -> u64 {
    sigprocmask(libc::SIG_UNBLOCK, mask)
}

/// Sets this thread's mask (the mask before).
pub(crate) fn set_mask(mask: u64) -> u64 {
    sigprocmask(libc::SIG_SETMASK, mask)
}

/// This thread's mask.
pub(crate) fn current_mask() -> u64 {
    block(0)
}

fn sigprocmask(how: i32, mask: u64) -> u64 {
    sys::sigprocmask(how, Some(mask))
}

/// Queues `sig` with `info` to this thread. Where the siginfo cannot be queued (a seccomp
/// filter denying `rt_tgsigqueueinfo`), the signal is sent without it (`tgkill`: `SI_TKILL`,
/// this process as the sender) rather than lost. A real-time signal the kernel refuses to
/// queue (`EAGAIN`: the user's pending signals at `RLIMIT_SIGPENDING`) is sent as `kill`
/// sends one (`SI_USER`), which the kernel never refuses: it arrives with that siginfo
/// instead of its own. Whether the signal was sent (a sandbox may refuse every way).
pub(crate) fn raise_here(sig: i32, info: &[u8; 128]) -> bool {
    let mut info = *info;
    info[..4].copy_from_slice(&sig.to_le_bytes());
    let (pid, tid) = (sys::getpid(), sys::gettid());
    let queue = |info: &[u8; 128]| {
        // SAFETY: the kernel copies the 128-byte siginfo. A process may queue any si_code to
        // itself.
        unsafe {
            sys::call(
                libc::SYS_rt_tgsigqueueinfo,
                &[pid as u64, tid as u64, sig as u64, info.as_ptr() as u64],
            )
        }
    };
    let rc = queue(&info);
    if rc == -i64::from(libc::EAGAIN) {
        // SI_USER from this process, as `kill` sends it: without a queue entry where there is
        // no room, its bit pending all the same.
        let mut user = [0u8; 128];
        user[..4].copy_from_slice(&sig.to_le_bytes());
        user[16..20].copy_from_slice(&(pid as u32).to_le_bytes());
        user[20..24].copy_from_slice(&sys::getuid().to_le_bytes());
        queue(&user) >= 0
    } else {
        rc >= 0 || sys::tgkill(pid, tid, sig).is_ok()
    }
}

/// Queues `sig` with `info` to the process; without the siginfo (`kill`: `SI_USER`) where it
/// cannot be queued, as in [`raise_here`].
pub(crate) fn raise_process(sig: i32, info: &[u8; 128]) {
    let mut info = *info;
    info[..4].copy_from_slice(&sig.to_le_bytes());
    let pid = sys::getpid();
    // SAFETY: as in `raise_here`.
    let rc = unsafe {
        sys::call(
            libc::SYS_rt_sigqueueinfo,
            &[pid as u64, sig as u64, info.as_ptr() as u64],
        )
    };
    if rc < 0 && rc != -i64::from(libc::EAGAIN) {
        // SAFETY: no memory argument.
        unsafe { sys::call(libc::SYS_kill, &[pid as u64, sig as u64]) };
    }
}

/// Disables this thread's alternate signal stack.
pub(crate) fn disable_altstack() {
    let off = crate::kframe::Stack {
        flags: crate::kframe::SS_DISABLE,
        ..Default::default()
    };
    // SAFETY: sigaltstack reads the 24-byte stack_t; no old value is asked for.
    unsafe {
        sys::call(
            libc::SYS_sigaltstack,
            &[&off as *const crate::kframe::Stack as u64, 0],
        )
    };
}

/// A program's action for one signal, as `sigaction` describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    /// `sa_sigaction` / `sa_handler` (`SIG_DFL` = 0, `SIG_IGN` = 1).
    pub handler: usize,
    /// `sa_flags`.
    pub flags: u64,
    /// `sa_mask`, signals 1 to 64.
    pub mask: u64,
    /// `sa_restorer` (the C library's, where it set one).
    pub restorer: usize,
}

impl Action {
    /// The default action.
    pub const DEFAULT: Action = Action {
        handler: libc::SIG_DFL,
        flags: 0,
        mask: 0,
        restorer: 0,
    };

    /// Whether the action calls a handler (not `SIG_DFL` or `SIG_IGN`).
    pub fn is_handler(&self) -> bool {
        !matches!(self.handler, libc::SIG_DFL | libc::SIG_IGN)
    }

    pub(crate) fn from_kernel(k: &KAction) -> Action {
        Action {
            handler: k.handler as usize,
            flags: k.flags,
            mask: k.mask,
            restorer: k.restorer as usize,
        }
    }
}

/// How the engine holds a signal.
const NONE: u8 = 0;
/// One of the engine's own signals: the kernel's action is the entry.
const OWNED: u8 = 1;
/// A program handler behind the entry (preload).
const WRAPPED: u8 = 2;

struct Entry {
    state: AtomicU8,
    handler: AtomicUsize,
    flags: AtomicU64,
    mask: AtomicU64,
    restorer: AtomicUsize,
}

static TABLE: [Entry; 65] = [const {
    Entry {
        state: AtomicU8::new(NONE),
        handler: AtomicUsize::new(libc::SIG_DFL),
        flags: AtomicU64::new(0),
        mask: AtomicU64::new(0),
        restorer: AtomicUsize::new(0),
    }
}; 65];

fn entry(sig: i32) -> Option<&'static Entry> {
    usize::try_from(sig)
        .ok()
        .and_then(|i| TABLE.get(i))
        .filter(|_| sig >= 1)
}

fn store(e: &Entry, a: Action, state: u8) {
    e.handler.store(a.handler, Ordering::Relaxed);
    e.flags.store(a.flags, Ordering::Relaxed);
    e.mask.store(a.mask, Ordering::Relaxed);
    e.restorer.store(a.restorer, Ordering::Relaxed);
    e.state.store(state, Ordering::Release);
}

fn load(e: &Entry) -> Action {
    Action {
        handler: e.handler.load(Ordering::Relaxed),
        flags: e.flags.load(Ordering::Relaxed),
        mask: e.mask.load(Ordering::Relaxed),
        restorer: e.restorer.load(Ordering::Relaxed),
    }
}

/// Whether `sig` is one of the signals the engine took for itself.
pub fn owned(sig: i32) -> bool {
    entry(sig).is_some_and(|e| e.state.load(Ordering::Acquire) == OWNED)
}

/// The signals whose program handler runs behind the entry (the preload's wrapped ones): each
/// one that arrives while the engine works is held back by the entry, never run by the kernel
/// in the middle of the work.
pub(crate) fn wrapped() -> u64 {
    (1..=64)
        .filter(|&sig| entry(sig).is_some_and(|e| e.state.load(Ordering::Acquire) == WRAPPED))
        .fold(0, |mask, sig| mask | bit(sig))
}

/// Catches up, in a program that installed the engine itself, with an action the program put
/// in the kernel's table for one of the engine's signals after the engine took it (a C library
/// `sigaction` the engine does not see): that action becomes the program's, and the engine
/// takes the signal back.
pub(crate) fn catch_up(sig: i32) {
    if virtualized() || !owned(sig) {
        return;
    }
    let Some(now) = kernel_action(sig) else {
        return;
    };
    if now.handler == crate::entry::handler() as u64 {
        return;
    }
    if let Some(e) = entry(sig) {
        let program = Action::from_kernel(&now);
        store(e, program, OWNED);
        let _ = rt_sigaction(sig, Some(&entry_action(sig, &program, true)), None);
    }
}

/// The program's action for `sig`: the kept one for a signal the engine holds, else the
/// kernel's.
pub fn program_action(sig: i32) -> Action {
    if let Some(e) = entry(sig).filter(|e| e.state.load(Ordering::Acquire) != NONE) {
        return load(e);
    }
    kernel_action(sig).map_or(Action::DEFAULT, |k| Action::from_kernel(&k))
}

/// The flags of the program's action the kernel acts on itself, kept in the entry's action.
const MIRRORED: u64 = (libc::SA_RESTART
    | libc::SA_NOCLDSTOP
    | libc::SA_NOCLDWAIT
    | libc::SA_ONSTACK
    | libc::SA_RESETHAND) as u64;

/// The kernel's action that puts the entry in front of `program`, for `sig`.
fn entry_action(sig: i32, program: &Action, own: bool) -> KAction {
    let mut flags = program.flags & MIRRORED;
    if own {
        // The engine needs its signals whatever the program asked: on the alternate stack
        // where there is one (an instruction may execute with little stack left), never reset.
        flags = (flags | libc::SA_ONSTACK as u64) & !(libc::SA_RESETHAND as u64);
    }
    if own && sig == libc::SIGSYS {
        // Not blocked while the entry handles a SIGSYS either: its work may make system calls
        // a filter traps (the program's handler gets the program's mask all the same).
        flags |= libc::SA_NODEFER as u64;
    }
    KAction {
        handler: crate::entry::handler() as u64,
        flags: flags | libc::SA_SIGINFO as u64 | SA_RESTORER,
        restorer: amx_trap_kernel_restorer as *const () as u64,
        mask: ENTRY_MASK,
    }
}

/// Takes `sig` for the engine: its entry in the kernel's table, the action it replaces kept as
/// the program's.
pub(crate) fn take(sig: i32) -> Result<(), i32> {
    let Some(e) = entry(sig) else {
        return Err(libc::EINVAL);
    };
    if e.state.load(Ordering::Acquire) == OWNED {
        return Ok(());
    }
    let before = if e.state.load(Ordering::Acquire) == WRAPPED {
        load(e)
    } else {
        kernel_action(sig).map_or(Action::DEFAULT, |k| Action::from_kernel(&k))
    };
    store(e, before, OWNED);
    if let Err(errno) = rt_sigaction(sig, Some(&entry_action(sig, &before, true)), None) {
        store(e, before, NONE);
        return Err(errno);
    }
    Ok(())
}

/// Makes `action` the program's action for `sig` (the preload's `sigaction`): kept, with the
/// entry in the kernel's table, for one of the engine's signals or (with `wrap`) a handler;
/// otherwise `forward` puts it in the kernel's table. The action before is returned.
pub fn set_program_action(
    sig: i32,
    action: Option<&Action>,
    wrap: bool,
    forward: impl FnOnce() -> Result<(), i32>,
) -> Result<Action, i32> {
    let Some(e) = entry(sig) else {
        return Err(libc::EINVAL);
    };
    if sig == libc::SIGKILL || sig == libc::SIGSTOP {
        if action.is_some() {
            return Err(libc::EINVAL);
        }
        return Ok(program_action(sig));
    }
    let before = program_action(sig);
    let Some(action) = action else {
        return Ok(before);
    };
    // The kernel keeps no SIGKILL or SIGSTOP in an action's mask (`do_sigaction`): reading
    // the action back shows neither.
    let action = &Action {
        mask: action.mask & !(bit(libc::SIGKILL) | bit(libc::SIGSTOP)),
        ..*action
    };
    let state = e.state.load(Ordering::Acquire);
    if state == OWNED {
        store(e, *action, OWNED);
        program_rt_sigaction(sig, &entry_action(sig, action, true))?;
        if action.handler == libc::SIG_IGN {
            // Ignoring a signal discards its pending instances, the process's and every
            // thread's (`do_sigaction`).
            forget_pending(sig);
        }
    } else if wrap && action.is_handler() {
        store(e, *action, WRAPPED);
        program_rt_sigaction(sig, &entry_action(sig, action, false))?;
    } else {
        forward()?;
        e.state.store(NONE, Ordering::Release);
    }
    Ok(before)
}

/// A delivery with `SA_RESETHAND`: as the kernel does, the handler becomes `SIG_DFL`, flags
/// and mask stay. (For a wrapped signal the kernel reset its own action, the entry's, already.)
pub(crate) fn reset_after_delivery(sig: i32) {
    let Some(e) = entry(sig) else {
        return;
    };
    let mut action = load(e);
    action.handler = libc::SIG_DFL;
    match e.state.load(Ordering::Acquire) {
        OWNED => store(e, action, OWNED),
        WRAPPED => {
            e.state.store(NONE, Ordering::Release);
            let _ = rt_sigaction(
                sig,
                Some(&KAction {
                    handler: libc::SIG_DFL as u64,
                    flags: action.flags,
                    restorer: action.restorer as u64,
                    mask: action.mask,
                }),
                None,
            );
        }
        _ => {}
    }
}

/// Whether program masks are virtualized for the engine's signals (the preload).
static VIRTUAL: AtomicBool = AtomicBool::new(false);

/// Turns the virtualization of the engine's signals on (the preload, when it installs).
pub fn virtualize() {
    VIRTUAL.store(true, Ordering::Release);
}

/// Whether program masks are virtualized.
pub fn virtualized() -> bool {
    VIRTUAL.load(Ordering::Acquire)
}

/// Runs `wait` (a system call that waits with a mask of its own, the program's `mask`): a
/// signal delivered meanwhile runs its handler with that mask, as the kernel does.
pub fn waiting<R>(mask: u64, wait: impl FnOnce() -> R) -> R {
    let w = tls::wait();
    w[1].store(mask, Ordering::Relaxed);
    w[0].store(1, Ordering::Release);
    let r = wait();
    w[0].store(0, Ordering::Release);
    r
}

/// The program's mask in effect for a signal delivered now, if the thread is waiting with one.
pub(crate) fn wait_mask() -> Option<u64> {
    let w = tls::wait();
    (w[0].load(Ordering::Acquire) != 0).then(|| w[1].load(Ordering::Relaxed))
}

/// The program's mask on this thread, given the kernel's (`real`).
pub fn program_mask(real: u64) -> u64 {
    if virtualized() {
        (real & !ENGINE) | (tls::view().load(Ordering::Relaxed) & ENGINE)
    } else {
        real
    }
}

/// Records `mask` as the program's mask on this thread; returns the mask the kernel gets.
pub fn set_program_view(mask: u64) -> u64 {
    if virtualized() {
        tls::view().store(mask & ENGINE, Ordering::Relaxed);
        mask & !ENGINE
    } else {
        mask
    }
}

/// Engine signals kept pending while the program's view blocks them, per signal.
struct Pending {
    /// Whether the signal is pending for the whole process (sent with `kill`).
    process: AtomicBool,
    /// Its siginfo.
    process_info: [AtomicU64; 16],
    /// The threads it is pending for (sent to one thread): each entry's owner thread id, 0
    /// when free, negative while being filled.
    threads: [AtomicI32; 64],
    thread_info: [[AtomicU64; 16]; 64],
}

static PENDING: [Pending; 5] = [const {
    Pending {
        process: AtomicBool::new(false),
        process_info: [const { AtomicU64::new(0) }; 16],
        threads: [const { AtomicI32::new(0) }; 64],
        thread_info: [const { [const { AtomicU64::new(0) }; 16] }; 64],
    }
}; 5];

/// The engine's signals, in the order of [`PENDING`].
const ENGINE_SIGNALS: [i32; 5] = [
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGBUS,
    libc::SIGSEGV,
    libc::SIGSYS,
];

fn pending_of(sig: i32) -> Option<&'static Pending> {
    ENGINE_SIGNALS
        .iter()
        .zip(&PENDING)
        .find_map(|(&s, p)| (s == sig).then_some(p))
}

fn put_info(at: &[AtomicU64; 16], info: &[u8; 128]) {
    for (word, chunk) in at.iter().zip(info.chunks_exact(8)) {
        let bytes = <[u8; 8]>::try_from(chunk).unwrap_or_default();
        word.store(u64::from_le_bytes(bytes), Ordering::Relaxed);
    }
}

fn get_info(at: &[AtomicU64; 16]) -> [u8; 128] {
    let mut info = [0u8; 128];
    for (word, chunk) in at.iter().zip(info.chunks_exact_mut(8)) {
        chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
    }
    info
}

/// Keeps an engine signal the program's view blocks pending (a standard signal is pending at
/// most once, as the kernel keeps it).
pub(crate) fn keep_pending(sig: i32, info: &[u8; 128], thread_directed: bool) {
    let Some(p) = pending_of(sig) else {
        return;
    };
    if !thread_directed {
        if !p.process.swap(true, Ordering::AcqRel) {
            put_info(&p.process_info, info);
        }
        return;
    }
    let tid = sys::gettid();
    if p.threads.iter().any(|t| t.load(Ordering::Acquire) == tid) {
        return;
    }
    for (owner, slot) in p.threads.iter().zip(&p.thread_info) {
        if owner
            .compare_exchange(0, -tid, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            put_info(slot, info);
            owner.store(tid, Ordering::Release);
            return;
        }
    }
}

/// Forgets every pending instance of engine signal `sig`, the process's and the threads'.
fn forget_pending(sig: i32) {
    let Some(p) = pending_of(sig) else {
        return;
    };
    p.process.store(false, Ordering::Release);
    for owner in &p.threads {
        let tid = owner.load(Ordering::Acquire);
        if tid > 0 {
            let _ = owner.compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

/// The engine signals pending for this thread or the process.
pub fn pending() -> u64 {
    let tid = sys::gettid();
    let mut out = 0;
    for (sig, p) in ENGINE_SIGNALS.into_iter().zip(&PENDING) {
        if p.process.load(Ordering::Acquire)
            || p.threads.iter().any(|t| t.load(Ordering::Acquire) == tid)
        {
            out |= bit(sig);
        }
    }
    out
}

/// Raises the pending engine signals this thread's view no longer blocks. Called after the
/// view changed; each is delivered as the kernel would after an unblocking `sigprocmask`.
pub fn release_pending() {
    if !virtualized() {
        return;
    }
    let view = tls::view().load(Ordering::Relaxed);
    let tid = sys::gettid();
    for (sig, p) in ENGINE_SIGNALS.into_iter().zip(&PENDING) {
        if view & bit(sig) != 0 {
            continue;
        }
        for (owner, slot) in p.threads.iter().zip(&p.thread_info) {
            if owner.load(Ordering::Acquire) == tid {
                let info = get_info(slot);
                owner.store(0, Ordering::Release);
                let _ = raise_here(sig, &info);
            }
        }
        if p.process.swap(false, Ordering::AcqRel) {
            raise_process(sig, &get_info(&p.process_info));
        }
    }
}
