//! Packing: B into the VNNI tile layout once ([`PackedB`]), A into tile-row blocks per call.
//!
//! # The packed B layout
//!
//! B (K x N, row-major) is cut into **panels** of [`NR`] = 32 columns, the width of the
//! micro-kernel's two B tiles. K is padded with zeros to a whole number of **k-steps** of
//! [`PrecisionKind::k_per_step`] elements (64 int8 or 32 bf16: one 64-byte row of an A tile). Each
//! panel is stored contiguously, k-step after k-step; each k-step is two 1 KiB tiles (columns
//! 0..16 and 16..32 of the panel), each tile 16 rows of 64 bytes in the VNNI layout of
//! [semantics.md section 8](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#8-the-dot-products-class-amx-e4):
//!
//! ```text
//! tile row r, bytes 4j..4j+4 = B[s*kt + g*r + i][32p + 16h + j], i < g   (g = 4 int8, 2 bf16)
//!
//! panel p:  | step 0: tile h=0 | tile h=1 | step 1: tile 0 | tile 1 | ... | 1 KiB gap |
//! panel p+1 starts panel_stride bytes later
//! ```
//!
//! Columns past N and k past K are zero. Why this order:
//! - A panel is read front to back by one micro-kernel sweep, so the whole of B streams
//!   sequentially when M is small (the bandwidth-bound case), which the hardware prefetchers
//!   follow, and every tile load is 1 KiB of consecutive memory (row stride 64).
//! - The layout does not depend on the blocking (kc, nc): the same packed weights serve every
//!   thread count and blocking choice.
//! - `panel_stride` is an odd number of KiB: the kc-chunks of consecutive panels that make up
//!   one L2-resident block then spread over all L2 sets instead of piling into the same ones
//!   (with K a power of two, a plain stride would be a multiple of the 128 KiB L2 way size).
//!
//! # The packed A block
//!
//! Per call, rows of A are copied into [`MR`] = 32-row micro-panels, k-step after k-step; a
//! k-step of a panel of `r` rows is its `r` rows of 64 bytes (K tail zero-padded), so the two A
//! tiles of a full panel are at `+0` and `+1024`, a k-step is `64 r` bytes, and a micro-panel is
//! `64 r x steps` bytes of consecutive memory that stays in L1 while the micro-kernel sweeps the
//! B panels. A panel of one row (M = 1) takes 64 bytes per k-step, not a whole tile.

use std::fmt;
use std::marker::PhantomData;
use std::sync::OnceLock;

use crate::error::{check_slice, GemmError, Operand};
use crate::matrix::BRef;
use crate::precision::{bytes_of, Precision, PrecisionKind, Scalar, ROW_BYTES};

/// Columns of one packed B panel (two tiles of 16 columns): the micro-kernel's N.
pub const NR: usize = 32;
/// Rows of one packed A micro-panel (two tiles of 16 rows): the micro-kernel's M.
pub const MR: usize = 32;
/// Bytes of one tile (16 rows of 64 bytes).
pub(crate) const TILE: usize = 16 * ROW_BYTES;
/// Bytes of one k-step of a micro-panel (two tiles).
pub(crate) const STEP: usize = 2 * TILE;
/// The gap after each B panel, so that the panel stride is an odd number of KiB.
const PANEL_GAP: usize = 1024;

/// 64 bytes aligned to 64: buffers of these are cache-line aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [u8; 64]);

/// A zeroed, 64-byte-aligned byte buffer.
#[derive(Clone, Default)]
pub(crate) struct AlignedBytes {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedBytes {
    /// `len` zero bytes, or `None` when the allocation fails.
    pub(crate) fn try_zeroed(len: usize) -> Option<AlignedBytes> {
        let mut lines = Vec::new();
        lines.try_reserve_exact(len.div_ceil(64)).ok()?;
        lines.resize(len.div_ceil(64), Line([0; 64]));
        Some(AlignedBytes { lines, len })
    }

