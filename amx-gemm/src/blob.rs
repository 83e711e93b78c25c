//! Packed weights as bytes: [`PackedB::to_bytes`] writes a versioned, checksummed blob, and
//! [`PackedB::from_bytes`] (a copy) or [`PackedBView::from_blob`] (no copy, e.g. over a
//! memory-mapped file) read it back, so weights are packed once, at build or export time, and
//! loaded without repacking.
//!
//! # Format (version 2)
//!
//! A 64-byte header, then the packed data exactly as [`PackedB::pack`] lays it out, so the data
//! starts 64 bytes into the blob: a blob placed at a 64-byte-aligned address (a file mapped at
//! a page boundary) has 64-byte-aligned tiles. Then, for the int8 precisions, the column sums
//! of B ([`PackedB::col_sums`], N `i32`, what a zero point of the activations is compensated
//! with); they start 64-byte aligned too, as the packed data is a whole number of KiB. All
//! integers little-endian.
//!
//! | bytes  | field                                                                  |
//! |--------|------------------------------------------------------------------------|
//! | 0..8   | magic `AMXPACKB`                                                       |
//! | 8..10  | format version, 2                                                      |
//! | 10     | precision: 0 int8 (s8 x s8), 1 u8s8, 2 bf16, 3 s8u8, 4 u8u8, 5 fp16, 6 bf8 (bf8 x bf8), 7 hf8 (hf8 x hf8), 8 bf8hf8, 9 hf8bf8 |
//! | 11     | layout: 1 (panels of 32 columns, VNNI k-steps, 1 KiB gap per panel)   |
//! | 12..16 | zero                                                                   |
//! | 16..24 | K                                                                      |
//! | 24..32 | N                                                                      |
//! | 32..40 | bytes of packed data (what the layout of K and N gives)                |
//! | 40..44 | CRC-32 (ISO-HDLC, as zlib) of bytes 0..40 and 44..64, the packed data and the column sums |
//! | 44..52 | bytes of column sums: `4 N` for the int8 precisions (0 when K = 0), 0 for the float precisions |
//! | 52..64 | zero                                                                   |
//!
//! **Version 1** blobs (no column sums: bytes 44..64 zero, the CRC over bytes 0..40 and the
//! packed data) are still read: [`PackedB::from_bytes`] recomputes the sums from the packed
//! data, and a [`PackedBView::from_blob`] of one has none, so a call whose epilogue needs them
//! (a non-zero activation zero point) is refused with a typed error.
//!
//! Reading checks every field before it touches the data: magic, version, precision against
//! the type asked for, layout, the zero bytes, that K and N give exactly the stated data size,
//! that the column sums have the size N gives and that the blob holds exactly that much, then
//! the checksum, and last what a checksum cannot vouch for in a blob another tool wrote: that
//! the layout's padding is zero (the products read it) and that each column sum is its
//! column's. Any mismatch is a [`BlobError`]; no input panics or reads out of bounds.

use std::fmt;

use crate::pack::{PackedB, PackedBView};
use crate::precision::{Precision, PrecisionKind};

/// Bytes of the header.
pub const HEADER_BYTES: usize = 64;
const MAGIC: [u8; 8] = *b"AMXPACKB";
const VERSION: u16 = 2;
/// The first version, without column sums: still read.
const VERSION_1: u16 = 1;
const LAYOUT: u8 = 1;
/// Bytes the checksum covers in the header: everything before it.
const CHECKED_HEADER: usize = 40;

