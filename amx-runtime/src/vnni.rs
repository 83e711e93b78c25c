//! The layout of a dot product's B operand, and helpers that convert a matrix to it and back.
//!
//! The tile dot products do not read B as a row-major `K x N` matrix. Each 32-bit group of a
//! B tile row holds the `4 / size` consecutive K elements of one column (Intel calls this the
//! VNNI layout): four `i8`/`u8`, or two `bf16`/`f16`. Tile row `r`, group `j` holds
//!
//! ```text
//! B[g*r + 0][j], B[g*r + 1][j], ..., B[g*r + g-1][j]      g = 4 / size of an element
//! ```
//!
//! so a B tile of `K x N` is `K / g` rows of `N * g` elements (`4 N` bytes): an int8 B of
//! 64 x 16 is a 16 x 64-byte tile, a bf16 B of 32 x 16 too. A row-major B loaded as it is
//! compiles, runs, and gives wrong numbers; [`pack_b`] converts it (from `K x N` or `N x K`,
//! any leading dimension) and [`unpack_b`] converts back.
//!
//! The image [`pack_b`] writes is `ceil(K / g)` rows of `N * g` elements (K padded with zeros
//! to a multiple of `g`). With `N <= 16` and `K <= 16 g` it is one tile, loaded with a stride
//! of `N * g` elements; a larger image holds several tiles, each a window of at most 16 rows
//! and 64 bytes loaded with the image's own stride ([`BMatrix::image_stride`]).
//!
//! ```
//! use amx_runtime::tilecfg;
//! use amx_runtime::vnni::{pack_b, BMatrix};
//!
//! tilecfg! {
//!     struct Int8Block;
//!     palette 1;
//!     t0 as c: 16x16 i32;
//!     t4 as a: 16x64 i8;
//!     t6 as b: 16x64 i8;
//! }
//!
//! // A (16 x 64) and B (64 x 16), both row-major.
//! let a: Vec<i8> = (0..16 * 64).map(|i| (i % 7) as i8 - 3).collect();
//! let b: Vec<i8> = (0..64 * 16).map(|i| (i % 5) as i8 - 2).collect();
//! let shape = BMatrix::k_by_n(64, 16);
//! let mut image = vec![0i8; shape.image_len::<i8>().unwrap()];
//! pack_b(&b, shape, &mut image).unwrap();
//!
//! let mut c = [0i32; 16 * 16];
//! let mut tiles = Int8Block::configure().unwrap();
//! tiles.zero(Int8Block::c);
//! tiles.load(Int8Block::a, &a, 64).unwrap();
//! tiles.load(Int8Block::b, &image, shape.image_stride::<i8>()).unwrap();
//! tiles.tdpbssd(Int8Block::c, Int8Block::a, Int8Block::b);
//! tiles.store(Int8Block::c, &mut c, 16).unwrap();
//!
//! let (i, j) = (3, 5);
//! assert_eq!(c[i * 16 + j], (0..64).map(|k| a[i * 64 + k] as i32 * b[k * 16 + j] as i32).sum());
//! ```

use std::fmt;

mod sealed {
    pub trait Sealed {}
}

/// An element type of a dot product's A and B: `i8`, `u8`, [`half::bf16`], [`half::f16`],
/// [`Bf8`](crate::Bf8) or [`Hf8`](crate::Hf8). Sealed.
pub trait VnniElement: sealed::Sealed + Copy + Default + 'static {
    /// Elements of K in one 32-bit group of a B tile row: 4 for the bytes (FP8 included), 2
    /// for the 16-bit floats.
    const GROUP: usize;
}

macro_rules! vnni_element {
    ($($t:ty => $group:expr;)*) => {$(
        impl sealed::Sealed for $t {}
        impl VnniElement for $t {
            const GROUP: usize = $group;
        }
    )*};
}

vnni_element! {
    i8 => 4;
    u8 => 4;
    half::bf16 => 2;
    half::f16 => 2;
    crate::Bf8 => 4;
    crate::Hf8 => 4;
}

/// How the elements of a `K x N` matrix B lie in its slice.
///
/// Exhaustive on purpose: a dense matrix is stored by rows or by columns, and these are the
/// two. (Already-interleaved data is an image, which needs no conversion.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    /// Row-major `K x N`: element `(k, n)` at `k * ld + n`, `ld >= N`.
    KxN,
    /// Row-major `N x K` (B transposed, as weights are often stored, "out x in"): element
    /// `(k, n)` at `n * ld + k`, `ld >= K`.
    NxK,
}

/// The shape of a matrix B (`K x N`) as a slice holds it: named fields, so K, N and the
/// leading dimension cannot be swapped by position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BMatrix {
    /// Rows of B: the dot product's K.
    pub k: usize,
    /// Columns of B: the dot product's N.
    pub n: usize,
    /// Elements from one stored row to the next (of the `K x N` or the `N x K` matrix, as
    /// `order` says).
    pub ld: usize,
    /// How the elements lie in the slice.
    pub order: Order,
}

impl BMatrix {
    /// A dense row-major `K x N` matrix (`ld = n`).
    pub const fn k_by_n(k: usize, n: usize) -> BMatrix {
        BMatrix {
            k,
            n,
            ld: n,
            order: Order::KxN,
        }
    }

    /// A dense row-major `N x K` matrix, B transposed (`ld = k`).
    pub const fn n_by_k(k: usize, n: usize) -> BMatrix {
        BMatrix {
            k,
            n,
            ld: k,
            order: Order::NxK,
        }
    }