    /// Grows to at least `len` bytes (new bytes are zero), keeping the contents; `None` when
    /// the allocation fails.
    pub(crate) fn reserve_len(&mut self, len: usize) -> Option<()> {
        if len > self.len {
            let lines = len.div_ceil(64);
            self.lines
                .try_reserve_exact(lines.saturating_sub(self.lines.len()))
                .ok()?;
            self.lines.resize(lines, Line([0; 64]));
            self.len = len;
        }
        Some(())
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY: `lines` holds at least `len` initialized bytes (Line is plain bytes with no
        // padding), borrowed for the lifetime of `&self`.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<u8>(), self.len) }
    }

    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_bytes`, with the unique borrow of `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

/// Number of k-steps that hold `k` elements.
pub(crate) fn steps_for(dtype: PrecisionKind, k: usize) -> usize {
    k.div_ceil(dtype.k_per_step())
}

/// B (K x N) packed once into the tile layout the micro-kernel reads (see the
/// [module docs](self)): the inference convention of packing the weights ahead of time.
///
/// ```
/// use amx_gemm::{Int8, PackedB};
///
/// let (k, n) = (3, 2);
/// let b: Vec<i8> = vec![1, 2, 3, 4, 5, 6]; // 3 x 2, row-major
/// let packed = PackedB::<Int8>::pack(&b, k, n, n).unwrap();
/// assert_eq!((packed.k(), packed.n()), (3, 2));
/// assert!(PackedB::<Int8>::pack(&b, k, n, 1).is_err()); // ldb < n
/// ```
#[derive(Clone)]
pub struct PackedB<P: Precision> {
    k: usize,
    n: usize,
    steps: usize,
    panels: usize,
    panel_stride: usize,
    data: AlignedBytes,
    /// Per column of B, the sum of its K elements (int8 precisions; empty for the float precisions): what the
    /// zero point of the activations is compensated with (see
    /// [`Epilogue`](crate::Epilogue)).
    col_sums: Vec<i32>,
    /// Per k-step (64 rows of K) and column, the sum of B's elements in it, `[step][n]`
    /// (int8 precisions): computed from the packed data on the first call with per-K-group
    /// weight scales and a zero point, then kept, so later calls pay nothing for it.
    step_sums: OnceLock<Vec<i32>>,
    _precision: PhantomData<P>,
}

impl<P: Precision> std::fmt::Debug for PackedB<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedB")
            .field("dtype", &P::KIND)
            .field("k", &self.k)
            .field("n", &self.n)
            .field("steps", &self.steps)
            .field("panels", &self.panels)
            .field("panel_stride", &self.panel_stride)
            .finish()
    }
}

impl<P: Precision> PackedB<P> {
    /// Packs B given row-major: element `(k, n)` at `b[k * ldb + n]`, `ldb >= n`.
    ///
    /// # Errors
    ///
    /// Checked before anything is allocated: [`GemmError::LeadingDimension`] when `ldb < n`,
    /// [`GemmError::SliceTooShort`] when `b` is shorter than `(k - 1) * ldb + n`, and
    /// [`GemmError::TooLarge`] when that or the packed size overflows (or cannot be
    /// allocated). An empty B (`k` or `n` zero) packs to nothing, whatever `ldb` and `b` are.
    pub fn pack(b: &[P::B], k: usize, n: usize, ldb: usize) -> Result<PackedB<P>, GemmError> {
        check_slice(Operand::B, k, n, ldb, b.len())?;
        let mut packed = Self::allocate(k, n)?;
        if k == 0 || n == 0 {
            // Nothing to copy (and `b` may be empty whatever `ldb` is).
            return Ok(packed);
        }
        if let Some(sums) = packed.col_sums_mut() {
            let src = bytes_of(b);
            for kk in 0..k {
                for (sum, &x) in sums.iter_mut().zip(&src[kk * ldb..kk * ldb + n]) {
                    *sum = sum.wrapping_add(b_value(P::KIND, x));
                }
            }
        }
        let size = P::KIND.input_bytes();
        let group = P::KIND.group();
        let kt = P::KIND.k_per_step();
        let src = bytes_of(b);
        let stride = packed.panel_stride;
        let out = packed.data.as_bytes_mut();
        // One tile row at a time: `group` consecutive rows of B interleaved into 64 bytes per
        // 16 columns, for every panel. Rows of B are read front to back.
        for kk0 in (0..k).step_by(group) {
            let (s, r) = (kk0 / kt, (kk0 % kt) / group);
            for i in 0..group.min(k - kk0) {
                let row = &src[(kk0 + i) * ldb * size..][..n * size];
                for (col16, chunk) in row.chunks(16 * size).enumerate() {
                    let (p, h) = (col16 / 2, col16 % 2);
                    let at = p * stride + s * STEP + h * TILE + r * ROW_BYTES + i * size;
                    let dst = &mut out[at..at + ROW_BYTES];
                    for (j, element) in chunk.chunks_exact(size).enumerate() {
                        dst[4 * j..4 * j + size].copy_from_slice(element);
                    }
                }
            }
        }
        Ok(packed)
    }

    /// Packs B given as its transpose, row-major: element `(k, n)` of B at `bt[n * ldbt + k]`,
    /// `ldbt >= k` (the `N x K` "out features x in features" layout weights are often stored
    /// in).
    ///
    /// # Errors
    ///
    /// As [`PackedB::pack`], with `bt` checked as an `n x k` matrix with leading dimension
    /// `ldbt`.
    pub fn pack_transposed(
        bt: &[P::B],
        k: usize,
        n: usize,
        ldbt: usize,
    ) -> Result<PackedB<P>, GemmError> {
        check_slice(Operand::B, n, k, ldbt, bt.len())?;
        Self::pack_with(k, n, |kk, nn| bt[nn * ldbt + kk])
    }

