//! Each thread's emulated AMX state, and the save area that gives a signal handler the INIT
//! state and the interrupted code its own state back.
//!
//! The state (about 155 KiB: the two work stacks below and three emulators) is mapped with
//! `mmap` on a thread's first trapped instruction or handler entry, and found through a one-word
//! thread-local with a constant initializer and no destructor: reaching it from a signal handler
//! takes no lock and registers nothing (`mmap` is a plain system call, safe in a handler), and a
//! program that links the runtime but never traps pays one word of thread-local storage per
//! thread, not the whole state (a thread-local that held it would be copied into every new
//! thread). The mapping lives as long as the process (a thread's exit cannot be observed from a
//! handler). `fork` copies it with the rest of the thread's memory; `exec` discards it.
//!
//! The engine's SIGILL handler runs with every signal blocked, so while it executes an
//! instruction nothing else on the thread touches the state; the handlers it calls run after
//! the state was saved ([`enter_handler`]).
//!
//! The work itself runs on a stack of its own, also in the thread-local: a signal handler may
//! run on a small alternate stack (Rust's threads have one of a few KiB for stack overflows),
//! and executing an instruction needs more (a tile row buffer, the configuration checks).

use std::cell::{Cell, UnsafeCell};

use amx_runtime::{Emulator, TileUnit};

/// Nested handler levels whose interrupted state is saved. Deeper levels run on the state they
/// interrupted (and may change it).
pub const SAVE_SLOTS: usize = 2;

/// Stack distance within which a recorded handler frame counts as the same stack (for telling
/// a handler left by `siglongjmp` from a handler on another stack).
const SAME_STACK: u64 = 8 << 20;

/// Bytes of the work stack.
const WORK: usize = 64 * 1024;

#[repr(C, align(16))]
struct WorkStack([u8; WORK]);

struct ThreadState {
    work: UnsafeCell<WorkStack>,
    /// A second work stack, for the engine's work in a signal handler that interrupted the
    /// engine working on the first (a patched site's fast path runs with signals unblocked,
    /// and a handler may itself execute AMX instructions).
    nested: UnsafeCell<WorkStack>,
    /// Work stacks in use (a use beyond the two runs where it is).
    working: Cell<u8>,
    unit: UnsafeCell<Emulator>,
    saved: UnsafeCell<[Emulator; SAVE_SLOTS]>,
    /// Stack pointer of each open level (0: the level saved nothing).
    /// Stack pointer of each open level; bit 0 set: the level saved the INIT state; 0: the
    /// level saved nothing (no free slot).
    frames: [Cell<u64>; 8],
    /// Open handler levels.
    depth: Cell<usize>,
}

thread_local! {
    /// This thread's state, once mapped.
    static STATE: Cell<*mut ThreadState> = const { Cell::new(std::ptr::null_mut()) };
}

/// Runs `f` on this thread's state, mapping it first if the thread has none. `None` while the
/// thread is being torn down or when the mapping fails (no memory: the instruction is then
/// reported as the SIGILL it raised).
fn with_state<R>(f: impl FnOnce(&ThreadState) -> R) -> Option<R> {
    let mut state = STATE.try_with(Cell::get).ok()?;
    if state.is_null() {
        state = map_state()?;
        STATE.try_with(|slot| slot.set(state)).ok()?;
    }
    // SAFETY: `state` was mapped and initialized by `map_state` for this thread and is never
    // unmapped; only shared references are made to it (mutation goes through its cells).
    Some(f(unsafe { &*state }))
}

/// Maps and initializes a thread's state.
fn map_state() -> Option<*mut ThreadState> {
    let size = std::mem::size_of::<ThreadState>();
    // SAFETY: an anonymous private mapping of fresh, zeroed memory; no existing memory is
    // affected.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return None;
    }
    let state = map.cast::<ThreadState>();
    // SAFETY: the mapping is page-aligned (more than ThreadState's alignment) and `size` bytes
    // long. Zero bytes are valid for every field but the emulators (the work stack, `false`,
    // zero counters); the emulators are written in place, without a temporary on the small
    // stack a handler may run on, before any reference to the state exists.
    unsafe {
        amx_runtime::engine::init_emulator(
            std::ptr::addr_of_mut!((*state).unit).cast::<Emulator>(),
        );
        let saved = std::ptr::addr_of_mut!((*state).saved).cast::<Emulator>();
        for i in 0..SAVE_SLOTS {
            amx_runtime::engine::init_emulator(saved.add(i));
        }
    }
    Some(state)
}

