//! A 2x2 block of tile dot products over many k-steps in one call (the public face is
//! [`crate::block`]): the fused kernel where the CPU has one, else the per-instruction kernels
//! of this module's parent, step by step, on the operands in place.

use amx_tilecfg::decode::ProductKind;
use amx_tilecfg::DotKind;

use super::KernelPath;

/// Bytes of one k-step of a block's operand: two 16 x 64-byte tiles.
const STEP_BYTES: usize = 2048;

/// The operands of a block, validated by [`Operands::new`]: for every `s < steps`, the
/// `A_TILES` tiles at `s * a_step` of `a` and the 2048 bytes at `s * b_step` of `b` exist
/// (`A_TILES` is 2 for a 2x2 block, 1 for a row of two products). The fields are private so
/// that no unvalidated value reaches the fused kernels, which read through raw pointers.
pub(crate) struct Operands<'o, const A_TILES: usize = 2> {
    a: &'o [u8],
    a_step: usize,
    b: &'o [u8],
    b_step: usize,
    steps: usize,
}

/// One past the last byte `steps` k-steps of `bytes` bytes, `step` bytes apart, read
/// (`usize::MAX` when that overflows).
fn needed(steps: usize, step: usize, bytes: usize) -> usize {
    match steps {
        0 => 0,
        _ => (steps - 1)
            .checked_mul(step)
            .and_then(|x| x.checked_add(bytes))
            .unwrap_or(usize::MAX),
    }
}

impl<'o, const A_TILES: usize> Operands<'o, A_TILES> {
    /// The operands, or the first that is too short: `(operand, needed, len)` with the
    /// operand `"A"` or `"B"`.
    pub(crate) fn new(
        (a, a_step): (&'o [u8], usize),
        (b, b_step): (&'o [u8], usize),
        steps: usize,
    ) -> Result<Self, (&'static str, usize, usize)> {
        let a_bytes = A_TILES * 1024;
        for (operand, buf, step, bytes) in [("A", a, a_step, a_bytes), ("B", b, b_step, STEP_BYTES)]
        {
            let needed = needed(steps, step, bytes);
            if needed > buf.len() {
                return Err((operand, needed, buf.len()));
            }
        }
        Ok(Operands {
            a,
            a_step,
            b,
            b_step,
            steps,
        })
    }
}

/// Tile `h` (0 or 1) of step `s` of an operand; `None` past the buffer (never, once
/// validated; the `Option` keeps this panic-free).
pub(super) fn tile(x: &[u8], step: usize, s: usize, h: usize) -> Option<&[u8; 1024]> {
    let at = s.checked_mul(step)?.checked_add(h * 1024)?;
    x.get(at..at.checked_add(1024)?)?.try_into().ok()
}

/// Asks for every 64-byte line of B's two tiles of step `s` (the `step`-strided operand `x`)
/// to be brought into L2 ahead of use; nothing when the step lies outside `x`.
///
/// The float block kernels call it once per step, for the step after the next one they read
/// (see [`B_LEAD`]). When M is small (a GEMM with M = 16 or 32 reads each byte of packed B
/// once, and with N = K = 4096 bf16 B is 32 MiB, more than L3), B streams from memory, but
/// each 4 KiB page of it (two steps) takes the kernel so long that the out-of-order window
/// never reaches the next page in time, and the hardware prefetchers stop at page
/// boundaries: without prefetches the kernels read B at 3-9 GB/s, where a plain streaming
/// read reaches 16-49 GB/s.
///
/// Why L2 (`PREFETCHT1`) and one step at a time: a step's operands and the kernels' own
/// buffers (the widened or re-paired tiles of two steps, the C tiles) already fill most of a
/// 32 KiB L1, and a burst of hundreds of L1 prefetches waits for L1's few miss buffers
/// before the arithmetic can go on; lines in L2 reach L1 in time through the L1 prefetcher.
/// On a Zen 4-class core, the AVX2 bf16 GEMM at 16 x 4096 x 4096 ran 1.8x as fast with one
/// step's lines asked into L2 per kernel call than with the next 8 steps' asked into L1 at
/// once, and the AVX-512 kernels 1.2-1.3x as fast with one step into L2 than with the fourth
/// step ahead into L1 (BENCHMARKS.md). A prefetch never faults and changes no result; the
/// lines come from the checked tiles, so no address leaves `x`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "sse")]
pub(super) fn prefetch_b_step(x: &[u8], step: usize, s: usize) {
    use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
    for w in 0..2 {
        if let Some(t) = tile(x, step, s, w) {
            for line in t.chunks_exact(64) {
                _mm_prefetch::<_MM_HINT_T1>(line.as_ptr().cast());
            }
        }
    }
}

/// Steps between the step whose B a float block kernel first reads next and the one
/// [`prefetch_b_step`] asks for: one step of lead, a few hundred nanoseconds even on one row
/// of tiles, far more than memory's latency. More lead was slower (2 to 7 steps: 0.8-0.94x
/// as fast on a Zen 4-class core).
pub(super) const B_LEAD: usize = 1;

/// An operand's tiles widened ahead (see `crate::block::PreparedA`, `PreparedB`): tile `h` of
/// step `s` is `tiles[first + s * stride + h]`.
#[derive(Clone, Copy)]
pub(crate) struct PreparedTiles<'p> {
    pub(crate) tiles: &'p [super::Widened],
    pub(crate) first: usize,
    pub(crate) stride: usize,
}

impl<'p> PreparedTiles<'p> {
    /// Tile `h` of step `s`, if the slice holds it.
    pub(crate) fn tile(&self, s: usize, h: usize) -> Option<&'p super::Widened> {
        let at = s
            .checked_mul(self.stride)?
            .checked_add(self.first)?
            .checked_add(h)?;
        self.tiles.get(at)
    }
}

