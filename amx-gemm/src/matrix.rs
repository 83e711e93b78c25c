//! Matrix views: a slice with its shape and leading dimension in named fields, so that the
//! sizes of a call cannot be swapped by position.
//!
//! [`Gemm::run`](crate::Gemm::run) keeps the BLAS order `(m, a, lda, b, c, ldc)`: its K and N
//! come from the packed B, and its three sizes are each next to their slice. Every call that
//! takes more (a fused epilogue, B not yet packed, batches) takes these views.
//!
//! ```
//! use amx_gemm::{Backend, BRef, Gemm, Int8, MatMut, MatRef};
//!
//! let (m, n, k) = (2, 3, 4);
//! let a = vec![1i8; m * k];
//! let w = vec![2i8; n * k]; // weights stored N x K
//! let mut c = vec![0i32; m * n];
//! Gemm::new()
//!     .backend(Backend::Emulated)
//!     .run_unpacked::<Int8>(MatRef::new(&a, m, k), BRef::n_by_k(&w, k, n), MatMut::new(&mut c, m, n))
//!     .unwrap();
//! assert!(c.iter().all(|&x| x == 2 * 4));
//! ```

/// How a B that is not packed yet is stored: row-major `K x N`, or its transpose, row-major
/// `N x K`.
///
/// Exhaustive on purpose: a dense matrix is stored by rows or by columns, and these are the two.
pub use amx_runtime::vnni::Order as BLayout;

/// A matrix read from a slice: `rows x cols`, row `i` starting at `data[i * ld]`.
///
/// For the A of a [`Gemm`](crate::Gemm) with [`a_transposed`](crate::Gemm::a_transposed),
/// `rows x cols` is still `M x K` but the elements are column-major: `(i, k)` at
/// `data[k * ld + i]`, `ld >= M`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MatRef<'a, T> {
    /// The elements.
    pub data: &'a [T],
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Elements from the start of one row to the next (the leading dimension).
    pub ld: usize,
}

impl<'a, T> MatRef<'a, T> {
    /// A dense row-major `rows x cols` matrix (`ld = cols`).
    pub const fn new(data: &'a [T], rows: usize, cols: usize) -> MatRef<'a, T> {
        MatRef {
            data,
            rows,
            cols,
            ld: cols,
        }
    }

    /// The same matrix with rows `ld` elements apart.
    pub const fn with_ld(mut self, ld: usize) -> MatRef<'a, T> {
        self.ld = ld;
        self
    }
}

/// A matrix written into a slice: `rows x cols`, row `i` starting at `data[i * ld]`. Only the
/// `cols` elements of each row are written; the elements between rows are left as they are.
#[derive(Debug, PartialEq)]
pub struct MatMut<'a, T> {
    /// The elements.
    pub data: &'a mut [T],
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Elements from the start of one row to the next (the leading dimension).
    pub ld: usize,
}

impl<'a, T> MatMut<'a, T> {
    /// A dense row-major `rows x cols` matrix (`ld = cols`).
    pub fn new(data: &'a mut [T], rows: usize, cols: usize) -> MatMut<'a, T> {
        MatMut {
            data,
            rows,
            cols,
            ld: cols,
        }
    }

    /// The same matrix with rows `ld` elements apart.
    pub fn with_ld(mut self, ld: usize) -> MatMut<'a, T> {
        self.ld = ld;
        self
    }

    /// A view of the same matrix for a shorter borrow (to pass it to a call and keep it).
    pub fn reborrow(&mut self) -> MatMut<'_, T> {
        MatMut {
            data: self.data,
            rows: self.rows,
            cols: self.cols,
            ld: self.ld,
        }
    }
}

/// A `K x N` matrix B before packing, stored as `layout` says with rows `ld` elements apart:
/// `(k, n)` at `data[k * ld + n]` ([`BLayout::KxN`], `ld >= N`) or at `data[n * ld + k]`
/// ([`BLayout::NxK`], the "out features x in features" layout of weights, `ld >= K`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BRef<'a, T> {
    /// The elements.
    pub data: &'a [T],
    /// Rows of B: the product's K.
    pub k: usize,
    /// Columns of B: the product's N.
    pub n: usize,
    /// Elements from one stored row to the next.
    pub ld: usize,
    /// How the elements lie in `data`.
    pub layout: BLayout,
}

impl<'a, T> BRef<'a, T> {
    /// B stored row-major `K x N`, densely (`ld = n`).
    pub const fn k_by_n(data: &'a [T], k: usize, n: usize) -> BRef<'a, T> {
        BRef {
            data,
            k,
            n,
            ld: n,
            layout: BLayout::KxN,
        }
    }

    /// B stored transposed, row-major `N x K`, densely (`ld = k`).
    pub const fn n_by_k(data: &'a [T], k: usize, n: usize) -> BRef<'a, T> {
        BRef {
            data,
            k,
            n,
            ld: k,
            layout: BLayout::NxK,
        }
    }

    /// The same matrix with stored rows `ld` elements apart.
    pub const fn with_ld(mut self, ld: usize) -> BRef<'a, T> {
        self.ld = ld;
        self
    }

    /// The stored rows and columns: `(K, N)` or `(N, K)`.
    pub(crate) const fn stored(&self) -> (usize, usize) {
        match self.layout {
            BLayout::KxN => (self.k, self.n),
            BLayout::NxK => (self.n, self.k),
        }
    }
}

/// The batch of a batched call: how many products, and for each operand the elements from
/// one product's matrix to the next (the first starts at element 0 of the operand's view).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Batch {
    /// Products.
    pub count: usize,
    /// Elements from one A to the next.
    pub stride_a: usize,
    /// Elements from one B to the next.
    pub stride_b: usize,
    /// Elements from one C (or output) to the next; a residual follows this stride too.
    pub stride_c: usize,
}
