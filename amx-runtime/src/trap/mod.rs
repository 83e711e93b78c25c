//! Trap-and-emulate: the AMX instructions on an x86-64 Linux CPU without AMX.
//!
//! On such a CPU every AMX instruction raises #UD before it does anything, and Linux delivers
//! SIGILL. Once [`install`]ed, the engine's SIGILL handler decodes the instruction at the
//! faulting RIP, executes it on the thread's own emulated tile unit (the bit-exact
//! [`Emulator`](crate::Emulator)) with its memory operand computed from the saved registers and
//! accessed fault-safely, moves RIP past it and returns. The silicon code path (the
//! [`Hardware`] backend's inline asm, the raw [`intrinsics`](crate::intrinsics), typed tiles,
//! the GEMM micro-kernels, C code built with `-mamx-tile`) then runs unchanged, at the cost of
//! one signal per instruction.
//!
//! What the program sees is the silicon's
//! ([semantics.md section 1](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#1-how-linux-reports-each-exception)):
//!
//! | the instruction raises | the program gets |
//! |---|---|
//! | #UD (bad encoding, or the tile state forbids it) | SIGILL, `ILL_ILLOPN`, REG_TRAPNO 6 |
//! | #GP (a configuration LDTILECFG rejects, a non-canonical address) | SIGSEGV, `SI_KERNEL`, REG_TRAPNO 13, `si_addr` 0 |
//! | #PF (an operand row that cannot be read or written) | SIGSEGV, `SEGV_MAPERR`/`SEGV_ACCERR`, REG_TRAPNO 14, `si_addr` the first inaccessible byte; start_row left at the faulting row |
//! | XFD (tile data before `arch_prctl(ARCH_REQ_XCOMP_PERM, 18)`) | SIGILL, `ILL_ILLOPC`, REG_TRAPNO 0 |
//!
//! The program's own handler gets these with the interrupted context (it may fix it up,
//! return to retry the instruction, or `siglongjmp` out); without one the process dies of that
//! signal. A SIGILL that is not an AMX instruction's goes to the action the program had before
//! the engine was installed.
//!
//! # What the engine also answers
//!
//! - **Permission**: while it is active the runtime's [`permit`](crate::permit) module asks it,
//!   not the kernel: `ARCH_REQ_XCOMP_PERM` for XTILEDATA is granted and `ARCH_GET_XCOMP_PERM`
//!   reports bits 17 and 18 besides the kernel's, as Linux on an AMX CPU does. `fork` keeps the
//!   permission and every thread's tile state; `exec` ends them with the process image.
//! - **Detection**: XGETBV cannot be trapped, so [`detect()`](crate::detect()) asks the engine
//!   and reports the modelled CPU ([`Model`]): AMX-TILE/INT8/BF16 (and AMX-FP16 for Granite
//!   Rapids), the palette table of leaf 0x1D, the TMUL limits of leaf 0x1E, and XCR0 with bits
//!   17 and 18. Code that reads CPUID or XCR0 itself sees the host, unless it runs under the
//!   `amx-trap` preload, whose CPUID faulting answers `cpuid` from the model too (XCR0 stays
//!   the host's).
//! - **XSAVE** cannot be trapped either: `Hardware::tile_data` reads the engine's state.
//!
//! # Signal handlers
//!
//! A handler the engine delivers a signal to runs with the INIT tile state, and the
//! interrupted state comes back when it returns ([`SAVE_SLOTS`] levels deep), as Linux does on
//! the silicon. Other handlers are the kernel's to call: under the `amx-trap` preload every
//! handler is wrapped so that the same holds; in a program that calls [`install`] itself, a
//! handler that uses AMX opens a [`HandlerScope`] first.
//!
//! Limits: the engine must stay SIGILL's handler (install it after the program's own SIGILL
//! handler, or use the preload, which keeps it first); AMX code must not run with SIGILL
//! blocked (the kernel then kills the process, as it would for any #UD); a handler asking for
//! its alternate stack (`SA_ONSTACK`) runs on the stack the engine's handler runs on. The
//! first executions of an instruction cost a signal round trip each (microseconds) and the
//! emulator's work; after [`PATCH_AFTER`] of them the engine patches the instruction's site
//! into a jump to a stub that runs it through a function call, at a small multiple of the
//! emulator's own cost ([`patching`]; `AMX_TRAP_PATCH=0` turns it off; the design is described
//! in the `patch` module's source). Timings under the engine measure the emulator, not the
//! silicon.

// The engine's internals stay reachable for its preload library (`amx-trap`) and its tests,
// hidden from the documentation: they are not an API for kernel authors, and they will move
// with the engine to a crate of its own.
#[doc(hidden)]
pub mod decode;

mod cpuid;
mod regs;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod deliver;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod exec;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod fastcopy;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod handler;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod memory;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod patch;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod state;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod stub;

