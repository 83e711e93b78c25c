//! The driver: argument checks, the split over threads, and the BLIS loop nest.

use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::sync::Arc;

use rayon::ThreadPool;

use amx_runtime::{configure_on, configure_typed_on, counters, Backend, ConfigureError};

use crate::block_kernel::{Block2x2, BlockEdge, Prepared2x2, TileKernel};
use crate::blocking::Blocking;
use crate::c_stores::{CStores, Fence};
use crate::configs::{self, typed, MicroShape};
use crate::epilogue::{Epilogue, Output, Prepared};
use crate::error::{check_sizes, check_slice, GemmError, Operand};
use crate::kernel::{Amx2x2, Drain, MicroKernel, MicroTask, Pending, SCRATCH_ROW};
use crate::matrix::{BRef, Batch, MatMut, MatRef};
use crate::pack::{
    self, packed_a_bytes, ASource, AlignedBytes, PackedB, PackedBView, MR, NR, STEP,
};
use crate::pool;
use crate::precision::{bytes_of, bytes_of_mut, Precision, PrecisionKind, ROW_BYTES};
use crate::tile_ops::{Checked, Full2x2, Mem, MemMut, TileOps, Typed};

/// Whether the product overwrites C or is added to it.
///
/// Exhaustive on purpose: C is either replaced or added to; anything richer (scaling C,
/// converting it) is an [`Epilogue`]'s job, so a `match` on this never needs a
/// wildcard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// `C = A x B`: C's previous contents are ignored (and may be anything).
    #[default]
    Overwrite,
    /// `C += A x B`.
    Accumulate,
}

/// A GEMM call's options: threads, mode, backend and blocking. Build one, then [`Gemm::run`]
/// it on any number of problems.
///
/// ```
/// use amx_gemm::{Gemm, Int8, Mode, PackedB};
///
/// let (m, n, k) = (2, 3, 4);
/// let a = vec![1i8; m * k];
/// let b = vec![2i8; k * n];
/// let packed = PackedB::<Int8>::pack(&b, k, n, n).unwrap();
/// let mut c = vec![100i32; m * n];
/// Gemm::new().threads(1).mode(Mode::Accumulate).run(m, &a, k, &packed, &mut c, n).unwrap();
/// assert!(c.iter().all(|&x| x == 100 + 4 * 2));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gemm {
    threads: usize,
    mode: Mode,
    a_transposed: bool,
    backend: Option<Backend>,
    /// `None`: the backend's default ([`Blocking::for_backend`]).
    blocking: Option<Blocking>,
    c_stores: CStores,
    pool: Option<CallerPool>,
}

/// A pool the caller lent (see [`Gemm::pool`]); two options are equal when they name the same
/// pool.
#[derive(Clone, Debug)]
struct CallerPool(Arc<ThreadPool>);

impl PartialEq for CallerPool {
    fn eq(&self, other: &CallerPool) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CallerPool {}

impl Default for Gemm {
    fn default() -> Self {
        Gemm::new()
    }
}

/// What one call did, for reports and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunStats {
    /// The backend the tiles ran on.
    pub backend: Backend,
    /// Worker threads the call was split over (some may have had no work).
    pub threads: usize,
    /// Per worker, in worker order.
    pub workers: Vec<WorkerStats>,
}

impl RunStats {
    /// A call that ran no worker.
    fn empty(backend: Backend, threads: usize) -> RunStats {
        RunStats {
            backend,
            threads,
            workers: Vec::new(),
        }
    }

    /// LDTILECFGs issued by all workers together.
    pub fn loads(&self) -> u64 {
        self.workers.iter().map(|w| w.loads).sum()
    }
}

/// What one worker did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Tile configurations it used (one per region of C it computed: full tiles, right edge,
    /// bottom edge, corner; all different).
    pub configs: usize,
    /// LDTILECFGs it issued: at most `configs`, and 0 when it already held them.
    pub loads: u64,
}

impl Gemm {
    /// The most worker threads a call may use: [`Gemm::threads`] above this makes every call
    /// fail with [`GemmError::TooManyThreads`] (each thread count keeps its own persistent pool,
    /// and no machine with AMX has this many cores).
    pub const MAX_THREADS: usize = 1024;

    /// All cores, [`Mode::Overwrite`], the process's backend, the backend's blocking
    /// ([`Blocking::for_backend`]).
    pub fn new() -> Gemm {
        Gemm {
            threads: 0,
            mode: Mode::Overwrite,
            a_transposed: false,
            backend: None,
            blocking: None,
            c_stores: CStores::Auto,
            pool: None,
        }
    }

    /// Worker threads; 0 (the default) means one per core (at most [`Gemm::MAX_THREADS`]).
    /// More threads than cores is allowed (they share the cores), up to [`Gemm::MAX_THREADS`]:
    /// a call with more fails with [`GemmError::TooManyThreads`]. Each thread count has its own
    /// persistent pool, kept for the life of the process (a program that uses many counts
    /// keeps that many pools: give it one of its own with [`Gemm::pool`]); 1 runs on the
    /// calling thread. Ignored when a [`Gemm::pool`] is given.
    pub fn threads(mut self, threads: usize) -> Gemm {
        self.threads = threads;
        self
    }

    /// Runs on the caller's rayon pool instead of the crate's own, so a process that already
    /// has one is not oversubscribed: one worker per thread of the pool (its thread count
    /// replaces [`Gemm::threads`]). Each call broadcasts to every thread of the pool, worker `i`
    /// on pool thread `i` with the same part of the same shape each time, so the workers keep
    /// their tile configurations between calls as on the built-in pools. The tiles of a
    /// caller's pool are the caller's to release (`pool.broadcast(|_| amx_runtime::release())`);
    /// [`release_tiles`](crate::release_tiles) releases the crate's own pools only.
    ///
    /// A call needs every thread of the pool: it waits while a job of the caller's holds one,
    /// so a job that waits for a GEMM on its own pool, run from another thread, never ends.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use amx_gemm::{rayon, Backend, Gemm, Int8, PackedB};
    ///
    /// let pool = Arc::new(rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap());
    /// let gemm = Gemm::new().pool(Arc::clone(&pool)).backend(Backend::Emulated);
    /// let packed = PackedB::<Int8>::pack(&vec![1i8; 64 * 40], 64, 40, 40).unwrap();
    /// let mut c = vec![0i32; 40 * 40];
    /// let stats = gemm.run(40, &vec![1i8; 40 * 64], 64, &packed, &mut c, 40).unwrap();
    /// assert_eq!(stats.threads, 2);
    /// assert!(c.iter().all(|&x| x == 64));
    /// ```
    pub fn pool(mut self, pool: Arc<ThreadPool>) -> Gemm {
        self.pool = Some(CallerPool(pool));
        self
    }

    /// A is given transposed (column-major): element `(i, k)` of A at `a[k * lda + i]`, with
    /// `lda >= m` (e.g. activations stored feature-major, or the `A^T` of an attention
    /// product). The default is row-major, `a[i * lda + k]` with `lda >= k`. Packing A gathers
    /// the columns, so a call costs the same but for that copy.
    ///
    /// ```
    /// use amx_gemm::{Backend, Gemm, Int8, PackedB};
    ///
    /// let (m, n, k) = (2, 2, 3);
    /// let at: Vec<i8> = vec![1, 4, 2, 5, 3, 6]; // A = [[1, 2, 3], [4, 5, 6]], column-major
    /// let packed = PackedB::<Int8>::pack(&[1, 0, 0, 1, 1, 1], k, n, n).unwrap();
    /// let mut c = vec![0i32; m * n];
    /// let gemm = Gemm::new().backend(Backend::Emulated).a_transposed(true);
    /// gemm.run(m, &at, m, &packed, &mut c, n).unwrap();
    /// assert_eq!(c, [4, 5, 10, 11]);
    /// ```
    pub fn a_transposed(mut self, transposed: bool) -> Gemm {
        self.a_transposed = transposed;
        self
    }

    /// Checks A, `m x k` with leading dimension `lda` in the call's layout.
    fn check_a(&self, m: usize, k: usize, lda: usize, len: usize) -> Result<(), GemmError> {
        if self.a_transposed {
            check_slice(Operand::A, k, m, lda, len)
        } else {
            check_slice(Operand::A, m, k, lda, len)
        }
    }

    /// Overwrite or accumulate into C.
    pub fn mode(mut self, mode: Mode) -> Gemm {
        self.mode = mode;
        self
    }

    /// Runs on this backend instead of the process's (`amx_runtime::backend()`, which follows
    /// `AMX_BACKEND`).
    pub fn backend(mut self, backend: Backend) -> Gemm {
        self.backend = Some(backend);
        self
    }

    /// Uses this cache blocking (e.g. to tune for another cache hierarchy) whatever the
    /// backend, instead of the backend's default ([`Blocking::for_backend`]).
    pub fn blocking(mut self, blocking: Blocking) -> Gemm {
        self.blocking = Some(blocking);
        self
    }

