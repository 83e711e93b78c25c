//! The full micro-kernel on the emulator: a task's whole k-loop as one block product.
//!
//! [`Amx2x2`](crate::kernel::Amx2x2) issues `4 * steps` dot products and `2 * steps` loads of
//! each operand; on the emulator each of those is a call with its own bookkeeping and copies.
//! [`Block2x2`] hands the same packed micro-panels to [`amx_runtime::block::dot_2x2`], which
//! computes the same sequence bit for bit in one call (on AVX-512 VNNI in one fused kernel),
//! and moves C between memory and the block with the bounds checks of the typed path. The loop
//! nest, the packing and the order of the sums are those of the silicon; only the tile
//! registers are not used, so they hold unspecified data afterwards (as the micro-kernel
//! contract allows: contents are unspecified on entry). Each packed block of A is prepared once
//! for all its tasks (`prepare_a`): in the form the emulator's kernel reads where it reads one
//! (widened to f32, or extended to i16, on the AVX2 paths: [`amx_runtime::block::PreparedA`]),
//! else biased for TDPBSSD.

use std::marker::PhantomData;

use amx_runtime::block::{
    bias_a, dot_1x2, dot_2x2_prepared_ab, dot_tile, product_tile, tdpbssd_2x2_a_biased, Block,
    BlockError, PreparedA, PreparedB,
};
use amx_runtime::rules::decode::ProductKind;
use amx_runtime::rules::DotKind;
use amx_runtime::Fault;

use crate::configs::{MicroShape, A0, B0, C00};
use crate::error::{GemmError, InternalError};
use crate::kernel::{MicroKernel, MicroTask};
use crate::pack::STEP;
use crate::precision::{Precision, PrecisionKind, ROW_BYTES};
use crate::tile_ops::{full_tile_bounds, tile_bounds};

/// Rows of a tile.
const ROWS: usize = 16;

/// Micro-panels of A a block needs before [`Block2x2`] prepares its panels of B: preparing is
/// a pass of its own, where the kernel widens B while it computes, so it pays once a panel
/// serves three micro-panels or more. On a Zen 4-class core with the kernels capped at AVX2,
/// the prepared panels against the kernel's own widening, in one process: 2048^3 fp16 1.06x,
/// bf16 1.02x, 512^3 1.03x both; with two micro-panels (M = 64) 0.97x, with one (M = 32)
/// 0.8-0.85x. (The integer products, prepared since, are held to the same count.)
const PREPARE_B_FROM: usize = 3;

/// [`Block2x2`]'s prepared operands, with room made for them before a GEMM configures its tiles
/// ([`Prepared2x2::reserve`]): preparing then allocates nothing, as nothing may while a tile
/// configuration is held (an allocator that uses AMX would replace it).
#[derive(Debug, Default)]
pub(crate) struct Prepared2x2 {
    /// The current block of A in the form the emulator's kernel reads, where it has one (see
    /// [`PreparedA`]): made once per packed block, read by every task on it.
    a: PreparedA,
    /// The current panel of B (its k-steps of the current block) in that form, where the
    /// kernel reads one (see [`PreparedB`]) and the block has at least [`PREPARE_B_FROM`]
    /// micro-panels of A: made at the panel's first task, read by the tasks of every
    /// micro-panel on it (the nest runs them in a row, see [`MicroKernel::b_panels_outer`]).
    /// Forgotten with each new block of A, so that a panel is never taken for another one of a
    /// later call at the same address.
    b: PreparedB,
    /// The most bytes of A and of B that the room made holds (0 where none was made: nothing
    /// is prepared then).
    room: (usize, usize),
}

impl Prepared2x2 {
    /// Makes room for preparing blocks of A of up to `a_bytes` and panels of B of up to
    /// `b_bytes` for `P`'s product (nothing is allocated where the room made for an earlier
    /// call suffices); where the memory cannot be had, nothing will be prepared.
    pub(crate) fn reserve<P: Precision>(&mut self, a_bytes: usize, b_bytes: usize) {
        self.room = (0, 0);
        let Some(kind) = P::KIND.dot_kind() else {
            return;
        };
        if self.a.reserve(kind, a_bytes) && self.b.reserve(kind, b_bytes) {
            self.room = (a_bytes, b_bytes);
        }
    }
}

