//! Patched sites (`tests/c/patching.c`): never written into a shared mapping or a file, never
//! run after the program changed its code (in place, unmapped, remapped, moved, protected),
//! never turned into a SIGTRAP the program did not ask for nor swallowing one it did, never in
//! the way of the heap. The engine's parts run where the CPU lacks AMX; on one with AMX the
//! programs run on the silicon, the reference.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod support;
use support::*;

fn run(args: &[&str], flags: &[&str]) -> Option<Run> {
    let prog = build("patching.c", flags)?;
    let run = if native_amx() {
        Program::native(&prog, args).run()
    } else {
        Program::preloaded(&prog, args).run()
    };
    assert!(run.ok(), "{args:?}: {run}");
    Some(run)
}

#[test]
fn shared_mappings_and_files_keep_their_bytes() {
    let Some(run) = run(&["shared"], &[]) else {
        return;
    };
    for prot in ["r-x", "rwx"] {
        assert_eq!(
            run.line(&format!("shared file mapping {prot}:")),
            "results ok, file unchanged 1, on disk unchanged 1",
            "{run}"
        );
    }
}

#[test]
fn code_rewritten_in_place_runs_as_written() {
    let Some(run) = run(&["rewrite"], &[]) else {
        return;
    };
    assert_eq!(
        run.line("rewritten in place:"),
        "before ok, after ok",
        "{run}"
    );
    assert_eq!(
        run.line("rewritten through /proc/self/mem:"),
        "written 1, before ok, after ok",
        "{run}"
    );
    // The writable page's site was never patched (its first byte is still VEX's); the
    // read-only page's was (the jump), where the engine patches at all.
    assert_eq!(
        run.line("writable code's first byte after 100 runs:"),
        "0xc4",
        "{run}"
    );
    if !native_amx() {
        assert_eq!(
            run.line("read-only code's first byte after 50 runs:"),
            "0xe9",
            "{run}"
        );
    }
}

#[test]
fn code_unmapped_replaced_moved_or_protected_runs_as_it_is() {
    let Some(run) = run(&["remap"], &[]) else {
        return;
    };
    assert_eq!(run.line("remapped:"), "1 1, moved 1, mprotected 1", "{run}");
}

#[test]
fn a_freed_page_refilled_with_int3_traps() {
    let Some(run) = run(&["int3"], &[]) else {
        return;
    };
    assert_eq!(run.line("int3 page:"), "SIGTRAP at the entry 1", "{run}");
}

#[test]
fn the_programs_sigtrap_handler_sees_only_its_own() {
    let Some(run) = run(&["sigtrap"], &[]) else {
        return;
    };
    assert_eq!(
        run.line("program SIGTRAPs:"),
        "0 during the patching, 1 of its own int3",
        "{run}"
    );
}

#[test]
fn the_heap_of_a_non_pie_program_grows() {
    let Some(run) = run(&["brk"], &["-no-pie"]) else {
        return;
    };
    let line = run.line("heap grew by");
    assert!(line.starts_with("256 MiB of 256"), "{run}");
}

#[test]
fn patching_off_leaves_the_code_alone() {
    if !engine_runs_amx() {
        return;
    }
    let Some(prog) = build("patching.c", &[]) else {
        return;
    };
    let off = Program::preloaded(&prog, &["bytes"])
        .env("AMX_TRAP_PATCH", "0")
        .run();
    assert_eq!(off.line("code bytes read back unchanged:"), "1", "{off}");
    // With patching on, the program can see the jump: what the README documents.
    let on = Program::preloaded(&prog, &["bytes"]).run();
    assert!(on.ok(), "{on}");
}

/// The program's stack an AMX instruction costs under the library (`tests/c/stack.c`), the
/// silicon's being none: a patched site's frame, vector save area and engine frames, and a
/// trapped one's kernel signal frame, each under 16 KiB (amx-trap/README.md gives the measured
/// figures), so that a thread or coroutine with a small stack keeps its margin.
#[test]
fn an_instruction_costs_a_bounded_part_of_the_programs_stack() {
    if !engine_runs_amx() {
        return;
    }
    let Some(prog) = build("stack.c", &[]) else {
        return;
    };
    for patch in ["1", "0"] {
        let run = Program::preloaded(&prog, &[])
            .env("AMX_TRAP_PATCH", patch)
            .run();
        assert!(run.ok(), "AMX_TRAP_PATCH={patch}: {run}");
        let bytes: usize = run
            .line("steady state:")
            .trim_end_matches(" bytes")
            .parse()
            .unwrap_or(usize::MAX);
        assert!(
            bytes <= 16 * 1024,
            "AMX_TRAP_PATCH={patch}: {bytes} bytes of the program's stack: {run}"
        );
    }
}

