//! Permission: asking Linux for the right to use AMX tile data.
//!
//! Linux enables AMX tile state in XCR0 at boot, but it does not let a process touch tile data
//! until the process asks: it arms XFD (extended feature disable) for XTILEDATA (XSAVE feature
//! 18), so that tile data does not enlarge every thread's save area and every signal frame of
//! every program. A program that wants tile data calls
//! `arch_prctl(ARCH_REQ_XCOMP_PERM, 18)` once ([`request_permission`]); the kernel then lets its
//! threads use tile data and allocates each thread's larger save area on that thread's first
//! tile-data instruction. [`permission_state`] reads the current state with
//! `arch_prctl(ARCH_GET_XCOMP_PERM, &mut mask)` without changing it.
//!
//! What the kernel does (`arch/x86/kernel/fpu/xstate.c`, Linux 5.16 and later):
//!
//! - **The permission is per process**, not per thread: it is stored on the thread-group leader,
//!   and one successful request covers every thread, present and future.
//! - **`fork` inherits it**: the child starts with the parent's permission (and, in this crate,
//!   with the parent's copy of the "already granted" flag, which therefore stays truthful).
//! - **`exec` clears it**: the new program starts without the permission and must ask again.
//! - **A too-small alternate signal stack makes the request fail.** Granting the permission
//!   enlarges the signal frame by the 8 KiB of tile data: on the AMX machines of
//!   [semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md)
//!   section 0 the XSAVE area alone grows to 11008 bytes (tile data at offset 2816), so the
//!   frame is over 11 KiB. Before it says yes, the kernel checks the `sigaltstack` of *every*
//!   thread of the process (not only the calling one) and refuses with `ENOSPC` if any of them
//!   is smaller than the enlarged frame. `MINSIGSTKSZ` (2 KiB) and even the old `SIGSTKSZ`
//!   (8 KiB) are too small. Either request the permission before such stacks are installed, or
//!   size them from `getauxval(AT_MINSIGSTKSZ)` (the Rust standard library does that for the
//!   stacks it installs). Once the permission is granted, the kernel likewise refuses
//!   (`ENOMEM`) a new `sigaltstack` that is too small for the enlarged frame.
//! - **Without the permission, the first tile-data instruction raises SIGILL**: TILEZERO,
//!   TILELOADD, TILESTORED and the TDP* dot products raise the XFD #NM trap, which Linux turns
//!   into SIGILL with `si_code` `ILL_ILLOPC`
//!   ([semantics.md section 1](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#1-how-linux-reports-each-exception)).
//!   LDTILECFG, STTILECFG and
//!   TILERELEASE touch only the tile configuration, not tile data, and work without it
//!   ([semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md)
//!   L7, S4, R2). (When a #UD condition also holds, for example an unconfigured
//!   tile, the #UD wins: SIGILL with `ILL_ILLOPN`, section 12.)
//! - Other refusals: `EOPNOTSUPP` when the kernel does not offer XTILEDATA at all (a CPU without
//!   AMX, a hypervisor that hides its XSAVE components, a kernel booted without it); `EINVAL`
//!   from kernels older than 5.16, which do not know the request; `EPERM` or `ENOSYS` when a
//!   seccomp filter (some container runtimes) blocks `arch_prctl`.
//!
//! While the trap engine (the `amx-trap` crate) is active, both calls are answered by the engine as
//! Linux on an AMX CPU answers them (the request is granted).
//!
//! [`request_permission`] is thread-safe and idempotent: after the first success it is an atomic
//! load. A refusal is returned as a [`PermissionError`], never a panic, and is not remembered, so
//! a later call (for example after the small alternate stacks were removed) asks again.

use std::fmt;
use std::io;

/// XSAVE feature number of the tile configuration (XTILECFG, XCR0 bit 17).
pub const XFEATURE_XTILECFG: u32 = 17;

/// XSAVE feature number of the tile data (XTILEDATA, XCR0 bit 18): the number passed to
/// `ARCH_REQ_XCOMP_PERM`.
pub const XFEATURE_XTILEDATA: u32 = 18;

/// `arch_prctl` code that reads the process's permitted XSAVE features into a `u64`.
pub const ARCH_GET_XCOMP_PERM: i32 = 0x1022;

/// `arch_prctl` code that asks for permission to use one dynamically enabled XSAVE feature.
pub const ARCH_REQ_XCOMP_PERM: i32 = 0x1023;

/// The process's permission to use AMX tile data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum PermissionState {
    /// Not Linux or not x86-64: there is nothing to ask.
    NotApplicable,
    /// XTILEDATA (bit 18) is not in the mask `ARCH_GET_XCOMP_PERM` returns: the process has not
    /// asked yet, or the kernel cannot grant it (no AMX, or AMX not enabled).
    NotRequested,
    /// XTILEDATA is permitted: threads of this process may execute tile-data instructions.
    Granted,
    /// `ARCH_GET_XCOMP_PERM` itself failed with this errno (a kernel older than 5.16 answers
    /// `EINVAL`; a seccomp filter may answer `EPERM` or `ENOSYS`).
    Unknown {
        /// The errno of the failed `arch_prctl` call.
        errno: i32,
    },
}

