//! The silicon tile unit: every method runs the shared fault checks ([`check`]) against this
//! thread's tracked configuration, then executes one instruction from the raw layer ([`asm`]).
//!
//! The decisions (per-thread tracked configuration, TDPFP16PS, XSAVE for whole tiles) are
//! documented on [`Hardware`], where users see them.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::OnceLock;

use amx_tilecfg::{image, DotKind, PaletteTable, TmulLimits};

use super::numerics::row::RowOp;
use super::{asm, check, Product, TileUnit, ROW_BYTES, TILES, TILE_BYTES};
use crate::backend::Backend;
use crate::context::{Requirement, Unsupported};
use crate::detect::Unavailable;
use crate::error::{Fault, Feature, Mnemonic, UdReason};
use crate::thread_bound::ThreadBound;

/// What the process learned about the silicon on the first successful [`Hardware::new`].
#[derive(Debug)]
struct Silicon {
    /// CPUID leaf 0x1D.
    palettes: PaletteTable,
    /// Whether `palettes` is the architectural table, which every `TileConfig` already
    /// satisfies (computed once, for `configure`).
    architectural: bool,
    /// CPUID leaf 0x1E.
    tmul: TmulLimits,
    /// Whether the TMUL limits admit every dot product the architectural limits admit (the
    /// limits the `tilecfg!` macro proves typed operands against).
    tmul_architectural: bool,
    /// CPUID.(7,0):EDX\[25\].
    amx_int8: bool,
    /// CPUID.(7,0):EDX\[22\].
    amx_bf16: bool,
    /// CPUID.(7,1):EAX\[21\].
    amx_fp16: bool,
    /// CPUID.(0x1E,1):EAX\[4\].
    amx_fp8: bool,
    /// CPUID.(7,1):EDX\[8\] or CPUID.(0x1E,1):EAX\[2\].
    amx_complex: bool,
    /// CPUID.(0x1E,1):EAX\[8\].
    amx_movrs: bool,
    /// CPUID.(0x1E,1):EAX\[7\].
    amx_avx512: bool,
    /// XCR0 enables the AVX-512 state (the zmm destination of the AMX-AVX512 instructions).
    zmm: bool,
    /// Where XSAVE puts the tile data, or `None` when CPUID does not describe it usably.
    xsave: Option<XsaveLayout>,
}

/// The standard-format XSAVE layout of state component 18.
#[derive(Clone, Copy, Debug)]
struct XsaveLayout {
    /// Bytes of the buffer: CPUID.(0xD,0).EBX, at least `offset + size`.
    area: usize,
    /// CPUID.(0xD,18).EBX: offset of the tile data in the standard format.
    offset: usize,
}

/// Offset of XSTATE_BV in the XSAVE header.
const XSTATE_BV: usize = 512;

impl XsaveLayout {
    /// Reads CPUID leaf 0xD; `None` unless component 18 holds eight 1 KiB tiles past the header.
    fn from_cpuid() -> Option<XsaveLayout> {
        let [_, area, _, _] = cpuid(0xD, 0);
        let [size, offset, _, _] = cpuid(0xD, 18);
        let (area, size, offset) = (area as usize, size as usize, offset as usize);
        if size < TILES * TILE_BYTES || offset < XSTATE_BV + 64 {
            return None;
        }
        Some(XsaveLayout {
            area: area.max(offset + size),
            offset,
        })
    }
}

/// CPUID with EAX = `leaf`, ECX = `subleaf`: `[eax, ebx, ecx, edx]`.
#[cfg(target_arch = "x86_64")]
fn cpuid(leaf: u32, subleaf: u32) -> [u32; 4] {
    #[allow(unused_unsafe)] // `__cpuid_count` is a safe function on newer toolchains.
    // SAFETY: CPUID exists on every x86-64 CPU and only reads identification registers.
    let r = unsafe { core::arch::x86_64::__cpuid_count(leaf, subleaf) };
    [r.eax, r.ebx, r.ecx, r.edx]
}

/// No CPUID off x86-64 ([`Hardware::new`] fails there before this is reached).
#[cfg(not(target_arch = "x86_64"))]
fn cpuid(_leaf: u32, _subleaf: u32) -> [u32; 4] {
    [0; 4]
}

static SILICON: OnceLock<Silicon> = OnceLock::new();

/// This thread's tracked state. A [`Hardware`] handle keeps its address (it never leaves the
/// thread), so that the per-instruction bookkeeping of the typed and unchecked paths is a plain
/// load or store: through `thread_local!` from another crate every access was a function call.
#[derive(Debug)]
struct Tracked {
    /// The configuration as STTILECFG would write it (zeros when unconfigured). One cell per
    /// byte, so that the checked path's per-instruction bookkeeping (start_row := 0) is a
    /// one-byte store rather than a copy of the whole image. (The typed path has nothing to
    /// store: see `TypedTiles::RECORDS_START_ROW`.)
    config: [Cell<u8>; 64],
    /// Changes with each of this thread's configuration changes (LDTILECFG, TILERELEASE,
    /// resync) through any `Hardware` handle, so typed tiles notice a configuration changed
    /// behind them.
    epoch: Cell<u64>,
    /// The next epoch: every change takes a value never used before on the thread, so that an
    /// epoch put back by a [`crate::SignalScope`] is never met again by later changes.
    next_epoch: Cell<u64>,
}

