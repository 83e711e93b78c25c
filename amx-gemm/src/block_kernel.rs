//! The full micro-kernel on the emulator: a task's whole k-loop as one block product.
//!
//! [`Amx2x2`](crate::kernel::Amx2x2) issues `4 * steps` dot products and `2 * steps` loads of
//! each operand; on the emulator each of those is a call with its own bookkeeping and copies.
//! [`Block2x2`] hands the same packed micro-panels to [`amx_runtime::block::dot_2x2`], which
//! computes the same sequence bit for bit in one call (on AVX-512 VNNI in one fused kernel),
//! and moves C between memory and the block with the bounds checks of the typed path. The loop
//! nest, the packing and the order of the sums are those of the silicon; only the tile
//! registers are not used, so they hold unspecified data afterwards (as the micro-kernel
//! contract allows: contents are unspecified on entry).

use std::marker::PhantomData;

use amx_runtime::block::{bias_a, dot_2x2, tdpbssd_2x2_a_biased, Block, BlockError};
use amx_runtime::rules::DotKind;
use amx_runtime::Fault;

use crate::configs::{A0, B0, C00};
use crate::error::{GemmError, InternalError};
use crate::kernel::{MicroKernel, MicroTask};
use crate::pack::STEP;
use crate::precision::{Precision, ROW_BYTES};
use crate::tile_ops::full_tile_bounds;

/// Rows of a tile.
const ROWS: usize = 16;

/// The 32 x 32 micro-kernel as one block product per task (see the module docs).
pub(crate) struct Block2x2<P> {
    _precision: PhantomData<P>,
}

impl<P: Precision> Block2x2<P> {
    pub(crate) fn new() -> Self {
        Block2x2 {
            _precision: PhantomData,
        }
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
    /// TDPBSSD's A biased once per packed block (see `tdpbssd_2x2_a_biased`) rather than once
    /// per task: each block of A is reused by `nc / 32` tasks.
    fn prepare_a(&mut self, block: &mut [u8]) {
        if P::KIND.dot_kind() == Some(DotKind::Tdpbssd) {
            bias_a(block);
        }
    }

    unsafe fn run(&mut self, t: &MicroTask) -> Result<(), GemmError> {
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
        let (a, b) = unsafe { (t.a.as_slice(), t.b.as_slice()) };
        let a = a.get(t.a_offset..).unwrap_or(&[]);
        let b = b.get(t.b_offset..).unwrap_or(&[]);
        // The driver runs this kernel only for the instructions `DotKind` lists.
        let Some(kind) = P::KIND.dot_kind() else {
            return Err(GemmError::Internal(InternalError::new(format!(
                "no block product for {}",
                P::KIND.instruction()
            ))));
        };
        if kind == DotKind::Tdpbssd {
            // `prepare_a` biased the block.
            tdpbssd_2x2_a_biased(&mut block, (a, t.a_step), (b, STEP), t.steps)
        } else {
            dot_2x2(kind, &mut block, (a, t.a_step), (b, STEP), t.steps)
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
