//! Cache blocking of the loop nest.

use crate::pack::{MR, NR};

/// The cache blocking of the loop nest (see the [crate docs](crate#the-loop-nest)).
///
/// Every value of every field is valid (0 counts as 1; sizes are rounded up to whole tiles);
/// the blocking changes the speed, never the result.
///
/// The defaults are sized for the machines this crate targets (48 KiB L1D and 2 MiB L2 per
/// core; Sapphire/Granite Rapids) and for both precisions alike, because every size here is in
/// bytes of tile rows:
///
/// - **`kc_steps` = 32** k-steps (2048 int8 or 1024 bf16 of K). Each micro-kernel call then
///   runs 128 tile dot products between one load and one store of its C micro-tile (4 KiB
///   each way), so C traffic is 1/4 of what 8 k-steps cost. The A micro-panel
///   (`32 rows x 32 x 64 B` = 64 KiB) no longer fits L1 beside the B micro-panel, but both
///   stream from L2 with the hardware prefetchers ahead of them; measured on AMX silicon
///   (Granite Rapids class, KVM guest) at 2048^3 int8 this is 2.0x faster on 1 thread and 1.8x
///   on 2 threads than 8 k-steps with `nc` = 2048, and 1.4x at 1024^3 (see BENCHMARKS.md). When
///   the region of C is a single micro-row (M <= 32, the bandwidth-bound shapes) nothing of B
///   is reused, so kc is all of K: C stays in the tiles for the whole sum and each B panel is
///   read front to back exactly once.
/// - **`nc` = 512** columns. The block of packed B one pass over A reuses is
///   `kc_steps x 2 KiB` per 32 columns: 1 MiB, half of L2, leaving the other half for the A
///   block, C traffic and prefetch. The packed layout spreads it over all L2 sets (see
///   [`pack`](crate::pack)).
/// - **`mc` = 256** rows: the packed A block is `256 x 2 KiB` = 512 KiB, in L2 beside the B
///   block; each of its 8 micro-panels is reused across all `nc / 32` = 16 B panels.
/// - **`prefetch_steps` = 0**: no software prefetch. The micro-kernel loads B, the operand it
///   streams, with TILELOADDT1 (a hint that the lines are not reused soon), so B displaces less
///   of the A micro-panel that the next B panels reuse; a PREFETCHT0 of B ahead pulled B's
///   lines into L1 with the normal priority and undid that. On AMX silicon (Emerald Rapids
///   class), with TILELOADDT1, prefetching 2 or 4 k-steps ahead was 0-4% slower at 1024^3 and
///   2048^3 and made no difference when B streams once (M <= 32). The field stays for other
///   cache hierarchies; only the silicon path issues prefetches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Blocking {
    /// Columns of B per L2-resident block (LOOP 5); rounded up to a multiple of 32.
    pub nc: usize,
    /// k-steps (64 bytes of each row of A) per block (LOOP 4); at least 1.
    pub kc_steps: usize,
    /// Rows of A packed per block (LOOP 3); rounded up to a multiple of 32.
    pub mc: usize,
    /// k-steps ahead of its loads that the B tiles are prefetched; 0 disables the prefetch.
    pub prefetch_steps: usize,
}

impl Blocking {
    /// The defaults described above.
    pub const DEFAULT: Blocking = Blocking {
        nc: 512,
        kc_steps: 32,
        mc: 256,
        prefetch_steps: 0,
    };

    /// The blocking with every field rounded up to what the loop nest needs. Any value of any
    /// field is accepted: 0 counts as 1, and sizes too large to round up become the largest
    /// multiple of the tile (a single block).
    pub(crate) fn normalized(self) -> Blocking {
        Blocking {
            nc: round_up(self.nc, NR),
            kc_steps: self.kc_steps.max(1),
            mc: round_up(self.mc, MR),
            prefetch_steps: self.prefetch_steps,
        }
    }
}

/// `x` (at least 1) rounded up to a multiple of `to`, saturating at the largest multiple.
fn round_up(x: usize, to: usize) -> usize {
    x.max(1)
        .checked_next_multiple_of(to)
        .unwrap_or(usize::MAX / to * to)
}

impl Default for Blocking {
    fn default() -> Self {
        Blocking::DEFAULT
    }
}
