//! One test of this test binary, run in a fresh child process.
//!
//! For bodies that must have a process of their own: they fork (forking while other tests run
//! copies their locks into the child), change process-wide state (a signal handler, the trap
//! engine's patching, an alternate signal stack), start from a fresh `exec` (the permission is
//! cleared by it), or are expected to die of a signal. The parent re-executes the test binary
//! filtered to that one test, with [`CHILD_ENV`] set, and gets its exit status, signal, standard
//! output and standard error:
//!
//! ```no_run
//! use amx_test_support::child::{in_child, Child};
//!
//! #[test]
//! #[ignore = "run in a child process by body_in_a_child_process"]
//! fn body() {
//!     if !in_child() {
//!         return; // `cargo test -- --ignored` alone runs nothing here
//!     }
//!     // ... what needs a process of its own
//! }
//!
//! #[test]
//! fn body_in_a_child_process() {
//!     Child::new("body").env("AMX_TRAP_PATCH", "0").run().assert_passed();
//! }
//! ```
//!
//! The child's skips (see [`mod@crate::skip`]) are counted in the parent's summary too: a parent
//! whose child skipped did not test what it names either.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::skip;

/// Set in the child's environment (to the test's name): [`in_child`] reads it.
pub const CHILD_ENV: &str = "AMX_TEST_SUPPORT_CHILD";

/// Whether this process is a child run by [`Child::run`]. An `#[ignore]`d body returns at once
/// without it, so that `cargo test -- --ignored` run by hand does not execute it in the
/// harness's multi-threaded process.
pub fn in_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// A test of this test binary to run in a child process.
#[derive(Debug)]
#[must_use = "nothing runs until `run`"]
pub struct Child {
    test: String,
    env: Vec<(OsString, Option<OsString>)>,
    limit: Option<Duration>,
    forward_skips: bool,
}

impl Child {
    /// The test named `test` (its full path, as libtest names it; `#[ignore]`d or not).
    pub fn new(test: &str) -> Child {
        Child {
            test: test.to_owned(),
            env: Vec::new(),
            limit: None,
            forward_skips: true,
        }
    }

    /// Sets `key` to `value` in the child's environment.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Child {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Removes `key` from the child's environment.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Child {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// Kills the child when it runs longer than `limit` ([`Output::timed_out`]).
    pub fn timeout(mut self, limit: Duration) -> Child {
        self.limit = Some(limit);
        self
    }

    /// Whether the child's skips count in this process's summary (the default); off for a
    /// child that skips on purpose, as in the tests of the skip machinery itself.
    pub fn forward_skips(mut self, forward: bool) -> Child {
        self.forward_skips = forward;
        self
    }

    /// Runs the child to its end (or its time limit) and returns what it did.
    ///
    /// # Panics
    ///
    /// When the test binary cannot be found or started: the test cannot go on without it.
    pub fn run(self) -> Output {
        let exe = std::env::current_exe().expect("the path of this test binary");
        let mut cmd = Command::new(exe);
        cmd.args([
            self.test.as_str(),
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &self.test)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        for (key, value) in &self.env {
            match value {
                Some(value) => cmd.env(key, value),
                None => cmd.env_remove(key),
            };
        }
        let mut child = cmd.spawn().expect("start this test binary again");
        // Both pipes are drained while the child runs, so a talkative child cannot block on a
        // full pipe while the parent waits for it to exit.
        let drain = |pipe: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_end(&mut bytes);
                }
                String::from_utf8_lossy(&bytes).into_owned()
            })
        };
        let stdout = drain(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let stderr = drain(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let start = Instant::now();
        let mut timed_out = false;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the child") {
                break status;
            }
            if self.limit.is_some_and(|limit| start.elapsed() > limit) {
                timed_out = true;
                let _ = child.kill();
                break child.wait().expect("wait for the killed child");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let output = Output {
            test: self.test,
            status,
            stdout: stdout.join().unwrap_or_default(),
            stderr: stderr.join().unwrap_or_default(),
            timed_out,
        };
        if self.forward_skips {
            for (test, reason) in output.skips() {
                skip::record(&format!("{test} (in a child process)"), &reason);
            }
        }
        output
    }
}

/// What a child process did.
#[derive(Debug)]
pub struct Output {
    /// The test it ran.
    pub test: String,
    /// How it ended.
    pub status: ExitStatus,
    /// Its standard output (libtest's lines and the test's own, not captured in the child).
    pub stdout: String,
    /// Its standard error (panic messages, skip lines, the skip summary).
    pub stderr: String,
    /// Whether it was killed at its time limit.
    pub timed_out: bool,
}

impl Output {
    /// Whether it exited with status 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// Its exit code, when it exited rather than died of a signal.
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// The signal it died of, if it did.
    pub fn signal(&self) -> Option<i32> {
        #[cfg(unix)]
        {
            std::os::unix::process::ExitStatusExt::signal(&self.status)
        }
        #[cfg(not(unix))]
        {
            None
        }
    }

    /// Whether the child ran its test and the test passed (exit status 0 alone would also hold
    /// for a filter that matched no test).
    pub fn passed(&self) -> bool {
        self.success() && self.stdout.contains("test result: ok. 1 passed")
    }

    /// Panics with everything the child printed unless [`passed`](Output::passed).
    pub fn assert_passed(&self) -> &Output {
        assert!(self.passed(), "the child process did not pass:\n{self}");
        self
    }

    /// The skips the child printed: (test, reason).
    pub fn skips(&self) -> Vec<(String, String)> {
        self.stderr
            .lines()
            .filter_map(|line| line.strip_prefix(skip::LINE_PREFIX)?.split_once(": "))
            .map(|(test, reason)| (test.to_owned(), reason.to_owned()))
            .collect()
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in a child process: {}", self.test, self.status)?;
        if self.timed_out {
            f.write_str(" (killed at its time limit)")?;
        }
        write!(
            f,
            "\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}
