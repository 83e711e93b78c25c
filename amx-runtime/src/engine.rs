//! The hook through which an instruction engine joins the runtime: the `amx-trap` crate, which
//! executes the AMX instructions of a CPU without AMX (each one traps), so that the silicon
//! code path runs on every x86-64 Linux machine.
//!
//! The runtime does not contain the engine. The engine registers a [`Hook`] ([`register`],
//! done by `amx_trap::install` and `amx_trap::register`), or, when it was preloaded into the
//! process as `libamx_trap_preload.so`, exports one under the symbol [`SYMBOL`], which the runtime
//! looks up. Through the hook:
//!
//! - [`detect()`](crate::detect()) reports the CPU the engine models (XGETBV cannot be trapped,
//!   so XCR0 comes from the engine too);
//! - the [`permit`](crate::permit) requests are answered by the engine, as Linux on an AMX CPU
//!   answers them;
//! - `AMX_BACKEND=trapped` installs the engine where the CPU lacks AMX;
//! - [`Hardware::tile_data`](crate::TileUnit::tile_data) reads the engine's tiles (XSAVE cannot
//!   be trapped either).
//!
//! The functions after the hook give the engine the emulator's internals it executes raw
//! instructions with. Not a stable API: the engine and the runtime are released together.

use amx_tilecfg::{PaletteTable, TileShape, TmulLimits};

use crate::error::UdReason;
use crate::unit::{check, Emulator, TILE_BYTES};

/// The symbol under which a preloaded engine exports its [`Hook`].
pub const SYMBOL: &std::ffi::CStr = c"amx_trap_hook_v1";

/// What [`Hook::install`] reports.
pub mod status {
    /// The engine is installed and runs this process's AMX instructions.
    pub const ACTIVE: u32 = 0;
    /// The CPU executes AMX itself: the engine stays out of the way.
    pub const NATIVE_AMX: u32 = 1;
    /// The engine cannot run here (it needs x86-64 Linux).
    pub const UNSUPPORTED: u32 = 2;
    /// Installing it failed.
    pub const FAILED: u32 = 3;
}

/// One CPUID answer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cpuid {
    /// EAX.
    pub eax: u32,
    /// EBX.
    pub ebx: u32,
    /// ECX.
    pub ecx: u32,
    /// EDX.
    pub edx: u32,
}

/// The engine's side of the runtime's questions. Plain C functions, so that a runtime and an
/// engine built separately (a program and a preloaded library) understand each other.
#[repr(C)]
#[derive(Debug)]
pub struct Hook {
    /// `size_of::<Hook>()` of the engine's build: fields past it are absent.
    pub size: usize,
    /// Whether the engine executes this process's AMX instructions.
    pub active: extern "C" fn() -> bool,
    /// Installs the engine (idempotent); one of [`status`].
    pub install: extern "C" fn() -> u32,
    /// CPUID of the modelled CPU.
    pub cpuid: extern "C" fn(leaf: u32, subleaf: u32) -> Cpuid,
    /// XCR0 as the modelled CPU's Linux sets it, given the host's.
    pub xcr0: extern "C" fn(real: u64) -> u64,
    /// `arch_prctl(ARCH_REQ_XCOMP_PERM, feature)`: 0 granted, a positive errno, or -1 when the
    /// request is the kernel's to answer.
    pub request_permission: extern "C" fn(feature: u64) -> i64,
    /// `arch_prctl(ARCH_GET_XCOMP_PERM)`, given the kernel's answer.
    pub permission: extern "C" fn(kernel: u64) -> u64,
    /// Copies tile `t` of the calling thread; false when the engine holds no state for it.
    pub tile_data: extern "C" fn(t: u8, out: &mut [u8; TILE_BYTES]) -> bool,
}

static REGISTERED: std::sync::atomic::AtomicPtr<Hook> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// Makes `hook` the engine the runtime asks (the last registration wins).
pub fn register(hook: &'static Hook) {
    REGISTERED.store(
        hook as *const Hook as *mut Hook,
        std::sync::atomic::Ordering::Release,
    );
}

/// The registered engine, else a preloaded one, else `None`.
pub fn hook() -> Option<&'static Hook> {
    let registered = REGISTERED.load(std::sync::atomic::Ordering::Acquire);
    if !registered.is_null() {
        // SAFETY: only `register` stores here, from a `&'static Hook`.
        return Some(unsafe { &*registered });
    }
    preloaded()
}

