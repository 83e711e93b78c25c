//! How a GEMM writes C (and a fused layer its output): through the caches, or with
//! non-temporal (streaming) stores.
//!
//! On the silicon code path every finished micro-tile waits in an L1 scratch tile and the next
//! micro-kernel call copies it to C a few rows per k-step (see `kernel::Drain`). A cached store
//! to a line of C that is in no cache first reads the line (a read for ownership); for a C
//! larger than L2 that read comes from L3 or memory, and it is half of C's traffic. A
//! non-temporal store writes the whole line without reading it, and leaves it in no cache.
//!
//! So streaming pays when C is large and not read right away, and costs when the caller reads C
//! at once from a cache that would have held it. [`CStores::Auto`] streams from
//! [`CStores::STREAM_MIN_BYTES`] of C on. Measured on AMX silicon (Emerald Rapids class, in one
//! process alternating with cached stores; see BENCHMARKS.md): without reading C back, u8s8 and
//! bf16 products were 1-19% faster streamed from 1024^3 to 2048^3 on one thread; with the whole
//! of C read right after each call, 1024^3 was 2% slower and 1536^3, 2048^3 and 512 x 4096 x
//! 4096 1-11% faster.

/// How a product writes C, or a fused layer ([`Gemm::run_with`](crate::Gemm::run_with)) its
/// output; see [`Gemm::c_stores`](crate::Gemm::c_stores).
///
/// Only the stores change: the values are the same bits either way. A fused layer streams the
/// rows its one-pass epilogue writes (the common layer on full panels of 32 columns, see
/// [`epilogue`](crate::epilogue)) when its output is `f32` or bf16 (rows of whole lines);
/// `u8` and `i8` rows, half a line, and the other epilogues' rows go through the caches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CStores {
    /// Streaming when the call overwrites at least [`CStores::STREAM_MIN_BYTES`] of C (or of
    /// a layer's output), cached otherwise.
    #[default]
    Auto,
    /// Always through the caches: for a caller that reads C right after the call and whose C
    /// fits in the caches it shares.
    Cached,
    /// Streaming wherever the product allows it, whatever the size of C: for a caller that
    /// reads C much later, or on other cores than the ones that wrote it.
    ///
    /// In a plain product a row of a micro-tile is streamed when the call overwrites C
    /// ([`Mode::Overwrite`]), the backend runs the tile instructions (the silicon code path:
    /// AMX silicon or the trap engine; the emulator stores C through the caches), the row holds
    /// 32 elements (whole micro-tiles, not the right edge of C), and C's rows start on 64-byte
    /// boundaries (C's address and its row stride in bytes multiples of 64). A fused layer's
    /// one-pass rows (see [`CStores`]) are streamed on every backend when the output's rows
    /// start on 64-byte boundaries. Other rows are cached stores.
    ///
    /// [`Mode::Overwrite`]: crate::Mode::Overwrite
    Streaming,
}

impl CStores {
    /// The size of C (`m * n` elements) from which [`CStores::Auto`] streams: 8 MiB,
    /// four times the L2 of the cores with AMX. Below it a caller that reads C right after the
    /// call still finds much of it in L3, which streaming would give up: on AMX silicon a
    /// 1024^3 product (4 MiB of C) read back at once was 2% slower streamed, while from 1536^3
    /// (9 MiB) on streaming was faster read back or not.
    pub const STREAM_MIN_BYTES: usize = 8 << 20;

    /// Whether a call that writes `c_bytes` of C streams it (`accumulate`: C is loaded first,
    /// so its lines are in the cache and a cached store costs no read).
    pub(crate) fn streams(self, c_bytes: usize, accumulate: bool) -> bool {
        !accumulate
            && match self {
                CStores::Auto => c_bytes >= CStores::STREAM_MIN_BYTES,
                CStores::Cached => false,
                CStores::Streaming => true,
            }
    }
}

/// Whether a row written at `addr` with rows `ld` bytes apart can be streamed: it starts a
/// 64-byte line, and so does every row after it.
pub(crate) fn aligned_rows(addr: usize, ld: usize) -> bool {
    addr.is_multiple_of(64) && ld.is_multiple_of(64)
}

/// Copies one 128-byte row from `src` to `dst` with non-temporal stores (two whole lines).
///
/// # Safety
/// `src` is 128 readable bytes, `dst` 128 writable bytes on a 64-byte boundary, and the two do
/// not overlap. The caller keeps a [`Fence`] alive across the call, so that the stores are
/// ordered before anything the thread does after it.
#[inline(always)]
pub(crate) unsafe fn stream_row(src: *const u8, dst: *mut u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        // 16-byte MOVNTDQ (SSE2, part of x86-64): four of them fill a line's write-combining
        // buffer, which then goes to memory as one full-line write.
        for i in 0..8 {
            // SAFETY: bytes `16i..16i + 16` of both rows, inside them (the caller's contract);
            // `dst + 16i` is 16-byte aligned because `dst` is 64-byte aligned.
            unsafe {
                let v = _mm_loadu_si128(src.add(16 * i).cast::<__m128i>());
                _mm_stream_si128(dst.add(16 * i).cast::<__m128i>(), v);
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above; a plain copy where there are no streaming stores.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, 128)
    }
}

/// SFENCE when dropped, if armed: non-temporal stores are weakly ordered, so a thread that may
/// have issued some fences them before it returns (before the pool's synchronization, a plain
/// store on x86, publishes C to other threads).
pub(crate) struct Fence(bool);

impl Fence {
    /// A fence that runs on drop when `armed`.
    pub(crate) fn new(armed: bool) -> Fence {
        Fence(armed)
    }
}

impl Drop for Fence {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        if self.0 {
            // SAFETY: SFENCE (SSE, part of x86-64) only orders stores.
            unsafe { std::arch::x86_64::_mm_sfence() };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_streams_large_overwrites_only() {
        let big = CStores::STREAM_MIN_BYTES;
        assert!(CStores::Auto.streams(big, false));
        assert!(!CStores::Auto.streams(big - 1, false));
        assert!(!CStores::Auto.streams(big, true));
        assert!(!CStores::Cached.streams(usize::MAX, false));
        assert!(CStores::Streaming.streams(4, false));
        assert!(!CStores::Streaming.streams(4, true));
    }

    #[test]
    fn aligned_rows_need_both_address_and_stride() {
        assert!(aligned_rows(0, 128));
        assert!(aligned_rows(4096, 64));
        assert!(!aligned_rows(4, 128));
        assert!(!aligned_rows(64, 100));
    }

    #[test]
    fn a_streamed_row_is_copied() {
        #[repr(align(64))]
        struct Line([u8; 192]);
        let src: Vec<u8> = (0..128).map(|i| i as u8 ^ 0x5a).collect();
        let mut dst = Line([0xee; 192]);
        {
            let _fence = Fence::new(true);
            // SAFETY: 128 bytes each, `dst` 64-byte aligned, distinct buffers, a fence alive.
            unsafe { stream_row(src.as_ptr(), dst.0.as_mut_ptr()) };
        }
        assert_eq!(&dst.0[..128], &src[..]);
        assert!(dst.0[128..].iter().all(|&b| b == 0xee));
    }
}
