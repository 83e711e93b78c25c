//! What the tests of the preload library share: hostile C and C++ programs (`tests/c/`), built
//! with the system's gcc and g++ (a visible skip where they are missing), run with and without
//! the library, with a time limit.
//!
//! The library tested is the one cargo built beside the test, or the one `AMX_TRAP_PRELOAD`
//! names (to run the same tests against another build). Programs are built once per source
//! and flags, under `CARGO_TARGET_TMPDIR`, so a test binary run elsewhere with the same target
//! directory (a guest machine without AMX) reuses them.
// Each test binary uses part of this module.
#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub use amx_test_support::{skip, Kind};

/// The preload library under test.
pub fn library() -> PathBuf {
    if let Some(path) = std::env::var_os("AMX_TRAP_PRELOAD") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("the deps directory");
    let name = "libamx_trap_preload.so";
    let candidates = [
        deps.join(name),
        deps.parent().map(|p| p.join(name)).unwrap_or_default(),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| panic!("{name} is in none of {candidates:?}"))
}

/// Whether this CPU executes AMX itself (then the preloaded engine stays out of the way).
pub fn native_amx() -> bool {
    let caps = amx_runtime::detect();
    caps.amx_tile && caps.xtilecfg_enabled() && caps.xtiledata_enabled()
}

/// Whether the engine under the preload runs the AMX instructions here: `true`, or a visible
/// skip and `false` on a CPU with AMX.
pub fn engine_runs_amx() -> bool {
    if native_amx() {
        skip(
            Kind::NotApplicable,
            "tests the trap engine's AMX, and this CPU executes AMX itself (run the tests in a \
             guest without AMX: scripts/no-amx-guest)",
        );
        return false;
    }
    true
}

/// The environment that makes the preloaded engine run its signal handling here: nothing on a
/// CPU without AMX, `AMX_TRAP_FORCE=1` on one with AMX (the instructions stay the silicon's).
pub fn engine_env() -> Vec<(&'static str, &'static str)> {
    if native_amx() {
        vec![("AMX_TRAP_FORCE", "1")]
    } else {
        Vec::new()
    }
}

/// C or C++.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lang {
    C,
    Cxx,
}

/// The program built from `tests/c/<source>` with `flags`, or `None` after a visible skip (no
/// compiler, or one without the flags).
pub fn build(source: &str, flags: &[&str]) -> Option<PathBuf> {
    let lang = if source.ends_with(".cc") {
        Lang::Cxx
    } else {
        Lang::C
    };
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(source);
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // Every program includes the shared header: a change there rebuilds them all.
    let header = path.with_file_name("hostile.h");
    let shared = std::fs::read(&header).unwrap_or_else(|e| panic!("{}: {e}", header.display()));
    let mut h = DefaultHasher::new();
    (text, shared, flags, lang).hash(&mut h);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostile");
    let stem = source.split('.').next().unwrap_or(source);
    let out = dir.join(format!("{stem}-{:016x}", h.finish()));
    if out.is_file() {
        return Some(out);
    }
    std::fs::create_dir_all(&dir).expect("the build directory");
    let compiler = match lang {
        Lang::C => "gcc",
        Lang::Cxx => "g++",
    };
    // A name of its own for each build under way (tests of one binary build in parallel).
    static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let partial = out.with_extension(format!("part{}-{n}", std::process::id()));
    let built = Command::new(compiler)
        .args(["-O1", "-g", "-Wall", "-o"])
        .arg(&partial)
        .arg(&path)
        .args(flags)
        .arg("-lpthread")
        .output();
    match built {
        Ok(o) if o.status.success() => {
            if std::fs::rename(&partial, &out).is_err() && !out.is_file() {
                panic!(
                    "{} could not be moved to {}",
                    partial.display(),
                    out.display()
                );
            }
            Some(out)
        }
        Ok(o) => {
            skip(
                Kind::NotApplicable,
                format!(
                    "{compiler} cannot build {source} {flags:?} here: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
            );
            None
        }
        Err(e) => {
            skip(Kind::NotApplicable, format!("no {compiler}: {e}"));
            None
        }
    }
}

/// How a program ended.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// It was killed for running past its time limit.
    pub timed_out: bool,
}

impl Run {
    /// The signal that ended it, if one did.
    pub fn signal(&self) -> Option<i32> {
        self.status.signal()
    }

    /// Its exit code, if it exited.
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// The text after `key ` on the line starting with it.
    pub fn line(&self, key: &str) -> &str {
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("no {key:?} line in:\n{self}"))
    }

    /// Whether it exited with status 0, in time.
    pub fn ok(&self) -> bool {
        !self.timed_out && self.status.success()
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}{}\n--- stdout\n{}--- stderr\n{}",
            self.status,
            if self.timed_out { " (timed out)" } else { "" },
            self.stdout,
            self.stderr
        )
    }
}

/// A program run: with or without the library, arguments, environment, time limit.
pub struct Program {
    cmd: Command,
    limit: Duration,
}

impl Program {
    /// `path` with `args`, under the library (the engine's environment included: see
    /// [`engine_env`]).
    pub fn preloaded(path: &Path, args: &[&str]) -> Program {
        let mut p = Program::native(path, args);
        p.cmd.env("LD_PRELOAD", library());
        for (k, v) in engine_env() {
            p.cmd.env(k, v);
        }
        p
    }

    /// `path` with `args`, without the library.
    pub fn native(path: &Path, args: &[&str]) -> Program {
        let mut cmd = Command::new(path);
        cmd.args(args)
            .env_remove("LD_PRELOAD")
            .env_remove("AMX_TRAP_PATCH")
            .env_remove("AMX_TRAP_CPU")
            .env_remove("AMX_TRAP_CPUID")
            .env_remove("AMX_TRAP_FORCE")
            .env_remove("AMX_TRAP_RESERVE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Program {
            cmd,
            limit: Duration::from_secs(600),
        }
    }

    /// Sets an environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Program {
        self.cmd.env(key, value);
        self
    }

    /// Kills the program after `limit` (a hang fails the test instead of the test run).
    pub fn limit(mut self, limit: Duration) -> Program {
        self.limit = limit;
        self
    }

    /// Runs it to the end or its time limit.
    pub fn run(mut self) -> Run {
        let mut child = self.cmd.spawn().expect("start the program");
        let mut stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        let out = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = stdout.read_to_end(&mut s);
            s
        });
        let err = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = stderr.read_to_end(&mut s);
            s
        });
        let start = Instant::now();
        let mut timed_out = false;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the program") {
                break status;
            }
            if start.elapsed() > self.limit {
                timed_out = true;
                let _ = child.kill();
                break child.wait().expect("wait for the killed program");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let text = |h: std::thread::JoinHandle<Vec<u8>>| {
            String::from_utf8_lossy(&h.join().unwrap_or_default()).into_owned()
        };
        Run {
            status,
            stdout: text(out),
            stderr: text(err),
            timed_out,
        }
    }
}

/// How much slower than a native x86-64 machine this one handles a signal: the test's timing
/// scales by it (a software-emulated CPU is 10 to 50 times slower). Measured once: a SIGILL
/// round trip, against 3 µs.
pub fn slowness() -> f64 {
    use std::sync::OnceLock;
    static SLOWNESS: OnceLock<f64> = OnceLock::new();
    *SLOWNESS.get_or_init(|| {
        let Some(probe) = build("probe.c", &[]) else {
            return 1.0;
        };
        let run = Program::native(&probe, &["sigill-cost"]).run();
        let us: f64 = run
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("sigill-us "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(3.0);
        (us / 3.0).max(1.0)
    })
}