pub use cpuid::Model;
#[doc(hidden)]
pub use regs::Regs;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[doc(hidden)]
pub use exec::{execute, Exception, Outcome};
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[doc(hidden)]
pub use memory::PageFault;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use patch::{patched_sites, patching, set_patching, PATCH_AFTER};
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use state::SAVE_SLOTS;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::detect::Unavailable;
use crate::unit::Hardware;

/// Why [`install`] did not install the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InstallError {
    /// The engine exists only on x86-64 Linux.
    Unsupported,
    /// The CPU and OS offer usable AMX: the silicon runs the instructions itself.
    NativeAmx,
    /// `sigaction` failed with this errno.
    Sigaction {
        /// The errno.
        errno: i32,
    },
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InstallError::Unsupported => {
                f.write_str("the AMX trap engine runs only on x86-64 Linux")
            }
            InstallError::NativeAmx => {
                f.write_str("this CPU executes AMX itself; the trap engine is for CPUs without AMX")
            }
            InstallError::Sigaction { errno } => {
                write!(f, "installing the SIGILL handler failed with errno {errno}")
            }
        }
    }
}

impl std::error::Error for InstallError {}

static ACTIVE: AtomicBool = AtomicBool::new(false);
static PERMITTED: AtomicBool = AtomicBool::new(false);
/// The model: 0 Sapphire Rapids, 1 Granite Rapids.
static MODEL: AtomicU8 = AtomicU8::new(0);

/// Whether the engine is installed in this process (inherited by `fork`, cleared by `exec`).
#[inline]
pub fn is_active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// The CPU the engine models (chosen by `AMX_TRAP_CPU` when it was installed).
pub fn model() -> Model {
    if MODEL.load(Ordering::Relaxed) == 1 {
        Model::GraniteRapids
    } else {
        Model::SapphireRapids
    }
}

/// Whether the process holds the emulated XTILEDATA permission.
pub(crate) fn permission_granted() -> bool {
    PERMITTED.load(Ordering::Acquire)
}

/// `arch_prctl(ARCH_REQ_XCOMP_PERM, feature)` as Linux on the modelled CPU answers it, or
/// `None` when the engine is inactive or the feature is not a tile one (the kernel's to answer).
#[doc(hidden)]
pub fn request_xcomp_perm(feature: u64) -> Option<Result<(), i32>> {
    if !is_active() {
        return None;
    }
    match feature {
        17 => Some(Ok(())),
        18 => {
            PERMITTED.store(true, Ordering::Release);
            Some(Ok(()))
        }
        _ => None,
    }
}

/// `arch_prctl(ARCH_GET_XCOMP_PERM)` as Linux on the modelled CPU answers it, given the
/// kernel's answer: bit 17 always, bit 18 once granted.
#[doc(hidden)]
pub fn xcomp_perm(kernel: u64) -> u64 {
    let granted = if permission_granted() { 1 << 18 } else { 0 };
    kernel | 1 << 17 | granted
}

/// The tile registers the engine holds for this thread (`None` when inactive).
pub(crate) fn tile_data(t: u8) -> Option<[u8; 1024]> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        if is_active() {
            return state::tile(t);
        }
    }
    let _ = t;
    None
}

/// A CPUID reader of the modelled CPU (for `detect()`).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) fn cpuid_reader() -> cpuid::ModelReader {
    cpuid::ModelReader
}

/// XCR0 as the modelled CPU reports it, or `None` when the engine is inactive.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) fn modelled_xcr0(real: u64) -> Option<u64> {
    is_active().then(|| model().xcr0(real))
}

/// Installs the engine in this process: idempotent and thread-safe. From then on every AMX
/// instruction on any thread executes on that thread's emulated state.
///
/// Fails with [`InstallError::Unsupported`] off x86-64 Linux and with
/// [`InstallError::NativeAmx`] where the CPU and OS already offer AMX (the silicon is then the
/// backend). Install it after any SIGILL handler of the program's own: the engine chains every
/// SIGILL that is not an AMX instruction's to the action it replaced.
pub fn install() -> Result<(), InstallError> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        linux::install(false)
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        Err(InstallError::Unsupported)
    }
}

/// The AMX unit of this thread: the silicon where it is usable, else the trap engine (installed
/// on first use) running the same instructions. For tests and tools that want the silicon code
/// path everywhere it can run.
pub fn hardware() -> Result<Hardware, Unavailable> {
    match Hardware::new() {
        Ok(hw) => Ok(hw),
        Err(why) => match install() {
            Ok(()) => Hardware::new(),
            Err(_) => Err(why),
        },
    }
}

/// While alive, this thread's AMX instructions run on a fresh INIT state; the state before
/// comes back when it drops. Open one at the top of a signal handler that uses AMX, in a
/// program that installed the engine itself (the preload does this for every handler). Does
/// nothing while the engine is inactive.
#[derive(Debug)]
#[must_use = "the interrupted state comes back when the scope drops"]
pub struct HandlerScope {
    open: bool,
    _thread_bound: std::marker::PhantomData<*const ()>,
}

