//! Program handlers under the preload get the kernel's semantics (`tests/c/handlers.c`):
//! `SA_NODEFER`, `sa_mask`, `SA_RESETHAND`, `SA_SIGINFO`, `SA_ONSTACK`, `SS_AUTODISARM`, for
//! ordinary signals and the engine's own, nested; and a stack overflow caught on a small
//! alternate stack is caught exactly as without the library. Alternate stacks are sized as on
//! an AMX CPU (`tests/c/sigstack.c`): the smallest counts the tile state, and one too small for
//! it is refused once the permission is held. Runs everywhere (on a CPU with AMX with the
//! engine forced on, or natively where the silicon's kernel gives the answers).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::time::Duration;

mod support;
use support::*;

fn same_as_without(prog: &std::path::Path, args: &[&str]) -> Run {
    let limit = Duration::from_secs_f64(30.0 * slowness());
    let native = Program::native(prog, args).limit(limit).run();
    let preloaded = Program::preloaded(prog, args).limit(limit).run();
    assert!(!native.timed_out, "{args:?} without the library: {native}");
    assert!(
        !preloaded.timed_out,
        "{args:?} under the library: {preloaded}"
    );
    assert_eq!(
        (preloaded.status, &preloaded.stdout),
        (native.status, &native.stdout),
        "{args:?} under the library differs:\n{preloaded}\nwithout it:\n{native}"
    );
    preloaded
}

#[test]
fn handlers_get_the_kernels_semantics() {
    let Some(prog) = build("handlers.c", &[]) else {
        return;
    };
    let run = same_as_without(&prog, &["semantics"]);
    assert!(run.ok(), "{run}");
    // SIGUSR1's handler raised itself twice more without SA_NODEFER: they came one after the
    // other, not nested, and SIGUSR2 four times inside.
    assert_eq!(run.line("usr2 seen inside usr1:"), "4", "{run}");
    assert_eq!(
        run.line("autodisarm:"),
        "altstack 1, armed after 1",
        "{run}"
    );
}

#[test]
fn a_stack_overflow_is_caught_on_a_small_alternate_stack() {
    let Some(prog) = build("handlers.c", &[]) else {
        return;
    };
    // From the kernel's smallest signal stack (AT_MINSIGSTKSZ, which leaves no room for the
    // handler: the process dies of the SIGSEGV) up to where the handler fits (where its first
    // call resolves `write` lazily, which needs a few KiB more), the library changes nothing.
    let mut sizes: Vec<String> = (0..=4096).step_by(512).map(|n| format!("+{n}")).collect();
    sizes.push("16384".into());
    for bytes in &sizes {
        let run = same_as_without(&prog, &["overflow", bytes]);
        if bytes == "16384" {
            assert_eq!(
                run.stdout.trim(),
                "overflow caught on the alternate stack",
                "{run}"
            );
        }
    }
}

/// A handler that runs AMX products on the operand tiles of the loop it interrupts, about every
/// 200 us of a loop of 20 000 trapped products: the loop ends with the result it has without
/// the timer, for TDPBSSD and for TDPBF16PS (the engine delivers the signal between two
/// instructions, with the tile state in the frame, and puts the state back on return, the
/// forms its emulator derives from the tiles included).
#[test]
fn a_handler_using_amx_leaves_the_interrupted_products_alone() {
    if !engine_runs_amx() {
        return;
    }
    let Some(prog) = build("handlers.c", &[]) else {
        return;
    };
    for kind in ["int8", "bf16"] {
        let limit = Duration::from_secs_f64(60.0 * slowness());
        let run = Program::preloaded(&prog, &["amx", kind]).limit(limit).run();
        assert!(run.ok(), "{run}");
        assert_eq!(run.line("handler runs:"), "some", "{run}");
        assert_eq!(
            run.line(&format!("amx {kind}:")),
            "same as without the timer",
            "{run}"
        );
    }
}

/// A timer every 100 us over a loop of one patched product: the engine holds each signal that
/// comes during the product back to the boundary past it (its fast path and exits), and every
/// handler must see the loop's code in its context, as on the silicon; the loop's result is
/// its products'.
#[test]
fn signals_meet_a_patched_product_at_its_boundaries() {
    if !engine_runs_amx() {
        return;
    }
    let Some(prog) = build("handlers.c", &[]) else {
        return;
    };
    let limit = Duration::from_secs_f64(60.0 * slowness());
    let run = Program::preloaded(&prog, &["boundary"]).limit(limit).run();
    assert!(run.ok(), "{run}");
    assert_eq!(run.line("boundary ticks:"), "2000", "{run}");
    assert!(
        run.line("boundary outside:").starts_with("0 "),
        "handlers saw the engine's code: {run}"
    );
    assert_eq!(run.line("boundary result:"), "the products'", "{run}");
}

