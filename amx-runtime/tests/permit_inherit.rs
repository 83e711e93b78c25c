//! The permission is per process: a `fork` child inherits it, an `exec`ed program starts without
//! it. Where the CPU lacks AMX both run under the trap engine (which answers the permission as
//! Linux on AMX does; the exec'd child installs its own, which starts without the permission),
//! and skip, saying why, where neither the kernel nor the engine can grant it.

#![cfg(target_os = "linux")]

use amx_runtime::permit::{permission_state, request_permission, PermissionState};
use amx_test_support::{in_child, skip, Child, Kind};

/// Tells the exec child that the parent ran under the trap engine.
const TRAPPED_ENV: &str = "AMX_RUNTIME_PERMIT_EXEC_TRAPPED";

/// Requests the permission in this process (installing the trap engine where the kernel
/// cannot grant it), or skips the test.
fn granted_here() -> bool {
    let mut result = request_permission();
    #[cfg(target_arch = "x86_64")]
    if result.is_err() && amx_trap::install().is_ok() {
        result = request_permission();
    }
    match result {
        Ok(()) => {
            assert_eq!(permission_state(), PermissionState::Granted);
            true
        }
        Err(e) => {
            skip(
                Kind::Hardware,
                format!("the permission cannot be granted here: {e}"),
            );
            false
        }
    }
}

#[test]
fn fork_child_inherits_the_permission() {
    if !granted_here() {
        return;
    }
    // SAFETY: the child only makes system calls (arch_prctl, _exit): no allocation, no lock,
    // nothing that another thread of this multi-threaded test process could hold at fork time.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = match permission_state() {
            PermissionState::Granted => 0,
            PermissionState::NotRequested => 1,
            _ => 2,
        };
        // SAFETY: _exit ends the child at once, without running the parent's atexit handlers
        // or unwinding the test harness's threads, which do not exist in the child.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: `pid` is our own child and `status` a live c_int.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid: {}", std::io::Error::last_os_error());
    assert!(
        libc::WIFEXITED(status),
        "the fork child died: status {status:#x}"
    );
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "the fork child saw no permission (1 = NotRequested, 2 = other)"
    );
}

/// The exec child branch; a no-op outside the child process.
#[test]
#[ignore = "run by exec_clears_the_permission in a child process"]
fn exec_child() {
    if !in_child() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::env::var(TRAPPED_ENV).is_ok_and(|v| v == "1") {
        amx_trap::install().unwrap();
    }
    println!("exec child: before: {:?}", permission_state());
    println!("exec child: request: {:?}", request_permission());
    println!("exec child: after: {:?}", permission_state());
}

#[test]
fn exec_clears_the_permission() {
    if !granted_here() {
        return;
    }
    let trapped = if amx_trap::is_active() { "1" } else { "" };
    let out = Child::new("exec_child").env(TRAPPED_ENV, trapped).run();
    println!("{out}");
    out.assert_passed();
    let stdout = &out.stdout;
    assert!(
        stdout.contains("exec child: before: NotRequested"),
        "{stdout}"
    );
    assert!(stdout.contains("exec child: request: Ok(())"), "{stdout}");
    assert!(stdout.contains("exec child: after: Granted"), "{stdout}");
}