/// Opens a [`HandlerScope`].
pub fn handler_scope() -> HandlerScope {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        if is_active() {
            let here = 0u8;
            // A signal arriving meanwhile may itself run AMX on this thread's state.
            let mask = deliver::block_all();
            state::enter_handler(&here as *const u8 as u64);
            deliver::set_mask(libc::SIG_SETMASK, mask);
            return HandlerScope {
                open: true,
                _thread_bound: std::marker::PhantomData,
            };
        }
    }
    HandlerScope {
        open: false,
        _thread_bound: std::marker::PhantomData,
    }
}

impl Drop for HandlerScope {
    fn drop(&mut self) {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        if self.open {
            let mask = deliver::block_all();
            state::leave_handler();
            deliver::set_mask(libc::SIG_SETMASK, mask);
        }
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        let _ = self.open;
    }
}

/// The pieces the `amx-trap` preload library builds on. Not a stable API.
#[doc(hidden)]
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod preload {
    pub use super::deliver::{owned, program_action, record, set_real_sigaction, Action};

    /// Installs the engine for a preloaded library: SIGILL, SIGSEGV and CPUID faulting (when
    /// the kernel offers it; `Ok(false)` when it does not).
    pub fn install() -> Result<bool, super::InstallError> {
        super::linux::install(true)?;
        Ok(super::cpuid::FAULTING.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The engine's handler for `sig`, if it occupies it.
    pub fn engine_handler(sig: libc::c_int) -> Option<usize> {
        match sig {
            libc::SIGILL => Some(super::handler::on_sigill as *const () as usize),
            libc::SIGSEGV if owned(libc::SIGSEGV) => {
                Some(super::handler::on_sigsegv as *const () as usize)
            }
            _ => None,
        }
    }

    /// Opens a handler level (see [`HandlerScope`](super::HandlerScope)) at stack address `sp`.
    pub fn enter_handler(sp: u64) {
        super::state::enter_handler(sp);
    }

    /// Closes the innermost handler level.
    pub fn leave_handler() {
        super::state::leave_handler();
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod linux {
    use std::sync::atomic::Ordering;
    use std::sync::Mutex;

    use super::deliver::{self, Action};
    use super::{cpuid, handler, InstallError, Model, ACTIVE, MODEL};

    static INSTALLING: Mutex<()> = Mutex::new(());

    /// Whether the host itself offers AMX (CPUID and XCR0).
    fn native_amx() -> bool {
        let caps = crate::detect::detect();
        caps.amx_tile && caps.xtilecfg_enabled() && caps.xtiledata_enabled()
    }

    /// Puts `f` in the kernel's table for `sig` and records the action it replaces.
    fn take_over(sig: libc::c_int, f: usize) -> Result<(), InstallError> {
        let ours = Action {
            handler: f,
            flags: libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART,
            // Nothing may run on this thread while the engine works on its state.
            mask: !0,
        };
        // SAFETY: an all-zero sigaction is valid; `old` is written by the call.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        let new = ours.to_c();
        // SAFETY: both pointers are live sigactions; the handler is async-signal-safe.
        let rc = unsafe { deliver::real_sigaction(sig, &new, &mut old) };
        if rc != 0 {
            return Err(InstallError::Sigaction {
                // SAFETY: __errno_location returns this thread's errno slot.
                errno: unsafe { *libc::__errno_location() },
            });
        }
        if old.sa_sigaction != f {
            deliver::record(sig, Action::from_c(&old));
        }
        Ok(())
    }

    pub(super) fn install(preload: bool) -> Result<(), InstallError> {
        let _guard = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
        // The handler's kernels are chosen by CPU detection, which runs `cpuid`: done here,
        // before CPUID faulting is on (see `decide_paths`).
        crate::unit::numerics::decide_paths();
        if !ACTIVE.load(Ordering::Acquire) {
            if native_amx() {
                return Err(InstallError::NativeAmx);
            }
            let model = Model::from_env();
            MODEL.store(u8::from(model == Model::GraniteRapids), Ordering::Relaxed);
            take_over(libc::SIGILL, handler::on_sigill as *const () as usize)?;
            ACTIVE.store(true, Ordering::Release);
        }
        if preload && !deliver::owned(libc::SIGSEGV) {
            take_over(libc::SIGSEGV, handler::on_sigsegv as *const () as usize)?;
            if cpuid::set_cpuid_enabled(false).is_ok() {
                cpuid::FAULTING.store(true, Ordering::Relaxed);
            }
        }
        // Hot sites run without a signal (patch.rs), or on the slow path alone if they cannot.
        super::patch::prepare();
        Ok(())
    }
}