/// Why a blob cannot be read as packed weights of the precision asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlobError {
    /// Fewer bytes than a header.
    Truncated {
        /// Bytes the blob has.
        len: usize,
    },
    /// Not a packed-weights blob (the first 8 bytes are not `AMXPACKB`).
    BadMagic,
    /// A format version this crate does not read.
    UnsupportedVersion(u16),
    /// Weights of another precision than the one asked for.
    WrongPrecision {
        /// The precision asked for.
        expected: PrecisionKind,
        /// The precision code in the blob (0 int8, 1 u8s8, 2 bf16, 3 s8u8, 4 u8u8, 5 fp16,
        /// 6 bf8, 7 hf8, 8 bf8hf8, 9 hf8bf8, others unknown).
        found: u8,
    },
    /// A packed layout this crate does not use.
    UnsupportedLayout(u8),
    /// A byte that must be zero is not (at this offset of the header).
    NonZeroReserved {
        /// Offset in the header.
        offset: usize,
    },
    /// K and N do not give the stated data size, or the size does not fit the process's
    /// address space.
    InconsistentSize {
        /// K in the header.
        k: u64,
        /// N in the header.
        n: u64,
        /// Data bytes in the header.
        stated: u64,
    },
    /// The blob's length is not the header plus the stated data.
    WrongLength {
        /// Header plus data.
        expected: u64,
        /// Bytes the blob has.
        len: usize,
    },
    /// The checksum does not match: the blob was damaged.
    Checksum {
        /// The checksum in the header.
        stored: u32,
        /// The checksum of the bytes.
        computed: u32,
    },
    /// The stated size of the column sums is not what N gives (`4 N` bytes for the int8
    /// precisions, 0 for the float precisions and when K is 0).
    ColumnSums {
        /// Column-sum bytes in the header.
        stated: u64,
        /// What N and the precision give.
        expected: u64,
    },
    /// A byte of the packed data's padding (past K in the last k-step, past N in the last
    /// panel, a panel's gap) is not zero, as packing leaves it: the products would read it.
    NonZeroPadding {
        /// Offset in the blob.
        offset: usize,
    },
    /// A column sum is not the sum of the column's packed elements.
    WrongColumnSum {
        /// The column.
        column: usize,
        /// The sum in the blob.
        stated: i32,
        /// The sum of the packed column.
        computed: i32,
    },
    /// [`PackedBView::from_blob`] needs the blob at a 64-byte-aligned address, so that the
    /// tiles it loads are aligned (use [`PackedB::from_bytes`], which copies, otherwise).
    Misaligned {
        /// The blob's address modulo 64.
        offset: usize,
    },
}

impl fmt::Display for BlobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlobError::Truncated { len } => write!(
                f,
                "the blob has {len} bytes, fewer than the {HEADER_BYTES}-byte header"
            ),
            BlobError::BadMagic => f.write_str("not a packed-weights blob (bad magic)"),
            BlobError::UnsupportedVersion(v) => {
                write!(f, "packed-weights format version {v} is not supported (this crate reads {VERSION_1} and {VERSION})")
            }
            BlobError::WrongPrecision { expected, found } => match dtype_of(*found) {
                Some(found) => write!(f, "the blob holds {found} weights, not {expected}"),
                None => write!(f, "the blob's precision code {found} is unknown (expected {expected})"),
            },
            BlobError::UnsupportedLayout(l) => write!(f, "packed layout {l} is not supported"),
            BlobError::NonZeroReserved { offset } => {
                write!(f, "header byte {offset} is reserved and must be zero")
            }
            BlobError::InconsistentSize { k, n, stated } => write!(
                f,
                "K = {k} and N = {n} do not pack to the stated {stated} bytes"
            ),
            BlobError::WrongLength { expected, len } => write!(
                f,
                "the blob has {len} bytes; its header says {expected}"
            ),
            BlobError::Checksum { stored, computed } => write!(
                f,
                "checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): the blob is damaged"
            ),
            BlobError::ColumnSums { stated, expected } => write!(
                f,
                "the header states {stated} bytes of column sums; N and the precision give {expected}"
            ),
            BlobError::NonZeroPadding { offset } => write!(
                f,
                "byte {offset} of the blob is padding of the packed layout and must be zero"
            ),
            BlobError::WrongColumnSum {
                column,
                stated,
                computed,
            } => write!(
                f,
                "the blob's sum of column {column} is {stated}; its packed elements sum to {computed}"
            ),
            BlobError::Misaligned { offset } => write!(
                f,
                "the blob starts {offset} bytes past a 64-byte boundary; a view needs it aligned"
            ),
        }
    }
}

