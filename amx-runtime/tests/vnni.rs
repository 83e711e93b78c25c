//! `amx_runtime::vnni`: a B packed by `pack_b` is what the dot products read as `K x N` (the
//! emulator, bit-exact with the silicon, multiplies it against a plain loop), `unpack_b` undoes
//! it, and bad shapes are errors counted in elements.

use amx_runtime::vnni::{pack_b, unpack_b, BMatrix, Order, VnniElement, VnniError};
use amx_runtime::{bf16, Emulator, TileConfig, TileUnit};
use amx_test_support::SplitMix64;

/// The bytes of a slice of elements, as a tile load reads them.
fn bytes<T: Copy>(data: &[T], to_le: impl Fn(T) -> Vec<u8>) -> Vec<u8> {
    data.iter().flat_map(|&x| to_le(x)).collect()
}

/// C (m x n) = A (m x k, row-major) x B (`shape`, packed by `pack_b`), on the emulator, by the
/// instruction `dot` (t0 += t1 x t2).
fn product<T: VnniElement>(
    a: &[u8],
    b: &[T],
    (m, k, n): (usize, usize, usize),
    shape: BMatrix,
    to_le: fn(T) -> Vec<u8>,
    dot: fn(&mut Emulator, u8, u8, u8) -> Result<(), amx_runtime::Fault>,
) -> Vec<u8> {
    let size = 4 / T::GROUP;
    let mut image = vec![T::default(); shape.image_len::<T>().unwrap()];
    pack_b(b, shape, &mut image).unwrap();
    let b_rows = shape.image_rows::<T>();
    let a_row = b_rows * 4; // K padded to whole groups, in bytes
    let cfg = TileConfig::builder()
        .palette(1)
        .tile(0, m as u8, 4 * n as u16)
        .tile(1, m as u8, a_row as u16)
        .tile(2, b_rows as u8, 4 * n as u16)
        .build()
        .unwrap();
    let mut a_padded = vec![0u8; m * a_row];
    for i in 0..m {
        a_padded[i * a_row..i * a_row + k * size]
            .copy_from_slice(&a[i * k * size..(i + 1) * k * size]);
    }
    let mut emu = Emulator::new();
    emu.ldtilecfg(cfg.as_bytes()).unwrap();
    emu.tilezero(0).unwrap();
    emu.tileloadd(1, &a_padded, a_row).unwrap();
    emu.tileloadd(2, &bytes(&image, to_le), 4 * n).unwrap();
    dot(&mut emu, 0, 1, 2).unwrap();
    let mut c = vec![0u8; m * 4 * n];
    emu.tilestored(0, &mut c, 4 * n).unwrap();
    c
}

/// The same matrix stored in `order` with a leading dimension `pad` elements longer than a
/// stored row: element `(k, n)` of the result is `value(k, n)`, the padding a marker value.
fn stored<T: Copy>(
    k: usize,
    n: usize,
    order: Order,
    pad: usize,
    value: impl Fn(usize, usize) -> T,
    marker: T,
) -> (Vec<T>, BMatrix) {
    let shape = match order {
        Order::KxN => BMatrix::k_by_n(k, n).with_ld(n + pad),
        Order::NxK => BMatrix::n_by_k(k, n).with_ld(k + pad),
    };
    let rows = if order == Order::KxN { k } else { n };
    let mut data = vec![marker; rows * shape.ld];
    for kk in 0..k {
        for nn in 0..n {
            let at = if order == Order::KxN {
                kk * shape.ld + nn
            } else {
                nn * shape.ld + kk
            };
            data[at] = value(kk, nn);
        }
    }
    (data, shape)
}

/// Random products of up to 16 x `k_max` x 16 through `dot`, B stored in both orders with
/// padding, checked against a plain loop in `f64` (exact: the values are small integers).
fn packed_b_is_what_the_instruction_multiplies<T: VnniElement + Copy>(
    seed: u64,
    k_max: u64,
    element: impl Fn(u64) -> T,
    to_f64: impl Fn(T) -> f64,
    to_le: fn(T) -> Vec<u8>,
    dot: fn(&mut Emulator, u8, u8, u8) -> Result<(), amx_runtime::Fault>,
    read: fn([u8; 4]) -> f64,
) {
    let mut rng = SplitMix64::new(seed);
    for round in 0..40 {
        let (m, k, n) = (
            1 + rng.below(16) as usize,
            1 + rng.below(k_max) as usize,
            1 + rng.below(16) as usize,
        );
        let order = if round % 2 == 0 {
            Order::KxN
        } else {
            Order::NxK
        };
        let a: Vec<T> = (0..m * k).map(|_| element(rng.next_u64())).collect();
        let values: Vec<T> = (0..k * n).map(|_| element(rng.next_u64())).collect();
        let marker = element(u64::MAX);
        let (b, shape) = stored(k, n, order, round % 3, |kk, nn| values[kk * n + nn], marker);
        let c = product(&bytes(&a, to_le), &b, (m, k, n), shape, to_le, dot);
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k)
                    .map(|p| to_f64(a[i * k + p]) * to_f64(values[p * n + j]))
                    .sum();
                let got = read(c[(i * n + j) * 4..][..4].try_into().unwrap());
                assert_eq!(got, want, "{m}x{k}x{n} {order:?} C[{i}][{j}]");
            }
        }
    }
}