/// The hook a preloaded library exports, looked up once.
fn preloaded() -> Option<&'static Hook> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        static FOUND: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let found = *FOUND.get_or_init(|| {
            // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads the loader's
            // tables.
            let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, SYMBOL.as_ptr()) };
            symbol as usize
        });
        if found == 0 {
            return None;
        }
        // SAFETY: a library exports SYMBOL only as a `Hook` of this layout (the name carries
        // the layout's version), valid for as long as the library stays loaded, and a preloaded
        // library is never unloaded.
        let hook = unsafe { &*(found as *const Hook) };
        (hook.size >= std::mem::size_of::<Hook>()).then_some(hook)
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    None
}

/// Whether an engine executes this process's AMX instructions.
pub fn active() -> bool {
    hook().is_some_and(|h| (h.active)())
}

/// The active engine's hook.
pub(crate) fn active_hook() -> Option<&'static Hook> {
    hook().filter(|h| (h.active)())
}

/// `ARCH_REQ_XCOMP_PERM` as the active engine answers it; `None` when the kernel answers.
pub(crate) fn request_permission(feature: u64) -> Option<Result<(), i32>> {
    let answer = (active_hook()?.request_permission)(feature);
    match answer {
        0 => Some(Ok(())),
        e if e > 0 => Some(Err(i32::try_from(e).unwrap_or(i32::MAX))),
        _ => None,
    }
}

/// Tile `t` of this thread as the active engine holds it.
pub(crate) fn tile_data(t: u8) -> Option<[u8; TILE_BYTES]> {
    let hook = active_hook()?;
    let mut out = [0u8; TILE_BYTES];
    (hook.tile_data)(t, &mut out).then_some(out)
}

/// A CPUID reader of the active engine's modelled CPU.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ModelReader(pub(crate) &'static Hook);

impl raw_cpuid::CpuIdReader for ModelReader {
    fn cpuid2(&self, eax: u32, ecx: u32) -> raw_cpuid::CpuIdResult {
        let r = (self.0.cpuid)(eax, ecx);
        raw_cpuid::CpuIdResult {
            eax: r.eax,
            ebx: r.ebx,
            ecx: r.ecx,
            edx: r.edx,
        }
    }
}

/// TILEZERO's #UD conditions on the configuration `cfg`.
pub fn tilezero_refusal(cfg: &[u8; 64], t: u8) -> Result<TileShape, UdReason> {
    check::tilezero_refusal(cfg, t)
}

/// The #UD conditions of TILELOADD, TILELOADDT1 and TILESTORED on `cfg`.
pub fn tile_memory_refusal(cfg: &[u8; 64], t: u8) -> Result<TileShape, UdReason> {
    check::tile_memory_refusal(cfg, t)
}

/// The #UD conditions of TILEMOVROW and the TCVTROW* conversions on `cfg` (configured, a used
/// tile whose colsb is a multiple of 4).
pub fn tile_row_refusal(cfg: &[u8; 64], t: u8) -> Result<TileShape, UdReason> {
    check::tile_row_refusal(cfg, t)
}

/// A dot product's #UD conditions on `cfg`.
pub fn dot_refusal(
    cfg: &[u8; 64],
    tiles: (u8, u8, u8),
    limits: TmulLimits,
) -> Result<(), UdReason> {
    check::dot_refusal(cfg, tiles, limits).map(|_| ())
}

/// Whether LDTILECFG accepts `image` (formats no message: callable from a signal handler).
pub fn ldtilecfg_accepts(image: &[u8; 64], table: &PaletteTable) -> bool {
    check::ldtilecfg_accepts(image, table)
}

/// Writes [`Emulator::new`] in place, without the value passing through the stack.
///
/// # Safety
/// `this` is valid for writes of an `Emulator` and suitably aligned.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub unsafe fn init_emulator(this: *mut Emulator) {
    // SAFETY: the caller's contract is `init_in_place`'s.
    unsafe { Emulator::init_in_place(this) }
}

/// Tile `t`'s bytes, writable in place (a load's rows go straight into them).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub fn tile_bytes_mut(unit: &mut Emulator, t: u8) -> Option<&mut [u8; TILE_BYTES]> {
    unit.tile_bytes_mut(t)
}

/// Makes the emulator's kernel choices now (they run CPUID), before the engine's handlers may
/// need them.
pub fn decide_paths() {
    crate::unit::numerics::decide_paths();
}
