//! Per-thread configured state: `configure` loads a configuration only when this thread does not
//! already hold it, and hands out a guard through which the tile instructions run.
//!
//! # Policy
//! - **Tracking.** Each backend tracks the configuration it holds per thread (the bytes STTILECFG
//!   would write). `configure` compares against that tracked copy, not against a real STTILECFG:
//!   a 64-byte comparison costs a few nanoseconds, where STTILECFG alone costs about a tenth of an
//!   LDTILECFG. Code that issues raw [`intrinsics`](crate::intrinsics) behind the library's back
//!   must call [`Hardware::resync`] afterwards.
//! - **Release.** Dropping the guard keeps the configuration loaded, so the next kernel on this
//!   thread with the same configuration pays no LDTILECFG (tens of nanoseconds on the silicon,
//!   and it zeroes all 8 KiB of tile data). Call [`release`] when the thread is done with AMX for a while:
//!   a configured thread makes every context switch save and restore the tile state.
//! - **Tile data.** Because a skipped LDTILECFG leaves the previous kernel's tile data in place,
//!   tile contents are unspecified when a guard is handed out: a kernel must TILEZERO or TILELOADD
//!   every tile before it reads it.
//! - **One guard per thread.** A second `configure` while a guard is alive on the same thread is
//!   [`ConfigureError::Busy`], because it would change the tiles under the first guard.
//! - **Signal handlers.** The safe API is not async-signal-safe. Linux runs a handler with the
//!   tiles unconfigured and restores the interrupted thread's tile state when the handler
//!   returns, neither of which the tracking sees: inside a handler use only the raw
//!   [`intrinsics`](crate::intrinsics), and after leaving a handler any other way than by
//!   returning (`siglongjmp`, or resuming somewhere other than a faulting tile load or store,
//!   which leaves start_row at the faulting row) call [`Hardware::resync`] before the next
//!   safe call.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

use crate::backend::{backend, Backend, BackendError};
use crate::config::TileConfig;
use crate::detect::Unavailable;
use crate::error::{ConfigError, Fault, Feature};
use crate::thread_bound::ThreadBound;
use crate::unit::{Emulator, Hardware, TileUnit};
use amx_tilecfg::{PaletteTable, TmulLimits};

/// How often this thread's configuration requests were served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Counters {
    /// LDTILECFGs issued by [`configure`].
    pub loads: u64,
    /// [`configure`] calls that found the configuration already loaded and skipped LDTILECFG.
    pub skipped: u64,
    /// TILERELEASEs issued by [`release`].
    pub releases: u64,
}

/// What `configure` needs of this thread besides the emulator, in one thread-local without a
/// destructor: a skipped load on the silicon is then one plain thread-local access (a
/// thread-local with a destructor checks its registration state on every access).
struct PerThread {
    counters: Cell<Counters>,
    /// Whether a [`Tiles`] guard is alive on this thread.
    busy: Cell<bool>,
}

thread_local! {
    static THREAD: PerThread = const {
        PerThread {
            counters: Cell::new(Counters { loads: 0, skipped: 0, releases: 0 }),
            busy: Cell::new(false),
        }
    };
    /// The thread's emulator, lent to the guard while it lives (allocated on first use: 8 KiB
    /// of tile data that threads on the silicon never need). Freed when the thread exits.
    static EMULATOR: Cell<Option<Box<Emulator>>> = const { Cell::new(None) };
}

/// This thread's counters.
pub fn counters() -> Counters {
    THREAD.with(|t| t.counters.get())
}

#[inline]
fn count(update: impl FnOnce(&mut Counters)) {
    THREAD.with(|t| {
        let mut v = t.counters.get();
        update(&mut v);
        t.counters.set(v);
    });
}

/// Marks this thread's tile unit taken (false if it already was) or free.
#[inline]
fn set_busy(busy: bool) -> bool {
    THREAD.with(|t| t.busy.replace(busy))
}

/// Why a configuration could not be put in place.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigureError {
    /// No backend could be chosen (bad `AMX_BACKEND`, or hardware asked for but unusable).
    Backend(BackendError),
    /// The hardware became unusable (e.g. the OS refused the permission).
    Unavailable(Unavailable),
    /// The configuration does not fit this CPU's palette table.
    Config(ConfigError),
    /// LDTILECFG would fault: a configuration checked against another palette table (see
    /// [`TileConfig::from_bytes_for`]) that this CPU's table rejects; nothing was loaded.
    Fault(Fault),
    /// A guard from an earlier `configure` is still alive on this thread.
    Busy,
    /// The hardware lacks an instruction or limit a typed layer relies on (see
    /// [`configure_typed`](crate::typed::configure_typed)); nothing stays loaded.
    Unsupported(Unsupported),
    /// The thread is exiting and its emulator is already torn down (a `configure` on the
    /// emulator from the destructor of another thread-local).
    ThreadExiting,
}

