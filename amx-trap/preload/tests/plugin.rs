//! The library opened as a plugin (`dlopen`, not `LD_PRELOAD`) and closed again
//! (`tests/c/plugin.c`). Its constructor installs the engine, which hands the kernel its
//! signal handlers; had `dlclose` unmapped the library, the next AMX instruction would have
//! jumped into unmapped code and the process died of SIGSEGV. On the silicon nothing a program
//! closes can take its AMX instructions away, so the engine keeps its library resident (the
//! README's promise 11).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod support;
use support::*;

#[test]
fn amx_works_after_the_library_is_closed() {
    let Some(prog) = build("plugin.c", &["-ldl"]) else {
        return;
    };
    let lib = library();
    let lib = lib.to_str().expect("the library's path is UTF-8");
    let run = Program::native(&prog, &[lib]).run();
    assert!(run.ok(), "{run}");
    for round in 1..=2 {
        for what in [
            "permission:",
            "before dlclose:",
            "after dlclose:",
            "new thread after dlclose:",
        ] {
            let want = if what == "permission:" { "0" } else { "ok" };
            assert_eq!(run.line(&format!("round {round} {what}")), want, "{run}");
        }
        assert_eq!(run.line(&format!("round {round} dlclose:")), "0", "{run}");
        // Where the engine runs, its library stays; on AMX silicon it installs nothing and
        // the C library unmaps it, and the instructions are the silicon's either way.
        if !native_amx() {
            assert_eq!(
                run.line(&format!("round {round} mapped after dlclose:")),
                "yes",
                "{run}"
            );
        }
    }
}

/// A library the program links asks for the permission, runs AMX instructions and starts a
/// thread that blocks every signal, all in its constructor (`tests/c/early.c`), which the
/// loader runs before the preloaded library's: the engine starts at the first call the
/// library interposes. Before, the permission request reached the host kernel (EOPNOTSUPP),
/// and the worker's first AMX instruction ended the process with SIGILL.
#[test]
fn amx_in_a_linked_librarys_constructor_works() {
    let Some(lib) = build("early.c", &["-shared", "-fPIC", "-DLIBRARY"]) else {
        return;
    };
    let lib = lib.to_str().expect("the build path is UTF-8");
    let Some(prog) = build("early.c", &[lib]) else {
        return;
    };
    let run = if native_amx() {
        Program::native(&prog, &[]).run()
    } else {
        Program::preloaded(&prog, &[]).run()
    };
    assert!(run.ok(), "{run}");
    assert_eq!(run.line("constructor permission:"), "0 (errno 0)", "{run}");
    assert_eq!(run.line("constructor tiles:"), "ok", "{run}");
    assert_eq!(run.line("worker tiles:"), "ok", "{run}");
    assert_eq!(run.line("main permission has tile data:"), "1", "{run}");
}

/// A library that interposes `sigaction` and comes after this one (a sanitizer's runtime, the
/// JVM's `libjsig`) never sees the program's handlers, which the engine takes first: the
/// library says so on standard error, naming it. Preloaded before, it is not named.
#[test]
fn a_later_interposer_of_sigaction_is_named() {
    let (Some(prog), Some(other)) = (
        build("masks.c", &[]),
        build("interpose.c", &["-shared", "-fPIC"]),
    ) else {
        return;
    };
    let named = |first: &std::path::Path, second: &std::path::Path| {
        let order = format!("{}:{}", first.display(), second.display());
        let run = Program::preloaded(&prog, &["bsd"])
            .env("LD_PRELOAD", &order)
            .run();
        assert!(run.ok(), "{order}: {run}");
        let name = other
            .file_name()
            .expect("a file")
            .to_string_lossy()
            .into_owned();
        run.stderr
            .lines()
            .any(|l| l.starts_with("amx-trap: ") && l.contains(&name) && l.contains("sigaction"))
    };
    assert!(named(&library(), &other));
    assert!(!named(&other, &library()));
}
