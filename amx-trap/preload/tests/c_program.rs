//! An unmodified C program built with `gcc -O2 -mamx-tile -mamx-int8 -mamx-bf16` and the
//! `<immintrin.h>` intrinsics (`tests/c/amx_program.c`), run under `LD_PRELOAD` of the
//! library: its results must equal the emulator's bit for bit, its own SIGSEGV and SIGILL
//! handlers must see what Linux reports on the silicon (and leave with `siglongjmp`), and
//! without handlers it must die of the same signal. Skipped, with the reason shown, where gcc
//! lacks the AMX flags.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use amx_runtime::{Emulator, TileUnit};

/// The preload library cargo built for this test (the cdylib beside the test's own deps).
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("the deps directory");
    let candidates = [
        deps.join("libamx_trap_preload.so"),
        deps.parent()
            .map(|p| p.join("libamx_trap_preload.so"))
            .unwrap_or_default(),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| panic!("libamx_trap_preload.so is in none of {candidates:?}"))
}

/// The C program, built once; or why gcc cannot build it.
fn build() -> Result<&'static Path, &'static str> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/amx_program.c");
            let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("amx_program");
            let built = Command::new("gcc")
                .args(["-O2", "-mamx-tile", "-mamx-int8", "-mamx-bf16", "-o"])
                .arg(&out)
                .arg(&source)
                .output();
            match built {
                Ok(o) if o.status.success() => Ok(out),
                Ok(o) => Err(format!(
                    "gcc cannot build AMX code here: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                )),
                Err(e) => Err(format!("no gcc: {e}")),
            }
        })
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(String::as_str)
}

/// The C program, or `None` after skipping the calling test (each test that needs it).
fn program() -> Option<&'static Path> {
    build()
        .map_err(|why| amx_test_support::skip(amx_test_support::Kind::NotApplicable, why))
        .ok()
}

fn run(program: &Path, mode: &str) -> Output {
    Command::new(program)
        .arg(mode)
        .env("LD_PRELOAD", library())
        .env_remove("AMX_TRAP_CPU")
        .output()
        .expect("run the C program")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The line of `out` starting with `key ` (without the key).
fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {key:?} line in:\n{out}"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether the kernel lets a process make `cpuid` fault (tried in a child, which exits at once).
fn cpuid_faulting_available() -> bool {
    // SAFETY: the child makes one system call and _exits.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            let rc = libc::syscall(libc::SYS_arch_prctl, 0x1012, 0);
            libc::_exit(i32::from(rc != 0));
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

#[test]
fn c_program_results_and_handlers() {
    let Some(program) = program() else { return };
    let out = run(program, "run");
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "{}: {text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );

    if cpuid_faulting_available() {
        assert_eq!(line(&text, "cpuid7"), "tile=1 int8=1 bf16=1", "{text}");
        assert_eq!(
            line(&text, "palette1"),
            "04002000 00080040 00000010",
            "{text}"
        );
    } else {
        println!(
            "CPUID faulting is not offered here: cpuid reports the host ({})",
            line(&text, "cpuid7")
        );
    }
    assert_eq!(line(&text, "perm before"), "0", "{text}");
    assert_eq!(line(&text, "perm request"), "0 after 1", "{text}");

    // The same instructions on the emulator.
    let a: Vec<u8> = (0..1024u32).map(|i| (i * 37 + 11) as u8).collect();
    let b: Vec<u8> = (0..1024u32).map(|i| (i * 101 + 3) as u8).collect();
    let cfg = amx_test_support::TileImage::palette(1)
        .all_tiles(16, 64)
        .bytes();
    let mut emu = Emulator::new();
    emu.ldtilecfg(&cfg).unwrap();
    emu.tileloadd(1, &a, 64).unwrap();
    emu.tileloaddt1(2, &b, 64).unwrap();
    type Dot = fn(&mut Emulator, u8, u8, u8) -> Result<(), amx_runtime::Fault>;
    let dots: [(&str, u8, Dot); 5] = [
        ("ssd", 0, |e, c, a, b| e.tdpbssd(c, a, b)),
        ("sud", 0, |e, c, a, b| e.tdpbsud(c, a, b)),
        ("usd", 0, |e, c, a, b| e.tdpbusd(c, a, b)),
        ("uud", 0, |e, c, a, b| e.tdpbuud(c, a, b)),
        ("bf16", 3, |e, c, a, b| e.tdpbf16ps(c, a, b)),
    ];
    for (name, c, dot) in dots {
        emu.tilezero(c).unwrap();
        dot(&mut emu, c, 1, 2).unwrap();
        let mut out = [0u8; 1024];
        emu.tilestored(c, &mut out, 64).unwrap();
        assert_eq!(
            line(&text, name),
            hex(&out),
            "{name} differs from the emulator"
        );
    }
    assert_eq!(line(&text, "config kept"), "1", "{text}");
    assert_eq!(
        line(&text, "handler saw init"),
        "1, state restored 1",
        "a handler using AMX: {text}"
    );
    assert_eq!(
        line(&text, "sigset handler saw init"),
        "1, state restored 1",
        "a handler installed with sigset: {text}"
    );

    // docs/semantics.md section 1, read by the program's own handlers.
    assert_eq!(
        line(&text, "gp"),
        "sig=11 code=128 trapno=13 addr=(nil)",
        "{text}"
    );
    // The handler ran with the INIT tile state and siglongjmp does not restore the frame's:
    // the configuration is gone afterwards, as on the silicon.
    assert_eq!(line(&text, "config after gp kept"), "0", "{text}");
    assert_eq!(line(&text, "ud"), "sig=4 code=2 trapno=6", "{text}");
    assert_eq!(line(&text, "ud2"), "sig=4 code=2 trapno=6", "{text}");
}

#[test]
fn c_program_without_the_permission_gets_xfd() {
    let Some(program) = program() else { return };
    let out = run(program, "xfd");
    let text = stdout(&out);
    assert!(out.status.success(), "{}: {text}", out.status);
    // XFD's #NM as Linux reports it: SIGILL, ILL_ILLOPC, REG_TRAPNO 0.
    assert_eq!(line(&text, "xfd"), "sig=4 code=1 trapno=0", "{text}");
}

#[test]
fn c_program_without_handlers_dies_of_the_signal() {
    let Some(program) = program() else { return };
    for (mode, signal) in [("die-gp", libc::SIGSEGV), ("die-ud", libc::SIGILL)] {
        let out = run(program, mode);
        assert_eq!(
            out.status.signal(),
            Some(signal),
            "{mode}: {} {}",
            out.status,
            stdout(&out)
        );
        assert!(!stdout(&out).contains("survived"), "{mode}");
    }
}
