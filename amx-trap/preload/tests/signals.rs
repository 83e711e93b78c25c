//! The program's signals under the preload (`tests/c/signals.c`): a program with no AMX
//! instruction sees exactly what it sees without the library; every way of installing a
//! handler or changing a mask reaches the engine; AMX works whatever the program blocked; new
//! processes and threads inherit the masks the program set. And (`tests/c/queued.c`) signals
//! that come while a patched site's instruction is under way, held back to its boundary, are
//! delivered as the kernel delivers them between the silicon's instructions: every queued
//! instance once, in the order sent, with its own siginfo.
//!
//! On a CPU with AMX the engine's signal handling runs too (`AMX_TRAP_FORCE=1`, the
//! instructions the silicon's), so these run everywhere; the parts that need the engine's AMX
//! run where the CPU lacks it.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod support;
use support::*;

fn program() -> Option<std::path::PathBuf> {
    build("signals.c", &[])
}

/// Runs `args` with and without the library; the two must not differ.
fn same_as_without(prog: &std::path::Path, args: &[&str]) -> Run {
    let native = Program::native(prog, args).run();
    let preloaded = Program::preloaded(prog, args).run();
    assert!(!native.timed_out, "{args:?} without the library: {native}");
    assert_eq!(
        (preloaded.status, &preloaded.stdout),
        (native.status, &native.stdout),
        "{args:?} under the library differs:\n{preloaded}\nwithout it:\n{native}"
    );
    preloaded
}

#[test]
fn a_program_without_amx_behaves_as_without_the_library() {
    let Some(prog) = program() else { return };
    let run = same_as_without(&prog, &["plain"]);
    // The program's own checks ran to the end.
    assert_eq!(run.code(), Some(3), "{run}");
    assert!(run.stdout.contains("fork child status 7"), "{run}");
}

#[test]
fn sent_engine_signals_wait_while_the_program_blocks_them() {
    let Some(prog) = program() else { return };
    let run = same_as_without(&prog, &["pending"]);
    assert_eq!(run.line("blocked:"), "delivered 0 pending 1", "{run}");
    assert_eq!(run.line("unblocked:"), "delivered 1 pending 0", "{run}");
}

#[test]
fn new_processes_and_threads_inherit_the_programs_masks() {
    let Some(prog) = program() else { return };
    let run = same_as_without(&prog, &["inherit"]);
    // SIGILL, SIGSEGV, SIGUSR1 blocked by the parent; the thread with attributes of its own.
    assert_eq!(run.line("parent mask"), "0x608", "{run}");
    assert_eq!(run.line("fork child mask"), "0x608", "{run}");
    assert_eq!(run.line("clone child mask"), "0x608", "{run}");
    // posix_spawn, and the exec of the fork and clone children.
    assert_eq!(run.stdout.matches("spawned mask 0x608").count(), 3, "{run}");
    assert!(run.stdout.contains("thread mask 0x10"), "{run}");
}

#[test]
fn cpuid_runs_with_every_signal_blocked() {
    let Some(prog) = program() else { return };
    // With CPUID faulting asked for (where the kernel offers it) as without.
    for cpuid in ["0", "1"] {
        let run = Program::preloaded(&prog, &["cpuid-blocked"])
            .env("AMX_TRAP_CPUID", cpuid)
            .run();
        assert!(run.ok(), "AMX_TRAP_CPUID={cpuid}: {run}");
        assert_eq!(
            run.line("cpuid with everything blocked:"),
            "8 leaves",
            "{run}"
        );
    }
}

#[test]
fn amx_works_with_the_engines_signals_blocked() {
    let Some(prog) = program() else { return };
    if !engine_runs_amx() {
        return;
    }
    let run = Program::preloaded(&prog, &["amx-blocked"]).run();
    assert!(run.ok(), "{run}");
    for api in 0..4 {
        assert_eq!(
            run.line(&format!("api {api}:")),
            "ok, mask has them 1",
            "{run}"
        );
    }
}

#[test]
fn every_way_of_installing_a_handler_keeps_the_engine_first() {
    let Some(prog) = program() else { return };
    // `sysv` is `__sysv_signal`, which `signal` is in strict ISO C (`-std=c11`).
    for api in [
        "sigaction",
        "signal",
        "bsd_signal",
        "sigset",
        "sysv",
        "syscall",
    ] {
        let run = Program::preloaded(&prog, &["install", api]).run();
        assert!(run.ok(), "{api}: {run}");
        assert_eq!(
            run.line(&format!("install {api}:")),
            "amx ok, ud2 caught 1",
            "{run}"
        );
    }
}