impl Tracked {
    /// A new epoch, never used before on this thread.
    fn new_epoch(&self) {
        let next = self.next_epoch.get();
        self.next_epoch.set(next.wrapping_add(1));
        self.epoch.set(next);
    }
}

thread_local! {
    static TRACKED: Tracked = const {
        Tracked {
            config: [const { Cell::new(0) }; 64],
            epoch: Cell::new(0),
            next_epoch: Cell::new(1),
        }
    };
    /// Whether this thread vouched that its cores execute TDPFP16PS.
    static FP16_ASSUMED: Cell<bool> = const { Cell::new(false) };
}

/// This thread's [`Tracked`]. It has no destructor, so the address stays valid for as long as
/// the thread runs, its other thread-locals' destructors included.
fn tracked_here() -> *const Tracked {
    TRACKED.with(|t| t as *const Tracked)
}

/// This thread's tracked configuration and epoch, replaced by the INIT state (zeros) under a
/// new epoch: what a signal handler starts with (see [`crate::SignalScope`]).
pub(crate) fn take_tracked() -> ([u8; 64], u64) {
    TRACKED.with(|t| {
        let saved = (std::array::from_fn(|i| t.config[i].get()), t.epoch.get());
        for cell in &t.config {
            cell.set(0);
        }
        t.new_epoch();
        saved
    })
}

/// Puts back what [`take_tracked`] took, its epoch included: the interrupted code's typed tiles
/// find their configuration as they left it.
pub(crate) fn give_back_tracked((config, epoch): ([u8; 64], u64)) {
    TRACKED.with(|t| {
        for (cell, byte) in t.config.iter().zip(config) {
            cell.set(byte);
        }
        t.epoch.set(epoch);
    })
}

/// The CPU's own AMX unit, for the calling thread. Neither `Send` nor `Sync`: tile state belongs
/// to a thread, and all handles on a thread share it.
///
/// Every safe method checks the conditions under which the silicon would fault and returns
/// that [`Fault`], exactly as the [`Emulator`](crate::Emulator) does, so a safe call never raises
/// #GP or #UD; then it executes the one instruction.
///
/// # Tracked configuration
///
/// Tile state belongs to a thread, so the configuration the checks run against is kept per
/// thread, in a thread-local copy of the 64 bytes STTILECFG would write (zeros when
/// unconfigured). All [`Hardware`] handles on a thread share it. It is updated after every
/// instruction that completes: LDTILECFG sets it (palette 0 gives zeros), TILERELEASE zeroes it,
/// and TILEZERO, TILELOADD, TILELOADDT1, TILESTORED and the dot products clear its start_row byte
/// as the silicon does (the typed instructions leave it alone: under a layout it is 0 already). [`TileUnit::loaded_config`] returns the copy without executing anything;
/// [`TileUnit::sttilecfg`] executes STTILECFG and returns the real state.
///
/// The safe methods are sound only while the copy matches the silicon: their bounds checks use
/// the tracked shapes. A thread starts unconfigured as far as the copy knows, which is safe
/// whatever the real state (every tile instruction is refused until LDTILECFG). Code that
/// changes the tile configuration behind the library's back (the raw
/// [`intrinsics`](crate::intrinsics), or foreign code such as a C library issuing LDTILECFG on
/// this thread) must call [`Hardware::resync`] before the next safe call; the intrinsics' safety
/// contracts say so.
///
/// # TDPFP16PS
///
/// A hypervisor can hide CPUID.(7,1):EAX\[21\] (AMX-FP16) of a core that implements it: on the
/// KVM guests this crate was measured on
/// ([semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md)
/// F1) the bit is clear, yet TDPFP16PS
/// executes; on a Sapphire Rapids the same opcode raises #UD. A safe call must never fault, so
/// [`TileUnit::tdpfp16ps`] returns `Fault::InvalidOpcode` unless CPUID reports AMX-FP16, or
/// unless the thread has opted in with the unsafe [`Hardware::assume_amx_fp16`] (the caller
/// vouches for the core). The opt-in is per thread, like the rest of the tile state, so that the
/// handles the [`configure`](crate::configure) guard creates see it too. The other dot products
/// likewise return `Fault::InvalidOpcode` when CPUID lacks AMX-INT8 or AMX-BF16.
///
/// # Reading whole tiles
///
/// [`TileUnit::tile_data`] returns all 1024 bytes of a tile, including the bytes past its rows
/// and colsb. No tile instruction can show those (TILESTORED writes exactly colsb bytes of rows
/// `start_row..rows`), so it uses XSAVE of state component 18 (XTILEDATA), the only
/// architectural way to read them: standard format, requested-feature bitmap `1 << 18`, into a
/// 64-byte-aligned buffer of CPUID.(0xD,0).EBX bytes. The component's offset and size come from
/// CPUID.(0xD,18) (2816 and 8192 on Sapphire Rapids). When XSTATE_BV\[18\] in the header is clear
/// the tile data is in its INIT state, i.e. all zero, and XSAVE may not have written it.
#[derive(Debug)]
pub struct Hardware {
    silicon: &'static Silicon,
    _thread_bound: ThreadBound,
    /// This thread's tracked state ([`tracked_here`]).
    here: *const Tracked,
}

