//! One directed image per rule: each breaks exactly that rule, and the report must name the
//! rule, tile, byte offset, value, limit, kind and sentence the users of the crate see.

use amx_tilecfg::image::{self, SIZE};
use amx_tilecfg::{validate, Field, Palette, PaletteTable, Rule, RuleKind, TileShape, Violation};

/// Palette 1 with only two tile names, so that tile slots t2..t7 are reserved.
const TWO_NAMES: Palette = Palette {
    max_names: 2,
    ..Palette::PALETTE_1
};

/// A directed case: an image, the table it is checked against, the one violation expected and
/// the sentence it prints.
struct Case {
    image: [u8; SIZE],
    table: PaletteTable,
    expected: Violation,
    field: Field,
    sentence: &'static str,
}

/// Palette 1, start_row 0, the given tiles used.
fn with_tiles(start_row: u8, tiles: &[(usize, u8, u16)]) -> [u8; SIZE] {
    let mut shapes = [None; 8];
    for &(t, rows, colsb) in tiles {
        shapes[t] = Some(TileShape::new(rows, colsb));
    }
    image::encode(1, start_row, &shapes)
}

/// The directed case of `rule`. The match has no wildcard, so a new rule does not compile until
/// it has a case here.
fn case(rule: Rule) -> Case {
    let arch = PaletteTable::ARCHITECTURAL;
    match rule {
        Rule::PaletteUnsupported => {
            let mut image = [0; SIZE];
            image[0] = 2;
            Case {
                image,
                table: arch,
                expected: Violation {
                    rule,
                    tile: None,
                    offset: 0,
                    value: 2,
                    limit: 1,
                    palette: 2,
                },
                field: Field::PaletteId,
                sentence: "palette 2 is not supported; the palette table allows at most palette 1 (max_palette)",
            }
        }
        Rule::ReservedNonZero => {
            let mut image = with_tiles(0, &[(0, 16, 64)]);
            image[40] = 0x80;
            Case {
                image,
                table: arch,
                expected: Violation {
                    rule,
                    tile: None,
                    offset: 40,
                    value: 0x80,
                    limit: 0,
                    palette: 1,
                },
                field: Field::Reserved,
                sentence: "byte 40 is reserved and must be 0, but holds 0x80",
            }
        }
        Rule::TileBeyondNames => {
            // Only the rows byte of t2 is set: no colsb violation may come with it.
            let mut image = with_tiles(0, &[(1, 16, 64)]);
            image[image::rows_offset(2)] = 1;
            Case {
                image,
                table: PaletteTable::one(TWO_NAMES),
                expected: Violation {
                    rule,
                    tile: Some(2),
                    offset: 50,
                    value: 1,
                    limit: 2,
                    palette: 1,
                },
                field: Field::Rows,
                sentence: "byte 50 (rows of tile t2) is reserved: palette 1 has 2 tiles (max_names), but it holds 0x01",
            }
        }
        Rule::ColsbTooLarge => Case {
            // 68 is a multiple of 4, so only the load-time limit is broken.
            image: with_tiles(0, &[(0, 16, 68)]),
            table: arch,
            expected: Violation {
                rule,
                tile: Some(0),
                offset: 16,
                value: 68,
                limit: 64,
                palette: 1,
            },
            field: Field::Colsb,
            sentence: "tile t0 has 68 bytes per row (colsb); palette 1 allows at most 64 (bytes_per_row)",
        },
        Rule::RowsTooLarge => Case {
            image: with_tiles(0, &[(3, 17, 64)]),
            table: arch,
            expected: Violation {
                rule,
                tile: Some(3),
                offset: 51,
                value: 17,
                limit: 16,
                palette: 1,
            },
            field: Field::Rows,
            sentence: "tile t3 has 17 rows; palette 1 allows at most 16 (max_rows)",
        },
        Rule::RowsWithoutColsb => {
            let mut image = [0; SIZE];
            image[0] = 1;
            image[image::rows_offset(1)] = 16;
            Case {
                image,
                table: arch,
                expected: Violation {
                    rule,
                    tile: Some(1),
                    offset: 49,
                    value: 16,
                    limit: 0,
                    palette: 1,
                },
                field: Field::Rows,
                sentence: "tile t1 has 16 rows but 0 bytes per row (colsb); rows and colsb must both be 0 (an unused tile) or both be nonzero",
            }
        }
        Rule::ColsbWithoutRows => {
            let mut image = [0; SIZE];
            image[0] = 1;
            image[image::colsb_offset(2)] = 64;
            Case {
                image,
                table: arch,
                expected: Violation {
                    rule,
                    tile: Some(2),
                    offset: 20,
                    value: 64,
                    limit: 0,
                    palette: 1,
                },
                field: Field::Colsb,
                sentence: "tile t2 has 64 bytes per row (colsb) but 0 rows; rows and colsb must both be 0 (an unused tile) or both be nonzero",
            }
        }
        Rule::ColsbNotMultipleOf4 => Case {
            image: with_tiles(0, &[(4, 3, 6)]),
            table: arch,
            expected: Violation {
                rule,
                tile: Some(4),
                offset: 24,
                value: 6,
                limit: 4,
                palette: 1,
            },
            field: Field::Colsb,
            sentence: "tile t4 has 6 bytes per row (colsb), not a multiple of 4; TILELOADD, TILESTORED and every TDP* raise #UD on such a tile",
        },
        Rule::StartRowNotBelowRows => Case {
            image: with_tiles(3, &[(0, 3, 64), (1, 4, 64)]),
            table: arch,
            expected: Violation {
                rule,
                tile: Some(0),
                offset: 1,
                value: 3,
                limit: 3,
                palette: 1,
            },
            field: Field::StartRow,
            sentence: "start_row 3 is not below the 3 rows of tile t0; TILELOADD and TILESTORED raise #UD on that tile",
        },
    }
}