    /// Packs B given as a [`BRef`]: `K x N` or `N x K` (its [`BLayout`](crate::BLayout)), any
    /// leading dimension, as [`PackedB::pack`] or [`PackedB::pack_transposed`] does.
    ///
    /// ```
    /// use amx_gemm::{BRef, Int8, PackedB};
    ///
    /// let w: Vec<i8> = vec![1, 2, 3, 4, 5, 6]; // N x K = 2 x 3
    /// let packed = PackedB::<Int8>::pack_ref(BRef::n_by_k(&w, 3, 2)).unwrap();
    /// assert_eq!(packed.get(2, 1), Some(6)); // B[2][1] = w[1][2]
    /// ```
    ///
    /// # Errors
    /// As [`PackedB::pack`], for the stored matrix.
    pub fn pack_ref(b: BRef<'_, P::B>) -> Result<PackedB<P>, GemmError> {
        match b.layout {
            crate::BLayout::KxN => Self::pack(b.data, b.k, b.n, b.ld),
            crate::BLayout::NxK => Self::pack_transposed(b.data, b.k, b.n, b.ld),
        }
    }

    /// Bytes of the packed form of a `k x n` B: what [`PackedB::pack`] allocates (exactly),
    /// without allocating it, e.g. to check a problem against the memory available first.
    ///
    /// ```
    /// use amx_gemm::{Int8, PackedB};
    ///
    /// let bytes = PackedB::<Int8>::bytes_for(3, 2).unwrap();
    /// assert_eq!(bytes, PackedB::<Int8>::pack(&[0; 6], 3, 2, 2).unwrap().packed_bytes());
    /// assert!(PackedB::<Int8>::bytes_for(usize::MAX, usize::MAX).is_err());
    /// ```
    ///
    /// # Errors
    /// [`GemmError::TooLarge`] when the size does not fit `isize`.
    pub fn bytes_for(k: usize, n: usize) -> Result<usize, GemmError> {
        Ok(Self::layout(k, n)?.2)
    }

    /// The layout of a packed `k x n` B: (steps, panels, panel stride, total bytes).
    fn layout(k: usize, n: usize) -> Result<(usize, usize, usize, usize), GemmError> {
        let steps = steps_for(P::KIND, k);
        let panels = n.div_ceil(NR);
        let panel_stride = if steps == 0 || panels == 0 {
            0
        } else {
            steps
                .checked_mul(STEP)
                .and_then(|x| x.checked_add(PANEL_GAP))
                .ok_or(GemmError::TooLarge {
                    operand: Operand::B,
                })?
        };
        let total = panels
            .checked_mul(panel_stride)
            .filter(|&t| t <= isize::MAX as usize)
            .ok_or(GemmError::TooLarge {
                operand: Operand::B,
            })?;
        Ok((steps, panels, panel_stride, total))
    }

    /// The column sums to fill at pack time: `Some` (zeroed, N of them) for the int8
    /// precisions, `None` for the float precisions.
    fn col_sums_mut(&mut self) -> Option<&mut [i32]> {
        if P::KIND.is_integer() {
            Some(&mut self.col_sums)
        } else {
            None
        }
    }

    /// Column sums are kept for the int8 precisions only.
    fn has_col_sums() -> bool {
        P::KIND.is_integer()
    }

    /// A zeroed packed B of `k x n` (nothing at all when B is empty, however large the other
    /// dimension), with zeroed column sums for the int8 precisions.
    fn allocate(k: usize, n: usize) -> Result<PackedB<P>, GemmError> {
        let (steps, panels, panel_stride, total) = Self::layout(k, n)?;
        let mut col_sums = Vec::new();
        // With K = 0 every sum is 0 and none is stored (N may then be any size: nothing else
        // is allocated either).
        if Self::has_col_sums() && k > 0 {
            col_sums
                .try_reserve_exact(n)
                .map_err(|_| GemmError::TooLarge {
                    operand: Operand::B,
                })?;
            col_sums.resize(n, 0);
        }
        Ok(PackedB {
            k,
            n,
            steps,
            panels,
            panel_stride,
            data: AlignedBytes::try_zeroed(total).ok_or(GemmError::TooLarge {
                operand: Operand::B,
            })?,
            col_sums,
            step_sums: OnceLock::new(),
            _precision: PhantomData,
        })
    }

