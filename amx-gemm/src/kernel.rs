//! The micro-kernel: the innermost step of the loop nest, on tile registers only.

use std::marker::PhantomData;

use crate::c_stores;
use crate::configs::{A0, A1, B0, B1, C00, C01, C10, C11};
use crate::deferred::Deferred;
use crate::error::GemmError;
use crate::pack::{NR, STEP, TILE};
use crate::precision::{Precision, ROW_BYTES};
use crate::tile_ops::{Mem, MemMut, TileOps};

/// One micro-kernel call: where its operands are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MicroTask<'e> {
    /// The packed A block, and the byte offset of this call's micro-panel in it.
    pub a: Mem,
    pub a_offset: usize,
    /// Bytes between k-steps of the A micro-panel (64 per row of the panel).
    pub a_step: usize,
    /// The packed B, and the byte offset of this call's first k-step in its panel.
    pub b: Mem,
    pub b_offset: usize,
    /// k-steps to multiply (each one 64-byte row of A per output row).
    pub steps: usize,
    /// C, the byte offset of the micro-tile's first element, and the row stride in bytes.
    pub c: MemMut,
    pub c_offset: usize,
    pub ldc_bytes: usize,
    /// Load C and add to it (`true`), or start from zero (`false`).
    pub accumulate: bool,
    /// Where C is loaded from when accumulating: the buffer, the byte offset of the
    /// micro-tile's first element and the row stride (the same as `c` for a plain GEMM; the
    /// partial sums of earlier K blocks for a fused epilogue, whose last block stores to a
    /// scratch tile instead).
    pub c_src: Mem,
    pub c_src_offset: usize,
    pub c_src_ld: usize,
    /// Bytes ahead of each k-step's B tiles to prefetch (0: none).
    pub prefetch: usize,
    /// A finished micro-tile of an earlier call to finish during this call's k-steps.
    pub drain: Option<Pending<'e>>,
}

/// What remains of an earlier call's micro-tile, waiting in the scratch tile: done a few rows
/// per k-step of the next call, while its dot products run.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Pending<'e> {
    /// A plain GEMM's micro-tile, copied to C.
    Copy(Drain),
    /// A fused layer's micro-tile, through its epilogue to the output.
    Epilogue(Deferred<'e>),
}

impl Pending<'_> {
    /// Rows of the micro-tile.
    pub(crate) fn rows(&self) -> usize {
        match self {
            Pending::Copy(d) => d.rows(),
            Pending::Epilogue(d) => d.rows(),
        }
    }

    /// Finishes rows `from..to` (those of them below [`Pending::rows`]).
    ///
    /// # Safety
    /// As [`Drain::copy`] and [`Deferred::run`]: both buffers are alive, and nothing else
    /// touches the scratch tile's rows or the destination rows meanwhile.
    #[inline(always)]
    pub(crate) unsafe fn run(&self, from: usize, to: usize) {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            match self {
                Pending::Copy(d) => d.copy(from, to),
                Pending::Epilogue(d) => d.run(from, to),
            }
        }
    }
}

/// A finished micro-tile waiting in a scratch tile to be copied to C.
///
/// The plain GEMM's micro-kernel stores a micro-tile's last K block to a scratch tile in L1,
/// and the next micro-kernel call copies it to C a few rows per k-step. The lines of C are
/// usually in no cache, so each store first reads its line from memory: issued as 64 tile-row
/// stores at the end of a call, those reads held up the next call's tile loads; spread over its
/// k-steps, they overlap its dot products. On AMX silicon (Emerald Rapids class, a C copy of
/// the loop nest) this took 1024^3 from 11.4 to 10.0 ns per dot product (BENCHMARKS.md).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Drain {
    src: Mem,
    dst: MemMut,
    dst_offset: usize,
    ld: usize,
    rows: usize,
    row_bytes: usize,
    /// Whole rows on 64-byte boundaries, written with streaming stores (see `c_stores`).
    stream: bool,
}

