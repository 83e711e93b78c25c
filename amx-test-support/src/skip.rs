//! Visible skips, summed up when the test binary exits.
//!
//! libtest captures what a test prints with `print!` and `eprint!` and shows it only when the
//! test fails, so a test that returns early because the machine lacks what it needs shows as
//! `ok` with its reason unseen. [`skip()`] writes its line to the process's standard error
//! directly, which libtest does not capture, and records the reason. When the test binary
//! exits, one line sums up its skips by reason:
//!
//! ```text
//! test thousand_int8 ... skipped thousand_int8: its hardware-backend part: the trap engine ...
//! ...
//! 3 test(s) skipped: its hardware-backend part: the trap engine ... (x3)
//! ```
//!
//! With `AMX_REQUIRE_HARDWARE=1` in the environment, a skip of [`Kind::Hardware`] fails the
//! test instead (a panic naming the test and the reason): a run on AMX silicon that must
//! exercise everything the silicon can sets it. A test that runs the silicon's code path on the
//! trap engine (x86-64 Linux without AMX) is not skipped, so it passes under the variable too;
//! only what neither the silicon nor the engine can run is a skip.
//!
//! A forked child that leaves with `exit` rather than `_exit` prints the parent's summary again:
//! children of tests leave with `_exit`.

use std::fmt::Display;
use std::io::Write;
use std::sync::{Mutex, Once, PoisonError};

/// The environment variable that turns a [`Kind::Hardware`] skip into a test failure (any
/// value but empty or `0`).
pub const REQUIRE_HARDWARE: &str = "AMX_REQUIRE_HARDWARE";

/// What a skipped test lacks; decides what `AMX_REQUIRE_HARDWARE=1` does with the skip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Hardware the test needs: the AMX silicon and the trap engine both unusable, a feature
    /// every AMX CPU has (AMX-INT8, AMX-BF16, palette 1 of 8 tiles of 16 x 64 bytes), or work
    /// too slow on the trap engine that runs at full speed on the silicon. A failure under
    /// `AMX_REQUIRE_HARDWARE=1`.
    Hardware,
    /// The test does not apply here: it covers a CPU without AMX, or the trap engine (which
    /// does not install where the CPU has AMX), or an extension only later CPU generations have
    /// (AMX-FP16), or it needs a tool or a toolchain version the machine lacks. A skip even
    /// under `AMX_REQUIRE_HARDWARE=1`.
    NotApplicable,
}

/// Reasons in the order first seen, with how often each was given.
static SKIPS: Mutex<Vec<(String, usize)>> = Mutex::new(Vec::new());

/// Counts `reason` in `skips`.
fn tally(skips: &mut Vec<(String, usize)>, reason: &str) {
    match skips.iter_mut().find(|(seen, _)| seen == reason) {
        Some((_, count)) => *count += 1,
        None => skips.push((reason.to_owned(), 1)),
    }
}
static SUMMARY_AT_EXIT: Once = Once::new();