impl std::error::Error for BlobError {}

/// The blob's code of a precision.
fn code_of(dtype: PrecisionKind) -> u8 {
    match dtype {
        PrecisionKind::Int8 => 0,
        PrecisionKind::U8S8 => 1,
        PrecisionKind::Bf16 => 2,
        PrecisionKind::S8U8 => 3,
        PrecisionKind::U8U8 => 4,
        PrecisionKind::Fp16 => 5,
        PrecisionKind::Bf8Bf8 => 6,
        PrecisionKind::Hf8Hf8 => 7,
        PrecisionKind::Bf8Hf8 => 8,
        PrecisionKind::Hf8Bf8 => 9,
    }
}

fn dtype_of(code: u8) -> Option<PrecisionKind> {
    PrecisionKind::ALL.into_iter().find(|d| code_of(*d) == code)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// The header of `k x n` weights of `P` whose packed data is `data` and column sums `sums`
/// (little-endian bytes), in format `version` (1 only for the tests of old blobs).
fn header<P: Precision>(
    k: usize,
    n: usize,
    data: &[u8],
    sums: &[u8],
    version: u16,
) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..10].copy_from_slice(&version.to_le_bytes());
    h[10] = code_of(P::KIND);
    h[11] = LAYOUT;
    h[16..24].copy_from_slice(&(k as u64).to_le_bytes());
    h[24..32].copy_from_slice(&(n as u64).to_le_bytes());
    h[32..40].copy_from_slice(&(data.len() as u64).to_le_bytes());
    if version != VERSION_1 {
        h[44..52].copy_from_slice(&(sums.len() as u64).to_le_bytes());
    }
    let crc = checksum(&h, version, data, sums);
    h[40..44].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The CRC of a blob: version 1 covers header bytes 0..40 and the data, version 2 also header
/// bytes 44..64 (the column-sum size) and the column sums.
fn checksum(h: &[u8], version: u16, data: &[u8], sums: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&h[..CHECKED_HEADER]);
    if version != VERSION_1 {
        hasher.update(&h[CHECKED_HEADER + 4..HEADER_BYTES]);
    }
    hasher.update(data);
    if version != VERSION_1 {
        hasher.update(sums);
    }
    hasher.finalize()
}

/// The column sums as little-endian bytes.
fn sum_bytes(sums: Option<&[i32]>) -> Vec<u8> {
    sums.unwrap_or(&[])
        .iter()
        .flat_map(|s| s.to_le_bytes())
        .collect()
}

/// A checked blob: K, N, the packed data and (version 2, int8) the column sums' bytes.
struct Parsed<'a> {
    k: usize,
    n: usize,
    data: &'a [u8],
    sums: Option<&'a [u8]>,
}

