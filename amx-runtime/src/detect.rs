//! Detection: what the CPU and the OS offer for AMX, and the one reason when it is unusable.
//!
//! [`detect`] reads, without side effects:
//!
//! | What | Where |
//! |---|---|
//! | AMX-TILE, AMX-INT8, AMX-BF16 | CPUID.(7,0):EDX bits 24, 25, 22 (raw-cpuid's leaf 7 parser) |
//! | AMX-FP16, AMX-COMPLEX | CPUID.(7,1):EAX bit 21, EDX bit 8 (when leaf 7 reports subleaf 1) |
//! | AMX-COMPLEX, AMX-FP8, AMX-AVX512, AMX-MOVRS | CPUID.(0x1E,1):EAX bits 2, 4, 7, 8 (when CPUID.(0x1E,0):EAX, the highest subleaf, is at least 1) |
//! | OSXSAVE | CPUID.1:ECX bit 27 (raw-cpuid's leaf 1 parser) |
//! | XCR0 bits 17 (XTILECFG), 18 (XTILEDATA); 1, 2, 5, 6, 7 (the AVX-512 state AMX-AVX512 needs) | XGETBV(0), only when OSXSAVE is set (else #UD) |
//! | palettes | CPUID.(0x1D,0).EAX = max palette; CPUID.(0x1D,i) = palette i |
//! | TMUL limits | CPUID.(0x1E,0).EBX |
//! | permission | `arch_prctl(ARCH_GET_XCOMP_PERM)`: [`permission_state`] |
//!
//! Leaves above the maximum basic leaf (CPUID.0:EAX) are never trusted: a CPU answers them with
//! the data of its highest leaf, not with zeros.
//!
//! [`detect_with`] does the same from any [`CpuIdReader`], an XCR0 value and a permission state,
//! so tests replay CPUID dumps of machines they do not run on.
//!
//! [`Capabilities::unavailable`] names the one reason AMX cannot be used, the first that applies
//! in this order: not x86-64, not Linux, no AMX-TILE, tile state not enabled by the OS, no tile
//! palette, permission refused. A permission that was simply not requested yet is not a reason:
//! the runtime requests it the first time a [`Hardware`](crate::Hardware) unit is created.
//!
//! [`permission_state`]: crate::permit::permission_state

use std::fmt;
use std::sync::OnceLock;

use amx_tilecfg::palette::MAX_PALETTES;
use amx_tilecfg::{Palette, PaletteTable, TmulLimits};
use raw_cpuid::{CpuId, CpuIdReader};

use crate::permit::{self, ErrnoName, PermissionError, PermissionState};

/// CPUID leaf of the structured extended features (AMX bits).
const LEAF_EXTENDED_FEATURES: u32 = 0x07;
/// CPUID leaf of the tile palettes.
const LEAF_TILE_INFO: u32 = 0x1D;
/// CPUID leaf of the TMUL limits.
const LEAF_TMUL_INFO: u32 = 0x1E;

/// CPUID.(7,1):EAX bit of AMX-FP16.
const AMX_FP16_BIT: u32 = 1 << 21;
/// CPUID.(7,1):EDX bit of AMX-COMPLEX.
const AMX_COMPLEX_BIT: u32 = 1 << 8;

/// CPUID.(0x1E,1):EAX bits of the AMX extensions: AMX-COMPLEX (bit 2, also reported in leaf 7),
/// AMX-FP8, AMX-AVX512 and AMX-MOVRS. (Bits 0, 1 and 3 repeat AMX-INT8, AMX-BF16 and AMX-FP16
/// of leaf 7; bits 5 and 6 named AMX-TRANSPOSE and AMX-TF32, which Intel withdrew.)
const TMUL_COMPLEX_BIT: u32 = 1 << 2;
const TMUL_FP8_BIT: u32 = 1 << 4;
const TMUL_AVX512_BIT: u32 = 1 << 7;
const TMUL_MOVRS_BIT: u32 = 1 << 8;

