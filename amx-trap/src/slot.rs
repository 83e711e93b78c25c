//! Each thread's engine state, a *slot*: the emulated tile unit, the stack the engine works on
//! inside its signal handlers, the signals it holds back while it works, and the words the
//! assembly paths read.
//!
//! A slot is one anonymous mapping (`mmap`, async-signal-safe), made when a thread first needs
//! one: `[guard page][work stack][Slot]`. Slots are never unmapped (a thread's exit cannot be
//! observed from a signal handler, and a stub or handler of the dead thread's may not be
//! provably done with it); instead a slot whose thread has exited is reused by the next thread
//! that needs one. So a process holds as many slots as it had threads using the engine at the
//! same time, not as many as it ever had (`tgkill(pid, tid, 0)` tells a live thread from an
//! exited one; a thread id reused by a new thread only delays the reuse). A `fork` child keeps
//! its parent's slots as copies; only the slot of the thread that forked is its own, and the
//! others, owned by another process, are never reused there.
//!
//! Where no slot can be mapped (a sandbox denying `mmap`, or no address space left), a thread
//! takes one of [`RESERVE`] slots in the library's own zero-initialized memory, as a program
//! on the silicon makes no system call for a thread's AMX state (the kernel allocates it);
//! reserved slots join the list and are reused like mapped ones. Beyond them, failure to get a slot is not an #UD: the thread's
//! first AMX instruction gets SIGSEGV, as Linux gives a thread whose AMX state it cannot
//! allocate, and its other signals are delivered without a slot ([`crate::slotless`]).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use amx_runtime::Emulator;

use crate::tls;

/// Bytes of the work stack: 128 KiB in optimized builds; 1 MiB where the engine is compiled
/// without optimization (see `build.rs`), whose code gives every inlined temporary a stack slot
/// of its own (the instruction step's frame alone is 110 KiB there, and a 128 KiB stack
/// overflowed into its guard page at a program's first AMX instruction).
pub(crate) const WORK: usize = if cfg!(amx_trap_unoptimized) {
    1024 * 1024
} else {
    128 * 1024
};

const PAGE: usize = 4096;

/// A thread's state. The first fields are read and written by assembly at the offsets of
/// [`offsets`].
#[repr(C, align(64))]
pub(crate) struct Slot {
    /// Signal entries running on this thread (an entry interrupted by another counts twice).
    pub(crate) nest: AtomicU64,
    /// While a patched site runs its instruction: the base of the stub's register frame.
    pub(crate) fast_frame: AtomicU64,
    /// While a patched site runs its instruction: 0 until the instruction is done, then the
    /// address the program resumes at.
    pub(crate) fast_commit: AtomicU64,
    /// While a patched site runs its instruction: where the stub saved the vector registers.
    pub(crate) fast_area: AtomicU64,
    /// Signals that arrived while the engine was working on this thread and wait for it to
    /// finish (bit `n - 1` is signal `n`).
    pub(crate) deferred: AtomicU64,
    /// Signals the engine blocked in the interrupted program context to hold them back (the
    /// engine unblocks them there when it raises them again).
    pub(crate) held_back: AtomicU64,
    /// The thread owning the slot (0: free).
    owner_tid: AtomicI32,
    /// The process the owner belongs to (a `fork` child's copies belong to its parent).
    owner_pid: AtomicI32,
    /// The next slot of the process's list (set once, before the slot is published).
    next: AtomicPtr<Slot>,
    /// The siginfo of each deferred signal.
    deferred_info: UnsafeCell<[[u8; 128]; 64]>,
    /// Where the engine last enabled this thread's tile data to assist an instruction (0:
    /// nowhere since; see assist.rs).
    primed: AtomicU64,
    /// The last fault of the copy routine (access.rs).
    fault: UnsafeCell<crate::access::Fault>,
    /// Whether `unit` holds a unit (a slot just mapped or claimed gets one on the work stack:
    /// see [`get_light`]).
    ready: std::sync::atomic::AtomicBool,
    /// Set by the signal entry when a signal it held back stopped a load's or store's copy
    /// (a patched site's, or a trapped one's while `stoppable_copy`): the instruction stops
    /// where it is (start_row) and the program resumes at it, not past it (see
    /// `fastpath::restart_or_past`).
    pub(crate) restart: std::sync::atomic::AtomicBool,
    /// While a trapped load or store copies its rows with the program's handled signals
    /// unblocked (`handler::interruptible`): a signal arriving then in the copy routine stops
    /// the instruction as at a patched site (`restart`).
    pub(crate) stoppable_copy: std::sync::atomic::AtomicBool,
    /// The tile-data permission granted to this task alone: a `vfork` child, its own process
    /// on the silicon, that asked for it in its parent's memory (see `request_xcomp_perm`).
    pub(crate) own_permission: std::sync::atomic::AtomicBool,
    /// A signal armed to end the process (`deliver::arm_fatal`) waits in the context this
    /// thread resumes: its exit delivers nothing else first.
    pub(crate) ending: std::sync::atomic::AtomicBool,
    /// The trap number (high half) and error code (low half) of the last exception delivered
    /// to the program on this thread: what the kernel's contexts report as the thread's last
    /// trap on the silicon, where the #UD and breakpoints the engine consumes never happen.
    pub(crate) program_trap: AtomicU64,
    /// The thread's emulated tile unit.
    pub(crate) unit: UnsafeCell<Emulator>,
    /// The unit a [`crate::HandlerScope`] gave the signal handler running on this thread (null:
    /// none, `unit` serves): [`Slot::unit`] is this one while it is set, so that the handler's
    /// instructions never touch the unit of the code it interrupted, which may be in the middle
    /// of an instruction (the kernel calls such a handler directly, anywhere).
    pub(crate) scoped: AtomicPtr<Emulator>,
}

