//! Cache blocking of the loop nest.

use amx_runtime::Backend;

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
/// - **`kc_steps` = 16** k-steps (1024 int8 or 512 bf16 of K). Each micro-kernel call then
///   runs 64 tile dot products between one load and one store of its micro-tile's partial sums
///   (4 KiB each way, in L2), and its A micro-panel (`32 rows x 16 x 64 B` = 32 KiB) stays in the 48 KiB L1 while
///   the B panels stream past it with the non-temporal hint. Fewer k-steps (8) pay for C's
///   traffic; more (32, a 64 KiB micro-panel) let B's lines evict A's: measured on AMX silicon
///   (Emerald Rapids class, in one process, alternating per repetition), 16 k-steps against 32
///   were +6-9% for u8s8 at 2048^3 and 4096^3 and bf16 at 1024^3 and 2048^3, and equal at
///   1024^3 u8s8 (where 16 k-steps are all of K). (On the first silicon, a Granite Rapids-class
///   core before B was loaded non-temporally, 32 k-steps had been 1.4-2x faster than 8.) When
///   the region of C is a single micro-row (M <= 32, the bandwidth-bound shapes) nothing of B
///   is reused, so kc is all of K: C stays in the tiles for the whole sum and each B panel is
///   read front to back exactly once.
/// - **`nc` = 512** columns. The block of packed B one pass over A reuses is
///   `kc_steps x 2 KiB` per 32 columns: 512 KiB, a quarter of L2, leaving room for the A
///   block and C traffic. The packed layout spreads it over all L2 sets (see
///   [`pack`](crate::pack)).
/// - **`mc` = 256** rows: the slice of the packed A block one K block uses is `256 x 1 KiB` =
///   256 KiB, in L2 beside the B block; each of its 8 micro-panels is reused across all
///   `nc / 32` = 16 B panels. (The block itself holds all of K, packed once per call, up to
///   1 MiB.)
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
        kc_steps: 16,
        mc: 256,
        prefetch_steps: 0,
    };

    /// The emulator's blocking: [`Blocking::DEFAULT`] with 32 k-steps per block. The emulator
    /// widens or extends each step's tiles once per micro-kernel call and keeps C's partial
    /// sums in memory between calls, so longer calls pay less for both, while its operands
    /// stream through its own small buffers rather than through the tile registers whose L1
    /// footprint set `kc_steps` = 16 on the silicon. Measured on a Zen 4-class core, 2048^3
    /// on one thread, 16 and 32 k-steps alternating in one process, 32 faster by: bf16 4-14%,
    /// fp16 2% and int8 0-4% with the kernels capped at AVX2; bf16 3-9%, fp16 3% and int8
    /// 7-11% on the AVX-512 ones. 64 k-steps were no better than 32.
    pub const EMULATED: Blocking = Blocking {
        kc_steps: 32,
        ..Blocking::DEFAULT
    };

    /// The blocking a [`Gemm`](crate::Gemm) uses on `backend` unless told otherwise:
    /// [`Blocking::EMULATED`] on the emulator, [`Blocking::DEFAULT`] on the silicon, which
    /// includes the trap engine (it runs the silicon's code path as [`Backend::Hardware`]).
    pub fn for_backend(backend: Backend) -> Blocking {
        match backend {
            Backend::Emulated => Blocking::EMULATED,
            _ => Blocking::DEFAULT,
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The emulator's blocking differs from the silicon's in `kc_steps` alone, and only the
    /// emulator gets it (the trap engine is `Backend::Hardware`: it runs the silicon's code
    /// path, so its blocking too).
    #[test]
    fn each_backend_gets_its_blocking() {
        assert_eq!(Blocking::for_backend(Backend::Emulated), Blocking::EMULATED);
        assert_eq!(Blocking::for_backend(Backend::Hardware), Blocking::DEFAULT);
        assert_eq!(
            Blocking {
                kc_steps: Blocking::DEFAULT.kc_steps,
                ..Blocking::EMULATED
            },
            Blocking::DEFAULT
        );
        assert_ne!(Blocking::EMULATED.kc_steps, Blocking::DEFAULT.kc_steps);
    }
}
