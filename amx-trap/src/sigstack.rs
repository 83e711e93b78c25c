//! Alternate signal stack sizes as Linux on an AMX CPU reports and enforces them.
//!
//! On the silicon the kernel's smallest signal stack (`AT_MINSIGSTKSZ`) has room for the tile
//! state, and once a process holds the tile-data permission the kernel keeps every alternate
//! stack large enough for a frame carrying it:
//!
//! - `sigaltstack` refuses a stack too small for that frame with `ENOMEM`
//!   (`sigaltstack_size_valid`, arch/x86/kernel/signal.c), unless the call changes nothing.
//!   The kernel's reported minimum keeps room for a 32-bit frame's legacy FPU state that the
//!   check leaves out: a kernel built with 32-bit emulation (as distributions build theirs)
//!   accepts a stack from [`LEGACY_FPU`] - 1 bytes under `AT_MINSIGSTKSZ`;
//! - `arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)` refuses with `ENOSPC` while any thread of
//!   the process has an alternate stack smaller than `AT_MINSIGSTKSZ` (`validate_sigaltstack`,
//!   arch/x86/kernel/fpu/xstate.c). A stack set before the request is the usual victim: a
//!   fixed `SIGSTKSZ` (8 KiB) is too small.
//!
//! The engine's frames carry the tile state too (`deliver::TILE_AREA`), so under the preload
//! it reports and enforces the same rules with its own size: the host kernel's smallest stack
//! plus [`EXTRA`] (about what a Sapphire Rapids adds, 8312 bytes). A stack the program sizes
//! from the reported minimum then fits every frame the engine builds, as it fits the kernel's
//! on the silicon. A program that installs the engine itself keeps the host's sizes: its
//! threads' stacks were sized by them (Rust's standard library sizes every thread's from
//! `AT_MINSIGSTKSZ`), and refusing the permission to such a program would refuse it to all.
//!
//! The kernel looks at every thread's alternate stack, which a process cannot read for
//! another thread: the preload's `sigaltstack` records each thread's size in a table here.
//! Everything in this module is async-signal-safe (atomics and raw system calls):
//! `sigaltstack` is, and a handler may call it.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use crate::kframe::{Stack, SS_DISABLE};
use crate::sys;

/// What the engine's frames need beyond the kernel's: the tile state, and the 64-byte
/// alignment it is placed at.
pub const EXTRA: usize = crate::deliver::TILE_AREA + 64;

/// `MINSIGSTKSZ` as the kernel checks it (below it, `ENOMEM` in any case).
const KERNEL_MINIMUM: usize = 2048;

/// The legacy FPU state of a 32-bit frame (`struct fregs_state`), counted in
/// `AT_MINSIGSTKSZ` and not in `sigaltstack`'s check.
pub const LEGACY_FPU: usize = 112;

/// The host kernel's smallest signal stack, once the preload models the silicon's sizes; 0
/// while it does not.
static HOST_MINIMUM: AtomicUsize = AtomicUsize::new(0);

/// Permission requests checking the stacks now (the kernel holds a lock across the check and
/// the grant; a stack installed meanwhile is refused as if the permission were held).
static CLAIMS: AtomicUsize = AtomicUsize::new(0);

/// One thread's alternate stack: its thread id (0: a free entry) and size.
struct Entry {
    tid: AtomicI32,
    size: AtomicUsize,
}

/// The threads' alternate stacks. A thread beyond them goes unrecorded (the permission is
/// then granted whatever its stack).
static TABLE: [Entry; 1024] = [const {
    Entry {
        tid: AtomicI32::new(0),
        size: AtomicUsize::new(0),
    }
}; 1024];

/// Models the silicon's sizes from now on, on a host whose smallest signal stack is
/// `host_minimum` bytes (`AT_MINSIGSTKSZ`). Only while the engine executes every AMX
/// instruction: where the CPU has AMX the kernel's own sizes already count the tile state.
pub fn model(host_minimum: usize) {
    if crate::is_active() && crate::emulating() && host_minimum != 0 {
        HOST_MINIMUM.store(host_minimum, Ordering::Release);
    }
}

/// The smallest signal stack of the modelled CPU (`AT_MINSIGSTKSZ`, `_SC_MINSIGSTKSZ`), or
/// `None` when the host's sizes stand.
pub fn minimum() -> Option<usize> {
    match HOST_MINIMUM.load(Ordering::Acquire) {
        0 => None,
        host => Some(host.saturating_add(EXTRA)),
    }
}

/// Whether `sigaltstack` refuses (`ENOMEM`) an alternate stack of `size` bytes now: the
/// permission is held, or being requested, and the frame with tile state does not fit.
/// Called after [`record`]ing the size, so that a concurrent request sees it.
fn refuses(size: usize) -> bool {
    let Some(min) = minimum() else {
        return false;
    };
    size >= KERNEL_MINIMUM
        && size + LEGACY_FPU <= min
        && (CLAIMS.load(Ordering::SeqCst) != 0 || crate::permission_granted())
}

