//! Plain reference products, and the checks that compare this crate's results with them.
//!
//! # int8
//!
//! The tiles accumulate in 32-bit two's complement with wraparound (SEMANTICS.md section 9), so
//! the order of the sum does not matter: the reference sums exactly in `i64` and wraps to
//! `i32` once, and the check is **exact equality**.
//!
//! # bf16: the error bound
//!
//! The reference is computed from the same bf16 inputs in `f64`: each product of two bf16 is
//! exact (8-bit significands), and the `f64` sum of `K` of them is within
//! `K * 2^-53 * sum|a_k b_k|` of the exact sum. The tiles compute (SEMANTICS.md section 10),
//! per tile dot product over 32 elements of K, two `f32` lanes (even and odd k) of 16 exact
//! products each, each lane a chain of fused multiply-adds from `+0` (one rounding per step,
//! the first step exact), then `te + to` (one rounding), then `C + (te + to)` (one rounding);
//! the loop nest chains the `T = ceil(K / 32)` dot products of each output through C in
//! order, and storing and reloading C between blocks of K is exact. So every product passes
//! through at most `15 + 1 + T` roundings and the initial C through at most `T`, and the
//! standard bound for a summation tree of depth `h` applies with `h = T + 16`:
//!
//! ```text
//! |c - c_exact| <= gamma(h) * (|c0| + sum_k |a_k| |b_k|) + h * 2^-126,
//! gamma(h) = h u / (1 - h u),  u = 2^-24,  h = ceil(K / 32) + 16
//! ```
//!
//! where `c0` is C's value before an accumulating call (0 when overwriting) and the last term
//! covers flushing a result below `2^-126` to zero (denormals are flushed; inputs that are
//! denormal are treated as zero, so test inputs avoid them). The check allows this plus the
//! reference's own `f64` error. For K = 4096 the relative part is about `144 * 2^-24`, i.e.
//! `8.6e-6` of `sum |a||b|`: much tighter than a `K * 2^-24` bound.

use std::fmt;

use crate::error::{check_slice, GemmError, Operand};
use crate::gemm::Mode;
use crate::precision::{DType, Element, Precision};

/// `C (+)= A x B` computed plainly (int8: exact, wrapped to `i32`; bf16: summed in `f64` and
/// rounded to `f32` once). Same argument conventions, checks and errors as
/// [`Gemm::run_unpacked`](crate::Gemm::run_unpacked); leaves C unchanged when it returns an
/// error.
#[allow(clippy::too_many_arguments)]
pub fn gemm<P: Precision>(
    m: usize,
    n: usize,
    k: usize,
    a: &[P::A],
    lda: usize,
    b: &[P::B],
    ldb: usize,
    c: &mut [P::C],
    ldc: usize,
    mode: Mode,
) -> Result<(), GemmError> {
    check_slice(Operand::A, m, k, lda, a.len())?;
    check_slice(Operand::B, k, n, ldb, b.len())?;
    check_slice(Operand::C, m, n, ldc, c.len())?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        // An empty sum: C = 0, or C unchanged. (A and B may be empty slices whatever their
        // leading dimensions are, so they are not indexed.)
        if mode == Mode::Overwrite {
            for i in 0..m {
                c[i * ldc..i * ldc + n].fill(P::C::default());
            }
        }
        return Ok(());
    }
    let b = Widened::new::<P>(k, n, b, ldb);
    for i in 0..m {
        let row = &mut c[i * ldc..i * ldc + n];
        let start = (mode == Mode::Accumulate).then_some(&*row);
        let e = b.row::<P>(&a[i * lda..i * lda + k], start);
        for (out, exact) in row.iter_mut().zip(&e.exact) {
            *out = P::C::from_f64(*exact);
        }
    }
    Ok(())
}

/// B converted once to `f64` (exact for every element type), row-major `k x n`.
struct Widened {
    n: usize,
    values: Vec<f64>,
}

/// One row of the reference.
struct ExpectedRow {
    /// The exact (int8, already wrapped to i32) or f64 (bf16) results.
    exact: Vec<f64>,
    /// `|c0| + sum |a_k||b_k|` per output.
    magnitude: Vec<f64>,
}

impl Widened {
    fn new<P: Precision>(k: usize, n: usize, b: &[P::B], ldb: usize) -> Widened {
        let mut values = Vec::with_capacity(k * n);
        for kk in 0..k {
            values.extend(b[kk * ldb..kk * ldb + n].iter().map(|x| x.to_f64()));
        }
        Widened { n, values }
    }