    /// Packs element `(kk, nn)` from `at(kk, nn)`: the general (slower) path.
    fn pack_with(
        k: usize,
        n: usize,
        at: impl Fn(usize, usize) -> P::B,
    ) -> Result<PackedB<P>, GemmError> {
        let mut packed = Self::allocate(k, n)?;
        if k == 0 || n == 0 {
            return Ok(packed);
        }
        let dtype = P::KIND;
        let panel_stride = packed.panel_stride;
        let out = packed.data.as_bytes_mut();
        let sums = &mut packed.col_sums;
        let size = dtype.input_bytes();
        let group = dtype.group();
        let kt = dtype.k_per_step();
        let mut element = [0u8; 2];
        for kk in 0..k {
            let (s, within) = (kk / kt, kk % kt);
            let (r, i) = (within / group, within % group);
            // Offset of (step s, tile row r, element i of group 0) in panel 0.
            let row_base = s * STEP + r * ROW_BYTES + i * size;
            for nn in 0..n {
                let (p, col) = (nn / NR, nn % NR);
                let (h, j) = (col / 16, col % 16);
                let at_byte = p * panel_stride + row_base + h * TILE + j * 4;
                let value = at(kk, nn);
                if let Some(sum) = sums.get_mut(nn) {
                    // Empty for bf16; an int8 element's value is its i8 (or, for u8s8's B, i8).
                    *sum = sum.wrapping_add(value.to_f64() as i32);
                }
                let bytes = bytes_of(std::slice::from_ref(&value));
                element[..size].copy_from_slice(bytes);
                out[at_byte..at_byte + size].copy_from_slice(&element[..size]);
            }
        }
        Ok(packed)
    }

    /// Rows of B (the K of the product).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns of B (the N of the product).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Bytes of packed storage (including the zero padding of K, N and the panel gaps).
    pub fn packed_bytes(&self) -> usize {
        self.data.len
    }

    /// Per column `n` of B, `sum_k B[k][n]` (wrapping in `i32`), computed once at pack time:
    /// what a zero point of the activations is compensated with
    /// ([`Epilogue::quantized`](crate::Epilogue::quantized)). `None` for the float precisions; empty when K is
    /// 0 (every sum is 0).
    pub fn col_sums(&self) -> Option<&[i32]> {
        Self::has_col_sums().then_some(&self.col_sums[..])
    }