/// Field offsets the assembly uses.
pub(crate) mod offsets {
    /// [`Slot::nest`](super::Slot::nest).
    pub(crate) const NEST: usize = 0;
    /// [`Slot::fast_frame`](super::Slot::fast_frame).
    pub(crate) const FAST_FRAME: usize = 8;
    /// [`Slot::fast_commit`](super::Slot::fast_commit).
    pub(crate) const FAST_COMMIT: usize = 16;
    /// [`Slot::fast_area`](super::Slot::fast_area).
    pub(crate) const FAST_AREA: usize = 24;
    /// [`Slot::deferred`](super::Slot::deferred).
    pub(crate) const DEFERRED: usize = 32;
    /// [`Slot::held_back`](super::Slot::held_back).
    pub(crate) const HELD_BACK: usize = 40;
}

const _: () = {
    assert!(std::mem::offset_of!(Slot, nest) == offsets::NEST);
    assert!(std::mem::offset_of!(Slot, fast_frame) == offsets::FAST_FRAME);
    assert!(std::mem::offset_of!(Slot, fast_commit) == offsets::FAST_COMMIT);
    assert!(std::mem::offset_of!(Slot, fast_area) == offsets::FAST_AREA);
    assert!(std::mem::offset_of!(Slot, deferred) == offsets::DEFERRED);
    assert!(std::mem::offset_of!(Slot, held_back) == offsets::HELD_BACK);
};

/// The process's slots, newest first.
static SLOTS: AtomicPtr<Slot> = AtomicPtr::new(std::ptr::null_mut());

impl Slot {
    /// The top of the work stack (16-byte aligned: the slot is 64-byte aligned).
    pub(crate) fn work_top(&self) -> u64 {
        self as *const Slot as u64
    }

    /// Gives the slot its unit, where [`get_light`] left it without one: in the INIT state.
    /// Called by the thread's one engine activation (as [`Slot::unit`]).
    pub(crate) fn prepare_unit(&self) {
        if !self.ready.load(Ordering::Relaxed) {
            // SAFETY: the thread's one activation; the field is valid for writes of an
            // Emulator and aligned (it is a field of the slot).
            unsafe { amx_runtime::engine::init_emulator(self.unit.get()) };
            self.ready.store(true, Ordering::Relaxed);
        }
    }