/// XCR0 bits of the SSE, AVX, opmask, ZMM_Hi256 and Hi16_ZMM state: all five must be enabled for
/// an instruction that writes a zmm register.
const XCR0_ZMM: u64 = 0b1110_0110;

/// XCR0 bit 17: the OS saves and restores the tile configuration (XTILECFG).
const XCR0_XTILECFG: u64 = 1 << permit::XFEATURE_XTILECFG;
/// XCR0 bit 18: the OS saves and restores the tile data (XTILEDATA).
const XCR0_XTILEDATA: u64 = 1 << permit::XFEATURE_XTILEDATA;

/// What this CPU and OS offer for AMX.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Capabilities {
    /// CPUID.(7,0):EDX\[24\] AMX-TILE.
    pub amx_tile: bool,
    /// CPUID.(7,0):EDX\[25\] AMX-INT8.
    pub amx_int8: bool,
    /// CPUID.(7,0):EDX\[22\] AMX-BF16.
    pub amx_bf16: bool,
    /// CPUID.(7,1):EAX\[21\] AMX-FP16.
    pub amx_fp16: bool,
    /// AMX-COMPLEX: CPUID.(7,1):EDX\[8\] or CPUID.(0x1E,1):EAX\[2\].
    pub amx_complex: bool,
    /// CPUID.(0x1E,1):EAX\[4\] AMX-FP8 (TDPBF8PS, TDPBHF8PS, TDPHBF8PS, TDPHF8PS).
    pub amx_fp8: bool,
    /// CPUID.(0x1E,1):EAX\[7\] AMX-AVX512 (TILEMOVROW and the TCVTROW* conversions into a
    /// zmm register, which also need the OS to enable the AVX-512 state: see
    /// [`Capabilities::zmm_enabled`]).
    pub amx_avx512: bool,
    /// CPUID.(0x1E,1):EAX\[8\] AMX-MOVRS (TILELOADDRS, TILELOADDRST1).
    pub amx_movrs: bool,
    /// CPUID.1:ECX\[27\] OSXSAVE (XGETBV usable).
    pub osxsave: bool,
    /// XCR0, when OSXSAVE allows reading it (`None` otherwise: XGETBV would raise #UD).
    pub xcr0: Option<u64>,
    /// The palette table of leaf 0x1D ([`PaletteTable::NONE`] when the leaf is absent).
    pub palettes: PaletteTable,
    /// The TMUL limits of leaf 0x1E. When the leaf is absent or all zero (a hypervisor hiding
    /// it), the architectural limits of every AMX CPU to date ([`TmulLimits::ARCHITECTURAL`]).
    pub tmul: TmulLimits,
    /// The process's XTILEDATA permission when the capabilities were read.
    pub permission: PermissionState,
}

impl Capabilities {
    /// The one reason AMX is unusable here, or `None` when it is usable now or after the
    /// permission request the runtime makes ([`PermissionState::NotRequested`] is not a reason).
    ///
    /// The first that applies, in this order: [`Unavailable::NotX86_64`],
    /// [`Unavailable::NotLinux`] (both from the build target), [`Unavailable::NoAmxTile`],
    /// [`Unavailable::OsDisabled`], [`Unavailable::NoPalette`],
    /// [`Unavailable::PermissionRefused`] (from [`PermissionState::Unknown`]: the kernel would
    /// not even report the permission).
    pub fn unavailable(&self) -> Option<Unavailable> {
        self.platform_reason().or(match self.permission {
            PermissionState::Unknown { errno } => Some(Unavailable::PermissionRefused { errno }),
            PermissionState::NotApplicable
            | PermissionState::NotRequested
            | PermissionState::Granted => None,
        })
    }

    /// Whether AMX is usable: [`unavailable`](Self::unavailable) has no reason. The permission
    /// may still have to be requested ([`needs_permission`](Self::needs_permission)); the
    /// [`Hardware`](crate::Hardware) unit does that.
    pub fn is_usable(&self) -> bool {
        self.unavailable().is_none()
    }

