//! A register-blocked run of tile dot products in one call: the inner loop of a 2x2 AMX
//! micro-kernel, computed by the emulator's arithmetic with no tile state in between.
//!
//! [`dot_2x2`] computes, for each k-step `s` in order,
//!
//! ```text
//! C00 += A0 x B0;  C01 += A0 x B1;  C10 += A1 x B0;  C11 += A1 x B1
//! ```
//!
//! on full tiles (16 rows of 64 bytes; M = N = K = 16 dwords), where A0 and A1 are the two
//! tiles of 1024 bytes at `s * a_step` of `a` (row stride 64), and B0 and B1 those at
//! `s * b_step` of `b`. The result is bit for bit that of the `4 * steps` instructions on the
//! [`Emulator`](crate::Emulator) (and on the silicon:
//! [semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md)
//! sections 9 and 10), but
//! the operands are read in place, nothing is checked per instruction, and on a CPU with
//! AVX-512 VNNI the integer products run in one fused kernel whose accumulators stay in
//! registers for a whole k sweep. It is what a GEMM on the emulator runs for a full micro-tile,
//! and it is API for any kernel written for the emulator (a software GEMM, a simulator of a
//! micro-kernel), covered by the crate's version like the rest. A caller that reuses one
//! buffer of A for many blocks (a GEMM's packed block) can prepare it once
//! ([`PreparedA`], [`dot_2x2_prepared`]), and one of B likewise ([`PreparedB`],
//! [`dot_2x2_prepared_ab`]): the AVX2 kernels then skip widening their bf16 or fp16 tiles to
//! f32, or extending their int8 tiles to i16, per block.
//!
//! ```
//! use amx_runtime::block::{dot_2x2, Block};
//! use amx_runtime::rules::DotKind;
//!
//! // Two k-steps of A (each two 16 x 64-byte tiles) and of B, every byte 1 and 2.
//! let a = vec![1u8; 2 * 2048];
//! let b = vec![2u8; 2 * 2048];
//! let mut c = Block::zeroed();
//! dot_2x2(DotKind::Tdpbssd, &mut c, (&a, 2048), (&b, 2048), 2).unwrap();
//! // Each output sums 2 steps x 64 products of 1 x 2.
//! assert_eq!(c.dword(3, 15, 15), 256);
//! ```

use std::fmt;

use amx_tilecfg::decode::ProductKind;
use amx_tilecfg::DotKind;

use crate::unit::numerics::block::{self, Operands};
use crate::TILE_BYTES;

/// The four C tiles of a 2x2 block, in the order C00, C01, C10, C11 (tile `2h + w` is output
/// rows `16h..16h+16`, columns `16w..16w+16`), each 16 rows of 64 bytes as a tile holds them.
#[derive(Clone, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Block {
    /// The tiles' bytes.
    pub tiles: [[u8; TILE_BYTES]; 4],
}

impl Block {
    /// Four tiles of zeros (as TILEZERO leaves them).
    pub fn zeroed() -> Block {
        Block {
            tiles: [[0; TILE_BYTES]; 4],
        }
    }

    /// Dword `col` (< 16) of row `row` (< 16) of tile `t` (< 4), little-endian; 0 for an index
    /// out of range.
    pub fn dword(&self, t: usize, row: usize, col: usize) -> u32 {
        if row >= 16 || col >= 16 {
            return 0;
        }
        let at = row * 64 + col * 4;
        match self.tiles.get(t).and_then(|tile| tile.get(at..at + 4)) {
            Some(&[b0, b1, b2, b3]) => u32::from_le_bytes([b0, b1, b2, b3]),
            _ => 0,
        }
    }
}

impl fmt::Debug for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Block").finish_non_exhaustive()
    }
}