impl fmt::Display for ConfigureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigureError::Backend(e) => e.fmt(f),
            ConfigureError::Unavailable(e) => e.fmt(f),
            ConfigureError::Config(e) => write!(f, "the configuration does not fit this CPU: {e}"),
            ConfigureError::Fault(e) => e.fmt(f),
            ConfigureError::Busy => f.write_str(
                "a tile guard is alive on this thread and its tiles are in use; drop the guard \
                 first (to configure again, release the tiles, change the thread's emulator or \
                 run a GEMM on this thread)",
            ),
            ConfigureError::Unsupported(why) => why.fmt(f),
            ConfigureError::ThreadExiting => {
                f.write_str("this thread is exiting and its tile state is already torn down")
            }
        }
    }
}

// Display prints the wrapped error's message, so `source` continues the chain below it: a
// reporter that prints every level prints each message once.
impl std::error::Error for ConfigureError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigureError::Backend(e) => e.source(),
            ConfigureError::Unavailable(e) => e.source(),
            ConfigureError::Config(e) => e.source(),
            ConfigureError::Fault(e) => e.source(),
            _ => None,
        }
    }
}

/// What the typed layer needs that a tile unit lacks: the payload of
/// [`ConfigureError::Unsupported`].
///
/// ```
/// use amx_runtime::{Backend, Feature, Requirement, TmulLimits, Unsupported};
///
/// let why = Unsupported::new(Backend::Hardware, vec![Requirement::Feature(Feature::AmxBf16)]);
/// assert_eq!(why.missing(), &[Requirement::Feature(Feature::AmxBf16)]);
/// assert!(why.to_string().starts_with("typed tiles on the silicon need AMX-BF16"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    backend: Backend,
    missing: Vec<Requirement>,
}

impl Unsupported {
    /// `missing`, on `backend`.
    pub fn new(backend: Backend, missing: Vec<Requirement>) -> Unsupported {
        Unsupported { backend, missing }
    }

    /// The backend that lacks them.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Everything it lacks, in the order: features, then TMUL limits.
    pub fn missing(&self) -> &[Requirement] {
        &self.missing
    }
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let arch = TmulLimits::ARCHITECTURAL;
        match self.backend {
            Backend::Hardware => {
                f.write_str("typed tiles on the silicon need ")?;
                for (i, need) in self.missing.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" and ")?;
                    }
                    match need {
                        Requirement::Feature(feature) => write!(f, "{feature}")?,
                        Requirement::TmulLimits(have) => write!(
                            f,
                            "the architectural TMUL limits (this CPU reports tmul_maxk {}, \
                             tmul_maxn {}; typed operands are proven against {} and {})",
                            have.maxk, have.maxn, arch.maxk, arch.maxn
                        )?,
                    }
                }
                f.write_str(
                    ", which this CPU does not report; use the untyped `Tiles` (whose \
                     instructions return a `Fault`) or AMX_BACKEND=emulated",
                )
            }
            Backend::Emulated => {
                f.write_str("typed tiles need ")?;
                for (i, need) in self.missing.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" and ")?;
                    }
                    match need {
                        Requirement::Feature(feature) => {
                            write!(f, "{feature}, which this emulator does not model")?
                        }
                        Requirement::TmulLimits(have) => write!(
                            f,
                            "the architectural TMUL limits (tmul_maxk {}, tmul_maxn {}), and \
                             this emulator models tmul_maxk {}, tmul_maxn {}",
                            arch.maxk, arch.maxn, have.maxk, have.maxn
                        )?,
                    }
                }
                f.write_str("; use the untyped `Tiles`, whose instructions return a `Fault`")
            }
        }
    }
}

/// One thing the typed layer relies on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Requirement {
    /// An instruction set extension the unit does not report.
    Feature(Feature),
    /// At least the architectural TMUL limits ([`TmulLimits::ARCHITECTURAL`]); the unit has
    /// these smaller ones.
    TmulLimits(TmulLimits),
}

impl From<BackendError> for ConfigureError {
    fn from(e: BackendError) -> Self {
        ConfigureError::Backend(e)
    }
}