    /// The emulated unit: the one a handler scope opened ([`Slot::scoped`]), else the slot's
    /// own. The caller is the thread's one engine activation on that unit (the engine holds
    /// back every signal that could start another while it runs: see entry.rs; a handler the
    /// kernel calls directly gets a unit of its own through its scope), after
    /// [`Slot::prepare_unit`] (which [`get`] and the engine's dispatch call).
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn unit(&self) -> &mut Emulator {
        let scoped = self.scoped.load(Ordering::Acquire);
        if !scoped.is_null() {
            // SAFETY: a scope's unit, written in full before it was published and alive until
            // the scope closes (which unpublishes it first); used by one activation at a time
            // (as the slot's own, below).
            return unsafe { &mut *scoped };
        }
        // SAFETY: one activation per thread uses the unit at a time (the caller's contract),
        // and no other thread reaches this slot while its owner lives.
        unsafe { &mut *self.unit.get() }
    }

    /// Whether the slot holds a unit (else the thread's tile state is INIT).
    pub(crate) fn has_unit(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Records the slot as the calling thread's: after a `fork`, the child's copy of its
    /// forking thread's slot still names the parent (a child that forks with the system call
    /// itself keeps that name, and the slot is then never reused: a leak, not a mix-up).
    pub(crate) fn adopt(&self) {
        let pid = getpid();
        if self.owner_pid.load(Ordering::Relaxed) != pid {
            self.owner_tid.store(gettid(), Ordering::Relaxed);
            self.owner_pid.store(pid, Ordering::Release);
        }
    }

    /// Whether the engine enabled this thread's tile data for the instruction at `rip` and has
    /// met no other assisted instruction since.
    pub(crate) fn primed_at(&self, rip: u64) -> bool {
        self.primed.load(Ordering::Relaxed) == rip
    }

    /// Records that the engine enabled the thread's tile data for the instruction at `rip`
    /// (0: forgets it).
    pub(crate) fn set_primed_at(&self, rip: u64) {
        self.primed.store(rip, Ordering::Relaxed);
    }

    /// Keeps the siginfo of a held-back signal.
    pub(crate) fn set_deferred_info(&self, sig: i32, info: &[u8; 128]) {
        if let Some(i) = sig.checked_sub(1).and_then(|i| usize::try_from(i).ok()) {
            // SAFETY: only the thread's signal entries write here, one at a time (an entry
            // that holds a signal back runs with every other signal blocked but SIGSEGV and
            // SIGBUS, which are only held, never written twice: see `deferred`).
            if let Some(slot) = unsafe { &mut *self.deferred_info.get() }.get_mut(i) {
                *slot = *info;
            }
        }
    }

    /// The siginfo of a held-back signal.
    pub(crate) fn deferred_info(&self, sig: i32) -> [u8; 128] {
        let i = sig.checked_sub(1).and_then(|i| usize::try_from(i).ok());
        // SAFETY: read by the engine's activation after the entries that wrote it returned.
        i.and_then(|i| unsafe { &*self.deferred_info.get() }.get(i).copied())
            .unwrap_or([0; 128])
    }

    /// Records the fault of the copy routine (from the signal entry).
    pub(crate) fn record_fault(&self, info: &[u8; 128], trapno: u64, err: u64) {
        // SAFETY: the copy routine's caller waits for this entry to return before it reads
        // the record; nothing else writes it.
        unsafe {
            *self.fault.get() = crate::access::Fault {
                info: *info,
                trapno,
                err,
            }
        };
    }

    /// The last fault the copy routine met.
    pub(crate) fn last_fault(&self) -> crate::access::Fault {
        // SAFETY: see `record_fault`.
        unsafe { *self.fault.get() }
    }

    /// Whether the calling thread is the slot's owner. Another task reaches a slot only through
    /// its owner's thread pointer: a thread made by `clone` without `CLONE_SETTLS`, a `vfork`
    /// child (or the child of a `fork` made by the system call itself, whose copy keeps its
    /// parent's name). Two system calls: for reports, not for the paths that run instructions.
    pub(crate) fn is_callers(&self) -> bool {
        self.owner_tid.load(Ordering::Relaxed) == gettid()
            && self.owner_pid.load(Ordering::Relaxed) == getpid()
    }

    /// Gives the slot back while its thread still runs (a thread the preload saw end).
    pub(crate) fn release(&self) {
        self.owner_tid.store(0, Ordering::Release);
    }
}

use crate::sys::{getpid, gettid};

/// This thread's slot, if it has one.
#[inline]
pub(crate) fn current() -> Option<&'static Slot> {
    let p = tls::thread().load(Ordering::Acquire);
    // SAFETY: a non-null pointer in the thread's word is a slot this thread claimed; slots are
    // never unmapped.
    unsafe { p.as_ref() }
}

