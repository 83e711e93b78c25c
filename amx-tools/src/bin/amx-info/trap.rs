//! The trap engine's cost per instruction, where it can run (x86-64 Linux without usable AMX):
//! the silicon code path (raw AMX instructions) trapping on the first executions of a site (a
//! SIGILL round trip each: patching off) and on repeat executions (the site patched into a jump
//! to a stub), beside the emulator backend's own cost for the same instruction.
//!
//! Runs last: installing the engine changes what `detect()` reports for the rest of the
//! process.

use std::time::Duration;

use amx_runtime::intrinsics::{_tile_dpbssd, _tile_loadconfig, _tile_loadd, _tile_release};
use amx_runtime::{configure_on, Backend};
use amx_trap as trap;

use amx_tools::timing::per_call_ns as time_ns;
use amx_tools::Sample;
use serde::Serialize;

/// One instruction's costs, nanoseconds per instruction.
#[derive(Serialize)]
pub struct TrapRow {
    pub instruction: &'static str,
    #[serde(rename = "emulator_ns")]
    pub emulator: Option<Sample>,
    #[serde(rename = "trapped_first_ns")]
    pub first: Option<Sample>,
    #[serde(rename = "trapped_repeat_ns")]
    pub repeat: Option<Sample>,
    /// `repeat` over `emulator` at the medians, filled in by [`run`].
    pub repeat_over_emulator: Option<f64>,
}

impl TrapRow {
    fn new(
        instruction: &'static str,
        emulator: Option<Sample>,
        first: Option<Sample>,
        repeat: Option<Sample>,
    ) -> TrapRow {
        TrapRow {
            instruction,
            emulator,
            first,
            repeat,
            repeat_over_emulator: repeat.zip(emulator).map(|(r, e)| r.median / e.median),
        }
    }
}

// One site per instruction and path: the first-execution sites are never patched.
#[inline(never)]
fn load_first(data: &[u8; 1024]) {
    // SAFETY: executed by the trap engine on a loaded 16x64 configuration; 16 rows of 64 bytes.
    unsafe { _tile_loadd::<1>(data.as_ptr(), 64) }
}

#[inline(never)]
fn dot_first() {
    // SAFETY: executed by the trap engine on a loaded 16x64 configuration.
    unsafe { _tile_dpbssd::<0, 1, 2>() }
}

#[inline(never)]
fn load_repeat(data: &[u8; 1024]) {
    // SAFETY: as in `load_first`.
    unsafe { _tile_loadd::<1>(data.as_ptr(), 64) }
}

#[inline(never)]
fn dot_repeat() {
    // SAFETY: as in `dot_first`.
    unsafe { _tile_dpbssd::<0, 1, 2>() }
}

/// The rows, or why the engine cannot run here.
pub fn run(quick: bool) -> Result<Vec<TrapRow>, String> {
    let (full, _) = crate::emu::bench_configs()?;
    let data = crate::emu::bench_data(0);
    let target = Duration::from_millis(if quick { 5 } else { 40 });
    let reps = if quick { 3 } else { 9 };
    let (emu_load, emu_dot) = {
        let mut tiles = configure_on(Backend::Emulated, &full).map_err(|e| e.to_string())?;
        tiles.tileloadd(2, &data, 64).map_err(|e| e.to_string())?;
        let load = time_ns(target, reps, || {
            let _ = tiles.tileloadd(1, std::hint::black_box(&data), 64);
        });
        let dot = time_ns(target, reps, || {
            let _ = tiles.tdpbssd(0, 1, 2);
        });
        (load, dot)
    };
    trap::install().map_err(|e| e.to_string())?;
    if trap::assists_silicon() {
        return Err(format!(
            "the engine assists this AMX silicon (AMX_TRAP_CPU models {:?}): TILELOADD and \
             TDPBSSD run on the silicon and never trap; only the instructions of the extensions \
             the silicon lacks do, a signal each",
            trap::model()
        ));
    }
    amx_runtime::permit::request_permission().map_err(|e| e.to_string())?;
    // SAFETY: a valid configuration image (every tile 16 x 64 bytes) and 16 x 64 bytes of data,
    // executed by the engine; released below.
    unsafe {
        _tile_loadconfig(full.as_bytes().as_ptr());
        _tile_loadd::<2>(data.as_ptr(), 64);
    }
    let was = trap::patching();
    trap::set_patching(false);
    let first_load = time_ns(target, reps, || load_first(&data));
    let first_dot = time_ns(target, reps, dot_first);
    trap::set_patching(was);
    // Without patching a repeat execution is a first one again: no figure.
    let (repeat_load, repeat_dot) = if was {
        (
            time_ns(target, reps, || load_repeat(&data)),
            time_ns(target, reps, dot_repeat),
        )
    } else {
        (None, None)
    };
    // SAFETY: releases the configuration loaded above.
    unsafe { _tile_release() };
    Ok(vec![
        TrapRow::new("TILELOADD", emu_load, first_load, repeat_load),
        TrapRow::new("TDPBSSD", emu_dot, first_dot, repeat_dot),
    ])
}