/// Runs `f` on this thread's emulated unit, on the work stack. `None` while the thread is
/// being torn down.
///
/// Must not be called from inside `f` (the engine never does: it is the handler's only entry to
/// the state, and the handler blocks every signal).
pub(crate) fn with_unit<R>(f: impl FnOnce(&mut Emulator) -> R) -> Option<R> {
    with_state(|s| {
        let mut f = Some(f);
        let mut out = None;
        on_work_stack(s, &mut || {
            if let Some(f) = f.take() {
                // SAFETY: the only other accesses are this function and `enter_handler`/
                // `leave_handler`, which never run while `f` does on this thread: the
                // engine's handler blocks every signal, and the handlers it calls run
                // outside `f`.
                out = Some(f(unsafe { &mut *s.unit.get() }));
            }
        });
        out
    })
    .flatten()
}

/// Calls `f` through a C-ABI function, for the stack switch.
extern "C" fn trampoline(data: *mut std::ffi::c_void) {
    // SAFETY: `on_work_stack` passes a pointer to a live `&mut dyn FnMut()`.
    let f = unsafe { &mut *data.cast::<&mut dyn FnMut()>() };
    f();
}

/// Runs `f` on the thread's first free work stack (or where it is, when both are in use).
fn on_work_stack(s: &ThreadState, f: &mut dyn FnMut()) {
    let level = s.working.get();
    let stack = match level {
        0 => s.work.get(),
        1 => s.nested.get(),
        _ => {
            f();
            return;
        }
    };
    s.working.set(level + 1);
    let top = stack as usize + WORK;
    let mut f: &mut dyn FnMut() = f;
    let data = &mut f as *mut &mut dyn FnMut() as *mut std::ffi::c_void;
    // SAFETY: the work stack is this thread's, 16-byte aligned at `top`, and unused (the
    // `working` count: a signal handler interrupting its user gets the next one); the callee is a C-ABI function that returns normally (nothing in the
    // engine unwinds), after which RSP comes back from r12, callee-saved.
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "call {f}",
            "mov rsp, r12",
            top = in(reg) top,
            f = in(reg) trampoline as extern "C" fn(*mut std::ffi::c_void),
            in("rdi") data,
            out("r12") _,
            clobber_abi("C"),
        );
    }
    s.working.set(level);
}

/// A tile's 1024 bytes on this thread (for `Hardware::tile_data`: XSAVE cannot be trapped).
pub(crate) fn tile(t: u8) -> Option<[u8; 1024]> {
    with_unit(|u| u.tile_bytes(t).copied()).flatten()
}

/// Opens a handler level at stack pointer `sp`: saves the state (while a slot is free) and
/// leaves the handler the INIT state, as Linux does for a signal handler.
pub(crate) fn enter_handler(sp: u64) {
    let _ = with_state(|s| on_work_stack(s, &mut || enter(s, sp)));
}

fn enter(s: &ThreadState, sp: u64) {
    // Levels opened at or below `sp` on the same stack were left by siglongjmp without a
    // `leave_handler`: their saved state is abandoned, as the silicon's would be.
    let mut depth = s.depth.get();
    while depth > 0 {
        let at = s.frames[(depth - 1).min(7)].get() & !1;
        if at != 0 && at <= sp && sp - at < SAME_STACK {
            depth -= 1;
        } else {
            break;
        }
    }
    let level = depth;
    // SAFETY: see `with_unit`; nothing else on this thread runs meanwhile.
    let (unit, saved) = unsafe { (&mut *s.unit.get(), &mut *s.saved.get()) };
    let configured = unit.is_configured();
    match saved.get_mut(level) {
        Some(slot) if configured => {
            copy(unit, slot);
            unit.tilerelease();
            s.frames[level].set(sp & !1);
        }
        // INIT is what the handler gets anyway: nothing to save, INIT to restore.
        Some(_) => s.frames[level].set(sp | 1),
        None => {
            if level < 8 {
                s.frames[level].set(0);
            }
        }
    }
    s.depth.set((level + 1).min(8));
}

/// Copies an emulator in place (no temporary: the stack it runs on is small).
fn copy(from: &Emulator, to: &mut Emulator) {
    // SAFETY: `Emulator` owns no heap memory and has no destructor (plain arrays and numbers),
    // so a bitwise copy is a valid value and overwriting `to` leaks nothing; the two are
    // distinct objects.
    unsafe { std::ptr::copy_nonoverlapping(from as *const Emulator, to as *mut Emulator, 1) };
}

/// Closes the innermost handler level: the interrupted state comes back.
pub(crate) fn leave_handler() {
    let _ = with_state(|s| on_work_stack(s, &mut || leave(s)));
}

fn leave(s: &ThreadState) {
    let depth = s.depth.get();
    if depth == 0 {
        return;
    }
    let level = depth - 1;
    s.depth.set(level);
    let at = s.frames[level].get();
    // SAFETY: see `with_unit`.
    let (unit, saved) = unsafe { (&mut *s.unit.get(), &*s.saved.get()) };
    match saved.get(level) {
        _ if at == 0 => {}
        _ if at & 1 == 1 => unit.tilerelease(),
        Some(slot) => copy(slot, unit),
        None => {}
    }
}
