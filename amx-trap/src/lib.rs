//! Intel AMX on an x86-64 Linux CPU without AMX: every AMX instruction traps, and the engine
//! executes it on the calling thread's bit-exact emulated tile unit.
//!
//! On such a CPU every AMX instruction raises #UD before it does anything, and Linux delivers
//! SIGILL. Once [`install`]ed, the engine's SIGILL handler decodes the instruction at the
//! faulting RIP, executes it on the thread's own `amx_runtime::Emulator`, with its memory
//! operand computed from the saved registers and accessed by the CPU's own loads and stores,
//! moves RIP past it and returns. The silicon code path (the `Hardware` backend's inline asm,
//! the raw intrinsics, typed tiles, the GEMM micro-kernels, C code built with `-mamx-tile`)
//! then runs unchanged; hot sites are patched into a jump to a stub, so that their repeat
//! executions cost a function call instead of a signal.
//!
//! Two ways in:
//!
//! - **In-process**: [`install`] (or [`register`], which lets `AMX_BACKEND=trapped` install it
//!   on first use). The engine takes SIGILL, SIGSEGV, SIGBUS, SIGTRAP and SIGSYS (the last for
//!   a seccomp filter that traps one of its own system calls); handlers the program installed
//!   before are kept and receive what the kernel would send them. Install it after the
//!   program's own handlers for those five, keep them unblocked where AMX code runs, and open
//!   a [`HandlerScope`] in a handler of the program's that uses AMX.
//! - **Preloaded** into any program: `libamx_trap_preload.so` (the `amx-trap-preload`
//!   package), which also keeps every `sigaction`, mask and handler of the program's in front
//!   of the engine, so that none of the above is needed. See the crate's README.
//!
//! What the program sees is the silicon's (docs/semantics.md section 1):
//!
//! | the instruction raises | the program gets |
//! |---|---|
//! | #UD (bad encoding, or the tile state forbids it) | SIGILL, `ILL_ILLOPN`, REG_TRAPNO 6 |
//! | #GP (a configuration LDTILECFG rejects) | SIGSEGV, `SI_KERNEL`, REG_TRAPNO 13, `si_addr` 0 |
//! | a fault of the memory operand | the CPU's own: SIGSEGV (`SEGV_MAPERR`, `SEGV_ACCERR`, `SEGV_PKUERR`, or `SI_KERNEL` for a non-canonical address) or SIGBUS (`BUS_ADRERR`, or `SI_KERNEL` for a non-canonical address through the stack segment), with its `si_addr`, REG_TRAPNO and REG_ERR; start_row left at the faulting row |
//! | XFD (tile data before `arch_prctl(ARCH_REQ_XCOMP_PERM, 18)`) | SIGILL, `ILL_ILLOPC`, REG_TRAPNO and REG_ERR of the thread's last trap (0 for a thread that has had none) |
//!
//! A handler gets these in a signal frame of the kernel's layout, on the stack the kernel
//! would choose, with the INIT tile state; it may return (the interrupted tile state comes
//! back), change the context, `siglongjmp` out or throw (the tile state stays what it left).
//! Without a handler the process dies of that signal.
//!
//! The engine also answers, while it is active, the runtime's detection and permission
//! requests (`amx_runtime::detect()` reports the modelled CPU, [`Model`]), and
//! `Hardware::tile_data` (XSAVE cannot be trapped).

// A memory fault carries the kernel's 128-byte siginfo by value: boxing it would allocate on
// the signal path.
#![allow(clippy::result_large_err)]

pub use cpuid::Model;

mod cpuid;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod access;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod assist;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod deliver;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod entry;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod exec;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod fastpath;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod fatal;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod handler;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod kframe;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod maps;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod patch;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod regs;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod resident;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod signals;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod sigstack;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod slot;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod slotless;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[doc(hidden)]
pub mod sys;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod tls;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod vfork;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod zmm;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use patch::{patched_sites, patching, set_patching, PATCH_AFTER};

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use amx_runtime::{Hardware, Unavailable};

