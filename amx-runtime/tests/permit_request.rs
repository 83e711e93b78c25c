//! The permission request: a refusal is returned (never a crash), the request is idempotent and
//! thread-safe.
//!
//! The refusal test re-executes this test binary as a child process that installs a tiny
//! alternate signal stack, the classic cause of a refusal, so the parent process is unaffected.

#![cfg(target_os = "linux")]

use amx_runtime::detect::detect;
use amx_runtime::permit::{permission_state, request_permission, PermissionState};
use amx_test_support::{in_child, Child};

/// MINSIGSTKSZ: the smallest alternate signal stack Linux accepts, far below the ~11 KiB signal
/// frame that tile data needs.
const TINY_ALTSTACK: usize = 2048;

/// Installs `stack` as this thread's alternate signal stack and returns the previous one.
fn set_altstack(stack: &libc::stack_t) -> libc::stack_t {
    // SAFETY: an all-zero stack_t is a valid value of this plain C struct.
    let mut old: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live stack_t values; the new stack's memory stays alive
    // until the caller restores the old stack (see `child_with_tiny_altstack`).
    let rc = unsafe { libc::sigaltstack(stack, &mut old) };
    assert_eq!(rc, 0, "sigaltstack: {}", std::io::Error::last_os_error());
    old
}

/// The child branch; a no-op outside the child process.
#[test]
#[ignore = "run by a_refusal_is_returned_not_raised in a child process"]
fn child_with_tiny_altstack() {
    if !in_child() {
        return;
    }
    let mut memory = vec![0u8; TINY_ALTSTACK];
    let tiny = libc::stack_t {
        ss_sp: memory.as_mut_ptr().cast(),
        ss_flags: 0,
        ss_size: TINY_ALTSTACK,
    };
    let old = set_altstack(&tiny);
    let result = request_permission();
    set_altstack(&old);
    drop(memory);

    println!("child: request_permission with a {TINY_ALTSTACK}-byte sigaltstack: {result:?}");
    let err = result.expect_err("the kernel granted the permission despite a 2 KiB sigaltstack");
    println!("child: error: {err}");
    if detect().is_usable() {
        // AMX is there: the tiny alternate stack is the reason.
        assert_eq!(err.errno, libc::ENOSPC, "{err}");
        // The refusal is not remembered: without the tiny stack the request succeeds.
        let again = request_permission();
        println!("child: request_permission after restoring the stack: {again:?}");
        assert_eq!(again, Ok(()));
        assert_eq!(permission_state(), PermissionState::Granted);
    } else {
        // No AMX: the kernel refuses whatever the stack (EOPNOTSUPP on the build machine).
        println!(
            "child: AMX is unavailable here: {:?}",
            detect().unavailable()
        );
    }
}

#[test]
fn a_refusal_is_returned_not_raised() {
    let out = Child::new("child_with_tiny_altstack").run();
    println!("{out}");
    out.assert_passed();
    let stdout = &out.stdout;
    assert!(
        stdout.contains("with a 2048-byte sigaltstack: Err(PermissionError { errno: "),
        "{stdout}"
    );
    assert!(
        stdout.contains("child: error: arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) failed with "),
        "{stdout}"
    );
}

#[test]
fn request_is_idempotent_and_thread_safe() {
    let first = request_permission();
    println!("request_permission: {first:?}");
    if let Err(e) = &first {
        println!("refused: {e}");
    }
    let results: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(request_permission))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().expect("request_permission panicked"))
        .collect();
    assert!(
        results.iter().all(|r| *r == first),
        "{results:?} vs {first:?}"
    );
    assert_eq!(request_permission(), first);

    match first {
        Ok(()) => assert_eq!(permission_state(), PermissionState::Granted),
        Err(e) => {
            assert_ne!(permission_state(), PermissionState::Granted);
            // The errnos the kernel (or a seccomp filter) gives; EOPNOTSUPP without AMX.
            let known = [
                libc::EOPNOTSUPP,
                libc::EINVAL,
                libc::ENOSPC,
                libc::EPERM,
                libc::ENOSYS,
            ];
            assert!(known.contains(&e.errno), "{e}");
            if detect().unavailable() == Some(amx_runtime::Unavailable::NoAmxTile) {
                println!("no AMX here: the kernel answers {:?}", e.errno_name());
            }
        }
    }
}