/// Whether `AMX_REQUIRE_HARDWARE` asks for every [`Kind::Hardware`] skip to fail.
pub fn require_hardware() -> bool {
    std::env::var_os(REQUIRE_HARDWARE).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Skips the calling test (or the part of it the caller leaves out) for `reason`: prints
/// `skipped <test>: <reason>` where `cargo test` shows it, and counts it in the summary printed
/// at exit. The caller returns (or goes on without the part); the [`skip!`](crate::skip!) and
/// [`skip_not_applicable!`](crate::skip_not_applicable!) macros return for it.
///
/// # Panics
///
/// With `AMX_REQUIRE_HARDWARE=1` and [`Kind::Hardware`]: the skip becomes a test failure whose
/// message names the test and the reason.
pub fn skip(kind: Kind, reason: impl Display) {
    let test = current_test();
    let reason = reason.to_string();
    if kind == Kind::Hardware && require_hardware() {
        panic!(
            "{test} skipped for want of hardware, which {REQUIRE_HARDWARE}=1 makes a failure: \
             {reason}"
        );
    }
    record(&test, &reason);
}

/// The test running on this thread: libtest names each test's thread after it.
pub fn current_test() -> String {
    std::thread::current()
        .name()
        .filter(|name| *name != "main")
        .unwrap_or("a test's own thread")
        .to_owned()
}

/// Prints the skip line and counts the reason (also for a child process's skips, forwarded to
/// the parent's summary).
pub(crate) fn record(test: &str, reason: &str) {
    write_stderr(&format!("skipped {test}: {reason}\n"));
    tally(
        &mut SKIPS.lock().unwrap_or_else(PoisonError::into_inner),
        reason,
    );
    SUMMARY_AT_EXIT.call_once(|| {
        // SAFETY: atexit registers a function that takes no argument; `print_summary` never
        // unwinds (it neither panics nor calls anything that may), as a function the C
        // library calls must not. A failed registration loses only the summary line.
        unsafe { libc::atexit(print_summary) };
    });
}

/// The prefix of the line [`record`] prints, which the child harness reads back.
pub(crate) const LINE_PREFIX: &str = "skipped ";

/// The summary of `skips` (reason, count), or `None` when nothing was skipped.
pub fn summary(skips: &[(String, usize)]) -> Option<String> {
    let total: usize = skips.iter().map(|(_, count)| count).sum();
    if total == 0 {
        return None;
    }
    let reasons: Vec<String> = skips
        .iter()
        .map(|(reason, count)| format!("{reason} (x{count})"))
        .collect();
    Some(format!("{total} test(s) skipped: {}", reasons.join(", ")))
}

/// This process's skips so far: (reason, count) in the order first seen.
pub fn skips() -> Vec<(String, usize)> {
    SKIPS.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

extern "C" fn print_summary() {
    // No unwinding out of here (see `record`): a poisoned lock is read anyway and write errors
    // are ignored.
    let skips = SKIPS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(line) = summary(&skips) {
        write_stderr(&format!("{line}\n"));
    }
}

/// Writes to the process's standard error itself, past libtest's capture (which only sees
/// `print!` and `eprint!`).
fn write_stderr(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Skips the calling test for want of hardware ([`Kind::Hardware`]) and returns from it: the
/// arguments are `format!`'s.
///
/// ```no_run
/// fn needs_a_device(found: bool) {
///     if !found {
///         amx_test_support::skip!("needs a device that is not here");
///     }
///     unreachable!("only reached with a device");
/// }
/// needs_a_device(false);
/// ```
#[macro_export]
macro_rules! skip {
    ($($arg:tt)+) => {{
        $crate::skip::skip($crate::skip::Kind::Hardware, ::std::format_args!($($arg)+));
        return;
    }};
}

/// Skips the calling test as not applicable here ([`Kind::NotApplicable`]) and returns from
/// it: the arguments are `format!`'s.
#[macro_export]
macro_rules! skip_not_applicable {
    ($($arg:tt)+) => {{
        $crate::skip::skip($crate::skip::Kind::NotApplicable, ::std::format_args!($($arg)+));
        return;
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_each_reason_in_first_seen_order() {
        assert_eq!(summary(&[]), None);
        let skips = [("no silicon".to_owned(), 2), ("no gcc".to_owned(), 1)];
        assert_eq!(
            summary(&skips).as_deref(),
            Some("3 test(s) skipped: no silicon (x2), no gcc (x1)")
        );
    }

    #[test]
    fn skips_are_tallied_by_reason() {
        let mut skips = Vec::new();
        for reason in ["no silicon", "no gcc", "no silicon"] {
            tally(&mut skips, reason);
        }
        assert_eq!(
            skips,
            [("no silicon".to_owned(), 2), ("no gcc".to_owned(), 1)]
        );
    }

    #[test]
    fn the_test_is_named_after_its_thread() {
        assert_eq!(
            current_test(),
            "skip::tests::the_test_is_named_after_its_thread"
        );
        let inner = std::thread::spawn(current_test).join().unwrap();
        assert_eq!(inner, "a test's own thread");
    }
}