/// This thread's slot, claimed or mapped now if it has none, with its unit. `Err(errno)` when
/// no memory can be mapped. Async-signal-safe.
pub(crate) fn get() -> Result<&'static Slot, i32> {
    let slot = get_light()?;
    slot.prepare_unit();
    Ok(slot)
}

/// [`get`] without the unit, which [`Slot::prepare_unit`] then writes: what the signal entry
/// calls on the stack the kernel chose. That may be a program's alternate stack with only a few
/// hundred bytes left below the kernel's frame (a frame with AMX state is over 11 KiB, and
/// `sigaltstack` need only hold the frame), too little for writing a unit.
pub(crate) fn get_light() -> Result<&'static Slot, i32> {
    if let Some(slot) = current() {
        return Ok(slot);
    }
    let slot = claim()?;
    // A handler on this thread may have claimed one meanwhile: keep the first.
    match tls::thread().compare_exchange(
        std::ptr::null_mut(),
        slot as *const Slot as *mut Slot,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => Ok(slot),
        Err(theirs) => {
            slot.release();
            // SAFETY: as in `current`.
            Ok(unsafe { &*theirs })
        }
    }
}

/// A free slot, or one of an exited thread, or a new one; owned by the caller and reset.
fn claim() -> Result<&'static Slot, i32> {
    let (pid, tid) = (getpid(), gettid());
    let reusable = |slot: &Slot| {
        let owner = slot.owner_tid.load(Ordering::Acquire);
        if owner == 0 {
            return Some(0);
        }
        let exited = slot.owner_pid.load(Ordering::Acquire) == pid && !alive(pid, owner);
        exited.then_some(owner)
    };
    let mut at = SLOTS.load(Ordering::Acquire);
    // SAFETY: every pointer in the list is a mapped, initialized slot that is never unmapped.
    while let Some(slot) = unsafe { at.as_ref() } {
        if let Some(owner) = reusable(slot) {
            if slot
                .owner_tid
                .compare_exchange(owner, tid, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                slot.owner_pid.store(pid, Ordering::Release);
                reset(slot);
                return Ok(slot);
            }
        }
        at = slot.next.load(Ordering::Acquire);
    }
    let slot = map()?;
    slot.owner_tid.store(tid, Ordering::Relaxed);
    slot.owner_pid.store(pid, Ordering::Relaxed);
    let mut head = SLOTS.load(Ordering::Acquire);
    loop {
        slot.next.store(head, Ordering::Relaxed);
        match SLOTS.compare_exchange_weak(
            head,
            slot as *const Slot as *mut Slot,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return Ok(slot),
            Err(now) => head = now,
        }
    }
}

/// Frees the slots of process `pid`, which has left this address space (a `vfork` child that
/// called `exec` or `_exit`): they are reused as those of exited threads are.
pub(crate) fn release_process(pid: i32) {
    let mut at = SLOTS.load(Ordering::Acquire);
    // SAFETY: every pointer in the list is a mapped, initialized slot that is never unmapped.
    while let Some(slot) = unsafe { at.as_ref() } {
        if slot.owner_pid.load(Ordering::Acquire) == pid {
            slot.owner_tid.store(0, Ordering::Release);
        }
        at = slot.next.load(Ordering::Acquire);
    }
}

/// Whether thread `tid` of process `pid` still runs.
fn alive(pid: i32, tid: i32) -> bool {
    // Signal 0 only checks that the thread exists.
    crate::sys::tgkill(pid, tid, 0) != Err(libc::ESRCH)
}