    /// The element `(k, n)` of B read back from the packed layout (zero padding is not
    /// reachable: `None` outside `k x n`). For tests and inspection; not fast.
    pub fn get(&self, k: usize, n: usize) -> Option<P::B> {
        if k >= self.k || n >= self.n {
            return None;
        }
        let dtype = P::KIND;
        let (kt, group, size) = (dtype.k_per_step(), dtype.group(), dtype.input_bytes());
        let (s, within) = (k / kt, k % kt);
        let (r, i) = (within / group, within % group);
        let (p, col) = (n / NR, n % NR);
        let (h, j) = (col / 16, col % 16);
        let at = p * self.panel_stride + s * STEP + h * TILE + r * ROW_BYTES + j * 4 + i * size;
        let bytes = self.data.as_bytes().get(at..at + size)?;
        let mut value = P::B::default();
        // SAFETY: `value` is a plain-data element of exactly `size` bytes (the dtype's input
        // size) with no invalid bit patterns; `bytes` has `size` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                (&mut value as *mut P::B).cast::<u8>(),
                size,
            )
        };
        Some(value)
    }

    #[cfg(test)]
    pub(crate) fn steps(&self) -> usize {
        self.steps
    }

    #[cfg(test)]
    pub(crate) fn panels(&self) -> usize {
        self.panels
    }

    #[cfg(test)]
    pub(crate) fn panel_stride(&self) -> usize {
        self.panel_stride
    }

    #[cfg(test)]
    pub(crate) fn bytes(&self) -> &[u8] {
        self.data.as_bytes()
    }

    /// A borrowed view of the packed data, which [`Gemm::run_view`](crate::Gemm::run_view)
    /// multiplies with (what [`Gemm::run`](crate::Gemm::run) does for a `PackedB`).
    pub fn view(&self) -> PackedBView<'_, P> {
        PackedBView {
            k: self.k,
            n: self.n,
            steps: self.steps,
            panel_stride: self.panel_stride,
            data: self.data.as_bytes(),
            col_sums: self.col_sums(),
            step_sums: Some(&self.step_sums),
            _precision: PhantomData,
        }
    }

    /// A packed B of `k x n` holding a copy of `data`, which must have the layout's exact size
    /// (checked by the caller, `blob`), and of the column sums when given (`None`: recomputed
    /// from the packed data, for blobs that do not carry them).
    pub(crate) fn from_packed_data(
        k: usize,
        n: usize,
        data: &[u8],
        sums: Option<&[i32]>,
    ) -> Result<Self, GemmError> {
        let mut packed = Self::allocate(k, n)?;
        if packed.data.len != data.len() {
            return Err(GemmError::TooLarge {
                operand: Operand::B,
            });
        }
        packed.data.as_bytes_mut().copy_from_slice(data);
        let stride = packed.panel_stride;
        let steps = packed.steps;
        let data = packed.data.as_bytes();
        let own = &mut packed.col_sums;
        match (Self::has_col_sums(), sums) {
            (true, Some(sums)) if sums.len() == own.len() => own.copy_from_slice(sums),
            (true, Some(sums)) => {
                return Err(GemmError::DimensionMismatch {
                    what: "column sums and N",
                    expected: n,
                    found: sums.len(),
                })
            }
            (true, None) => Self::column_sums(data, steps, stride, own),
            (false, _) => {}
        }
        Ok(packed)
    }

    /// The sums of the `n` columns' elements in packed data of `steps` k-steps per panel,
    /// panels `stride` bytes apart (the int8 precisions' column sums), in one pass in the
    /// data's order. Every byte of a column's tiles is one of its elements or padding, which
    /// [`PackedB::nonzero_padding`] has found zero (packing writes it so).
    pub(crate) fn column_sums(data: &[u8], steps: usize, stride: usize, sums: &mut [i32]) {
        let n = sums.len();
        if stride == 0 {
            return;
        }
        for (p, panel) in data.chunks_exact(stride).enumerate() {
            for s in 0..steps {
                for h in 0..2 {
                    let first = p * NR + h * 16;
                    let cols = n.saturating_sub(first).min(16);
                    if cols == 0 {
                        continue;
                    }
                    for r in 0..16 {
                        let row = &panel[s * STEP + h * TILE + r * ROW_BYTES..][..ROW_BYTES];
                        for (sum, dword) in sums[first..first + cols]
                            .iter_mut()
                            .zip(row.chunks_exact(4))
                        {
                            for &x in dword {
                                *sum = sum.wrapping_add(b_value(P::KIND, x));
                            }
                        }
                    }
                }
            }
        }
    }

    /// The offset of the first byte of packed `k x n` data that is padding and not zero: K's
    /// last k-step past K, the columns past N, each panel's gap. [`PackedB::pack`] writes
    /// zeros there, and the products rely on it (a zero of A's padding times a NaN in B's is
    /// a NaN in C). `None` where there is none, or where `data` does not have the layout's
    /// size (which the caller checked).
    pub(crate) fn nonzero_padding(data: &[u8], k: usize, n: usize) -> Option<usize> {
        let (steps, _, stride, total) = Self::layout(k, n).ok()?;
        if total == 0 || data.len() != total {
            return None;
        }
        let dtype = P::KIND;
        let (kt, group, size) = (dtype.k_per_step(), dtype.group(), dtype.input_bytes());
        // A tile row holds one dword per column: `group` consecutive rows of B.
        debug_assert_eq!(group * size, 4);
        let zero = |bytes: &[u8], at: usize| bytes.iter().position(|&b| b != 0).map(|i| at + i);
        for (p, panel) in data.chunks_exact(stride).enumerate() {
            let base = p * stride;
            if let Some(at) = zero(&panel[steps * STEP..], base + steps * STEP) {
                return Some(at);
            }
            for s in 0..steps {
                for h in 0..2 {
                    let cols = n.saturating_sub(p * NR + h * 16).min(16);
                    for r in 0..kt / group {
                        let rows = k.saturating_sub(s * kt + r * group).min(group);
                        if cols == 16 && rows == group {
                            continue;
                        }
                        let row = s * STEP + h * TILE + r * ROW_BYTES;
                        for j in 0..16 {
                            let from = row + 4 * j + if j < cols { rows * size } else { 0 };
                            if let Some(at) = zero(&panel[from..row + 4 * j + 4], base + from) {
                                return Some(at);
                            }
                        }
                    }
                }
            }
        }
        None
    }

    /// The layout of a packed `k x n` B: (steps, panel stride, total bytes), for views that
    /// check borrowed data against it.
    pub(crate) fn layout_of(k: usize, n: usize) -> Result<(usize, usize, usize), GemmError> {
        let (steps, _, panel_stride, total) = Self::layout(k, n)?;
        Ok((steps, panel_stride, total))
    }
}