/// Why [`dot_2x2`] refused its arguments (before computing anything: C is unchanged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockError {
    /// The k-steps of an operand do not fit its buffer: the last step ends at byte `needed`
    /// (`usize::MAX` when that overflows) of a buffer of `len` bytes.
    OutOfBounds {
        /// `"A"` or `"B"`.
        operand: &'static str,
        /// One past the last byte the steps read.
        needed: usize,
        /// The buffer's length.
        len: usize,
    },
}

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockError::OutOfBounds {
                operand,
                needed,
                len,
            } => write!(
                f,
                "operand {operand}: its k-steps need {needed} bytes but the buffer has {len}"
            ),
        }
    }
}

impl std::error::Error for BlockError {}

/// The validated operands of a block (A's step `A_TILES` tiles), or the one that is too short.
fn operands<'o, const A_TILES: usize>(
    a: (&'o [u8], usize),
    b: (&'o [u8], usize),
    steps: usize,
) -> Result<Operands<'o, A_TILES>, BlockError> {
    Operands::new(a, b, steps).map_err(|(operand, needed, len)| BlockError::OutOfBounds {
        operand,
        needed,
        len,
    })
}

/// `steps` k-steps of the 2x2 block product `kind` into `c` (see the [module docs](self)):
/// `a` and `b` are each a buffer and the byte distance between its k-steps (any distance,
/// also less than 2048: steps may overlap).
///
/// # Errors
/// [`BlockError::OutOfBounds`] when a step's 2048 bytes fall outside its buffer; `c` is then
/// unchanged.
pub fn dot_2x2(
    kind: DotKind,
    c: &mut Block,
    (a, a_step): (&[u8], usize),
    (b, b_step): (&[u8], usize),
    steps: usize,
) -> Result<(), BlockError> {
    let ops = operands((a, a_step), (b, b_step), steps)?;
    block::dot_2x2(kind, &mut c.tiles, &ops);
    Ok(())
}

/// The A operand of many [`dot_2x2`] calls, put once into the form the emulator's block
/// kernel reads: a GEMM reuses each packed block of A for every panel of B, and the AVX2
/// kernels otherwise widen A's bf16 or fp16 tiles to f32 (or extend its int8 tiles to i16)
/// again for each. Made by [`PreparedA::prepare`] from a buffer of whole tiles, read by
/// [`dot_2x2_prepared`]. On the other kernel paths it holds nothing and costs nothing.
///
/// ```
/// use amx_runtime::block::{dot_2x2, dot_2x2_prepared, Block, PreparedA};
/// use amx_runtime::rules::DotKind;
///
/// // A block of A: 3 k-steps of two tiles; B: 3 steps of two tiles (bf16 1.0 and 2.0).
/// let a: Vec<u8> = [0x80, 0x3F].repeat(3 * 1024);
/// let b: Vec<u8> = [0x00, 0x40].repeat(3 * 1024);
/// let mut prepared = PreparedA::new();
/// prepared.prepare(DotKind::Tdpbf16ps, &a);
/// let (mut plain, mut fast) = (Block::zeroed(), Block::zeroed());
/// dot_2x2(DotKind::Tdpbf16ps, &mut plain, (&a, 2048), (&b, 2048), 3).unwrap();
/// dot_2x2_prepared(DotKind::Tdpbf16ps, &mut fast, (&a, 0, 2048), &prepared, (&b, 2048), 3)
///     .unwrap();
/// assert!(plain == fast);
/// ```
#[derive(Default)]
pub struct PreparedA {
    /// Each whole tile of the buffer, widened; empty when nothing is prepared.
    tiles: Vec<crate::unit::numerics::Widened>,
    /// The product kind and the buffer (address, length) the tiles were made from.
    from: Option<(DotKind, usize, usize)>,
}

impl fmt::Debug for PreparedA {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedA")
            .field("tiles", &self.tiles.len())
            .field("from", &self.from)
            .finish()
    }
}

impl PreparedA {
    /// Nothing prepared.
    pub fn new() -> PreparedA {
        PreparedA::default()
    }