/// The form [`dot_2x2_prepared`]'s kernel reads an operand's tiles in, prepared ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Preparation {
    /// Widened to f32 ([`super::widen`]): a floating-point product on the AVX2 float path.
    Widened(super::Half),
    /// Extended to i16 ([`super::extend`] for A, [`super::extend_split`] for B, `split`): an
    /// integer product on the AVX2 integer path.
    Extended { signed: bool, split: bool },
}

impl Preparation {
    /// Writes `tile` in this form into `out`.
    pub(crate) fn apply(self, tile: &[u8; 1024], out: &mut super::Widened) {
        match self {
            Preparation::Widened(half) => super::widen(tile, half, out),
            Preparation::Extended {
                signed,
                split: false,
            } => super::extend(tile, signed, out),
            Preparation::Extended {
                signed,
                split: true,
            } => super::extend_split(tile, signed, out),
        }
    }
}

/// The form [`dot_2x2_prepared`] wants A's tiles (or, `b`, B's) in for `kind`, where its
/// kernel reads prepared tiles: a floating-point product on the AVX2 float path, an integer
/// one on the AVX2 integer path; `None` elsewhere.
pub(crate) fn preparation(kind: DotKind, b: bool) -> Option<Preparation> {
    #[cfg(target_arch = "x86_64")]
    match int8_signs(kind) {
        Some((sa, sb)) if super::int8_path() == KernelPath::Avx2 => {
            return Some(Preparation::Extended {
                signed: if b { sb } else { sa },
                split: b,
            });
        }
        None if super::float_path() == KernelPath::Avx2 => {
            return Some(Preparation::Widened(half_of(kind)));
        }
        _ => {}
    }
    let _ = (kind, b);
    None
}

/// [`dot_2x2`] with A's or B's tiles (or both) also given prepared (`prepared`, the same tiles
/// as `ops`' operand, in the form [`preparation`] gives for `kind`): where that form is the
/// kernel's (the AVX2 paths) its block kernel reads them instead of widening or extending
/// them per step; elsewhere, or where it declines (a NaN, a missing tile), [`dot_2x2`]. The
/// same bits either way.
pub(crate) fn dot_2x2_prepared(
    kind: DotKind,
    c: &mut [[u8; 1024]; 4],
    ops: &Operands<'_>,
    prepared: (Option<PreparedTiles<'_>>, Option<PreparedTiles<'_>>),
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(signs) = int8_signs(kind) {
        if super::int8_path() == KernelPath::Avx2 {
            // SAFETY: int8_path chose AVX2, so the CPU has it; `Operands::new` proved the
            // 2048 bytes of every step inside `a` and `b`; the prepared tiles are read through
            // `PreparedTiles::tile`.
            unsafe {
                super::avx2::dot_2x2_int8_prepared(
                    c,
                    (ops.a.as_ptr(), ops.a_step),
                    (ops.b.as_ptr(), ops.b_step),
                    prepared,
                    ops.steps,
                    signs,
                )
            };
            return;
        }
    }
    #[cfg(target_arch = "x86_64")]
    if int8_signs(kind).is_none() && super::float_path() == KernelPath::Avx2 {
        // SAFETY: float_path chose AVX2 (AVX2, FMA and F16C present, DAZ/FTZ self-checked);
        // the kernel reads only whole tiles inside `a` and `b`, through checked slices, and
        // the prepared tiles through `PreparedTiles::tile`.
        let done = unsafe {
            super::avx2::dot_2x2_half_prepared(
                c,
                (ops.a, ops.a_step),
                (ops.b, ops.b_step),
                prepared,
                ops.steps,
                half_of(kind),
            )
        };
        if done {
            return;
        }
    }
    let _ = prepared;
    dot_2x2(kind, c, ops);
}