#[test]
fn packed_int8_b_is_what_tdpbssd_multiplies() {
    packed_b_is_what_the_instruction_multiplies(
        11,
        64,
        |x| x as i8,
        f64::from,
        |x: i8| x.to_le_bytes().to_vec(),
        |e, c, a, b| e.tdpbssd(c, a, b),
        |w| f64::from(i32::from_le_bytes(w)),
    );
}

#[test]
fn packed_fp8_b_is_what_the_fp8_products_multiply() {
    use amx_runtime::{Bf8, Hf8};
    // Small integers, exact in both formats (bf8 has 3 significant bits: up to 4 and 6, 8):
    // every product and sum is exact, so the order of the sums is moot.
    let small = |x: u64| [-4.0f32, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0][(x % 9) as usize];
    packed_b_is_what_the_instruction_multiplies(
        14,
        64,
        |x| Hf8::from_f32(small(x)),
        |x: Hf8| f64::from(x.to_f32()),
        |x: Hf8| vec![x.to_bits()],
        |e, c, a, b| e.tdphf8ps(c, a, b),
        |w| f64::from(f32::from_le_bytes(w)),
    );
    packed_b_is_what_the_instruction_multiplies(
        15,
        64,
        |x| Bf8::from_f32(small(x)),
        |x: Bf8| f64::from(x.to_f32()),
        |x: Bf8| vec![x.to_bits()],
        |e, c, a, b| e.tdpbf8ps(c, a, b),
        |w| f64::from(f32::from_le_bytes(w)),
    );
}

#[test]
fn packed_bf16_b_is_what_tdpbf16ps_multiplies() {
    // Small integers: every product and sum is exact, so the order of the sums is moot.
    packed_b_is_what_the_instruction_multiplies(
        12,
        32,
        |x| bf16::from_f32((x % 9) as f32 - 4.0),
        |x| f64::from(x.to_f32()),
        |x: bf16| x.to_le_bytes().to_vec(),
        |e, c, a, b| e.tdpbf16ps(c, a, b),
        |w| f64::from(f32::from_le_bytes(w)),
    );
}

#[test]
fn unpack_inverts_pack_and_leaves_the_padding() {
    for (k, n) in [(1, 1), (3, 5), (64, 16), (70, 40), (33, 17)] {
        for order in [Order::KxN, Order::NxK] {
            let (b, shape) = stored(k, n, order, 2, |kk, nn| (kk * 31 + nn * 7) as u8, 0xEE);
            let mut image = vec![0u8; shape.image_len::<u8>().unwrap()];
            pack_b(&b, shape, &mut image).unwrap();
            // K past its last whole group is zero in the image.
            for r in 0..shape.image_rows::<u8>() {
                for i in 0..4 {
                    if 4 * r + i >= k {
                        for j in 0..n {
                            assert_eq!(image[r * 4 * n + 4 * j + i], 0);
                        }
                    }
                }
            }
            let mut back = vec![0xEE; b.len()];
            unpack_b(&image, shape, &mut back).unwrap();
            assert_eq!(back, b, "{k}x{n} {order:?}");
        }
    }
}

#[test]
fn bad_shapes_are_errors_in_elements() {
    let b = vec![0i8; 64 * 16];
    let mut image = vec![0i8; 16 * 64];
    let shape = BMatrix::k_by_n(64, 16);
    assert_eq!(
        pack_b(&b[1..], shape, &mut image),
        Err(VnniError::MatrixTooShort {
            needed: 1024,
            len: 1023
        })
    );
    assert_eq!(
        pack_b(&b, shape, &mut image[1..]),
        Err(VnniError::ImageTooShort {
            needed: 1024,
            len: 1023
        })
    );
    assert_eq!(
        pack_b(&b, shape.with_ld(15), &mut image),
        Err(VnniError::LeadingDimension { ld: 15, cols: 16 })
    );
    let bf = vec![bf16::ZERO; 32 * 16];
    let mut out = vec![bf16::ZERO; 32 * 16];
    assert_eq!(
        unpack_b(&bf, BMatrix::n_by_k(32, 16).with_ld(31), &mut out),
        Err(VnniError::LeadingDimension { ld: 31, cols: 32 })
    );
    assert_eq!(
        BMatrix::k_by_n(usize::MAX, usize::MAX).image_len::<i8>(),
        None
    );
    assert_eq!(
        pack_b(&b, BMatrix::k_by_n(usize::MAX, 2), &mut image),
        Err(VnniError::TooLarge)
    );
    // An empty matrix packs to an empty image, whatever its leading dimension.
    assert_eq!(
        pack_b::<i8>(&[], BMatrix::k_by_n(0, 5).with_ld(0), &mut []),
        Ok(())
    );
}