/// The 32 x 32 micro-kernel as one block product per task (see the module docs).
pub(crate) struct Block2x2<P> {
    /// The prepared operands.
    prepared: Prepared2x2,
    /// Whether the current block of A is biased for [`tdpbssd_2x2_a_biased`] (TDPBSSD where
    /// the kernel reads no prepared A).
    a_biased: bool,
    /// Whether the current block prepares its panels of B.
    prepare_b: bool,
    _precision: PhantomData<P>,
}

impl<P: Precision> Block2x2<P> {
    /// A kernel that prepares its operands in `prepared`, within the room made there.
    pub(crate) fn new(prepared: Prepared2x2) -> Self {
        Block2x2 {
            prepared,
            a_biased: false,
            prepare_b: false,
            _precision: PhantomData,
        }
    }

    /// The prepared operands' buffers, given back.
    pub(crate) fn into_prepared(self) -> Prepared2x2 {
        self.prepared
    }
}

/// The byte offset of tile `i` (C00, C01, C10, C11) of a micro-tile at `offset` with row
/// stride `ld`: `None` when it overflows (then the bounds check reports it).
fn tile_offset(offset: usize, ld: usize, i: usize) -> Option<usize> {
    (i / 2 * ROWS)
        .checked_mul(ld)?
        .checked_add(offset)?
        .checked_add(i % 2 * ROW_BYTES)
}

/// An operand's refused k-steps, as the typed path reports the tile load that would fault.
fn out_of_bounds(e: BlockError) -> GemmError {
    match e {
        BlockError::OutOfBounds {
            operand,
            needed,
            len,
        } => GemmError::Fault(Fault::OutOfBounds {
            tile: if operand == "A" { A0 as u8 } else { B0 as u8 },
            needed,
            len,
        }),
        other => GemmError::Internal(InternalError::new(format!("block product: {other}"))),
    }
}

impl<P: Precision> MicroKernel for Block2x2<P> {
    /// A put once per packed block into the form the emulator's kernel reads, where it reads
    /// one ([`PreparedA`]: widened or extended on the AVX2 paths), else, for TDPBSSD, biased
    /// once per block (see `tdpbssd_2x2_a_biased`) rather than once per task: each block of A
    /// is reused by every task of its rows.
    fn prepare_a(&mut self, block: &mut [u8]) {
        let p = &mut self.prepared;
        p.b.clear();
        self.a_biased = false;
        if let Some(kind) = P::KIND.dot_kind() {
            // Within the room made before the configuration, or not at all.
            let prepared = block.len() <= p.room.0 && p.a.prepare(kind, block);
            if !prepared && kind == DotKind::Tdpbssd {
                bias_a(block);
                self.a_biased = true;
            }
        }
    }

    fn b_panels_outer(&mut self, micro_panels: usize) -> bool {
        self.prepare_b = micro_panels >= PREPARE_B_FROM
            && self.prepared.room.1 > 0
            && P::KIND.dot_kind().is_some_and(PreparedB::applies);
        self.prepare_b
    }