/// The #UD of a dot product whose feature the CPU lacks (out of line: the rare case).
#[cold]
#[inline(never)]
fn missing_dot_feature(kind: DotKind) -> Fault {
    let feature = match kind {
        DotKind::Tdpbf16ps => Feature::AmxBf16,
        DotKind::Tdpfp16ps => Feature::AmxFp16,
        _ => Feature::AmxInt8,
    };
    check::ud(
        Mnemonic::DotProduct(kind),
        UdReason::MissingFeature(feature),
    )
}

impl Hardware {
    /// Detects AMX and asks the OS for permission to use tile data, or returns why AMX cannot be
    /// used here. After the first success in a process this is a load of a cached value.
    ///
    /// # Errors
    /// [`Unavailable`], the one reason, worded with what to do. On x86-64 Linux without usable
    /// AMX, the trap engine (the `amx-trap` crate) stands in for the silicon: after
    /// `amx_trap::install()` (or with `amx_trap::hardware()`, which installs it where needed,
    /// or with the engine's library preloaded) this succeeds and every instruction traps to the
    /// engine's emulator; the error's message says so.
    #[inline]
    pub fn new() -> Result<Hardware, Unavailable> {
        let silicon = match SILICON.get() {
            Some(silicon) => silicon,
            None => Hardware::first_use()?,
        };
        Ok(Hardware {
            silicon,
            _thread_bound: PhantomData,
            here: tracked_here(),
        })
    }