/// The signedness of A and B of an AMX-INT8 product, `None` for a floating-point one.
pub(crate) fn int8_signs(kind: DotKind) -> Option<(bool, bool)> {
    match kind {
        DotKind::Tdpbssd => Some((true, true)),
        DotKind::Tdpbsud => Some((true, false)),
        DotKind::Tdpbusd => Some((false, true)),
        DotKind::Tdpbuud => Some((false, false)),
        DotKind::Tdpbf16ps | DotKind::Tdpfp16ps => None,
    }
}

/// The half-precision format of a floating-point product's operands (bf16 for any other).
#[cfg(target_arch = "x86_64")]
fn half_of(kind: DotKind) -> super::Half {
    if kind == DotKind::Tdpfp16ps {
        super::Half::Fp16
    } else {
        super::Half::Bf16
    }
}

/// `C[2h + w] += Ah x Bw` for each step in order, as the instructions `kind` would on full
/// tiles (16 rows, 64 bytes per row).
pub(crate) fn dot_2x2(kind: DotKind, c: &mut [[u8; 1024]; 4], ops: &Operands<'_>) {
    let signs = int8_signs(kind);
    if let Some(signs) = signs {
        // SAFETY: int8_path chose a path whose features the CPU has.
        if unsafe { fused_int8(super::int8_path(), c, ops, signs) } {
            return;
        }
    }
    #[cfg(target_arch = "x86_64")]
    if signs.is_none() && super::float_path() == KernelPath::Avx512 {
        let half = half_of(kind);
        // SAFETY: float_path chose AVX-512 (AVX-512F present, DAZ/FTZ self-checked); the
        // kernel reads only the steps' 2048-byte ranges, through checked slices.
        unsafe {
            super::avx512::dot_2x2_half(
                c,
                (ops.a, ops.a_step),
                (ops.b, ops.b_step),
                ops.steps,
                half,
            )
        };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if signs.is_none() && super::float_path() == KernelPath::Avx2 {
        let half = half_of(kind);
        // SAFETY: float_path chose AVX2 (AVX2, FMA and F16C present, DAZ/FTZ self-checked);
        // the kernel reads only whole tiles inside `a` and `b`, through checked slices.
        let done = unsafe {
            super::avx2::dot_2x2_half(c, (ops.a, ops.a_step), (ops.b, ops.b_step), ops.steps, half)
        };
        if done {
            return;
        }
    }
    let _ = signs;
    stepwise(kind, c, ops);
}

/// A fused integer kernel of one row of tiles (`avx512::dot_1x2_int8`, `avx2::dot_1x2_int8`).
#[cfg(target_arch = "x86_64")]
type RowKernel =
    unsafe fn(&mut [[u8; 1024]; 2], (*const u8, usize), (*const u8, usize), usize, (bool, bool));

/// `C[w] += A x Bw` for `w` in 0, 1 and each step in order, as the instructions `kind` would
/// on full tiles: one row of a 2x2 block, A's step one tile. The fused AVX-512 integer kernel,
/// the AVX-512 float row kernel and the AVX2 ones where those are the paths (a GEMM with M =
/// 16 runs them), else, and for an AVX2 float row that ends in a NaN lane, the
/// per-instruction kernels step by step.
pub(crate) fn dot_1x2(kind: DotKind, c: &mut [[u8; 1024]; 2], ops: &Operands<'_, 1>) {
    let signs = int8_signs(kind);
    #[cfg(target_arch = "x86_64")]
    if let Some(signs) = signs {
        let kernel: Option<RowKernel> = match super::int8_path() {
            KernelPath::Avx512 => Some(super::avx512::dot_1x2_int8),
            KernelPath::Avx2 => Some(super::avx2::dot_1x2_int8),
            _ => None,
        };
        if let Some(kernel) = kernel {
            // SAFETY: int8_path chose the kernel's path, whose features the CPU has, and
            // `Operands::new` proved A's tile and B's 2048 bytes of every step inside `a`
            // and `b`.
            unsafe {
                kernel(
                    c,
                    (ops.a.as_ptr(), ops.a_step),
                    (ops.b.as_ptr(), ops.b_step),
                    ops.steps,
                    signs,
                )
            };
            return;
        }
    }
    #[cfg(target_arch = "x86_64")]
    if signs.is_none() && super::float_path() == KernelPath::Avx512 {
        let half = half_of(kind);
        // SAFETY: float_path chose AVX-512 (AVX-512F present, DAZ/FTZ self-checked); the
        // kernel reads only whole tiles inside `a` and `b`, through checked slices.
        unsafe {
            super::avx512::dot_1x2_half(
                c,
                (ops.a, ops.a_step),
                (ops.b, ops.b_step),
                ops.steps,
                half,
            )
        };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if signs.is_none() && super::float_path() == KernelPath::Avx2 {
        let half = half_of(kind);
        // SAFETY: float_path chose AVX2 (AVX2, FMA and F16C present, DAZ/FTZ self-checked);
        // the kernel reads only whole tiles inside `a` and `b`, through checked slices.
        let done = unsafe {
            super::avx2::dot_1x2_half(c, (ops.a, ops.a_step), (ops.b, ops.b_step), ops.steps, half)
        };
        if done {
            return;
        }
    }
    let _ = signs;
    for s in 0..ops.steps {
        for (w, ct) in c.iter_mut().enumerate() {
            let (Some(at), Some(bt)) =
                (tile(ops.a, ops.a_step, s, 0), tile(ops.b, ops.b_step, s, w))
            else {
                return; // inside the operands once validated, so unreachable
            };
            dot_tile(kind, ct, at, bt, (16, 16, 16));
        }
    }
}

/// TDPBSSD's block with A given biased: every byte of A's steps is A's byte XOR 0x80 (see
/// [`crate::block::tdpbssd_2x2_a_biased`]). The fused AVX-512 kernel reads it as it is;
/// elsewhere [`unbiased_tdpbssd`] restores A.
pub(crate) fn tdpbssd_2x2_a_biased(c: &mut [[u8; 1024]; 4], ops: &Operands<'_>) {
    #[cfg(target_arch = "x86_64")]
    if super::int8_path() == KernelPath::Avx512 {
        // SAFETY: int8_path chose AVX-512 (AVX-512F and AVX-512 VNNI present), and
        // `Operands::new` proved the 2048 bytes of every step inside `a` and `b`.
        unsafe {
            super::avx512::dot_2x2_tdpbssd_a_biased(
                c,
                (ops.a.as_ptr(), ops.a_step),
                (ops.b.as_ptr(), ops.b_step),
                ops.steps,
            )
        };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if super::int8_path() == KernelPath::Avx2 {
        // SAFETY: int8_path chose AVX2, so the CPU has it, and `Operands::new` proved the 2048
        // bytes of every step inside `a` and `b`. The kernel restores A as it widens it.
        unsafe {
            super::avx2::dot_2x2_int8(
                c,
                (ops.a.as_ptr(), ops.a_step),
                (ops.b.as_ptr(), ops.b_step),
                ops.steps,
                (true, true),
                true,
            )
        };
        return;
    }
    unbiased_tdpbssd(c, ops);
}

/// [`tdpbssd_2x2_a_biased`] on any CPU: A's steps restored (XOR 0x80 again) a few at a time
/// into a buffer on the stack, each group run by [`dot_2x2`] (the sums stay in step order, so
/// the result is the same).
fn unbiased_tdpbssd(c: &mut [[u8; 1024]; 4], ops: &Operands<'_>) {
    /// Steps restored at a time: 16 KiB on the stack.
    const GROUP: usize = 8;
    let mut restored = [0u8; GROUP * STEP_BYTES];
    for s0 in (0..ops.steps).step_by(GROUP) {
        let n = GROUP.min(ops.steps - s0);
        for (j, out) in restored.chunks_exact_mut(STEP_BYTES).take(n).enumerate() {
            let step = (s0 + j)
                .checked_mul(ops.a_step)
                .and_then(|at| ops.a.get(at..)?.get(..STEP_BYTES));
            let Some(step) = step else {
                return; // inside the operand once validated, so unreachable
            };
            for (o, x) in out.iter_mut().zip(step) {
                *o = x ^ 0x80;
            }
        }
        let b = s0
            .checked_mul(ops.b_step)
            .and_then(|at| ops.b.get(at..))
            .unwrap_or(&[]);
        let Ok(group) = Operands::new((&restored, STEP_BYTES), (b, ops.b_step), n) else {
            return; // B's steps s0..s0 + n lie inside it once validated, so unreachable
        };
        dot_2x2(DotKind::Tdpbssd, c, &group);
    }
}

/// A TDPBSSD block on the kernels of `path` rather than the selected ones (for benchmarks that
/// compare the kernels on one CPU): the fused block kernel of AVX-512, AVX-VNNI or AVX2, else the
/// per-instruction kernel of `path` step by step. `false`, with nothing computed, where the
/// CPU lacks them.
#[cfg_attr(not(any(test, feature = "peak")), allow(dead_code))] // for measuring only
pub(crate) fn tdpbssd_2x2_on(
    path: KernelPath,
    c: &mut [[u8; 1024]; 4],
    ops: &Operands<'_>,
) -> bool {
    if !super::int8_path_available(path) {
        return false;
    }
    let signs = (true, true);
    // SAFETY: the CPU has the features of `path` (checked just above).
    if unsafe { fused_int8(path, c, ops, signs) } {
        return true;
    }
    each_product(c, ops, |ct, at, bt| {
        super::dot_int8_on(path, ct, at, bt, (16, 16, 16), signs);
    });
    true
}

/// A TDPBF16PS block on the kernels of `path` rather than the selected ones (for benchmarks
/// that compare the kernels on one CPU): with `fused`, the block kernel of AVX-512 or AVX2
/// (instruction by instruction where it declines), else the per-instruction kernel of `path`
/// step by step. `false`, with nothing computed, where the CPU lacks them.
#[cfg_attr(not(any(test, feature = "peak")), allow(dead_code))] // for measuring only
pub(crate) fn bf16_2x2_on(
    path: KernelPath,
    fused: bool,
    c: &mut [[u8; 1024]; 4],
    ops: &Operands<'_>,
) -> bool {
    if !super::float_path_available(path) {
        return false;
    }
    let (a, b) = ((ops.a, ops.a_step), (ops.b, ops.b_step));
    let half = super::Half::Bf16;
    #[cfg(target_arch = "x86_64")]
    if fused {
        match path {
            KernelPath::Avx512 => {
                // SAFETY: the CPU runs the AVX-512 float kernels (checked above); the kernel
                // reads whole steps through checked slices.
                unsafe { super::avx512::dot_2x2_half(c, a, b, ops.steps, half) };
                return true;
            }
            KernelPath::Avx2 => {
                // SAFETY: the CPU runs the AVX2 float kernels (checked above); the kernel
                // reads whole tiles through checked slices.
                let done = unsafe { super::avx2::dot_2x2_half(c, a, b, ops.steps, half) };
                if done {
                    return true;
                }
            }
            _ => {}
        }
    }
    let _ = (fused, a, b);
    each_product(c, ops, |ct, at, bt| {
        super::dot_half_on(path, ct, at, bt, (16, 16, 16), half);
    });
    true
}

/// Runs the integer block on the fused kernel of `path` and returns `true`, or returns `false`
/// (nothing computed) when `path` has none.
///
/// # Safety
/// The CPU has the features of `path`.
unsafe fn fused_int8(
    path: KernelPath,
    c: &mut [[u8; 1024]; 4],
    ops: &Operands<'_>,
    signs: (bool, bool),
) -> bool {
    let (a, b) = ((ops.a.as_ptr(), ops.a_step), (ops.b.as_ptr(), ops.b_step));
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512F and AVX-512 VNNI (this function's contract), and
        // `Operands::new` proved the 2048 bytes of every step inside `a` and `b`.
        KernelPath::Avx512 => unsafe { super::avx512::dot_2x2_int8(c, a, b, ops.steps, signs) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 and AVX-VNNI (this function's contract); the steps as above.
        KernelPath::AvxVnni => unsafe { super::avx_vnni::dot_2x2_int8(c, a, b, ops.steps, signs) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (this function's contract); the steps as above.
        KernelPath::Avx2 => unsafe { super::avx2::dot_2x2_int8(c, a, b, ops.steps, signs, false) },
        _ => {
            let _ = (c, a, b, signs);
            return false;
        }
    }
    true
}

/// One product `kind` of shape `(m, n, k)` on the per-instruction kernel.
pub(crate) fn dot_tile(
    kind: DotKind,
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    (m, n, k): (usize, usize, usize),
) {
    match kind {
        DotKind::Tdpbssd => super::dot_int8(c, a, b, m, n, k, true, true),
        DotKind::Tdpbsud => super::dot_int8(c, a, b, m, n, k, true, false),
        DotKind::Tdpbusd => super::dot_int8(c, a, b, m, n, k, false, true),
        DotKind::Tdpbuud => super::dot_int8(c, a, b, m, n, k, false, false),
        DotKind::Tdpbf16ps => super::dot_bf16(c, a, b, m, n, k),
        DotKind::Tdpfp16ps => super::dot_fp16(c, a, b, m, n, k),
    }
}

/// One AMX-FP8 or AMX-COMPLEX product `kind` of shape `(m, n, k)` on the per-instruction
/// kernel (the emulator's instruction runs this, then zeroes C past the shape).
pub(crate) fn product_tile(
    kind: ProductKind,
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    shape: (usize, usize, usize),
) {
    use super::complex::Part;
    use super::fp8::Fp8;
    let fp8 = match kind {
        ProductKind::Tdpbf8ps => (Fp8::Bf8, Fp8::Bf8),
        ProductKind::Tdpbhf8ps => (Fp8::Bf8, Fp8::Hf8),
        ProductKind::Tdphbf8ps => (Fp8::Hf8, Fp8::Bf8),
        ProductKind::Tdphf8ps => (Fp8::Hf8, Fp8::Hf8),
        ProductKind::Tcmmimfp16ps => return super::complex::dot(c, a, b, shape, Part::Imaginary),
        ProductKind::Tcmmrlfp16ps => return super::complex::dot(c, a, b, shape, Part::Real),
    };
    super::fp8::dot(c, (a, fp8.0), (b, fp8.1), shape);
}

/// The block as its instruction sequence, each product on the per-instruction kernel.
pub(crate) fn stepwise(kind: DotKind, c: &mut [[u8; 1024]; 4], ops: &Operands<'_>) {
    each_product(c, ops, |ct, at, bt| {
        dot_tile(kind, ct, at, bt, (16, 16, 16))
    });
}

/// `product(C[2h + w], Ah, Bw)` for each step in order and each of its four products, on the
/// operands in place.
fn each_product(
    c: &mut [[u8; 1024]; 4],
    ops: &Operands<'_>,
    mut product: impl FnMut(&mut [u8; 1024], &[u8; 1024], &[u8; 1024]),
) {
    for s in 0..ops.steps {
        for (i, ct) in c.iter_mut().enumerate() {
            let (Some(at), Some(bt)) = (
                tile(ops.a, ops.a_step, s, i / 2),
                tile(ops.b, ops.b_step, s, i % 2),
            ) else {
                return;
            };
            product(ct, at, bt);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A xorshift byte stream from `seed` (each test its own, so their data stay fixed).
    fn bytes(mut x: u64) -> impl FnMut() -> u8 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        }
    }

    /// The fallback (the path of CPUs without the fused kernels) against the dispatch, on
    /// every instruction: on a CPU with AVX-512 the dispatch runs the fused kernels.
    #[test]
    fn stepwise_equals_the_dispatch() {
        let mut next = bytes(0x2545_F491_4F6C_DD1Du64);
        let a: Vec<u8> = (0..5 * 2048).map(|_| next() & 0xBF).collect();
        let b: Vec<u8> = (0..5 * 2048).map(|_| next() & 0xBF).collect();
        let mut c = [[0u8; 1024]; 4];
        c.iter_mut().flatten().for_each(|v| *v = next() & 0x3F);
        for kind in DotKind::ALL {
            let Ok(ops) = Operands::new((&a, 2048), (&b, 2048), 5) else {
                panic!("5 steps of 2048 bytes fit 10 KiB");
            };
            let (mut fast, mut slow) = (c, c);
            dot_2x2(kind, &mut fast, &ops);
            stepwise(kind, &mut slow, &ops);
            assert!(fast == slow, "{kind:?}");
            assert!(fast != c, "{kind:?} computed nothing");
        }
    }

    /// The row of two products against the per-instruction kernels, on every instruction and
    /// every step count up to 5 (odd counts end in a short chunk), A's steps 1024 bytes apart
    /// and farther: through the dispatch, and on each fused kernel directly where the CPU has
    /// its features (whatever path the dispatch chose).
    #[test]
    fn row_of_two_equals_its_instructions() {
        let mut next = bytes(0xD1B5_4A32_D192_ED03u64);
        let a: Vec<u8> = (0..5 * 1536).map(|_| next()).collect();
        let b: Vec<u8> = (0..5 * 2048).map(|_| next()).collect();
        let mut c = [[0u8; 1024]; 2];
        c.iter_mut().flatten().for_each(|v| *v = next());
        // Operands whose halves (bf16 and fp16 alike) are finite and whose products stay far
        // from overflow: bit 6 of each high byte clear caps the exponent, so the float kernel
        // runs to the end instead of declining on a NaN lane.
        let mut finite_bytes = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|i| if i % 2 == 1 { next() & 0xBF } else { next() })
                .collect()
        };
        let finite_a = finite_bytes(5 * 1536);
        let finite_b = finite_bytes(5 * 2048);
        let mut finite = [[0u8; 1024]; 2];
        for t in finite.iter_mut() {
            for (i, v) in t.iter_mut().enumerate() {
                // f32 C: the top byte of each dword with bit 6 clear (no Inf or NaN).
                *v = if i % 4 == 3 { next() & 0xBF } else { next() };
            }
        }
        let instructions = |kind: DotKind, c: &mut [[u8; 1024]; 2], a_step: usize, steps| {
            for s in 0..steps {
                for (w, ct) in c.iter_mut().enumerate() {
                    let at = tile(&a, a_step, s, 0).expect("inside A");
                    let bt = tile(&b, 2048, s, w).expect("inside B");
                    dot_tile(kind, ct, at, bt, (16, 16, 16));
                }
            }
        };
        for a_step in [1024, 1536] {
            for steps in 1..=5 {
                let Ok(ops) = Operands::<1>::new((&a, a_step), (&b, 2048), steps) else {
                    panic!("{steps} steps fit the buffers");
                };
                for kind in DotKind::ALL {
                    let (mut fast, mut slow) = (c, c);
                    dot_1x2(kind, &mut fast, &ops);
                    instructions(kind, &mut slow, a_step, steps);
                    assert!(fast == slow, "{kind:?}, {steps} steps, A {a_step} apart");
                    assert!(fast != c, "{kind:?} computed nothing");
                }
                #[cfg(target_arch = "x86_64")]
                for (path, kernel) in [
                    (
                        KernelPath::Avx512,
                        super::super::avx512::dot_1x2_int8 as RowKernel,
                    ),
                    (KernelPath::Avx2, super::super::avx2::dot_1x2_int8),
                ] {
                    if !super::super::int8_path_available(path) {
                        continue;
                    }
                    let kinds = [
                        (DotKind::Tdpbssd, (true, true)),
                        (DotKind::Tdpbsud, (true, false)),
                        (DotKind::Tdpbusd, (false, true)),
                        (DotKind::Tdpbuud, (false, false)),
                    ];
                    for (kind, signs) in kinds {
                        let (mut fast, mut slow) = (c, c);
                        // SAFETY: the CPU has the path's features (checked above), and
                        // Operands::new proved every step's A tile and B's 2048 bytes inside
                        // the buffers.
                        unsafe {
                            kernel(
                                &mut fast,
                                (a.as_ptr(), a_step),
                                (b.as_ptr(), 2048),
                                steps,
                                signs,
                            )
                        };
                        instructions(kind, &mut slow, a_step, steps);
                        assert!(
                            fast == slow,
                            "{path:?} {kind:?}, {steps} steps, A {a_step} apart"
                        );
                    }
                }
                #[cfg(target_arch = "x86_64")]
                if super::super::float_path_available(KernelPath::Avx2) {
                    for (kind, half) in [
                        (DotKind::Tdpbf16ps, super::super::Half::Bf16),
                        (DotKind::Tdpfp16ps, super::super::Half::Fp16),
                    ] {
                        let (mut fast, mut slow) = (finite, finite);
                        // SAFETY: the CPU runs the AVX2 float kernels (checked above).
                        let done = unsafe {
                            super::super::avx2::dot_1x2_half(
                                &mut fast,
                                (&finite_a, a_step),
                                (&finite_b, 2048),
                                steps,
                                half,
                            )
                        };
                        assert!(done, "AVX2 {kind:?} declined finite operands");
                        for s in 0..steps {
                            for (w, ct) in slow.iter_mut().enumerate() {
                                let at = tile(&finite_a, a_step, s, 0).expect("inside A");
                                let bt = tile(&finite_b, 2048, s, w).expect("inside B");
                                dot_tile(kind, ct, at, bt, (16, 16, 16));
                            }
                        }
                        assert!(
                            fast == slow,
                            "AVX2 {kind:?}, {steps} steps, A {a_step} apart"
                        );
                        assert!(fast != finite, "AVX2 {kind:?} computed nothing");
                    }
                }
                // The AVX-512 float row kernel whatever the float path, against the
                // per-instruction kernel: random operands (NaNs and all, so the row is redone
                // product by product) and finite ones (the fused kernel to the end).
                #[cfg(target_arch = "x86_64")]
                if super::super::float_path_available(KernelPath::Avx512) {
                    for (kind, half) in [
                        (DotKind::Tdpbf16ps, super::super::Half::Bf16),
                        (DotKind::Tdpfp16ps, super::super::Half::Fp16),
                    ] {
                        let cases = [
                            (&c, a.as_slice(), b.as_slice()),
                            (&finite, finite_a.as_slice(), finite_b.as_slice()),
                        ];
                        for (c, a, b) in cases {
                            let (mut fast, mut slow) = (*c, *c);
                            // SAFETY: the CPU runs the AVX-512 float kernels (checked above).
                            unsafe {
                                super::super::avx512::dot_1x2_half(
                                    &mut fast,
                                    (a, a_step),
                                    (b, 2048),
                                    steps,
                                    half,
                                )
                            };
                            for s in 0..steps {
                                for (w, ct) in slow.iter_mut().enumerate() {
                                    let at = tile(a, a_step, s, 0).expect("inside A");
                                    let bt = tile(b, 2048, s, w).expect("inside B");
                                    // SAFETY: as above.
                                    unsafe {
                                        super::super::avx512::dot_half(ct, at, bt, 16, 16, 16, half)
                                    };
                                }
                            }
                            assert!(
                                fast == slow,
                                "AVX-512 {kind:?}, {steps} steps, A {a_step} apart"
                            );
                            assert!(fast != *c, "AVX-512 {kind:?} computed nothing");
                        }
                    }
                }
            }
        }
    }

    /// Every fused integer kernel the CPU runs, on one step whose step distance is huge: the
    /// distance plays no part in a single step, and the AVX-VNNI kernel once located the
    /// unused slots of its chunk of four steps too, where `j * step` overflowed.
    #[test]
    fn one_step_at_a_huge_distance_on_each_fused_kernel() {
        let mut next = bytes(0x9E37_79B9_7F4A_7C15u64);
        let a: Vec<u8> = (0..2048).map(|_| next()).collect();
        let b: Vec<u8> = (0..2048).map(|_| next()).collect();
        let mut c = [[0u8; 1024]; 4];
        c.iter_mut().flatten().for_each(|v| *v = next() & 0x3F);
        let signs = [(true, true), (true, false), (false, true), (false, false)];
        for path in [KernelPath::Avx512, KernelPath::AvxVnni, KernelPath::Avx2] {
            if !super::super::int8_path_available(path) {
                continue;
            }
            for (kind, signs) in DotKind::ALL.into_iter().zip(signs) {
                let Ok(one) = Operands::new((&a, 0), (&b, 0), 1) else {
                    panic!("one step fits 2048 bytes");
                };
                let mut want = c;
                stepwise(kind, &mut want, &one);
                for step in [usize::MAX, usize::MAX / 3 + 1, isize::MAX as usize] {
                    let Ok(ops) = Operands::new((&a, step), (&b, step), 1) else {
                        panic!("one step fits 2048 bytes whatever the distance");
                    };
                    let mut got = c;
                    // SAFETY: the CPU has the features of `path` (checked above).
                    assert!(unsafe { fused_int8(path, &mut got, &ops, signs) });
                    assert!(got == want, "{path:?} {kind:?} step {step}");
                }
            }
        }
    }

    /// TDPBSSD with A given biased, on the dispatch (the fused AVX-512 kernel where the CPU
    /// has it) and on the fallback that restores A, against TDPBSSD on A itself: a step count
    /// that is not a multiple of the kernel's chunk nor of the fallback's group, and steps of
    /// A and B not 2048 bytes apart.
    #[test]
    fn tdpbssd_with_a_biased_equals_tdpbssd() {
        let mut next = bytes(0x51_7CC1_B727_220Au64);
        let steps = 11;
        let (a_step, b_step) = (2112, 2048 + 64 * 3);
        let a: Vec<u8> = (0..(steps - 1) * a_step + 2048).map(|_| next()).collect();
        let b: Vec<u8> = (0..(steps - 1) * b_step + 2048).map(|_| next()).collect();
        let biased: Vec<u8> = a.iter().map(|v| v ^ 0x80).collect();
        let mut c = [[0u8; 1024]; 4];
        c.iter_mut().flatten().for_each(|v| *v = next());
        let (Ok(plain), Ok(pre)) = (
            Operands::new((&a, a_step), (&b, b_step), steps),
            Operands::new((&biased, a_step), (&b, b_step), steps),
        ) else {
            panic!("the steps fit");
        };
        let mut want = c;
        stepwise(DotKind::Tdpbssd, &mut want, &plain);
        assert!(want != c, "computed nothing");
        let (mut fast, mut fallback) = (c, c);
        tdpbssd_2x2_a_biased(&mut fast, &pre);
        unbiased_tdpbssd(&mut fallback, &pre);
        assert!(fast == want, "dispatch");
        assert!(fallback == want, "fallback");
    }

    /// The AVX-VNNI block kernel against the instruction sequence, on every signedness and a
    /// step count that leaves a partial chunk, whatever kernel the dispatch picks.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx_vnni_block_equals_stepwise() {
        if !super::super::avx_vnni::int8_available() {
            eprintln!("SKIPPED avx_vnni_block_equals_stepwise: the CPU lacks AVX2 or AVX-VNNI");
            return;
        }
        let mut next = bytes(0x9E37_79B9_7F4A_7C15u64);
        let a: Vec<u8> = (0..7 * 2048).map(|_| next()).collect();
        let b: Vec<u8> = (0..6 * 2112 + 2048).map(|_| next()).collect();
        let mut c = [[0u8; 1024]; 4];
        c.iter_mut().flatten().for_each(|v| *v = next());
        let signedness = [
            (DotKind::Tdpbssd, (true, true)),
            (DotKind::Tdpbsud, (true, false)),
            (DotKind::Tdpbusd, (false, true)),
            (DotKind::Tdpbuud, (false, false)),
        ];
        for (kind, signs) in signedness {
            let Ok(ops) = Operands::new((&a, 2048), (&b, 2112), 7) else {
                panic!("7 steps fit");
            };
            let (mut fast, mut slow) = (c, c);
            // SAFETY: AVX2 and AVX-VNNI are present (checked above); `Operands::new` proved
            // every step's 2048 bytes inside `a` and `b`.
            unsafe {
                super::super::avx_vnni::dot_2x2_int8(
                    &mut fast,
                    (a.as_ptr(), 2048),
                    (b.as_ptr(), 2112),
                    7,
                    signs,
                )
            };
            stepwise(kind, &mut slow, &ops);
            assert!(fast == slow, "{kind:?}");
            assert!(fast != c, "{kind:?} computed nothing");
        }
    }
}
