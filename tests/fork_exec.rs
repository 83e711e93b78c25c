//! The permission across `fork` and `exec`, through the library's own entry points.
//!
//! `amx-runtime/tests/permit_inherit.rs` shows the kernel's rule with the raw permission calls:
//! a forked child inherits the permission, an exec'd program starts without it. These tests
//! show that the library handles both without the user asking for anything:
//!
//! - a forked child uses the tiles (`configure_on(Backend::Hardware, ..)` and a dot product)
//!   with the permission it inherited;
//! - an exec'd child, which starts without the permission, gets it from `Hardware::new()` and
//!   from `configure()` (with `AMX_BACKEND=hardware`) by themselves, and its kernels work.
//!
//! Where AMX is unusable both still run and check that the child fails exactly as the parent
//! does, with an error and not a crash.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use amx_runtime::permit::{permission_state, PermissionState};
use amx_runtime::{configure, configure_on, Backend, Hardware, TileConfig, TileUnit};
use amx_test_support::{in_child, Child};

/// C (t0, 4 x 4 i32) += A (t1, 4 x 8 bytes) x B (t2, 2 x 16 bytes).
fn config() -> TileConfig {
    TileConfig::builder()
        .tile(0, 4, 16)
        .tile(1, 4, 8)
        .tile(2, 2, 16)
        .build()
        .expect("a valid configuration")
}

/// The kernel's inputs, and C as plain Rust computes it (docs/semantics.md section 9).
fn inputs() -> ([u8; 32], [u8; 32], [u8; 64]) {
    let a: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ 0x5A);
    let b: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(91).wrapping_add(7));
    let mut c = [0u8; 64];
    for m in 0..4 {
        for n in 0..4 {
            let mut acc = 0i32;
            for k in 0..2 {
                for i in 0..4 {
                    let x = i32::from(a[m * 8 + 4 * k + i] as i8);
                    let y = i32::from(b[k * 16 + 4 * n + i] as i8);
                    acc = acc.wrapping_add(x * y);
                }
            }
            c[(m * 4 + n) * 4..(m * 4 + n) * 4 + 4].copy_from_slice(&acc.to_le_bytes());
        }
    }
    (a, b, c)
}

/// Runs the kernel on `unit` (configured with [`config`]) and compares C with the reference.
/// Allocates nothing, so it may run in a forked child of this multi-threaded process.
fn kernel_is_right(unit: &mut dyn TileUnit) -> bool {
    let (a, b, expected) = inputs();
    let mut c = [0u8; 64];
    let ran = unit.tilezero(0).is_ok()
        && unit.tileloadd(1, &a, 8).is_ok()
        && unit.tileloadd(2, &b, 16).is_ok()
        && unit.tdpbssd(0, 1, 2).is_ok()
        && unit.tilestored(0, &mut c, 16).is_ok();
    ran && c == expected
}

#[test]
fn the_reference_kernel_is_right_on_the_emulator() {
    let mut tiles = configure_on(Backend::Emulated, &config()).unwrap();
    assert!(kernel_is_right(&mut *tiles));
}

#[test]
fn a_forked_child_uses_the_tiles_with_the_inherited_permission() {
    let parent = Hardware::new();
    match &parent {
        Ok(_) => assert_eq!(permission_state(), PermissionState::Granted),
        Err(why) => println!("AMX is unusable here ({why}): checking that the child agrees"),
    }
    let cfg = config();
    // SAFETY: the child only runs code that takes no lock another thread of this test process
    // could hold (no printing; the library's state is plain thread-locals and initialized
    // once-cells; the kernel allocates nothing) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = match &parent {
            // The permission came with the fork: no request, and the tiles work.
            Ok(_) if permission_state() != PermissionState::Granted => 10,
            Ok(_) => match configure_on(Backend::Hardware, &cfg) {
                Ok(mut tiles) => {
                    if kernel_is_right(&mut *tiles) {
                        0
                    } else {
                        11
                    }
                }
                Err(_) => 12,
            },
            // No AMX: the child gets the parent's answer, as an error.
            Err(why) => match Hardware::new() {
                Err(again) if again == *why => 0,
                _ => 13,
            },
        };
        // SAFETY: ends the child at once, without running the parent's atexit handlers or
        // unwinding the test harness's threads, which do not exist in the child.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: `pid` is this process's child and `status` a live c_int.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid: {}", std::io::Error::last_os_error());
    assert!(
        libc::WIFEXITED(status),
        "the forked child died (status {status:#x}, signal {})",
        libc::WTERMSIG(status)
    );
    let meaning = match libc::WEXITSTATUS(status) {
        0 => "ok",
        10 => "the child did not inherit the permission",
        11 => "the child's kernel gave a wrong result",
        12 => "the child could not configure the tiles",
        13 => "the child's Hardware::new() disagreed with the parent's",
        _ => "unknown",
    };
    assert_eq!(libc::WEXITSTATUS(status), 0, "{meaning}");
}

