//! [`GemmError`]: every way a GEMM call can refuse its input or fail, as values.

use std::fmt;
use std::sync::Arc;

use amx_runtime::rules::DotMismatch;
use amx_runtime::{ConfigError, ConfigureError, Fault, Feature, Palette, TmulLimits};

use crate::precision::PrecisionKind;

/// Which operand an error is about. Non-exhaustive: new epilogue inputs add operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operand {
    /// The left factor, M x K.
    A,
    /// The right factor, K x N (or the packed form of it).
    B,
    /// The result, M x N.
    C,
    /// The residual input of an [`Epilogue`](crate::Epilogue), M x N.
    Residual,
    /// The floating-point input of a quantization ([`quantize`](crate::quantize)).
    QuantizeInput,
    /// The integer output of a quantization ([`quantize`](crate::quantize)): the A of a
    /// later GEMM.
    QuantizeOutput,
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operand::A => "A",
            Operand::B => "B",
            Operand::C => "C",
            Operand::Residual => "the residual",
            Operand::QuantizeInput => "the quantization's input",
            Operand::QuantizeOutput => "the quantized output",
        })
    }
}

/// Why a GEMM (or packing) call did not run. No input makes this crate panic: every check
/// returns one of these.
#[derive(Clone, Debug, PartialEq)]
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
        /// The length of the matrix's rows as stored (its columns; for a transposed A, M), which
        /// the leading dimension must reach.
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
    Internal(InternalError),
    /// An [`Epilogue`](crate::Epilogue) that cannot apply to this call.
    InvalidEpilogue(EpilogueError),
    /// The backend cannot run this call, e.g. a CPU without AMX-BF16.
    Unsupported(Unsupported),
    /// The worker thread pool could not be created; rayon's error is its
    /// [`source`](std::error::Error::source).
    ThreadPool(ThreadPoolError),
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
                "leading dimension of {operand} is {ld}, shorter than its rows as stored ({cols} \
                 elements each)"
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
            GemmError::ThreadPool(why) => why.fmt(f),
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
            GemmError::ThreadPool(e) => e.source(),
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

/// Why an [`Epilogue`](crate::Epilogue) cannot apply to a call. Checked before any output is
/// written.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum EpilogueError {
    /// An activation zero point with floating-point activations, which have none.
    ZeroPointForFloats,
    /// An activation zero point needs the weights' column sums, and this packed B carries none
    /// (a view of a version-1 blob): load it with `PackedB::from_bytes`, or repack.
    MissingColumnSums,
    /// A `u8` / `i8` output without [`Epilogue::requantize`](crate::Epilogue::requantize):
    /// no default scale fits a layer's range, so the scale and zero point must be given.
    RequantizeMissing,
    /// The requantization scale of a `u8` / `i8` output is not positive and finite.
    RequantizeScale(f32),
    /// The requantization zero point lies outside the output type's range.
    OutputZeroPoint {
        /// The zero point given.
        zero_point: i32,
        /// The output type's smallest value.
        min: i32,
        /// The output type's largest value.
        max: i32,
    },
    /// Per-K-group weight scales with floating-point weights (they apply to int8 weights).
    GroupScalesForFloats,
    /// A weight-scale group that is not a positive multiple of 64 rows of K.
    GroupSize(usize),
    /// [`reference::linear_model`](crate::reference::linear_model) was given per-K-group
    /// scales, which need each group's product:
    /// [`reference::linear_model_grouped`](crate::reference::linear_model_grouped) takes them.
    GroupedScales,
    /// [`reference::linear_model_grouped`](crate::reference::linear_model_grouped) was given an
    /// epilogue without per-K-group scales.
    NotGrouped,
}

impl fmt::Display for EpilogueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EpilogueError::ZeroPointForFloats => {
                f.write_str("a zero point applies to int8 activations, not floating-point ones")
            }
            EpilogueError::MissingColumnSums => f.write_str(
                "the activations' zero point needs the weights' column sums, which this packed \
                 B lacks (a view of a version-1 blob): load it with PackedB::from_bytes, or \
                 repack",
            ),
            EpilogueError::RequantizeMissing => f.write_str(
                "a u8 or i8 output needs Epilogue::requantize(scale, zero_point): no default \
                 scale fits a layer's range",
            ),
            EpilogueError::RequantizeScale(scale) => write!(
                f,
                "the requantization scale must be positive and finite, not {scale}"
            ),
            EpilogueError::OutputZeroPoint {
                zero_point,
                min,
                max,
            } => write!(
                f,
                "the output zero point {zero_point} is outside {min}..={max}"
            ),
            EpilogueError::GroupScalesForFloats => f.write_str(
                "per-K-group weight scales apply to int8 weights, not floating-point ones",
            ),
            EpilogueError::GroupSize(group) => write!(
                f,
                "the weight-scale group must be a positive multiple of 64 rows of K (one k-step \
                 of the tiles), not {group}"
            ),
            EpilogueError::GroupedScales => f.write_str(
                "per-K-group weight scales need each group's product: use \
                 reference::linear_model_grouped",
            ),
            EpilogueError::NotGrouped => {
                f.write_str("linear_model_grouped needs per-K-group weight scales")
            }
        }
    }
}