    /// The same matrix with rows `ld` elements apart.
    pub const fn with_ld(mut self, ld: usize) -> BMatrix {
        self.ld = ld;
        self
    }

    /// Elements per row of the image: `N * g` (`4 N` bytes), the stride to load its tiles
    /// with, in elements.
    pub const fn image_stride<T: VnniElement>(&self) -> usize {
        self.n.saturating_mul(T::GROUP)
    }

    /// Rows of the image: `ceil(K / g)`.
    pub const fn image_rows<T: VnniElement>(&self) -> usize {
        self.k.div_ceil(T::GROUP)
    }

    /// Elements of the image [`pack_b`] writes (`None` when the size overflows).
    pub const fn image_len<T: VnniElement>(&self) -> Option<usize> {
        match self.n.checked_mul(T::GROUP) {
            Some(row) => self.image_rows::<T>().checked_mul(row),
            None => None,
        }
    }

    /// Elements the matrix spans in its slice: `(rows - 1) * ld + cols` of its stored rows.
    fn extent(&self) -> Result<usize, VnniError> {
        let (rows, cols) = match self.order {
            Order::KxN => (self.k, self.n),
            Order::NxK => (self.n, self.k),
        };
        if rows == 0 || cols == 0 {
            return Ok(0);
        }
        if self.ld < cols {
            return Err(VnniError::LeadingDimension { ld: self.ld, cols });
        }
        (rows - 1)
            .checked_mul(self.ld)
            .and_then(|x| x.checked_add(cols))
            .ok_or(VnniError::TooLarge)
    }

    /// The offset of element `(k, n)` in the matrix's slice.
    fn at(&self, k: usize, n: usize) -> usize {
        match self.order {
            Order::KxN => k * self.ld + n,
            Order::NxK => n * self.ld + k,
        }
    }

    /// Checks the matrix against a slice of `matrix` elements and an image of `image`
    /// elements; returns the image's length.
    fn check<T: VnniElement>(&self, matrix: usize, image: usize) -> Result<usize, VnniError> {
        let needed = self.extent()?;
        if needed > matrix {
            return Err(VnniError::MatrixTooShort {
                needed,
                len: matrix,
            });
        }
        let len = self.image_len::<T>().ok_or(VnniError::TooLarge)?;
        if len > image {
            return Err(VnniError::ImageTooShort {
                needed: len,
                len: image,
            });
        }
        Ok(len)
    }
}

/// Why [`pack_b`] or [`unpack_b`] refused its arguments; counts are in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum VnniError {
    /// The leading dimension is shorter than the stored rows it must hold.
    LeadingDimension {
        /// The leading dimension given.
        ld: usize,
        /// The elements of a stored row (N for `K x N`, K for `N x K`).
        cols: usize,
    },
    /// The matrix's slice is shorter than its shape and leading dimension need.
    MatrixTooShort {
        /// Elements the shape spans.
        needed: usize,
        /// Elements the slice has.
        len: usize,
    },
    /// The image's slice is shorter than [`BMatrix::image_len`].
    ImageTooShort {
        /// Elements of the image.
        needed: usize,
        /// Elements the slice has.
        len: usize,
    },
    /// The shape's size overflows `usize`.
    TooLarge,
}

impl fmt::Display for VnniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VnniError::LeadingDimension { ld, cols } => write!(
                f,
                "the leading dimension {ld} is shorter than a stored row of the matrix ({cols} \
                 elements)"
            ),
            VnniError::MatrixTooShort { needed, len } => write!(
                f,
                "the matrix's slice has {len} elements; its shape and leading dimension span \
                 {needed}"
            ),
            VnniError::ImageTooShort { needed, len } => write!(
                f,
                "the image's slice has {len} elements; the image has {needed}"
            ),
            VnniError::TooLarge => f.write_str("the matrix is too large to address"),
        }
    }
}

impl std::error::Error for VnniError {}

/// Writes B, a matrix of the given shape in `matrix`, as a B tile image into the first
/// [`BMatrix::image_len`] elements of `image`: row `r`, group `j` holds
/// `B[g r .. g r + g][j]`, and the elements past K are zero.
///
/// # Errors
/// [`VnniError`] when the leading dimension is shorter than a stored row or a slice is too
/// short for the shape; nothing is written then.
pub fn pack_b<T: VnniElement>(
    matrix: &[T],
    shape: BMatrix,
    image: &mut [T],
) -> Result<(), VnniError> {
    let len = shape.check::<T>(matrix.len(), image.len())?;
    let g = T::GROUP;
    for (at, slot) in image[..len].iter_mut().enumerate() {
        let (r, rest) = (at / (shape.n * g), at % (shape.n * g));
        let (j, i) = (rest / g, rest % g);
        let k = r * g + i;
        *slot = if k < shape.k {
            matrix[shape.at(k, j)]
        } else {
            T::default()
        };
    }
    Ok(())
}

/// The inverse of [`pack_b`]: writes the `K x N` matrix a B tile image holds into `matrix`, in
/// the given shape's order and leading dimension. Elements of `matrix` between its rows (a
/// leading dimension larger than a row) are left as they are.
///
/// # Errors
/// As [`pack_b`].
pub fn unpack_b<T: VnniElement>(
    image: &[T],
    shape: BMatrix,
    matrix: &mut [T],
) -> Result<(), VnniError> {
    shape.check::<T>(matrix.len(), image.len())?;
    let g = T::GROUP;
    for k in 0..shape.k {
        for j in 0..shape.n {
            matrix[shape.at(k, j)] = image[(k / g) * shape.n * g + j * g + k % g];
        }
    }
    Ok(())
}