/// Packed B data borrowed from elsewhere (a [`PackedB`], or a serialized blob in memory such as
/// a memory-mapped weights file: [`PackedBView::from_blob`]), in exactly the layout
/// [`PackedB::pack`] produces. Its size is checked against K and N when it is made, so the
/// GEMM's tile loads stay inside it.
#[derive(Clone, Copy)]
pub struct PackedBView<'a, P: Precision> {
    pub(crate) k: usize,
    pub(crate) n: usize,
    pub(crate) steps: usize,
    pub(crate) panel_stride: usize,
    pub(crate) data: &'a [u8],
    /// The column sums (int8 precisions; `None` for the float precisions and for blobs without them).
    pub(crate) col_sums: Option<&'a [i32]>,
    /// Where the per-k-step column sums are kept between calls (`None`: a borrowed blob, for
    /// which they are computed on every call that needs them).
    pub(crate) step_sums: Option<&'a OnceLock<Vec<i32>>>,
    pub(crate) _precision: PhantomData<P>,
}

impl<P: Precision> fmt::Debug for PackedBView<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PackedBView")
            .field("dtype", &P::KIND)
            .field("k", &self.k)
            .field("n", &self.n)
            .field("bytes", &self.data.len())
            .finish()
    }
}

impl<'a, P: Precision> PackedBView<'a, P> {
    /// Rows of B (the K of the product).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns of B (the N of the product).
    pub fn n(&self) -> usize {
        self.n
    }

    /// The packed bytes.
    pub fn packed_bytes(&self) -> &'a [u8] {
        self.data
    }

    /// The column sums of B ([`PackedB::col_sums`]); `None` for the float precisions and for weights read from
    /// a blob of format version 1, which does not carry them.
    pub fn col_sums(&self) -> Option<&'a [i32]> {
        self.col_sums
    }

    /// Per group of `group_steps` k-steps and column, the sum of B's elements, `[group][n]`
    /// (the last group may be shorter): what a zero point is compensated with under per-K-group
    /// weight scales. Taken from the per-step sums kept with a [`PackedB`] (computed from the
    /// packed data on first use), or computed from the data for a borrowed blob.
    pub(crate) fn group_sums(&self, group_steps: usize) -> Result<Vec<i32>, GemmError> {
        let computed;
        let steps_sums: &[i32] = match self.step_sums.and_then(OnceLock::get) {
            Some(cached) => cached,
            None => {
                computed =
                    step_col_sums(P::KIND, self.data, self.panel_stride, self.steps, self.n)?;
                match self.step_sums {
                    // Another thread may have set it meanwhile: both computed the same sums.
                    Some(cell) => cell.get_or_init(|| computed),
                    None => &computed,
                }
            }
        };
        let n = self.n;
        let groups = self.steps.div_ceil(group_steps.max(1));
        let mut out = try_vec_filled(groups.saturating_mul(n)).ok_or(GemmError::OutOfMemory {
            bytes: groups.saturating_mul(n).saturating_mul(4),
        })?;
        for (s, row) in steps_sums.chunks_exact(n.max(1)).enumerate() {
            let g = s / group_steps.max(1);
            for (o, &v) in out[g * n..(g + 1) * n].iter_mut().zip(row) {
                *o = o.wrapping_add(v);
            }
        }
        Ok(out)
    }
}

/// The value of a byte of an int8 B: signed, or unsigned for TDPBSUD and TDPBUUD.
fn b_value(kind: PrecisionKind, byte: u8) -> i32 {
    if kind.unsigned_b() {
        i32::from(byte)
    } else {
        i32::from(byte as i8)
    }
}

/// `len` zeros, or `None` when they cannot be allocated.
fn try_vec_filled(len: usize) -> Option<Vec<i32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    v.resize(len, 0);
    Some(v)
}

/// The sums of int8 packed data per k-step and column, `[step][n]`: every byte of a column's
/// tiles in a step is one of its elements or zero padding, so summing the bytes is exact.
fn step_col_sums(
    kind: PrecisionKind,
    data: &[u8],
    panel_stride: usize,
    steps: usize,
    n: usize,
) -> Result<Vec<i32>, GemmError> {
    let len = steps.saturating_mul(n);
    let mut sums = try_vec_filled(len).ok_or(GemmError::OutOfMemory {
        bytes: len.saturating_mul(4),
    })?;
    // Walks the data in memory order: panel, step, half (16 columns), row, column, element.
    for p in 0..n.div_ceil(NR) {
        for s in 0..steps {
            for h in 0..2 {
                for r in 0..16 {
                    let at = p * panel_stride + s * STEP + h * TILE + r * ROW_BYTES;
                    let Some(row) = data.get(at..at + ROW_BYTES) else {
                        return Err(GemmError::TooLarge {
                            operand: Operand::B,
                        });
                    };
                    for (j, quad) in row.chunks_exact(4).enumerate() {
                        let nn = p * NR + h * 16 + j;
                        if nn < n {
                            let q: i32 = quad.iter().map(|&x| b_value(kind, x)).sum();
                            let sum = &mut sums[s * n + nn];
                            *sum = sum.wrapping_add(q);
                        }
                    }
                }
            }
        }
    }
    Ok(sums)
}

