//! The engine's per-thread words, in initial-exec thread-local storage: two instructions reach
//! them from assembly (the signal entry and the patched sites' stubs read them before any Rust
//! code runs), and from Rust with no call into the dynamic loader (`__tls_get_addr` of the
//! general-dynamic model may take the loader's lock).
//!
//! - `amx_trap_thread`: the thread's [`Slot`](crate::slot::Slot) (null until the thread first
//!   needs one);
//! - `amx_trap_view`: the signals among the engine's own (SIGILL, SIGSEGV, SIGBUS, SIGTRAP,
//!   SIGSYS) that the program believes blocked on this thread (see `signals.rs`);
//! - `amx_trap_wait`: while the thread waits with a mask of its own (`sigsuspend`, `ppoll`,
//!   ...): a flag, and the program's mask during the wait. The kernel's frame of a signal that
//!   ends such a wait holds the mask from before it; the handler runs with the wait's.
//!
//! Both start at zero in every new thread, are copied by `fork`, and are dropped with the
//! thread; a thread's slot outlives it and is reused (slot.rs).

use std::sync::atomic::{AtomicPtr, AtomicU64};

// The variables, 8 bytes each, zero in every thread. Hidden: a process may hold two copies of
// the engine (a program's own and a preloaded library's), each with its own.
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".hidden amx_trap_thread",
    ".globl amx_trap_thread",
    ".type amx_trap_thread, @object",
    ".size amx_trap_thread, 8",
    "amx_trap_thread:",
    ".zero 8",
    ".hidden amx_trap_view",
    ".globl amx_trap_view",
    ".type amx_trap_view, @object",
    ".size amx_trap_view, 8",
    "amx_trap_view:",
    ".zero 8",
    ".hidden amx_trap_wait",
    ".globl amx_trap_wait",
    ".type amx_trap_wait, @object",
    ".size amx_trap_wait, 16",
    "amx_trap_wait:",
    ".zero 16",
    ".popsection",
);

/// This thread's slot pointer, as an atomic (a signal handler on the same thread may set it
/// between a read and a write of the code it interrupted).
#[inline]
pub(crate) fn thread() -> &'static AtomicPtr<crate::slot::Slot> {
    let at: usize;
    // SAFETY: reads the thread pointer (fs:0 holds it on x86-64 Linux) and adds the variable's
    // offset from the GOT; no memory is written. The variable lives as long as the thread, and
    // nothing of the engine outlives its thread's use of it ('static stands for "this thread").
    unsafe {
        core::arch::asm!(
            "mov {at}, qword ptr fs:0",
            "add {at}, qword ptr [rip + amx_trap_thread@GOTTPOFF]",
            at = out(reg) at,
            options(nostack, readonly, preserves_flags),
        );
        &*(at as *const AtomicPtr<crate::slot::Slot>)
    }
}

/// While this thread waits with a mask of its own: [flag, the program's mask meanwhile].
#[inline]
pub(crate) fn wait() -> &'static [AtomicU64; 2] {
    let at: usize;
    // SAFETY: as in `thread`.
    unsafe {
        core::arch::asm!(
            "mov {at}, qword ptr fs:0",
            "add {at}, qword ptr [rip + amx_trap_wait@GOTTPOFF]",
            at = out(reg) at,
            options(nostack, readonly, preserves_flags),
        );
        &*(at as *const [AtomicU64; 2])
    }
}

/// This thread's view of the engine's signals.
#[inline]
pub(crate) fn view() -> &'static AtomicU64 {
    let at: usize;
    // SAFETY: as in `thread`.
    unsafe {
        core::arch::asm!(
            "mov {at}, qword ptr fs:0",
            "add {at}, qword ptr [rip + amx_trap_view@GOTTPOFF]",
            at = out(reg) at,
            options(nostack, readonly, preserves_flags),
        );
        &*(at as *const AtomicU64)
    }
}
