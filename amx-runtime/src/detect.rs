//! Detection: what the CPU and the OS offer (placeholder until the detection module lands).

use amx_tilecfg::{PaletteTable, TmulLimits};

use crate::permit::PermissionState;

/// What this CPU and OS offer for AMX.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// CPUID.(7,0):EDX\[24\] AMX-TILE.
    pub amx_tile: bool,
    /// CPUID.(7,0):EDX\[25\] AMX-INT8.
    pub amx_int8: bool,
    /// CPUID.(7,0):EDX\[22\] AMX-BF16.
    pub amx_bf16: bool,
    /// CPUID.(7,1):EAX\[21\] AMX-FP16.
    pub amx_fp16: bool,
    /// CPUID.(7,1):EDX\[8\] AMX-COMPLEX.
    pub amx_complex: bool,
    /// CPUID.1:ECX\[27\] OSXSAVE (XGETBV usable).
    pub osxsave: bool,
    /// XCR0, when OSXSAVE allows reading it.
    pub xcr0: Option<u64>,
    /// The palette table of leaf 0x1D.
    pub palettes: PaletteTable,
    /// The TMUL limits of leaf 0x1E.
    pub tmul: TmulLimits,
    /// The process's XTILEDATA permission.
    pub permission: PermissionState,
}

/// Why AMX cannot be used here: one reason a user can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// Not an x86-64 CPU.
    NotX86_64,
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AMX is not available: not an x86-64 CPU")
    }
}

impl std::error::Error for Unavailable {}

/// Detects the capabilities of this CPU and OS.
pub fn detect() -> Capabilities {
    Capabilities {
        amx_tile: false,
        amx_int8: false,
        amx_bf16: false,
        amx_fp16: false,
        amx_complex: false,
        osxsave: false,
        xcr0: None,
        palettes: PaletteTable::NONE,
        tmul: TmulLimits::ARCHITECTURAL,
        permission: PermissionState::NotApplicable,
    }
}

/// Detects, asks for permission, and returns the capabilities when tile data can be used.
pub(crate) fn ensure_usable() -> Result<Capabilities, Unavailable> {
    Err(Unavailable::NotX86_64)
}