/// Checks `blob` as weights of `P`.
fn parse<P: Precision>(blob: &[u8]) -> Result<Parsed<'_>, BlobError> {
    let Some(h) = blob.get(..HEADER_BYTES) else {
        return Err(BlobError::Truncated { len: blob.len() });
    };
    if h[0..8] != MAGIC {
        return Err(BlobError::BadMagic);
    }
    let version = u16::from_le_bytes([h[8], h[9]]);
    if version != VERSION && version != VERSION_1 {
        return Err(BlobError::UnsupportedVersion(version));
    }
    if h[10] != code_of(P::KIND) {
        return Err(BlobError::WrongPrecision {
            expected: P::KIND,
            found: h[10],
        });
    }
    if h[11] != LAYOUT {
        return Err(BlobError::UnsupportedLayout(h[11]));
    }
    let reserved_from = if version == VERSION_1 { 44 } else { 52 };
    if let Some(offset) = (12..16).chain(reserved_from..64).find(|&i| h[i] != 0) {
        return Err(BlobError::NonZeroReserved { offset });
    }
    let (k, n, stated) = (u64_at(h, 16), u64_at(h, 24), u64_at(h, 32));
    let inconsistent = BlobError::InconsistentSize { k, n, stated };
    let (Ok(k_us), Ok(n_us)) = (usize::try_from(k), usize::try_from(n)) else {
        return Err(inconsistent);
    };
    match PackedB::<P>::layout_of(k_us, n_us) {
        Ok((_, _, total)) if total as u64 == stated => {}
        _ => return Err(inconsistent),
    }
    let sums_stated = if version == VERSION_1 {
        0
    } else {
        u64_at(h, 44)
    };
    let sums_expected = if version == VERSION_1 || !P::KIND.is_integer() || k == 0 {
        0
    } else {
        n.saturating_mul(4)
    };
    if sums_stated != sums_expected {
        return Err(BlobError::ColumnSums {
            stated: sums_stated,
            expected: sums_expected,
        });
    }
    let expected = stated
        .checked_add(HEADER_BYTES as u64)
        .and_then(|x| x.checked_add(sums_stated));
    if expected != Some(blob.len() as u64) {
        return Err(BlobError::WrongLength {
            expected: expected.unwrap_or(u64::MAX),
            len: blob.len(),
        });
    }
    // The length matches header + data + sums, all of which fit `usize` (the blob does).
    let (data, sums) = blob[HEADER_BYTES..].split_at(stated as usize);
    let stored = u32::from_le_bytes([h[40], h[41], h[42], h[43]]);
    let computed = checksum(h, version, data, sums);
    if stored != computed {
        return Err(BlobError::Checksum { stored, computed });
    }
    // What a checksum cannot catch: a blob written by another tool (or a buggy one), with its
    // own checksum, whose padding or column sums are not the ones packing gives.
    if let Some(at) = PackedB::<P>::nonzero_padding(data, k_us, n_us) {
        return Err(BlobError::NonZeroPadding {
            offset: HEADER_BYTES + at,
        });
    }
    if version != VERSION_1 && P::KIND.is_integer() && !sums.is_empty() {
        let (steps, stride, _) =
            PackedB::<P>::layout_of(k_us, n_us).map_err(|_| inconsistent.clone())?;
        let mut computed = Vec::new();
        if computed.try_reserve_exact(n_us).is_err() {
            return Err(inconsistent);
        }
        computed.resize(n_us, 0i32);
        PackedB::<P>::column_sums(data, steps, stride, &mut computed);
        for (column, (stated, &computed)) in sums.chunks_exact(4).zip(&computed).enumerate() {
            let stated = i32::from_le_bytes([stated[0], stated[1], stated[2], stated[3]]);
            if stated != computed {
                return Err(BlobError::WrongColumnSum {
                    column,
                    stated,
                    computed,
                });
            }
        }
    }
    Ok(Parsed {
        k: k_us,
        n: n_us,
        data,
        sums: (version != VERSION_1 && P::KIND.is_integer()).then_some(sums),
    })
}