    /// Detection and the permission request, once per process (out of line: every later
    /// `configure` takes the cached path above).
    #[cold]
    #[inline(never)]
    fn first_use() -> Result<&'static Silicon, Unavailable> {
        let caps = crate::detect::ensure_usable()?;
        Ok(SILICON.get_or_init(|| Silicon {
            palettes: caps.palettes,
            architectural: caps.palettes == PaletteTable::ARCHITECTURAL,
            tmul_architectural: caps.tmul.maxk >= TmulLimits::ARCHITECTURAL.maxk
                && caps.tmul.maxn >= TmulLimits::ARCHITECTURAL.maxn,
            tmul: caps.tmul,
            amx_int8: caps.amx_int8,
            amx_bf16: caps.amx_bf16,
            amx_fp16: caps.amx_fp16,
            amx_fp8: caps.amx_fp8,
            amx_complex: caps.amx_complex,
            amx_movrs: caps.amx_movrs,
            amx_avx512: caps.amx_avx512,
            zmm: caps.zmm_enabled(),
            xsave: XsaveLayout::from_cpuid(),
        }))
    }

    /// The palette table this CPU reports (CPUID leaf 0x1D); LDTILECFG images are checked
    /// against it.
    #[inline]
    pub fn palette_table(&self) -> &PaletteTable {
        &self.silicon.palettes
    }

    /// A number that changes whenever this thread's configuration may have changed (every
    /// LDTILECFG, TILERELEASE and resync through any handle). The typed path compares it with
    /// the value it saw when it configured, before it runs an instruction unchecked.
    #[inline(always)]
    pub(crate) fn config_epoch(&self) -> u64 {
        self.here().epoch.get()
    }

    /// This thread's tracked state.
    #[inline(always)]
    fn here(&self) -> &Tracked {
        // SAFETY: `here` is this thread's `TRACKED` (taken in `new`, and a handle never leaves
        // its thread), which lives, without a destructor, as long as the thread.
        unsafe { &*self.here }
    }

    /// The tracked configuration.
    #[inline]
    fn tracked(&self) -> [u8; 64] {
        let c = &self.here().config;
        std::array::from_fn(|i| c[i].get())
    }

    /// Records `config` as loaded: a new epoch.
    fn set_tracked(&self, config: [u8; 64]) {
        let here = self.here();
        here.new_epoch();
        for (cell, byte) in here.config.iter().zip(config) {
            cell.set(byte);
        }
    }

    /// Every tile-data instruction leaves start_row = 0 when it completes (Z4, T4, W3, D3).
    #[inline(always)]
    fn clear_start_row(&self) {
        self.here().config[image::START_ROW].set(0);
    }

    /// [`Hardware::clear_start_row`] for the typed path's unchecked instructions, where
    /// `record` is false when the tracked start_row is known to be 0 already: the layout's
    /// configuration has start_row 0, and every way a start_row other than 0 reaches the
    /// tracked image (LDTILECFG, resync) also changes the epoch the typed guard checks before
    /// each instruction. Skipping the store matters: it goes through a pointer the compiler
    /// cannot tell apart from the kernel's own state, which it then reloads after every
    /// instruction.
    #[inline(always)]
    fn cleared_start_row(&self, record: bool) {
        if record {
            self.clear_start_row();
        }
    }

    /// Whether the palette table is the architectural one (for `configure`).
    #[inline]
    pub(crate) fn palette_is_architectural(&self) -> bool {
        self.silicon.architectural
    }

    /// The TMUL limits this CPU reports (CPUID leaf 0x1E); dot products are checked against
    /// them.
    pub fn tmul_limits(&self) -> TmulLimits {
        self.silicon.tmul
    }

    /// Reads the real configuration with STTILECFG into this thread's tracked copy. Call it after
    /// running raw [`intrinsics`](crate::intrinsics), or foreign code that uses AMX, on this
    /// thread.
    pub fn resync(&mut self) {
        let real = self.sttilecfg();
        self.set_tracked(real);
    }

    /// Why the typed layer cannot run on this CPU, or `None` when it can. Typed dot products
    /// return no `Result` (their operands are proven at compile time), so the instructions they
    /// may issue must exist here: AMX-INT8 and AMX-BF16 with at least the architectural TMUL
    /// limits, as on every AMX CPU to date. A CPU or VM that hides one of them gets a typed
    /// error from the typed `configure`, never an instruction that silently does nothing.
    pub(crate) fn typed_unsupported(&self) -> Option<Unsupported> {
        typed_unsupported(
            self.silicon.amx_int8,
            self.silicon.amx_bf16,
            if self.silicon.tmul_architectural {
                Ok(())
            } else {
                Err(self.silicon.tmul)
            },
        )
    }

    /// Whether [`TileUnit::tdpfp16ps`] executes on this thread: CPUID reports AMX-FP16, or the
    /// thread called [`Hardware::assume_amx_fp16`].
    #[inline]
    pub fn amx_fp16(&self) -> bool {
        self.silicon.amx_fp16 || FP16_ASSUMED.with(Cell::get)
    }

    /// Lets [`TileUnit::tdpfp16ps`] execute on this thread although CPUID does not report
    /// AMX-FP16
    /// ([semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md)
    /// F1: a hypervisor can hide the bit of a core that implements it).
    ///
    /// # Safety
    /// Every core this thread may run on executes TDPFP16PS (e.g. the host is known to be a
    /// Granite Rapids or later, as on the machines
    /// [semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md)
    /// was measured on). On a core
    /// without it, TDPFP16PS raises #UD and the process dies of SIGILL.
    pub unsafe fn assume_amx_fp16(&mut self) {
        FP16_ASSUMED.with(|f| f.set(true));
    }

    /// TILEZERO without the checks: the typed path, whose types proved them.
    ///
    /// # Safety
    /// This thread's loaded configuration makes TILEZERO of tile `t` legal.
    #[inline(always)]
    pub(crate) unsafe fn tilezero_unchecked(&mut self, t: u8, record: bool) {
        // SAFETY: forwarded from this function's contract.
        unsafe { asm::tilezero_dyn(t) };
        self.cleared_start_row(record);
    }

    /// TILELOADD without the checks: the typed path.
    ///
    /// # Safety
    /// The loaded configuration makes TILELOADD of tile `t` legal, and every row of the tile is
    /// readable at `src + r * stride`.
    #[inline(always)]
    pub(crate) unsafe fn tileloadd_unchecked(
        &mut self,
        t: u8,
        src: *const u8,
        stride: isize,
        record: bool,
    ) {
        // SAFETY: forwarded from this function's contract.
        unsafe { asm::tileloadd_dyn(t, src, stride) };
        self.cleared_start_row(record);
    }

    /// TILELOADDT1 without the checks: the typed path.
    ///
    /// # Safety
    /// As for [`Hardware::tileloadd_unchecked`].
    #[inline(always)]
    pub(crate) unsafe fn tileloaddt1_unchecked(
        &mut self,
        t: u8,
        src: *const u8,
        stride: isize,
        record: bool,
    ) {
        // SAFETY: forwarded from this function's contract.
        unsafe { asm::tileloaddt1_dyn(t, src, stride) };
        self.cleared_start_row(record);
    }

    /// TILESTORED without the checks: the typed path.
    ///
    /// # Safety
    /// The loaded configuration makes TILESTORED of tile `t` legal, and every row of the tile is
    /// writable, and not aliased, at `dst + r * stride`.
    #[inline(always)]
    pub(crate) unsafe fn tilestored_unchecked(
        &mut self,
        t: u8,
        dst: *mut u8,
        stride: isize,
        record: bool,
    ) {
        // SAFETY: forwarded from this function's contract.
        unsafe { asm::tilestored_dyn(t, dst, stride) };
        self.cleared_start_row(record);
    }

    /// A dot product without the shape checks: the typed path. The feature check stays (it is
    /// one predictable branch on a cached flag).
    ///
    /// # Safety
    /// The loaded configuration makes `kind` legal on tiles `c`, `a`, `b` under the
    /// architectural TMUL limits (K <= 16, N <= 64 bytes). A CPU reporting smaller limits gets
    /// the checked instruction instead.
    #[inline(always)]
    pub(crate) unsafe fn dot_unchecked(
        &mut self,
        kind: DotKind,
        c: u8,
        a: u8,
        b: u8,
        record: bool,
    ) -> Result<(), Fault> {
        if !self.silicon.tmul_architectural {
            return self.dot(kind, c, a, b);
        }
        self.feature(kind)?;
        // SAFETY: the CPU implements the instruction (checked above), its TMUL limits admit
        // whatever the architectural ones admit (checked above), and the caller guarantees the
        // operands fit the loaded configuration under those.
        unsafe { asm::dot_dyn(kind, c, a, b) };
        self.cleared_start_row(record);
        Ok(())
    }

    /// #UD unless the CPU implements the dot product `kind` (or the thread vouched for it).
    /// Inlined: the typed and unchecked paths run it before every dot product, where a call
    /// returning a `Result` through memory cost about 10 cycles each on the silicon.
    #[inline(always)]
    fn feature(&self, kind: DotKind) -> Result<(), Fault> {
        // The opcode is decoded before any tile state is looked at: without the feature it is
        // #UD whatever the operands.
        let present = match kind {
            DotKind::Tdpbf16ps => self.silicon.amx_bf16,
            DotKind::Tdpfp16ps => self.amx_fp16(),
            _ => self.silicon.amx_int8,
        };
        if present {
            Ok(())
        } else {
            Err(missing_dot_feature(kind))
        }
    }

    /// #UD unless the CPU implements `feature`, which `instruction` needs (the opcode is
    /// decoded before any tile state is looked at).
    fn require(&self, feature: Feature, instruction: Mnemonic) -> Result<(), Fault> {
        let s = self.silicon;
        let present = match feature {
            Feature::AmxInt8 => s.amx_int8,
            Feature::AmxBf16 => s.amx_bf16,
            Feature::AmxFp16 => self.amx_fp16(),
            Feature::AmxFp8 => s.amx_fp8,
            Feature::AmxComplex => s.amx_complex,
            Feature::AmxMovrs => s.amx_movrs,
            Feature::AmxAvx512 => s.amx_avx512,
            Feature::ZmmState => s.zmm,
            Feature::XsaveTileData => s.xsave.is_some(),
        };
        if present {
            Ok(())
        } else {
            Err(check::ud(instruction, UdReason::MissingFeature(feature)))
        }
    }

    /// An AMX-FP8 or AMX-COMPLEX dot product, after the checks.
    fn product(&mut self, product: Product, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.require(product.feature(), product.mnemonic())?;
        check::dot(
            &self.tracked(),
            (c, a, b),
            self.silicon.tmul,
            product.mnemonic(),
        )?;
        // SAFETY: the CPU implements the instruction (checked above); check::dot proved c, a, b
        // distinct, below 8, used, and of shapes it accepts under this CPU's TMUL limits.
        let done = unsafe { asm::product_dyn(product, c, a, b) };
        debug_assert!(done, "check::dot admitted C={c} A={a} B={b}");
        self.clear_start_row();
        Ok(())
    }

    /// TILELOADDRS or TILELOADDRST1, after the checks; `src` is `Ok` for a slice (whose
    /// bounds are checked here) or `Err` for a raw pointer.
    ///
    /// # Safety
    /// With a raw pointer, as [`TileUnit::tileloaddrs_ptr`].
    unsafe fn load_rs(
        &mut self,
        t: u8,
        src: Result<&[u8], *const u8>,
        stride: isize,
        t1: bool,
    ) -> Result<(), Fault> {
        let mnemonic = if t1 {
            Mnemonic::Tileloaddrst1
        } else {
            Mnemonic::Tileloaddrs
        };
        self.require(Feature::AmxMovrs, mnemonic)?;
        let shape = check::tile_memory(&self.tracked(), t, mnemonic)?;
        let base = match src {
            Ok(slice) => {
                check::bounds(t, shape, stride as usize, slice.len())?;
                slice.as_ptr()
            }
            Err(ptr) => ptr,
        };
        // SAFETY: the CPU implements AMX-MOVRS and check::tile_memory proved the instruction
        // legal on tile t; every row read lies in the slice (check::bounds, the stride as the
        // caller's usize: see `load_slice`) or is the caller's promise for a raw pointer.
        let done = unsafe { asm::tileloaddrs_dyn(t, base, stride, t1) };
        debug_assert!(done, "check::tile_memory admitted tile t{t}");
        self.clear_start_row();
        Ok(())
    }

    /// TILEMOVROW or a TCVTROW* conversion, after the checks.
    fn row_move(
        &mut self,
        t: u8,
        row: u32,
        op: RowOp,
        instruction: Mnemonic,
    ) -> Result<[u8; ROW_BYTES], Fault> {
        self.require(Feature::AmxAvx512, instruction)?;
        self.require(Feature::ZmmState, instruction)?;
        check::tile_row(&self.tracked(), t, instruction)?;
        // SAFETY: the CPU implements AMX-AVX512 (and so AVX-512F, which it requires) with the
        // AVX-512 state enabled, and check::tile_row proved tile t used with colsb % 4 == 0.
        let out = unsafe { asm::row_dyn(op, t, row) };
        let out = out.ok_or(check::ud(instruction, UdReason::NoSuchTile { tile: t }))?;
        self.clear_start_row();
        Ok(out)
    }

    /// TILELOADD or TILELOADDT1 from a slice, after the checks.
    fn load_slice(&mut self, t: u8, src: &[u8], stride: usize, t1: bool) -> Result<(), Fault> {
        let mnemonic = if t1 {
            Mnemonic::Tileloaddt1
        } else {
            Mnemonic::Tileloadd
        };
        let shape = check::tile_memory(&self.tracked(), t, mnemonic)?;
        check::bounds(t, shape, stride, src.len())?;
        // `stride as isize` keeps the bits: the CPU computes row r at base + r * stride modulo
        // 2^64. When rows >= 2 the bounds check proved stride < src.len() <= isize::MAX; when
        // rows == 1 only row 0 (at `src`) is read and the stride is never used.
        // SAFETY: check::tile_memory proved the tracked configuration (which matches the
        // silicon, see the module docs) makes the instruction legal on tile t, and
        // check::bounds proved that every row r < rows lies inside `src`.
        let done = unsafe {
            if t1 {
                asm::tileloaddt1_dyn(t, src.as_ptr(), stride as isize)
            } else {
                asm::tileloadd_dyn(t, src.as_ptr(), stride as isize)
            }
        };
        debug_assert!(done, "check::tile_memory admitted tile t{t}");
        self.clear_start_row();
        Ok(())
    }

    /// TILELOADD or TILELOADDT1 from a raw pointer, after the checks.
    ///
    /// # Safety
    /// As [`TileUnit::tileloadd_ptr`].
    unsafe fn load_ptr(
        &mut self,
        t: u8,
        src: *const u8,
        stride: isize,
        t1: bool,
    ) -> Result<(), Fault> {
        let mnemonic = if t1 {
            Mnemonic::Tileloaddt1
        } else {
            Mnemonic::Tileloadd
        };
        check::tile_memory(&self.tracked(), t, mnemonic)?;
        // SAFETY: check::tile_memory proved the instruction legal on tile t; the caller
        // guarantees that every row read is readable.
        let done = unsafe {
            if t1 {
                asm::tileloaddt1_dyn(t, src, stride)
            } else {
                asm::tileloadd_dyn(t, src, stride)
            }
        };
        debug_assert!(done, "check::tile_memory admitted tile t{t}");
        self.clear_start_row();
        Ok(())
    }

    /// A dot product, after the checks.
    fn dot(&mut self, kind: DotKind, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.feature(kind)?;
        check::dot(
            &self.tracked(),
            (c, a, b),
            self.silicon.tmul,
            Mnemonic::DotProduct(kind),
        )?;
        // SAFETY: the CPU implements the instruction (checked above, or vouched for through
        // `assume_amx_fp16`); check::dot proved c, a, b distinct, below 8, used, and of shapes
        // the instruction accepts under this CPU's TMUL limits.
        let done = unsafe { asm::dot_dyn(kind, c, a, b) };
        debug_assert!(done, "check::dot admitted C={c} A={a} B={b}");
        self.clear_start_row();
        Ok(())
    }
}