impl std::error::Error for EpilogueError {}

impl From<EpilogueError> for GemmError {
    fn from(e: EpilogueError) -> Self {
        GemmError::InvalidEpilogue(e)
    }
}

/// What the backend lacks for a call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unsupported {
    /// The CPU does not report the feature of the precision's instruction.
    Feature {
        /// The precision of the call.
        precision: PrecisionKind,
        /// The feature its instruction needs.
        feature: Feature,
    },
    /// The unit's TMUL limits are below what a micro-kernel's dot products need (a CPU or VM
    /// reporting smaller ones than the architectural 16 rows and 64 bytes).
    TmulLimits {
        /// The unit's limits.
        limits: TmulLimits,
        /// The micro-tile (rows, columns of C) whose dot products do not fit.
        micro_tile: (u8, u8),
        /// The operand rule they break.
        mismatch: DotMismatch,
    },
    /// The unit's palette table cannot hold a micro-kernel's tiles (a CPU, VM or emulator whose
    /// palette 1 has fewer than the architectural 16 rows of 64 bytes, or no palette 1).
    Palette {
        /// The unit's palette 1 (`None`: the table has none).
        palette: Option<Palette>,
        /// The micro-tile (rows, columns of C) whose configuration the table refuses.
        micro_tile: (u8, u8),
        /// The load-time rule the configuration breaks under the table.
        error: ConfigError,
    },
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unsupported::Feature { precision, feature } => write!(
                f,
                "{} ({precision}) needs {feature}, which this CPU does not report",
                precision.instruction()
            ),
            Unsupported::TmulLimits {
                micro_tile: (rows, cols),
                mismatch,
                ..
            } => write!(
                f,
                "the {rows}x{cols} micro-kernel's dot products need larger TMUL limits: \
                 {mismatch}"
            ),
            Unsupported::Palette {
                micro_tile: (rows, cols),
                error,
                ..
            } => write!(
                f,
                "the {rows}x{cols} micro-kernel's tiles do not fit this unit's palette table: \
                 {error}"
            ),
        }
    }
}

impl std::error::Error for Unsupported {}

/// A consistency check of this crate that failed: a bug, reported instead of a crash. Its
/// message says which check and what it found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InternalError {
    what: String,
}

impl InternalError {
    pub(crate) fn new(what: impl Into<String>) -> InternalError {
        InternalError { what: what.into() }
    }
}

impl fmt::Display for InternalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for InternalError {}

/// The worker threads of a call could not be started. [`source`](std::error::Error::source)
/// is rayon's error, when rayon refused.
#[derive(Clone, Debug)]
pub struct ThreadPoolError {
    requested: usize,
    started: Option<usize>,
    rayon: Option<Arc<rayon::ThreadPoolBuildError>>,
}

impl ThreadPoolError {
    /// rayon could not build a pool of `requested` threads.
    pub(crate) fn build(requested: usize, e: rayon::ThreadPoolBuildError) -> ThreadPoolError {
        ThreadPoolError {
            requested,
            started: None,
            rayon: Some(Arc::new(e)),
        }
    }

    /// rayon built a pool of another size: a call must run every worker index.
    pub(crate) fn size(requested: usize, started: usize) -> ThreadPoolError {
        ThreadPoolError {
            requested,
            started: Some(started),
            rayon: None,
        }
    }

    /// The thread count asked for.
    pub fn requested(&self) -> usize {
        self.requested
    }
}

/// Equal when they report the same counts and the same rayon error (the very same one: rayon's
/// errors cannot be compared).
impl PartialEq for ThreadPoolError {
    fn eq(&self, other: &ThreadPoolError) -> bool {
        let same_source = match (&self.rayon, &other.rayon) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        self.requested == other.requested && self.started == other.started && same_source
    }
}

impl fmt::Display for ThreadPoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot start {} worker threads", self.requested)?;
        match self.started {
            Some(started) => write!(f, ": the pool has {started}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for ThreadPoolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.rayon.as_deref().map(|e| e as _)
    }
}

/// `DimensionMismatch` for the first of `(what, expected, found)` whose sizes differ.
pub(crate) fn check_sizes(pairs: &[(&'static str, usize, usize)]) -> Result<(), GemmError> {
    match pairs.iter().find(|(_, expected, found)| expected != found) {
        Some(&(what, expected, found)) => Err(GemmError::DimensionMismatch {
            what,
            expected,
            found,
        }),
        None => Ok(()),
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