impl Drain {
    /// The first `rows` rows of `row_bytes` bytes of the scratch tile `src` (rows 128 bytes
    /// apart), bound for `dst + dst_offset + r * ld`; `None` when either side does not hold
    /// them (the nest never asks for that: its micro-tiles lie inside C). With `stream`, whole
    /// rows that start 64-byte lines are written with streaming stores: the caller then fences
    /// them (a `c_stores::Fence`) before it returns.
    pub(crate) fn new(
        src: Mem,
        dst: MemMut,
        dst_offset: usize,
        ld: usize,
        (rows, row_bytes): (usize, usize),
        stream: bool,
    ) -> Option<Drain> {
        let last = rows.checked_sub(1)?;
        let src_end = last.checked_mul(SCRATCH_ROW)?.checked_add(row_bytes)?;
        let dst_end = last
            .checked_mul(ld)?
            .checked_add(dst_offset)?
            .checked_add(row_bytes)?;
        (row_bytes <= SCRATCH_ROW && src_end <= src.len() && dst_end <= dst.len()).then_some(
            Drain {
                src,
                dst,
                dst_offset,
                ld,
                rows,
                row_bytes,
                stream: stream
                    && row_bytes == SCRATCH_ROW
                    && c_stores::aligned_rows((dst.ptr() as usize).wrapping_add(dst_offset), ld),
            },
        )
    }

    /// Rows of the micro-tile.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Copies rows `from..to` (those of them below [`Drain::rows`]) to C.
    ///
    /// # Safety
    /// Both buffers are alive; nothing writes the scratch tile's rows or reads or writes the
    /// destination rows meanwhile (they are this thread's part of C).
    #[inline(always)]
    pub(crate) unsafe fn copy(&self, from: usize, to: usize) {
        for r in from..to.min(self.rows) {
            // SAFETY: `new` checked that row `r < rows` lies inside both buffers, which the
            // caller keeps alive and unshared; the scratch tile and C are distinct buffers.
            unsafe {
                let src = self.src.ptr().add(r * SCRATCH_ROW);
                let dst = self.dst.ptr().add(self.dst_offset + r * self.ld);
                if self.stream {
                    // `new` checked that the row is whole and starts a line; the nest holds
                    // a fence.
                    c_stores::stream_row(src, dst);
                } else if self.row_bytes == SCRATCH_ROW {
                    // A whole row, of a size known here: vector moves, not a call to memcpy.
                    std::ptr::copy_nonoverlapping(src, dst, SCRATCH_ROW);
                } else {
                    std::ptr::copy_nonoverlapping(src, dst, self.row_bytes);
                }
            }
        }
    }
}

/// Bytes of one row of a scratch tile: 32 accumulators of 4 bytes.
pub(crate) const SCRATCH_ROW: usize = 4 * NR;

