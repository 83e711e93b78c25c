//! `tilecfg!` rejects every invalid configuration at compile time, with one error per mistake on
//! the token that caused it. One file per rule under `tests/ui/<category>/`, the expected
//! compiler output beside it (`TRYBUILD=overwrite` regenerates them; read every one before
//! committing).

use std::process::Command;

/// The macro's own errors: messages and spans that `tilecfg!` produces, the same on every
/// toolchain.
#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    for category in [
        "limits", "names", "numbers", "palette", "safety", "several", "syntax", "use_time",
    ] {
        t.compile_fail(format!("tests/ui/{category}/*.rs"));
    }
}

/// The toolchain the snapshots of `operand_mismatches` were recorded with.
const RECORDED_WITH: &str = "rustc 1.95.";

/// Typed operands that do not fit a dot product. The error is the trait bound's
/// `on_unimplemented` message on the user's own span, but rustc also prints notes about where
/// the bound is declared (lines of `amx-runtime`'s source, rendered the way the compiler of
/// the day renders them), and those change between compiler versions. So these snapshots are
/// compared only on the toolchain they were recorded with; elsewhere the test is skipped, with
/// its reason shown (the same checks run, as passing code, in `tests/typed_tiles.rs`).
///
/// The guards that stay on their thread (`tests/ui/threads/`) are here for the same reason:
/// the error on the user's `thread::spawn` is the compiler's own, and its notes quote the
/// standard library's source lines.
#[test]
fn operand_mismatches() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let version = Command::new(&rustc)
        .arg("--version")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default();
    if !version.starts_with(RECORDED_WITH) {
        amx_test_support::skip_not_applicable!(
            "its snapshots were recorded with {RECORDED_WITH}x, and this is {:?}; the notes \
             rustc adds to the error differ between versions",
            version.trim()
        );
    }
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/operands/*.rs");
    t.compile_fail("tests/ui/threads/*.rs");
}
