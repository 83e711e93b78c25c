//! `check_dot`: the operand rules of the tile dot products (docs/semantics.md section 8, D1 and D2).

use amx_tilecfg::{check_dot, DotKind, DotMismatch, TileShape, TmulLimits};
use proptest::prelude::*;

const ARCH: TmulLimits = TmulLimits::ARCHITECTURAL;

fn s(rows: u8, colsb: u16) -> TileShape {
    TileShape::new(rows, colsb)
}

/// `C += A x B` on tiles t0, t1, t2 with an M x K x N product (K in dwords, N in bytes).
fn mkn(m: u8, k: u8, n: u16) -> [(u8, TileShape); 3] {
    [(0, s(m, n)), (1, s(m, 4 * k as u16)), (2, s(k, n))]
}

fn dot(ops: [(u8, TileShape); 3], limits: TmulLimits) -> Result<(), DotMismatch> {
    check_dot(ops[0], ops[1], ops[2], limits)
}

#[test]
fn matching_shapes_are_accepted() {
    assert_eq!(dot(mkn(16, 16, 64), ARCH), Ok(()));
    assert_eq!(dot(mkn(1, 1, 4), ARCH), Ok(()));
    assert_eq!(dot(mkn(3, 2, 12), ARCH), Ok(()));
    // Any three different tile numbers, in any order.
    assert_eq!(
        check_dot((7, s(2, 8)), (0, s(2, 12)), (3, s(3, 8)), ARCH),
        Ok(())
    );
}

#[test]
fn every_palette_1_product_fits_the_architectural_tmul() {
    // docs/semantics.md D2: with 16 rows x 64 bytes the TMUL limits cannot be reached.
    for m in 1..=16 {
        for k in 1..=16 {
            for n in (4..=64).step_by(4) {
                assert_eq!(dot(mkn(m, k, n), ARCH), Ok(()), "{m}x{k}x{n}");
            }
        }
    }
}

#[test]
fn aliased_operands() {
    let (c, a, b) = ((0, s(2, 8)), (1, s(2, 8)), (2, s(2, 8)));
    let cases = [
        ((c, (0, a.1), b), ("C", "A"), 0),
        ((c, a, (0, b.1)), ("C", "B"), 0),
        ((c, a, (1, b.1)), ("A", "B"), 1),
        // All three the same tile: the first pair is named.
        (((5, c.1), (5, a.1), (5, b.1)), ("C", "A"), 5),
    ];
    for ((c, a, b), roles, tile) in cases {
        assert_eq!(
            check_dot(c, a, b, ARCH),
            Err(DotMismatch::Aliased { roles, tile })
        );
    }
    assert_eq!(
        DotMismatch::Aliased {
            roles: ("A", "B"),
            tile: 1
        }
        .to_string(),
        "operands A and B are both tile t1; C, A and B must be three different tiles"
    );
    // Aliasing is found before anything else, even on unused tiles.
    assert_eq!(
        check_dot((3, s(0, 0)), (3, s(0, 0)), (4, s(0, 0)), ARCH),
        Err(DotMismatch::Aliased {
            roles: ("C", "A"),
            tile: 3
        })
    );
}

#[test]
fn unused_operands() {
    for (i, role) in ["C", "A", "B"].into_iter().enumerate() {
        let mut ops = mkn(2, 2, 8);
        ops[i].1 = s(0, 0);
        assert_eq!(
            dot(ops, ARCH),
            Err(DotMismatch::Unused {
                role,
                tile: i as u8
            }),
            "{role}"
        );
    }
    assert_eq!(
        DotMismatch::Unused { role: "B", tile: 6 }.to_string(),
        "operand B is tile t6, which is unused (0 rows, 0 colsb)"
    );
    // The first unused operand in C, A, B order is named.
    let mut ops = mkn(2, 2, 8);
    ops[1].1 = s(0, 0);
    ops[2].1 = s(0, 0);
    assert_eq!(
        dot(ops, ARCH),
        Err(DotMismatch::Unused { role: "A", tile: 1 })
    );
}

#[test]
fn colsb_not_a_multiple_of_4() {
    // docs/semantics.md D1's example: C 2x6, A 2x8, B 2x6 agree in shape but colsb 6 raises #UD.
    assert_eq!(
        check_dot((0, s(2, 6)), (1, s(2, 8)), (2, s(2, 6)), ARCH),
        Err(DotMismatch::ColsbNotMultipleOf4 {
            role: "C",
            tile: 0,
            colsb: 6
        })
    );
    // A with colsb 9: K = 9 / 4 = 2 would match B's 2 rows if the remainder were dropped.
    assert_eq!(
        check_dot((0, s(2, 8)), (1, s(2, 9)), (2, s(2, 8)), ARCH),
        Err(DotMismatch::ColsbNotMultipleOf4 {
            role: "A",
            tile: 1,
            colsb: 9
        })
    );
    assert_eq!(
        check_dot((0, s(2, 8)), (1, s(2, 8)), (2, s(2, 10)), ARCH),
        Err(DotMismatch::ColsbNotMultipleOf4 {
            role: "B",
            tile: 2,
            colsb: 10
        })
    );
    assert_eq!(
        DotMismatch::ColsbNotMultipleOf4 {
            role: "C",
            tile: 0,
            colsb: 6
        }
        .to_string(),
        "operand C (tile t0) has 6 bytes per row, not a multiple of 4"
    );
}