/// The rule behind [`Hardware::typed_unsupported`], on plain values so it is testable on any
/// machine. `tmul` is `Err(limits)` when the CPU's TMUL limits are below the architectural ones.
pub(crate) fn typed_unsupported(
    amx_int8: bool,
    amx_bf16: bool,
    tmul: Result<(), TmulLimits>,
) -> Option<Unsupported> {
    let mut missing = Vec::new();
    if !amx_int8 {
        missing.push(Requirement::Feature(Feature::AmxInt8));
    }
    if !amx_bf16 {
        missing.push(Requirement::Feature(Feature::AmxBf16));
    }
    if let Err(limits) = tmul {
        missing.push(Requirement::TmulLimits(limits));
    }
    (!missing.is_empty()).then(|| Unsupported::new(Backend::Hardware, missing))
}

impl TileUnit for Hardware {
    fn ldtilecfg(&mut self, image: &[u8; 64]) -> Result<(), Fault> {
        let configured = image::palette_id(image) != 0;
        if configured {
            check::ldtilecfg(image, &self.silicon.palettes)?;
        }
        // SAFETY: the image is 64 readable bytes; palette 0 is accepted whatever the other bytes
        // hold (L4) and any other image passed check::ldtilecfg against this CPU's palette
        // table, so LDTILECFG does not raise #GP.
        unsafe { asm::ldtilecfg(image.as_ptr()) };
        // An accepted image has zero reserved bytes, so it is exactly what STTILECFG writes.
        self.set_tracked(if configured { *image } else { [0; 64] });
        Ok(())
    }