    /// Prepares every whole tile of `a` (tile `i` is bytes `1024 i..1024 (i + 1)`) for the
    /// products `kind`, reusing the buffer of an earlier call. Returns whether the emulator's
    /// kernels on this CPU read the prepared form: `false` (nothing kept) off the AVX2 float
    /// path for the floating-point products and off the AVX2 integer path for the integer
    /// ones, or when the memory for it could not be had.
    pub fn prepare(&mut self, kind: DotKind, a: &[u8]) -> bool {
        self.prepare_as(kind, a, false)
    }

    /// Makes room to prepare up to `bytes` of tiles for `kind`, so that a later
    /// [`PreparedA::prepare`] of at most that many bytes allocates nothing: for a caller that
    /// must not allocate then (a GEMM holding a tile configuration, which an allocator using
    /// AMX would replace). Forgets what was prepared. Returns `false` where the memory could
    /// not be had, `true` otherwise (also where nothing is prepared for `kind` on this CPU,
    /// which needs no room).
    pub fn reserve(&mut self, kind: DotKind, bytes: usize) -> bool {
        self.reserve_as(kind, bytes, false)
    }

    /// [`PreparedA::reserve`], for A's tiles or (`b`) B's.
    fn reserve_as(&mut self, kind: DotKind, bytes: usize, b: bool) -> bool {
        self.from = None;
        self.tiles.clear();
        block::preparation(kind, b).is_none()
            || self.tiles.try_reserve_exact(bytes / TILE_BYTES).is_ok()
    }

    /// [`PreparedA::prepare`], of A's tiles or (`b`) of B's.
    fn prepare_as(&mut self, kind: DotKind, buf: &[u8], b: bool) -> bool {
        self.from = None;
        let Some(form) = block::preparation(kind, b) else {
            return false;
        };
        let n = buf.len() / TILE_BYTES;
        self.tiles.clear();
        if self.tiles.try_reserve_exact(n).is_err() {
            return false;
        }
        self.tiles.resize(n, crate::unit::numerics::Widened::ZERO);
        for (tile, out) in buf.chunks_exact(TILE_BYTES).zip(self.tiles.iter_mut()) {
            if let Ok(tile) = <&[u8; TILE_BYTES]>::try_from(tile) {
                form.apply(tile, out);
            }
        }
        self.from = Some((kind, buf.as_ptr() as usize, buf.len()));
        true
    }

    /// Whether this holds `buf` prepared for `kind`: the buffer (address and length) of the
    /// last [`PreparedA::prepare`] that kept something.
    fn holds(&self, kind: DotKind, buf: &[u8]) -> bool {
        self.from == Some((kind, buf.as_ptr() as usize, buf.len()))
    }
}

/// [`dot_2x2`] with A's tiles at `a_offset + s * a_step` (and 1024 bytes further) of `a`, read
/// from `prepared` where it was made by [`PreparedA::prepare`] for `kind` from this very
/// buffer (same address and length) and the tiles lie at multiples of 1024 bytes: the same
/// bits as [`dot_2x2`] on `(&a[a_offset..], a_step)`, without widening A again. Otherwise
/// (another buffer, another kind, nothing prepared) it is exactly that [`dot_2x2`]. If the
/// bytes of `a` changed since it was prepared, prepare it again: the prepared tiles are what
/// the products read.
///
/// # Errors
/// As [`dot_2x2`]; `c` is then unchanged.
pub fn dot_2x2_prepared(
    kind: DotKind,
    c: &mut Block,
    a: (&[u8], usize, usize),
    prepared: &PreparedA,
    b: (&[u8], usize),
    steps: usize,
) -> Result<(), BlockError> {
    // Nothing prepared of B: an empty PreparedB holds no buffer (and allocates nothing).
    dot_2x2_prepared_ab(kind, c, a, prepared, b, &PreparedB::new(), steps)
}

