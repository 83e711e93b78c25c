//! What CPUID answers on the modelled CPU: the host's own answers with the AMX leaves of a
//! Sapphire Rapids (or a Granite Rapids, a Granite Rapids-D or a Diamond Rapids, which add the
//! later AMX extensions) laid over them. Used by
//! `amx_runtime::detect()` while the engine is active, and by the engine's CPUID-faulting
//! handler for foreign code that executes `cpuid` itself.

/// The AMX CPU the engine models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Model {
    /// Sapphire Rapids: AMX-TILE, AMX-INT8, AMX-BF16 (`AMX_TRAP_CPU=spr`, the default).
    SapphireRapids,
    /// Granite Rapids: also AMX-FP16 (`AMX_TRAP_CPU=gnr`).
    GraniteRapids,
    /// Granite Rapids-D: also AMX-FP16 and AMX-COMPLEX (`AMX_TRAP_CPU=gnr-d`).
    GraniteRapidsD,
    /// Diamond Rapids: also AMX-FP16, AMX-COMPLEX, AMX-FP8, AMX-MOVRS, and AMX-AVX512 where the
    /// host has AVX-512 with its state enabled (`AMX_TRAP_CPU=dmr`).
    DiamondRapids,
}

impl Model {
    /// Every model, in the order of their numbers ([`Model::index`]).
    pub const ALL: [Model; 4] = [
        Model::SapphireRapids,
        Model::GraniteRapids,
        Model::GraniteRapidsD,
        Model::DiamondRapids,
    ];

    /// Reads `AMX_TRAP_CPU` (`spr`, `gnr`, `gnr-d` or `dmr`, any case; unset or anything else
    /// is `spr`).
    pub fn from_env() -> Model {
        let v = std::env::var("AMX_TRAP_CPU").unwrap_or_default();
        let v = v.trim();
        if v.eq_ignore_ascii_case("gnr") {
            Model::GraniteRapids
        } else if v.eq_ignore_ascii_case("gnr-d") || v.eq_ignore_ascii_case("gnrd") {
            Model::GraniteRapidsD
        } else if v.eq_ignore_ascii_case("dmr") {
            Model::DiamondRapids
        } else {
            Model::SapphireRapids
        }
    }

    /// The model's number (its place in [`Model::ALL`]).
    pub fn index(self) -> u8 {
        match self {
            Model::SapphireRapids => 0,
            Model::GraniteRapids => 1,
            Model::GraniteRapidsD => 2,
            Model::DiamondRapids => 3,
        }
    }

    /// Whether the model executes TDPFP16PS (CPUID.(7,1):EAX\[21\]).
    pub fn amx_fp16(self) -> bool {
        self != Model::SapphireRapids
    }

    /// Whether the model executes TCMMIMFP16PS and TCMMRLFP16PS (CPUID.(7,1):EDX\[8\]).
    pub fn amx_complex(self) -> bool {
        matches!(self, Model::GraniteRapidsD | Model::DiamondRapids)
    }

    /// Whether the model executes the AMX-FP8 dot products (CPUID.(0x1E,1):EAX\[4\]).
    pub fn amx_fp8(self) -> bool {
        self == Model::DiamondRapids
    }

    /// Whether the model executes TILELOADDRS and TILELOADDRST1 (CPUID.(0x1E,1):EAX\[8\]).
    pub fn amx_movrs(self) -> bool {
        self == Model::DiamondRapids
    }

    /// Whether the model has AMX-AVX512 on a host whose AVX-512 state is usable (`host_zmm`):
    /// the engine writes the zmm registers of the interrupted context, so without AVX-512 on
    /// the host the model reports no AMX-AVX512 (CPUID.(0x1E,1):EAX\[7\]).
    pub fn amx_avx512(self, host_zmm: bool) -> bool {
        self == Model::DiamondRapids && host_zmm
    }