/// Why [`install`] did not install the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InstallError {
    /// The engine exists only on x86-64 Linux.
    Unsupported,
    /// The CPU and OS offer usable AMX: the silicon runs the instructions itself.
    NativeAmx,
    /// Installing a signal handler failed with this errno.
    Sigaction {
        /// The errno.
        errno: i32,
    },
    /// The program runs under valgrind, which checks every signal frame a handler returns
    /// through and ends the process at one the engine built. On the silicon valgrind does not
    /// run AMX either (it stops at the first AMX instruction it meets).
    Valgrind,
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
                write!(
                    f,
                    "installing the engine's signal handlers failed with errno {errno}"
                )
            }
            InstallError::Valgrind => f.write_str(
                "the program runs under valgrind, which cannot run the trap engine's signal \
                 frames (nor AMX instructions)",
            ),
        }
    }
}

impl std::error::Error for InstallError {}

static ACTIVE: AtomicBool = AtomicBool::new(false);
static PERMITTED: AtomicBool = AtomicBool::new(false);
/// The process the engine serves (set at installation and in a `fork` child): a task of
/// another id in this memory is a `vfork` child.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
static PROCESS: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// What the engine does with the AMX instructions it traps: one of [`mode`].
static MODE: AtomicU8 = AtomicU8::new(mode::EMULATE);

/// The engine's modes.
mod mode {
    /// The CPU has no AMX: the engine executes every AMX instruction.
    pub(crate) const EMULATE: u8 = 0;
    /// Forced onto a CPU with AMX (`AMX_TRAP_FORCE=1`): the engine handles signals and leaves
    /// every instruction to the silicon.
    pub(crate) const SIGNALS: u8 = 1;
    /// A CPU with AMX that lacks extensions the modelled CPU has: the engine executes those
    /// (see `assist.rs`), the silicon everything else.
    pub(crate) const ASSIST: u8 = 2;
}
/// The model: its number in `Model::ALL`.
static MODEL: AtomicU8 = AtomicU8::new(0);

/// Whether the engine is installed in this process (inherited by `fork`, cleared by `exec`).
#[inline]
pub fn is_active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// Whether the engine executes every AMX instruction and holds the tile state (false where
/// the CPU has AMX: the engine was forced there, or assists it).
pub(crate) fn emulating() -> bool {
    MODE.load(Ordering::Relaxed) == mode::EMULATE
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
/// Whether the engine executes, on a CPU with AMX, the instructions of the extensions the
/// modelled CPU has and the silicon lacks.
pub(crate) fn assisting() -> bool {
    MODE.load(Ordering::Relaxed) == mode::ASSIST
}

/// Whether the engine executes AMX instructions in this process (all of them, or those the
/// silicon lacks).
pub fn executes_amx() -> bool {
    is_active() && MODE.load(Ordering::Relaxed) != mode::SIGNALS
}

/// For the engine's own tests: while `on`, assisting the silicon meets Linux's refusal to
/// allocate a thread's tile state (out of memory), as if the kernel had raised it, where the
/// engine would otherwise ask for the state of a thread that has not used tile data yet. The
/// program then gets the SIGSEGV (`SI_KERNEL`) the silicon's first use would get.
/// `AMX_TRAP_TEST_REFUSE_TILE_STATE=1` when the engine installs does the same (for programs
/// under the preload).
#[doc(hidden)]
pub fn simulate_tile_state_refusal(on: bool) {
    assist::simulate_refusal(on);
}

/// Whether the engine assists AMX silicon in this process: the CPU executes AMX itself, and the
/// engine executes the instructions of the extensions the modelled CPU has and the silicon lacks
/// (see [`install`]).
pub fn assists_silicon() -> bool {
    is_active() && MODE.load(Ordering::Relaxed) == mode::ASSIST
}

/// Whether [`install`], with `AMX_TRAP_CPU` naming `model`, runs the engine on this machine (in
/// a new process, say): on x86-64 Linux without usable AMX (the engine executes every AMX
/// instruction), and on AMX silicon that lacks one of `model`'s extensions (the engine executes
/// those). The answer does not depend on the engine this process installed, if any.
pub fn runs_here(model: Model) -> bool {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        if is_active() {
            // Installed: the runtime's detection now reports the model, so the host's answer
            // is the one read at installation.
            return emulating() || assist::needed(model, crate::zmm::available());
        }
        !linux::native_amx() || assist::needed_now(model)
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        let _ = model;
        false
    }
}

/// The CPU the engine models (chosen by `AMX_TRAP_CPU` when it was installed).
pub fn model() -> Model {
    let i = usize::from(MODEL.load(Ordering::Relaxed));
    Model::ALL.get(i).copied().unwrap_or(Model::SapphireRapids)
}