    /// How a call writes C or a fused layer's output: [`CStores::Auto`] (the default) streams
    /// it past the caches with non-temporal stores when the call overwrites at least
    /// [`CStores::STREAM_MIN_BYTES`] of it, and stores through the caches otherwise. A caller
    /// that reads a large C right after each call from a cache that holds it may prefer
    /// [`CStores::Cached`]; one that reads C much later, [`CStores::Streaming`]. The values
    /// written are the same either way; [`CStores`] lists which rows can be streamed.
    ///
    /// ```
    /// use amx_gemm::{Backend, CStores, Gemm, Int8, PackedB};
    ///
    /// let packed = PackedB::<Int8>::pack(&vec![1i8; 64 * 32], 64, 32, 32).unwrap();
    /// let mut c = vec![0i32; 32 * 32];
    /// let gemm = Gemm::new().backend(Backend::Emulated).c_stores(CStores::Streaming);
    /// gemm.run(32, &vec![2i8; 32 * 64], 64, &packed, &mut c, 32).unwrap();
    /// assert!(c.iter().all(|&x| x == 128));
    /// ```
    pub fn c_stores(mut self, c_stores: CStores) -> Gemm {
        self.c_stores = c_stores;
        self
    }

    /// The thread count a call uses: the one set, or the number of cores (at most
    /// [`Gemm::MAX_THREADS`]). A call refuses a count above [`Gemm::MAX_THREADS`].
    pub fn thread_count(&self) -> usize {
        if let Some(CallerPool(pool)) = &self.pool {
            pool.current_num_threads()
        } else if self.threads == 0 {
            pool::cores().min(Gemm::MAX_THREADS)
        } else {
            self.threads
        }
    }

    /// [`Gemm::thread_count`], checked against [`Gemm::MAX_THREADS`].
    pub(crate) fn checked_thread_count(&self) -> Result<usize, GemmError> {
        pool::check_threads(self.thread_count())
    }

    /// The backend a call uses.
    pub fn resolved_backend(&self) -> Result<Backend, GemmError> {
        match self.backend {
            Some(b) => Ok(b),
            None => amx_runtime::backend().map_err(|e| ConfigureError::Backend(e).into()),
        }
    }

    /// `C (+)= A x B` with B packed: A is `m x b.k()` row-major with leading dimension `lda`
    /// (column-major with [`Gemm::a_transposed`]), C is `m x b.n()` row-major with leading
    /// dimension `ldc`.
    ///
    /// # Errors
    ///
    /// Checked before C is written: [`GemmError::LeadingDimension`] or
    /// [`GemmError::SliceTooShort`] (or [`GemmError::TooLarge`] when the extent overflows) for
    /// A then C, then [`GemmError::TooManyThreads`]; these leave C unchanged. Then the
    /// backend's own errors ([`GemmError::Configure`], [`GemmError::Unsupported`], ...), which
    /// may come after some workers have written their parts of C.
    pub fn run<P: Precision>(
        &self,
        m: usize,
        a: &[P::A],
        lda: usize,
        b: &PackedB<P>,
        c: &mut [P::C],
        ldc: usize,
    ) -> Result<RunStats, GemmError> {
        self.run_view(m, a, lda, b.view(), c, ldc)
    }

    /// [`Gemm::run`] with B borrowed: a [`PackedB::view`], or weights that were never copied
    /// out of their serialized form ([`PackedBView::from_blob`], e.g. over a memory-mapped
    /// file).
    ///
    /// # Errors
    ///
    /// As [`Gemm::run`].
    pub fn run_view<P: Precision>(
        &self,
        m: usize,
        a: &[P::A],
        lda: usize,
        b: PackedBView<'_, P>,
        c: &mut [P::C],
        ldc: usize,
    ) -> Result<RunStats, GemmError> {
        let (k, n) = (b.k(), b.n());
        self.check_a(m, k, lda, a.len())?;
        check_slice(Operand::C, m, n, ldc, c.len())?;
        let threads = self.checked_thread_count()?;
        let backend = self.resolved_backend()?;
        if m == 0 || n == 0 {
            return Ok(RunStats::empty(backend, threads));
        }
        if k == 0 {
            if self.mode == Mode::Overwrite {
                for row in 0..m {
                    c[row * ldc..row * ldc + n].fill(P::C::default());
                }
            }
            return Ok(RunStats::empty(backend, threads));
        }
        let c_size = std::mem::size_of::<P::C>();
        let accumulate = self.mode == Mode::Accumulate;
        let target = Target::Plain {
            c: MemMut::new(bytes_of_mut(c)),
            ldc_bytes: byte_stride(m, ldc, c_size, Operand::C)?,
            accumulate,
            stream: self
                .c_stores
                .streams(m.saturating_mul(n).saturating_mul(c_size), accumulate),
        };
        self.launch(m, a, lda, b, target, threads, backend)
    }

    /// The product with a fused [`Epilogue`]: a quantized (or bf16) linear layer,
    /// `out = convert(act(s[n] (A x B - zp_a colsum[n]) + bias[n]) + beta R)`, applied to each
    /// micro-tile of the product while it is in L1 and written once, as `f32`, bf16, or
    /// requantized `u8` / `i8` (see [`epilogue`](crate::epilogue) for the exact order of
    /// operations and rounding). A is `M x K` (`K = b.k()`), the output `M x N`
    /// (`N = b.n()`). [`Gemm::mode`] does not apply (the epilogue's residual is the way to add
    /// to an existing result).
    ///
    /// ```
    /// use amx_gemm::{Activation, Backend, Epilogue, Gemm, Int8, MatMut, MatRef, PackedB, WeightScale};
    ///
    /// let (m, n, k) = (3, 2, 64);
    /// let a = vec![2i8; m * k];
    /// let b = vec![1i8; k * n];
    /// let packed = PackedB::<Int8>::pack(&b, k, n, n)?;
    /// let bias = [1.0f32, -200.0];
    /// let e = Epilogue::new()
    ///     .quantized(0.5, 0, WeightScale::Tensor(0.25))
    ///     .bias(&bias)
    ///     .activation(Activation::Relu);
    /// let mut y = vec![0f32; m * n];
    /// let gemm = Gemm::new().backend(Backend::Emulated);
    /// gemm.run_with(MatRef::new(&a, m, k), &packed, MatMut::new(&mut y, m, n), &e)?;
    /// // 0.5 * 0.25 * 128 + bias, then ReLU.
    /// assert_eq!(y, [17.0, 0.0, 17.0, 0.0, 17.0, 0.0]);
    /// # Ok::<(), amx_gemm::GemmError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Checked before the output is written: [`GemmError::DimensionMismatch`] when A's
    /// columns are not `b.k()` or the output is not `a.rows x b.n()`; those of [`Gemm::run`]
    /// for A and the output ([`Operand::C`]) and the thread count;
    /// [`GemmError::DimensionMismatch`] for per-channel scales or a bias with fewer than N
    /// values; [`Operand::Residual`] slice errors; [`GemmError::InvalidEpilogue`] for a zero
    /// point with bf16 or with weights that carry no column sums, a requantization scale that
    /// is not positive and finite, or an output zero point outside the output type. Then the
    /// backend's errors, as for [`Gemm::run`].
    pub fn run_with<P: Precision, O: Output>(
        &self,
        a: MatRef<'_, P::A>,
        b: &PackedB<P>,
        out: MatMut<'_, O>,
        epilogue: &Epilogue<'_>,
    ) -> Result<RunStats, GemmError> {
        self.run_view_with(a, b.view(), out, epilogue)
    }

    /// [`Gemm::run_with`] with B borrowed ([`PackedB::view`] or [`PackedBView::from_blob`]).
    ///
    /// # Errors
    ///
    /// As [`Gemm::run_with`].
    pub fn run_view_with<P: Precision, O: Output>(
        &self,
        a: MatRef<'_, P::A>,
        b: PackedBView<'_, P>,
        out: MatMut<'_, O>,
        epilogue: &Epilogue<'_>,
    ) -> Result<RunStats, GemmError> {
        check_product(a.rows, a.cols, (b.k(), b.n()), (out.rows, out.cols))?;
        self.fused(a.rows, a.data, a.ld, b, out.data, out.ld, epilogue)
    }

    /// [`Gemm::run_view_with`] on checked dimensions: A is `m x b.k()`, the output `m x b.n()`.
    #[allow(clippy::too_many_arguments)]
    fn fused<P: Precision, O: Output>(
        &self,
        m: usize,
        a: &[P::A],
        lda: usize,
        b: PackedBView<'_, P>,
        out: &mut [O],
        ldo: usize,
        epilogue: &Epilogue<'_>,
    ) -> Result<RunStats, GemmError> {
        let (k, n) = (b.k(), b.n());
        self.check_a(m, k, lda, a.len())?;
        check_slice(Operand::C, m, n, ldo, out.len())?;
        let threads = self.checked_thread_count()?;
        let backend = self.resolved_backend()?;
        if m == 0 || n == 0 {
            return Ok(RunStats::empty(backend, threads));
        }
        let out_bytes = m.saturating_mul(n).saturating_mul(std::mem::size_of::<O>());
        let prepared = Prepared::new(
            epilogue,
            P::KIND,
            (m, n, k),
            b.col_sums(),
            |steps| b.group_sums(steps),
            out,
            ldo,
        )?
        .streaming(self.c_stores.streams(out_bytes, false));
        if k == 0 {
            // An empty sum: every accumulator is 0, and the epilogue still applies (bias,
            // residual, ...), here on the calling thread, with no tile work.
            let zeros = [0u8; 4 * MR * NR];
            let mut block = [[0f32; NR]; MR];
            for i0 in (0..m).step_by(MR) {
                for j0 in (0..n).step_by(NR) {
                    let shape = (MR.min(m - i0), NR.min(n - j0));
                    prepared.apply(&zeros, shape, (i0, j0), &mut block)?;
                }
            }
            return Ok(RunStats::empty(backend, threads));
        }
        self.launch(m, a, lda, b, Target::Fused(prepared), threads, backend)
    }