/// Where a block of A lives in the caller's memory. Row-major: row `i`, k-step `s` starts at
/// byte `i * ld_bytes + s * 64`; each row has `row_bytes` bytes (K elements). Transposed
/// (column-major A, i.e. A^T row-major): element `(i, k)` is at byte
/// `k * ld_bytes + i * element`, where `element` is the element's size; `row_bytes` is still
/// K elements' bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ASource<'a> {
    pub bytes: &'a [u8],
    pub ld_bytes: usize,
    pub row_bytes: usize,
    /// A is given transposed, with elements of `element` bytes (0: row-major).
    pub transposed_element: usize,
}

/// Bytes of a packed A block of `rows` rows and `steps` k-steps.
pub(crate) fn packed_a_bytes(rows: usize, steps: usize) -> Option<usize> {
    rows.checked_mul(steps)?.checked_mul(ROW_BYTES)
}

/// Bytes of one k-step of a packed A micro-panel of `rows` rows (at most [`MR`]).
pub(crate) fn packed_a_step(rows: usize) -> usize {
    rows.min(MR) * ROW_BYTES
}

/// Packs rows `rows` and k-steps `first_step..first_step + steps` of A into `dst` as
/// micro-panels of [`MR`] rows (see the [module docs](self)): panel `q` at
/// `q * steps * 2048`, its k-step `t` at `+ t * packed_a_step(panel rows)`.
pub(crate) fn pack_a(
    src: ASource<'_>,
    rows: std::ops::Range<usize>,
    first_step: usize,
    steps: usize,
    dst: &mut [u8],
) {
    for (q, panel_start) in (rows.start..rows.end).step_by(MR).enumerate() {
        let panel_end = (panel_start + MR).min(rows.end);
        let step_bytes = packed_a_step(panel_end - panel_start);
        let panel = &mut dst[q * steps * STEP..][..steps * step_bytes];
        if src.transposed_element > 0 {
            pack_transposed_panel(src, panel_start..panel_end, first_step, steps, panel);
            continue;
        }
        // The k-steps whose 64 bytes lie inside every row, copied a whole 64-byte row at a
        // time, k-step by k-step (each k-step of the panel is written front to back); then
        // the K tail, zero-padded.
        let whole = (src.row_bytes / ROW_BYTES)
            .saturating_sub(first_step)
            .min(steps);
        let rows_here = panel_end - panel_start;
        copy_whole_steps(
            src,
            panel_start,
            rows_here,
            first_step,
            whole,
            step_bytes,
            panel,
        );
        for row in panel_start..panel_end {
            let within = row - panel_start;
            let line = &src.bytes[row * src.ld_bytes..row * src.ld_bytes + src.row_bytes];
            for t in whole..steps {
                let from = (first_step + t) * ROW_BYTES;
                let at = t * step_bytes + within * ROW_BYTES;
                let out = &mut panel[at..at + ROW_BYTES];
                let have = line.len().saturating_sub(from).min(ROW_BYTES);
                out[..have].copy_from_slice(&line[from..from + have]);
                out[have..].fill(0);
            }
        }
    }
}

/// The `whole` k-steps from `first_step` of rows `first_row..first_row + rows` of a row-major A
/// into `panel` (k-step `t` at `t * step_bytes`, row `r` of it at `r * 64`), k-step by k-step
/// so that the packed block is written front to back.
fn copy_whole_steps(
    src: ASource<'_>,
    first_row: usize,
    rows: usize,
    first_step: usize,
    whole: usize,
    step_bytes: usize,
    panel: &mut [u8],
) {
    for (t, out) in panel.chunks_exact_mut(step_bytes).take(whole).enumerate() {
        let from = (first_step + t) * ROW_BYTES;
        for (within, dst) in out.chunks_exact_mut(ROW_BYTES).take(rows).enumerate() {
            let at = (first_row + within) * src.ld_bytes + from;
            dst.copy_from_slice(&src.bytes[at..at + ROW_BYTES]);
        }
    }
}