    /// Row `a_row x B`, plus `c0` when given. The `f64` sums are exact for the integer types
    /// (each product below 2^16, so any K below 2^37 stays below 2^53), then wrapped to `i32`.
    fn row<P: Precision>(&self, a_row: &[P::A], c0: Option<&[P::C]>) -> ExpectedRow {
        let mut exact: Vec<f64> = match c0 {
            Some(c0) => c0.iter().map(|x| x.to_f64()).collect(),
            None => vec![0.0; self.n],
        };
        let mut magnitude: Vec<f64> = exact.iter().map(|x| x.abs()).collect();
        for (kk, a) in a_row.iter().enumerate() {
            let a = a.to_f64();
            let b_row = &self.values[kk * self.n..(kk + 1) * self.n];
            for ((e, m), b) in exact.iter_mut().zip(magnitude.iter_mut()).zip(b_row) {
                let p = a * b;
                *e += p;
                *m += p.abs();
            }
        }
        if P::DTYPE != DType::Bf16 {
            for e in &mut exact {
                *e = f64::from(*e as i64 as i32); // two's complement wraparound, as the tiles
            }
        }
        ExpectedRow { exact, magnitude }
    }
}

/// The largest error a bf16 output of this crate may have (see the [module docs](self)): for a
/// sum over `k` products with `|c0| + sum |a_k||b_k| = magnitude`.
pub fn bf16_tolerance(k: usize, magnitude: f64) -> f64 {
    let u = 2f64.powi(-24);
    let h = (k.div_ceil(32) + 16) as f64;
    let gamma = h * u / (1.0 - h * u);
    let reference = k as f64 * 2f64.powi(-53) * magnitude;
    gamma * magnitude + h * 2f64.powi(-126) + reference
}

/// Which outputs [`verify`] compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sample {
    /// Every output.
    All,
    /// About this many outputs: the four corners, the last row and column, and random others
    /// (seeded, so reruns check the same ones).
    Some(usize),
}

/// Why [`verify`] did not pass: bad arguments, or a result that does not match.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum VerifyError {
    /// The arguments do not describe matrices the slices hold (the checks of [`gemm`], and C's
    /// starting values `c0` checked as C).
    Input(GemmError),
    /// An output differs from the reference by more than allowed.
    Mismatch(Mismatch),
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyError::Input(e) => write!(f, "cannot verify: {e}"),
            VerifyError::Mismatch(m) => m.fmt(f),
        }
    }
}

impl std::error::Error for VerifyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VerifyError::Input(e) => Some(e),
            VerifyError::Mismatch(m) => Some(m),
        }
    }
}

impl From<GemmError> for VerifyError {
    fn from(e: GemmError) -> Self {
        VerifyError::Input(e)
    }
}

impl From<Mismatch> for VerifyError {
    fn from(m: Mismatch) -> Self {
        VerifyError::Mismatch(m)
    }
}

/// A result that does not match the reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// Row of C.
    pub row: usize,
    /// Column of C.
    pub col: usize,
    /// The value computed.
    pub got: f64,
    /// The reference value.
    pub expected: f64,
    /// The allowed error (0 for int8).
    pub tolerance: f64,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "C[{}][{}] = {} but the reference is {} (allowed error {:e})",
            self.row, self.col, self.got, self.expected, self.tolerance
        )
    }
}

impl std::error::Error for Mismatch {}

/// What [`verify`] compared.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Verified {
    /// Outputs compared.
    pub checked: usize,
    /// Outputs in C.
    pub total: usize,
    /// The largest `|error| / tolerance` seen (0 for int8, where the check is exact).
    pub worst_ratio: f64,
}

impl fmt::Display for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of {} outputs", self.checked, self.total)?;
        if self.worst_ratio > 0.0 {
            write!(f, ", worst |err|/bound {:.3}", self.worst_ratio)?;
        }
        Ok(())
    }
}

