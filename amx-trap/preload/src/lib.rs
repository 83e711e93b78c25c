//! `libamx_trap.so`: Intel AMX programs on x86-64 Linux CPUs without AMX, unmodified.
//!
//! ```sh
//! cargo build --release -p amx-trap
//! LD_PRELOAD=target/release/libamx_trap.so ./my-amx-program
//! ```
//!
//! Loaded before the program, the library installs the `amx-trap` engine from an ELF
//! constructor: every AMX instruction then traps (SIGILL) and executes on the calling thread's
//! bit-exact emulated tile unit. The library also makes the operating-system interface look
//! like Linux on an AMX CPU:
//!
//! - **CPUID** through CPUID faulting (`arch_prctl(ARCH_SET_CPUID, 0)`): every `cpuid` traps
//!   (SIGSEGV) and is answered from the modelled CPU, a Sapphire Rapids (`AMX_TRAP_CPU=spr`,
//!   the default: AMX-TILE, AMX-INT8, AMX-BF16) or a Granite Rapids (`AMX_TRAP_CPU=gnr`: also
//!   AMX-FP16), with leaf 0xD subleaves 17 and 18, the palette table of leaf 0x1D and the TMUL
//!   limits of leaf 0x1E; every other leaf is the host's. Where the kernel does not offer CPUID
//!   faulting, `cpuid` reports the host.
//! - **Permission** through the interposed `syscall` and `arch_prctl`:
//!   `ARCH_REQ_XCOMP_PERM` for XTILEDATA (18) is granted and `ARCH_GET_XCOMP_PERM` reports bits
//!   17 and 18 as Linux on AMX does; before the request the first tile-data instruction raises
//!   SIGILL (`ILL_ILLOPC`), as XFD does.
//! - **Signals** through the interposed `sigaction`, `signal`, `bsd_signal` and `sigset`: the
//!   engine stays first in line for SIGILL and SIGSEGV while the program's handlers for them are
//!   recorded and receive exactly what the kernel would send on the silicon (a #GP as SIGSEGV
//!   with `SI_KERNEL` and REG_TRAPNO 13, a #UD as SIGILL with REG_TRAPNO 6, an inaccessible
//!   operand as the page fault's SIGSEGV), so they may `siglongjmp` out; without handlers the
//!   process dies of the same signal with the same status. Every other handler is wrapped so
//!   that it runs with the INIT tile state and the interrupted state comes back on return.
//!
//! Not covered: XGETBV (it cannot be trapped: code reading XCR0 sees the host's, without bits
//! 17 and 18), a raw `syscall` instruction that bypasses the C library (no seccomp filter is
//! installed: a filter would outlive `exec` and kill children that run without the library),
//! and timing (each instruction costs a signal round trip).
//!
//! Where the CPU has AMX itself, the library installs nothing and every interposed function
//! forwards to the C library.

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod prctl;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod real;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod signals;

/// Runs when the library is loaded (an ELF constructor in `.init_array`).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
extern "C" fn constructor() {
    let _ = install();
}

/// The engine's hook, for the `amx-runtime` of the program this library is preloaded into.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static amx_trap_hook_v1: amx_runtime::engine::Hook = engine::HOOK;

/// Installs the engine as the preload does (idempotent). `Ok(true)` when CPUID faulting is on
/// too; an error when the engine cannot run here (AMX present, or not x86-64 Linux).
fn install() -> Result<bool, engine::InstallError> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        real::resolve();
        engine::preload::install()
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        Err(engine::InstallError::Unsupported)
    }
}