/// The state a thread starts with: nothing running, nothing held back, the unit INIT.
fn reset(slot: &Slot) {
    slot.nest.store(0, Ordering::Relaxed);
    slot.fast_frame.store(0, Ordering::Relaxed);
    slot.fast_commit.store(0, Ordering::Relaxed);
    slot.fast_area.store(0, Ordering::Relaxed);
    slot.deferred.store(0, Ordering::Relaxed);
    slot.held_back.store(0, Ordering::Relaxed);
    slot.primed.store(0, Ordering::Relaxed);
    slot.restart.store(false, Ordering::Relaxed);
    slot.stoppable_copy.store(false, Ordering::Relaxed);
    slot.own_permission.store(false, Ordering::Relaxed);
    slot.ending.store(false, Ordering::Relaxed);
    slot.program_trap.store(0, Ordering::Relaxed);
    slot.scoped.store(std::ptr::null_mut(), Ordering::Relaxed);
    // The unit is written later, on the work stack (`get_light`).
    slot.ready.store(false, Ordering::Relaxed);
}

/// Bytes of one slot's memory: `[guard page][work stack][Slot]`, whole pages.
const REGION: usize = PAGE + WORK + std::mem::size_of::<Slot>().next_multiple_of(PAGE);

/// Slots in the library's own memory for threads that cannot map one (see the module docs):
/// enough for a program's main thread and a few workers in a sandbox that denies `mmap`. They
/// cost address space (about 170 KiB each in an optimized build, zero-filled on first touch),
/// not memory, until used.
pub(crate) const RESERVE: usize = 4;

/// The reserved slots' memory, page-aligned.
#[repr(C, align(4096))]
struct Reserve(UnsafeCell<[[u8; REGION]; RESERVE]>);

// SAFETY: each region is handed out once ([`RESERVED`]'s fetch_add gives each index to one
// caller), and from then on it is a slot like a mapped one, whose fields are atomics or
// owned by the slot's thread.
unsafe impl Sync for Reserve {}

static RESERVE_MEMORY: Reserve = Reserve(UnsafeCell::new([[0; REGION]; RESERVE]));

/// Reserved regions handed out (may count past the limit: those asks got none).
static RESERVED: AtomicUsize = AtomicUsize::new(0);

/// How many reserved slots may be handed out: [`RESERVE`], or fewer where `AMX_TRAP_RESERVE`
/// said so when the engine was installed ([`prepare`]).
static RESERVE_LIMIT: AtomicUsize = AtomicUsize::new(RESERVE);

/// Reads `AMX_TRAP_RESERVE` when the engine is installed: a number from 0 to [`RESERVE`] limits
/// the reserved slots to it (0: a thread that cannot map its state gets the SIGSEGV of a thread
/// whose AMX state Linux cannot allocate, as where the reserve is used up); anything else
/// leaves all of them. Outside signal context.
pub(crate) fn prepare() {
    let limit = std::env::var("AMX_TRAP_RESERVE")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n <= RESERVE)
        .unwrap_or(RESERVE);
    RESERVE_LIMIT.store(limit, Ordering::Relaxed);
}

/// Maps a new slot, or takes a reserved one where mapping fails; `Err(errno)` of the mapping
/// when the reserve is used up too.
fn map() -> Result<&'static Slot, i32> {
    let map = match crate::sys::mmap_anon(
        0,
        REGION,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_NORESERVE,
    ) {
        Ok(map) => map,
        Err(errno) => {
            let i = RESERVED.fetch_add(1, Ordering::AcqRel);
            if i >= RESERVE_LIMIT.load(Ordering::Relaxed).min(RESERVE) {
                return Err(errno);
            }
            // SAFETY: region i < RESERVE of the reserve, whole pages, handed to this caller
            // alone (the fetch_add above).
            unsafe { RESERVE_MEMORY.0.get().cast::<u8>().add(i * REGION) as u64 }
        }
    };
    // The guard page turns an overflow of the work stack into a fault, not a silent overwrite
    // (where mprotect is denied too, the region goes without).
    // SAFETY: the first page of the region just mapped or reserved, used by no one.
    let _ = unsafe { crate::sys::mprotect(map, PAGE, libc::PROT_NONE) };
    // SAFETY: `map + PAGE + WORK` is page-aligned (so 64-byte aligned) and the rest of the
    // region, inside the mapping or the reserve. Zero bytes are valid for every field but the
    // emulator, which is never read before `prepare_unit` writes it (`ready` is false).
    unsafe {
        let slot = (map as usize as *mut u8).add(PAGE + WORK).cast::<Slot>();
        Ok(&*slot)
    }
}
