//! The silicon tile unit (placeholder until the hardware backend lands).

use std::marker::PhantomData;

use super::{TileUnit, TILE_BYTES};
use crate::detect::Unavailable;
use crate::error::Fault;

/// The CPU's own AMX unit, for the calling thread. Neither `Send` nor `Sync`: tile state belongs
/// to a thread.
#[derive(Debug)]
pub struct Hardware {
    _thread_bound: PhantomData<*const ()>,
}

impl Hardware {
    /// Detects AMX and asks the OS for permission, or returns why AMX cannot be used here.
    pub fn new() -> Result<Hardware, Unavailable> {
        crate::detect::ensure_usable().map(|_| Hardware {
            _thread_bound: PhantomData,
        })
    }

    /// The palette table detected on this CPU.
    pub fn palette_table(&self) -> &amx_tilecfg::PaletteTable {
        &amx_tilecfg::PaletteTable::ARCHITECTURAL
    }
}

fn absent() -> Fault {
    Fault::InvalidOpcode("hardware backend not built yet".into())
}

impl TileUnit for Hardware {
    fn ldtilecfg(&mut self, _image: &[u8; 64]) -> Result<(), Fault> {
        Err(absent())
    }
    fn sttilecfg(&mut self) -> [u8; 64] {
        [0; 64]
    }
    fn tilerelease(&mut self) {}
    fn loaded_config(&self) -> [u8; 64] {
        [0; 64]
    }
    fn tilezero(&mut self, _t: u8) -> Result<(), Fault> {
        Err(absent())
    }
    fn tileloadd(&mut self, _t: u8, _src: &[u8], _stride: usize) -> Result<(), Fault> {
        Err(absent())
    }
    fn tileloaddt1(&mut self, _t: u8, _src: &[u8], _stride: usize) -> Result<(), Fault> {
        Err(absent())
    }
    fn tilestored(&mut self, _t: u8, _dst: &mut [u8], _stride: usize) -> Result<(), Fault> {
        Err(absent())
    }
    unsafe fn tileloadd_ptr(&mut self, _t: u8, _src: *const u8, _stride: isize) -> Result<(), Fault> {
        Err(absent())
    }
    unsafe fn tileloaddt1_ptr(&mut self, _t: u8, _src: *const u8, _stride: isize) -> Result<(), Fault> {
        Err(absent())
    }
    unsafe fn tilestored_ptr(&mut self, _t: u8, _dst: *mut u8, _stride: isize) -> Result<(), Fault> {
        Err(absent())
    }
    fn tdpbssd(&mut self, _c: u8, _a: u8, _b: u8) -> Result<(), Fault> {
        Err(absent())
    }
    fn tdpbsud(&mut self, _c: u8, _a: u8, _b: u8) -> Result<(), Fault> {
        Err(absent())
    }
    fn tdpbusd(&mut self, _c: u8, _a: u8, _b: u8) -> Result<(), Fault> {
        Err(absent())
    }
    fn tdpbuud(&mut self, _c: u8, _a: u8, _b: u8) -> Result<(), Fault> {
        Err(absent())
    }
    fn tdpbf16ps(&mut self, _c: u8, _a: u8, _b: u8) -> Result<(), Fault> {
        Err(absent())
    }
    fn tdpfp16ps(&mut self, _c: u8, _a: u8, _b: u8) -> Result<(), Fault> {
        Err(absent())
    }
    fn tile_data(&mut self, _t: u8) -> Result<[u8; TILE_BYTES], Fault> {
        Err(absent())
    }
}