#[test]
fn m_differs() {
    assert_eq!(
        check_dot((0, s(2, 16)), (1, s(3, 8)), (2, s(2, 16)), ARCH),
        Err(DotMismatch::RowsMismatch {
            tiles: (0, 1),
            c_rows: 2,
            a_rows: 3
        })
    );
    assert_eq!(
        DotMismatch::RowsMismatch {
            tiles: (0, 1),
            c_rows: 2,
            a_rows: 3
        }
        .to_string(),
        "C (t0) has 2 rows but A (t1) has 3; C.rows must equal A.rows (M)"
    );
}

#[test]
fn k_differs_either_way() {
    // docs/semantics.md D1: A.colsb / 4 != B.rows, including A.colsb / 4 < B.rows.
    assert_eq!(
        check_dot((4, s(2, 16)), (5, s(2, 8)), (6, s(3, 16)), ARCH),
        Err(DotMismatch::KMismatch {
            tiles: (5, 6),
            a_colsb: 8,
            b_rows: 3
        })
    );
    assert_eq!(
        check_dot((4, s(2, 16)), (5, s(2, 16)), (6, s(3, 16)), ARCH),
        Err(DotMismatch::KMismatch {
            tiles: (5, 6),
            a_colsb: 16,
            b_rows: 3
        })
    );
    assert_eq!(
        DotMismatch::KMismatch { tiles: (5, 6), a_colsb: 8, b_rows: 3 }.to_string(),
        "A (t5) has 8 bytes per row, so K = 2, but B (t6) has 3 rows; B.rows must equal A.colsb / 4 (K)"
    );
}

#[test]
fn n_differs() {
    assert_eq!(
        check_dot((0, s(2, 16)), (1, s(2, 8)), (2, s(2, 12)), ARCH),
        Err(DotMismatch::NMismatch {
            tiles: (0, 2),
            c_colsb: 16,
            b_colsb: 12
        })
    );
    assert_eq!(
        DotMismatch::NMismatch {
            tiles: (0, 2),
            c_colsb: 16,
            b_colsb: 12
        }
        .to_string(),
        "C (t0) has 16 bytes per row but B (t2) has 12; C.colsb must equal B.colsb (N)"
    );
}

#[test]
fn mismatches_are_reported_in_a_fixed_order() {
    // M, K and N all differ: M is named. Then K before N.
    assert_eq!(
        check_dot((0, s(2, 16)), (1, s(3, 8)), (2, s(5, 12)), ARCH),
        Err(DotMismatch::RowsMismatch {
            tiles: (0, 1),
            c_rows: 2,
            a_rows: 3
        })
    );
    assert_eq!(
        check_dot((0, s(3, 16)), (1, s(3, 8)), (2, s(5, 12)), ARCH),
        Err(DotMismatch::KMismatch {
            tiles: (1, 2),
            a_colsb: 8,
            b_rows: 5
        })
    );
    // colsb % 4 comes before a shape mismatch, and unused before colsb % 4.
    assert_eq!(
        check_dot((0, s(3, 6)), (1, s(2, 8)), (2, s(2, 8)), ARCH),
        Err(DotMismatch::ColsbNotMultipleOf4 {
            role: "C",
            tile: 0,
            colsb: 6
        })
    );
    assert_eq!(
        check_dot((0, s(3, 6)), (1, s(2, 8)), (2, s(0, 0)), ARCH),
        Err(DotMismatch::Unused { role: "B", tile: 2 })
    );
}

#[test]
fn reduced_tmul_limits() {
    let half = TmulLimits { maxk: 8, maxn: 32 };
    // At the limits: accepted.
    assert_eq!(dot(mkn(16, 8, 32), half), Ok(()));
    assert_eq!(
        dot(mkn(16, 9, 32), half),
        Err(DotMismatch::KTooLarge { k: 9, maxk: 8 })
    );
    assert_eq!(
        dot(mkn(16, 8, 36), half),
        Err(DotMismatch::NTooLarge {
            colsb: 36,
            maxn: 32
        })
    );
    // Both too large: K is named first.
    assert_eq!(
        dot(mkn(16, 16, 64), half),
        Err(DotMismatch::KTooLarge { k: 16, maxk: 8 })
    );
    // A shape mismatch is named before a limit.
    let mut ops = mkn(16, 16, 64);
    ops[2].1.colsb = 60;
    assert_eq!(
        dot(ops, half),
        Err(DotMismatch::NMismatch {
            tiles: (0, 2),
            c_colsb: 64,
            b_colsb: 60
        })
    );
    // A CPU whose TMUL is wider than palette 1's tiles accepts everything palette 1 can hold.
    let wide = TmulLimits {
        maxk: 255,
        maxn: 1024,
    };
    assert_eq!(dot(mkn(16, 16, 64), wide), Ok(()));
    // And a TMUL without any K or N accepts nothing.
    let none = TmulLimits { maxk: 0, maxn: 0 };
    assert_eq!(
        dot(mkn(1, 1, 4), none),
        Err(DotMismatch::KTooLarge { k: 1, maxk: 0 })
    );
    assert_eq!(
        DotMismatch::KTooLarge { k: 9, maxk: 8 }.to_string(),
        "K = 9 exceeds this CPU's TMUL limit of 8 (tmul_maxk)"
    );
    assert_eq!(
        DotMismatch::NTooLarge {
            colsb: 36,
            maxn: 32
        }
        .to_string(),
        "N = 36 bytes exceeds this CPU's TMUL limit of 32 bytes (tmul_maxn)"
    );
}

