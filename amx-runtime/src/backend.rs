//! Backend choice: the silicon when it is usable, the emulator otherwise, overridable with the
//! `AMX_BACKEND` environment variable (`hardware`, `emulated`, `trapped` or `auto`).
//!
//! `trapped` is not a third backend: it installs the trap engine of the `amx-trap` crate where
//! the CPU lacks AMX and resolves to [`Backend::Hardware`], so the silicon code path (inline
//! asm, every instruction trapping to the engine's emulator) runs everywhere; where the CPU has
//! AMX it is the silicon itself. The engine must be in the process: registered
//! (`amx_trap::register()`), or preloaded (`libamx_trap_preload.so`).

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::detect::Unavailable;
use crate::unit::Hardware;

/// Which tile unit executes the instructions.
///
/// Non-exhaustive: another unit (a remote or a faster software one) is a minor release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Backend {
    /// The CPU's own AMX unit.
    Hardware,
    /// The bit-exact software emulator.
    Emulated,
}

/// `hardware` or `emulated`; `trapped` for the hardware backend while the trap engine (the
/// `amx-trap` crate) is active in the process (the CPU lacks AMX, and every instruction of the silicon's
/// code path runs on the engine's emulator), so a report never calls a trapped run a hardware
/// one.
impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Hardware if crate::engine::active() => "trapped",
            Backend::Hardware => "hardware",
            Backend::Emulated => "emulated",
        })
    }
}

/// What the user asked for: a backend, or `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum BackendChoice {
    /// The hardware when it is usable, else the emulator.
    Auto,
    /// The hardware, or an error naming why it is unusable.
    Hardware,
    /// The emulator, even where the hardware is usable.
    Emulated,
    /// The hardware code path: the silicon where it is usable, else the trap engine of the
    /// `amx-trap` crate executing the silicon's instructions one trap at a time.
    Trapped,
}

impl BackendChoice {
    /// Parses `hardware`, `emulated`, `trapped` or `auto` (any case; surrounding blanks
    /// ignored; empty is `auto`).
    pub fn parse(text: &str) -> Result<BackendChoice, BackendError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(BackendChoice::Auto),
            "hardware" | "hw" => Ok(BackendChoice::Hardware),
            "emulated" | "emulator" | "emu" => Ok(BackendChoice::Emulated),
            "trapped" | "trap" => Ok(BackendChoice::Trapped),
            _ => Err(BackendError::InvalidChoice(text.to_owned())),
        }
    }

    /// The choice `AMX_BACKEND` names (`auto` when unset).
    pub fn from_env() -> Result<BackendChoice, BackendError> {
        match std::env::var("AMX_BACKEND") {
            Ok(text) => BackendChoice::parse(&text),
            Err(std::env::VarError::NotPresent) => Ok(BackendChoice::Auto),
            Err(std::env::VarError::NotUnicode(raw)) => Err(BackendError::InvalidChoice(
                raw.to_string_lossy().into_owned(),
            )),
        }
    }

    /// Resolves the choice on the CPU and OS the process runs on.
    pub fn resolve(self) -> Result<Backend, BackendError> {
        match self {
            BackendChoice::Emulated => Ok(Backend::Emulated),
            BackendChoice::Hardware => Hardware::new()
                .map(|_| Backend::Hardware)
                .map_err(BackendError::HardwareUnavailable),
            BackendChoice::Trapped => trapped().map(|_| Backend::Hardware),
            BackendChoice::Auto => Ok(match Hardware::new() {
                Ok(_) => Backend::Hardware,
                Err(_) => Backend::Emulated,
            }),
        }
    }
}

/// The trap engine installed through its hook where it runs here, else the silicon alone. The
/// engine is asked first, once per process: on silicon that lacks extensions of the CPU it
/// models it assists the silicon (and the capabilities are then the model's), elsewhere with
/// AMX it declines.
fn trapped() -> Result<Hardware, BackendError> {
    static INSTALLED: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let Some(engine) = crate::engine::hook() else {
        return Hardware::new().map_err(|why| {
            if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
                BackendError::NoTrapEngine
            } else {
                BackendError::HardwareUnavailable(why)
            }
        });
    };
    INSTALLED.get_or_init(|| (engine.install)());
    Hardware::new().map_err(BackendError::HardwareUnavailable)
}

