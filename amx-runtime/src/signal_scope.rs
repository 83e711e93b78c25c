//! The runtime's tracked tile state across a signal handler.
//!
//! Linux enters a signal handler with the INIT tile state and puts the interrupted code's
//! state back when the handler returns (the tile state travels in the signal frame, as the
//! rest of the XSAVE state does). The runtime's per-thread copy of the configuration, which
//! every safe [`Hardware`](crate::Hardware) method checks against, knows nothing of that: a
//! handler that configured tiles would leave the copy describing its configuration while the
//! silicon runs the interrupted code's again, and a later checked store could then write more
//! rows than the buffer the check measured. A [`SignalScope`] keeps the copy in step: opened
//! at the top of a handler, it gives the handler the INIT state, and dropped as the handler
//! returns, it gives the interrupted code its own back.

use std::cell::Cell;
use std::marker::PhantomData;

use crate::thread_bound::ThreadBound;

thread_local! {
    /// Scopes open on this thread.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// While alive, the runtime's tracked tile state of this thread is the INIT state, as the
/// silicon's is in a signal handler; the tracked state before comes back when it drops. Open
/// one at the top of a signal handler that uses the runtime ([`signal_scope`]), and let it drop
/// last, as the handler returns. Scopes nest, and must drop in the reverse order of their
/// opening: one dropped out of order ends the process (with a message where the platform
/// can write one), as mixing the states of two handlers would otherwise break the checks the
/// safe API relies on.
///
/// ```
/// use amx_runtime::signal_scope;
///
/// extern "C" fn handler(_sig: i32) {
///     // SAFETY: a signal handler that returns normally, and the scope drops as it returns:
///     // Linux then gives the interrupted code its tile state back.
///     let _scope = unsafe { signal_scope() };
///     // ... AMX work with amx-runtime, from the INIT state ...
/// } // the interrupted code's tracked state is back
/// # // Called directly here, not as a handler: it loads nothing, so the unit is unchanged.
/// # handler(0);
/// ```
#[derive(Debug)]
#[must_use = "the interrupted code's tracked state comes back when the scope drops"]
pub struct SignalScope {
    saved: ([u8; 64], u64),
    depth: u32,
    _thread_bound: ThreadBound,
}

/// Opens a [`SignalScope`]. Allocates nothing and takes no lock: callable from a signal
/// handler.
///
/// # Safety
/// When the scope drops, the thread's tile unit must hold the state it held when the scope
/// opened: Linux restores it as a signal handler returns (drop the scope as the handler
/// returns normally, not before its last AMX instruction, and do not leave the handler by
/// `siglongjmp` with the scope alive), and `amx_trap::handler_scope` restores the engine's
/// emulated unit. Elsewhere, a configuration loaded or released inside the scope would stay on
/// the unit while the tracked copy said the earlier one was back, and the safe API's checks
/// would measure buffers against the wrong tiles.
pub unsafe fn signal_scope() -> SignalScope {
    let depth = DEPTH.with(|d| {
        let depth = d.get().wrapping_add(1);
        d.set(depth);
        depth
    });
    SignalScope {
        saved: crate::unit::take_tracked(),
        depth,
        _thread_bound: PhantomData,
    }
}

impl SignalScope {
    /// Ends the process unless this is the innermost scope open on the thread, as its drop
    /// does: for a wrapper that undoes state of its own first (`amx_trap::HandlerScope`).
    pub fn check_order(&self) {
        if DEPTH.with(Cell::get) != self.depth {
            out_of_order();
        }
    }
}

impl Drop for SignalScope {
    fn drop(&mut self) {
        self.check_order();
        crate::unit::give_back_tracked(self.saved);
        DEPTH.with(|d| d.set(self.depth.wrapping_sub(1)));
    }
}

/// A scope dropped before one opened after it: nothing can be put back consistently.
#[cold]
fn out_of_order() -> ! {
    #[cfg(unix)]
    {
        let msg = b"amx-runtime: a SignalScope (or amx_trap::HandlerScope) was dropped before a \
                    scope opened after it; scopes must drop in the reverse order of their \
                    opening\n";
        // SAFETY: write(2) of a static buffer to standard error; async-signal-safe.
        let _ = unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    }
    std::process::abort()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit::{give_back_tracked, take_tracked};

    /// The thread's tracked state, read (and left as it was).
    fn tracked() -> ([u8; 64], u64) {
        let now = take_tracked();
        give_back_tracked(now);
        now
    }

    /// A scope gives the INIT state and puts the configuration and its epoch back, so that a
    /// configuration loaded inside cannot be taken for the one outside; nested scopes alike.
    #[test]
    fn the_tracked_state_is_init_inside_and_back_after() {
        std::thread::spawn(|| {
            let mut outer = [0u8; 64];
            outer[0] = 1;
            outer[16] = 64;
            outer[48] = 16;
            give_back_tracked((outer, 7));
            {
                // SAFETY: no unit is touched inside: the tracked state alone is tested.
                let _scope = unsafe { signal_scope() };
                assert_eq!(tracked().0, [0; 64]);
                assert_ne!(tracked().1, 7);
                let mut inner = [0u8; 64];
                inner[0] = 1;
                inner[16] = 4;
                inner[48] = 1;
                give_back_tracked((inner, 100));
                {
                    // SAFETY: as above.
                    let _nested = unsafe { signal_scope() };
                    assert_eq!(tracked().0, [0; 64]);
                }
                assert_eq!(tracked(), (inner, 100));
            }
            assert_eq!(tracked(), (outer, 7));
        })
        .join()
        .unwrap();
    }
}