    unsafe fn run(&mut self, t: &MicroTask<'_>) -> Result<(), GemmError> {
        let mut block = Block::zeroed();
        if t.accumulate {
            // Row by row through the pointer, never a slice of the whole buffer: for a plain
            // GEMM it is C, whose other rows other workers are writing meanwhile.
            let src = t.c_src;
            for (i, tile) in block.tiles.iter_mut().enumerate() {
                let at = tile_offset(t.c_src_offset, t.c_src_ld, i).unwrap_or(usize::MAX);
                full_tile_bounds(C00 as u8 + i as u8, at, t.c_src_ld, src.len())?;
                for (r, row) in tile.chunks_exact_mut(ROW_BYTES).enumerate() {
                    // SAFETY: full_tile_bounds proved rows r < 16 of 64 bytes at `at + r *
                    // c_src_ld` inside the source's live bytes, which no one writes during
                    // the call (the micro-kernel contract: this task's rows of C, or the
                    // partial sums of this worker).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            src.ptr().add(at + r * t.c_src_ld),
                            row.as_mut_ptr(),
                            ROW_BYTES,
                        )
                    };
                }
            }
        }
        // SAFETY: the packed A block (this worker's own) and the packed B panel (shared
        // read-only) are alive and unchanged during the call (the micro-kernel contract).
        let (block_a, b) = unsafe { (t.a.as_slice(), t.b.as_slice()) };
        let a = block_a.get(t.a_offset..).unwrap_or(&[]);
        let b = b.get(t.b_offset..).unwrap_or(&[]);
        // The driver runs this kernel only for the instructions `DotKind` lists.
        let Some(kind) = P::KIND.dot_kind() else {
            return Err(GemmError::Internal(InternalError::new(format!(
                "no block product for {}",
                P::KIND.instruction()
            ))));
        };
        if self.a_biased {
            // `prepare_a` biased the block.
            tdpbssd_2x2_a_biased(&mut block, (a, t.a_step), (b, STEP), t.steps)
        } else {
            // The prepared A where `prepare_a` made it from this block, and the panel of B
            // prepared at its first task where the block prepares them; else `dot_2x2`.
            let panel = b.get(..t.steps.saturating_mul(STEP)).unwrap_or(b);
            let p = &mut self.prepared;
            if self.prepare_b && panel.len() <= p.room.1 && !p.b.holds(kind, panel) {
                p.b.prepare(kind, panel);
            }
            dot_2x2_prepared_ab(
                kind,
                &mut block,
                (block_a, t.a_offset, t.a_step),
                &p.a,
                (panel, STEP),
                &p.b,
                t.steps,
            )
        }
        .map_err(out_of_bounds)?;
        #[cfg(test)]
        crate::tile_ops::probe::BLOCK_DOTS.with(|n| n.set(n.get() + 4 * t.steps as u64));
        let dst = t.c;
        for (i, tile) in block.tiles.iter().enumerate() {
            let at = tile_offset(t.c_offset, t.ldc_bytes, i).unwrap_or(usize::MAX);
            full_tile_bounds(C00 as u8 + i as u8, at, t.ldc_bytes, dst.len())?;
            for (r, row) in tile.chunks_exact(ROW_BYTES).enumerate() {
                // SAFETY: full_tile_bounds proved rows r < 16 of 64 bytes at `at + r * ldc_bytes`
                // inside C's `dst.len()` live bytes; the task's rows of C are written by no
                // other thread and no reference to them is alive (the micro-kernel contract).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        row.as_ptr(),
                        dst.ptr().add(at + r * t.ldc_bytes),
                        ROW_BYTES,
                    )
                };
            }
        }
        Ok(())
    }
}

/// A micro-tile of any other shape (the edges of C, and M or N below 32), or of any shape for
/// the FP8 products, on the emulator: per k-step, each of the shape's dot products (C00, C01,
/// C10, C11 as the shape uses them) on the per-instruction kernel of the emulator
/// ([`dot_tile`], [`product_tile`]), with the operands read where they are packed and C kept
/// in local tiles for the whole k-loop. The same products in the same order as
/// [`Amx2x2`](crate::kernel::Amx2x2) issues on the configured shape, so the same bits, without
/// the per-instruction checks and the copies of every tile load.
pub(crate) struct BlockEdge<P> {
    shape: MicroShape,
    _precision: PhantomData<P>,
}

impl<P: Precision> BlockEdge<P> {
    pub(crate) fn new(shape: MicroShape) -> Self {
        BlockEdge {
            shape,
            _precision: PhantomData,
        }
    }
}

