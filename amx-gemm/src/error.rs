//! [`GemmError`]: every way a GEMM call can refuse its input or fail, as values.

use std::fmt;

use amx_runtime::{ConfigError, ConfigureError, Fault};

/// Which operand an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// The left factor, M x K.
    A,
    /// The right factor, K x N (or the packed form of it).
    B,
    /// The result, M x N.
    C,
    /// The residual input of an [`Epilogue`](crate::Epilogue), M x N.
    Residual,
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operand::A => "A",
            Operand::B => "B",
            Operand::C => "C",
            Operand::Residual => "the residual",
        })
    }
}

/// Why a GEMM (or packing) call did not run. No input makes this crate panic: every check
/// returns one of these.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GemmError {
    /// Two dimensions that must agree do not, e.g. the `k` of a [`PackedB`](crate::PackedB)
    /// and the K the call passes for A.
    DimensionMismatch {
        /// What is being compared, e.g. `"K of A and of the packed B"`.
        what: &'static str,
        /// The value the first one gives.
        expected: usize,
        /// The value the second one gives.
        found: usize,
    },
    /// A leading dimension (row stride in elements) is smaller than the row it must hold.
    LeadingDimension {
        /// The matrix.
        operand: Operand,
        /// The leading dimension passed.
        ld: usize,
        /// The row length (columns) it must be at least.
        cols: usize,
    },
    /// A slice is too short for the rows, columns and leading dimension passed.
    SliceTooShort {
        /// The matrix.
        operand: Operand,
        /// Elements the shape needs: `(rows - 1) * ld + cols`.
        needed: usize,
        /// Elements the slice has.
        len: usize,
    },
    /// The shape's size in bytes does not fit the address space.
    TooLarge {
        /// The matrix.
        operand: Operand,
    },
    /// The runtime could not put a tile configuration in place: no backend, the hardware
    /// refused, or a tile guard is already alive on the calling thread.
    Configure(ConfigureError),
    /// A tile configuration of this crate's table was rejected (a bug in this crate).
    Config(ConfigError),
    /// A tile instruction faulted (on the emulator; the silicon path never executes an
    /// instruction that would). Means a bug in this crate, reported instead of a crash.
    Fault(Fault),
    /// One of this crate's own consistency checks failed (its configuration table against the
    /// micro-kernel, or the typed layout against the tiles the kernel names): a bug in this
    /// crate, described, reported instead of a crash.
    Internal(String),
    /// An [`Epilogue`](crate::Epilogue) that cannot apply to this call (what and why).
    InvalidEpilogue(String),
    /// The backend cannot run this precision, e.g. a CPU without AMX-BF16.
    Unsupported(String),
    /// The worker thread pool could not be created.
    ThreadPool(String),
    /// More worker threads were asked for (with [`Gemm::threads`](crate::Gemm::threads)) than
    /// [`Gemm::MAX_THREADS`](crate::Gemm::MAX_THREADS).
    TooManyThreads {
        /// The thread count asked for.
        requested: usize,
        /// The largest thread count allowed.
        max: usize,
    },
    /// A buffer of this many bytes could not be allocated (column sums, an epilogue's work
    /// buffers).
    OutOfMemory {
        /// The size asked for, in bytes (`usize::MAX` when the size itself overflowed).
        bytes: usize,
    },
}

impl fmt::Display for GemmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GemmError::DimensionMismatch {
                what,
                expected,
                found,
            } => write!(f, "dimension mismatch: {what}: {expected} vs {found}"),
            GemmError::LeadingDimension { operand, ld, cols } => write!(
                f,
                "leading dimension of {operand} is {ld}, smaller than its {cols} columns"
            ),
            GemmError::SliceTooShort {
                operand,
                needed,
                len,
            } => write!(
                f,
                "slice for {operand} has {len} elements; the shape needs {needed}"
            ),
            GemmError::TooLarge { operand } => {
                write!(f, "{operand} is too large to address")
            }
            GemmError::Configure(e) => write!(f, "tile configuration failed: {e}"),
            GemmError::Config(e) => write!(f, "invalid tile configuration (bug): {e}"),
            GemmError::Fault(e) => write!(f, "tile instruction faulted (bug): {e}"),
            GemmError::Internal(what) => write!(f, "internal inconsistency (bug): {what}"),
            GemmError::InvalidEpilogue(why) => write!(f, "invalid epilogue: {why}"),
            GemmError::Unsupported(why) => write!(f, "unsupported: {why}"),
            GemmError::ThreadPool(why) => write!(f, "cannot create the worker threads: {why}"),
            GemmError::TooManyThreads { requested, max } => write!(
                f,
                "{requested} worker threads requested; at most {max} are allowed"
            ),
            GemmError::OutOfMemory { bytes } => {
                write!(f, "cannot allocate a buffer of {bytes} bytes")
            }
        }
    }
}

// Display already prints the wrapped error's message, so `source` continues the chain below
// it: a reporter that prints every level (anyhow, eyre) prints each message once.
impl std::error::Error for GemmError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GemmError::Configure(e) => e.source(),
            GemmError::Config(e) => e.source(),
            GemmError::Fault(e) => e.source(),
            _ => None,
        }
    }
}

impl From<ConfigureError> for GemmError {
    fn from(e: ConfigureError) -> Self {
        GemmError::Configure(e)
    }
}

impl From<ConfigError> for GemmError {
    fn from(e: ConfigError) -> Self {
        GemmError::Config(e)
    }
}

impl From<Fault> for GemmError {
    fn from(e: Fault) -> Self {
        GemmError::Fault(e)
    }
}

/// Elements a row-major `rows x cols` matrix with leading dimension `ld` spans, after checking
/// `ld >= cols`; zero when it has no element.
pub(crate) fn extent(
    operand: Operand,
    rows: usize,
    cols: usize,
    ld: usize,
) -> Result<usize, GemmError> {
    if rows == 0 || cols == 0 {
        return Ok(0);
    }
    if ld < cols {
        return Err(GemmError::LeadingDimension { operand, ld, cols });
    }
    (rows - 1)
        .checked_mul(ld)
        .and_then(|x| x.checked_add(cols))
        .ok_or(GemmError::TooLarge { operand })
}

/// Checks that a slice of `len` elements holds a `rows x cols` matrix with leading dimension
/// `ld`.
pub(crate) fn check_slice(
    operand: Operand,
    rows: usize,
    cols: usize,
    ld: usize,
    len: usize,
) -> Result<(), GemmError> {
    let needed = extent(operand, rows, cols, ld)?;
    if needed > len {
        return Err(GemmError::SliceTooShort {
            operand,
            needed,
            len,
        });
    }
    Ok(())
}