/// Compares `c` (the result of `C (+)= A x B` from `c0`, or from nothing with
/// [`Mode::Overwrite`]) with the reference: exact for int8, within [`bf16_tolerance`] for bf16.
///
/// The arguments are checked as [`gemm`] checks them (`c0`, when given, with C's shape and
/// `ldc`); bad ones give [`VerifyError::Input`], a difference [`VerifyError::Mismatch`].
#[allow(clippy::too_many_arguments)]
pub fn verify<P: Precision>(
    m: usize,
    n: usize,
    k: usize,
    a: &[P::A],
    lda: usize,
    b: &[P::B],
    ldb: usize,
    c0: Option<&[P::C]>,
    c: &[P::C],
    ldc: usize,
    sample: Sample,
) -> Result<Verified, VerifyError> {
    check_slice(Operand::A, m, k, lda, a.len())?;
    check_slice(Operand::B, k, n, ldb, b.len())?;
    check_slice(Operand::C, m, n, ldc, c.len())?;
    if let Some(c0) = c0 {
        check_slice(Operand::C, m, n, ldc, c0.len())?;
    }
    let mut verified = Verified {
        checked: 0,
        // C holds `(m - 1) * ldc + n >= m * n` elements when neither is 0 (checked above).
        total: m * n,
        worst_ratio: 0.0,
    };
    if m == 0 || n == 0 {
        return Ok(verified);
    }
    let b = Widened::new::<P>(k, n, b, ldb);
    let mut rows: Vec<usize> = (0..m).collect();
    let mut picked: Option<Vec<Vec<usize>>> = None;
    if let Sample::Some(count) = sample {
        if count < m * n {
            // The corners, the last row and column (sparsely), and random outputs.
            let mut cols = vec![Vec::new(); m];
            for (i, j) in [(0, 0), (0, n - 1), (m - 1, 0), (m - 1, n - 1)] {
                cols[i].push(j);
            }
            cols[m - 1].extend((0..n).step_by(n.div_ceil(64)));
            for i in (0..m).step_by(m.div_ceil(64)) {
                cols[i].push(n - 1);
            }
            let mut seed = 0x9E37_79B9_7F4A_7C15u64;
            for _ in 0..count {
                seed = crate::measure::splitmix(seed);
                cols[(seed >> 32) as usize % m].push((seed & 0xFFFF_FFFF) as usize % n);
            }
            // Each output once: the corners coincide on small shapes, random picks repeat.
            for row in &mut cols {
                row.sort_unstable();
                row.dedup();
            }
            rows.retain(|&i| !cols[i].is_empty());
            picked = Some(cols);
        }
    }
    for i in rows {
        let start = c0.map(|c0| &c0[i * ldc..i * ldc + n]);
        // With k = 0 the row of A is empty (and `a` may be empty whatever `lda` is).
        let a_row = if k == 0 {
            &[][..]
        } else {
            &a[i * lda..i * lda + k]
        };
        let e = b.row::<P>(a_row, start);
        let all: Vec<usize>;
        let cols = match &picked {
            Some(cols) => &cols[i],
            None => {
                all = (0..n).collect();
                &all
            }
        };
        for &j in cols {
            let got = c[i * ldc + j].to_f64();
            let expected = e.exact[j];
            verified.checked += 1;
            let tolerance = match P::DTYPE {
                DType::Bf16 => bf16_tolerance(k, e.magnitude[j]),
                DType::Int8 | DType::U8S8 => 0.0,
            };
            let err = (got - expected).abs();
            if err.is_nan() || err > tolerance {
                return Err(VerifyError::Mismatch(Mismatch {
                    row: i,
                    col: j,
                    got,
                    expected,
                    tolerance,
                }));
            }
            if tolerance > 0.0 {
                verified.worst_ratio = verified.worst_ratio.max(err / tolerance);
            }
        }
    }
    Ok(verified)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precision::{Bf16, Int8};
    use half::bf16;

    #[test]
    fn int8_reference_wraps() {
        // 200 000 products of 16384 sum to 3 276 800 000, past i32::MAX: the silicon's
        // accumulator wraps to that minus 2^32.
        let k = 200_000;
        let a = vec![-128i8; k];
        let b = vec![-128i8; k];
        let mut c = vec![0i32; 1];
        gemm::<Int8>(1, 1, k, &a, k, &b, 1, &mut c, 1, Mode::Overwrite).unwrap();
        assert_eq!(c[0], -1_018_167_296);
        assert!(verify::<Int8>(1, 1, k, &a, k, &b, 1, None, &c, 1, Sample::All).is_ok());
        c[0] += 1;
        assert!(verify::<Int8>(1, 1, k, &a, k, &b, 1, None, &c, 1, Sample::All).is_err());
    }

    #[test]
    fn bf16_tolerance_scales_with_k() {
        assert!(bf16_tolerance(32, 1.0) < 1e-5);
        assert!(bf16_tolerance(4096, 1.0) > bf16_tolerance(32, 1.0));
        let a = vec![bf16::from_f32(1.5); 4];
        let b = vec![bf16::from_f32(2.0); 4];
        let c = vec![12.0f32];
        let c0 = vec![1.0f32];
        let c1 = vec![13.0f32];
        assert!(verify::<Bf16>(1, 1, 4, &a, 4, &b, 1, None, &c, 1, Sample::All).is_ok());
        assert!(verify::<Bf16>(1, 1, 4, &a, 4, &b, 1, Some(&c0), &c1, 1, Sample::All).is_ok());
        assert!(verify::<Bf16>(1, 1, 4, &a, 4, &b, 1, Some(&c0), &c, 1, Sample::All).is_err());
    }
}