/// Checks that the case's image breaks its rule and nothing else, reported exactly as expected.
fn check(rule: Rule, kind: RuleKind) {
    let case = case(rule);
    let report = validate(&case.image, &case.table);
    let all: Vec<Violation> = report.iter().copied().collect();
    assert_eq!(all, [case.expected], "{}", rule.name());
    assert_eq!(report.len(), 1);
    assert!(!report.is_empty());
    let v = all[0];
    assert_eq!(v.rule, rule);
    assert_eq!(v.kind(), kind);
    assert_eq!(rule.kind(), kind);
    assert_eq!(v.field(), case.field);
    assert_eq!(v.to_string(), case.sentence);
    // The load/use split is what LDTILECFG (#GP) and the tile instructions (#UD) see.
    assert_eq!(report.is_loadable(), kind == RuleKind::Use);
    assert_eq!(
        report.load_violations().count(),
        usize::from(kind == RuleKind::Load)
    );
    assert_eq!(
        report.use_violations().count(),
        usize::from(kind == RuleKind::Use)
    );
}

#[test]
fn palette_unsupported() {
    check(Rule::PaletteUnsupported, RuleKind::Load);
}

#[test]
fn reserved_nonzero() {
    check(Rule::ReservedNonZero, RuleKind::Load);
}

#[test]
fn tile_beyond_names() {
    check(Rule::TileBeyondNames, RuleKind::Load);
}

#[test]
fn colsb_too_large() {
    check(Rule::ColsbTooLarge, RuleKind::Load);
}

#[test]
fn rows_too_large() {
    check(Rule::RowsTooLarge, RuleKind::Load);
}

#[test]
fn rows_without_colsb() {
    check(Rule::RowsWithoutColsb, RuleKind::Load);
}

#[test]
fn colsb_without_rows() {
    check(Rule::ColsbWithoutRows, RuleKind::Load);
}

#[test]
fn colsb_not_multiple_of_4() {
    check(Rule::ColsbNotMultipleOf4, RuleKind::Use);
}

#[test]
fn start_row_not_below_rows() {
    check(Rule::StartRowNotBelowRows, RuleKind::Use);
}

#[test]
fn the_catalog_lists_every_rule_once_load_rules_first() {
    let all = Rule::ALL;
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert_ne!(a, b);
            assert_ne!(a.name(), b.name());
        }
        // Each rule's directed case reports that very rule.
        assert_eq!(case(*a).expected.rule, *a);
    }
    let first_use = all.iter().position(|r| r.kind() == RuleKind::Use).unwrap();
    assert!(all[first_use..].iter().all(|r| r.kind() == RuleKind::Use));
    assert_eq!(all.iter().filter(|r| r.kind() == RuleKind::Use).count(), 2);
    let names: Vec<&str> = all.iter().map(|r| r.name()).collect();
    assert_eq!(
        names,
        [
            "palette-unsupported",
            "reserved-nonzero",
            "tile-beyond-max-names",
            "colsb-too-large",
            "rows-too-large",
            "rows-without-colsb",
            "colsb-without-rows",
            "colsb-not-multiple-of-4",
            "start-row-not-below-rows",
        ]
    );
}

