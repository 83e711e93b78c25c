//! `vfork` for the preload. A `vfork` child runs in its parent's memory until it calls `exec` or
//! `_exit`, the parent's thread-local words included: without care its AMX instructions would
//! run on the parent's slot (replacing the parent's tiles, where on the silicon each task has
//! its own registers), and its mask changes would become the parent's view of the engine's
//! signals.
//!
//! [`amx_trap_vfork`] keeps the parent's slot pointer and view in registers across the system
//! call (the kernel keeps each task's registers; the stack is the child's to overwrite, so the
//! return address is held in a register too, as the C library's `vfork` does). The child clears
//! the slot pointer first thing: its first AMX instruction or handled signal maps a slot of its
//! own. The parent writes both words back when the call returns, and frees the slots the child
//! mapped: the child has left the address space by then (`exec` or `_exit`).
//!
//! A signal can arrive in between: the kernel delivers the parent's pending signals (the
//! child's SIGCHLD among them) on the way out of the system call, before the parent has
//! written its words back, and the child may take one before it has cleared the pointer.
//! [`settle`], which the signal entry calls first, does for the interrupted task what it was
//! about to do, from the registers in its context.

use std::sync::atomic::Ordering;

use crate::kframe::{reg, Ucontext};

core::arch::global_asm!(
    ".pushsection .text.amx_trap_vfork,\"ax\",@progbits",
    ".p2align 4",
    ".hidden amx_trap_vfork",
    ".globl amx_trap_vfork",
    ".type amx_trap_vfork, @function",
    "amx_trap_vfork:",
    "    pop rdx",
    "    mov rcx, qword ptr [rip + amx_trap_thread@GOTTPOFF]",
    "    mov rsi, qword ptr fs:[rcx]",
    "    mov rcx, qword ptr [rip + amx_trap_view@GOTTPOFF]",
    "    mov rdi, qword ptr fs:[rcx]",
    "    mov eax, 58",
    "    syscall",
    // Parent and child both come back here; RSI, RDI and RDX survive the system call.
    ".hidden amx_trap_vfork_returned",
    ".globl amx_trap_vfork_returned",
    "amx_trap_vfork_returned:",
    "    test rax, rax",
    "    jz 2f",
    "    mov rcx, qword ptr [rip + amx_trap_thread@GOTTPOFF]",
    "    mov qword ptr fs:[rcx], rsi",
    "    mov rcx, qword ptr [rip + amx_trap_view@GOTTPOFF]",
    "    mov qword ptr fs:[rcx], rdi",
    ".hidden amx_trap_vfork_restored",
    ".globl amx_trap_vfork_restored",
    "amx_trap_vfork_restored:",
    "    push rdx",
    "    cmp rax, -4095",
    "    jae 3f",
    "    push rax",
    "    mov edi, eax",
    "    call {reclaim}",
    "    pop rax",
    "    ret",
    "3:",
    "    mov edi, eax",
    "    neg edi",
    "    jmp {failed}",
    ".hidden amx_trap_vfork_child",
    ".globl amx_trap_vfork_child",
    "amx_trap_vfork_child:",
    "2:",
    "    mov rcx, qword ptr [rip + amx_trap_thread@GOTTPOFF]",
    "    mov qword ptr fs:[rcx], 0",
    ".hidden amx_trap_vfork_cleared",
    ".globl amx_trap_vfork_cleared",
    "amx_trap_vfork_cleared:",
    "    push rdx",
    "    ret",
    ".size amx_trap_vfork, . - amx_trap_vfork",
    ".popsection",
    failed = sym failed,
    reclaim = sym reclaim,
);

extern "C" {
    fn amx_trap_vfork_returned();
    fn amx_trap_vfork_restored();
    fn amx_trap_vfork_child();
    fn amx_trap_vfork_cleared();
}

/// The failed system call: `errno` set, -1 returned (to the caller's return address, which the
/// wrapper pushed back).
extern "C" fn failed(errno: i32) -> i32 {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = errno };
    -1
}

/// The child is gone from this address space (it called `exec` or `_exit`: only then does
/// `vfork` return): the slots it mapped here are free for the process's threads, and the files
/// the engine keeps are the parent's again where the child replaced them with its own.
extern "C" fn reclaim(child: i32) {
    crate::slot::release_process(child);
    crate::patch::MEM.vfork_child_left(child);
    crate::maps::MAPS.vfork_child_left(child);
}

/// Finishes, for a context the signal entry interrupted inside [`amx_trap_vfork`] after its
/// system call, what the task was about to do with its thread-local words (the parent's back
/// from RSI and RDI, or the child's slot pointer cleared), and moves the context past those
/// stores: the entry may yet give the task a slot (its first handled signal), which a store
/// of the old words after the handler would drop. `counted`: the slot pointer the entry read
/// before (it counted itself in that slot). Nothing elsewhere.
pub(crate) fn settle(uc: &mut Ucontext, counted: *mut crate::slot::Slot) {
    let rip = uc.rip();
    let at = |f: unsafe extern "C" fn()| f as *const () as u64;
    let returned = (at(amx_trap_vfork_returned)..at(amx_trap_vfork_restored)).contains(&rip);
    let child = (at(amx_trap_vfork_child)..at(amx_trap_vfork_cleared)).contains(&rip);
    if !returned && !child {
        return;
    }
    let now = if child || uc.gregs[reg::RAX] == 0 {
        uc.gregs[reg::RIP] = at(amx_trap_vfork_cleared);
        std::ptr::null_mut()
    } else {
        crate::tls::view().store(uc.gregs[reg::RDI], Ordering::Relaxed);
        uc.gregs[reg::RIP] = at(amx_trap_vfork_restored);
        uc.gregs[reg::RSI] as *mut crate::slot::Slot
    };
    if counted != now {
        // The entry counted itself in a slot that is not the task's: the parent's (in the
        // child), or one the child mapped (in the parent). The entry counts again in the
        // task's own, as in a slot it claims.
        // SAFETY: a non-null pointer in the thread's word is a slot (never unmapped).
        if let Some(slot) = unsafe { counted.as_ref() } {
            slot.nest.fetch_sub(1, Ordering::Relaxed);
        }
    }
    crate::tls::thread().store(now, Ordering::Release);
}
