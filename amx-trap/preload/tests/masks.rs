//! Masks, pending signals and the calls that wait for them, in a program without AMX
//! instructions (`tests/c/masks.c`): every line the same as without the library (promises 1
//! and 2). Runs everywhere (on a CPU with AMX with the engine forced on).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::time::Duration;

mod support;
use support::*;

fn same_as_without(mode: &str) {
    let Some(prog) = build("masks.c", &[]) else {
        return;
    };
    let limit = Duration::from_secs_f64(30.0 * slowness());
    let native = Program::native(&prog, &[mode]).limit(limit).run();
    let preloaded = Program::preloaded(&prog, &[mode]).limit(limit).run();
    assert!(native.ok(), "{mode} without the library: {native}");
    assert_eq!(
        (preloaded.status, &preloaded.stdout),
        (native.status, &native.stdout),
        "{mode} under the library differs:\n{preloaded}\nwithout it:\n{native}"
    );
}

/// A signal the wait's mask blocks, sent during `ppoll`, `pselect`, `epoll_pwait` or
/// `sigsuspend`, is handled as the call returns (it was lost: the engine took the wait's mask
/// as the one in effect when the kernel delivered it on the way out).
#[test]
fn a_signal_blocked_by_a_waits_mask_comes_when_the_wait_returns() {
    same_as_without("waits");
}

/// `sigblock`, `siggetmask` and `sigsetmask` change the mask the program sees, as
/// `sigprocmask` does (the C library makes them with its internal call; a shell's child
/// unblocked everything with `sigsetmask(0)` and kept SIGSEGV blocked).
#[test]
fn the_bsd_mask_calls_are_the_programs() {
    same_as_without("bsd");
}

/// SIGSEGV and SIGTRAP sent while blocked stay pending, with the default action and ignored
/// alike; ignoring one discards it.
#[test]
fn blocked_engine_signals_stay_pending_whatever_their_action() {
    same_as_without("blocked");
}

/// Masks and actions the kernel cannot read or write: EFAULT, never a fault.
#[test]
fn masks_and_actions_at_bad_addresses_are_efault() {
    same_as_without("efault");
}

/// An action's mask as the kernel keeps it: without SIGKILL and SIGSTOP, whatever the program
/// gave (a JVM's crash report prints each handler's mask).
#[test]
fn an_actions_mask_never_holds_sigkill_or_sigstop() {
    same_as_without("stored");
}
