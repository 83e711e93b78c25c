//! C written with streaming stores ([`CStores::Streaming`]) holds the same values as with
//! cached stores, on every backend: rows on 64-byte lines (streamed on the silicon code path),
//! rows that start mid-line or have a stride of partial lines (cached), the right edge of C,
//! both modes, one and two threads; and nothing past N is written.

mod common;

use amx_gemm::reference::{verify, Outputs};
use amx_gemm::{Bf16, CStores, Gemm, Int8, Mode, PackedB, Precision, U8S8};
use amx_test_support::random;
use common::{backends, canary};

/// `len` elements of C inside a buffer, starting `shift` elements past a 64-byte boundary.
struct Placed<T> {
    buf: Vec<T>,
    at: usize,
    len: usize,
}

impl<T: Copy> Placed<T> {
    fn new(init: &[T], shift: usize) -> Placed<T> {
        let mut buf = init.to_vec();
        buf.extend_from_slice(&init[..64.min(init.len())]);
        buf.extend(std::iter::repeat_n(init[0], 64));
        let at = buf.as_ptr().align_offset(64) + shift;
        let mut placed = Placed {
            buf,
            at,
            len: init.len(),
        };
        placed.get_mut().copy_from_slice(init);
        placed
    }

    fn get_mut(&mut self) -> &mut [T] {
        &mut self.buf[self.at..self.at + self.len]
    }
}

fn case<P: Precision>(test: &str)
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    // (m, n, k, ldc, shift): whole lines (ldc a multiple of 16 elements) from a line boundary;
    // from mid-line; a stride of partial lines; a right edge (n = 40); K split over blocks.
    let shapes = [
        (64, 64, 128, 64, 0),
        (64, 64, 128, 64, 1),
        (48, 64, 64, 72, 0),
        (70, 40, 100, 48, 0),
        (33, 96, 1100, 96, 0),
    ];
    for backend in backends(test) {
        for (i, &(m, n, k, ldc, shift)) in shapes.iter().enumerate() {
            for (mode, threads) in [
                (Mode::Overwrite, 1),
                (Mode::Overwrite, 2),
                (Mode::Accumulate, 2),
            ] {
                let seed = 500 + 10 * i as u64;
                let what = format!(
                    "{} {m}x{n}x{k} ldc {ldc} shift {shift} {mode:?} threads {threads} on {backend}",
                    P::KIND
                );
                let a: Vec<P::A> = random(m * k, seed);
                let b: Vec<P::B> = random(k * n, seed + 1);
                let mut c0: Vec<P::C> = random(m * ldc, seed + 2);
                for row in c0.chunks_mut(ldc) {
                    row[n..].fill(canary());
                }
                let packed = PackedB::<P>::pack(&b, k, n, n).unwrap();
                let mut c = Placed::new(&c0, shift);
                Gemm::new()
                    .threads(threads)
                    .mode(mode)
                    .backend(backend)
                    .c_stores(CStores::Streaming)
                    .run(m, &a, k, &packed, c.get_mut(), ldc)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let start = (mode == Mode::Accumulate).then_some(&c0[..]);
                verify::<P>(m, n, k, &a, k, &b, n, start, c.get_mut(), ldc, Outputs::All)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                for (r, row) in c.get_mut().chunks(ldc).enumerate() {
                    assert!(
                        row[n..].iter().all(|&x| x == canary()),
                        "{what}: row {r} of C was written past N"
                    );
                }
            }
        }
    }
}

#[test]
fn streamed_c_int8() {
    case::<Int8>("streamed_c_int8");
}

#[test]
fn streamed_c_u8s8() {
    case::<U8S8>("streamed_c_u8s8");
}

#[test]
fn streamed_c_bf16() {
    case::<Bf16>("streamed_c_bf16");
}

/// Every choice gives the same C, bit for bit, on a product large enough for
/// [`CStores::Auto`] to stream (8 MiB of C).
#[test]
fn every_choice_gives_the_same_c() {
    for backend in backends("every_choice_gives_the_same_c") {
        if backend == amx_gemm::Backend::Hardware && amx_trap::is_active() {
            amx_test_support::skip(
                amx_test_support::Kind::Hardware,
                "its hardware-backend part: a 1024 x 2048 x 64 product takes minutes on the \
                 trap engine; the shapes above run the same stores there",
            );
            continue;
        }
        let (m, n, k) = (1024, 2048, 64);
        assert!(m * n * 4 >= CStores::STREAM_MIN_BYTES);
        let a: Vec<i8> = random(m * k, 900);
        let b: Vec<i8> = random(k * n, 901);
        let packed = PackedB::<Int8>::pack(&b, k, n, n).unwrap();
        let mut results = Vec::new();
        for stores in [CStores::Cached, CStores::Auto, CStores::Streaming] {
            let mut c = Placed::new(&vec![0i32; m * n], 0);
            Gemm::new()
                .threads(2)
                .backend(backend)
                .c_stores(stores)
                .run(m, &a, k, &packed, c.get_mut(), n)
                .unwrap();
            results.push(c.get_mut().to_vec());
        }
        verify::<Int8>(m, n, k, &a, k, &b, n, None, &results[0], n, Outputs::All).unwrap();
        assert!(
            results[1] == results[0] && results[2] == results[0],
            "on {backend}"
        );
    }
}