    fn sttilecfg(&mut self) -> [u8; 64] {
        let mut out = [0u8; 64];
        // SAFETY: `out` is 64 writable bytes owned here; STTILECFG is legal in any state (S1).
        unsafe { asm::sttilecfg(out.as_mut_ptr()) };
        out
    }

    fn tilerelease(&mut self) {
        // SAFETY: TILERELEASE is legal configured or not (R2) and touches no memory.
        unsafe { asm::tilerelease() };
        self.set_tracked([0; 64]);
    }

    #[inline]
    fn loaded_config(&self) -> [u8; 64] {
        self.tracked()
    }

    fn tilezero(&mut self, t: u8) -> Result<(), Fault> {
        check::tilezero(&self.tracked(), t)?;
        // SAFETY: check::tilezero proved a configuration loaded and tile t used.
        let done = unsafe { asm::tilezero_dyn(t) };
        debug_assert!(done, "check::tilezero admitted tile t{t}");
        self.clear_start_row();
        Ok(())
    }

    fn tileloadd(&mut self, t: u8, src: &[u8], stride: usize) -> Result<(), Fault> {
        self.load_slice(t, src, stride, false)
    }

    fn tileloaddt1(&mut self, t: u8, src: &[u8], stride: usize) -> Result<(), Fault> {
        self.load_slice(t, src, stride, true)
    }