/// The B operand of many [`dot_2x2_prepared_ab`] calls, put once into the form the emulator's
/// block kernel reads: a GEMM that runs every micro-panel of A against one panel of B in turn
/// widens the panel's bf16 or fp16 tiles to f32 (or extends its int8 tiles to i16) once
/// rather than once per micro-panel. Made by [`PreparedB::prepare`] from exactly the buffer
/// the calls pass as `b`; on the other kernel paths it holds nothing and costs nothing.
///
/// ```
/// use amx_runtime::block::{dot_2x2, dot_2x2_prepared_ab, Block, PreparedA, PreparedB};
/// use amx_runtime::rules::DotKind;
///
/// // 3 k-steps of A and of B, two tiles each (bf16 1.0 and 2.0).
/// let a: Vec<u8> = [0x80, 0x3F].repeat(3 * 1024);
/// let b: Vec<u8> = [0x00, 0x40].repeat(3 * 1024);
/// let (mut pa, mut pb) = (PreparedA::new(), PreparedB::new());
/// pa.prepare(DotKind::Tdpbf16ps, &a);
/// pb.prepare(DotKind::Tdpbf16ps, &b);
/// assert_eq!(pb.holds(DotKind::Tdpbf16ps, &b), PreparedB::applies(DotKind::Tdpbf16ps));
/// let (mut plain, mut fast) = (Block::zeroed(), Block::zeroed());
/// dot_2x2(DotKind::Tdpbf16ps, &mut plain, (&a, 2048), (&b, 2048), 3).unwrap();
/// dot_2x2_prepared_ab(DotKind::Tdpbf16ps, &mut fast, (&a, 0, 2048), &pa, (&b, 2048), &pb, 3)
///     .unwrap();
/// assert!(plain == fast);
/// ```
#[derive(Debug, Default)]
pub struct PreparedB(PreparedA);

impl PreparedB {
    /// Nothing prepared.
    pub fn new() -> PreparedB {
        PreparedB::default()
    }

    /// Whether the emulator's kernels on this CPU read prepared operands for `kind` (a
    /// floating-point product on the AVX2 float path, an integer one on the AVX2 integer
    /// path): where they do not, preparing keeps nothing.
    pub fn applies(kind: DotKind) -> bool {
        block::preparation(kind, true).is_some()
    }

    /// Prepares every whole tile of `b` (tile `i` is bytes `1024 i..1024 (i + 1)`) for the
    /// products `kind`, reusing the buffer of an earlier call; returns whether the kernels read
    /// it, as [`PreparedA::prepare`] does.
    pub fn prepare(&mut self, kind: DotKind, b: &[u8]) -> bool {
        self.0.prepare_as(kind, b, true)
    }

    /// Makes room to prepare up to `bytes` of B for `kind`, as [`PreparedA::reserve`] does.
    pub fn reserve(&mut self, kind: DotKind, bytes: usize) -> bool {
        self.0.reserve_as(kind, bytes, true)
    }

    /// Whether this holds `b` prepared for `kind` (the same buffer, by address and length, as
    /// the last [`PreparedB::prepare`]; its bytes are taken as unchanged since).
    pub fn holds(&self, kind: DotKind, b: &[u8]) -> bool {
        self.0.holds(kind, b)
    }

    /// Forgets what was prepared (the next [`PreparedB::holds`] is `false`).
    pub fn clear(&mut self) {
        self.0.from = None;
    }
}

/// [`dot_2x2_prepared`] with B's tiles also read from `prepared_b` where it holds `b` for
/// `kind` ([`PreparedB::holds`]) and `b_step` is a multiple of 1024 bytes: no operand is
/// widened per block then. The same bits as [`dot_2x2`] in every case; if the bytes of `b`
/// changed since it was prepared, prepare it again.
///
/// # Errors
/// As [`dot_2x2`]; `c` is then unchanged.
pub fn dot_2x2_prepared_ab(
    kind: DotKind,
    c: &mut Block,
    (a, a_offset, a_step): (&[u8], usize, usize),
    prepared_a: &PreparedA,
    (b, b_step): (&[u8], usize),
    prepared_b: &PreparedB,
    steps: usize,
) -> Result<(), BlockError> {
    let a_at = a.get(a_offset..).unwrap_or(&[]);
    let ops = operands((a_at, a_step), (b, b_step), steps)?;
    let a_usable = prepared_a.holds(kind, a)
        && a_offset.is_multiple_of(TILE_BYTES)
        && a_step.is_multiple_of(TILE_BYTES);
    let b_usable = prepared_b.holds(kind, b) && b_step.is_multiple_of(TILE_BYTES);
    let tiles_a = a_usable.then(|| block::PreparedTiles {
        tiles: &prepared_a.tiles,
        first: a_offset / TILE_BYTES,
        stride: a_step / TILE_BYTES,
    });
    let tiles_b = b_usable.then(|| block::PreparedTiles {
        tiles: &prepared_b.0.tiles,
        first: 0,
        stride: b_step / TILE_BYTES,
    });
    if tiles_a.is_some() || tiles_b.is_some() {
        block::dot_2x2_prepared(kind, &mut c.tiles, &ops, (tiles_a, tiles_b));
    } else {
        block::dot_2x2(kind, &mut c.tiles, &ops);
    }
    Ok(())
}