/// Which entry point the exec child tries first: `new` (Hardware::new, then configure) or
/// `configure` (configure alone).
const MODE_ENV: &str = "AMX_RS_FORK_EXEC_MODE";

/// The exec child branch; a no-op outside the child process. Prints what it sees.
#[test]
#[ignore = "run by the exec tests in a child process"]
fn exec_child() {
    if !in_child() {
        return;
    }
    println!("exec child: before: {:?}", permission_state());
    if std::env::var(MODE_ENV).as_deref() == Ok("new") {
        match Hardware::new() {
            Ok(_) => println!("exec child: Hardware::new: ok"),
            Err(why) => println!("exec child: Hardware::new: error: {why}"),
        }
        println!("exec child: after Hardware::new: {:?}", permission_state());
    }
    // The process backend comes from AMX_BACKEND=hardware, set by the parent.
    match configure(&config()) {
        Ok(mut tiles) => println!(
            "exec child: configure on {}: kernel right: {}",
            tiles.backend(),
            kernel_is_right(&mut *tiles)
        ),
        Err(e) => println!("exec child: configure: error: {e}"),
    }
    println!("exec child: after configure: {:?}", permission_state());
}

/// Re-executes this test binary as the exec child (with `AMX_BACKEND=hardware`) and returns its
/// standard output.
fn run_exec_child(mode: &str) -> String {
    let out = Child::new("exec_child")
        .env(MODE_ENV, mode)
        .env("AMX_BACKEND", "hardware")
        .run();
    println!("{out}");
    out.assert_passed();
    out.stdout
}

#[test]
fn an_exec_child_gets_the_permission_from_hardware_new() {
    let parent = Hardware::new();
    let stdout = run_exec_child("new");
    match parent {
        Ok(_) => {
            // exec cleared the permission; Hardware::new() asked again by itself.
            assert!(
                stdout.contains("exec child: before: NotRequested"),
                "{stdout}"
            );
            assert!(stdout.contains("exec child: Hardware::new: ok"), "{stdout}");
            assert!(
                stdout.contains("exec child: after Hardware::new: Granted"),
                "{stdout}"
            );
            assert!(
                stdout.contains("exec child: configure on hardware: kernel right: true"),
                "{stdout}"
            );
        }
        Err(why) => {
            println!("AMX is unusable here ({why}): checking that the child fails the same way");
            assert!(
                stdout.contains(&format!("exec child: Hardware::new: error: {why}")),
                "{stdout}"
            );
            assert!(
                stdout.contains(&format!(
                    "exec child: configure: error: the hardware backend was asked for, but {why}"
                )),
                "{stdout}"
            );
        }
    }
}

#[test]
fn an_exec_child_gets_the_permission_from_configure() {
    let parent = Hardware::new();
    let stdout = run_exec_child("configure");
    match parent {
        Ok(_) => {
            // Nothing but configure(): it chose the hardware backend and asked by itself.
            assert!(
                stdout.contains("exec child: before: NotRequested"),
                "{stdout}"
            );
            assert!(
                stdout.contains("exec child: configure on hardware: kernel right: true"),
                "{stdout}"
            );
            assert!(
                stdout.contains("exec child: after configure: Granted"),
                "{stdout}"
            );
        }
        Err(why) => {
            println!("AMX is unusable here ({why}): checking that the child fails the same way");
            assert!(
                stdout.contains(&format!(
                    "exec child: configure: error: the hardware backend was asked for, but {why}"
                )),
                "{stdout}"
            );
        }
    }
}
