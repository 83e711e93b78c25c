//! `detect()` on the machine running the tests: it runs, has no side effects, and agrees with
//! the kernel's own view in /proc/cpuinfo.

use amx_runtime::detect::{detect, Unavailable};
use amx_runtime::permit::permission_state;
use amx_runtime::Hardware;

/// The CPU flags of the first processor in /proc/cpuinfo, when there is one.
fn cpuinfo_flags() -> Option<Vec<String>> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("flags"))?;
    let (_, flags) = line.split_once(':')?;
    Some(flags.split_whitespace().map(str::to_owned).collect())
}

#[test]
fn detect_agrees_with_proc_cpuinfo() {
    let caps = detect();
    let why = caps.unavailable();
    println!("{caps:#?}");
    match &why {
        Some(why) => println!("AMX is unavailable here: {why}"),
        None => println!("AMX is usable here (permission: {})", caps.permission),
    }

    let Some(flags) = cpuinfo_flags() else {
        amx_test_support::skip_not_applicable!(
            "its /proc/cpuinfo comparison needs a /proc/cpuinfo flags line (Linux on x86)"
        );
    };
    let has = |flag: &str| flags.iter().any(|f| f == flag);
    if has("amx_tile") {
        assert!(
            caps.amx_tile,
            "/proc/cpuinfo lists amx_tile, detect() does not"
        );
        assert_eq!(caps.amx_int8, has("amx_int8"));
        assert_eq!(caps.amx_bf16, has("amx_bf16"));
        // Linux clears the amx flags when it could not enable the tile state in XCR0.
        assert!(caps.xtilecfg_enabled() && caps.xtiledata_enabled());
    } else {
        assert!(
            matches!(
                why,
                Some(Unavailable::NotX86_64 | Unavailable::NotLinux | Unavailable::NoAmxTile)
            ),
            "/proc/cpuinfo lacks amx_tile, yet the reason is {why:?}"
        );
    }
    // Linux sets CR4.OSXSAVE whenever it lists xsave (booting with noxsave removes both).
    if has("xsave") {
        assert!(caps.osxsave && caps.xcr0.is_some());
    }
}

/// Held by the tests that watch the permission and the one that requests it (`Hardware::new`),
/// which would otherwise race: the permission is the process's.
static PERMISSION: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn detect_has_no_side_effects() {
    let _permission = PERMISSION.lock().unwrap_or_else(|e| e.into_inner());
    let before = permission_state();
    let a = detect();
    let b = detect();
    assert_eq!(a, b);
    assert_eq!(
        permission_state(),
        before,
        "detect() changed the permission"
    );
}

#[test]
fn hardware_new_reports_the_platform_reason() {
    let _permission = PERMISSION.lock().unwrap_or_else(|e| e.into_inner());
    let why = detect().unavailable();
    let first = Hardware::new().map(drop);
    match (first.clone(), why) {
        (Ok(_), None) => println!("hardware usable"),
        (Err(got), Some(expected)) => {
            println!("Hardware::new(): {got}");
            assert_eq!(got, expected);
        }
        (Ok(_), Some(expected)) => panic!("Hardware::new() succeeded although {expected}"),
        // A permission refusal (a small sigaltstack somewhere) is the only reason detect()
        // cannot foresee.
        (Err(got), None) => assert!(
            matches!(got, Unavailable::PermissionRefused { .. }),
            "{got}"
        ),
    }
    // Calling it again gives the same answer (successes are cached, platform failures too).
    assert_eq!(Hardware::new().map(drop), first);
}