    fn tilestored(&mut self, t: u8, dst: &mut [u8], stride: usize) -> Result<(), Fault> {
        let shape = check::tile_memory(&self.tracked(), t, Mnemonic::Tilestored)?;
        check::bounds(t, shape, stride, dst.len())?;
        // The stride cast keeps the bits; see `load_slice`.
        // SAFETY: check::tile_memory proved the instruction legal on tile t, check::bounds that
        // every row r < rows lies inside `dst`, which is borrowed mutably here.
        let done = unsafe { asm::tilestored_dyn(t, dst.as_mut_ptr(), stride as isize) };
        debug_assert!(done, "check::tile_memory admitted tile t{t}");
        self.clear_start_row();
        Ok(())
    }

    unsafe fn tileloadd_ptr(&mut self, t: u8, src: *const u8, stride: isize) -> Result<(), Fault> {
        // SAFETY: forwarded from this function's own contract.
        unsafe { self.load_ptr(t, src, stride, false) }
    }

    unsafe fn tileloaddt1_ptr(
        &mut self,
        t: u8,
        src: *const u8,
        stride: isize,
    ) -> Result<(), Fault> {
        // SAFETY: forwarded from this function's own contract.
        unsafe { self.load_ptr(t, src, stride, true) }
    }

    unsafe fn tilestored_ptr(&mut self, t: u8, dst: *mut u8, stride: isize) -> Result<(), Fault> {
        check::tile_memory(&self.tracked(), t, Mnemonic::Tilestored)?;
        // SAFETY: check::tile_memory proved the instruction legal on tile t; the caller
        // guarantees that every row written is writable and unaliased.
        let done = unsafe { asm::tilestored_dyn(t, dst, stride) };
        debug_assert!(done, "check::tile_memory admitted tile t{t}");
        self.clear_start_row();
        Ok(())
    }

    fn tdpbssd(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.dot(DotKind::Tdpbssd, c, a, b)
    }

    fn tdpbsud(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.dot(DotKind::Tdpbsud, c, a, b)
    }

    fn tdpbusd(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.dot(DotKind::Tdpbusd, c, a, b)
    }

    fn tdpbuud(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.dot(DotKind::Tdpbuud, c, a, b)
    }