#[test]
fn fields_print_their_image_names() {
    let printed: Vec<String> = [
        Field::PaletteId,
        Field::StartRow,
        Field::Reserved,
        Field::Colsb,
        Field::Rows,
    ]
    .iter()
    .map(|f| f.to_string())
    .collect();
    assert_eq!(
        printed,
        ["palette_id", "start_row", "reserved", "colsb", "rows"]
    );
}

#[test]
fn each_reserved_byte_alone_is_reported_at_its_offset() {
    // The values of docs/semantics.md L1: 0x01 in 2..=15 and 56..=63, 0x80 in 32..=47.
    let reserved: Vec<usize> = (2..16).chain(32..48).chain(56..64).collect();
    assert_eq!(reserved.len(), 38);
    for offset in 0..SIZE {
        let mut image = with_tiles(0, &[(0, 16, 64), (7, 16, 64)]);
        let value = if (32..48).contains(&offset) {
            0x80
        } else {
            0x01
        };
        let is_reserved = reserved.contains(&offset);
        if is_reserved {
            image[offset] = value;
            let all: Vec<Violation> = validate(&image, &PaletteTable::ARCHITECTURAL)
                .iter()
                .copied()
                .collect();
            let expected = Violation {
                rule: Rule::ReservedNonZero,
                tile: None,
                offset: offset as u8,
                value: value as u32,
                limit: 0,
                palette: 1,
            };
            assert_eq!(all, [expected], "byte {offset}");
        }
        assert_eq!(
            image::RESERVED.iter().any(|r| r.contains(&offset)),
            is_reserved,
            "byte {offset}"
        );
    }
}

#[test]
fn the_colsb_word_is_read_little_endian_whole() {
    // docs/semantics.md L1: colsb = 0x100 (only the high byte set) and 0x140 both exceed 64; 65 on t7.
    for (t, colsb) in [(0, 0x100u16), (5, 0x140), (7, 65)] {
        let image = with_tiles(0, &[(t, 16, colsb)]);
        let report = validate(&image, &PaletteTable::ARCHITECTURAL);
        let load: Vec<Violation> = report.load_violations().copied().collect();
        assert_eq!(
            load,
            [Violation {
                rule: Rule::ColsbTooLarge,
                tile: Some(t as u8),
                offset: 16 + 2 * t as u8,
                value: colsb as u32,
                limit: 64,
                palette: 1,
            }],
            "t{t} colsb {colsb:#x}"
        );
    }
    // And 255 rows are too many, as 17 are.
    let report = validate(
        &with_tiles(0, &[(6, 255, 64)]),
        &PaletteTable::ARCHITECTURAL,
    );
    assert_eq!(report.iter().next().unwrap().rule, Rule::RowsTooLarge);
    assert_eq!(report.iter().next().unwrap().value, 255);
}

#[test]
fn limits_are_inclusive() {
    // 16 x 64 on every tile is the largest loadable configuration of palette 1.
    let all: Vec<(usize, u8, u16)> = (0..8).map(|t| (t, 16, 64)).collect();
    assert!(validate(&with_tiles(15, &all), &PaletteTable::ARCHITECTURAL).is_empty());
    // The smallest used tile, and start_row one below its rows.
    assert!(validate(&with_tiles(0, &[(2, 1, 4)]), &PaletteTable::ARCHITECTURAL).is_empty());
    assert!(validate(&with_tiles(2, &[(2, 3, 4)]), &PaletteTable::ARCHITECTURAL).is_empty());
    // Reduced limits move the bounds with them.
    let small = PaletteTable::one(Palette {
        bytes_per_row: 32,
        max_rows: 8,
        ..Palette::PALETTE_1
    });
    assert!(validate(&with_tiles(0, &[(0, 8, 32)]), &small).is_empty());
    let report = validate(&with_tiles(0, &[(0, 9, 36)]), &small);
    let rules: Vec<(Rule, u32, u32)> = report.iter().map(|v| (v.rule, v.value, v.limit)).collect();
    assert_eq!(
        rules,
        [(Rule::ColsbTooLarge, 36, 32), (Rule::RowsTooLarge, 9, 8)]
    );
}