/// `tests/c/sigstack.c` where Linux's answers are the silicon's: natively on a CPU with AMX,
/// under the preload elsewhere.
fn sigstack(args: &[&str]) -> Option<Run> {
    let prog = build("sigstack.c", &[])?;
    let run = if native_amx() {
        Program::native(&prog, args).run()
    } else {
        Program::preloaded(&prog, args).run()
    };
    assert!(run.ok(), "{run}");
    Some(run)
}

/// The smallest signal stack the program can ask for counts the tile state, as on an AMX CPU
/// (whose `AT_MINSIGSTKSZ` includes it): the host's plus the room the engine's frames take for
/// it, and the C library's `sysconf` answers derived from it.
#[test]
fn the_smallest_signal_stack_counts_the_tile_state() {
    let Some(run) = sigstack(&["sizes"]) else {
        return;
    };
    let number = |key: &str| -> i64 { run.line(key).parse().expect("a number") };
    let min = number("auxv:");
    assert_eq!(number("minsigstksz:"), min, "{run}");
    assert_eq!(number("sigstksz:"), (4 * min.max(2048)).max(8192), "{run}");
    assert_eq!(run.line("other names agree:"), "1", "{run}");
    if !native_amx() {
        let prog = build("sigstack.c", &[]).expect("built above");
        let host = Program::native(&prog, &["sizes"]).run();
        let host_min: i64 = host.line("auxv:").parse().expect("a number");
        assert_eq!(
            min,
            host_min + 64 + 8 * 1024 + 64,
            "{run}\nwithout the library:\n{host}"
        );
    }
}

/// With the permission held, `sigaltstack` refuses a stack the frame with tile state does not
/// fit (`ENOMEM`), and the permission is refused while the caller's stack is too small
/// (`ENOSPC`), as Linux on an AMX CPU does.
#[test]
fn sigaltstack_and_the_permission_refuse_a_stack_too_small_for_tiles() {
    let Some(run) = sigstack(&["own"]) else {
        return;
    };
    let mut want = vec![
        ("8 KiB stack before the permission:", "0"),
        ("request with it:", "-1 No space left on device"),
        ("disable:", "0"),
        ("request without it:", "0"),
        ("1 KiB under the smallest:", "-1 Cannot allocate memory"),
        ("the smallest:", "0"),
        ("the same again:", "0"),
        ("8 KiB:", "-1 Cannot allocate memory"),
        ("kept:", "yes"),
        ("8 KiB through syscall:", "-1 Cannot allocate memory"),
        ("under MINSIGSTKSZ:", "-1 Cannot allocate memory"),
        ("disable again:", "0"),
        ("a large one:", "0"),
        (
            "4 KiB from a handler on the stack:",
            "-1 Operation not permitted",
        ),
    ];
    if !native_amx() {
        // The engine's boundary is a distribution kernel's (built with 32-bit emulation).
        want.push(("112 bytes under:", "-1 Cannot allocate memory"));
        want.push(("111 bytes under:", "0"));
    }
    for (key, value) in want {
        assert_eq!(run.line(key), value, "{key}\n{run}");
    }
}

/// The permission is refused while another thread has a stack too small (`ENOSPC`), granted
/// once it has given it up; a thread that ended with a small stack does not count.
#[test]
fn the_permission_is_refused_while_another_thread_has_a_small_stack() {
    let Some(run) = sigstack(&["threads"]) else {
        return;
    };
    assert_eq!(
        run.line("request while a thread has 8 KiB:"),
        "-1 No space left on device",
        "{run}"
    );
    assert_eq!(run.line("request after it disabled it:"), "0", "{run}");
}

/// Every alternate stack `sigaltstack` takes with the permission held fits the frame of a
/// handler interrupting code with tiles configured (the engine's frame carries the tile
/// state): the smallest it takes, and `AT_MINSIGSTKSZ` bytes.
#[test]
fn a_handler_fits_the_smallest_stack_taken_with_tiles_configured() {
    if !engine_runs_amx() {
        return;
    }
    for extra in ["-111", "0"] {
        let Some(run) = sigstack(&["fits", extra]) else {
            return;
        };
        assert_eq!(run.line("the stack:"), "0", "{extra}\n{run}");
        assert_eq!(run.line("handler on the stack:"), "yes", "{extra}\n{run}");
        assert_eq!(run.line("tiles kept:"), "yes", "{extra}\n{run}");
    }
}