    fn tdpbf16ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.dot(DotKind::Tdpbf16ps, c, a, b)
    }

    fn tdpfp16ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.dot(DotKind::Tdpfp16ps, c, a, b)
    }

    fn tile_data(&mut self, t: u8) -> Result<[u8; TILE_BYTES], Fault> {
        if t as usize >= TILES {
            return Err(check::ud(Mnemonic::Xsave, UdReason::NoSuchTile { tile: t }));
        }
        // XSAVE cannot be trapped: under the trap engine the tiles live in its state.
        if let Some(tile) = crate::engine::tile_data(t) {
            return Ok(tile);
        }
        let Some(layout) = self.silicon.xsave else {
            return Err(check::ud(
                Mnemonic::Xsave,
                UdReason::MissingFeature(Feature::XsaveTileData),
            ));
        };
        /// 64 bytes aligned as XSAVE requires; a `Vec` of these is a zeroed, aligned buffer.
        #[derive(Clone, Copy)]
        #[repr(C, align(64))]
        struct Line([u8; 64]);
        let mut area = vec![Line([0; 64]); layout.area.div_ceil(64)];
        // SAFETY: `area` is 64-byte aligned, zeroed (so the header reads as written by XSAVE
        // alone), owned here, and at least CPUID.(0xD,0).EBX and offset + size bytes long;
        // AMX being usable implies CR4.OSXSAVE and XCR0[18].
        unsafe { asm::xsave_tiledata(area.as_mut_ptr().cast::<u8>()) };
        let byte = |i: usize| area[i / 64].0[i % 64];
        let mut out = [0u8; TILE_BYTES];
        let xstate_bv = u64::from_le_bytes(std::array::from_fn(|i| byte(XSTATE_BV + i)));
        if xstate_bv & asm::XTILEDATA != 0 {
            let start = layout.offset + t as usize * TILE_BYTES;
            for (i, out) in out.iter_mut().enumerate() {
                *out = byte(start + i);
            }
        }
        Ok(out)
    }

    fn tileloaddrs(&mut self, t: u8, src: &[u8], stride: usize) -> Result<(), Fault> {
        // SAFETY: a slice: load_rs checks its bounds.
        unsafe { self.load_rs(t, Ok(src), stride as isize, false) }
    }

    fn tileloaddrst1(&mut self, t: u8, src: &[u8], stride: usize) -> Result<(), Fault> {
        // SAFETY: a slice: load_rs checks its bounds.
        unsafe { self.load_rs(t, Ok(src), stride as isize, true) }
    }

    unsafe fn tileloaddrs_ptr(
        &mut self,
        t: u8,
        src: *const u8,
        stride: isize,
    ) -> Result<(), Fault> {
        // SAFETY: forwarded from this function's own contract.
        unsafe { self.load_rs(t, Err(src), stride, false) }
    }

    unsafe fn tileloaddrst1_ptr(
        &mut self,
        t: u8,
        src: *const u8,
        stride: isize,
    ) -> Result<(), Fault> {
        // SAFETY: forwarded from this function's own contract.
        unsafe { self.load_rs(t, Err(src), stride, true) }
    }

    fn tdpbf8ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.product(Product::Tdpbf8ps, c, a, b)
    }

    fn tdpbhf8ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.product(Product::Tdpbhf8ps, c, a, b)
    }

    fn tdphbf8ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.product(Product::Tdphbf8ps, c, a, b)
    }

    fn tdphf8ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.product(Product::Tdphf8ps, c, a, b)
    }

    fn tcmmimfp16ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.product(Product::Tcmmimfp16ps, c, a, b)
    }

    fn tcmmrlfp16ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault> {
        self.product(Product::Tcmmrlfp16ps, c, a, b)
    }

    fn tilemovrow(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault> {
        self.row_move(t, row, RowOp::Move, Mnemonic::Tilemovrow)
    }

    fn tcvtrowd2ps(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault> {
        self.row_move(t, row, RowOp::D2ps, Mnemonic::Tcvtrowd2ps)
    }

    fn tcvtrowps2bf16h(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault> {
        self.row_move(t, row, RowOp::Ps2bf16h, Mnemonic::Tcvtrowps2bf16h)
    }

    fn tcvtrowps2bf16l(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault> {
        self.row_move(t, row, RowOp::Ps2bf16l, Mnemonic::Tcvtrowps2bf16l)
    }

    fn tcvtrowps2phh(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault> {
        self.row_move(t, row, RowOp::Ps2phh, Mnemonic::Tcvtrowps2phh)
    }

    fn tcvtrowps2phl(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault> {
        self.row_move(t, row, RowOp::Ps2phl, Mnemonic::Tcvtrowps2phl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_layer_runs_where_every_dot_product_executes() {
        assert_eq!(typed_unsupported(true, true, Ok(())), None);
    }

    #[test]
    fn typed_layer_names_each_missing_feature() {
        let why = typed_unsupported(false, true, Ok(())).unwrap();
        assert_eq!(why.missing(), &[Requirement::Feature(Feature::AmxInt8)]);
        let why = why.to_string();
        assert!(
            why.contains("AMX-INT8") && !why.contains("AMX-BF16"),
            "{why}"
        );
        let why = typed_unsupported(true, false, Ok(())).unwrap().to_string();
        assert!(
            why.contains("AMX-BF16") && !why.contains("AMX-INT8"),
            "{why}"
        );
        let small = TmulLimits { maxk: 8, maxn: 32 };
        let why = typed_unsupported(false, false, Err(small)).unwrap();
        assert_eq!(
            why.missing(),
            &[
                Requirement::Feature(Feature::AmxInt8),
                Requirement::Feature(Feature::AmxBf16),
                Requirement::TmulLimits(small)
            ]
        );
        let why = why.to_string();
        assert!(
            why.contains("AMX-INT8 (CPUID.(7,0):EDX[25]) and AMX-BF16")
                && why.contains("tmul_maxk 8, tmul_maxn 32")
                && why.contains("AMX_BACKEND=emulated"),
            "{why}"
        );
    }
}
