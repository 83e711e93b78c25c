//! A multi-threaded GEMM keeps working in a `fork`ed child: the persistent pools of the parent
//! have no threads there, and a call that used them would wait forever (a pre-fork server that
//! multiplies in its workers would hang).
//!
//! The body forks, so it runs in a fresh single-threaded copy of this test binary (an
//! `#[ignore]`d body that the visible test runs in a child process): forking while other tests
//! run would copy their locks into the child.
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use amx_gemm::reference::{self, Outputs};
use amx_gemm::{Gemm, Int8, PackedB};
use amx_runtime::Backend;
use amx_test_support::{in_child, Child};

/// A 2-thread int8 GEMM of `64 x 96 x 128` on the emulator, checked exactly.
fn gemm_on_two_threads_is_right() -> bool {
    let (m, n, k) = (64, 96, 128);
    let a: Vec<i8> = (0..m * k).map(|i| (i * 7 % 23) as i8 - 11).collect();
    let b: Vec<i8> = (0..k * n).map(|i| (i * 5 % 19) as i8 - 9).collect();
    let Ok(packed) = PackedB::<Int8>::pack(&b, k, n, n) else {
        return false;
    };
    let mut c = vec![0i32; m * n];
    let ran = Gemm::new()
        .threads(2)
        .backend(Backend::Emulated)
        .run(m, &a, k, &packed, &mut c, n);
    ran.is_ok_and(|stats| stats.threads == 2)
        && reference::verify::<Int8>(m, n, k, &a, k, &b, n, None, &c, n, Outputs::All).is_ok()
}

/// Waits for `pid` at most `limit`; `None` if it is still running then (it is killed).
fn wait_with_limit(pid: libc::pid_t, limit: Duration) -> Option<libc::c_int> {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: `pid` is a child of this process and `status` a live c_int.
        let waited = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if waited == pid {
            return Some(status);
        }
        assert_eq!(waited, 0, "waitpid: {}", std::io::Error::last_os_error());
        if start.elapsed() > limit {
            // SAFETY: kill and reap our own child; no memory is involved.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[ignore = "forks; run by gemm_in_a_forked_child_finishes in a process of its own"]
fn fork_body() {
    if !in_child() {
        return;
    }
    // The parent's pool of two workers exists before the fork.
    assert!(gemm_on_two_threads_is_right(), "the parent's GEMM");
    // SAFETY: this process runs this test alone (`--test-threads=1` and `--exact`), so no other
    // thread of ours holds a lock the child could need; the pool's workers are idle between
    // calls and hold none. The child leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = if gemm_on_two_threads_is_right() { 0 } else { 1 };
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let status = wait_with_limit(pid, Duration::from_secs(30))
        .expect("the forked child's 2-thread GEMM hung (killed after 30 s)");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the forked child's GEMM failed (status {status:#x})"
    );
    // And the parent's pool still works.
    assert!(
        gemm_on_two_threads_is_right(),
        "the parent's GEMM after the fork"
    );
}

#[test]
fn gemm_in_a_forked_child_finishes() {
    let out = Child::new("fork_body")
        .timeout(Duration::from_secs(90))
        .run();
    assert!(
        !out.timed_out,
        "the fork test did not finish in 90 s:\n{out}"
    );
    out.assert_passed();
}
