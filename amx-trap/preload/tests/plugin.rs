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