/// Whether the process holds the XTILEDATA permission: the emulated one, or where the engine
/// assists the silicon, the kernel's.
pub(crate) fn permission_granted() -> bool {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    if assisting() {
        return assist::permitted();
    }
    if PERMITTED.load(Ordering::Acquire) {
        return true;
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    if let Some(slot) = slot::current() {
        return slot.own_permission.load(Ordering::Acquire);
    }
    false
}

/// `arch_prctl(ARCH_REQ_XCOMP_PERM, feature)` as Linux on the modelled CPU answers it, or
/// `None` when the engine is inactive or the feature is not a tile one (the kernel's to answer).
#[doc(hidden)]
pub fn request_xcomp_perm(feature: u64) -> Option<Result<(), i32>> {
    if !is_active() || !emulating() {
        return None;
    }
    match feature {
        // Only tile data asks for a permission; XTILECFG is among the default features, which
        // Linux does not take requests for.
        17 => Some(Err(libc::EOPNOTSUPP)),
        18 => {
            if permission_granted() {
                return Some(Ok(()));
            }
            // A `vfork` child is a process of its own on the silicon: its permission is not
            // its parent's, though it runs in its parent's memory until `exec` or `_exit`.
            #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
            if sys::getpid() != PROCESS.load(Ordering::Acquire) {
                return Some(match slot::get() {
                    Ok(slot) => {
                        slot.own_permission.store(true, Ordering::Release);
                        Ok(())
                    }
                    Err(e) => Err(e),
                });
            }
            // Linux refuses while a thread's alternate stack is too small for the frame with
            // tile state (under the preload, which sees every thread's stack).
            #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
            if let Err(e) = sigstack::claim() {
                return Some(Err(e));
            }
            PERMITTED.store(true, Ordering::Release);
            #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
            sigstack::release();
            Some(Ok(()))
        }
        _ => None,
    }
}

/// `arch_prctl(ARCH_GET_XCOMP_SUPP)` as Linux on the modelled CPU answers it, given the
/// kernel's answer: the tile components 17 and 18 always (the kernel supports them whether
/// or not the process asked for them).
#[doc(hidden)]
pub fn xcomp_supp(kernel: u64) -> u64 {
    if !emulating() {
        return kernel;
    }
    kernel | 3 << 17
}

/// `arch_prctl(ARCH_GET_XCOMP_PERM)` as Linux on the modelled CPU answers it, given the
/// kernel's answer: bit 17 always, bit 18 once granted.
#[doc(hidden)]
pub fn xcomp_perm(kernel: u64) -> u64 {
    if !emulating() {
        return kernel;
    }
    let granted = if permission_granted() { 1 << 18 } else { 0 };
    kernel | 1 << 17 | granted
}

/// The tile registers the engine holds for this thread (`None` when inactive, or no such
/// tile). A thread that has run no AMX instruction yet has no engine state: its tiles are the
/// INIT state's zeros, as XSAVE reads them on the silicon.
fn tile_data(t: u8) -> Option<[u8; 1024]> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        if is_active() && emulating() {
            let Some(slot) = slot::current() else {
                return (usize::from(t) < amx_runtime::TILES).then_some([0; 1024]);
            };
            slot.prepare_unit();
            return slot.unit().tile_bytes(t).copied();
        }
    }
    let _ = t;
    None
}

/// The engine's answers to the runtime (see `amx_runtime::engine`).
pub const HOOK: amx_runtime::engine::Hook = amx_runtime::engine::Hook {
    size: std::mem::size_of::<amx_runtime::engine::Hook>(),
    active: hook::active,
    install: hook::install,
    cpuid: hook::cpuid,
    xcr0: hook::xcr0,
    request_permission: hook::request_permission,
    permission: hook::permission,
    tile_data: hook::tile_data,
};

/// Registers the engine with `amx-runtime` without installing it: `AMX_BACKEND=trapped` then
/// installs it on first use where the CPU lacks AMX. ([`install`] registers it too.)
pub fn register() {
    amx_runtime::engine::register(&HOOK);
}

mod hook {
    use amx_runtime::engine::{status, Cpuid};

    pub(super) extern "C" fn active() -> bool {
        super::executes_amx()
    }

    pub(super) extern "C" fn install() -> u32 {
        match super::install() {
            Ok(()) => status::ACTIVE,
            Err(super::InstallError::NativeAmx) => status::NATIVE_AMX,
            Err(super::InstallError::Unsupported) => status::UNSUPPORTED,
            Err(_) => status::FAILED,
        }
    }