impl fmt::Display for PermissionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PermissionState::NotApplicable => {
                f.write_str("not applicable (the OS permission exists only on Linux on x86-64)")
            }
            PermissionState::NotRequested => f.write_str(
                "not requested (XTILEDATA is not in the mask ARCH_GET_XCOMP_PERM returns)",
            ),
            PermissionState::Granted => f.write_str("granted"),
            PermissionState::Unknown { errno } => write!(
                f,
                "unknown (arch_prctl(ARCH_GET_XCOMP_PERM) failed with {})",
                ErrnoName(*errno)
            ),
        }
    }
}

/// Why Linux refused the permission to use tile data: the errno of
/// `arch_prctl(ARCH_REQ_XCOMP_PERM, 18)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PermissionError {
    /// The errno the kernel returned (`ENOSPC`, `EOPNOTSUPP`, `EINVAL`, `EPERM`...).
    pub errno: i32,
}

impl PermissionError {
    /// The symbolic name of [`errno`](Self::errno) (`"ENOSPC"`), when it is one this crate knows.
    pub fn errno_name(&self) -> Option<&'static str> {
        errno_name(self.errno)
    }

    /// The likely cause of the refusal and what to do about it, in the user's terms.
    pub fn cause(&self) -> &'static str {
        errno_cause(self.errno)
    }

    /// The errno, as [`std::io::Error::raw_os_error`] gives it: always `Some`, so code written
    /// against `io::Error` reads this error the same way.
    pub fn raw_os_error(&self) -> Option<i32> {
        Some(self.errno)
    }

    /// The [`io::ErrorKind`] of the errno (`ENOSPC` is `StorageFull`, `EPERM` is
    /// `PermissionDenied`, ...), as `io::Error::from_raw_os_error` classifies it.
    pub fn kind(&self) -> io::ErrorKind {
        io::Error::from_raw_os_error(self.errno).kind()
    }
}

/// An `io::Error` of the errno's [kind](PermissionError::kind) that keeps the message with its
/// cause, so `?` works in a function returning `io::Result`. The `PermissionError` stays
/// inside: `io_error.get_ref()` and `downcast_ref::<PermissionError>()` give it back, errno
/// included (`io_error.raw_os_error()` is `None`, as for every `io::Error` made with
/// `io::Error::new`).
///
/// ```
/// use amx_runtime::permit::PermissionError;
///
/// fn setup() -> std::io::Result<()> {
///     Err(PermissionError { errno: 28 })?; // ENOSPC on Linux
///     Ok(())
/// }
/// let err = setup().unwrap_err();
/// let inner = err.get_ref().and_then(|e| e.downcast_ref::<PermissionError>()).unwrap();
/// assert_eq!(inner.raw_os_error(), Some(28));
/// assert_eq!(err.kind(), inner.kind());
/// assert_eq!(err.to_string(), inner.to_string());
/// ```
impl From<PermissionError> for io::Error {
    fn from(e: PermissionError) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

impl fmt::Display for PermissionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) failed with {}: {}",
            ErrnoName(self.errno),
            self.cause()
        )
    }
}

impl std::error::Error for PermissionError {}

/// Formats an errno as `ENOSPC (errno 28)`, or `errno 28` when the name is unknown.
pub(crate) struct ErrnoName(pub(crate) i32);

impl fmt::Display for ErrnoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match errno_name(self.0) {
            Some(name) => write!(f, "{name} (errno {})", self.0),
            None => write!(f, "errno {}", self.0),
        }
    }
}

/// The symbolic name of the errno values `arch_prctl` can return.
#[cfg(target_os = "linux")]
fn errno_name(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::EPERM => "EPERM",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ENOMEM => "ENOMEM",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EACCES => "EACCES",
        _ => return None,
    })
}

/// Errno values are named only on Linux, the one OS this module talks to.
#[cfg(not(target_os = "linux"))]
fn errno_name(_errno: i32) -> Option<&'static str> {
    None
}

/// The known causes of each errno of `ARCH_REQ_XCOMP_PERM` (see the module docs).
#[cfg(target_os = "linux")]
fn errno_cause(errno: i32) -> &'static str {
    match errno {
        libc::ENOSPC => {
            "a thread of this process has an alternate signal stack (sigaltstack) smaller than \
             the signal frame with tile data (over 11 KiB; MINSIGSTKSZ and SIGSTKSZ are too \
             small): enlarge it to at least getauxval(AT_MINSIGSTKSZ), or request the \
             permission before installing it"
        }
        libc::EOPNOTSUPP => {
            "the kernel does not offer AMX tile data to programs: the CPU has no AMX, the \
             hypervisor hides its XSAVE state, or the kernel was built or booted without it"
        }
        libc::EINVAL => {
            "the kernel does not know the request: Linux 5.16 or newer is needed for AMX"
        }
        libc::EPERM | libc::ENOSYS | libc::EACCES => {
            "a seccomp filter (for example a container runtime's) blocks arch_prctl, or the \
             kernel is not 64-bit: allow arch_prctl(ARCH_REQ_XCOMP_PERM) in the filter"
        }
        _ => "an errno the Linux kernel is not known to return for this request",
    }
}