enum Unit {
    Hardware(Hardware),
    /// Handed back to the thread-local slot when the guard drops (hence `ManuallyDrop`: the box
    /// is moved out in `Drop` rather than replaced by a fresh 8 KiB emulator).
    Emulated(ManuallyDrop<Box<Emulator>>),
}

/// The tiles of this thread, configured. Dereferences to the [`TileUnit`] of the chosen backend.
///
/// Not `Send`: tile state belongs to the thread that configured it. Dropping the guard keeps the
/// configuration loaded (see the [policy](crate::context)).
pub struct Tiles {
    unit: Unit,
    _thread_bound: ThreadBound,
}

impl Tiles {
    /// The backend these tiles live on.
    pub fn backend(&self) -> Backend {
        match self.unit {
            Unit::Hardware(_) => Backend::Hardware,
            Unit::Emulated(_) => Backend::Emulated,
        }
    }

    /// The configuration loaded now, as STTILECFG would write it: the one [`configure`] put
    /// in place, unless it was changed since through this guard's `ldtilecfg` or `tilerelease`
    /// (then [`TileConfig::INIT`]). It passes the load-time rules of this backend's palette
    /// table.
    ///
    /// The guard keeps no copy of its own: a 64-byte-aligned field made every skipped
    /// `configure` realign the stack and move the image twice, doubling its cost.
    pub fn config(&self) -> TileConfig {
        TileConfig::loaded(self.loaded_config())
    }

    /// The silicon, when that is the backend (for the typed path's unchecked instructions).
    #[inline(always)]
    pub(crate) fn hardware_mut(&mut self) -> Option<&mut Hardware> {
        match &mut self.unit {
            Unit::Hardware(h) => Some(h),
            Unit::Emulated(_) => None,
        }
    }

    /// The emulator, when that is the backend (for the typed path's proven instructions).
    #[inline(always)]
    pub(crate) fn emulator_mut(&mut self) -> Option<&mut Emulator> {
        match &mut self.unit {
            Unit::Emulated(e) => Some(e),
            Unit::Hardware(_) => None,
        }
    }

    /// Why the typed layer cannot run on this unit, or `None` when it can (see
    /// `Hardware::typed_unsupported`): on the emulator, only limits below the architectural
    /// ones stop it.
    #[inline]
    pub(crate) fn typed_unsupported(&mut self) -> Option<Unsupported> {
        match &mut self.unit {
            Unit::Hardware(h) => h.typed_unsupported(),
            Unit::Emulated(e) => {
                let limits = e.tmul_limits();
                let arch = TmulLimits::ARCHITECTURAL;
                (limits.maxk < arch.maxk || limits.maxn < arch.maxn).then(|| {
                    Unsupported::new(Backend::Emulated, vec![Requirement::TmulLimits(limits)])
                })
            }
        }
    }

    /// The backend's configuration epoch: changes whenever the configuration may have.
    #[inline(always)]
    pub(crate) fn config_epoch(&self) -> u64 {
        match &self.unit {
            Unit::Hardware(h) => h.config_epoch(),
            Unit::Emulated(e) => e.config_epoch(),
        }
    }

    /// The emulator, when that is the backend (e.g. to inspect tiles without a store).
    pub fn emulator(&self) -> Option<&Emulator> {
        match &self.unit {
            Unit::Emulated(e) => Some(e),
            Unit::Hardware(_) => None,
        }
    }
}

/// The hot instructions as inherent methods, which method resolution picks before the
/// [`TileUnit`] ones reached through `Deref`: each matches on the backend and calls it directly,
/// so the emulator's instruction inlines into the caller's loop. Through `dyn TileUnit` every
/// instruction was a call the next one waited behind (an emulated TDPBSSD took 85 ns that
/// way, 73 ns called directly; BENCHMARKS.md).
macro_rules! direct {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*);)*) => {
        impl Tiles {
            $(
                $(#[$doc])*
                #[inline]
                pub fn $name(&mut self, $($arg: $ty),*) -> Result<(), Fault> {
                    match &mut self.unit {
                        Unit::Hardware(h) => h.$name($($arg),*),
                        Unit::Emulated(e) => e.$name($($arg),*),
                    }
                }
            )*
        }
    };
}