impl<P: Precision> PackedB<P> {
    /// The weights as a blob (see the [format](crate::blob)): a 64-byte header, then the packed
    /// data. Write it to a file once; load it with [`PackedB::from_bytes`] or, without a copy,
    /// [`PackedBView::from_blob`].
    ///
    /// ```
    /// use amx_gemm::{Int8, PackedB};
    ///
    /// let b: Vec<i8> = (0..64 * 40).map(|i| (i % 7) as i8).collect();
    /// let packed = PackedB::<Int8>::pack(&b, 64, 40, 40).unwrap();
    /// let blob = packed.to_bytes();
    /// let back = PackedB::<Int8>::from_bytes(&blob).unwrap();
    /// assert_eq!((back.k(), back.n(), back.get(5, 7)), (64, 40, Some(b[5 * 40 + 7])));
    /// assert!(PackedB::<Int8>::from_bytes(&blob[..100]).is_err());
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_bytes_version(VERSION)
    }

    /// The blob in format `version` (1: without column sums, for the tests of old blobs).
    fn to_bytes_version(&self, version: u16) -> Vec<u8> {
        let data = self.view().packed_bytes();
        let sums = if version == VERSION_1 {
            Vec::new()
        } else {
            sum_bytes(self.col_sums())
        };
        let mut out = Vec::with_capacity(HEADER_BYTES + data.len() + sums.len());
        out.extend_from_slice(&header::<P>(self.k(), self.n(), data, &sums, version));
        out.extend_from_slice(data);
        out.extend_from_slice(&sums);
        out
    }

    /// Reads a blob written by [`PackedB::to_bytes`] into newly allocated, aligned storage.
    ///
    /// # Errors
    /// [`BlobError`] for anything but an intact blob of weights of `P`; nothing is allocated
    /// before the header and the length are checked.
    pub fn from_bytes(blob: &[u8]) -> Result<PackedB<P>, BlobError> {
        let Parsed { k, n, data, sums } = parse::<P>(blob)?;
        let sums: Option<Vec<i32>> = sums.map(|bytes| {
            bytes
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        });
        // The sizes were checked against the layout of K and N, so only an allocation failure
        // remains.
        PackedB::from_packed_data(k, n, data, sums.as_deref()).map_err(|_| {
            BlobError::InconsistentSize {
                k: k as u64,
                n: n as u64,
                stated: data.len() as u64,
            }
        })
    }
}

