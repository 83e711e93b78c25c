//! The skip machinery seen from outside, as `cargo test` shows it: each body runs in a child
//! process of this test binary (so its skips and exit stay out of this process), and the
//! parent reads the child's standard error and status.

use std::time::{Duration, Instant};

use amx_test_support::{in_child, skip, skip_not_applicable, Child};

const HARDWARE_REASON: &str = "needs a device this test invents";
const OTHER_REASON: &str = "covers a machine this one is not";

#[test]
#[ignore = "run in a child process by the tests below"]
fn child_skips_for_want_of_hardware() {
    if !in_child() {
        return;
    }
    skip!("{HARDWARE_REASON}");
}

#[test]
#[ignore = "run in a child process by the tests below"]
fn child_skips_as_not_applicable() {
    if !in_child() {
        return;
    }
    skip_not_applicable!("{OTHER_REASON}");
}

#[test]
#[ignore = "run in a child process by the tests below"]
fn child_skips_twice_and_passes() {
    if !in_child() {
        return;
    }
    // Two parts of one test left out for the same reason, and one for another.
    amx_test_support::skip(amx_test_support::Kind::Hardware, HARDWARE_REASON);
    amx_test_support::skip(amx_test_support::Kind::Hardware, HARDWARE_REASON);
    amx_test_support::skip(amx_test_support::Kind::NotApplicable, OTHER_REASON);
}

fn child(test: &str) -> Child {
    Child::new(test)
        .env_remove(amx_test_support::skip::REQUIRE_HARDWARE)
        .forward_skips(false)
}

#[test]
fn a_skip_is_visible_and_summed_up_at_exit() {
    let out = child("child_skips_for_want_of_hardware").run();
    out.assert_passed();
    assert!(
        out.stderr.contains(&format!(
            "skipped child_skips_for_want_of_hardware: {HARDWARE_REASON}\n"
        )),
        "{out}"
    );
    assert_eq!(
        out.stderr.lines().last(),
        Some(format!("1 test(s) skipped: {HARDWARE_REASON} (x1)").as_str()),
        "{out}"
    );
    assert_eq!(
        out.skips(),
        [(
            "child_skips_for_want_of_hardware".to_owned(),
            HARDWARE_REASON.to_owned()
        )]
    );
}

#[test]
fn the_summary_counts_reasons() {
    let out = child("child_skips_twice_and_passes").run();
    out.assert_passed();
    assert_eq!(
        out.stderr.lines().last(),
        Some(format!("3 test(s) skipped: {HARDWARE_REASON} (x2), {OTHER_REASON} (x1)").as_str()),
        "{out}"
    );
}

#[test]
fn without_skips_there_is_no_summary() {
    let out = child("a_tile_image_is_a_static").run();
    out.assert_passed();
    assert!(!out.stderr.contains("skipped"), "{out}");
}

#[test]
fn require_hardware_makes_a_hardware_skip_a_failure() {
    let out = child("child_skips_for_want_of_hardware")
        .env(amx_test_support::skip::REQUIRE_HARDWARE, "1")
        .run();
    assert!(!out.success() && !out.passed(), "{out}");
    assert!(out.stdout.contains("1 failed"), "{out}");
    assert!(
        out.stderr.contains(
            "child_skips_for_want_of_hardware skipped for want of hardware, which \
             AMX_REQUIRE_HARDWARE=1 makes a failure: needs a device this test invents"
        ),
        "{out}"
    );
    assert!(!out.stderr.contains("test(s) skipped"), "{out}");
}

#[test]
fn require_hardware_leaves_a_not_applicable_skip_a_skip() {
    for value in ["1", "0", ""] {
        let out = child("child_skips_as_not_applicable")
            .env(amx_test_support::skip::REQUIRE_HARDWARE, value)
            .run();
        out.assert_passed();
        assert!(
            out.stderr
                .contains(&format!("1 test(s) skipped: {OTHER_REASON} (x1)")),
            "{out}"
        );
    }
    // `0` and empty mean off.
    for value in ["0", ""] {
        child("child_skips_for_want_of_hardware")
            .env(amx_test_support::skip::REQUIRE_HARDWARE, value)
            .run()
            .assert_passed();
    }
}

#[test]
#[ignore = "run in a child process by the tests below"]
fn child_runs_a_skipping_grandchild() {
    if !in_child() {
        return;
    }
    Child::new("child_skips_as_not_applicable")
        .run()
        .assert_passed();
}