/// One micro-panel of a transposed A: for each k, the panel's rows are consecutive elements of
/// row k of A^T, read front to back and written to their 64-byte rows of the panel.
fn pack_transposed_panel(
    src: ASource<'_>,
    rows: std::ops::Range<usize>,
    first_step: usize,
    steps: usize,
    panel: &mut [u8],
) {
    let size = src.transposed_element;
    let per_step = ROW_BYTES / size;
    let k = src.row_bytes / size;
    let step_bytes = packed_a_step(rows.len());
    for t in 0..steps {
        let block = &mut panel[t * step_bytes..(t + 1) * step_bytes];
        for e in 0..per_step {
            let kk = (first_step + t) * per_step + e;
            if kk >= k {
                // The K tail: zero, as for row-major A.
                for within in 0..rows.len() {
                    block[within * ROW_BYTES + e * size..][..size].fill(0);
                }
                continue;
            }
            let line = &src.bytes[kk * src.ld_bytes + rows.start * size..][..rows.len() * size];
            for (within, element) in line.chunks_exact(size).enumerate() {
                block[within * ROW_BYTES + e * size..][..size].copy_from_slice(element);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precision::{Bf16, Int8};
    use half::bf16;

    #[test]
    fn vnni_layout_int8() {
        let (k, n) = (70, 40);
        let b: Vec<i8> = (0..k * n).map(|x| (x % 251) as i8).collect();
        let p = PackedB::<Int8>::pack(&b, k, n, n).unwrap();
        assert_eq!(p.steps(), 2);
        assert_eq!(p.panels(), 2);
        assert_eq!(p.panel_stride() % 2048, 1024);
        let raw = p.bytes();
        for kk in 0..k {
            for nn in 0..n {
                assert_eq!(p.get(kk, nn), Some(b[kk * n + nn]));
                // docs/semantics.md 8: B.row[k].byte[4n+i] = B_math[4k+i][n], per tile.
                let (s, r, i) = (kk / 64, (kk % 64) / 4, kk % 4);
                let (pp, h, j) = (nn / 32, (nn % 32) / 16, nn % 16);
                let at = pp * p.panel_stride() + s * STEP + h * TILE + r * 64 + 4 * j + i;
                assert_eq!(raw[at] as i8, b[kk * n + nn]);
            }
        }
        // Padding is zero: k = 70..128 of column 0, and columns 40..64.
        assert_eq!(raw[STEP + 2 * 64 + 2], 0); // k = 64 + 8 + 2 = 74 > 70
        assert_eq!(p.get(70, 0), None);
    }

    #[test]
    fn vnni_layout_bf16_and_transposed() {
        let (k, n) = (35, 17);
        let b: Vec<bf16> = (0..k * n).map(|x| bf16::from_f32(x as f32)).collect();
        let bt: Vec<bf16> = (0..n * k).map(|x| b[(x % k) * n + x / k]).collect();
        let p = PackedB::<Bf16>::pack(&b, k, n, n).unwrap();
        let q = PackedB::<Bf16>::pack_transposed(&bt, k, n, k).unwrap();
        assert_eq!(p.bytes(), q.bytes());
        for kk in 0..k {
            for nn in 0..n {
                assert_eq!(p.get(kk, nn), Some(b[kk * n + nn]));
            }
        }
        // Pair layout: element 2n is B[2k][n], element 2n+1 is B[2k+1][n].
        let raw = p.bytes();
        let at = 64 + 4 * 3; // tile row 1 (k = 2, 3), column 3
        assert_eq!(&raw[at..at + 2], &b[2 * n + 3].to_bits().to_le_bytes());
        assert_eq!(&raw[at + 2..at + 4], &b[3 * n + 3].to_bits().to_le_bytes());
    }

    #[test]
    fn empty_shapes_pack() {
        let p = PackedB::<Int8>::pack(&[], 0, 5, 5).unwrap();
        assert_eq!(p.packed_bytes(), 0);
        let p = PackedB::<Int8>::pack(&[], 5, 0, 0).unwrap();
        assert_eq!(p.packed_bytes(), 0);
    }

    #[test]
    fn pack_a_pads_the_k_tail() {
        let (m, k) = (33, 70);
        let a: Vec<u8> = (0..m * k).map(|x| (x % 200 + 1) as u8).collect();
        let steps = 2;
        let mut dst = vec![0xAAu8; packed_a_bytes(m, steps).unwrap()];
        let src = ASource {
            bytes: &a,
            ld_bytes: k,
            row_bytes: k,
            transposed_element: 0,
        };
        pack_a(src, 0..m, 0, steps, &mut dst);
        // Row 17 is tile 1 row 1 of panel 0 (at +1024 in each 2 KiB k-step); k-step 1 holds
        // k = 64..70 then zeros.
        let at = STEP + TILE + 64;
        assert_eq!(&dst[at..at + 6], &a[17 * k + 64..17 * k + 70]);
        assert!(dst[at + 6..at + 64].iter().all(|&x| x == 0));
        // Row 32 starts panel 1, a one-row panel: 64 bytes per k-step.
        assert_eq!(dst[2 * STEP], a[32 * k]);
        assert_eq!(dst[2 * STEP + 64], a[32 * k + 64]);
        assert_eq!(packed_a_bytes(m, steps), Some(2 * STEP + 2 * 64));
    }
}