impl<'a, P: Precision> PackedBView<'a, P> {
    /// Weights read in place from a blob written by [`PackedB::to_bytes`], without a copy: the
    /// GEMM reads the tiles straight out of `blob` (e.g. a memory-mapped file). The blob must
    /// start at a 64-byte-aligned address (a mapping does), so the tiles are aligned.
    ///
    /// ```
    /// use amx_gemm::{Backend, Gemm, Int8, PackedB, PackedBView};
    ///
    /// let (m, n, k) = (3, 40, 64);
    /// let b: Vec<i8> = (0..k * n).map(|i| (i % 5) as i8 - 2).collect();
    /// let blob = PackedB::<Int8>::pack(&b, k, n, n).unwrap().to_bytes();
    /// // A copy at a 64-byte-aligned address stands in for a mapped file here.
    /// let mut buf = vec![0u8; blob.len() + 64];
    /// let at = buf.as_ptr().align_offset(64);
    /// buf[at..at + blob.len()].copy_from_slice(&blob);
    /// let weights = PackedBView::<Int8>::from_blob(&buf[at..at + blob.len()]).unwrap();
    /// let a = vec![1i8; m * k];
    /// let mut c = vec![0i32; m * n];
    /// Gemm::new().threads(1).backend(Backend::Emulated).run_view(m, &a, k, weights, &mut c, n).unwrap();
    /// assert_eq!(c[0], (0..k).map(|p| i32::from(b[p * n])).sum::<i32>());
    /// ```
    ///
    /// # Errors
    /// [`BlobError`] for anything but an intact, aligned blob of weights of `P`.
    pub fn from_blob(blob: &'a [u8]) -> Result<PackedBView<'a, P>, BlobError> {
        let offset = blob.as_ptr() as usize % 64;
        if offset != 0 {
            return Err(BlobError::Misaligned { offset });
        }
        let Parsed { k, n, data, sums } = parse::<P>(blob)?;
        let col_sums = sums.and_then(sums_in_place);
        let (steps, panel_stride, _) =
            PackedB::<P>::layout_of(k, n).map_err(|_| BlobError::InconsistentSize {
                k: k as u64,
                n: n as u64,
                stated: data.len() as u64,
            })?;
        Ok(PackedBView {
            k,
            n,
            steps,
            panel_stride,
            data,
            col_sums,
            step_sums: None,
            _precision: std::marker::PhantomData,
        })
    }
}

/// The column sums of a blob, in place: `None` unless they are 4-byte aligned (they are in a
/// blob at a 64-byte-aligned address) and the target is little-endian, as the blob is.
fn sums_in_place(bytes: &[u8]) -> Option<&[i32]> {
    if cfg!(target_endian = "big")
        || !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<i32>())
    {
        return None;
    }
    // SAFETY: the pointer is aligned for i32 (checked), the `bytes.len() / 4` elements lie
    // inside `bytes` (a multiple of 4 bytes: 4 N, checked by `parse`), every bit pattern is a
    // valid i32, the blob is little-endian like the target, and the result borrows `bytes`.
    Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<i32>(), bytes.len() / 4) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Bf16, Int8, U8S8};

    /// Writes the checksum of a blob changed by hand (version 2).
    fn reseal(blob: &mut [u8], packed_bytes: usize) {
        let (h, rest) = blob.split_at(HEADER_BYTES);
        let (data, sums) = rest.split_at(packed_bytes);
        let crc = checksum(h, VERSION, data, sums);
        blob[40..44].copy_from_slice(&crc.to_le_bytes());
    }

    /// Each data byte of a blob of zero weights set by hand, the checksum made to match: an
    /// element (a byte that packing the same shape of non-zero weights sets) is read, and for
    /// the int8 precisions its column's sum no longer matches; any other byte is padding, and
    /// refused.
    fn every_byte_set<P: Precision>(zeros: &PackedB<P>, nonzero: &PackedB<P>, every: usize) {
        let blob = zeros.to_bytes();
        let elements = nonzero.to_bytes();
        let packed = zeros.packed_bytes();
        let (mut read, mut refused) = (0, 0);
        for at in (HEADER_BYTES..HEADER_BYTES + packed).step_by(every) {
            let mut changed = blob.clone();
            changed[at] = 0x7F;
            reseal(&mut changed, packed);
            let got = PackedB::<P>::from_bytes(&changed);
            if elements[at] == 0 {
                assert_eq!(got.unwrap_err(), BlobError::NonZeroPadding { offset: at });
                refused += 1;
            } else if P::KIND.is_integer() {
                assert!(
                    matches!(got, Err(BlobError::WrongColumnSum { stated: 0, .. })),
                    "{at}: {got:?}"
                );
                read += 1;
            } else {
                assert!(got.is_ok(), "{at}: {got:?}");
                read += 1;
            }
        }
        assert!(read > 0 && refused > 0, "{read} {refused}");
    }

    #[test]
    fn padding_and_column_sums_are_checked() {
        // bf16: K = 3 of a 32-row k-step, N = 2 of a 32-column panel.
        let (k, n) = (3, 2);
        let zeros = PackedB::<Bf16>::pack(&[half::bf16::ZERO; 6], k, n, n).unwrap();
        let ones = PackedB::<Bf16>::pack(&[half::bf16::ONE; 6], k, n, n).unwrap();
        every_byte_set(&zeros, &ones, 1);
        // int8: two panels, the second partial, and two k-steps, the second partial.
        let (k, n) = (70, 40);
        let zeros = PackedB::<Int8>::pack(&vec![0; k * n], k, n, n).unwrap();
        let ones = PackedB::<Int8>::pack(&vec![1; k * n], k, n, n).unwrap();
        every_byte_set(&zeros, &ones, 3);
        // A wrong sum, the data intact.
        let mut blob = ones.to_bytes();
        let sums = HEADER_BYTES + ones.packed_bytes();
        blob[sums + 4 * 39] ^= 1;
        reseal(&mut blob, ones.packed_bytes());
        assert_eq!(
            PackedB::<Int8>::from_bytes(&blob).unwrap_err(),
            BlobError::WrongColumnSum {
                column: 39,
                stated: 71,
                computed: 70
            }
        );
    }

    /// Unsigned weights' sums, recomputed from a version-1 blob's bytes, add them as `u8`.
    #[test]
    fn version_1_sums_of_unsigned_weights() {
        let (k, n) = (70, 40);
        let b: Vec<u8> = (0..k * n).map(|i| (i * 37 % 256) as u8).collect();
        let packed = PackedB::<crate::U8U8>::pack(&b, k, n, n).unwrap();
        let back = PackedB::<crate::U8U8>::from_bytes(&packed.to_bytes_version(VERSION_1)).unwrap();
        let want: Vec<i32> = (0..n)
            .map(|j| (0..k).map(|p| i32::from(b[p * n + j])).sum())
            .collect();
        assert_eq!(back.col_sums(), Some(&want[..]));
        assert_eq!(packed.col_sums(), Some(&want[..]));
    }

    #[test]
    fn version_1_blobs_are_still_read() {
        let (k, n) = (70, 40);
        let b: Vec<i8> = (0..k * n).map(|i| (i * 7 % 19) as i8 - 9).collect();
        let packed = PackedB::<U8S8>::pack(&b, k, n, n).unwrap();
        let old = packed.to_bytes_version(VERSION_1);
        assert_eq!(old.len(), HEADER_BYTES + packed.packed_bytes());
        let back = PackedB::<U8S8>::from_bytes(&old).unwrap();
        // The column sums are recomputed from the packed data.
        assert_eq!(back.col_sums(), packed.col_sums());
        assert_eq!(back.view().packed_bytes(), packed.view().packed_bytes());
        let new = packed.to_bytes();
        assert_eq!(new.len(), old.len() + 4 * n);
        let back = PackedB::<U8S8>::from_bytes(&new).unwrap();
        assert_eq!(back.col_sums(), packed.col_sums());
        // A view of a version-1 blob has no sums: a zero point is refused, none is fine.
        let mut lines = vec![crate::pack::Line([0; 64]); old.len().div_ceil(64)];
        // SAFETY: `Line` is 64 plain bytes; the slice covers exactly the vector's lines.
        let buf = unsafe {
            std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<u8>(), lines.len() * 64)
        };
        buf[..old.len()].copy_from_slice(&old);
        let view = PackedBView::<U8S8>::from_blob(&buf[..old.len()]).unwrap();
        assert_eq!(view.col_sums(), None);
        let gemm = crate::Gemm::new()
            .backend(crate::Backend::Emulated)
            .threads(1);
        let a = vec![3u8; 2 * k];
        let a = crate::MatRef::new(&a, 2, k);
        let mut out = vec![0f32; 2 * n];
        let zp = crate::Epilogue::new().quantized(1.0, 3, crate::WeightScale::Tensor(1.0));
        assert!(matches!(
            gemm.run_view_with(a, view, crate::MatMut::new(&mut out, 2, n), &zp),
            Err(crate::GemmError::InvalidEpilogue(
                crate::EpilogueError::MissingColumnSums
            ))
        ));
        let none = crate::Epilogue::new();
        gemm.run_view_with(a, view, crate::MatMut::new(&mut out, 2, n), &none)
            .unwrap();
        // A bf16 blob has no sums in either version.
        let b16 = PackedB::<Bf16>::pack(&[half::bf16::ONE; 6], 3, 2, 2).unwrap();
        assert_eq!(b16.to_bytes().len(), HEADER_BYTES + b16.packed_bytes());
        assert!(PackedB::<Bf16>::from_bytes(&b16.to_bytes_version(VERSION_1)).is_ok());
        // An int8 version-2 blob that states the wrong size of sums is refused.
        let mut bad = PackedB::<Int8>::pack(&b, k, n, n).unwrap().to_bytes();
        bad[44] ^= 4;
        assert_eq!(
            PackedB::<Int8>::from_bytes(&bad).unwrap_err(),
            BlobError::ColumnSums {
                stated: (4 * n as u64) ^ 4,
                expected: 4 * n as u64
            }
        );
    }
}