#[test]
fn a_childs_skips_count_in_the_parents_summary() {
    // One level down, so that this binary's own summary stays clean.
    let out = child("child_runs_a_skipping_grandchild").run();
    out.assert_passed();
    assert!(
        out.stderr.contains(&format!(
            "skipped child_skips_as_not_applicable (in a child process): {OTHER_REASON}\n"
        )),
        "{out}"
    );
    assert_eq!(
        out.stderr.lines().last(),
        Some(format!("1 test(s) skipped: {OTHER_REASON} (x1)").as_str()),
        "{out}"
    );
}

// The harness itself.

#[test]
#[ignore = "run in a child process by the tests below"]
fn child_reports_its_environment() {
    if !in_child() {
        return;
    }
    println!(
        "marker {:?}, extra {:?}, removed {:?}",
        std::env::var(amx_test_support::child::CHILD_ENV).ok(),
        std::env::var("AMX_TEST_SUPPORT_EXTRA").ok(),
        std::env::var("CARGO_PKG_NAME").ok(),
    );
}

#[test]
fn the_child_gets_the_marker_and_its_environment() {
    let out = Child::new("child_reports_its_environment")
        .env("AMX_TEST_SUPPORT_EXTRA", "yes")
        .env_remove("CARGO_PKG_NAME")
        .run();
    out.assert_passed();
    assert!(
        out.stdout.contains(
            "marker Some(\"child_reports_its_environment\"), extra Some(\"yes\"), removed None"
        ),
        "{out}"
    );
}

#[test]
fn a_filter_that_runs_no_test_did_not_pass() {
    let out = Child::new("no_such_test").run();
    assert!(out.success(), "{out}");
    assert!(!out.passed(), "{out}");
}

#[cfg(unix)]
#[test]
#[ignore = "run in a child process by the tests below"]
fn child_dies_of_a_signal() {
    if !in_child() {
        return;
    }
    // SAFETY: SIGTERM's default action ends this child process (without a core dump), which is
    // what the parent checks for.
    unsafe { libc::raise(libc::SIGTERM) };
    unreachable!("SIGTERM ends the process");
}

#[cfg(unix)]
#[test]
fn the_signal_a_child_died_of_is_reported() {
    let out = Child::new("child_dies_of_a_signal").run();
    assert_eq!(out.signal(), Some(libc::SIGTERM), "{out}");
    assert_eq!(out.code(), None);
    assert!(!out.passed());
}

#[test]
#[ignore = "run in a child process by the tests below"]
fn child_runs_too_long() {
    if !in_child() {
        return;
    }
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_child_past_its_time_limit_is_killed() {
    let start = Instant::now();
    let out = Child::new("child_runs_too_long")
        .timeout(Duration::from_millis(300))
        .run();
    assert!(out.timed_out && !out.passed(), "{out}");
    assert!(start.elapsed() < Duration::from_secs(30));
    assert!(out.to_string().contains("killed at its time limit"));
}

#[test]
fn a_tile_image_is_a_static() {
    static ALL: [u8; 64] = amx_test_support::TileImage::palette(1)
        .all_tiles(16, 64)
        .bytes();
    assert_eq!(ALL[0], 1);
    assert_eq!(&ALL[16..18], &[64, 0]);
    assert_eq!(ALL[55], 16);
}

#[cfg(feature = "proptest")]
#[test]
#[ignore = "run in a child process by the tests below"]
fn child_prints_its_case_count() {
    if !in_child() {
        return;
    }
    println!("cases {}", amx_test_support::proptest_config(7).cases);
}

#[cfg(feature = "proptest")]
#[test]
fn proptest_cases_overrides_the_default_count() {
    let cases = |value: Option<&str>| {
        let child = Child::new("child_prints_its_case_count");
        let child = match value {
            Some(value) => child.env("PROPTEST_CASES", value),
            None => child.env_remove("PROPTEST_CASES"),
        };
        let out = child.run();
        out.assert_passed();
        out.stdout
            .lines()
            // libtest's `test ... ` may precede the line on the same row.
            .find_map(|line| line.split_once("cases ").map(|(_, count)| count))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no case count in {out}"))
    };
    assert_eq!(cases(None), "7");
    assert_eq!(cases(Some("")), "7");
    assert_eq!(cases(Some("3")), "3");
}