impl std::str::FromStr for BackendChoice {
    type Err = BackendError;

    /// As [`BackendChoice::parse`]: `"emulated".parse::<BackendChoice>()`.
    fn from_str(text: &str) -> Result<BackendChoice, BackendError> {
        BackendChoice::parse(text)
    }
}

impl std::str::FromStr for Backend {
    type Err = BackendError;

    /// `hardware` (or `trapped`, the hardware backend on the trap engine) or `emulated` (any
    /// case, blanks around ignored), as [`Backend`] prints.
    ///
    /// ```
    /// use amx_runtime::Backend;
    ///
    /// assert_eq!("Emulated".parse::<Backend>().unwrap(), Backend::Emulated);
    /// assert_eq!(Backend::Hardware.to_string().parse::<Backend>().unwrap(), Backend::Hardware);
    /// assert!("auto".parse::<Backend>().is_err());
    /// ```
    fn from_str(text: &str) -> Result<Backend, BackendError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "hardware" | "trapped" => Ok(Backend::Hardware),
            "emulated" => Ok(Backend::Emulated),
            _ => Err(BackendError::InvalidChoice(text.to_owned())),
        }
    }
}

/// Why no backend could be chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendError {
    /// `AMX_BACKEND` holds something other than `hardware`, `emulated`, `trapped` or `auto`.
    InvalidChoice(String),
    /// The hardware was asked for but cannot be used here.
    HardwareUnavailable(Unavailable),
    /// `trapped` was asked for where the CPU lacks AMX, and no trap engine is in the process.
    NoTrapEngine,
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::InvalidChoice(text) => write!(
                f,
                "AMX_BACKEND is {text:?}; it must be `hardware`, `emulated`, `trapped` or `auto`"
            ),
            BackendError::HardwareUnavailable(why) => {
                write!(f, "the hardware backend was asked for, but {why}")
            }
            BackendError::NoTrapEngine => f.write_str(
                "AMX_BACKEND=trapped needs the trap engine where the CPU lacks AMX: call \
                 amx_trap::register() (crate amx-trap) at start, or run the program with \
                 LD_PRELOAD=libamx_trap_preload.so",
            ),
        }
    }
}

// Display prints the wrapped reason's message, so `source` continues the chain below it: a
// reporter that prints every level prints each message once.
impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BackendError::HardwareUnavailable(why) => why.source(),
            BackendError::InvalidChoice(_) | BackendError::NoTrapEngine => None,
        }
    }
}

/// The backend of this process: `AMX_BACKEND` resolved once, on first use, and kept, so every
/// thread of a process runs on the same unit.
#[inline]
pub fn backend() -> Result<Backend, BackendError> {
    // The answer is cached twice: in full (with the error, if any) and, for the hot path of
    // every `configure`, as one byte read without synchronisation cost.
    match FAST.load(Ordering::Relaxed) {
        HARDWARE => Ok(Backend::Hardware),
        EMULATED => Ok(Backend::Emulated),
        _ => choose(),
    }
}

static FAST: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The first call's choice (and every call's, when the choice is an error).
#[cold]
#[inline(never)]
fn choose() -> Result<Backend, BackendError> {
    static CHOSEN: OnceLock<Result<Backend, BackendError>> = OnceLock::new();
    let chosen = CHOSEN
        .get_or_init(|| BackendChoice::from_env()?.resolve())
        .clone();
    match chosen {
        Ok(Backend::Hardware) => FAST.store(HARDWARE, Ordering::Relaxed),
        Ok(Backend::Emulated) => FAST.store(EMULATED, Ordering::Relaxed),
        Err(_) => {}
    }
    chosen
}

const UNKNOWN: u8 = 0;
const HARDWARE: u8 = 1;
const EMULATED: u8 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trapped_hardware_backend_says_so() {
        let want = if crate::engine::active() {
            "trapped"
        } else {
            "hardware"
        };
        assert_eq!(Backend::Hardware.to_string(), want);
        assert_eq!(Backend::Emulated.to_string(), "emulated");
        for text in ["hardware", "trapped", "emulated"] {
            let backend: Backend = text.parse().unwrap();
            assert_eq!(backend.to_string().parse::<Backend>().unwrap(), backend);
        }
    }
}