    /// Splits a checked, non-empty product (`m, n, k > 0`) over the workers.
    #[allow(clippy::too_many_arguments)]
    fn launch<P: Precision>(
        &self,
        m: usize,
        a: &[P::A],
        lda: usize,
        b: PackedBView<'_, P>,
        target: Target<'_>,
        threads: usize,
        backend: Backend,
    ) -> Result<RunStats, GemmError> {
        let (k, n) = (b.k(), b.n());
        let mut stats = RunStats::empty(backend, threads);
        if backend == Backend::Hardware {
            // The silicon's features and limits are the same on every thread: refuse a CPU that
            // cannot run one of the call's micro-kernels before any worker writes to C. A CPU
            // without AMX at all (or the permission) is told so first, not as a missing
            // instruction.
            let limits = amx_runtime::tmul_limits_on(backend)?;
            let table = amx_runtime::palette_table_on(backend)?;
            crate::tile_ops::silicon_supports(P::KIND)?;
            for shape in shapes(m, n) {
                configs::check_palette(shape, &table)?;
                configs::check_limits(shape, limits)?;
            }
        }
        let a_size = P::KIND.input_bytes();
        let (mb, nb) = (m.div_ceil(MR), n.div_ceil(NR));
        let blocking = self
            .blocking
            .unwrap_or(Blocking::for_backend(backend))
            .normalized();
        let problem = Problem {
            m,
            n,
            a: ASource {
                bytes: bytes_of(a),
                // Transposed, A's rows are its K columns: a single one has no stride either.
                ld_bytes: if self.a_transposed {
                    byte_stride(k, lda, a_size, Operand::A)?
                } else {
                    byte_stride(m, lda, a_size, Operand::A)?
                },
                row_bytes: k * a_size,
                transposed_element: if self.a_transposed { a_size } else { 0 },
            },
            b,
            target,
            backend,
            blocking,
            grid: grid(threads, mb, nb, blocking.mc / MR),
            mb,
            nb,
        };
        let results: Vec<Result<WorkerStats, GemmError>> = match &self.pool {
            Some(CallerPool(pool)) => pool.broadcast(|ctx| work(&problem, ctx.index())),
            None if threads == 1 => vec![work(&problem, 0)],
            None => pool::pool(threads)?.broadcast(|ctx| work(&problem, ctx.index())),
        };
        for r in results {
            stats.workers.push(r?);
        }
        Ok(stats)
    }

    /// `C (+)= A x B` with B not packed (`K x N` or `N x K`, see [`BRef`]): packs B, then
    /// runs. For repeated products with the same B, pack it once with [`PackedB::pack`].
    ///
    /// # Errors
    ///
    /// [`GemmError::DimensionMismatch`] when A's columns are not B's K or C is not
    /// `a.rows x b.n`; those of [`Gemm::run`] for A, C and the thread count, checked before B
    /// is packed, then those of [`PackedB::pack`] for B.
    pub fn run_unpacked<P: Precision>(
        &self,
        a: MatRef<'_, P::A>,
        b: BRef<'_, P::B>,
        c: MatMut<'_, P::C>,
    ) -> Result<RunStats, GemmError> {
        let (m, n, k) = (a.rows, b.n, b.k);
        check_product(m, a.cols, (k, n), (c.rows, c.cols))?;
        // Check A, C and the thread count before the (possibly long) packing.
        self.check_a(m, k, a.ld, a.data.len())?;
        check_slice(Operand::C, m, n, c.ld, c.data.len())?;
        self.checked_thread_count()?;
        let packed = PackedB::<P>::pack_ref(b)?;
        self.run(m, a.data, a.ld, &packed, c.data, c.ld)
    }
}

/// Checks that A (`a_rows x a_cols`), B (`K x N`) and C (`c_rows x c_cols`) make a product.
pub(crate) fn check_product(
    a_rows: usize,
    a_cols: usize,
    (k, n): (usize, usize),
    (c_rows, c_cols): (usize, usize),
) -> Result<(), GemmError> {
    check_sizes(&[
        ("K of B and the columns of A", k, a_cols),
        ("M of A (its rows) and the rows of C", a_rows, c_rows),
        ("N of B and the columns of C", n, c_cols),
    ])
}

/// A row stride in bytes. A single row's stride is never used (and may be any value, e.g.
/// `usize::MAX`): 0, so that no offset computed from it can overflow. With two rows or more the
/// slice holds `ld` elements, so the product fits.
fn byte_stride(rows: usize, ld: usize, size: usize, operand: Operand) -> Result<usize, GemmError> {
    match ld.checked_mul(size) {
        _ if rows <= 1 => Ok(0),
        Some(bytes) => Ok(bytes),
        None => Err(GemmError::TooLarge { operand }),
    }
}

/// Where a call's product goes.
enum Target<'a> {
    /// Straight into C (`i32` / `f32`), overwriting or accumulating.
    Plain {
        c: MemMut,
        ldc_bytes: usize,
        accumulate: bool,
        /// Streaming stores where a row allows them (see [`CStores`]).
        stream: bool,
    },
    /// Through a fused epilogue: each micro-tile's last K block is stored to a scratch tile in
    /// L1, and the epilogue writes the output from there.
    Fused(Prepared<'a>),
}

/// What a batched call ([`Gemm::run_batched`]) did: the products, and the time spent packing
/// B on the fly apart from the time multiplying.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchStats {
    /// Per product, in batch order.
    pub runs: Vec<RunStats>,
    /// Seconds spent packing the B operands (all batches together).
    pub pack_seconds: f64,
    /// Seconds spent in the products themselves (all batches together).
    pub run_seconds: f64,
}

/// The elements a batch of `batch` matrices at `stride` apart, each spanning `extent`
/// elements, needs; checked against `len`.
fn check_batch(
    operand: Operand,
    batch: usize,
    stride: usize,
    extent: usize,
    len: usize,
) -> Result<(), GemmError> {
    if batch == 0 || extent == 0 {
        return Ok(());
    }
    let needed = (batch - 1)
        .checked_mul(stride)
        .and_then(|x| x.checked_add(extent))
        .ok_or(GemmError::TooLarge { operand })?;
    if needed > len {
        return Err(GemmError::SliceTooShort {
            operand,
            needed,
            len,
        });
    }
    Ok(())
}

impl Gemm {
    /// `batch.count` independent products `C_i (+)= A_i x B_i` where B is not prepacked
    /// (attention's `Q K^T` and `P V`). Each view describes the first product's matrix (A in
    /// the layout of [`Gemm::a_transposed`], B as [`BRef`] stores it, C row-major); product `i`
    /// starts `i * batch.stride_a` elements into A's data, and likewise for B and C. Each B_i
    /// is packed on the fly; [`BatchStats`] reports the packing time apart. Batches are
    /// computed in order, so C batches that overlap (a stride smaller than C's extent) end
    /// with the later batch's values.
    ///
    /// ```
    /// use amx_gemm::{Backend, BRef, Batch, Gemm, Int8, MatMut, MatRef};
    ///
    /// // Two 2 x 2 x 3 products; B given N x K (transposed).
    /// let a: Vec<i8> = vec![1, 2, 3, 4, 5, 6, /* batch 1: */ 1, 1, 1, 2, 2, 2];
    /// let b: Vec<i8> = vec![1, 0, 0, 0, 1, 0, /* batch 1: */ 1, 1, 1, 0, 0, 1];
    /// let mut c = vec![0i32; 8];
    /// let batch = Batch { count: 2, stride_a: 6, stride_b: 6, stride_c: 4 };
    /// let gemm = Gemm::new().backend(Backend::Emulated);
    /// let stats = gemm
    ///     .run_batched::<Int8>(
    ///         batch,
    ///         MatRef::new(&a, 2, 3),
    ///         BRef::n_by_k(&b, 3, 2),
    ///         MatMut::new(&mut c, 2, 2),
    ///     )
    ///     .unwrap();
    /// assert_eq!(c, [1, 2, 4, 5, 3, 1, 6, 2]);
    /// assert_eq!(stats.runs.len(), 2);
    /// ```
    ///
    /// # Errors
    ///
    /// Checked before C is written: [`GemmError::DimensionMismatch`] when the views do not
    /// make a product, slice and leading-dimension errors of A, B and C (the last batch must
    /// fit), then the thread count. Then those of [`PackedB::pack`] and [`Gemm::run`] per batch
    /// (earlier batches are then already written).
    pub fn run_batched<P: Precision>(
        &self,
        batch: Batch,
        a: MatRef<'_, P::A>,
        b: BRef<'_, P::B>,
        c: MatMut<'_, P::C>,
    ) -> Result<BatchStats, GemmError> {
        check_product(a.rows, a.cols, (b.k, b.n), (c.rows, c.cols))?;
        let (m, lda) = (a.rows, a.ld);
        let (ldc, stride_c) = (c.ld, batch.stride_c);
        self.batched::<P, _>(batch, a, b, c.data, ldc, stride_c, |a_i, packed, c_i| {
            self.run(m, a_i, lda, packed, c_i, ldc)
        })
    }