/// There are no errno causes to tell outside Linux.
#[cfg(not(target_os = "linux"))]
fn errno_cause(_errno: i32) -> &'static str {
    "the AMX permission exists only on Linux"
}

/// Reads the process's tile-data permission with `arch_prctl(ARCH_GET_XCOMP_PERM)`. Changes
/// nothing; only a system call, no allocation, so it may be called in a `fork` child.
pub fn permission_state() -> PermissionState {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        match linux::get_xcomp_perm() {
            Ok(mask) if mask & (1 << XFEATURE_XTILEDATA) != 0 => PermissionState::Granted,
            Ok(_) => PermissionState::NotRequested,
            Err(errno) => PermissionState::Unknown { errno },
        }
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        PermissionState::NotApplicable
    }
}

/// Asks Linux for permission to use AMX tile data: `arch_prctl(ARCH_REQ_XCOMP_PERM, 18)`.
///
/// Thread-safe and idempotent: the first success is remembered in an atomic flag, and later
/// calls return `Ok(())` without a system call. A refusal is returned, not remembered (see the
/// [module docs](self) for the causes, of which the too-small `sigaltstack` can be fixed and
/// retried). A `fork` child inherits both the permission and the flag; `exec` clears both.
///
/// Where there is no such permission (not Linux, or not x86-64) there is nothing to ask and this
/// returns `Ok(())`; whether AMX can be used there is [`detect`](crate::detect())'s question.
pub fn request_permission() -> Result<(), PermissionError> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        linux::request_once()
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        Ok(())
    }
}

/// The two `arch_prctl` calls, and the once-per-process bookkeeping of the request.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod linux {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    use super::{PermissionError, ARCH_GET_XCOMP_PERM, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA};

    /// Set after the kernel granted the permission to this process (or to a `fork` ancestor).
    static GRANTED: AtomicBool = AtomicBool::new(false);

    /// Serializes first requests, so a process issues one successful request.
    static REQUESTING: Mutex<()> = Mutex::new(());

    /// The errno of the last failed system call.
    fn last_errno() -> i32 {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    }

    /// `arch_prctl(ARCH_GET_XCOMP_PERM, &mut mask)`: the permitted XSAVE feature mask (the
    /// trap engine's answer while it is active).
    pub(super) fn get_xcomp_perm() -> Result<u64, i32> {
        let kernel = kernel_xcomp_perm();
        if let Some(engine) = crate::engine::active_hook() {
            // The engine models Linux on an AMX CPU, whatever this kernel says.
            return Ok((engine.permission)(kernel.unwrap_or(0)));
        }
        kernel
    }

    /// The kernel's own `ARCH_GET_XCOMP_PERM`.
    fn kernel_xcomp_perm() -> Result<u64, i32> {
        let mut mask: u64 = 0;
        // SAFETY: ARCH_GET_XCOMP_PERM writes one u64 to the address in the second argument;
        // `mask` is a live, aligned, writable u64 on this stack frame for the whole call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                libc::c_long::from(ARCH_GET_XCOMP_PERM),
                &mut mask as *mut u64,
            )
        };
        if rc == 0 {
            Ok(mask)
        } else {
            Err(last_errno())
        }
    }

    /// `arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)` (answered by the trap engine while it is
    /// active).
    fn req_xcomp_perm() -> Result<(), i32> {
        if let Some(answer) = crate::engine::request_permission(u64::from(XFEATURE_XTILEDATA)) {
            return answer;
        }
        // SAFETY: ARCH_REQ_XCOMP_PERM takes the feature number by value and touches no user
        // memory; on success it only changes the process's permitted XSAVE features.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                libc::c_long::from(ARCH_REQ_XCOMP_PERM),
                libc::c_long::from(XFEATURE_XTILEDATA),
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(last_errno())
        }
    }

    /// The request, issued at most once successfully per process.
    pub(super) fn request_once() -> Result<(), PermissionError> {
        if GRANTED.load(Ordering::Acquire) {
            return Ok(());
        }
        // Nothing inside panics, so poisoning cannot happen; accept a poisoned lock anyway.
        let _guard = REQUESTING
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if GRANTED.load(Ordering::Acquire) {
            return Ok(());
        }
        req_xcomp_perm().map_err(|errno| PermissionError { errno })?;
        GRANTED.store(true, Ordering::Release);
        Ok(())
    }
}
