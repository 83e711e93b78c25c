//! What a debugger sees of the engine (`tests/c/debugger.c`): a stack walk from the engine's
//! code goes on into the program's, as the unwind information of the engine's entry, of a
//! patched site's fast path and of its restorers describes them. gdb stops first where the
//! engine's copy of a faulting operand faults; `bt` there must show the function that ran the
//! AMX instruction and its callers, which is what it shows on the silicon, stopped at the
//! instruction. A sampling profiler walks the same information.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod support;
use support::*;

/// gdb's `bt` at the first SIGSEGV of `debugger.c` in `mode`: under the library where the
/// engine runs AMX, on its own where the CPU does. `None` after a visible skip without gdb.
fn backtrace(mode: &str) -> Option<String> {
    let prog = build("debugger.c", &[])?;
    let mut gdb = std::process::Command::new("gdb");
    gdb.args(["-batch", "-nx"]);
    if !native_amx() {
        gdb.arg("-ex").arg(format!(
            "set environment LD_PRELOAD {}",
            library().display()
        ));
    }
    gdb.args(["-ex", "handle SIGILL nostop noprint pass"])
        .args(["-ex", "run", "-ex", "bt", "-ex", "kill", "--args"])
        .arg(&prog)
        .arg(mode)
        .env_remove("LD_PRELOAD");
    let out = match gdb.output() {
        Ok(out) => out,
        Err(e) => {
            skip(Kind::NotApplicable, format!("no gdb: {e}"));
            return None;
        }
    };
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether `bt` walks from where gdb stopped through the function that ran the instruction,
/// its caller and `main`, in that order.
fn reaches_the_program(bt: &str) -> bool {
    let frames: Vec<&str> = bt.lines().filter(|l| l.starts_with('#')).collect();
    let at = |name: &str| {
        frames
            .iter()
            .position(|l| l.contains(&format!(" {name} (")))
    };
    match (at("amx_victim"), at("amx_caller"), at("main")) {
        (Some(v), Some(c), Some(m)) => v < c && c < m,
        _ => false,
    }
}

#[test]
fn a_backtrace_from_a_trapped_instruction_reaches_the_program() {
    let Some(bt) = backtrace("trapped") else {
        return;
    };
    assert!(bt.contains("Program received signal SIGSEGV"), "{bt}");
    assert!(reaches_the_program(&bt), "{bt}");
}

/// At a patched site the engine runs on the program's stack, below the site's frame; its walk
/// reads the site from the stub.
#[test]
fn a_backtrace_from_a_patched_site_reaches_the_program() {
    let Some(bt) = backtrace("patched") else {
        return;
    };
    assert!(bt.contains("Program received signal SIGSEGV"), "{bt}");
    if !native_amx() {
        assert!(bt.contains("fastpath::fast"), "not at a patched site: {bt}");
    }
    assert!(reaches_the_program(&bt), "{bt}");
}