    /// [`Gemm::run_batched`] with a fused [`Epilogue`] applied to every product, written to
    /// `out` (product `i` at `i * batch.stride_c` elements in) as [`Gemm::run_with`] writes
    /// it: e.g. attention's `softmax` input `alpha Q K^T` in bf16, or `P V` with a residual.
    /// The epilogue's per-channel parameters (scales, bias) are shared by all products; a
    /// residual has the output's batch layout: product `i`'s residual starts
    /// `i * batch.stride_c` elements into the residual's data (with the residual's own leading
    /// dimension). A zero point is compensated with the column sums computed while each B is
    /// packed.
    ///
    /// ```
    /// use amx_gemm::{bf16, Backend, BRef, Batch, Epilogue, Gemm, Int8, MatMut, MatRef};
    ///
    /// // Two 2 x 2 x 3 products, B given N x K, scaled by alpha = 0.5, written as bf16.
    /// let a: Vec<i8> = vec![1, 2, 3, 4, 5, 6, /* batch 1: */ 1, 1, 1, 2, 2, 2];
    /// let b: Vec<i8> = vec![1, 0, 0, 0, 1, 0, /* batch 1: */ 1, 1, 1, 0, 0, 1];
    /// let mut out = vec![bf16::ZERO; 8];
    /// let batch = Batch { count: 2, stride_a: 6, stride_b: 6, stride_c: 4 };
    /// let e = Epilogue::new().alpha(0.5);
    /// Gemm::new()
    ///     .backend(Backend::Emulated)
    ///     .run_batched_with::<Int8, bf16>(
    ///         batch,
    ///         MatRef::new(&a, 2, 3),
    ///         BRef::n_by_k(&b, 3, 2),
    ///         MatMut::new(&mut out, 2, 2),
    ///         &e,
    ///     )
    ///     .unwrap();
    /// let got: Vec<f32> = out.iter().map(|x| x.to_f32()).collect();
    /// assert_eq!(got, [0.5, 1.0, 2.0, 2.5, 1.5, 0.5, 3.0, 1.0]);
    /// ```
    ///
    /// # Errors
    ///
    /// Those of [`Gemm::run_batched`] (with the output as C), a residual too short for the
    /// last batch ([`Operand::Residual`]), per-row activation parameters fewer than
    /// `count x M` ([`GemmError::DimensionMismatch`]) or with a zero point for a float
    /// precision, then those of [`Gemm::run_with`] per batch: an invalid epilogue is refused
    /// by the first batch, before any output is written.
    pub fn run_batched_with<P: Precision, O: Output>(
        &self,
        batch: Batch,
        a: MatRef<'_, P::A>,
        b: BRef<'_, P::B>,
        out: MatMut<'_, O>,
        epilogue: &Epilogue<'_>,
    ) -> Result<BatchStats, GemmError> {
        check_product(a.rows, a.cols, (b.k, b.n), (out.rows, out.cols))?;
        let (m, n, lda) = (a.rows, b.n, a.ld);
        let (ldo, stride_o) = (out.ld, batch.stride_c);
        if let Some((r, _)) = epilogue.residual {
            let (len, ld) = r.len_and_ld();
            let extent = crate::error::extent(Operand::Residual, m, n, ld)?;
            check_batch(Operand::Residual, batch.count, stride_o, extent, len)?;
        }
        let rows = batch.count.checked_mul(m).ok_or(GemmError::TooLarge {
            operand: Operand::A,
        })?;
        epilogue.check_batch_rows(rows, P::KIND.is_integer())?;
        let mut index = 0usize;
        self.batched::<P, _>(
            batch,
            a,
            b,
            out.data,
            ldo,
            stride_o,
            |a_i, packed, out_i| {
                let e = epilogue.for_batch(index.saturating_mul(stride_o), index.saturating_mul(m));
                index += 1;
                self.fused(m, a_i, lda, packed.view(), out_i, ldo, &e)
            },
        )
    }

    /// The driver of the batched calls: checks every operand's last batch, then per batch
    /// packs B (timed apart) and calls `run` with A_i, the packed B_i and C_i.
    #[allow(clippy::too_many_arguments)]
    fn batched<P: Precision, C>(
        &self,
        batch: Batch,
        a: MatRef<'_, P::A>,
        b: BRef<'_, P::B>,
        c: &mut [C],
        ldc: usize,
        stride_c: usize,
        mut run: impl FnMut(&[P::A], &PackedB<P>, &mut [C]) -> Result<RunStats, GemmError>,
    ) -> Result<BatchStats, GemmError> {
        let (m, n, k) = (a.rows, b.n, b.k);
        let (count, stride_a, stride_b) = (batch.count, batch.stride_a, batch.stride_b);
        let a_extent = if self.a_transposed {
            crate::error::extent(Operand::A, k, m, a.ld)?
        } else {
            crate::error::extent(Operand::A, m, k, a.ld)?
        };
        let (b_rows, b_cols) = b.stored();
        let b_extent = crate::error::extent(Operand::B, b_rows, b_cols, b.ld)?;
        let c_extent = crate::error::extent(Operand::C, m, n, ldc)?;
        check_batch(Operand::A, count, stride_a, a_extent, a.data.len())?;
        check_batch(Operand::B, count, stride_b, b_extent, b.data.len())?;
        check_batch(Operand::C, count, stride_c, c_extent, c.len())?;
        self.checked_thread_count()?;
        let mut stats = BatchStats {
            runs: Vec::with_capacity(count.min(1 << 16)),
            pack_seconds: 0.0,
            run_seconds: 0.0,
        };
        for i in 0..count {
            // In bounds when the operand has elements (checked above for the last batch); an
            // empty operand may lie past the slice, and is then an empty slice.
            let a_i = a.data.get(i.saturating_mul(stride_a)..).unwrap_or(&[]);
            let b_i = b.data.get(i.saturating_mul(stride_b)..).unwrap_or(&[]);
            let c_i = match c.get_mut(i.saturating_mul(stride_c)..) {
                Some(c_i) => c_i,
                None => &mut [],
            };
            let start = std::time::Instant::now();
            let packed = PackedB::<P>::pack_ref(BRef { data: b_i, ..b })?;
            let packed_at = std::time::Instant::now();
            stats.pack_seconds += (packed_at - start).as_secs_f64();
            stats.runs.push(run(a_i, &packed, c_i)?);
            stats.run_seconds += packed_at.elapsed().as_secs_f64();
        }
        Ok(stats)
    }
}

/// Everything a worker needs; shared read-only by the workers of one call.
struct Problem<'a, P: Precision> {
    m: usize,
    n: usize,
    a: ASource<'a>,
    b: PackedBView<'a, P>,
    target: Target<'a>,
    backend: Backend,
    blocking: Blocking,
    /// Workers over rows x workers over columns.
    grid: (usize, usize),
    /// Micro-rows (32 rows) and panels (32 columns) of C.
    mb: usize,
    nb: usize,
}

/// The split of `mb x nb` micro-tiles over `threads` workers as a `rows x columns` grid: the
/// factorization with the least work for the busiest worker, and among those the least memory
/// traffic for it. A worker packs A for all of its rows (workers that split the columns pack
/// the same rows each), and reads its panels of B once per block of `mc_micro` micro-rows;
/// both cost K bytes per micro-row or panel. So at 1024^3 on 2 threads a split of the rows
/// packs half of A per worker for the same B traffic (measured on AMX silicon, Emerald Rapids
/// class: 5-10% faster than splitting the columns), while with few rows (256 x 4096 x 1024) a
/// split of the columns reads half of B each (3-6% faster).
fn grid(threads: usize, mb: usize, nb: usize, mc_micro: usize) -> (usize, usize) {
    let mut best = (1, threads);
    let mut best_cost = (usize::MAX, usize::MAX);
    for tm in (1..=threads).filter(|tm| threads.is_multiple_of(*tm)) {
        let tn = threads / tm;
        let (rows, panels) = (mb.div_ceil(tm), nb.div_ceil(tn));
        let work = rows.saturating_mul(panels);
        let traffic = rows
            .div_ceil(mc_micro.max(1))
            .saturating_mul(panels)
            .saturating_add(rows.saturating_mul(2));
        if (work, traffic) < best_cost {
            (best, best_cost) = ((tm, tn), (work, traffic));
        }
    }
    best
}

/// Part `i` of `0..total` cut into `parts` nearly equal ranges.
fn part(total: usize, parts: usize, i: usize) -> Range<usize> {
    total * i / parts..total * (i + 1) / parts
}

/// A rectangle of C computed with one configuration.
#[derive(Clone, Debug)]
struct Region {
    /// Rows of C.
    rows: Range<usize>,
    /// Panels of B (32 columns each).
    panels: Range<usize>,
    /// The micro-tile shape (and so the configuration) of every micro-tile in it.
    shape: MicroShape,
}

thread_local! {
    /// The shape this thread configured last, so that a worker starts with the configuration
    /// it already holds.
    static LAST_SHAPE: Cell<Option<MicroShape>> = const { Cell::new(None) };
    /// This thread's buffers, kept between calls.
    static SCRATCH: RefCell<Buffers> = RefCell::new(Buffers::default());
}

