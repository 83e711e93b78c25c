//! A signal that ends the process ends it at the program's faulting instruction
//! (`tests/c/crash.c`, whose parent traces it): a core dump, a debugger or a crash reporter
//! sees the program's registers, as on the silicon. The engine raised the fatal signal from
//! its own work stack, so every core of a program run under the library showed the engine.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod support;
use support::*;

/// `mode` under the library (on the silicon where the CPU has AMX, for the AMX modes), the
/// tracer's two lines; `None` after a visible skip where ptrace is refused.
fn traced(mode: &str, native: bool) -> Option<(String, String)> {
    let prog = build("crash.c", &[])?;
    let run = if native {
        Program::native(&prog, &[mode]).run()
    } else {
        Program::preloaded(&prog, &[mode]).run()
    };
    assert!(run.ok(), "{mode}: {run}");
    if run.stdout.starts_with("skip:") {
        eprintln!("{mode}: {}", run.stdout.trim());
        return None;
    }
    Some((
        run.line("killed by").to_owned(),
        run.line("last signal").to_owned(),
    ))
}

fn same_as_without(mode: &str) {
    let Some(native) = traced(mode, true) else {
        return;
    };
    let Some(preloaded) = traced(mode, false) else {
        return;
    };
    assert_eq!(preloaded, native, "{mode}: under the library, then without");
}

/// A store to an unmapped address with SIGSEGV's default action.
#[test]
fn an_unhandled_fault_ends_the_process_at_the_faulting_instruction() {
    same_as_without("plain");
}

/// The same fault with SIGSEGV blocked, and ignored: the kernel's forced delivery.
#[test]
fn a_blocked_or_ignored_fault_ends_the_process_at_the_faulting_instruction() {
    same_as_without("blocked");
    same_as_without("ignored");
}

/// UD2 with SIGILL's default action.
#[test]
fn an_unhandled_invalid_opcode_ends_the_process_at_the_instruction() {
    same_as_without("ud");
}

/// TILELOADD from an unmapped address, at its site's first execution and once the site is
/// patched: SIGSEGV at the instruction, as on the silicon.
#[test]
fn an_unhandled_amx_fault_ends_the_process_at_the_amx_instruction() {
    for mode in ["amx", "patched"] {
        let Some((killed, last)) = traced(mode, native_amx()) else {
            return;
        };
        assert_eq!(killed, "SIGSEGV", "{mode}");
        assert_eq!(last, "SIGSEGV at site+0 (expected SIGSEGV)", "{mode}");
    }
}

/// Under a seccomp filter that refuses `rt_sigaction`, an unhandled fault (a store, and an AMX
/// instruction's) still ends the process with its signal: the engine could not put the
/// default action back in the kernel's table, and the signal it raised came back to it, for
/// ever.
#[test]
fn a_fault_ends_the_process_under_a_sandbox_refusing_sigaction() {
    let Some(prog) = build("crash.c", &[]) else {
        return;
    };
    let limit = std::time::Duration::from_secs_f64(10.0 * slowness());
    for mode in ["sandboxed-plain", "sandboxed-amx"] {
        let run = if native_amx() {
            Program::native(&prog, &[mode]).limit(limit).run()
        } else {
            Program::preloaded(&prog, &[mode]).limit(limit).run()
        };
        assert!(run.ok(), "{mode}: {run}");
        if run.stdout.starts_with("skip:") {
            eprintln!("{mode}: {}", run.stdout.trim());
            continue;
        }
        assert_eq!(run.line("killed by"), "SIGSEGV", "{mode}: {run}");
    }
}
