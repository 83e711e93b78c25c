//! Packed weights as bytes: every blob written reads back to the same weights, the GEMM gives
//! the same result from a borrowed blob as from the packed original, and any damaged or
//! mismatched blob is a typed error, never a panic or a read out of bounds.

use amx_gemm::{Backend, Bf16, BlobError, Gemm, Int8, PackedB, PackedBView, Precision, U8S8};
use proptest::prelude::*;

/// A buffer holding a copy of `blob` at a 64-byte-aligned address (as a memory-mapped file
/// would be), and that address's offset in it.
struct Aligned {
    buf: Vec<u8>,
    at: usize,
}

impl Aligned {
    fn as_flattened(&self) -> &[u8] {
        &self.buf[self.at..]
    }
}

fn aligned(blob: &[u8]) -> Aligned {
    let mut buf = vec![0u8; blob.len() + 64];
    let at = buf.as_ptr().align_offset(64);
    buf[at..at + blob.len()].copy_from_slice(blob);
    Aligned { buf, at }
}

fn weights<P: Precision>(k: usize, n: usize) -> (Vec<P::B>, PackedB<P>)
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    let b = amx_test_support::random::<P::B>(k * n, 9);
    let packed = PackedB::<P>::pack(&b, k, n, n).unwrap();
    (b, packed)
}

fn round_trip<P: Precision>()
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    for (k, n) in [(0, 5), (7, 0), (1, 1), (64, 32), (100, 45), (300, 97)] {
        let (_, packed) = weights::<P>(k, n);
        let blob = packed.to_bytes();
        let sums = packed.col_sums().map_or(0, |s| 4 * s.len());
        assert_eq!(blob.len(), 64 + packed.packed_bytes() + sums, "{k}x{n}");
        let back = PackedB::<P>::from_bytes(&blob).unwrap();
        assert_eq!((back.k(), back.n()), (k, n));
        assert_eq!(back.view().packed_bytes(), packed.view().packed_bytes());
        let lines = aligned(&blob);
        let view = PackedBView::<P>::from_blob(&lines.as_flattened()[..blob.len()]).unwrap();
        assert_eq!(view.packed_bytes(), packed.view().packed_bytes());
    }
}

#[test]
fn blobs_read_back_to_the_same_weights() {
    round_trip::<Int8>();
    round_trip::<U8S8>();
    round_trip::<Bf16>();
}

#[test]
fn a_gemm_from_a_borrowed_blob_equals_one_from_the_packed_weights() {
    let (m, n, k) = (37, 70, 200);
    let (_, packed) = weights::<Int8>(k, n);
    let a = amx_test_support::random::<i8>(m * k, 3);
    let gemm = Gemm::new().threads(2).backend(Backend::Emulated);
    let mut want = vec![0i32; m * n];
    gemm.run(m, &a, k, &packed, &mut want, n).unwrap();
    let blob = packed.to_bytes();
    let lines = aligned(&blob);
    let view = PackedBView::<Int8>::from_blob(&lines.as_flattened()[..blob.len()]).unwrap();
    let mut got = vec![0i32; m * n];
    gemm.run_view(m, &a, k, view, &mut got, n).unwrap();
    assert_eq!(got, want);
}

#[test]
fn mismatches_are_named() {
    let (_, packed) = weights::<Int8>(64, 40);
    let blob = packed.to_bytes();
    assert_eq!(
        PackedB::<Bf16>::from_bytes(&blob).unwrap_err(),
        BlobError::WrongPrecision {
            expected: amx_gemm::PrecisionKind::Bf16,
            found: 0
        }
    );
    assert_eq!(
        PackedB::<Int8>::from_bytes(&blob[..10]).unwrap_err(),
        BlobError::Truncated { len: 10 }
    );
    let mut bad = blob.clone();
    bad[0] ^= 1;
    assert_eq!(
        PackedB::<Int8>::from_bytes(&bad).unwrap_err(),
        BlobError::BadMagic
    );
    let mut bad = blob.clone();
    bad[64 + 100] ^= 0x10;
    assert!(matches!(
        PackedB::<Int8>::from_bytes(&bad),
        Err(BlobError::Checksum { .. })
    ));
    let mut longer = blob.clone();
    longer.push(0);
    assert!(matches!(
        PackedB::<Int8>::from_bytes(&longer),
        Err(BlobError::WrongLength { .. })
    ));
    // A view needs an aligned blob; one byte off is refused.
    let lines = aligned(&[&[0u8][..], &blob].concat());
    assert_eq!(
        PackedBView::<Int8>::from_blob(&lines.as_flattened()[1..blob.len() + 1]).unwrap_err(),
        BlobError::Misaligned { offset: 1 }
    );
    for e in [BlobError::BadMagic, BlobError::Misaligned { offset: 1 }] {
        assert!(!e.to_string().is_empty());
    }
}

#[test]
fn every_truncation_and_every_flipped_header_bit_is_an_error() {
    let (_, packed) = weights::<U8S8>(70, 33);
    let blob = packed.to_bytes();
    for len in 0..blob.len() {
        assert!(
            PackedB::<U8S8>::from_bytes(&blob[..len]).is_err(),
            "length {len}"
        );
    }
    for byte in 0..64 {
        for bit in 0..8 {
            let mut bad = blob.clone();
            bad[byte] ^= 1 << bit;
            assert!(
                PackedB::<U8S8>::from_bytes(&bad).is_err(),
                "byte {byte} bit {bit} went unnoticed"
            );
        }
    }
}

proptest! {
    /// Arbitrary damage to a valid blob (bytes overwritten, header fields rewritten with sizes
    /// that overflow) is refused, never a panic; random bytes too.
    #[test]
    fn damaged_blobs_are_refused(
        edits in proptest::collection::vec((0usize..2048, any::<u8>()), 1..8),
        k in any::<u64>(),
        n in any::<u64>(),
        stated in any::<u64>(),
        rewrite in any::<bool>(),
    ) {
        let (_, packed) = weights::<Bf16>(40, 20);
        let mut blob = packed.to_bytes();
        if rewrite {
            blob[16..24].copy_from_slice(&k.to_le_bytes());
            blob[24..32].copy_from_slice(&n.to_le_bytes());
            blob[32..40].copy_from_slice(&stated.to_le_bytes());
        }
        let mut changed = rewrite;
        for (at, value) in edits {
            let at = at % blob.len();
            changed |= blob[at] != value;
            blob[at] = value;
        }
        let read = PackedB::<Bf16>::from_bytes(&blob);
        let lines = aligned(&blob);
        let viewed = PackedBView::<Bf16>::from_blob(&lines.as_flattened()[..blob.len()]);
        prop_assert_eq!(read.is_ok(), viewed.is_ok());
        if changed {
            // A CRC-32 misses a random corruption with odds of 2^-32; a rewrite that happens to
            // restore the original fields is the only other way through.
            if let Ok(back) = read {
                prop_assert_eq!(back.view().packed_bytes(), packed.view().packed_bytes());
            }
        }
    }

    #[test]
    fn random_bytes_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        prop_assert!(PackedB::<Int8>::from_bytes(&bytes).is_err());
    }
}
