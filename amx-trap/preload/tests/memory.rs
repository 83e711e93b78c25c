//! Tile loads and stores reach memory as the CPU's own accesses do, with the CPU's faults
//! (`tests/c/memory.c`), and their addresses are computed as the silicon computes them
//! (`tests/c/addresses.c`). Where the CPU has AMX the programs run on the silicon as the
//! reference; the engine's part runs where it lacks AMX.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod support;
use support::*;

/// The program's run: on the silicon where there is AMX (the reference, checked the same way),
/// else under the library.
fn run(source: &str, args: &[&str]) -> Option<Run> {
    let prog = build(source, &[])?;
    let run = if native_amx() {
        Program::native(&prog, args).run()
    } else {
        Program::preloaded(&prog, args).run()
    };
    assert!(run.ok(), "{args:?}: {run}");
    Some(run)
}

#[test]
fn write_only_pages_are_readable() {
    let Some(run) = run("memory.c", &["writeonly"]) else {
        return;
    };
    assert_eq!(run.line("write-only page read:"), "ok", "{run}");
    assert_eq!(run.line("write-only page written:"), "ok", "{run}");
}

#[test]
fn pfnmap_memory_is_readable() {
    let Some(run) = run("memory.c", &["vvar"]) else {
        return;
    };
    if run.stdout.contains("no [vvar]") {
        skip(Kind::NotApplicable, "this kernel maps no [vvar]");
        return;
    }
    assert_eq!(run.line("[vvar] read:"), "ok", "{run}");
}

#[test]
fn a_store_below_the_stack_grows_it() {
    let Some(run) = run("memory.c", &["stack"]) else {
        return;
    };
    assert_eq!(run.line("stack grown:"), "1, stored ok", "{run}");
}

#[test]
fn past_the_end_of_a_file_is_sigbus_at_the_instruction() {
    let Some(run) = run("memory.c", &["sigbus"]) else {
        return;
    };
    // BUS_ADRERR at the first byte past the file, a page fault, RIP at the instruction.
    assert_eq!(
        run.line("sigbus:"),
        "sig 7 code 2 offset 4096 trapno 14 at the instruction 1",
        "{run}"
    );
}

#[test]
fn instructions_on_execute_only_pages() {
    let Some(run) = run("memory.c", &["xom"]) else {
        return;
    };
    assert_eq!(run.line("execute-only code:"), "ok", "{run}");
}

#[test]
fn a_seccomp_filter_against_process_vm_access() {
    let Some(run) = run("memory.c", &["seccomp"]) else {
        return;
    };
    assert_eq!(run.line("under seccomp:"), "ok", "{run}");
}

#[test]
fn protection_keys_are_the_programs() {
    let Some(run) = run("memory.c", &["pkru"]) else {
        return;
    };
    if run.stdout.contains("no protection keys") {
        skip(
            Kind::NotApplicable,
            "this CPU or kernel has no protection keys",
        );
        return;
    }
    // SEGV_PKUERR (4) with the key, at the first byte of the protected page.
    assert_eq!(
        run.line("load denied:"),
        "code 4 key 1 offset 4096",
        "{run}"
    );
    assert_eq!(run.line("load allowed:"), "ok", "{run}");
    assert_eq!(
        run.line("store denied:"),
        "code 4 key 1 offset 4096",
        "{run}"
    );
}

#[test]
fn addresses_in_every_operand_form() {
    let Some(run) = run("addresses.c", &[]) else {
        return;
    };
    let forms = [
        "[rdi + rsi]:",
        "[r13 + r14*2 + 8]:",
        "[rsi*4 + disp32]:",
        "67 [edi + esi]:",
        "67 wrapping:",
        "gs:[rdi + rsi]:",
        "67 gs:[edi + esi]:",
        "67 gs: wrapping rows:",
        "gs: store:",
        "67 fs:[edi]:",
    ];
    for form in forms {
        assert_eq!(run.line(form), "ok", "{form} {run}");
    }
}

/// A non-canonical operand is #GP, and #SS (SIGBUS) through the stack segment (base RBP or
/// RSP), as the CPU's own references (SDM vol. 1, 3.3.7.1); a row that runs from the last
/// canonical bytes into non-canonical ones is one reference, #GP before the unmapped page
/// below the boundary is touched.
#[test]
fn non_canonical_operands_fault_as_the_cpu_faults() {
    let Some(run) = run("memory.c", &["canonical"]) else {
        return;
    };
    for (key, value) in [
        ("[rbp + rsi] load:", "sig 7 code 128 addr 0 trapno 12"),
        ("[rdi + rbp] load:", "sig 11 code 128 addr 0 trapno 13"),
        ("[rbp] ldtilecfg:", "sig 7 code 128 addr 0 trapno 12"),
        (
            "row across the canonical end:",
            "sig 11 code 128 addr 0 trapno 13",
        ),
    ] {
        assert_eq!(run.line(key), value, "{key}\n{run}");
    }
}

/// With EFLAGS.AC set (alignment checking), aligned tile operands raise nothing, as on the
/// silicon: the kernel enters signal handlers with the program's AC, and the engine clears it
/// for its own work, at trapped and patched sites alike.
#[test]
fn alignment_checking_leaves_aligned_operands_alone() {
    if !engine_runs_amx() {
        return;
    }
    let Some(prog) = build("memory.c", &[]) else {
        return;
    };
    for patch in ["1", "0"] {
        let run = Program::preloaded(&prog, &["ac"])
            .env("AMX_TRAP_PATCH", patch)
            .run();
        assert!(run.ok(), "AMX_TRAP_PATCH={patch}: {run}");
        assert_eq!(
            run.line("with AC set:"),
            "ok",
            "AMX_TRAP_PATCH={patch}: {run}"
        );
    }
}