#[test]
fn start_row_is_not_checked_on_unused_tiles_or_at_load() {
    // docs/semantics.md L3: any start_row loads; it only matters to TILELOADD/TILESTORED of a used tile.
    for start_row in [0, 1, 15, 16, 17, 200, 255] {
        let mut image = [0; SIZE];
        image[0] = 1;
        image[1] = start_row;
        assert!(
            validate(&image, &PaletteTable::ARCHITECTURAL).is_empty(),
            "start_row {start_row}"
        );
        let report = validate(
            &with_tiles(start_row, &[(5, 16, 64)]),
            &PaletteTable::ARCHITECTURAL,
        );
        assert!(report.is_loadable());
        assert_eq!(
            report.len(),
            usize::from(start_row >= 16),
            "start_row {start_row}"
        );
    }
}

#[test]
fn colsb_that_is_not_a_multiple_of_4_still_loads() {
    // docs/semantics.md L3: colsb 1, 6 and 63 load; each is a use-time violation only.
    for colsb in [1u16, 2, 3, 6, 63] {
        let report = validate(
            &with_tiles(0, &[(0, 1, colsb)]),
            &PaletteTable::ARCHITECTURAL,
        );
        assert!(report.is_loadable(), "colsb {colsb}");
        let rules: Vec<Rule> = report.use_violations().map(|v| v.rule).collect();
        assert_eq!(rules, [Rule::ColsbNotMultipleOf4], "colsb {colsb}");
    }
}

#[test]
fn an_image_breaking_many_rules_reports_each_in_order() {
    let mut image = with_tiles(
        5,
        &[
            (0, 17, 65), // rows and colsb too large, colsb % 4 != 0
            (2, 0, 8),   // colsb without rows
            (3, 4, 8),   // start_row 5 not below 4 rows
            (5, 2, 6),   // colsb % 4 != 0 and start_row 5 not below 2 rows
        ],
    );
    image[image::rows_offset(1)] = 4; // rows without colsb: start_row is not checked on it
    image[3] = 0xFF;
    image[40] = 0x80;
    image[63] = 0x01;
    let report = validate(&image, &PaletteTable::ARCHITECTURAL);
    let v = |rule, tile: Option<u8>, offset, value, limit| Violation {
        rule,
        tile,
        offset,
        value,
        limit,
        palette: 1,
    };
    let expected = [
        v(Rule::ReservedNonZero, None, 3, 0xFF, 0),
        v(Rule::ReservedNonZero, None, 40, 0x80, 0),
        v(Rule::ReservedNonZero, None, 63, 0x01, 0),
        v(Rule::ColsbTooLarge, Some(0), 16, 65, 64),
        v(Rule::RowsTooLarge, Some(0), 48, 17, 16),
        v(Rule::RowsWithoutColsb, Some(1), 49, 4, 0),
        v(Rule::ColsbWithoutRows, Some(2), 20, 8, 0),
        v(Rule::ColsbNotMultipleOf4, Some(0), 16, 65, 4),
        v(Rule::StartRowNotBelowRows, Some(3), 1, 5, 4),
        v(Rule::ColsbNotMultipleOf4, Some(5), 26, 6, 4),
        v(Rule::StartRowNotBelowRows, Some(5), 1, 5, 2),
    ];
    let all: Vec<Violation> = report.iter().copied().collect();
    assert_eq!(all, expected);
    assert_eq!(report.load_violations().count(), 7);
    assert_eq!(report.use_violations().count(), 4);
    assert!(!report.is_loadable());
}