    pub(super) extern "C" fn cpuid(leaf: u32, subleaf: u32) -> Cpuid {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        let [eax, ebx, ecx, edx] = super::cpuid::answer(leaf, subleaf);
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        let [eax, ebx, ecx, edx] = {
            let _ = (leaf, subleaf);
            [0; 4]
        };
        Cpuid { eax, ebx, ecx, edx }
    }

    pub(super) extern "C" fn xcr0(real: u64) -> u64 {
        super::model().xcr0(real)
    }

    pub(super) extern "C" fn request_permission(feature: u64) -> i64 {
        match super::request_xcomp_perm(feature) {
            Some(Ok(())) => 0,
            Some(Err(e)) => i64::from(e),
            None => -1,
        }
    }

    pub(super) extern "C" fn permission(kernel: u64) -> u64 {
        super::xcomp_perm(kernel)
    }

    pub(super) extern "C" fn tile_data(t: u8, out: &mut [u8; 1024]) -> bool {
        match super::tile_data(t) {
            Some(tile) => {
                *out = tile;
                true
            }
            None => false,
        }
    }
}

/// Installs the engine in this process: idempotent and thread-safe. From then on every AMX
/// instruction on any thread executes on that thread's emulated state.
///
/// Fails with [`InstallError::Unsupported`] off x86-64 Linux and with
/// [`InstallError::NativeAmx`] where the CPU and OS already offer AMX (the silicon is then the
/// backend), unless the modelled CPU (`AMX_TRAP_CPU`, [`Model`]) has extensions this silicon
/// lacks: the engine then *assists* the silicon ([`assists_silicon`]). The silicon executes
/// every instruction it has, and the engine, on the #UD of each other one, executes it against
/// the thread's own tile registers as the kernel saved them in the signal frame (so code
/// written for Diamond Rapids runs on a Sapphire Rapids, its FP8 products and row moves one
/// signal each). There, install it before the process's first `Hardware` handle: the runtime
/// reads the capabilities once, at that handle, and after a first handle made without the
/// engine every handle refuses the new instructions (`UdReason::MissingFeature`). Where the preload library runs the process's engine already, that engine is the
/// one the runtime uses, and this installs nothing. Install it after the program's own
/// handlers of SIGILL, SIGSEGV, SIGBUS, SIGTRAP and SIGSYS: the engine passes every one of
/// those signals that is not its own to the action it replaced.
pub fn install() -> Result<(), InstallError> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        if preloaded_engine_active() {
            return Ok(());
        }
        register();
        linux::install(false)
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        Err(InstallError::Unsupported)
    }
}

/// Whether a preloaded library runs this process's engine (its hook is found and active).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn preloaded_engine_active() -> bool {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads the loader's tables.
    let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, amx_runtime::engine::SYMBOL.as_ptr()) };
    if symbol.is_null()
        || std::ptr::eq(
            symbol.cast_const(),
            (&HOOK as *const amx_runtime::engine::Hook).cast(),
        )
    {
        return false;
    }
    // SAFETY: a library exports the symbol only as a Hook (see amx_runtime::engine).
    let hook = unsafe { &*symbol.cast::<amx_runtime::engine::Hook>() };
    if (hook.active)() {
        amx_runtime::engine::register(hook);
        return true;
    }
    false
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
/// program that installed the engine itself (the kernel calls such a handler directly; the
/// preload, and the engine's own deliveries, give every handler this already), and let it
/// drop last, as the handler returns. A handler left by `siglongjmp` keeps the state it left,
/// as on the silicon.
///
/// The scope gives the handler an emulated unit of its own, and the interrupted code's unit
/// is not touched: the kernel may call the handler while a patched site is in the middle of
/// an instruction on that unit, and the instruction then finishes on what it started with.
/// It also holds an [`amx_runtime::SignalScope`], which keeps `amx-runtime`'s tracked
/// configuration in step with the unit (the scope's INIT state, then the one before). Where the
/// engine does not emulate (the silicon runs the program) it does nothing: there, Linux swaps
/// the tile state at a handler's entry and return, and a handler that uses `amx-runtime`'s safe
/// API opens an `amx_runtime::signal_scope()` itself (its safety contract is that swap).
/// Scopes nest and drop in the reverse order of their opening; one dropped out of order ends
/// the process.
#[derive(Debug)]
#[must_use = "the interrupted state comes back when the scope drops"]
pub struct HandlerScope {
    /// The handler's unit (an anonymous mapping, see `save_scope`), 0 when none was made.
    saved: usize,
    /// While the engine emulates: the runtime's tracked state, given back after the engine's
    /// unit (field order: it drops after `Drop::drop` ran).
    runtime: Option<amx_runtime::SignalScope>,
}