    /// Whether tile-data instructions would still raise SIGILL because the permission has not
    /// been granted (yet) to this process: `false` on a CPU without AMX-TILE, where there is
    /// nothing to permit (they raise SIGILL whatever the permission;
    /// [`unavailable`](Self::unavailable) says why).
    pub fn needs_permission(&self) -> bool {
        self.amx_tile
            && !matches!(
                self.permission,
                PermissionState::Granted | PermissionState::NotApplicable
            )
    }

    /// XCR0 bit 17: the OS manages the tile configuration state (XTILECFG).
    pub fn xtilecfg_enabled(&self) -> bool {
        self.xcr0.is_some_and(|xcr0| xcr0 & XCR0_XTILECFG != 0)
    }

    /// XCR0 bit 18: the OS manages the tile data state (XTILEDATA).
    pub fn xtiledata_enabled(&self) -> bool {
        self.xcr0.is_some_and(|xcr0| xcr0 & XCR0_XTILEDATA != 0)
    }

    /// XCR0 bits 1, 2, 5, 6 and 7: the OS manages the SSE, AVX and AVX-512 (opmask, ZMM_Hi256,
    /// Hi16_ZMM) state, without which an instruction writing a zmm register raises #UD.
    pub fn zmm_enabled(&self) -> bool {
        self.xcr0.is_some_and(|xcr0| xcr0 & XCR0_ZMM == XCR0_ZMM)
    }

    /// Every reason but the permission: the ones that cannot change while the process runs.
    fn platform_reason(&self) -> Option<Unavailable> {
        if !cfg!(target_arch = "x86_64") {
            return Some(Unavailable::NotX86_64);
        }
        if !cfg!(target_os = "linux") {
            return Some(Unavailable::NotLinux);
        }
        if !self.amx_tile {
            return Some(Unavailable::NoAmxTile);
        }
        if !self.osxsave || !self.xtilecfg_enabled() || !self.xtiledata_enabled() {
            return Some(Unavailable::OsDisabled { xcr0: self.xcr0 });
        }
        if !has_palette_1(&self.palettes) {
            return Some(Unavailable::NoPalette);
        }
        None
    }
}

/// Whether the table has a palette 1 with non-zero limits (a hypervisor that hides AMX may
/// report max_palette 1 and a zeroed subleaf 1).
fn has_palette_1(palettes: &PaletteTable) -> bool {
    palettes.get(1).is_some_and(|p| {
        p.max_rows != 0 && p.bytes_per_row != 0 && p.bytes_per_tile != 0 && p.max_names != 0
    })
}

/// Why AMX cannot be used here: one reason a user can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Unavailable {
    /// The program was not built for x86-64 (AMX exists only in 64-bit mode of x86 CPUs).
    NotX86_64,
    /// The OS is not Linux, the only one whose AMX permission protocol this crate speaks.
    NotLinux,
    /// The CPU does not report AMX-TILE (CPUID.(7,0):EDX\[24\]).
    NoAmxTile,
    /// The OS has not enabled the tile state in XCR0 (bits 17 and 18), or has not enabled
    /// XSAVE at all (`xcr0: None`).
    OsDisabled {
        /// XCR0 as read, `None` when OSXSAVE is clear.
        xcr0: Option<u64>,
    },
    /// The CPU reports AMX-TILE but no usable tile palette in CPUID leaf 0x1D.
    NoPalette,
    /// Linux refused the permission to use tile data (or to report it).
    PermissionRefused {
        /// The errno of the refused `arch_prctl`.
        errno: i32,
    },
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unavailable::NotX86_64 => write!(
                f,
                "AMX exists only on x86-64 CPUs and this program was built for {}: build it for \
                 an x86_64 target",
                std::env::consts::ARCH
            )?,
            Unavailable::NotLinux => write!(
                f,
                "AMX tile data is supported only on Linux (which grants it through \
                 arch_prctl(ARCH_REQ_XCOMP_PERM)) and this is {}",
                std::env::consts::OS
            )?,
            Unavailable::NoAmxTile => f.write_str(
                "the CPU does not report AMX-TILE (CPUID.(EAX=7,ECX=0):EDX[24]): AMX needs an \
                 Intel Xeon of the Sapphire Rapids generation or newer, and in a VM a hypervisor \
                 that passes it through",
            )?,
            Unavailable::OsDisabled { xcr0: Some(xcr0) } => write!(
                f,
                "the kernel has not enabled AMX tile state (XCR0 = {xcr0:#x}; bits 17 XTILECFG \
                 and 18 XTILEDATA must both be set): Linux >= 5.16 is needed, and in a VM the \
                 hypervisor must expose the AMX XSAVE state"
            )?,
            Unavailable::OsDisabled { xcr0: None } => f.write_str(
                "the kernel has not enabled AMX tile state (OSXSAVE is clear, so XCR0 cannot \
                 even be read): Linux >= 5.16 is needed, with XSAVE enabled",
            )?,
            Unavailable::NoPalette => f.write_str(
                "the CPU reports AMX but no tile palette (CPUID leaf 0x1D): this is a VM that \
                 hides AMX; ask the hypervisor for AMX pass-through",
            )?,
            Unavailable::PermissionRefused { errno } => write!(
                f,
                "Linux refused the permission to use AMX tile data: arch_prctl failed with {}: \
                 {}",
                ErrnoName(*errno),
                PermissionError { errno: *errno }.cause()
            )?,
        }
        f.write_str(self.instead())
    }
}

