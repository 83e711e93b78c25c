//! The library built without optimization, as cargo's dev profile builds it (`cargo build`, or
//! a user's `cargo test` of a crate that calls `amx_trap::install()`): unoptimized code gives
//! every inlined temporary a stack slot of its own, and the engine's work stack must hold that
//! too. The tests' own library is built with optimization (the workspace's test profile).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::path::Path;
use std::process::Command;

mod support;
use support::*;

/// AMX programs under the library built by `cargo build` (dev profile, opt-level 0) into a
/// directory of the test's: products on threads of the program's own, and handlers nested on a
/// 64 KiB alternate stack above the interrupted frame running AMX (a patched site would run
/// the unoptimized engine on that stack: such a build does not patch).
#[test]
fn an_unoptimized_library_runs_amx_programs() {
    if !engine_runs_amx() {
        return;
    }
    let (Some(threads), Some(frames)) = (build("threads.c", &[]), build("frames.c", &[])) else {
        return;
    };
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dev-profile");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--offline", "--locked", "--profile", "dev"])
        .args(["-p", "amx-trap-preload", "--target-dir"])
        .arg(&target)
        .current_dir(&workspace)
        .env("CARGO_PROFILE_DEV_OPT_LEVEL", "0")
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo build of the dev profile failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let library = target.join("debug/libamx_trap_preload.so");
    let library = library.to_string_lossy();
    let run = Program::preloaded(&threads, &["many", "50"])
        .env("LD_PRELOAD", &library)
        .run();
    assert!(run.ok(), "{run}");
    assert_eq!(run.line("threads done:"), "50 of 50", "{run}");
    let run = Program::preloaded(&frames, &["altstack"])
        .env("LD_PRELOAD", &library)
        .run();
    assert!(run.ok(), "{run}");
    assert_eq!(
        run.stdout.lines().next(),
        Some("altstack: on it 1 1, init 1 1, kept 1, interrupted state back 1"),
        "{run}"
    );
}