/// `steps` k-steps of one row of a 2x2 block: `c[w] += A x Bw` for `w` in 0, 1 and each step
/// in order, as the instructions `kind` would on full tiles (16 rows of 64 bytes), where A is
/// the tile of 1024 bytes at `s * a_step` of `a` (row stride 64) and B0, B1 the two tiles at
/// `s * b_step` of `b`. The micro-kernel of a GEMM whose micro-tiles have 16 rows (M = 16):
/// where the emulator's integer path is AVX-512 or AVX2, or its float path AVX2, it runs the
/// 2x2 block's kernel of that path on one row of tiles (A read once for both products);
/// elsewhere the per-instruction kernels step by step. Bit for bit the instructions' result.
///
/// ```
/// use amx_runtime::block::dot_1x2;
/// use amx_runtime::rules::DotKind;
///
/// // Three k-steps: A one tile of 1s per step, B two tiles of 2s.
/// let (a, b) = (vec![1u8; 3 * 1024], vec![2u8; 3 * 2048]);
/// let mut c = [[0u8; 1024]; 2];
/// dot_1x2(DotKind::Tdpbuud, &mut c, (&a, 1024), (&b, 2048), 3).unwrap();
/// assert_eq!(u32::from_le_bytes(c[1][60..64].try_into().unwrap()), 3 * 64 * 2);
/// ```
///
/// # Errors
/// [`BlockError::OutOfBounds`] when a step's A tile or B's 2048 bytes fall outside its buffer;
/// `c` is then unchanged.
pub fn dot_1x2(
    kind: DotKind,
    c: &mut [[u8; TILE_BYTES]; 2],
    (a, a_step): (&[u8], usize),
    (b, b_step): (&[u8], usize),
    steps: usize,
) -> Result<(), BlockError> {
    let ops = operands::<1>((a, a_step), (b, b_step), steps)?;
    block::dot_1x2(kind, c, &ops);
    Ok(())
}

/// One dot product `kind` on tiles in memory, as the instruction computes it under a
/// configuration where C has `rows` rows of `cols` dwords and A has `rows` rows of `k` dwords
/// (B: `k` rows of `cols` dwords): `C[i][j] += sum over k of A[i][..] x B[..][j]` for `i < rows`,
/// `j < cols`, each tile 16 rows of 64 bytes. Sizes above 16 count as 16. Only those outputs
/// are written: unlike the instruction, the rest of `c` is left as it is (a caller that keeps
/// only the outputs of its shape sees no difference).
///
/// The per-instruction kernel of the [`Emulator`](crate::Emulator), without a tile unit: for a
/// micro-kernel at the edge of a matrix, where [`dot_2x2`]'s full tiles do not apply.
///
/// ```
/// use amx_runtime::block::dot_tile;
/// use amx_runtime::rules::DotKind;
///
/// let (a, b) = ([1u8; 1024], [2u8; 1024]);
/// let mut c = [0u8; 1024];
/// dot_tile(DotKind::Tdpbssd, &mut c, &a, &b, (3, 5, 16));
/// assert_eq!(i32::from_le_bytes(c[0..4].try_into().unwrap()), 128); // 64 products of 1 x 2
/// assert_eq!(i32::from_le_bytes(c[20..24].try_into().unwrap()), 0); // column 5: not written
/// ```
pub fn dot_tile(
    kind: DotKind,
    c: &mut [u8; TILE_BYTES],
    a: &[u8; TILE_BYTES],
    b: &[u8; TILE_BYTES],
    (rows, cols, k): (usize, usize, usize),
) {
    block::dot_tile(kind, c, a, b, (rows, cols, k));
}