/// Tile `i`'s rows and dword columns in `shape` (0 rows: unused).
fn edge_tile(shape: MicroShape, i: usize) -> (usize, usize) {
    let rows = [shape.r0(), shape.r1()][i / 2 % 2];
    let cols = [shape.c0(), shape.c1()][i % 2];
    (usize::from(rows), usize::from(cols))
}

impl<P: Precision> MicroKernel for BlockEdge<P> {
    unsafe fn run(&mut self, t: &MicroTask<'_>) -> Result<(), GemmError> {
        let Some(kernel) = TileKernel::of(P::KIND) else {
            return Err(GemmError::Internal(InternalError::new(format!(
                "no tile product for {}",
                P::KIND.instruction()
            ))));
        };
        let shape = self.shape;
        let mut c = Block::zeroed();
        // C in and out through the pointer, row by row (as `Block2x2`): for a plain GEMM it is
        // the caller's C, whose other rows other workers are writing meanwhile.
        for (i, tile) in c.tiles.iter_mut().enumerate() {
            let (rows, cols) = edge_tile(shape, i);
            if rows == 0 || cols == 0 || !t.accumulate {
                continue;
            }
            let at = tile_offset(t.c_src_offset, t.c_src_ld, i).unwrap_or(usize::MAX);
            let tile_id = C00 as u8 + i as u8;
            tile_bounds(tile_id, (rows, 4 * cols), at, t.c_src_ld, t.c_src.len())?;
            for (r, row) in tile.chunks_exact_mut(ROW_BYTES).take(rows).enumerate() {
                // SAFETY: tile_bounds proved rows r < `rows` of `4 cols` bytes at `at + r *
                // c_src_ld` inside the source's live bytes, which no one writes during the call
                // (the micro-kernel contract).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        t.c_src.ptr().add(at + r * t.c_src_ld),
                        row.as_mut_ptr(),
                        4 * cols,
                    )
                };
            }
        }
        // SAFETY: the packed A block (this worker's own) and the packed B panel (shared
        // read-only) are alive and unchanged during the call (the micro-kernel contract).
        let (a, b) = unsafe { (t.a.as_slice(), t.b.as_slice()) };
        // 16 full rows by 32 columns (a GEMM with M = 16): one row of the 2x2 block, in one
        // call (on an AVX2 core A is widened once per step for both products). Should its
        // operands not fit (they always do: the packing guarantees it), C is unchanged and the
        // loop below runs and reports it.
        let row_of_two =
            shape.r0() == 16 && shape.r1() == 0 && shape.c0() == 16 && shape.c1() == 16;
        let done = match (
            P::KIND.dot_kind(),
            <&mut [[u8; 1024]; 2]>::try_from(&mut c.tiles[..2]),
        ) {
            (Some(kind), Ok(pair)) if row_of_two => {
                let a = a.get(t.a_offset..).unwrap_or(&[]);
                let b = b.get(t.b_offset..).unwrap_or(&[]);
                dot_1x2(kind, pair, (a, t.a_step), (b, STEP), t.steps).is_ok()
            }
            _ => false,
        };
        // A tile row of A with fewer than 1024 bytes left in the buffer after it (a short last
        // micro-panel) is copied here, zero-padded; the kernel reads only its rows.
        let mut padded = [0u8; 1024];
        for s in (0..t.steps).filter(|_| !done) {
            let a_at = |h: usize| {
                s.checked_mul(t.a_step)
                    .and_then(|x| x.checked_add(t.a_offset))
                    .and_then(|x| x.checked_add(h * 1024))
            };
            let b_at = |w: usize| {
                s.checked_mul(STEP)
                    .and_then(|x| x.checked_add(t.b_offset))
                    .and_then(|x| x.checked_add(w * 1024))
            };
            for (i, ct) in c.tiles.iter_mut().enumerate() {
                let (rows, cols) = edge_tile(shape, i);
                if rows == 0 || cols == 0 {
                    continue;
                }
                let (Some(a_at), Some(b_at)) = (a_at(i / 2), b_at(i % 2)) else {
                    return Err(edge_out_of_bounds(A0, usize::MAX, a.len()));
                };
                let Some(bt) = b
                    .get(b_at..)
                    .and_then(|x| x.get(..1024))
                    .and_then(|x| <&[u8; 1024]>::try_from(x).ok())
                else {
                    return Err(edge_out_of_bounds(B0, b_at.saturating_add(1024), b.len()));
                };
                let at = match a.get(a_at..).and_then(|x| x.get(..1024)) {
                    Some(x) => <&[u8; 1024]>::try_from(x).ok(),
                    None => {
                        let needed = a_at.saturating_add(rows * ROW_BYTES);
                        let Some(rows_bytes) = a.get(a_at..needed) else {
                            return Err(edge_out_of_bounds(A0, needed, a.len()));
                        };
                        padded[..rows_bytes.len()].copy_from_slice(rows_bytes);
                        Some(&padded)
                    }
                };
                let Some(at) = at else {
                    return Err(edge_out_of_bounds(A0, usize::MAX, a.len()));
                };
                kernel.run(ct, at, bt, (rows, cols, 16));
            }
        }
        #[cfg(test)]
        crate::tile_ops::probe::BLOCK_DOTS
            .with(|n| n.set(n.get() + shape.dots().count() as u64 * t.steps as u64));
        let dst = t.c;
        for (i, tile) in c.tiles.iter().enumerate() {
            let (rows, cols) = edge_tile(shape, i);
            if rows == 0 || cols == 0 {
                continue;
            }
            let at = tile_offset(t.c_offset, t.ldc_bytes, i).unwrap_or(usize::MAX);
            tile_bounds(
                C00 as u8 + i as u8,
                (rows, 4 * cols),
                at,
                t.ldc_bytes,
                dst.len(),
            )?;
            for (r, row) in tile.chunks_exact(ROW_BYTES).take(rows).enumerate() {
                // SAFETY: tile_bounds proved rows r < `rows` of `4 cols` bytes at `at + r *
                // ldc_bytes` inside C's `dst.len()` live bytes; the task's rows of C are written
                // by no other thread and no reference to them is alive (the micro-kernel
                // contract).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        row.as_ptr(),
                        dst.ptr().add(at + r * t.ldc_bytes),
                        4 * cols,
                    )
                };
            }
        }
        Ok(())
    }
}