direct! {
    /// [`TileUnit::tilezero`] on this backend, without a `dyn` call.
    fn tilezero(t: u8);
    /// [`TileUnit::tileloadd`] on this backend, without a `dyn` call.
    fn tileloadd(t: u8, src: &[u8], stride_bytes: usize);
    /// [`TileUnit::tileloaddt1`] on this backend, without a `dyn` call.
    fn tileloaddt1(t: u8, src: &[u8], stride_bytes: usize);
    /// [`TileUnit::tilestored`] on this backend, without a `dyn` call.
    fn tilestored(t: u8, dst: &mut [u8], stride_bytes: usize);
    /// [`TileUnit::tdpbssd`] on this backend, without a `dyn` call.
    fn tdpbssd(c: u8, a: u8, b: u8);
    /// [`TileUnit::tdpbsud`] on this backend, without a `dyn` call.
    fn tdpbsud(c: u8, a: u8, b: u8);
    /// [`TileUnit::tdpbusd`] on this backend, without a `dyn` call.
    fn tdpbusd(c: u8, a: u8, b: u8);
    /// [`TileUnit::tdpbuud`] on this backend, without a `dyn` call.
    fn tdpbuud(c: u8, a: u8, b: u8);
    /// [`TileUnit::tdpbf16ps`] on this backend, without a `dyn` call.
    fn tdpbf16ps(c: u8, a: u8, b: u8);
    /// [`TileUnit::tdpfp16ps`] on this backend, without a `dyn` call.
    fn tdpfp16ps(c: u8, a: u8, b: u8);
}

impl fmt::Debug for Tiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tiles")
            .field("backend", &self.backend())
            .field("config", &self.config())
            .finish()
    }
}

impl Deref for Tiles {
    type Target = dyn TileUnit;
    fn deref(&self) -> &(dyn TileUnit + 'static) {
        match &self.unit {
            Unit::Hardware(h) => h,
            Unit::Emulated(e) => &***e,
        }
    }
}

impl DerefMut for Tiles {
    fn deref_mut(&mut self) -> &mut (dyn TileUnit + 'static) {
        match &mut self.unit {
            Unit::Hardware(h) => h,
            Unit::Emulated(e) => &mut ***e,
        }
    }
}

impl Drop for Tiles {
    #[inline]
    fn drop(&mut self) {
        // Runs on unwinding too: the thread's state stays tracked (each instruction updates the
        // tracked copy only when it completes) and the next configure works.
        if let Unit::Emulated(e) = &mut self.unit {
            // SAFETY: `self.unit` is never used again: this is the guard's drop.
            let e = unsafe { ManuallyDrop::take(e) };
            // Once the thread's emulator slot is torn down (a guard dropped by another
            // thread-local's destructor) the emulator is simply freed.
            let _ = EMULATOR.try_with(move |slot| slot.set(Some(e)));
        }
        set_busy(false);
    }
}

/// Puts `config` in place on this thread, on the process's backend (see
/// [`backend`](crate::backend())), and returns the guard through which to run tile instructions.
///
/// The configuration is checked against this CPU's palette table (a configuration valid for
/// palette 1 may not fit a smaller one). LDTILECFG is issued only when this thread does not
/// already hold exactly this configuration.
///
/// ```
/// use amx_runtime::{configure, counters, tilecfg, TileConfig};
///
/// static CFG: TileConfig = tilecfg! { palette 1; t0: 16x64 };
/// let before = counters();
/// drop(configure(&CFG).unwrap()); // first use on this thread: LDTILECFG
/// drop(configure(&CFG).unwrap()); // already loaded: skipped
/// let after = counters();
/// assert_eq!(after.loads - before.loads, 1);
/// assert_eq!(after.skipped - before.skipped, 1);
/// ```
#[inline]
pub fn configure(config: &TileConfig) -> Result<Tiles, ConfigureError> {
    configure_on(backend()?, config)
}

/// [`configure`] on a given backend rather than the process's.
#[inline(always)]
pub fn configure_on(backend: Backend, config: &TileConfig) -> Result<Tiles, ConfigureError> {
    let mut tiles = acquire(backend)?;
    tiles.reconfigure(config)?;
    Ok(tiles)
}