/// A micro-kernel: computes one micro-tile of C, `rows x cols` outputs (at most 32 x 32), as
/// `C (+)= Ã x B̃` over `steps` k-steps, keeping the whole micro-tile in tile registers.
///
/// # Contract
///
/// **Tiles.** The thread holds the configuration of the micro-tile's shape from the
/// [configuration table](crate::configs) (C in t0..t3, A in t4/t5, B in t6/t7, unused tiles
/// for a remainder), and the kernel is the variant for that shape: it names only tiles the
/// configuration uses. Tile contents are unspecified on entry (the runtime keeps a
/// configuration loaded between calls); the kernel zeroes or loads every tile before reading
/// it.
///
/// **A.** `task.a + task.a_offset` is a packed micro-panel: k-step `s` at `+ s * a_step`, tile
/// row `h` (output rows `16h..16h+16`) at `+ h * 1024`, row stride 64 bytes, K tail zeroed.
///
/// **B.** `task.b + task.b_offset` is k-step 0 of this call in a packed B panel: k-step `s` at
/// `+ s * 2048`, tile column `h` (outputs `16h..16h+16`) at `+ h * 1024`, VNNI rows of 64 bytes.
///
/// **C.** The micro-tile's element `(i, j)` is at `task.c + task.c_offset + i * ldc_bytes + 4j`.
/// With `accumulate` the kernel first loads it from `task.c_src + task.c_src_offset +
/// i * c_src_ld + 4j` (C itself for a plain GEMM), otherwise it starts from zero; it then stores
/// exactly the `rows x cols` outputs of its shape and touches no other byte of C.
///
/// **Drain.** With `task.drain`, the kernel finishes that earlier micro-tile during its
/// k-steps (after each k-step's dot products, `ceil(rows / steps)` rows: copied to C, or
/// through the fused epilogue to the output), all of it before its own stores, which may reuse
/// the same scratch tile.
///
/// **Memory.** Every byte read or written lies inside the buffers of the task; on the emulator
/// the [`Checked`](crate::tile_ops::Checked) path (edges) and the
/// [`Typed`](crate::tile_ops::Typed) path (full micro-tiles) verify it on every load and store,
/// which is how the tests cover the addresses the hardware runs with no check.
///
/// # Order of instructions
///
/// Per k-step: prefetch the B tiles `task.prefetch` bytes ahead; load B0, A0, B1, A1; then
/// C00 += A0 B0, C01 += A0 B1, C10 += A1 B0, C11 += A1 B1. Each loaded tile feeds two dot
/// products. Tile registers are not renamed, so each load waits for the previous k-step's dot
/// products that read its register; issuing all four loads before the dot products, B (the
/// operand that comes from L2) first, lets each one start as soon as its register is free. On
/// AMX silicon (Emerald Rapids class, int8 and bf16, the micro-kernel alone over an L2-resident
/// B block) this order ran 11-14% faster than interleaving each load just before its first dot
/// product (A0, B0, C00, B1, C01, A1, C10, C11), the best of all 72 orders tried.
pub(crate) trait MicroKernel {
    /// Runs one task.
    ///
    /// # Safety
    /// The contract above: the configuration, and buffers alive and laid out as described,
    /// with the task's C rows written by no other thread.
    unsafe fn run(&mut self, task: &MicroTask<'_>) -> Result<(), GemmError>;

    /// Puts a block of A that `pack_a` just wrote into the form [`MicroKernel::run`] reads
    /// (padding included): as packed, unless the kernel says otherwise.
    fn prepare_a(&mut self, _block: &mut [u8]) {}

    /// Whether the nest should run the `micro_panels` micro-panels of A of the block just
    /// prepared (LOOP 2) inside the panels of B (LOOP 1) rather than the other way round: a
    /// kernel that prepares each panel of B once for every micro-panel of A against it says
    /// `true`. Asked once per block of k-steps; the same products either way.
    fn b_panels_outer(&mut self, _micro_panels: usize) -> bool {
        false
    }

    /// Whether the kernel copies a task's [`Drain`] during its k-steps, so that the nest may
    /// defer a finished micro-tile's stores to C to the next call (a kernel that does not keeps
    /// `false`, and the nest then never hands it a drain).
    fn drains(&self) -> bool {
        false
    }
}

/// The 2x2 register-tile AMX micro-kernel (4 C tiles, 2 A tiles, 2 B tiles: 32 x 32 outputs per
/// call on full tiles), and its 2x1, 1x2 and 1x1 variants for the edges (`TWO_ROWS`,
/// `TWO_COLS`), over any [`TileOps`]: the full variant runs over the typed tiles of the
/// precision's `tilecfg!` layout ([`Typed`](crate::tile_ops::Typed)), the edge variants over
/// [`Silicon`](crate::tile_ops::Silicon) or [`Checked`](crate::tile_ops::Checked).
pub(crate) struct Amx2x2<'o, O, P, const TWO_ROWS: bool, const TWO_COLS: bool> {
    ops: &'o mut O,
    _precision: PhantomData<P>,
}

impl<'o, O: TileOps, P: Precision, const TWO_ROWS: bool, const TWO_COLS: bool>
    Amx2x2<'o, O, P, TWO_ROWS, TWO_COLS>
{
    pub(crate) fn new(ops: &'o mut O) -> Self {
        Amx2x2 {
            ops,
            _precision: PhantomData,
        }
    }
}