impl Unavailable {
    /// What runs the same code here instead, as the end of the message: the trap engine where
    /// it can stand in for the silicon (x86-64 Linux without usable AMX), and the emulator,
    /// which `AMX_BACKEND=auto` (the default) picks by itself.
    fn instead(&self) -> &'static str {
        match self {
            Unavailable::NotX86_64 | Unavailable::NotLinux => {
                "; meanwhile the bit-exact emulator runs the same code (AMX_BACKEND=auto, the \
                 default, picks it)"
            }
            Unavailable::PermissionRefused { .. } => {
                "; until then the bit-exact emulator runs the same code (AMX_BACKEND=auto, the \
                 default, picks it)"
            }
            _ => {
                "; on this CPU the trap engine runs the silicon's code path (AMX_BACKEND=trapped, \
                 or amx_trap::install() before Hardware::new()), and the bit-exact \
                 emulator runs the same code (AMX_BACKEND=auto, the default, picks it)"
            }
        }
    }
}

impl std::error::Error for Unavailable {}

impl From<PermissionError> for Unavailable {
    fn from(e: PermissionError) -> Unavailable {
        Unavailable::PermissionRefused { errno: e.errno }
    }
}

/// Detects the capabilities of this CPU and OS: CPUID, XCR0 (only when OSXSAVE is set) and the
/// permission state. No side effects: it does not request the permission.
///
/// On a target other than x86-64 it touches no CPUID and reports nothing, so
/// [`Capabilities::unavailable`] says [`Unavailable::NotX86_64`]. While the
/// trap engine (the `amx-trap` crate) is active it reports the CPU the engine models (XGETBV
/// cannot be trapped, so the modelled XCR0 comes from the engine too).
pub fn detect() -> Capabilities {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    if let Some(engine) = crate::engine::active_hook() {
        // The engine's modelled CPU: XGETBV cannot be trapped, so XCR0 comes from the model.
        let reader = crate::engine::ModelReader(engine);
        let osxsave = CpuId::with_cpuid_reader(reader)
            .get_feature_info()
            .is_some_and(|f| f.has_oxsave());
        // SAFETY: OSXSAVE (leaf 1 is the host's own) is set, as below.
        let xcr0 = osxsave.then(|| unsafe { xgetbv0() });
        return detect_with(
            reader,
            xcr0.map(|real| (engine.xcr0)(real)),
            permit::permission_state(),
        );
    }
    #[cfg(all(target_arch = "x86_64", not(target_env = "sgx")))]
    {
        let reader = raw_cpuid::CpuIdReaderNative;
        let osxsave = CpuId::with_cpuid_reader(reader)
            .get_feature_info()
            .is_some_and(|f| f.has_oxsave());
        let xcr0 = if osxsave {
            // SAFETY: CPUID.1:ECX.OSXSAVE mirrors CR4.OSXSAVE, the only condition (besides
            // ECX naming an unsupported XCR, and ECX = 0 is always supported) under which
            // XGETBV raises #UD; it is set.
            Some(unsafe { xgetbv0() })
        } else {
            None
        };
        detect_with(reader, xcr0, permit::permission_state())
    }
    #[cfg(not(all(target_arch = "x86_64", not(target_env = "sgx"))))]
    {
        Capabilities {
            amx_tile: false,
            amx_int8: false,
            amx_bf16: false,
            amx_fp16: false,
            amx_complex: false,
            amx_fp8: false,
            amx_avx512: false,
            amx_movrs: false,
            osxsave: false,
            xcr0: None,
            palettes: PaletteTable::NONE,
            tmul: TmulLimits::ARCHITECTURAL,
            permission: PermissionState::NotApplicable,
        }
    }
}