/// A `fork` while another thread's sites are being patched: the child inherits the patch under
/// way, and changing its code's protection (which removes patches) must not wait for a thread
/// the child does not have.
#[test]
fn a_fork_during_patching_leaves_the_child_free() {
    if !engine_runs_amx() {
        return;
    }
    let Some(run) = run(&["forks"], &[]) else {
        return;
    };
    assert_eq!(
        run.line("forks while patching:"),
        "made, children hung 0",
        "{run}"
    );
}

/// The engine's files (`/proc/self/maps` to decide, `/proc/self/mem` to patch) never take the
/// program's descriptor numbers (`tests/c/descriptors.c`): one thread closes a number and puts
/// its own file there with `dup2`, over and over, while another's 256 sites are patched. The
/// engine opened its files for each patch, at the lowest free number: it closed the program's
/// file under it, and could read and write through the program's file in place of its own.
#[test]
fn the_engines_files_never_take_the_programs_descriptors() {
    let Some(prog) = build("descriptors.c", &[]) else {
        return;
    };
    let limit = std::time::Duration::from_secs_f64(30.0 * slowness());
    let run = if native_amx() {
        Program::native(&prog, &[]).limit(limit).run()
    } else {
        Program::preloaded(&prog, &[]).limit(limit).run()
    };
    assert!(run.ok(), "{run}");
    assert_eq!(run.line("closed"), "0, other 0", "{run}");
}

/// `vfork` children that patch sites of their own, in their parent's memory, leave the parent
/// with as many open descriptors as before (`tests/c/descriptors.c vfork`): a child replaced
/// the parent's kept files with its own, and the parent, opening them again, left its own
/// open.
#[test]
fn vfork_children_that_patch_leave_their_parents_descriptors_alone() {
    let Some(prog) = build("descriptors.c", &[]) else {
        return;
    };
    let run = if native_amx() {
        Program::native(&prog, &["vfork"]).run()
    } else {
        Program::preloaded(&prog, &["vfork"]).run()
    };
    assert!(run.ok(), "{run}");
    let line = run.line("descriptors before");
    let (before, after) = line.split_once(", after ").expect("two counts");
    assert_eq!(before, after, "{run}");
}

/// A signal at the instructions of a patched site's entry where it has restored the
/// program's registers and returns to an exit of the stub (the instruction faulted, another
/// signal was held back while it ran, or the thread has no engine state and the entry left for
/// the fault exit at once), placed there by a tracer's hardware breakpoints
/// (`tests/c/stepped.c`): the handler finds the thread at the site or past it, as on the
/// silicon, not in the stub or the entry (where it found it before).
#[test]
fn a_signal_as_the_entry_returns_to_a_stub_exit_is_at_the_site() {
    if !engine_runs_amx() {
        return;
    }
    let Some(prog) = build("stepped.c", &["-lpthread"]) else {
        return;
    };
    let symbols = match std::process::Command::new("nm").arg(library()).output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        other => {
            skip(
                Kind::NotApplicable,
                format!("no nm to read the library's symbols: {other:?}"),
            );
            return;
        }
    };
    let offset = |name: &str| {
        symbols
            .lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .and_then(|l| l.split(' ').next())
            .map(|hex| format!("0x{hex}"))
            .unwrap_or_else(|| panic!("{name} is not among the library's symbols"))
    };
    let offsets: Vec<String> = ["xsave", "ymm"]
        .iter()
        .flat_map(|e| ["tail", "marked", "pops"].map(|l| offset(&format!("amx_trap_fast_{e}_{l}"))))
        .collect();
    let stepped = |mode: &str| {
        let mut args = vec![mode];
        args.extend(offsets.iter().map(String::as_str));
        let run = Program::preloaded(&prog, &args)
            .env("AMX_TRAP_RESERVE", "0")
            .run();
        assert!(run.ok(), "{mode}: {run}");
        run
    };
    let run = stepped("returns");
    assert_eq!(
        run.stdout,
        "fault:\n\
         signal 10 at the site or past it: 1\n\
         signal 11 at the site or past it: 1\n\
         held:\n\
         signal 12 at the site or past it: 1\n\
         signal 10 at the site or past it: 1\n\
         done\n",
        "{run}"
    );
    assert!(run.stderr.contains("breakpoints hit: 3"), "{run}");
    let run = stepped("slotless");
    assert_eq!(
        run.stdout,
        "slotless:\n\
         signal 10 at the site or past it: 1\n\
         signal 4 at the site or past it: 1\n\
         done\n",
        "{run}"
    );
    assert!(run.stderr.contains("breakpoints hit: 1"), "{run}");
}