#[test]
fn tiles_past_max_names_report_both_their_fields() {
    let image = with_tiles(0, &[(0, 16, 64), (1, 16, 64), (2, 16, 64), (7, 0, 0x140)]);
    let report = validate(&image, &PaletteTable::one(TWO_NAMES));
    let all: Vec<(Rule, Option<u8>, u8, u32, Field)> = report
        .iter()
        .map(|v| (v.rule, v.tile, v.offset, v.value, v.field()))
        .collect();
    assert_eq!(
        all,
        [
            (Rule::TileBeyondNames, Some(2), 20, 64, Field::Colsb),
            (Rule::TileBeyondNames, Some(2), 50, 16, Field::Rows),
            (Rule::TileBeyondNames, Some(7), 30, 0x140, Field::Colsb),
        ]
    );
    assert_eq!(
        report.iter().nth(2).unwrap().to_string(),
        "byte 30 (colsb of tile t7) is reserved: palette 1 has 2 tiles (max_names), but it holds 0x140"
    );
    // Tiles past max_names get no use-time check either: t3 below would break both use-time
    // rules if it were one of the palette's tiles.
    let report = validate(
        &with_tiles(9, &[(0, 16, 64), (3, 2, 6)]),
        &PaletteTable::one(TWO_NAMES),
    );
    assert!(report.use_violations().next().is_none());
    // A palette with more than 8 names still has only the image's 8 slots.
    let many = PaletteTable::one(Palette {
        max_names: 0xFFFF,
        ..Palette::PALETTE_1
    });
    assert!(validate(&with_tiles(0, &[(7, 16, 64)]), &many).is_empty());
}

#[test]
fn an_unsupported_palette_reports_the_reserved_bytes_but_not_the_tiles() {
    // Without the palette's limits nothing can be said of the tiles, but reserved bytes are
    // reserved whatever the palette.
    let mut image = with_tiles(0, &[(0, 17, 65)]);
    image[0] = 255;
    image[2] = 1;
    let all: Vec<(Rule, u8, u32, u32)> = validate(&image, &PaletteTable::ARCHITECTURAL)
        .iter()
        .map(|v| (v.rule, v.offset, v.value, v.limit))
        .collect();
    assert_eq!(
        all,
        [
            (Rule::PaletteUnsupported, 0, 255, 1),
            (Rule::ReservedNonZero, 2, 1, 0)
        ]
    );
    // A table without palettes besides INIT rejects palette 1 itself.
    let report = validate(&with_tiles(0, &[(0, 16, 64)]), &PaletteTable::NONE);
    let v = report.iter().next().unwrap();
    assert_eq!(
        (report.len(), v.rule, v.value, v.limit),
        (1, Rule::PaletteUnsupported, 1, 0)
    );
    assert_eq!(
        v.to_string(),
        "palette 1 is not supported; the palette table allows at most palette 0 (max_palette)"
    );
}

#[test]
fn palette_0_ignores_every_other_byte() {
    // docs/semantics.md L4: palette 0 with every other byte at its worst loads, as INIT.
    let mut worst = [0xFF; SIZE];
    worst[0] = 0;
    let mut sixteen_by_64 = with_tiles(7, &(0..8).map(|t| (t, 16, 64)).collect::<Vec<_>>());
    sixteen_by_64[0] = 0;
    for image in [worst, sixteen_by_64] {
        for table in [
            PaletteTable::ARCHITECTURAL,
            PaletteTable::NONE,
            PaletteTable::one(TWO_NAMES),
        ] {
            let report = validate(&image, &table);
            assert!(report.is_empty() && report.is_loadable());
            assert_eq!(report.len(), 0);
        }
    }
    // Every single byte, at every interesting value, beside palette 0.
    for offset in 1..SIZE {
        for value in [1, 15, 16, 17, 63, 64, 65, 255] {
            let mut image = [0; SIZE];
            image[offset] = value;
            assert!(
                validate(&image, &PaletteTable::ARCHITECTURAL).is_empty(),
                "byte {offset} = {value}"
            );
        }
    }
}

#[test]
fn the_worst_image_fits_in_the_report() {
    // Palette 1 with every other byte 0xFF breaks the most rules at once: 38 reserved bytes,
    // and on each of the 8 tiles colsb and rows too large, colsb % 4 and start_row.
    let mut image = [0xFF; SIZE];
    image[0] = 1;
    let report = validate(&image, &PaletteTable::ARCHITECTURAL);
    assert_eq!(report.len(), 38 + 8 * 4);
    assert!(report.len() <= amx_tilecfg::validate::CAPACITY);
    assert_eq!(report.iter().count(), report.len());
    assert_eq!(report.load_violations().count(), 38 + 8 * 2);
    assert_eq!(report.use_violations().count(), 8 * 2);
    // Every violation points into the image.
    assert!(report
        .iter()
        .all(|v| (v.offset as usize) < SIZE && v.palette == 1));
}
