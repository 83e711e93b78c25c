//! Program handlers under the preload get the kernel's semantics (`tests/c/handlers.c`):
//! `SA_NODEFER`, `sa_mask`, `SA_RESETHAND`, `SA_SIGINFO`, `SA_ONSTACK`, `SS_AUTODISARM`, for
//! ordinary signals and the engine's own, nested; and a stack overflow caught on a small
//! alternate stack is caught exactly as without the library. Runs everywhere (on a CPU with
//! AMX with the engine forced on).
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