    /// Whether the model executes the instructions of `ext`, on a host whose AVX-512 state is
    /// usable or not (`host_zmm`, which decides AMX-AVX512).
    pub(crate) fn has(self, ext: amx_tilecfg::decode::Extension, host_zmm: bool) -> bool {
        use amx_tilecfg::decode::Extension;
        match ext {
            Extension::Base => true,
            Extension::Fp16 => self.amx_fp16(),
            Extension::Fp8 => self.amx_fp8(),
            Extension::Complex => self.amx_complex(),
            Extension::Movrs => self.amx_movrs(),
            Extension::Avx512 => self.amx_avx512(host_zmm),
        }
    }

    /// The modelled CPUID answer for `leaf`/`subleaf`, given the host's answer `real`
    /// (`[eax, ebx, ecx, edx]`) and the host's maximum basic leaf, on a host whose AVX-512
    /// state is usable where the engine found it so at installation (never before).
    pub fn cpuid(self, leaf: u32, subleaf: u32, real: [u32; 4], real_max: u32) -> [u32; 4] {
        self.cpuid_on(leaf, subleaf, real, real_max, host_zmm())
    }

    /// The modelled CPUID answer as [`Model::cpuid`], on a host whose AVX-512 state is usable
    /// or not (`host_zmm`, which decides AMX-AVX512).
    pub fn cpuid_on(
        self,
        leaf: u32,
        subleaf: u32,
        real: [u32; 4],
        real_max: u32,
        host_zmm: bool,
    ) -> [u32; 4] {
        let [eax, ebx, ecx, edx] = real;
        // Leaves the host does not have read as zeros, not as its highest leaf.
        let real = if leaf <= real_max || leaf >= 0x8000_0000 {
            real
        } else {
            [0; 4]
        };
        match (leaf, subleaf) {
            (0, _) => [eax.max(0x1E), ebx, ecx, edx],
            (7, 0) => {
                let max_sub = if self.amx_fp16() || self.amx_complex() {
                    real[0].max(1)
                } else {
                    real[0]
                };
                [
                    max_sub,
                    real[1],
                    real[2],
                    real[3] | AMX_BF16 | AMX_TILE | AMX_INT8,
                ]
            }
            (7, 1) if self.amx_fp16() => {
                let complex = if self.amx_complex() { AMX_COMPLEX } else { 0 };
                [real[0] | AMX_FP16, real[1], real[2], real[3] | complex]
            }
            (0xD, 0) => [
                real[0] | XTILE_BITS as u32,
                real[1].max(XSAVE_END),
                real[2].max(XSAVE_END),
                real[3],
            ],
            (0xD, 17) => [64, 2752, 2, 0],
            (0xD, 18) => [8192, 2816, 6, 0],
            (0x1D, 0) => [1, 0, 0, 0],
            (0x1D, 1) => [0x0400_2000, 0x0008_0040, 0x0000_0010, 0],
            (0x1D, _) => [0; 4],
            (0x1E, 0) => [u32::from(self.leaf_1e_1(host_zmm) != 0), 0x4010, 0, 0],
            (0x1E, 1) => [self.leaf_1e_1(host_zmm), 0, 0, 0],
            (0x1E, _) => [0; 4],
            _ => real,
        }
    }

    /// CPUID.(0x1E,1):EAX, 0 where the model has no subleaf 1 (Sapphire Rapids).
    fn leaf_1e_1(self, host_zmm: bool) -> u32 {
        if !self.amx_fp16() {
            return 0;
        }
        let bit = |on: bool, b: u32| if on { 1 << b } else { 0 };
        // Bits 0 and 1 (AMX-INT8, AMX-BF16) and 3 (AMX-FP16) on every model past Sapphire
        // Rapids.
        0b1011
            | bit(self.amx_complex(), 2)
            | bit(self.amx_fp8(), 4)
            | bit(self.amx_avx512(host_zmm), 7)
            | bit(self.amx_movrs(), 8)
    }

    /// XCR0 as the modelled CPU's Linux sets it: the host's with XTILECFG and XTILEDATA.
    pub fn xcr0(self, real: u64) -> u64 {
        real | XTILE_BITS
    }
}