/// The micro-tile shapes an `m x n` product uses (full, bottom and right edges, corner).
fn shapes(m: usize, n: usize) -> impl Iterator<Item = MicroShape> {
    let sizes = |total: usize| {
        [
            (total >= MR).then_some(MR),
            Some(total % MR).filter(|&r| r > 0),
        ]
    };
    let cols = sizes(n);
    sizes(m)
        .into_iter()
        .flatten()
        .flat_map(move |r| cols.into_iter().flatten().map(move |c| (r, c)))
        .filter_map(|(r, c)| MicroShape::new(r, c))
}

/// Worker `index`'s part of C, cut into regions of one configuration each.
fn regions<P: Precision>(p: &Problem<'_, P>, index: usize) -> Vec<Region> {
    let (tm, tn) = p.grid;
    if index >= tm * tn {
        return Vec::new();
    }
    let micro_rows = part(p.mb, tm, index / tn);
    let panels = part(p.nb, tn, index % tn);
    if micro_rows.is_empty() || panels.is_empty() {
        return Vec::new();
    }
    let rows = micro_rows.start * MR..(micro_rows.end * MR).min(p.m);
    let full_rows_end = rows.start + (rows.len() / MR) * MR;
    let last_cols = p.n - (p.nb - 1) * NR;
    let full_panels_end = if panels.end == p.nb && last_cols < NR {
        panels.end - 1
    } else {
        panels.end
    };
    let row_parts = [
        (rows.start..full_rows_end, MR),
        (full_rows_end..rows.end, rows.end - full_rows_end),
    ];
    let col_parts = [
        (panels.start..full_panels_end, NR),
        (full_panels_end..panels.end, last_cols),
    ];
    let mut out = Vec::with_capacity(4);
    for (r, rows_in_tile) in &row_parts {
        for (c, cols_in_tile) in &col_parts {
            if r.is_empty() || c.is_empty() {
                continue;
            }
            if let Some(shape) = MicroShape::new(*rows_in_tile, *cols_in_tile) {
                out.push(Region {
                    rows: r.clone(),
                    panels: c.clone(),
                    shape,
                });
            }
        }
    }
    // Start with the configuration this thread holds, if any of ours.
    if let Some(last) = LAST_SHAPE.with(Cell::get) {
        if let Some(i) = out.iter().position(|r| r.shape == last) {
            out[..=i].rotate_right(1);
        }
    }
    out
}

/// A worker's buffers, reserved before it configures any tiles (see [`work`]).
#[derive(Default)]
struct Buffers {
    /// The packed A block.
    a: AlignedBytes,
    /// The partial sums of the earlier K blocks when K is split: one block of `mc` rows times
    /// one `nc` block of columns (the loop nest finishes each such block of C before the next).
    acc: AlignedBytes,
    /// The last K block of one micro-tile, 32 rows of 128 bytes, in L1: a fused epilogue's
    /// input, or a plain GEMM's micro-tile on its way to C (see `Drain`).
    tile: AlignedBytes,
    /// The emulator's block kernel's prepared operands ([`Block2x2`]), lent to it for a region.
    prepared: Prepared2x2,
}

/// Bytes per row of the partial-sum buffer of `region`, and its size (0 when K is not split).
///
/// The buffer holds one block of C, `mc` rows by `nc` columns: [`nest`] runs every K block of
/// a block of C before it moves to the next, so the buffer is reused for each and stays in L2
/// (with the default blocking, 256 x 512 sums, 512 KiB).
fn acc_layout<P: Precision>(p: &Problem<'_, P>, region: &Region) -> Option<(usize, usize)> {
    let grouped = matches!(&p.target, Target::Fused(e) if e.group_steps().is_some());
    if !grouped && kc_steps(p, region) >= p.b.steps {
        return Some((0, 0));
    }
    let panels = region.panels.len().min(p.blocking.nc / NR);
    let ld = panels.checked_mul(SCRATCH_ROW)?;
    let rows = region.rows.len().min(p.blocking.mc);
    Some((ld, ld.checked_mul(rows)?))
}

/// Bytes of packed A the loop nest of `region` uses at most: [`nest`]'s largest block.
fn scratch_bytes<P: Precision>(p: &Problem<'_, P>, region: &Region) -> Option<usize> {
    let rows = region.rows.len().min(p.blocking.mc);
    packed_a_bytes(rows, a_chunk_steps(p, region))
}

/// The most bytes of A one packed block holds when it spans more than one K block: a block
/// packed once and reused for every column block must not outgrow a share of L2 on the way
/// to memory, and a worker's scratch stays bounded whatever K is.
const A_BLOCK_BYTES: usize = 1 << 20;

/// K-steps of A packed at once ([`nest`]): all of K when the block of `mc` rows fits
/// [`A_BLOCK_BYTES`] (then each block of A is packed once per call, however many column
/// blocks reuse it), else as many whole K blocks as fit (at least one).
fn a_chunk_steps<P: Precision>(p: &Problem<'_, P>, region: &Region) -> usize {
    let kc = kc_steps(p, region);
    let steps = p.b.steps;
    let rows = region.rows.len().min(p.blocking.mc).max(1);
    #[cfg(test)]
    let limit = tests::A_BLOCK_LIMIT.with(Cell::get);
    #[cfg(not(test))]
    let limit = A_BLOCK_BYTES;
    let fit = limit / (rows * ROW_BYTES);
    if steps <= fit.max(kc) {
        steps
    } else {
        (fit / kc).max(1) * kc
    }
}

/// K-steps per block of [`nest`]: a single micro-row reuses nothing of B, so it keeps C in the
/// tiles over all of K.
fn kc_steps<P: Precision>(p: &Problem<'_, P>, region: &Region) -> usize {
    let steps = p.b.steps;
    // Per-K-group scales: one K block per group, whose accumulators are folded after it.
    if let Target::Fused(e) = &p.target {
        if let Some(group) = e.group_steps() {
            return group.min(steps).max(1);
        }
    }
    if region.rows.len() <= MR {
        steps
    } else {
        p.blocking.kc_steps.min(steps)
    }
}

/// One worker: its regions, each under its own configuration.
///
/// Between a configuration and the last tile instruction under it, no code outside this crate
/// runs: the unchecked silicon path trusts that the loaded configuration is the one it asked
/// for, and a global allocator (or anything else a user supplies) could load another through
/// the runtime's safe API. So everything that allocates, and every check that may fail, is done
/// here first: the limits of this thread's unit, the packed-A scratch of every region and, with
/// a fused epilogue, the partial-sum buffer and the scratch tile (the epilogue's own per-column
/// parameters were prepared before the workers started). The epilogue that runs under the
/// configuration is this crate's code: it allocates nothing and calls nothing of the user's.
fn work<P: Precision>(p: &Problem<'_, P>, index: usize) -> Result<WorkerStats, GemmError> {
    let mut stats = WorkerStats::default();
    let regions = regions(p, index);
    if regions.is_empty() {
        return Ok(stats);
    }
    let limits = amx_runtime::tmul_limits_on(p.backend)?;
    let table = amx_runtime::palette_table_on(p.backend)?;
    if p.backend == Backend::Hardware {
        // Foreign AMX code on this thread (oneDNN, MKL, raw intrinsics) may have loaded its own
        // configuration, or released the tiles, since this thread's last call: the runtime's
        // tracked copy would then be stale, `configure` would skip the LDTILECFG, and the
        // unchecked silicon path would run under the other configuration (#UD, or wrong
        // shapes). One STTILECFG per worker and call (nanoseconds) brings the copy back to the
        // truth, so `configure` reloads when it must.
        amx_runtime::Hardware::new()
            .map_err(ConfigureError::Unavailable)?
            .resync();
    }
    let mut scratch_len = 0;
    let mut acc_len = 0;
    let mut panel_len = 0;
    for region in &regions {
        panel_len = panel_len.max(kc_steps(p, region).saturating_mul(STEP));
        configs::check_palette(region.shape, &table)?;
        configs::check_limits(region.shape, limits)?;
        let need = scratch_bytes(p, region).ok_or(GemmError::TooLarge {
            operand: Operand::A,
        })?;
        scratch_len = scratch_len.max(need);
        let (_, acc) = acc_layout(p, region).ok_or(GemmError::TooLarge {
            operand: Operand::C,
        })?;
        acc_len = acc_len.max(acc);
    }
    // The scratch tile: the fused epilogue's input, or the plain GEMM's finished micro-tile
    // on its way to C (see `Drain`).
    let tile_len = MR * SCRATCH_ROW;
    SCRATCH.with(|scratch| {
        let mut own = Buffers::default();
        let mut borrowed = scratch.try_borrow_mut();
        let scratch = match borrowed.as_deref_mut() {
            Ok(s) => s,
            Err(_) => &mut own,
        };
        scratch
            .a
            .reserve_len(scratch_len)
            .ok_or(GemmError::TooLarge {
                operand: Operand::A,
            })?;
        scratch
            .acc
            .reserve_len(acc_len)
            .ok_or(GemmError::TooLarge {
                operand: Operand::C,
            })?;
        scratch
            .tile
            .reserve_len(tile_len)
            .ok_or(GemmError::TooLarge {
                operand: Operand::C,
            })?;
        if p.backend == Backend::Emulated {
            scratch.prepared.reserve::<P>(scratch_len, panel_len);
        }
        for region in &regions {
            run_region(p, region, scratch, &mut stats)?;
        }
        Ok(stats)
    })
}

