//! The questions a test asks before it runs on the silicon or the trap engine, asked the same
//! way in every test suite. Each answers with what the test needs, or records the skip (see
//! [`mod@crate::skip`]) and answers `None` or `false`; the test then returns (or leaves a part out).
//!
//! How the trap engine counts: on x86-64 Linux without AMX the engine runs the silicon's code
//! path (the `Hardware` backend, the raw intrinsics), so a test that needs that code path runs
//! there and is not skipped. Only where neither the silicon nor the engine can run is it a skip,
//! of [`Kind::Hardware`].

use amx_runtime::{Backend, Hardware};

use crate::skip::{skip, Kind};

/// The silicon code path: the AMX silicon, or on x86-64 Linux without AMX the trap engine
/// (installed on first use). Elsewhere a [`Kind::Hardware`] skip and `None`.
pub fn silicon() -> Option<Hardware> {
    match amx_trap::hardware() {
        Ok(hw) => Some(hw),
        Err(why) => {
            skip(Kind::Hardware, silicon_reason(&why));
            None
        }
    }
}

/// The backends a test runs on: the emulator always, and `Backend::Hardware` where
/// [`silicon`] gives the code path. Where it does not, the hardware part of the test is skipped
/// ([`Kind::Hardware`]) and the emulator part runs.
pub fn backends() -> Vec<Backend> {
    let mut out = vec![Backend::Emulated];
    match amx_trap::hardware() {
        Ok(_) => out.push(Backend::Hardware),
        Err(why) => skip(
            Kind::Hardware,
            format!("its hardware-backend part {}", silicon_reason(&why)),
        ),
    }
    out
}

fn silicon_reason(why: &impl std::fmt::Display) -> String {
    format!("needs the AMX silicon or the trap engine (x86-64 Linux): {why}")
}

/// The trap engine installed in this process, with the XTILEDATA permission taken: `true`, or
/// a [`Kind::NotApplicable`] skip and `false` where it does not install (a CPU with AMX, whose
/// silicon the other tests use; or not x86-64 Linux).
///
/// # Panics
///
/// When the installed engine refuses the permission, which it grants by design.
pub fn trap_engine() -> bool {
    match amx_trap::install() {
        Ok(()) => {
            amx_runtime::permit::request_permission().expect("the trap engine grants XTILEDATA");
            true
        }
        Err(why) => {
            skip(
                Kind::NotApplicable,
                format!("tests the trap engine, which does not run here: {why}"),
            );
            false
        }
    }
}

/// Whether AMX is unusable here, for a test of what a program sees on a CPU without it: `true`,
/// or a [`Kind::NotApplicable`] skip and `false` where the silicon is usable.
pub fn no_silicon() -> bool {
    if Hardware::new().is_ok() {
        skip(
            Kind::NotApplicable,
            "tests a CPU without usable AMX, and this one has it",
        );
        return false;
    }
    true
}