#[test]
fn check_dot_runs_in_constants() {
    const OK: Result<(), DotMismatch> = check_dot(
        (0, TileShape::new(16, 64)),
        (1, TileShape::new(16, 64)),
        (2, TileShape::new(16, 64)),
        TmulLimits::ARCHITECTURAL,
    );
    const BAD: Result<(), DotMismatch> = check_dot(
        (0, TileShape::new(16, 64)),
        (1, TileShape::new(16, 64)),
        (2, TileShape::new(15, 64)),
        TmulLimits::ARCHITECTURAL,
    );
    assert_eq!(OK, Ok(()));
    assert!(matches!(
        BAD,
        Err(DotMismatch::KMismatch { b_rows: 15, .. })
    ));
}

#[test]
fn mnemonics() {
    let all = [
        (DotKind::Tdpbssd, "TDPBSSD"),
        (DotKind::Tdpbsud, "TDPBSUD"),
        (DotKind::Tdpbusd, "TDPBUSD"),
        (DotKind::Tdpbuud, "TDPBUUD"),
        (DotKind::Tdpbf16ps, "TDPBF16PS"),
        (DotKind::Tdpfp16ps, "TDPFP16PS"),
    ];
    for (kind, mnemonic) in all {
        assert_eq!(kind.mnemonic(), mnemonic);
    }
}

/// docs/semantics.md D1 and D2, one condition per bullet: whether the dot product raises #UD.
fn raises_ud(c: (u8, TileShape), a: (u8, TileShape), b: (u8, TileShape), l: TmulLimits) -> bool {
    let unused = |t: TileShape| t.rows == 0 && t.colsb == 0;
    c.0 == a.0
        || c.0 == b.0
        || a.0 == b.0
        || unused(c.1)
        || unused(a.1)
        || unused(b.1)
        || c.1.colsb != b.1.colsb
        || c.1.rows != a.1.rows
        || a.1.colsb / 4 != b.1.rows as u16
        || !c.1.colsb.is_multiple_of(4)
        || !a.1.colsb.is_multiple_of(4)
        || !b.1.colsb.is_multiple_of(4)
        || c.1.colsb > l.maxn
        || b.1.colsb > l.maxn
        || a.1.colsb / 4 > l.maxk as u16
        || b.1.rows as u16 > l.maxk as u16
}

/// A shape of a loaded configuration (both fields zero or both nonzero), near the small and
/// the palette-1 sizes where the rules have their edges.
fn shape() -> impl Strategy<Value = TileShape> {
    let rows = prop_oneof![1..=4u8, 15..=17u8, Just(255)];
    let colsb = prop_oneof![1..=16u16, 60..=68u16, Just(256)];
    prop_oneof![
        1 => Just(TileShape::new(0, 0)),
        8 => (rows, colsb).prop_map(|(r, c)| TileShape::new(r, c)),
    ]
}

/// Three operands that often agree, so that each rule is reached, not only the first.
fn operands() -> impl Strategy<Value = [(u8, TileShape); 3]> {
    let tiles = prop_oneof![
        8 => Just([0u8, 1, 2]),
        1 => [0..3u8, 0..3u8, 0..3u8],
    ];
    let shapes = prop_oneof![
        (1..=17u8, 1..=17u8, 1..=17u16)
            .prop_map(|(m, k, n)| { [s(m, 4 * n), s(m, 4 * k as u16), s(k, 4 * n)] }),
        [shape(), shape(), shape()],
    ];
    (tiles, shapes).prop_map(|(t, s)| [(t[0], s[0]), (t[1], s[1]), (t[2], s[2])])
}

fn limits() -> impl Strategy<Value = TmulLimits> {
    prop_oneof![
        Just(TmulLimits::ARCHITECTURAL),
        (0..=17u8, 0..=68u16).prop_map(|(maxk, maxn)| TmulLimits { maxk, maxn }),
    ]
}

proptest! {
    #[test]
    fn check_dot_rejects_exactly_what_raises_ud(ops in operands(), limits in limits()) {
        let result = dot(ops, limits);
        prop_assert_eq!(result.is_err(), raises_ud(ops[0], ops[1], ops[2], limits), "{:?}", result);
    }
}