/// `tests/c/queued.c`, built once.
fn queued() -> Option<std::path::PathBuf> {
    build("queued.c", &[])
}

/// Held by the tests that queue signals in bulk or fill the user's queue, one at a time: the
/// kernel counts pending signals per user (`RLIMIT_SIGPENDING`), and the `hold-limit` mode
/// sets that limit from the count it reads, which another test's burst would change under it.
fn queue_lock() -> std::sync::MutexGuard<'static, ()> {
    static QUEUE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    QUEUE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs a `hold` mode of `queued.c` under the library (a patched TILELOADD waiting on a page
/// userfaultfd keeps missing) and without it (a plain load waiting so): `None` after a visible
/// skip where userfaultfd is refused.
fn hold(mode: &str, n: &str) -> Option<(Run, Run)> {
    hold_at(mode, n, true)
}

/// [`hold`], with the TILELOADD patched or (`patched` false: `AMX_TRAP_PATCH=0`) trapping
/// each time it runs.
fn hold_at(mode: &str, n: &str, patched: bool) -> Option<(Run, Run)> {
    let prog = queued()?;
    let _queue = queue_lock();
    let limit = std::time::Duration::from_secs_f64(10.0 * slowness());
    let native = Program::native(&prog, &[mode, "plain", n])
        .limit(limit)
        .run();
    if native.stdout.contains("no userfaultfd") {
        skip(
            Kind::NotApplicable,
            format!("userfaultfd is refused here: {}", native.stdout.trim()),
        );
        return None;
    }
    let mut preloaded = Program::preloaded(&prog, &[mode, "amx", n]).limit(limit);
    if !patched {
        preloaded = preloaded.env("AMX_TRAP_PATCH", "0");
    }
    let preloaded = preloaded.run();
    assert!(native.ok(), "{mode} without the library: {native}");
    assert!(preloaded.ok(), "{mode} under the library: {preloaded}");
    // The load (store) was patched (or not), and completed with the page's (tile's) bytes.
    let expected = if patched { "yes" } else { "no" };
    assert_eq!(preloaded.line("patched:"), expected, "{preloaded}");
    if mode.ends_with("-store") {
        assert_eq!(preloaded.line("page:"), "the tile's", "{preloaded}");
    } else {
        assert_eq!(preloaded.line("tile:"), "the page's", "{preloaded}");
    }
    Some((native, preloaded))
}

/// Asserts that `keys` read the same in both runs.
fn same_lines(native: &Run, preloaded: &Run, keys: &[&str]) {
    for key in keys {
        assert_eq!(
            preloaded.line(key),
            native.line(key),
            "{key} under the library:\n{preloaded}\nwithout it:\n{native}"
        );
    }
}

/// A real-time signal queued while a patched site's load waits for its page stops the load, as
/// on the silicon (its handler runs at the instruction, which resumes from start_row after it);
/// the instances queued after it must come after it, each with its own siginfo.
#[test]
fn queued_signals_meeting_a_patched_load_keep_their_order() {
    if !engine_runs_amx() {
        return;
    }
    let Some((native, preloaded)) = hold("hold-rt", "12") else {
        return;
    };
    assert_eq!(
        native.line("values:"),
        "0 1 2 3 4 5 6 7 8 9 10 11",
        "{native}"
    );
    same_lines(
        &native,
        &preloaded,
        &["received:", "values:", "si_code not SI_QUEUE:", "refused:"],
    );
}

/// A standard signal sent again while a patched load waits for its page, after a first instance
/// of it: on the silicon the first was delivered when it came and the second is delivered
/// after it; neither may merge into the other.
#[test]
fn a_standard_signal_sent_again_during_a_patched_load_is_delivered_twice() {
    if !engine_runs_amx() {
        return;
    }
    let Some((native, preloaded)) = hold("hold-usr1", "2") else {
        return;
    };
    assert_eq!(native.line("values:"), "0 1", "{native}");
    same_lines(&native, &preloaded, &["received:", "values:"]);
}

/// A real-time signal that stops a patched load needs no room in the user's signal queue: with
/// the queue filled by later instances (RLIMIT_SIGPENDING), it is still delivered, first.
#[test]
fn a_signal_stopping_a_patched_load_needs_no_room_in_a_full_queue() {
    if !engine_runs_amx() {
        return;
    }
    let Some((native, preloaded)) = hold("hold-limit", "8") else {
        return;
    };
    assert_eq!(native.line("values:"), "0 1 2 3 4 5 6 7 8", "{native}");
    same_lines(&native, &preloaded, &["received:", "values:", "refused:"]);
}

/// Two signals sent while one patched load waits for its page: each delivered once, when it
/// comes, as on the silicon (the load is stopped and resumed for each).
#[test]
fn two_signals_during_one_patched_load_arrive_once_each_in_order() {
    if !engine_runs_amx() {
        return;
    }
    let Some((native, preloaded)) = hold("hold-mixed", "6") else {
        return;
    };
    assert_eq!(native.line("values:"), "0 1000 1 2 3 4 5", "{native}");
    same_lines(&native, &preloaded, &["received:", "values:"]);
}

/// Bursts of SIGRTMIN queued as fast as another thread can, to a thread looping over a patched
/// product (most arrive in the middle of it), and to the process: every value once, in order,
/// SI_QUEUE, this process's pid, as without the library over a plain loop.
#[test]
fn bursts_of_queued_signals_over_a_patched_loop_arrive_in_order() {
    if !engine_runs_amx() {
        return;
    }
    let Some(prog) = queued() else { return };
    let _queue = queue_lock();
    let limit = std::time::Duration::from_secs_f64(10.0 * slowness());
    for mode in ["rt", "rt-process"] {
        let native = Program::native(&prog, &[mode, "plain", "320"])
            .limit(limit)
            .run();
        let preloaded = Program::preloaded(&prog, &[mode, "amx", "320"])
            .limit(limit)
            .run();
        assert!(native.ok(), "{mode} without the library: {native}");
        assert!(preloaded.ok(), "{mode} under the library: {preloaded}");
        assert_eq!(native.line("out of order:"), "0", "{native}");
        assert_eq!(preloaded.line("loop ran:"), "yes", "{preloaded}");
        same_lines(
            &native,
            &preloaded,
            &[
                "received:",
                "missing",
                "out of order:",
                "si_code not SI_QUEUE:",
            ],
        );
    }
}

/// SIGUSR1 sent with `kill` and SIGUSR2 with `sigqueue` by a child process to a thread looping
/// over a patched product: each delivered, with the si_code, si_pid and si_uid the kernel
/// gives.
#[test]
fn signals_from_another_process_carry_the_kernels_siginfo() {
    if !engine_runs_amx() {
        return;
    }
    let Some(prog) = queued() else { return };
    let _queue = queue_lock();
    let limit = std::time::Duration::from_secs_f64(10.0 * slowness());
    let native = Program::native(&prog, &["kill", "plain", "200"])
        .limit(limit)
        .run();
    let preloaded = Program::preloaded(&prog, &["kill", "amx", "200"])
        .limit(limit)
        .run();
    assert!(native.ok(), "without the library: {native}");
    assert_eq!(native.line("usr1 handled:"), "200 of 200", "{native}");
    assert!(preloaded.ok(), "under the library: {preloaded}");
    assert_eq!(
        preloaded.stdout, native.stdout,
        "{preloaded}\nwithout it:\n{native}"
    );
}

/// Signals sent to the whole process while three threads loop over a patched product: each
/// delivered exactly once (a held-back one goes to the thread that took it).
#[test]
fn process_signals_over_several_patched_loops_arrive_once() {
    if !engine_runs_amx() {
        return;
    }
    let Some(prog) = queued() else { return };
    let _queue = queue_lock();
    let limit = std::time::Duration::from_secs_f64(10.0 * slowness());
    let native = Program::native(&prog, &["threads", "plain", "3", "300"])
        .limit(limit)
        .run();
    let preloaded = Program::preloaded(&prog, &["threads", "amx", "3", "300"])
        .limit(limit)
        .run();
    assert!(native.ok(), "without the library: {native}");
    assert!(preloaded.ok(), "under the library: {preloaded}");
    assert_eq!(
        native.line("rt delivered:"),
        "300 of 300, missing 0, duplicated 0",
        "{native}"
    );
    assert_eq!(
        preloaded.stdout, native.stdout,
        "{preloaded}\nwithout it:\n{native}"
    );
}

/// On the silicon a tile load waiting for a missing page (userfaultfd) is interrupted by a
/// signal: the kernel runs the handler, and the load starts again afterwards from its
/// start_row. At a patched site the engine does the same: a program whose handler must run
/// for the page to come does not wait forever (at a site not patched as well: see
/// `a_signal_stops_a_trapped_load_waiting_for_its_page`).
#[test]
fn a_signal_comes_while_an_instruction_waits_for_its_page() {
    if !engine_runs_amx() {
        return;
    }
    let Some((native, preloaded)) = hold("hold-rt", "12") else {
        return;
    };
    assert_eq!(
        native.line("handled while the instruction waited:"),
        "12",
        "{native}"
    );
    same_lines(
        &native,
        &preloaded,
        &["handled while the instruction waited:"],
    );
}

/// A trapped TILELOADD (patching off) waiting for its page is stopped by a signal as the
/// silicon's is, though the engine copies its rows inside its SIGILL handler: each hold mode's
/// signals are handled while the instruction waits, each once, in the order sent, and the load
/// completes with the page's bytes when the page comes.
#[test]
fn a_signal_stops_a_trapped_load_waiting_for_its_page() {
    if !engine_runs_amx() {
        return;
    }
    let waited = "handled while the instruction waited:";
    for (mode, n, keys) in [
        (
            "hold-rt",
            "12",
            &["received:", "values:", "refused:", waited][..],
        ),
        ("hold-usr1", "2", &["received:", "values:", waited][..]),
        (
            "hold-limit",
            "8",
            &["received:", "values:", "refused:", waited][..],
        ),
        ("hold-mixed", "6", &["received:", "values:", waited][..]),
    ] {
        let Some((native, preloaded)) = hold_at(mode, n, false) else {
            return;
        };
        same_lines(&native, &preloaded, keys);
    }
}

/// The same for a TILESTORED waiting for the page it writes, patched and trapped: the signals
/// are handled while it waits, in order, and the store, resumed from start_row, leaves the
/// tile's bytes in the page.
#[test]
fn a_signal_stops_a_store_waiting_for_its_page() {
    if !engine_runs_amx() {
        return;
    }
    let waited = "handled while the instruction waited:";
    for patched in [true, false] {
        for (mode, n, keys) in [
            (
                "hold-rt-store",
                "12",
                &["received:", "values:", "refused:", waited][..],
            ),
            (
                "hold-usr1-store",
                "2",
                &["received:", "values:", waited][..],
            ),
            (
                "hold-mixed-store",
                "6",
                &["received:", "values:", waited][..],
            ),
        ] {
            let Some((native, preloaded)) = hold_at(mode, n, patched) else {
                return;
            };
            same_lines(&native, &preloaded, keys);
        }
    }
}

/// A SIGSEGV another thread sends while a trapped TILELOADD waits for its page, and then the
/// load's own fault on a later row (`tests/c/held.c`): the program's handler gets both, the
/// sent one first, as without the library over the same accesses. The engine holds the sent
/// one back without blocking SIGSEGV: blocked for the rest of its work, the load's fault would
/// have met it blocked, and the kernel ends a process whose fault's signal is blocked.
#[test]
fn a_sigsegv_sent_during_a_trapped_load_leaves_the_loads_fault_deliverable() {
    if !engine_runs_amx() {
        return;
    }
    let Some(prog) = build("held.c", &[]) else {
        return;
    };
    let limit = std::time::Duration::from_secs_f64(10.0 * slowness());
    let native = Program::native(&prog, &["plain"]).limit(limit).run();
    if native.stdout.contains("no userfaultfd") {
        skip(
            Kind::NotApplicable,
            format!("userfaultfd is refused here: {}", native.stdout.trim()),
        );
        return;
    }
    let preloaded = Program::preloaded(&prog, &["amx"]).limit(limit).run();
    assert!(native.ok(), "without the library: {native}");
    assert_eq!(native.line("seen:"), "sent, fault at +0", "{native}");
    assert!(preloaded.ok(), "under the library: {preloaded}");
    same_lines(&native, &preloaded, &["seen:"]);
}

/// Two real-time timer signals expiring together during a patched product, the first one's
/// handler blocking the second, with the user's queue of pending signals full
/// (`tests/c/timers.c`): the second comes after the first one's handler, every time, as
/// without the library. The engine, raising it again for after that handler, lost it where
/// the kernel refused to queue it (`EAGAIN`).
#[test]
fn a_held_back_real_time_signal_survives_a_full_queue() {
    let Some(prog) = build("timers.c", &["-lrt"]) else {
        return;
    };
    // Its timers' signals count among the user's pending ones, which `hold-limit` reads.
    let _queue = queue_lock();
    let limit = std::time::Duration::from_secs_f64(30.0 * slowness());
    let native = Program::native(&prog, &["plain", "200"]).limit(limit).run();
    assert!(native.ok(), "{native}");
    assert_eq!(
        native.line("trials"),
        "200, first 200, second 200",
        "{native}"
    );
    let run = if native_amx() {
        Program::native(&prog, &["amx", "200"]).limit(limit).run()
    } else {
        Program::preloaded(&prog, &["amx", "200"])
            .limit(limit)
            .run()
    };
    assert!(run.ok(), "{run}");
    assert_eq!(run.line("trials"), "200, first 200, second 200", "{run}");
}
