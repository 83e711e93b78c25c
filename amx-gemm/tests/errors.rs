//! Bad input is an error value naming the problem, never a panic.

use amx_gemm::reference::{verify_linear, VerifyError};
use amx_gemm::{BRef, Batch, Epilogue, MatMut, MatRef};
use amx_gemm::{Backend, Bf16, Gemm, GemmError, Int8, Operand, PackedB, U8S8};

fn emulated() -> Gemm {
    Gemm::new().threads(1).backend(Backend::Emulated)
}

#[test]
fn leading_dimension_smaller_than_the_row() {
    let b = vec![0i8; 12];
    assert_eq!(
        PackedB::<Int8>::pack(&b, 3, 4, 3).unwrap_err(),
        GemmError::LeadingDimension {
            operand: Operand::B,
            ld: 3,
            cols: 4
        }
    );
    let packed = PackedB::<Int8>::pack(&b, 3, 4, 4).unwrap();
    let a = vec![0i8; 6];
    let mut c = vec![0i32; 8];
    assert!(matches!(
        emulated().run(2, &a, 2, &packed, &mut c, 4),
        Err(GemmError::LeadingDimension {
            operand: Operand::A,
            ld: 2,
            cols: 3
        })
    ));
    assert!(matches!(
        emulated().run(2, &a, 3, &packed, &mut c, 3),
        Err(GemmError::LeadingDimension {
            operand: Operand::C,
            ..
        })
    ));
}

#[test]
fn slices_too_short() {
    let b = vec![0i8; 11];
    assert_eq!(
        PackedB::<Int8>::pack(&b, 3, 4, 4).unwrap_err(),
        GemmError::SliceTooShort {
            operand: Operand::B,
            needed: 12,
            len: 11
        }
    );
    let packed = PackedB::<U8S8>::pack(&[0i8; 12], 3, 4, 4).unwrap();
    let mut c = vec![0i32; 8];
    assert_eq!(
        emulated().run(2, &[0u8; 5], 3, &packed, &mut c, 4),
        Err(GemmError::SliceTooShort {
            operand: Operand::A,
            needed: 6,
            len: 5
        })
    );
    assert_eq!(
        emulated().run(2, &[0u8; 6], 3, &packed, &mut c[..7], 4),
        Err(GemmError::SliceTooShort {
            operand: Operand::C,
            needed: 8,
            len: 7
        })
    );
    // The unpacked path checks A and C before packing B.
    let mut c = vec![0f32; 3];
    assert!(matches!(
        emulated().run_unpacked::<Bf16>(
            MatRef::new(&[], 2, 2),
            BRef::k_by_n(&[], 2, 2),
            MatMut::new(&mut c, 2, 2)
        ),
        Err(GemmError::SliceTooShort {
            operand: Operand::A,
            ..
        })
    ));
}

#[test]
fn sizes_that_overflow() {
    assert!(matches!(
        PackedB::<Int8>::pack(&[0i8; 4], usize::MAX, 2, usize::MAX / 2),
        Err(GemmError::TooLarge {
            operand: Operand::B
        })
    ));
    let packed = PackedB::<Int8>::pack(&[0i8; 4], 2, 2, 2).unwrap();
    let mut c = vec![0i32; 4];
    assert!(matches!(
        emulated().run(usize::MAX, &[0i8; 4], 2, &packed, &mut c, 2),
        Err(GemmError::TooLarge { .. }) | Err(GemmError::SliceTooShort { .. })
    ));
}

#[test]
fn empty_shapes_are_fine() {
    let packed = PackedB::<Int8>::pack(&[], 0, 0, 0).unwrap();
    let mut c: Vec<i32> = vec![];
    emulated().run(0, &[], 0, &packed, &mut c, 0).unwrap();
    let packed = PackedB::<Int8>::pack(&[0i8; 6], 2, 3, 3).unwrap();
    emulated().run(0, &[], 2, &packed, &mut c, 3).unwrap();
}

#[test]
fn a_guard_alive_on_the_calling_thread_is_reported() {
    let cfg = amx_runtime::TileConfig::builder()
        .tile(0, 16, 64)
        .build()
        .unwrap();
    let _held = amx_runtime::configure_on(Backend::Emulated, &cfg).unwrap();
    let packed = PackedB::<Int8>::pack(&[1i8; 4], 2, 2, 2).unwrap();
    let mut c = vec![0i32; 4];
    let err = emulated()
        .run(2, &[1i8; 4], 2, &packed, &mut c, 2)
        .unwrap_err();
    assert_eq!(err, GemmError::Configure(amx_runtime::ConfigureError::Busy));
    assert!(
        err.to_string()
            .contains("a tile guard is alive on this thread"),
        "{err}"
    );
}

#[test]
fn errors_read_well() {
    let e = GemmError::SliceTooShort {
        operand: Operand::C,
        needed: 8,
        len: 7,
    };
    assert_eq!(
        e.to_string(),
        "slice for C has 7 elements; the shape needs 8"
    );
}

#[test]
fn hardware_request_without_hardware_is_an_error() {
    if !amx_test_support::needs::no_silicon() {
        return;
    }
    let packed = PackedB::<Int8>::pack(&[1i8; 4], 2, 2, 2).unwrap();
    let mut c = vec![0i32; 4];
    let err = Gemm::new()
        .threads(1)
        .backend(Backend::Hardware)
        .run(2, &[1i8; 4], 2, &packed, &mut c, 2)
        .unwrap_err();
    // The cause is the missing tile unit, not one of its instructions.
    assert!(
        matches!(
            err,
            GemmError::Configure(amx_runtime::ConfigureError::Unavailable(_))
        ),
        "{err}"
    );
}