impl Tiles {
    /// Puts another configuration in place under this guard, with [`configure`]'s checks and
    /// its skip: LDTILECFG only when the thread does not already hold `config`. The cheapest
    /// way for one kernel to switch among configurations (e.g. edge tiles), as it needs no new
    /// guard: a skip is a 64-byte compare.
    ///
    /// An error leaves the previous configuration loaded.
    ///
    /// ```
    /// use amx_runtime::{configure, counters, tilecfg, TileConfig};
    ///
    /// static BODY: TileConfig = tilecfg! { palette 1; t0: 16x64 };
    /// static EDGE: TileConfig = tilecfg! { palette 1; t0: 5x64 };
    /// let mut tiles = configure(&BODY).unwrap();
    /// let before = counters();
    /// tiles.reconfigure(&EDGE).unwrap(); // LDTILECFG
    /// tiles.reconfigure(&EDGE).unwrap(); // skipped
    /// assert_eq!(counters().loads - before.loads, 1);
    /// assert_eq!(tiles.config(), EDGE);
    /// ```
    // Always inlined: the skip is a compare and a counter, and the callers' skip paths (every
    // `configure` among them) would otherwise pay a call and a Result through memory.
    #[inline(always)]
    pub fn reconfigure(&mut self, config: &TileConfig) -> Result<(), ConfigureError> {
        // A configuration this unit holds already passed its LDTILECFG checks, so the skip
        // needs no other check; everything else is out of line, to keep the skip small enough
        // to inline.
        let loaded = match &self.unit {
            Unit::Hardware(h) => same_image(&h.loaded_config(), config.as_bytes()),
            Unit::Emulated(e) => same_image(e.config_bytes(), config.as_bytes()),
        };
        if loaded {
            count(|c| c.skipped += 1);
            Ok(())
        } else {
            self.load(config)
        }
    }

    /// The load half of [`Tiles::reconfigure`].
    #[cold]
    #[inline(never)]
    fn load(&mut self, config: &TileConfig) -> Result<(), ConfigureError> {
        // Every TileConfig from the macro, `from_bytes` or the builder already passed the
        // architectural table's rules; only a CPU with another table needs the check again.
        let (architectural, table) = match &self.unit {
            Unit::Hardware(h) => (h.palette_is_architectural(), h.palette_table()),
            Unit::Emulated(e) => (e.palette_is_architectural(), e.palette_table()),
        };
        if !architectural {
            config
                .check_against(table)
                .map_err(ConfigureError::Config)?;
        }
        self.ldtilecfg(config.as_bytes())
            .map_err(ConfigureError::Fault)?;
        count(|c| c.loads += 1);
        Ok(())
    }
}

/// Whether two images are equal, as eight 64-bit words folded into one (`==` on the arrays
/// calls `memcmp`, which costs more than everything else a skipped load does).
#[inline]
fn same_image(a: &[u8; 64], b: &[u8; 64]) -> bool {
    let mut diff = 0u64;
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        let word = |c: &[u8]| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8]));
        diff |= word(x) ^ word(y);
    }
    diff == 0
}

/// The thread's first emulator. Out of line, because building 8 KiB of tile state inline would
/// give every `configure` an 8 KiB stack frame (and its stack probes).
#[cold]
#[inline(never)]
fn new_emulator() -> Box<Emulator> {
    Box::new(Emulator::new())
}

/// Claims this thread's tile unit for one guard.
#[inline]
fn acquire(backend: Backend) -> Result<Tiles, ConfigureError> {
    if set_busy(true) {
        return Err(ConfigureError::Busy);
    }
    let unit = match backend {
        Backend::Hardware => match Hardware::new() {
            Ok(h) => Unit::Hardware(h),
            Err(why) => {
                set_busy(false);
                return Err(ConfigureError::Unavailable(why));
            }
        },
        Backend::Emulated => match EMULATOR.try_with(Cell::take) {
            Ok(lent) => Unit::Emulated(ManuallyDrop::new(lent.unwrap_or_else(new_emulator))),
            Err(_) => {
                set_busy(false);
                return Err(ConfigureError::ThreadExiting);
            }
        },
    };
    // From here on the guard's Drop clears `busy`, on every path.
    Ok(Tiles {
        unit,
        _thread_bound: PhantomData,
    })
}

/// The TMUL limits that dot products on `backend` are checked against on this thread: the CPU's
/// (CPUID leaf 0x1E) on the hardware; on the emulator, those of this thread's emulator (the
/// architectural ones unless [`set_thread_emulator`] installed another). Code that issues
/// unchecked dot products (raw intrinsics, precomputed kernels) asks this before configuring.
///
/// ```
/// use amx_runtime::{tmul_limits_on, Backend, TmulLimits};
///
/// assert_eq!(tmul_limits_on(Backend::Emulated).unwrap(), TmulLimits::ARCHITECTURAL);
/// ```
///
/// # Errors
/// [`ConfigureError::Unavailable`] when the hardware is unusable; [`ConfigureError::Busy`]
/// while a guard is alive on this thread (its emulator is lent to the guard; ask the guard's
/// [`Tiles::emulator`]); [`ConfigureError::ThreadExiting`] once the thread's emulator is torn
/// down.
pub fn tmul_limits_on(backend: Backend) -> Result<TmulLimits, ConfigureError> {
    ask_unit(
        backend,
        |h| h.tmul_limits(),
        |e| e.map_or(TmulLimits::ARCHITECTURAL, |e| e.tmul_limits()),
    )
}

