//! AMX under a seccomp sandbox that denies one of the system calls the engine uses
//! (`tests/c/sandbox.c`): the silicon needs none of them, so results, signals and faults must
//! be what they are there; patching may stop. Each call is denied from the start and, apart,
//! only once a site was patched (a program that sandboxes itself after its start-up). Where the
//! CPU has AMX the program runs on the silicon as the reference.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::time::Duration;

mod support;
use support::*;

/// Runs `sandbox.c` denying `deny` from `when` on: on the silicon where there is AMX, else under
/// the library. `None` after a visible skip where seccomp is refused.
fn run(deny: &str, when: &str) -> Option<Run> {
    let prog = build("sandbox.c", &[])?;
    let args = [deny, when];
    let limit = Duration::from_secs_f64(10.0 * slowness());
    let run = if native_amx() {
        Program::native(&prog, &args).limit(limit).run()
    } else {
        Program::preloaded(&prog, &args).limit(limit).run()
    };
    if run.stdout.contains("no seccomp") {
        skip(
            Kind::NotApplicable,
            format!("seccomp is refused here: {run}"),
        );
        return None;
    }
    Some(run)
}

fn as_on_the_silicon(deny: &str, when: &str) {
    let Some(run) = run(deny, when) else {
        return;
    };
    assert!(run.ok(), "{deny} {when}: {run}");
    assert_eq!(
        run.line("all:"),
        "as on the silicon",
        "{deny} {when}: {run}"
    );
}

/// Opening `/proc/self/mem` for writing denied (every open for reading and writing): no site is
/// patched, or a patched one keeps its jump, which still runs its instruction.
#[test]
fn a_sandbox_denying_writable_opens() {
    for when in ["early", "late"] {
        as_on_the_silicon("mem", when);
    }
}

/// membarrier denied: no site is patched; a site patched before keeps its jump when the program
/// changes its page's protection (the engine cannot remove the patch without the barrier), and
/// never an int3 of its own there.
#[test]
fn a_sandbox_denying_membarrier() {
    for when in ["early", "late"] {
        as_on_the_silicon("membarrier", when);
    }
}

/// rt_sigqueueinfo and rt_tgsigqueueinfo denied: a SIGSEGV sent while the program blocked it,
/// kept pending by the engine, still comes when the program unblocks it (without the sender's
/// siginfo); timer signals over patched products come at instruction boundaries.
#[test]
fn a_sandbox_denying_sigqueueinfo() {
    for when in ["early", "late"] {
        let Some(run) = run("sigqueueinfo", when) else {
            return;
        };
        assert!(run.ok(), "{when}: {run}");
        assert_eq!(run.line("pending:"), "2 of 2 delivered", "{when}: {run}");
        assert_eq!(run.line("all:"), "as on the silicon", "{when}: {run}");
    }
}

/// Nothing denied: the program's own checks hold.
#[test]
fn a_sandbox_denying_nothing() {
    for when in ["early", "late"] {
        as_on_the_silicon("none", when);
    }
}

/// mmap denied: Linux allocates a thread's AMX state in the kernel; the engine, which maps it
/// (the slot, at the thread's first trapped instruction), takes one of the slots it reserves in
/// its own memory instead, for the main thread and the program's threads alike.
#[test]
fn a_sandbox_denying_mmap() {
    if !engine_runs_amx() {
        return;
    }
    for when in ["early", "late"] {
        as_on_the_silicon("mmap", when);
    }
}
