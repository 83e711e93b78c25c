//! AMX under a seccomp sandbox that denies one of the system calls the engine uses
//! (`tests/c/sandbox.c`): the silicon needs none of them, so results, signals and faults must
//! be what they are there; patching may stop. Each call is denied from the start and, apart,
//! only once a site was patched (a program that sandboxes itself after its start-up), with an
//! errno, as browsers' sandboxes deny calls with SIGSYS (`SECCOMP_RET_TRAP`), and by killing
//! the process (`SECCOMP_RET_KILL_PROCESS`, systemd's default) on a call the engine must not
//! make at all. Where the CPU has AMX the program runs on the silicon as the reference.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::time::Duration;

mod support;
use support::*;

/// Runs `sandbox.c` denying `deny` from `when` on: on the silicon where there is AMX, else under
/// the library. `None` after a visible skip where seccomp is refused.
fn run(deny: &str, when: &str) -> Option<Run> {
    run_how(deny, when, "errno")
}

/// [`run`], the filter denying as `how` says (`errno`, `kill`, `trap`, `trap-default`,
/// `trap-blocked`).
fn run_how(deny: &str, when: &str, how: &str) -> Option<Run> {
    let prog = build("sandbox.c", &[])?;
    let args = [deny, when, how];
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

/// A filter that kills the process on a call outside its list (`SECCOMP_RET_KILL_PROCESS`,
/// the default action of systemd's `SystemCallFilter=`), here `mincore`, which systemd's
/// `@system-service` list lacks: the silicon makes no system call for an AMX instruction, so
/// a signal that comes during a load (the `loads` check's timer, the others' signals) must
/// not make the engine ask the kernel whether a page is there.
#[test]
fn a_sandbox_killing_a_call_the_engine_does_without() {
    if !engine_runs_amx() {
        return;
    }
    for when in ["early", "late"] {
        let Some(run) = run_how("mincore", when, "kill") else {
            return;
        };
        assert!(run.ok(), "{when}: {run}");
        assert_eq!(run.line("all:"), "as on the silicon", "{when}: {run}");
    }
}

/// Each call trapped (`SECCOMP_RET_TRAP`) instead, the program's SIGSYS handler making it fail
/// with EPERM, as browsers' sandboxes deny calls: the engine's own calls must not reach that
/// handler (the program made none of them, and on the silicon its AMX instructions make no
/// system call), nor end the process (a SIGSYS the kernel forces while it is blocked or
/// without a handler does). The engine takes them as refusals, and the program's own denied
/// call still reaches its handler.
#[test]
fn a_sandbox_trapping_the_calls() {
    for deny in ["mem", "membarrier", "sigqueueinfo", "mmap"] {
        for when in ["early", "late"] {
            let Some(run) = run_how(deny, when, "trap") else {
                return;
            };
            assert!(run.ok(), "{deny} {when}: {run}");
            assert_eq!(
                run.line("sigsys from the library:"),
                "0",
                "{deny} {when}: {run}"
            );
            assert_eq!(
                run.line("own call:"),
                "refused through the handler",
                "{deny} {when}: {run}"
            );
            assert_eq!(
                run.line("all:"),
                "as on the silicon",
                "{deny} {when}: {run}"
            );
        }
    }
}

/// Without a SIGSYS handler, or with SIGSYS blocked, the program's own trapped call ends the
/// process with SIGSYS, as the kernel forces it; the engine's trapped calls before it did not.
#[test]
fn a_trapped_call_of_the_programs_own_ends_it_with_sigsys() {
    for how in ["trap-default", "trap-blocked"] {
        for when in ["early", "late"] {
            let Some(run) = run_how("membarrier", when, how) else {
                return;
            };
            assert_eq!(run.signal(), Some(libc::SIGSYS), "{how} {when}: {run}");
            assert_eq!(
                run.line("products:"),
                "200 of 200 right",
                "{how} {when}: {run}"
            );
            assert_eq!(
                run.line("sigsys before the program's own call:"),
                "0",
                "{how} {when}: {run}"
            );
            assert!(!run.stdout.contains("survived"), "{how} {when}: {run}");
        }
    }
}