impl<O: TileOps, P: Precision, const TWO_ROWS: bool, const TWO_COLS: bool> MicroKernel
    for Amx2x2<'_, O, P, TWO_ROWS, TWO_COLS>
{
    fn drains(&self) -> bool {
        true
    }

    #[inline(always)]
    unsafe fn run(&mut self, t: &MicroTask<'_>) -> Result<(), GemmError> {
        let ops = &mut *self.ops;
        let c01 = t.c_offset + 16 * 4;
        // The lower tile row exists only with TWO_ROWS (then C has rows 16.. here, so the offset
        // lies inside C and cannot overflow); a one-row C may have any stride.
        let c10 = if TWO_ROWS {
            t.c_offset + 16 * t.ldc_bytes
        } else {
            0
        };
        let c11 = c10 + 16 * 4;
        let s01 = t.c_src_offset + 16 * 4;
        let s10 = if TWO_ROWS {
            t.c_src_offset + 16 * t.c_src_ld
        } else {
            0
        };
        let s11 = s10 + 16 * 4;
        // SAFETY: (this block and the ones below) the caller holds this shape's configuration, in which
        // t0, t4, t6 are always used, t1/t7 exactly when TWO_COLS, t2/t5 exactly when TWO_ROWS
        // and t3 when both, with dot-product shapes the table checked; the offsets are those
        // of the contract, inside the task's buffers. The configuration is still the caller's
        // when these run: nothing between them and the caller's `configure` runs code outside
        // this crate (see `gemm::work`), and this function calls none either.
        unsafe {
            if t.accumulate {
                ops.load::<C00>(t.c_src, t.c_src_offset, t.c_src_ld)?;
                if TWO_COLS {
                    ops.load::<C01>(t.c_src, s01, t.c_src_ld)?;
                }
                if TWO_ROWS {
                    ops.load::<C10>(t.c_src, s10, t.c_src_ld)?;
                }
                if TWO_ROWS && TWO_COLS {
                    ops.load::<C11>(t.c_src, s11, t.c_src_ld)?;
                }
            } else {
                ops.zero::<C00>()?;
                if TWO_COLS {
                    ops.zero::<C01>()?;
                }
                if TWO_ROWS {
                    ops.zero::<C10>()?;
                }
                if TWO_ROWS && TWO_COLS {
                    ops.zero::<C11>()?;
                }
            }
        }
        let (mut a, mut b) = (t.a_offset, t.b_offset);
        let b_bytes = if TWO_COLS { STEP } else { TILE };
        let drain = t.drain;
        let per_step = drain.map_or(0, |d| d.rows().div_ceil(t.steps.max(1)));
        let mut drained = 0;
        for _ in 0..t.steps {
            if t.prefetch > 0 {
                // Any distance is allowed: a prefetch past the buffer touches nothing.
                ops.prefetch(t.b, b.wrapping_add(t.prefetch), b_bytes);
            }
            // SAFETY: as above.
            unsafe {
                ops.stream_load::<B0>(t.b, b, ROW_BYTES)?;
                ops.load::<A0>(t.a, a, ROW_BYTES)?;
                if TWO_COLS {
                    ops.stream_load::<B1>(t.b, b + TILE, ROW_BYTES)?;
                }
                if TWO_ROWS {
                    ops.load::<A1>(t.a, a + TILE, ROW_BYTES)?;
                }
                ops.dot::<P, C00, A0, B0>()?;
                if TWO_COLS {
                    ops.dot::<P, C01, A0, B1>()?;
                }
                if TWO_ROWS {
                    ops.dot::<P, C10, A1, B0>()?;
                    if TWO_COLS {
                        ops.dot::<P, C11, A1, B1>()?;
                    }
                }
            }
            if let Some(d) = &drain {
                // SAFETY: the nest's drain is an earlier micro-tile of this thread's part of C
                // (or of the output), which no tile instruction of this call touches, and the
                // scratch tile this call stores to only after its k-steps.
                unsafe { d.run(drained, drained + per_step) };
                drained += per_step;
            }
            a += t.a_step;
            b += STEP;
        }
        if let Some(d) = &drain {
            // SAFETY: as above (the rest, when the call has fewer k-steps than needed).
            unsafe { d.run(drained, d.rows()) };
        }
        // SAFETY: as above.
        unsafe {
            ops.store::<C00>(t.c, t.c_offset, t.ldc_bytes)?;
            if TWO_COLS {
                ops.store::<C01>(t.c, c01, t.ldc_bytes)?;
            }
            if TWO_ROWS {
                ops.store::<C10>(t.c, c10, t.ldc_bytes)?;
            }
            if TWO_ROWS && TWO_COLS {
                ops.store::<C11>(t.c, c11, t.ldc_bytes)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_copies_only_what_lies_inside_both_buffers() {
        let src: Vec<u8> = (0..32 * SCRATCH_ROW).map(|i| i as u8).collect();
        let mut dst = vec![0u8; 40 * 200];
        let (s, d) = (Mem::new(&src), MemMut::new(&mut dst));
        // 32 rows of 120 bytes at a stride of 200 end exactly at the end of C when they start
        // there; one byte further they would not fit. Nor does a row longer than the scratch
        // tile's, more rows than it holds, or no rows at all.
        let last_fit = d.len() - 31 * 200 - 120;
        assert!(Drain::new(s, d, last_fit, 200, (32, 120), false).is_some());
        assert!(Drain::new(s, d, last_fit + 1, 200, (32, 120), false).is_none());
        assert!(Drain::new(s, d, 0, 200, (2, SCRATCH_ROW + 1), false).is_none());
        assert!(Drain::new(s, d, 0, 200, (33, 4), false).is_none());
        assert!(Drain::new(s, d, 0, 200, (0, 4), false).is_none());
        let drain = Drain::new(s, d, 8, 200, (32, 120), false).unwrap();
        // SAFETY: both buffers are alive and used by nothing else until the checks below.
        unsafe {
            drain.copy(0, 3);
            drain.copy(3, 100);
        }
        for r in 0..40 {
            for b in 0..200 {
                let want = if r < 32 && (8..128).contains(&b) {
                    src[r * SCRATCH_ROW + b - 8]
                } else {
                    0
                };
                assert_eq!(dst[r * 200 + b], want, "row {r} byte {b}");
            }
        }
    }

    #[test]
    fn a_streaming_drain_streams_whole_aligned_rows_only() {
        #[repr(C, align(64))]
        struct Aligned([u8; 34 * 192]);
        let src: Vec<u8> = (0..32 * SCRATCH_ROW).map(|i| (i * 7) as u8).collect();
        let mut dst = Box::new(Aligned([0; 34 * 192]));
        let (s, d) = (Mem::new(&src), MemMut::new(&mut dst.0));
        // Rows 192 bytes apart from a line boundary: streamed. A row starting mid-line, a stride
        // that is not whole lines, or a partial row: cached stores.
        let streamed = Drain::new(s, d, 192, 192, (32, SCRATCH_ROW), true).unwrap();
        assert!(streamed.stream);
        assert!(
            !Drain::new(s, d, 196, 192, (32, SCRATCH_ROW), true)
                .unwrap()
                .stream
        );
        assert!(
            !Drain::new(s, d, 0, 160, (32, SCRATCH_ROW), true)
                .unwrap()
                .stream
        );
        assert!(!Drain::new(s, d, 192, 192, (32, 120), true).unwrap().stream);
        assert!(
            !Drain::new(s, d, 192, 192, (32, SCRATCH_ROW), false)
                .unwrap()
                .stream
        );
        {
            let _fence = c_stores::Fence::new(true);
            // SAFETY: both buffers are alive and used by nothing else until the checks below;
            // the fence is alive across the copy.
            unsafe { streamed.copy(0, 32) };
        }
        for r in 0..34 {
            for b in 0..192 {
                let want = if (1..33).contains(&r) && b < SCRATCH_ROW {
                    src[(r - 1) * SCRATCH_ROW + b]
                } else {
                    0
                };
                assert_eq!(dst.0[r * 192 + b], want, "row {r} byte {b}");
            }
        }
    }
}
