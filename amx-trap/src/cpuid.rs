//! What CPUID answers on the modelled CPU: the host's own answers with the AMX leaves of a
//! Sapphire Rapids (or a Granite Rapids, which adds AMX-FP16) laid over them. Used by
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
}

impl Model {
    /// Reads `AMX_TRAP_CPU` (`spr` or `gnr`, any case; unset or anything else is `spr`).
    pub fn from_env() -> Model {
        match std::env::var("AMX_TRAP_CPU") {
            Ok(v) if v.trim().eq_ignore_ascii_case("gnr") => Model::GraniteRapids,
            _ => Model::SapphireRapids,
        }
    }

    /// Whether the model executes TDPFP16PS (CPUID.(7,1):EAX\[21\]).
    pub fn amx_fp16(self) -> bool {
        self == Model::GraniteRapids
    }

    /// The modelled CPUID answer for `leaf`/`subleaf`, given the host's answer `real`
    /// (`[eax, ebx, ecx, edx]`) and the host's maximum basic leaf.
    pub fn cpuid(self, leaf: u32, subleaf: u32, real: [u32; 4], real_max: u32) -> [u32; 4] {
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
                let max_sub = if self.amx_fp16() {
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
            (7, 1) if self.amx_fp16() => [real[0] | AMX_FP16, real[1], real[2], real[3]],
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
            (0x1E, 0) => [u32::from(self.amx_fp16()), 0x4010, 0, 0],
            (0x1E, 1) if self.amx_fp16() => [0b1011, 0, 0, 0],
            (0x1E, _) => [0; 4],
            _ => real,
        }
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
/// XCR0 bits 17 and 18.
const XTILE_BITS: u64 = 3 << 17;
/// End of the XTILEDATA component in the standard XSAVE layout (2816 + 8192).
const XSAVE_END: u32 = 2816 + 8192;

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
        assert_eq!(m.cpuid(7, 1, [0; 4], 0x20)[0], AMX_FP16);
    }
}