/// This thread's alternate stack as the kernel holds it.
fn current() -> Stack {
    let mut now = Stack::default();
    // SAFETY: sigaltstack with no new stack writes the 24-byte stack_t to a live local.
    unsafe { sys::call(libc::SYS_sigaltstack, &[0, &mut now as *mut Stack as u64]) };
    now
}

/// The size the kernel counts for `stack` (0 when disabled).
fn size_of(stack: &Stack) -> usize {
    if stack.flags & SS_DISABLE != 0 {
        0
    } else {
        stack.size as usize
    }
}

/// A `sigaltstack` with a new stack, under the preload: `apply` makes the C library's call
/// (`true` when it succeeded, `errno` set otherwise). The kernel's own rules come first (a
/// thread running on its alternate stack cannot change it, `EPERM`; bad flags, `EINVAL`; an
/// unreadable `stack_t`, `EFAULT`); then the model's: a stack the frame with tile state does
/// not fit is put back as it was and refused, `Err(Some(ENOMEM))`, unless the call changed
/// nothing, as the kernel does. `Err(None)`: the C library's call failed.
///
/// The program's signals stay blocked from the call to the verdict, so that no handler runs
/// on a stack about to be refused.
pub fn change(apply: impl FnOnce() -> bool) -> Result<(), Option<i32>> {
    if minimum().is_none() {
        return if apply() { Ok(()) } else { Err(None) };
    }
    // A sandbox refusing the mask leaves the call unprotected, never the mask changed.
    let held = sys::try_sigprocmask(libc::SIG_BLOCK, !crate::signals::ENGINE).ok();
    let before = current();
    let verdict = if !apply() {
        Err(None)
    } else {
        let now = current();
        let size = size_of(&now);
        record(size);
        let unchanged = (now.sp, now.size, now.flags) == (before.sp, before.size, before.flags);
        if !unchanged && refuses(size) {
            // SAFETY: sigaltstack reads the 24-byte stack_t, a live local; no old value.
            unsafe { sys::call(libc::SYS_sigaltstack, &[&before as *const Stack as u64, 0]) };
            record(size_of(&before));
            Err(Some(libc::ENOMEM))
        } else {
            Ok(())
        }
    };
    if let Some(mask) = held {
        let _ = sys::try_sigprocmask(libc::SIG_SETMASK, mask);
    }
    verdict
}

/// Records that this thread's alternate stack is now `size` bytes (0: none).
fn record(size: usize) {
    if minimum().is_none() {
        return;
    }
    let tid = sys::gettid();
    if let Some(e) = TABLE.iter().find(|e| e.tid.load(Ordering::SeqCst) == tid) {
        e.size.store(size, Ordering::SeqCst);
        if size == 0 {
            e.tid.store(0, Ordering::SeqCst);
        }
        return;
    }
    if size == 0 {
        return;
    }
    for reclaim in [false, true] {
        for e in &TABLE {
            let held = e.tid.load(Ordering::SeqCst);
            let free = held == 0 || (reclaim && !alive(held));
            if free
                && e.tid
                    .compare_exchange(held, tid, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                e.size.store(size, Ordering::SeqCst);
                return;
            }
        }
    }
}

/// Forgets this thread's entry: a new thread starts without an alternate stack (its thread id
/// may be an ended thread's).
pub fn forget_thread() {
    if minimum().is_some() {
        record(0);
    }
}

/// Whether thread `tid` of this process still runs.
fn alive(tid: i32) -> bool {
    sys::tgkill(sys::getpid(), tid, 0) != Err(libc::ESRCH)
}

/// Checks the stacks for a tile-data permission request: `Err(ENOSPC)` while a thread has an
/// alternate stack the frame with tile state does not fit. On `Ok`, the caller grants the
/// permission and then calls [`release`].
pub(crate) fn claim() -> Result<(), i32> {
    let Some(min) = minimum() else {
        return Ok(());
    };
    CLAIMS.fetch_add(1, Ordering::SeqCst);
    let small = |size: usize| size != 0 && size < min;
    let me = sys::gettid();
    // The caller's own stack as the kernel holds it (whatever the table says).
    let mut refused = small(size_of(&current()));
    for e in &TABLE {
        if refused {
            break;
        }
        let tid = e.tid.load(Ordering::SeqCst);
        if tid != 0 && tid != me && small(e.size.load(Ordering::SeqCst)) && alive(tid) {
            refused = true;
        }
    }
    if refused {
        release();
        return Err(libc::ENOSPC);
    }
    Ok(())
}

/// Ends a [`claim`].
pub(crate) fn release() {
    CLAIMS.fetch_sub(1, Ordering::SeqCst);
}