/// Reads XCR0 with XGETBV.
///
/// # Safety
///
/// CPUID.1:ECX.OSXSAVE must be set (CR4.OSXSAVE); otherwise XGETBV raises #UD (SIGILL).
#[cfg(all(target_arch = "x86_64", not(target_env = "sgx")))]
unsafe fn xgetbv0() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: the caller guarantees OSXSAVE, so XGETBV with ECX = 0 (XCR0, which always
    // exists) cannot fault; it reads a register into EDX:EAX and touches no memory or flags.
    unsafe {
        core::arch::asm!(
            "xgetbv",
            in("ecx") 0u32,
            out("eax") lo,
            out("edx") hi,
            options(nomem, nostack, preserves_flags),
        );
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Detects from a CPUID reader, an XCR0 value and a permission state: pure, for replaying CPUID
/// dumps. `xcr0` is kept only when the dump reports OSXSAVE (without it XCR0 cannot be read).
///
/// Leaves above the maximum basic leaf (CPUID.0:EAX) read as absent, and so does subleaf 1 of
/// leaf 7 when CPUID.(7,0):EAX (the highest subleaf) is 0.
pub fn detect_with<R: CpuIdReader>(
    reader: R,
    xcr0: Option<u64>,
    permission: PermissionState,
) -> Capabilities {
    let max_leaf = reader.cpuid1(0).eax;
    let leaf = |leaf: u32, subleaf: u32| (leaf <= max_leaf).then(|| reader.cpuid2(leaf, subleaf));
    let cpuid = CpuId::with_cpuid_reader(reader.clone());

    let osxsave = cpuid.get_feature_info().is_some_and(|f| f.has_oxsave());

    // raw-cpuid's leaf 7 parser has the subleaf 0 AMX bits (and checks the max basic leaf).
    let features = cpuid.get_extended_feature_info();
    let amx_tile = features.as_ref().is_some_and(|f| f.has_amx_tile());
    let amx_int8 = features.as_ref().is_some_and(|f| f.has_amx_int8());
    let amx_bf16 = features.as_ref().is_some_and(|f| f.has_amx_bf16());

    // It has no AMX-FP16 / AMX-COMPLEX accessors; read subleaf 1 only when subleaf 0 lists it.
    let subleaf1 = leaf(LEAF_EXTENDED_FEATURES, 0)
        .filter(|r| r.eax >= 1)
        .and_then(|_| leaf(LEAF_EXTENDED_FEATURES, 1));
    let amx_fp16 = subleaf1.is_some_and(|r| r.eax & AMX_FP16_BIT != 0);

    // Leaf 0x1E's subleaf 1 only where subleaf 0 reports it: an older CPU need not answer an
    // unlisted subleaf with zeros, and a false AMX-FP8 would let a safe call raise #UD.
    let extensions = leaf(LEAF_TMUL_INFO, 0)
        .filter(|r| r.eax >= 1)
        .map_or(0, |_| reader.cpuid2(LEAF_TMUL_INFO, 1).eax);
    let amx_complex = subleaf1.is_some_and(|r| r.edx & AMX_COMPLEX_BIT != 0)
        || extensions & TMUL_COMPLEX_BIT != 0;
    let amx_fp8 = extensions & TMUL_FP8_BIT != 0;
    let amx_avx512 = extensions & TMUL_AVX512_BIT != 0;
    let amx_movrs = extensions & TMUL_MOVRS_BIT != 0;

    let palettes = match leaf(LEAF_TILE_INFO, 0) {
        Some(r) => {
            let count = (r.eax as usize).min(MAX_PALETTES);
            let mut table = [Palette::from_cpuid(0, 0, 0); MAX_PALETTES];
            for (id, slot) in (1u32..).zip(table.iter_mut().take(count)) {
                let p = reader.cpuid2(LEAF_TILE_INFO, id);
                *slot = Palette::from_cpuid(p.eax, p.ebx, p.ecx);
            }
            PaletteTable::new(&table[..count])
        }
        None => PaletteTable::NONE,
    };

    let tmul = match leaf(LEAF_TMUL_INFO, 0) {
        Some(r) if r.ebx != 0 => TmulLimits::from_cpuid(r.ebx),
        _ => TmulLimits::ARCHITECTURAL,
    };

    Capabilities {
        amx_tile,
        amx_int8,
        amx_bf16,
        amx_fp16,
        amx_complex,
        amx_fp8,
        amx_avx512,
        amx_movrs,
        osxsave,
        xcr0: if osxsave { xcr0 } else { None },
        palettes,
        tmul,
        permission,
    }
}

/// Detects, requests the permission if needed (once per process), re-reads the permission, and
/// returns the capabilities when AMX tile data can be used now.
///
/// Called on every `Hardware::new()`: after the first success it is one load of a cached value.
/// The CPU and OS part of the answer cannot change while the process runs and is computed once,
/// success or not; a permission refusal is not cached, since its cause (a small `sigaltstack`
/// somewhere in the process) may go away.
pub(crate) fn ensure_usable() -> Result<Capabilities, Unavailable> {
    // The trap engine, once installed, changes the answer (also on silicon it assists): a
    // separate cache for its CPU.
    static USABLE_NATIVE: OnceLock<Capabilities> = OnceLock::new();
    static USABLE_TRAPPED: OnceLock<Capabilities> = OnceLock::new();
    static NATIVE: OnceLock<Result<Capabilities, Unavailable>> = OnceLock::new();
    static TRAPPED: OnceLock<Result<Capabilities, Unavailable>> = OnceLock::new();
    let (platform, usable) = if crate::engine::active() {
        (&TRAPPED, &USABLE_TRAPPED)
    } else {
        (&NATIVE, &USABLE_NATIVE)
    };

    if let Some(caps) = usable.get() {
        return Ok(caps.clone());
    }
    let mut caps = platform
        .get_or_init(|| {
            let caps = detect();
            match caps.platform_reason() {
                Some(why) => Err(why),
                None => Ok(caps),
            }
        })
        .clone()?;

    permit::request_permission()?;
    caps.permission = permit::permission_state();
    match caps.permission {
        PermissionState::Granted => Ok(usable.get_or_init(|| caps).clone()),
        PermissionState::Unknown { errno } => Err(Unavailable::PermissionRefused { errno }),
        // The request succeeded, yet the kernel does not list XTILEDATA: not a kernel we know.
        PermissionState::NotRequested | PermissionState::NotApplicable => {
            Err(Unavailable::PermissionRefused {
                errno: permission_missing_errno(),
            })
        }
    }
}

/// The errno reported when a successful request is not reflected in the permission mask.
fn permission_missing_errno() -> i32 {
    #[cfg(target_os = "linux")]
    {
        libc::EPERM
    }
    #[cfg(not(target_os = "linux"))]
    {
        1
    }
}