/// An operand tile of an edge task outside its buffer, as the typed path reports it.
fn edge_out_of_bounds(tile: i32, needed: usize, len: usize) -> GemmError {
    GemmError::Fault(Fault::OutOfBounds {
        tile: tile as u8,
        needed,
        len,
    })
}

/// The emulator's kernel for one tile product of a precision.
#[derive(Clone, Copy, Debug)]
pub(crate) enum TileKernel {
    Dot(DotKind),
    Product(ProductKind),
}

impl TileKernel {
    /// The kernel of `kind`'s instruction.
    pub(crate) fn of(kind: PrecisionKind) -> Option<TileKernel> {
        if let Some(dot) = kind.dot_kind() {
            return Some(TileKernel::Dot(dot));
        }
        Some(TileKernel::Product(match kind {
            PrecisionKind::Bf8Bf8 => ProductKind::Tdpbf8ps,
            PrecisionKind::Hf8Hf8 => ProductKind::Tdphf8ps,
            PrecisionKind::Bf8Hf8 => ProductKind::Tdpbhf8ps,
            PrecisionKind::Hf8Bf8 => ProductKind::Tdphbf8ps,
            _ => return None,
        }))
    }

    fn run(self, c: &mut [u8; 1024], a: &[u8; 1024], b: &[u8; 1024], shape: (usize, usize, usize)) {
        match self {
            TileKernel::Dot(kind) => dot_tile(kind, c, a, b, shape),
            TileKernel::Product(kind) => product_tile(kind, c, a, b, shape),
        }
    }
}