/// CPUID.(7,0):EDX bits.
const AMX_BF16: u32 = 1 << 22;
const AMX_TILE: u32 = 1 << 24;
const AMX_INT8: u32 = 1 << 25;
/// CPUID.(7,1):EAX bit.
const AMX_FP16: u32 = 1 << 21;
/// CPUID.(7,1):EDX bit.
const AMX_COMPLEX: u32 = 1 << 8;
/// XCR0 bits 17 and 18.
const XTILE_BITS: u64 = 3 << 17;
/// End of the XTILEDATA component in the standard XSAVE layout (2816 + 8192).
const XSAVE_END: u32 = 2816 + 8192;

/// Whether the host's AVX-512 state is usable by the engine (found at installation).
fn host_zmm() -> bool {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        crate::zmm::available()
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        false
    }
}

/// Whether `cpuid` faults in this process (the engine enabled CPUID faulting).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) static FAULTING: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether `cpuid` faults (and the engine answers it).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) fn faulting() -> bool {
    FAULTING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether the OS lets user code read the FS and GS bases (RDFSBASE, RDGSBASE).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
static FSGSBASE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Reads, once at installation, what the engine asks the CPU and OS for later.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) fn prepare() {
    const HWCAP2_FSGSBASE: libc::c_ulong = 1 << 1;
    // SAFETY: getauxval reads the process's auxiliary vector; no memory is passed.
    let hwcap2 = unsafe { libc::getauxval(libc::AT_HWCAP2) };
    FSGSBASE.store(
        hwcap2 & HWCAP2_FSGSBASE != 0,
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Whether RDFSBASE and RDGSBASE may be used.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) fn fsgsbase() -> bool {
    FSGSBASE.load(std::sync::atomic::Ordering::Relaxed)
}

/// `arch_prctl(ARCH_SET_CPUID, ..)`: 0 makes `cpuid` fault (SIGSEGV) on this thread and the
/// threads it creates, 1 makes it execute again.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) fn set_cpuid_enabled(enabled: bool) -> Result<(), i32> {
    const ARCH_SET_CPUID: libc::c_long = 0x1012;
    // SAFETY: ARCH_SET_CPUID takes its argument by value and touches no user memory.
    let rc = unsafe {
        crate::sys::call(
            libc::SYS_arch_prctl,
            &[ARCH_SET_CPUID as u64, u64::from(enabled)],
        )
    };
    crate::sys::check(rc).map(|_| ())
}

/// The host's CPUID.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn host_cpuid(leaf: u32, subleaf: u32) -> [u32; 4] {
    #[allow(unused_unsafe)] // `__cpuid_count` is a safe function on newer toolchains.
    // SAFETY: CPUID exists on every x86-64 CPU and only reads identification registers.
    let r = unsafe { core::arch::x86_64::__cpuid_count(leaf, subleaf) };
    [r.eax, r.ebx, r.ecx, r.edx]
}

/// Answers a `cpuid` that faulted at `rip` in a context whose registers are `gregs`: EAX to
/// EDX from the model, RIP past the instruction. `false`, nothing changed, where the bytes at
/// `rip` are not `cpuid`.
pub(crate) fn answer_at(rip: u64, gregs: &mut [u64; 23]) -> bool {
    use crate::kframe::reg;
    let mut bytes = [0u8; 2];
    if crate::access::fetch(rip, &mut bytes) != 2 || bytes != [0x0F, 0xA2] {
        return false;
    }
    let [a, b, c, d] = answer(gregs[reg::RAX] as u32, gregs[reg::RCX] as u32);
    gregs[reg::RAX] = u64::from(a);
    gregs[reg::RBX] = u64::from(b);
    gregs[reg::RCX] = u64::from(c);
    gregs[reg::RDX] = u64::from(d);
    gregs[reg::RIP] = rip.wrapping_add(2);
    true
}

