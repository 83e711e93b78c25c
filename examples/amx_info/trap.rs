//! The trap engine's cost per instruction, where it can run (x86-64 Linux without usable AMX):
//! the silicon code path (raw AMX instructions) trapping on the first executions of a site (a
//! SIGILL round trip each: patching off) and on repeat executions (the site patched into a jump
//! to a stub), beside the emulator backend's own cost for the same instruction.
//!
//! Runs last: installing the engine changes what `detect()` reports for the rest of the
//! process.

use std::time::Duration;

use amx_runtime::intrinsics::{_tile_dpbssd, _tile_loadconfig, _tile_loadd, _tile_release};
use amx_runtime::{configure_on, trap, Backend};

use crate::json::Json;
use crate::stats::Sample;

/// One instruction's costs, nanoseconds per instruction.
pub struct TrapRow {
    pub instruction: &'static str,
    pub emulator: Option<Sample>,
    pub first: Option<Sample>,
    pub repeat: Option<Sample>,
}

impl TrapRow {
    /// Repeat executions against the emulator backend, at the medians.
    pub fn ratio(&self) -> Option<f64> {
        Some(self.repeat?.median / self.emulator?.median)
    }

    pub fn json(&self) -> Json {
        Json::obj()
            .with("instruction", self.instruction)
            .with("emulator_ns", self.emulator.map(|s| s.json()))
            .with("trapped_first_ns", self.first.map(|s| s.json()))
            .with("trapped_repeat_ns", self.repeat.map(|s| s.json()))
            .with("repeat_over_emulator", self.ratio())
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
        let load = crate::emu::time_ns(target, reps, || {
            let _ = tiles.tileloadd(1, std::hint::black_box(&data), 64);
        });
        let dot = crate::emu::time_ns(target, reps, || {
            let _ = tiles.tdpbssd(0, 1, 2);
        });
        (load, dot)
    };
    trap::install().map_err(|e| e.to_string())?;
    amx_runtime::permit::request_permission().map_err(|e| e.to_string())?;
    // SAFETY: a valid configuration image (every tile 16 x 64 bytes) and 16 x 64 bytes of data,
    // executed by the engine; released below.
    unsafe {
        _tile_loadconfig(full.as_bytes().as_ptr());
        _tile_loadd::<2>(data.as_ptr(), 64);
    }
    let was = trap::patching();
    trap::set_patching(false);
    let first_load = crate::emu::time_ns(target, reps, || load_first(&data));
    let first_dot = crate::emu::time_ns(target, reps, dot_first);
    trap::set_patching(was);
    // Without patching a repeat execution is a first one again: no figure.
    let (repeat_load, repeat_dot) = if was {
        (
            crate::emu::time_ns(target, reps, || load_repeat(&data)),
            crate::emu::time_ns(target, reps, dot_repeat),
        )
    } else {
        (None, None)
    };
    // SAFETY: releases the configuration loaded above.
    unsafe { _tile_release() };
    Ok(vec![
        TrapRow {
            instruction: "TILELOADD",
            emulator: emu_load,
            first: first_load,
            repeat: repeat_load,
        },
        TrapRow {
            instruction: "TDPBSSD",
            emulator: emu_dot,
            first: first_dot,
            repeat: repeat_dot,
        },
    ])
}