/// What `hardware` reads from the silicon's unit, or `emulated` from this thread's emulator
/// (`None`: the thread has none yet, and gets the architectural one on its first use).
fn ask_unit<T>(
    backend: Backend,
    hardware: impl FnOnce(&Hardware) -> T,
    emulated: impl FnOnce(Option<&Emulator>) -> T,
) -> Result<T, ConfigureError> {
    match backend {
        Backend::Hardware => Hardware::new()
            .map(|h| hardware(&h))
            .map_err(ConfigureError::Unavailable),
        Backend::Emulated => {
            if THREAD.with(|t| t.busy.get()) {
                return Err(ConfigureError::Busy);
            }
            EMULATOR
                .try_with(|slot| {
                    let emulator = slot.take();
                    let answer = emulated(emulator.as_deref());
                    slot.set(emulator);
                    answer
                })
                .map_err(|_| ConfigureError::ThreadExiting)
        }
    }
}

/// The palette table that configurations on `backend` are checked against on this thread: the
/// CPU's (CPUID leaf 0x1D) on the hardware; on the emulator, that of this thread's emulator (the
/// architectural one unless [`set_thread_emulator`] installed another). Code that loads fixed
/// configurations (precomputed kernels, a GEMM's micro-tiles) asks this before configuring, to
/// tell a unit too small for them from a wrong configuration.
///
/// ```
/// use amx_runtime::{palette_table_on, Backend, PaletteTable};
///
/// assert_eq!(palette_table_on(Backend::Emulated).unwrap(), PaletteTable::ARCHITECTURAL);
/// ```
///
/// # Errors
/// As [`tmul_limits_on`].
pub fn palette_table_on(backend: Backend) -> Result<PaletteTable, ConfigureError> {
    ask_unit(
        backend,
        |h| *h.palette_table(),
        |e| e.map_or(PaletteTable::ARCHITECTURAL, |e| *e.palette_table()),
    )
}

/// Makes `emulator` this thread's emulated tile unit: the next [`configure_on`] with
/// [`Backend::Emulated`] (and `configure` when the process runs on the emulator) on this thread
/// uses it, with its palette table, TMUL limits and state. The way to run a kernel, or a whole
/// library such as a GEMM, against the limits of another CPU or VM (see
/// [`Emulator::with_limits`]). Other threads keep their own emulators.
///
/// ```
/// use amx_runtime::rules::PaletteTable;
/// use amx_runtime::{set_thread_emulator, tmul_limits_on, Backend, Emulator, TmulLimits};
///
/// let small = TmulLimits { maxk: 8, maxn: 32 };
/// let vm = Emulator::with_limits(PaletteTable::ARCHITECTURAL, small).unwrap();
/// set_thread_emulator(vm).unwrap();
/// assert_eq!(tmul_limits_on(Backend::Emulated).unwrap(), small);
/// set_thread_emulator(Emulator::new()).unwrap(); // back to the architectural limits
/// ```
///
/// # Errors
/// [`ConfigureError::Busy`] while a guard is alive on this thread (its tiles are in use);
/// [`ConfigureError::ThreadExiting`] once the thread's emulator is torn down.
pub fn set_thread_emulator(emulator: Emulator) -> Result<(), ConfigureError> {
    if THREAD.with(|t| t.busy.get()) {
        return Err(ConfigureError::Busy);
    }
    let emulator = Box::new(emulator);
    EMULATOR
        .try_with(move |slot| slot.set(Some(emulator)))
        .map_err(|_| ConfigureError::ThreadExiting)
}

/// Releases this thread's tiles (TILERELEASE) on the process's backend, so context switches no
/// longer save tile state. The next [`configure`] loads its configuration again.
pub fn release() -> Result<(), ConfigureError> {
    release_on(backend()?)
}

/// [`release`] on a given backend.
pub fn release_on(backend: Backend) -> Result<(), ConfigureError> {
    let mut tiles = acquire(backend)?;
    tiles.tilerelease();
    count(|c| c.releases += 1);
    Ok(())
}
