//! AMX code outside this crate (another library such as oneDNN, or raw intrinsics) may load its
//! own tile configuration, or release the tiles, on a thread between two GEMM calls. The next
//! call must still compute the right product on the silicon code path: not fault on
//! unconfigured tiles (#UD, SIGILL), and not run its unchecked instructions under the other
//! configuration.

use amx_gemm::{Backend, Gemm, Int8, Mode, PackedB};
use amx_runtime::{intrinsics, tilecfg, TileConfig};

/// Another library's configuration: every tile 2 rows of 8 bytes.
static FOREIGN: TileConfig = tilecfg! {
    palette 1;
    t0: 2x8; t1: 2x8; t2: 2x8; t3: 2x8; t4: 2x8; t5: 2x8; t6: 2x8; t7: 2x8;
};

fn product_is_right(gemm: &Gemm, packed: &PackedB<Int8>, a: &[i8], want: &[i32], what: &str) {
    let (m, n, k) = (want.len() / packed.n(), packed.n(), packed.k());
    let mut c = vec![-1i32; m * n];
    gemm.run(m, a, k, packed, &mut c, n).unwrap();
    assert_eq!(c, want, "{what}");
}

#[test]
fn a_foreign_configuration_between_calls_is_noticed() {
    if amx_test_support::needs::silicon().is_none() {
        return;
    }
    let (m, n, k) = (64, 96, 256);
    let a: Vec<i8> = amx_test_support::random(m * k, 1);
    let b: Vec<i8> = amx_test_support::random(k * n, 2);
    let packed = PackedB::<Int8>::pack(&b, k, n, n).unwrap();
    let mut want = vec![0i32; m * n];
    amx_gemm::reference::gemm::<Int8>(m, n, k, &a, k, &b, n, &mut want, n, Mode::Overwrite)
        .unwrap();
    // One thread: the calls run on this thread, whose configuration the foreign code changes.
    let gemm = Gemm::new().threads(1).backend(Backend::Hardware);
    product_is_right(&gemm, &packed, &a, &want, "first call");

    // SAFETY: FOREIGN is a valid configuration (tilecfg! checked it), 64 bytes, aligned.
    unsafe { intrinsics::_tile_loadconfig(FOREIGN.as_bytes().as_ptr()) };
    product_is_right(&gemm, &packed, &a, &want, "after a foreign LDTILECFG");

    // SAFETY: TILERELEASE has no operands; it only returns the tiles to INIT.
    unsafe { intrinsics::_tile_release() };
    product_is_right(&gemm, &packed, &a, &want, "after a foreign TILERELEASE");
}