/// The modelled CPU's answer to `cpuid` with `leaf`/`subleaf` (async-signal-safe: while CPUID
/// faulting is on, it is switched off around the host's own `cpuid`).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) fn answer(leaf: u32, subleaf: u32) -> [u32; 4] {
    use std::sync::atomic::Ordering;
    let faulting = FAULTING.load(Ordering::Relaxed);
    if faulting {
        let _ = set_cpuid_enabled(true);
    }
    let real = host_cpuid(leaf, subleaf);
    let max = host_cpuid(0, 0)[0];
    if faulting {
        let _ = set_cpuid_enabled(false);
    }
    super::model().cpuid(leaf, subleaf, real, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sapphire_rapids_leaves() {
        let m = Model::SapphireRapids;
        assert_eq!(m.cpuid(0, 0, [0x10, 1, 2, 3], 0x10)[0], 0x1E);
        let l7 = m.cpuid(7, 0, [0, 0, 0, 0], 0x10);
        assert_eq!(l7[3], AMX_BF16 | AMX_TILE | AMX_INT8);
        assert_eq!(m.cpuid(7, 1, [0, 0, 0, 0], 0x10), [0; 4]);
        assert_eq!(m.cpuid(0x1D, 1, [9; 4], 0x10)[0], 0x0400_2000);
        assert_eq!(m.cpuid(0x1E, 0, [9; 4], 0x10)[1], 0x4010);
        assert_eq!(m.cpuid(0x1C, 0, [9; 4], 0x10), [0; 4]);
        assert_eq!(m.xcr0(0xe7), 0x600e7);
    }

    #[test]
    fn granite_rapids_adds_fp16() {
        let m = Model::GraniteRapids;
        assert_eq!(m.cpuid(7, 0, [0; 4], 0x20)[0], 1);
        assert_eq!(m.cpuid(7, 1, [0; 4], 0x20), [AMX_FP16, 0, 0, 0]);
        assert_eq!(m.cpuid_on(0x1E, 0, [0; 4], 0x20, true)[0], 1);
        assert_eq!(m.cpuid_on(0x1E, 1, [0; 4], 0x20, true)[0], 0b1011);
    }

    #[test]
    fn granite_rapids_d_adds_complex() {
        let m = Model::GraniteRapidsD;
        assert!(m.amx_fp16() && m.amx_complex() && !m.amx_fp8() && !m.amx_movrs());
        assert_eq!(m.cpuid(7, 1, [0; 4], 0x20), [AMX_FP16, 0, 0, AMX_COMPLEX]);
        assert_eq!(m.cpuid_on(0x1E, 1, [0; 4], 0x20, true)[0], 0b1111);
    }

    #[test]
    fn diamond_rapids_reports_amx_avx512_only_with_host_zmm() {
        let m = Model::DiamondRapids;
        assert_eq!(m.cpuid(7, 1, [0; 4], 0x20), [AMX_FP16, 0, 0, AMX_COMPLEX]);
        assert_eq!(m.cpuid_on(0x1E, 0, [0; 4], 0x20, false)[0], 1);
        // INT8, BF16, COMPLEX, FP16, FP8, AVX512, MOVRS.
        assert_eq!(m.cpuid_on(0x1E, 1, [0; 4], 0x20, true)[0], 0x19F);
        assert_eq!(m.cpuid_on(0x1E, 1, [0; 4], 0x20, false)[0], 0x11F);
        assert!(m.amx_avx512(true) && !m.amx_avx512(false));
        // Sapphire Rapids has no subleaf 1.
        let spr = Model::SapphireRapids;
        assert_eq!(spr.cpuid_on(0x1E, 1, [9; 4], 0x20, true), [0; 4]);
        assert_eq!(spr.cpuid_on(0x1E, 0, [9; 4], 0x20, true)[0], 0);
    }

    #[test]
    fn models_round_trip_their_numbers() {
        for (i, m) in Model::ALL.iter().enumerate() {
            assert_eq!(usize::from(m.index()), i);
        }
    }
}