/// Configures the region's shape (loading it only if this thread does not hold it) and runs
/// the loop nest: full micro-tiles on the typed path, edges on the silicon path or the checked
/// path.
fn run_region<P: Precision>(
    p: &Problem<'_, P>,
    region: &Region,
    scratch: &mut Buffers,
    stats: &mut WorkerStats,
) -> Result<(), GemmError> {
    if region.shape == MicroShape::FULL {
        return match P::KIND {
            PrecisionKind::Int8 => run_typed::<P, typed::Int8Kernel>(p, region, scratch, stats),
            PrecisionKind::U8S8 => run_typed::<P, typed::U8S8Kernel>(p, region, scratch, stats),
            PrecisionKind::S8U8 => run_typed::<P, typed::S8U8Kernel>(p, region, scratch, stats),
            PrecisionKind::U8U8 => run_typed::<P, typed::U8U8Kernel>(p, region, scratch, stats),
            PrecisionKind::Bf16 => run_typed::<P, typed::Bf16Kernel>(p, region, scratch, stats),
            PrecisionKind::Fp16 => run_typed::<P, typed::Fp16Kernel>(p, region, scratch, stats),
            PrecisionKind::Bf8Bf8 => run_typed::<P, typed::Bf8Bf8Kernel>(p, region, scratch, stats),
            PrecisionKind::Hf8Hf8 => run_typed::<P, typed::Hf8Hf8Kernel>(p, region, scratch, stats),
            PrecisionKind::Bf8Hf8 => run_typed::<P, typed::Bf8Hf8Kernel>(p, region, scratch, stats),
            PrecisionKind::Hf8Bf8 => run_typed::<P, typed::Hf8Bf8Kernel>(p, region, scratch, stats),
        };
    }
    let cfg = configs::config(region.shape)?;
    let before = counters().loads;
    let mut tiles = configure_on(p.backend, cfg)?;
    stats.loads += counters().loads - before;
    stats.configs += 1;
    LAST_SHAPE.with(|s| s.set(Some(region.shape)));
    #[cfg(test)]
    let blocks = !crate::tile_ops::probe::PER_INSTRUCTION.with(Cell::get);
    #[cfg(not(test))]
    let blocks = true;
    // On the emulator the edge micro-tiles run as tile products on the packed operands (see
    // block_kernel.rs); the trap engine's silicon path runs instruction by instruction.
    if blocks && tiles.backend() == Backend::Emulated && TileKernel::of(P::KIND).is_some() {
        return nest(&mut BlockEdge::<P>::new(region.shape), p, region, scratch);
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(mut ops) = crate::tile_ops::Silicon::new(&mut tiles, P::KIND)? {
        return nest_for_shape(&mut ops, p, region, scratch);
    }
    nest_for_shape(&mut Checked::new(&mut tiles), p, region, scratch)
}

/// A region of full 32 x 32 micro-tiles through the typed tiles of `L`, the 2x2 layout of `P`
/// (whose configuration is the table's 32 x 32 entry), configured on the call's backend. On the
/// hardware, `Gemm::run` has checked the CPU feature of `P`'s instruction.
fn run_typed<P: Precision, L: Full2x2>(
    p: &Problem<'_, P>,
    region: &Region,
    scratch: &mut Buffers,
    stats: &mut WorkerStats,
) -> Result<(), GemmError> {
    let before = counters().loads;
    let mut tiles = configure_typed_on::<L>(p.backend)?;
    stats.loads += counters().loads - before;
    stats.configs += 1;
    LAST_SHAPE.with(|s| s.set(Some(region.shape)));
    #[cfg(test)]
    let blocks = !crate::tile_ops::probe::PER_INSTRUCTION.with(Cell::get);
    #[cfg(not(test))]
    let blocks = true;
    if blocks && tiles.untyped().backend() == Backend::Emulated {
        // The same loop nest, each task's k-loop as one block product (see block_kernel.rs);
        // the FP8 products, which have no 2x2 block kernel, as tile products.
        if P::KIND.dot_kind().is_some() {
            // The prepared operands' room, reserved before the configuration (`work`), lent to
            // the kernel and given back: moving them allocates nothing.
            let mut kernel = Block2x2::<P>::new(std::mem::take(&mut scratch.prepared));
            let ran = nest(&mut kernel, p, region, scratch);
            scratch.prepared = kernel.into_prepared();
            return ran;
        }
        if TileKernel::of(P::KIND).is_some() {
            return nest(
                &mut BlockEdge::<P>::new(MicroShape::FULL),
                p,
                region,
                scratch,
            );
        }
    }
    // On the silicon the typed layout's configuration is what the guard loaded, and the
    // instructions go straight to the intrinsics, as on the edges: the typed methods check per
    // instruction that their layout is still the loaded one and on which backend they run,
    // checks that the compiler does not always hoist out of the k-loop when it monomorphizes
    // this function in the caller's crate (measured: 20% of a 1024^3 product). The layout's
    // handles have proven the shapes at compile time, and `Silicon` relies on nothing more.
    #[cfg(target_arch = "x86_64")]
    if let Some(mut ops) = crate::tile_ops::Silicon::new(tiles.untyped(), P::KIND)? {
        return nest(
            &mut Amx2x2::<crate::tile_ops::Silicon<'_>, P, true, true>::new(&mut ops),
            p,
            region,
            scratch,
        );
    }
    let mut ops = Typed::new(&mut tiles, P::KIND)?;
    nest(
        &mut Amx2x2::<Typed<'_, L>, P, true, true>::new(&mut ops),
        p,
        region,
        scratch,
    )
}

/// Picks the micro-kernel variant of the region's shape.
fn nest_for_shape<P: Precision, O: TileOps>(
    ops: &mut O,
    p: &Problem<'_, P>,
    region: &Region,
    scratch: &mut Buffers,
) -> Result<(), GemmError> {
    match (region.shape.two_rows(), region.shape.two_cols()) {
        (true, true) => nest(
            &mut Amx2x2::<O, P, true, true>::new(ops),
            p,
            region,
            scratch,
        ),
        (true, false) => nest(
            &mut Amx2x2::<O, P, true, false>::new(ops),
            p,
            region,
            scratch,
        ),
        (false, true) => nest(
            &mut Amx2x2::<O, P, false, true>::new(ops),
            p,
            region,
            scratch,
        ),
        (false, false) => nest(
            &mut Amx2x2::<O, P, false, false>::new(ops),
            p,
            region,
            scratch,
        ),
    }
}

/// The BLIS loop nest over one region, with B prepacked.
///
/// When K is split, the micro-kernel of every K block but the last stores to the partial sums
/// (`scratch.acc`, this `mc` block's rows times this `nc` block's columns, reused for every
/// block of C and so in L2), and the last one loads them, adds its block and stores the
/// micro-tile to `scratch.tile` (4 KiB, in L1). From there a fused epilogue writes the output,
/// and a plain GEMM's next micro-kernel call copies it to C during its k-steps (see [`Drain`];
/// on the emulator's block kernels, which do not drain, a plain GEMM sums in C itself). Either
/// way C, or the output, is written once.
fn nest<P: Precision, K: MicroKernel>(
    kernel: &mut K,
    p: &Problem<'_, P>,
    region: &Region,
    scratch: &mut Buffers,
) -> Result<(), GemmError> {
    let steps = p.b.steps;
    let stride = p.b.panel_stride;
    let b = Mem::new(p.b.data);
    let blocking = p.blocking;
    let kc = kc_steps(p, region);
    let nc = blocking.nc / NR;
    let (acc_ld, acc_need) = acc_layout(p, region).ok_or(GemmError::TooLarge {
        operand: Operand::C,
    })?;
    let tile_need = MR * SCRATCH_ROW;
    let Buffers {
        a: a_buf,
        acc,
        tile,
        prepared: _,
    } = scratch;
    // `work` reserved these before configuring: slicing allocates nothing.
    let (Some(acc), Some(tile)) = (
        acc.as_bytes_mut().get_mut(..acc_need),
        tile.as_bytes_mut().get_mut(..tile_need),
    ) else {
        return Err(GemmError::TooLarge {
            operand: Operand::C,
        });
    };
    let acc = MemMut::new(acc);
    let tile_mem = MemMut::new(tile);
    // The fused epilogue's working rows, for every micro-tile of the nest.
    let mut staged = [[0f32; NR]; MR];
    let grouped = matches!(&p.target, Target::Fused(e) if e.group_steps().is_some());
    let (rows, cols) = region.shape.dims();
    // A is packed in chunks of `ka` k-steps: all of K unless a block of mc rows would outgrow
    // A_BLOCK_BYTES. With one chunk, each block of A is packed once and serves every column
    // block; with several, a chunk is repacked per column block (K is then long enough for the
    // packing to be a small share of the work).
    let ka = a_chunk_steps(p, region);
    let single_chunk = ka >= steps;
    // The last micro-tile stored to the scratch tile and not yet copied to C (a plain GEMM) or
    // through the epilogue to the output (a fused one).
    let mut pending: Option<Pending<'_>> = None;
    // Streaming stores to C or the output (`Drain::copy`, `Deferred::run`) are fenced on
    // every way out of the nest.
    let _fence = Fence::new(match &p.target {
        Target::Plain { stream, .. } => *stream,
        Target::Fused(e) => e.streams(),
    });
    // LOOP 3: ic over the region's rows in blocks of mc; pack A[ic.., k0..] (pack.rs).
    for ic in region.rows.clone().step_by(blocking.mc) {
        let ic_end = ic.saturating_add(blocking.mc).min(region.rows.end);
        // LOOP 5: jc over the region's panels in blocks of nc columns (B block: kc x nc, in L2).
        for (j, jc) in region.panels.clone().step_by(nc).enumerate() {
            let jc_end = jc.saturating_add(nc).min(region.panels.end);
            for k0 in (0..steps).step_by(ka) {
                let kchunk = ka.min(steps - k0);
                // `work` reserved the largest block before configuring: slicing allocates
                // nothing (see `work`), and a block that did not fit is an error, not a
                // reallocation.
                let need = packed_a_bytes(ic_end - ic, kchunk).ok_or(GemmError::TooLarge {
                    operand: Operand::A,
                })?;
                let block = a_buf
                    .as_bytes_mut()
                    .get_mut(..need)
                    .ok_or(GemmError::TooLarge {
                        operand: Operand::A,
                    })?;
                if j == 0 || !single_chunk {
                    pack::pack_a(p.a, ic..ic_end, k0, kchunk, block);
                    kernel.prepare_a(block);
                }
                let a = Mem::new(&a_buf.as_bytes()[..need]);
                // LOOP 4: pc over the chunk in blocks of kc k-steps (B is already packed: the
                // block is the k-steps pc..pc+kc of each panel).
                for pc in (k0..k0 + kchunk).step_by(kc) {
                    let kcur = kc.min(k0 + kchunk - pc);
                    let last = pc + kcur >= steps;
                    // LOOP 2: ir over the packed block in micro-panels of mr = 32 rows, and
                    // LOOP 1: jr over the B block in panels of nr = 32 columns, streamed from L2
                    // past the micro-panel; or, for a kernel that prepares each panel of B
                    // once (`MicroKernel::b_panels_outer`), every micro-panel against a panel
                    // before the next panel. Each micro-tile is the same task either way.
                    let micro_panels = (ic_end - ic).div_ceil(MR);
                    let panels = jc_end - jc;
                    let b_outer = kernel.b_panels_outer(micro_panels);
                    for index in 0..micro_panels * panels {
                        let (q, jr) = if b_outer {
                            (index % micro_panels, jc + index / micro_panels)
                        } else {
                            (index / panels, jc + index % panels)
                        };
                        let ir = ic + q * MR;
                        let a_step = pack::packed_a_step(ic_end - ir);
                        {
                            // Where the micro-tile is stored, and loaded from when accumulating.
                            let mut deferred = None;
                            // This micro-tile's place in the partial sums.
                            let part = (ir - ic) * acc_ld + (jr - jc) * SCRATCH_ROW;
                            let (c, c_offset, ldc_bytes, accumulate, c_src, src_offset, src_ld) =
                                match &p.target {
                                    Target::Plain {
                                        c,
                                        ldc_bytes,
                                        accumulate,
                                        stream,
                                    } if kernel.drains() => {
                                        // The earlier K blocks sum into the partial sums, in
                                        // L2, and the last one goes to the scratch tile, which
                                        // the next call copies to C (see `Drain`): C's lines,
                                        // usually in no cache, are written once and read by
                                        // the kernel only when the caller accumulates.
                                        let at = ir * ldc_bytes + jr * NR * 4;
                                        let acc_in = *accumulate || pc > 0;
                                        let (src, s_at, s_ld) = if pc == 0 {
                                            (Mem::from(*c), at, *ldc_bytes)
                                        } else {
                                            (Mem::from(acc), part, acc_ld)
                                        };
                                        if last {
                                            deferred = Some(Pending::Copy(
                                                Drain::new(
                                                    Mem::from(tile_mem),
                                                    *c,
                                                    at,
                                                    *ldc_bytes,
                                                    (rows, cols * 4),
                                                    *stream,
                                                )
                                                .ok_or(GemmError::TooLarge {
                                                    operand: Operand::C,
                                                })?,
                                            ));
                                            (tile_mem, 0, SCRATCH_ROW, acc_in, src, s_at, s_ld)
                                        } else {
                                            (acc, part, acc_ld, acc_in, src, s_at, s_ld)
                                        }
                                    }
                                    Target::Plain {
                                        c,
                                        ldc_bytes,
                                        accumulate,
                                        ..
                                    } => {
                                        let at = ir * ldc_bytes + jr * NR * 4;
                                        let acc_in = *accumulate || pc > 0;
                                        (*c, at, *ldc_bytes, acc_in, Mem::from(*c), at, *ldc_bytes)
                                    }
                                    Target::Fused(_) => {
                                        let at = part;
                                        let src = Mem::from(acc);
                                        if grouped {
                                            // Each group starts from zero; `fold` adds it to the
                                            // partial sums at `at`.
                                            (tile_mem, 0, SCRATCH_ROW, false, src, at, acc_ld)
                                        } else if last {
                                            (tile_mem, 0, SCRATCH_ROW, pc > 0, src, at, acc_ld)
                                        } else {
                                            (acc, at, acc_ld, pc > 0, src, at, acc_ld)
                                        }
                                    }
                                };
                            let task = MicroTask {
                                a,
                                a_offset: q * kchunk * STEP + (pc - k0) * a_step,
                                a_step,
                                b,
                                b_offset: jr * stride + pc * STEP,
                                steps: kcur,
                                c,
                                c_offset,
                                ldc_bytes,
                                accumulate,
                                c_src,
                                c_src_offset: src_offset,
                                c_src_ld: src_ld,
                                prefetch: blocking.prefetch_steps.saturating_mul(STEP),
                                drain: pending.take(),
                            };
                            // SAFETY: the caller configured this region's shape, whose kernel
                            // variant `K` is; A is the block just packed (alive in `scratch`), B the
                            // packed panels. C is the caller's buffer whose rows ir.. and columns
                            // 32 jr.. belong to this worker only (regions of different workers are
                            // disjoint), and the micro-tile lies inside it because the region's
                            // shape is exactly what remains of M and N there; or this worker's
                            // own partial sums (the rows of this mc block times the columns of
                            // this nc block, so the micro-tile at (ir - ic, jr - jc) lies inside);
                            // or its scratch tile (32 rows of 128 bytes), with a drain that
                            // `Drain::new` or `Deferred::new` checked to lie inside both buffers
                            // (C's or the output's rows of this worker's rectangle). The
                            // configuration is still the region's: since `configure`, only this
                            // loop nest, `pack_a`, the micro-kernel and the epilogue (`apply`) have
                            // run, none of which calls code outside the crate or allocates (`work`
                            // reserved the buffers first, `Prepared::new` the epilogue's).
                            unsafe { kernel.run(&task)? };
                            pending = deferred;
                            if grouped {
                                if let Target::Fused(e) = &p.target {
                                    let at = part;
                                    // SAFETY: `tile_mem` as below; `acc` is the `acc_need` bytes of
                                    // `scratch.acc`, alive for this function and used by this thread
                                    // only: in this mode the micro-kernel writes `tile_mem`, never
                                    // `acc`, so this is the only access to it while the slice lives
                                    // (it is dropped at the end of this block).
                                    let (stored, partial) = unsafe {
                                        (
                                            std::slice::from_raw_parts(
                                                tile_mem.ptr().cast_const(),
                                                tile_need,
                                            ),
                                            std::slice::from_raw_parts_mut(acc.ptr(), acc_need),
                                        )
                                    };
                                    let partial =
                                        partial.get_mut(at..).ok_or(GemmError::TooLarge {
                                            operand: Operand::C,
                                        })?;
                                    e.fold(
                                        stored,
                                        partial,
                                        acc_ld,
                                        (rows, cols),
                                        pc / kc,
                                        (pc == 0, last),
                                        (ir, jr * NR),
                                    )?;
                                }
                            } else if last {
                                if let Target::Fused(e) = &p.target {
                                    // Where the epilogue allows it (see deferred.rs), one
                                    // row at a time in registers: during the next call when
                                    // the kernel drains, else now. Otherwise stage by stage.
                                    let one_pass = e.deferred(
                                        Mem::from(tile_mem),
                                        (rows, cols),
                                        (ir, jr * NR),
                                    );
                                    if let Some(d) = one_pass {
                                        if kernel.drains() {
                                            pending = Some(Pending::Epilogue(d));
                                        } else {
                                            // SAFETY: the scratch tile the call just stored, and
                                            // this worker's output rows (`deferred` checked
                                            // both), which nothing else touches meanwhile.
                                            unsafe { d.run(0, d.rows()) };
                                        }
                                        continue;
                                    }
                                    // SAFETY: `tile_mem` is the `tile_need` bytes of
                                    // `scratch.tile`, alive for this function and touched by this
                                    // thread only, through `tile_mem` only (the `&mut` it was made
                                    // from is not used again); the micro-kernel's stores to it
                                    // precede this read in program order, and the slice is dropped
                                    // before the next micro-kernel call writes it again.
                                    let stored = unsafe {
                                        std::slice::from_raw_parts(
                                            tile_mem.ptr().cast_const(),
                                            tile_need,
                                        )
                                    };
                                    e.apply(stored, (rows, cols), (ir, jr * NR), &mut staged)?;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    if let Some(d) = pending {
        // SAFETY: the last micro-tile, stored to the scratch tile by the last call, which no
        // one writes any more; its rows of C (or of the output) are this worker's.
        unsafe { d.run(0, d.rows()) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// [`A_BLOCK_BYTES`] for calls on this thread, so that a test can make A's packed
        /// chunks smaller than K.
        pub(super) static A_BLOCK_LIMIT: Cell<usize> = const { Cell::new(A_BLOCK_BYTES) };
    }

    /// With A packed in several chunks of K (a block of A larger than the limit), plain and
    /// fused products still equal the reference, on full micro-tiles and edges alike.
    #[test]
    fn a_packed_in_chunks_of_k() {
        use crate::epilogue::Epilogue;
        let (m, n, k) = (72, 70, 64 * 7 + 5);
        let a: Vec<i8> = (0..m * k).map(|i| (i * 7 % 23) as i8 - 11).collect();
        let b: Vec<i8> = (0..k * n).map(|i| (i * 5 % 19) as i8 - 9).collect();
        let packed = PackedB::<crate::Int8>::pack(&b, k, n, n).unwrap();
        let mut want = vec![0i32; m * n];
        crate::reference::gemm::<crate::Int8>(m, n, k, &a, k, &b, n, &mut want, n, Mode::Overwrite)
            .unwrap();
        // kc = 2 k-steps; the limit fits 3 k-steps of 64 rows (mc), so A is packed 2 k-steps
        // at a time: 4 chunks for 8 k-steps.
        let blocking = Blocking {
            nc: 32,
            kc_steps: 2,
            mc: 64,
            prefetch_steps: 1,
        };
        A_BLOCK_LIMIT.with(|l| l.set(3 * 64 * ROW_BYTES));
        let gemm = Gemm::new()
            .threads(1)
            .backend(Backend::Emulated)
            .blocking(blocking);
        let mut c = vec![7i32; m * n];
        gemm.run(m, &a, k, &packed, &mut c, n).unwrap();
        let mut y = vec![0f32; m * n];
        gemm.run_with(
            crate::MatRef::new(&a, m, k),
            &packed,
            crate::MatMut::new(&mut y, m, n),
            &Epilogue::new(),
        )
        .unwrap();
        A_BLOCK_LIMIT.with(|l| l.set(A_BLOCK_BYTES));
        assert_eq!(c, want);
        let want_f: Vec<f32> = want.iter().map(|&x| x as f32).collect();
        assert_eq!(y, want_f);
    }

    #[test]
    fn grid_balances_work_then_traffic() {
        assert_eq!(grid(1, 10, 10, 8), (1, 1));
        // Equal work: the rows split, each worker packing half of A for the same B traffic.
        assert_eq!(grid(2, 32, 32, 8), (2, 1));
        assert_eq!(grid(2, 64, 64, 8), (2, 1));
        // Equal work, few rows: the columns split, each worker reading half of B.
        assert_eq!(grid(2, 8, 128, 8), (1, 2));
        // Unequal work decides first.
        assert_eq!(grid(2, 1, 128, 8), (1, 2));
        assert_eq!(grid(2, 128, 1, 8), (2, 1));
        assert_eq!(grid(4, 8, 2, 8), (4, 1));
        assert_eq!(grid(3, 1, 2, 8), (1, 3));
        // Any blocking, even a zero, is a valid input.
        assert_eq!(grid(4, 32, 32, 0), (4, 1));
        assert_eq!(grid(2, usize::MAX, usize::MAX, 1), (1, 2));
    }

    /// Runs `m x n x k` of `P` on the emulator on this thread, accumulating into a non-zero C,
    /// checks the result against the reference and returns the dot products the typed (or,
    /// with `blocks`, the block) and the checked paths issued.
    fn dots_of<P: Precision>(m: usize, n: usize, k: usize, blocks: bool) -> (u64, u64) {
        use crate::precision::Scalar;
        use crate::tile_ops::probe;
        let a: Vec<P::A> = (0..m * k)
            .map(|i| P::A::from_f64((i * 7 % 11) as f64 - 3.0))
            .collect();
        let b: Vec<P::B> = (0..k * n)
            .map(|i| P::B::from_f64((i * 5 % 9) as f64 - 4.0))
            .collect();
        let mut c: Vec<P::C> = (0..m * n)
            .map(|i| P::C::from_f64((i % 13) as f64))
            .collect();
        let mut want = c.clone();
        crate::reference::gemm::<P>(m, n, k, &a, k, &b, n, &mut want, n, Mode::Accumulate).unwrap();
        probe::PER_INSTRUCTION.with(|f| f.set(!blocks));
        let before = (probe::dots(), probe::block_dots());
        Gemm::new()
            .threads(1)
            .backend(Backend::Emulated)
            .mode(Mode::Accumulate)
            .run_unpacked::<P>(
                MatRef::new(&a, m, k),
                BRef::k_by_n(&b, k, n),
                MatMut::new(&mut c, m, n),
            )
            .unwrap();
        let after = (probe::dots(), probe::block_dots());
        probe::PER_INSTRUCTION.with(|f| f.set(false));
        // Small integers: every sum is exact in f32 too, so bf16 compares exactly.
        assert_eq!(c, want, "{} {m}x{n}x{k}", P::KIND);
        let full = if blocks {
            assert_eq!(after.0 .0, before.0 .0, "typed dots on the block path");
            after.1 - before.1
        } else {
            assert_eq!(after.1, before.1, "block dots on the typed path");
            after.0 .0 - before.0 .0
        };
        (full, after.0 .1 - before.0 .1)
    }

    fn typed_path_for<P: Precision>(blocks: bool) {
        let dots_of = |m, n, k| dots_of::<P>(m, n, k, blocks);
        let steps = |k: usize| k.div_ceil(P::KIND.k_per_step()) as u64;
        // (full micro-tiles, edges): per instruction the edges run on the checked path; as
        // block products (the emulator's default) they are tile products too.
        let expect = |full: u64, edges: u64| {
            if blocks {
                (full + edges, 0)
            } else {
                (full, edges)
            }
        };
        // Only full micro-tiles: 2 x 3 of them, four dot products per k-step each, all typed.
        assert_eq!(
            dots_of(64, 96, 128),
            expect(6 * 4 * steps(128), 0),
            "{}",
            P::KIND
        );
        // One full micro-tile and the right edge (2 dots per k-step), bottom edge (2) and
        // corner (1).
        assert_eq!(
            dots_of(40, 40, 64),
            expect(4 * steps(64), 5 * steps(64)),
            "{}",
            P::KIND
        );
        // Only edges (20 x 31 is the 2x2 variant of an edge shape).
        assert_eq!(dots_of(20, 31, 64), expect(0, 4 * steps(64)), "{}", P::KIND);
        assert_eq!(dots_of(12, 9, 64), expect(0, steps(64)), "{}", P::KIND);
    }

    #[test]
    fn full_micro_tiles_run_on_the_typed_path() {
        typed_path_for::<crate::Int8>(false);
        typed_path_for::<crate::U8S8>(false);
        typed_path_for::<crate::Bf16>(false);
        typed_path_for::<crate::S8U8>(false);
        typed_path_for::<crate::U8U8>(false);
        typed_path_for::<crate::Fp16>(false);
        typed_path_for::<crate::Bf8Bf8>(false);
        typed_path_for::<crate::Hf8Hf8>(false);
        typed_path_for::<crate::Bf8Hf8>(false);
        typed_path_for::<crate::Hf8Bf8>(false);
    }

    /// On the emulator the micro-tiles run as block products by default (full ones as 2x2
    /// blocks, the edges as tile products), with the same results and the same dot products.
    #[test]
    fn full_micro_tiles_run_as_blocks_on_the_emulator() {
        typed_path_for::<crate::Int8>(true);
        typed_path_for::<crate::U8S8>(true);
        typed_path_for::<crate::Bf16>(true);
        typed_path_for::<crate::S8U8>(true);
        typed_path_for::<crate::U8U8>(true);
        typed_path_for::<crate::Fp16>(true);
        // The FP8 products, through tile products (there is no 2x2 kernel for them).
        typed_path_for::<crate::Bf8Bf8>(true);
        typed_path_for::<crate::Hf8Hf8>(true);
        typed_path_for::<crate::Bf8Hf8>(true);
        typed_path_for::<crate::Hf8Bf8>(true);
    }

    #[test]
    fn typed_path_rejects_out_of_bounds_on_the_emulator() {
        use crate::configs::typed::Int8Kernel;
        use crate::configs::C00;
        use crate::tile_ops::{Mem, TileOps, Typed};
        let mut tiles = configure_typed_on::<Int8Kernel>(Backend::Emulated).unwrap();
        let buf = [0u8; 16 * 64];
        let mut ops = Typed::new(&mut tiles, crate::precision::PrecisionKind::Int8).unwrap();
        // SAFETY: the emulator checks the bounds before any access (that is what is tested).
        unsafe {
            ops.load::<C00>(Mem::new(&buf), 0, 64).unwrap();
            assert!(ops.load::<C00>(Mem::new(&buf), 1, 64).is_err());
            assert!(ops.load::<C00>(Mem::new(&buf), 0, 65).is_err());
        }
        // The wrong precision for the layout is refused.
        assert!(Typed::new(&mut tiles, crate::precision::PrecisionKind::Bf16).is_err());
    }

    #[test]
    fn parts_cover_the_range() {
        let v: Vec<_> = (0..3).map(|i| part(10, 3, i)).collect();
        assert_eq!(v, vec![0..3, 3..6, 6..10]);
        assert!(part(1, 3, 0).is_empty());
    }
}