/// [`dot_tile`] for the AMX-FP8 and AMX-COMPLEX products (`kind` as the decoder names them):
/// `C[i][j]` for `i < rows`, `j < cols` over `k` dwords of A, the rest of `c` left as it is.
///
/// ```
/// use amx_runtime::block::product_tile;
/// use amx_tilecfg::decode::ProductKind;
///
/// // bf8 0x3C is 1.0 (E5M2), hf8 0x40 is 2.0 (E4M3).
/// let (a, b) = ([0x3Cu8; 1024], [0x40u8; 1024]);
/// let mut c = [0u8; 1024];
/// product_tile(ProductKind::Tdpbhf8ps, &mut c, &a, &b, (1, 1, 2));
/// assert_eq!(f32::from_le_bytes(c[0..4].try_into().unwrap()), 16.0); // 8 products of 2
/// ```
pub fn product_tile(
    kind: ProductKind,
    c: &mut [u8; TILE_BYTES],
    a: &[u8; TILE_BYTES],
    b: &[u8; TILE_BYTES],
    (rows, cols, k): (usize, usize, usize),
) {
    block::product_tile(kind, c, a, b, (rows, cols, k));
}

/// Biases int8 bytes for [`tdpbssd_2x2_a_biased`]: XOR 0x80 on every byte (the signed byte
/// `v` becomes the unsigned `v + 128`). Applying it twice restores the bytes.
pub fn bias_a(bytes: &mut [u8]) {
    for v in bytes {
        *v ^= 0x80;
    }
}

/// [`dot_2x2`] for [`DotKind::Tdpbssd`] with A given biased by [`bias_a`]: the same result, bit
/// for bit, as `dot_2x2(DotKind::Tdpbssd, ..)` on the unbiased A.
///
/// The emulator's fastest integer kernel (AVX-512 VNNI's VPDPBUSD) multiplies an unsigned byte
/// by a signed one, so TDPBSSD biases A and subtracts a correction; a GEMM that reuses one
/// packed block of A for many blocks of B can bias it once, when it packs it, instead of once
/// per block. On other CPUs A is restored a few steps at a time on the stack, so this is never
/// slower than a biased copy per call.
///
/// ```
/// use amx_runtime::block::{bias_a, dot_2x2, tdpbssd_2x2_a_biased, Block};
/// use amx_runtime::rules::DotKind;
///
/// let a: Vec<u8> = (0..2 * 2048).map(|i| (i % 251) as u8).collect();
/// let b: Vec<u8> = (0..2 * 2048).map(|i| (i % 241) as u8).collect();
/// let mut biased = a.clone();
/// bias_a(&mut biased);
/// let (mut plain, mut fast) = (Block::zeroed(), Block::zeroed());
/// dot_2x2(DotKind::Tdpbssd, &mut plain, (&a, 2048), (&b, 2048), 2).unwrap();
/// tdpbssd_2x2_a_biased(&mut fast, (&biased, 2048), (&b, 2048), 2).unwrap();
/// assert!(plain == fast);
/// ```
///
/// # Errors
/// As [`dot_2x2`]; `c` is then unchanged.
pub fn tdpbssd_2x2_a_biased(
    c: &mut Block,
    (a, a_step): (&[u8], usize),
    (b, b_step): (&[u8], usize),
    steps: usize,
) -> Result<(), BlockError> {
    let ops = operands((a, a_step), (b, b_step), steps)?;
    block::tdpbssd_2x2_a_biased(&mut c.tiles, &ops);
    Ok(())
}