/// Opens a [`HandlerScope`].
pub fn handler_scope() -> HandlerScope {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    if is_active() && emulating() {
        let saved = linux::save_scope();
        if saved != 0 {
            // SAFETY: the engine's unit for this thread was just swapped with the scope's,
            // and is swapped back when the scope drops, before the runtime's scope drops: the
            // unit then holds the state it held when the runtime's scope opened, wherever the
            // scope lives. (Where no unit could be mapped, neither scope is opened.)
            let runtime = unsafe { amx_runtime::signal_scope() };
            return HandlerScope {
                saved,
                runtime: Some(runtime),
            };
        }
    }
    HandlerScope {
        saved: 0,
        runtime: None,
    }
}

impl Drop for HandlerScope {
    fn drop(&mut self) {
        // Out of order, the engine's units would be unlinked wrongly (the one this scope
        // replaced may be gone): the runtime's check ends the process before anything moves.
        if let Some(runtime) = &self.runtime {
            runtime.check_order();
        }
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        if self.saved != 0 {
            linux::restore_scope(self.saved);
        }
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        let _ = self.saved;
    }
}

/// The pieces the preload library builds on. Not a stable API.
#[doc(hidden)]
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod preload {
    pub use crate::patch::unpatch_range;
    pub use crate::signals::{
        owned, pending, program_action, program_mask, release_pending, set_program_action,
        set_program_view, virtualized, waiting, Action, ENGINE,
    };
    pub use crate::sigstack::{
        change as change_signal_stack, forget_thread as forget_signal_stack,
        minimum as signal_stack_minimum, model as model_signal_stacks,
    };

    /// Installs the engine for a preloaded library: the signals it takes, the program's masks
    /// virtualized for them, and CPUID faulting where asked for (`AMX_TRAP_CPUID=1`) and
    /// offered. `Ok(true)` when `cpuid` faults.
    pub fn install() -> Result<bool, super::InstallError> {
        super::linux::install(true)?;
        Ok(super::cpuid::faulting())
    }

    /// Gives this thread's engine state back (the thread is about to end).
    pub fn thread_exit() {
        crate::sigstack::forget_thread();
        if let Some(slot) = crate::slot::current() {
            crate::tls::thread().store(std::ptr::null_mut(), std::sync::atomic::Ordering::Release);
            slot.release();
        }
    }

    /// This thread's tile configuration, for a thread it creates to start with (`None`: the
    /// INIT state, or tiles the silicon holds).
    pub fn tile_config() -> Option<[u8; 64]> {
        use amx_runtime::TileUnit;
        if !crate::emulating() {
            return None;
        }
        let slot = crate::slot::current()?;
        if !slot.has_unit() {
            return None;
        }
        let unit = slot.unit();
        unit.is_configured().then(|| unit.sttilecfg())
    }

    /// Starts this new thread with its creator's tile configuration and zeroed tile data, as
    /// Linux starts a thread on the silicon: a clone gets its creator's default XSAVE
    /// features, the tile configuration among them, and not the tile data (`fpu_clone`).
    pub fn inherit_tile_config(config: &[u8; 64]) {
        use amx_runtime::TileUnit;
        if let Ok(slot) = crate::slot::get() {
            // The creator's unit took this image, so this one does.
            let _ = slot.unit().ldtilecfg(config);
        }
    }

    /// The program's `N` words at `at`, read as the kernel's `copy_from_user` reads them:
    /// `None` where they cannot be read (the system call's `EFAULT`; the engine takes the
    /// fault, the program never sees it). Only while the engine is installed, whose entry
    /// recovers the fault; `None` otherwise, without reading.
    pub fn read_user<const N: usize>(at: usize) -> Option<[u64; N]> {
        if !super::is_active() {
            return None;
        }
        let mut words = [0u64; N];
        // SAFETY: `words` is ours, 8 * N bytes; the program's side is any address (a fault is
        // recovered).
        unsafe { crate::access::copy(words.as_mut_ptr().cast(), at as *const u8, 8 * N) }
            .ok()
            .map(|()| words)
    }

    /// Writes `words` to the program's memory at `at`, as `copy_to_user`: `false` where it
    /// cannot be written (`EFAULT`). Only while the engine is installed (as [`read_user`]);
    /// `false` otherwise, without writing.
    pub fn write_user<const N: usize>(at: usize, words: &[u64; N]) -> bool {
        if !super::is_active() {
            return false;
        }
        // SAFETY: `words` is ours, 8 * N bytes; the program's side is any address (a fault is
        // recovered).
        unsafe { crate::access::copy(at as *mut u8, words.as_ptr().cast(), 8 * N) }.is_ok()
    }

    /// This thread's view of the engine's signals (for a thread it starts).
    pub fn view() -> u64 {
        crate::tls::view().load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod linux {
    use std::sync::atomic::Ordering;
    use std::sync::Mutex;

    use amx_runtime::Emulator;

    use super::{assist, cpuid, mode, signals, InstallError, Model, ACTIVE, MODE, MODEL};

    static INSTALLING: Mutex<()> = Mutex::new(());

    /// Whether the host itself offers AMX (CPUID and XCR0).
    pub(super) fn native_amx() -> bool {
        let caps = amx_runtime::detect();
        caps.amx_tile && caps.xtilecfg_enabled() && caps.xtiledata_enabled()
    }

    /// Whether the program runs under valgrind: its `RUNNING_ON_VALGRIND` client request, a
    /// sequence that changes nothing on a CPU (RDI rotated by 128 bits, `xchg rbx, rbx`) and
    /// that valgrind's CPU answers in RDX.
    fn under_valgrind() -> bool {
        // VG_USERREQ__RUNNING_ON_VALGRIND and its five unused arguments.
        let request: [u64; 6] = [0x1001, 0, 0, 0, 0, 0];
        let answer: u64;
        // SAFETY: rotations of RDI that add up to 128 bits and an exchange of RBX with itself
        // change no register on a CPU; valgrind reads the request at RAX and writes RDX.
        unsafe {
            core::arch::asm!(
                "rol rdi, 3",
                "rol rdi, 13",
                "rol rdi, 61",
                "rol rdi, 51",
                "xchg rbx, rbx",
                inout("rdx") 0u64 => answer,
                in("rax") request.as_ptr(),
                inout("rdi") 0u64 => _,
                options(nostack, readonly),
            );
        }
        answer != 0
    }

    fn env_is(name: &str, value: &str) -> bool {
        std::env::var_os(name).is_some_and(|v| v == value)
    }

    pub(super) fn install(preload: bool) -> Result<(), InstallError> {
        let installed = install_locked(preload);
        // Outside the lock: `pin` takes the dynamic loader's lock, which a library's
        // constructor calling `install` holds while it waits for this one. Before `install`
        // returns, so before the program could close the library (a `dlclose` during the call
        // would unmap the code running it, the program's own error).
        if ACTIVE.load(Ordering::Acquire) {
            crate::resident::pin();
        }
        installed
    }

    fn install_locked(preload: bool) -> Result<(), InstallError> {
        let _guard = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
        // The emulator's kernels are chosen by CPU detection, which runs `cpuid`: done here,
        // before CPUID faulting can be on.
        amx_runtime::engine::decide_paths();
        crate::access::prepare();
        crate::slot::prepare();
        crate::zmm::prepare();
        assist::prepare();
        cpuid::prepare();
        if !ACTIVE.load(Ordering::Acquire) {
            if under_valgrind() {
                return Err(InstallError::Valgrind);
            }
            let native = native_amx();
            let model = Model::from_env();
            let engine_mode = if !native {
                mode::EMULATE
            } else if env_is("AMX_TRAP_FORCE", "1") {
                // Forced onto a CPU with AMX, the engine handles signals but leaves the
                // instructions to the silicon: its signal handling can be tested there.
                mode::SIGNALS
            } else if assist::needed(model, crate::zmm::available()) {
                // The modelled CPU (AMX_TRAP_CPU) has extensions this tile unit lacks.
                mode::ASSIST
            } else {
                return Err(InstallError::NativeAmx);
            };
            MODE.store(engine_mode, Ordering::Relaxed);
            MODEL.store(model.index(), Ordering::Relaxed);
            // The copy routine's faults first: the others' handling copies memory.
            // SIGSYS next: the engine's own system calls may be trapped from here on.
            for sig in [
                libc::SIGSEGV,
                libc::SIGBUS,
                libc::SIGSYS,
                libc::SIGILL,
                libc::SIGTRAP,
            ] {
                signals::take(sig).map_err(|errno| InstallError::Sigaction { errno })?;
            }
            super::PROCESS.store(crate::sys::getpid(), Ordering::Release);
            ACTIVE.store(true, Ordering::Release);
            if !native {
                crate::patch::prepare(preload);
            }
            // SAFETY: registers a handler the C library calls in a fork's child, in ordinary
            // context; it only records the thread's slot as the child's.
            unsafe { libc::pthread_atfork(None, None, Some(forked)) };
        }
        if preload && !signals::virtualized() {
            signals::virtualize();
            // The mask this thread inherited (through exec) is the program's: its view, with
            // the engine's signals unblocked in the kernel.
            let real = signals::current_mask();
            signals::set_mask(signals::set_program_view(real));
            if env_is("AMX_TRAP_CPUID", "1") && cpuid::set_cpuid_enabled(false).is_ok() {
                cpuid::FAULTING.store(true, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// In a fork's child: the forking thread's slot is the child's, and its tile data is
    /// zeros. Linux copies a child's default XSAVE features, the tile configuration among them,
    /// but not the tile data, a dynamic feature (`fpu_clone`).
    extern "C" fn forked() {
        super::PROCESS.store(crate::sys::getpid(), Ordering::Release);
        crate::patch::forked();
        if let Some(slot) = crate::slot::current() {
            slot.adopt();
            if super::emulating() && slot.has_unit() {
                let unit = slot.unit();
                for t in 0..8 {
                    unit.set_tile_bytes(t, &[0; amx_runtime::TILE_BYTES]);
                }
            }
        }
    }

    /// A handler scope's unit, and the one it stands in for (null: the slot's own).
    #[repr(C)]
    struct Scoped {
        unit: Emulator,
        replaced: *mut Emulator,
    }

    const SCOPED: usize = std::mem::size_of::<Scoped>();

    /// Gives this thread a fresh unit in the INIT state, in a fresh mapping, for a signal
    /// handler; the mapping's address (0: none, the handler shares the interrupted unit).
    ///
    /// The interrupted code's unit is left as it is: the kernel calls the handler wherever the
    /// thread was, possibly inside the engine's emulation of an instruction on that unit (a
    /// patched site runs it in the program's own context), whose operands the unit holds in
    /// forms derived from its tiles. A handler that ran on the same unit and then put its
    /// tiles back would leave those forms changed under the instruction.
    pub(super) fn save_scope() -> usize {
        let Ok(slot) = crate::slot::get() else {
            return 0;
        };
        // A signal arriving meanwhile may itself run AMX on this thread's state.
        let mask = signals::set_mask(!0);
        let mut saved = 0;
        if let Ok(map) = crate::sys::mmap_anon(0, SCOPED, libc::PROT_READ | libc::PROT_WRITE, 0) {
            let scoped = map as usize as *mut Scoped;
            // SAFETY: the mapping is SCOPED bytes, page-aligned (so aligned for `Scoped`),
            // ours alone; both fields are written in place before the unit is published.
            unsafe {
                amx_runtime::engine::init_emulator(std::ptr::addr_of_mut!((*scoped).unit));
                std::ptr::addr_of_mut!((*scoped).replaced)
                    .write(slot.scoped.load(Ordering::Acquire));
                slot.scoped
                    .store(std::ptr::addr_of_mut!((*scoped).unit), Ordering::Release);
            }
            saved = map as usize;
        }
        signals::set_mask(mask);
        saved
    }

    /// Closes a scope [`save_scope`] opened: the unit it stood in for serves again, and its
    /// mapping is unmapped.
    pub(super) fn restore_scope(saved: usize) {
        let Some(slot) = crate::slot::current() else {
            return;
        };
        let mask = signals::set_mask(!0);
        let scoped = saved as *mut Scoped;
        // SAFETY: `saved` is the `Scoped` mapping `save_scope` made on this thread, which
        // nobody else uses; the unit it replaced is published again before the unmap.
        unsafe {
            slot.scoped.store((*scoped).replaced, Ordering::Release);
            let _ = crate::sys::munmap(saved as u64, SCOPED);
        }
        signals::set_mask(mask);
    }
}