/// Printing an error's chain (as anyhow and eyre do) prints each message once: an error whose
/// Display includes the wrapped one does not also return it from `source`.
#[test]
fn error_chains_print_each_message_once() {
    use std::error::Error;
    let configure = amx_runtime::ConfigureError::Busy;
    let errors: Vec<Box<dyn Error>> = vec![
        Box::new(GemmError::Configure(configure.clone())),
        Box::new(amx_gemm::reference::VerifyError::Input(
            GemmError::Configure(configure),
        )),
        Box::new(GemmError::TooLarge {
            operand: Operand::A,
        }),
    ];
    for e in errors {
        let mut seen = vec![e.to_string()];
        let mut next = e.source();
        while let Some(inner) = next {
            let text = inner.to_string();
            assert!(
                !seen.iter().any(|outer| outer.contains(&text)),
                "{text:?} is printed by an outer level too: {seen:?}"
            );
            seen.push(text);
            next = inner.source();
        }
    }
}

/// The sizes a `DimensionMismatch` reports: `(expected, found)`.
fn mismatch<T: std::fmt::Debug>(r: Result<T, GemmError>) -> (usize, usize) {
    match r {
        Err(GemmError::DimensionMismatch {
            expected, found, ..
        }) => (expected, found),
        other => panic!("{other:?}"),
    }
}

/// Views whose sizes do not make a product are refused, naming the sizes, before anything is
/// written: swapped or mistyped sizes cannot run.
#[test]
fn views_that_do_not_make_a_product_are_refused() {
    let (m, n, k) = (2, 3, 4);
    let a = vec![1i8; m * k];
    let b = vec![1i8; k * n];
    let packed = PackedB::<Int8>::pack(&b, k, n, n).unwrap();
    let e = Epilogue::new();
    let mut y = vec![7f32; m * n];
    // A with K - 1 columns, the output with M + 1 rows or N - 1 columns.
    let a_short = MatRef::new(&a, m, k - 1);
    let r = emulated().run_with(a_short, &packed, MatMut::new(&mut y, m, n), &e);
    assert_eq!(mismatch(r), (k, k - 1));
    let r = emulated().run_with(
        MatRef::new(&a, m, k),
        &packed,
        MatMut::new(&mut y, m + 1, n),
        &e,
    );
    assert_eq!(mismatch(r), (m, m + 1));
    let r = emulated().run_with(
        MatRef::new(&a, m, k),
        &packed,
        MatMut::new(&mut y, m, n - 1),
        &e,
    );
    assert_eq!(mismatch(r), (n, n - 1));
    assert!(y.iter().all(|&x| x == 7.0));
    // K and N swapped in an unpacked B.
    let mut c = vec![5i32; m * n];
    let r = emulated().run_unpacked::<Int8>(
        MatRef::new(&a, m, k),
        BRef::k_by_n(&b, n, k),
        MatMut::new(&mut c, m, n),
    );
    assert_eq!(mismatch(r), (n, k));
    let batch = Batch {
        count: 1,
        ..Batch::default()
    };
    let r = emulated().run_batched::<Int8>(
        batch,
        MatRef::new(&a, m, k),
        BRef::n_by_k(&b, k, n),
        MatMut::new(&mut c, n, m),
    );
    assert_eq!(mismatch(r), (m, n));
    assert!(c.iter().all(|&x| x == 5));
    // The reference checks the same way.
    let r = verify_linear::<Int8, f32>(
        MatRef::new(&a, m, k),
        BRef::k_by_n(&b, k, n),
        &e,
        MatRef::new(&y, n, m),
    );
    assert!(
        matches!(
            r,
            Err(VerifyError::Input(GemmError::DimensionMismatch { .. }))
        ),
        "{r:?}"
    );
}

/// `verify_linear` reads B in the orientation its view names: weights stored `N x K` check
/// as such, and the same data read as `K x N` is a mismatch, not a pass.
#[test]
fn verify_linear_reads_b_as_its_view_says() {
    let (m, n, k) = (3, 8, 8);
    let a: Vec<i8> = (0..m * k).map(|i| (i % 7) as i8 - 3).collect();
    let w: Vec<i8> = (0..n * k).map(|i| (i % 5) as i8 - 2).collect(); // N x K
    let weights = PackedB::<Int8>::pack_ref(BRef::n_by_k(&w, k, n)).unwrap();
    let e = Epilogue::new().alpha(0.5);
    let mut y = vec![0f32; m * n];
    emulated()
        .run_with(
            MatRef::new(&a, m, k),
            &weights,
            MatMut::new(&mut y, m, n),
            &e,
        )
        .unwrap();
    let checked = verify_linear::<Int8, f32>(
        MatRef::new(&a, m, k),
        BRef::n_by_k(&w, k, n),
        &e,
        MatRef::new(&y, m, n),
    )
    .unwrap();
    assert_eq!((checked.checked, checked.total), (m * n, m * n));
    let wrong = verify_linear::<Int8, f32>(
        MatRef::new(&a, m, k),
        BRef::k_by_n(&w, k, n),
        &e,
        MatRef::new(&y, m, n),
    );
    assert!(
        matches!(wrong, Err(VerifyError::LinearMismatch(_))),
        "{wrong:?}"
    );
}

/// A quantization's slices are named as what they are, not as a GEMM operand.
#[test]
fn a_quantization_names_its_input_and_output() {
    use amx_gemm::quantize::quantize;
    use amx_gemm::{MatMut, MatRef, Operand};
    let x = [1.0f32; 8];
    let mut out = [0i8; 7];
    let err = quantize(MatRef::new(&x, 2, 4), MatMut::new(&mut out, 2, 4)).unwrap_err();
    assert!(
        matches!(
            err,
            GemmError::SliceTooShort {
                operand: Operand::QuantizeOutput,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("quantized output"), "{err}");
}
