//! A program whose frequent timer handler runs AMX instructions makes progress with patching
//! off (`tests/c/progress.c`): every instruction of the handler and of the program traps, so
//! the engine's cost per trap decides whether the handler finishes before the next tick. The
//! period is 100 µs scaled by how slowly the CPU handles a signal (see
//! `support::slowness`). And that cost, measured against a bare SIGILL round trip in the same
//! run (`tests/c/cost.c`), is at most twice it.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::time::Duration;

mod support;
use support::*;

#[test]
fn a_100_us_timer_with_amx_in_its_handler() {
    if !engine_runs_amx() {
        return;
    }
    let Some(prog) = build("progress.c", &[]) else {
        return;
    };
    let period = (100.0 * slowness()).round() as u64;
    let run = Program::preloaded(&prog, &["timer", &period.to_string(), "2000"])
        .env("AMX_TRAP_PATCH", "0")
        .limit(Duration::from_secs_f64(60.0 * slowness()))
        .run();
    assert!(run.ok(), "period {period} us: {run}");
    assert_eq!(run.line("done"), "2000 iterations, ticked", "{run}");
}

/// The ratio `cost` printed for `name`.
fn ratio(run: &Run, name: &str) -> f64 {
    let line = run.line(name);
    line.rsplit(' ')
        .next()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no ratio in {line:?}:\n{run}"))
}

#[test]
fn a_trap_at_an_unpatched_site_costs_at_most_twice_a_bare_sigill() {
    if !engine_runs_amx() {
        return;
    }
    let Some(prog) = build("cost.c", &[]) else {
        return;
    };
    // Without handlers of the program's, and with some (a trapped load then unblocks them
    // while it copies: two more system calls).
    for args in [&["20"][..], &["20", "handled"][..]] {
        let run = Program::preloaded(&prog, args)
            .env("AMX_TRAP_PATCH", "0")
            .limit(Duration::from_secs_f64(60.0 * slowness()))
            .run();
        assert!(run.ok(), "{run}");
        eprintln!("{args:?}:\n{}", run.stdout.trim_end());
        // The engine's own cost: an instruction with nothing to compute and one that copies a
        // tile. TDPBSSD adds 16 384 multiply-adds of emulation to the same trap: printed
        // above, not bounded here.
        for name in ["tilezero", "tileloadd"] {
            let r = ratio(&run, name);
            assert!(
                r <= 2.0,
                "{args:?}: {name} costs {r} bare SIGILL round trips:\n{run}"
            );
        }
    }
}
