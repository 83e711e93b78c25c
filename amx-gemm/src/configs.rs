//! The tile configurations: one per micro-tile shape, full and edge, in a static table.
//!
//! Every configuration uses the same register roles, so one micro-kernel serves them all:
//!
//! | tile | role | shape (rows x bytes per row)        |
//! |------|------|-------------------------------------|
//! | t0   | C00  | r0 x 4*c0 (i32 or f32)              |
//! | t1   | C01  | r0 x 4*c1                           |
//! | t2   | C10  | r1 x 4*c0                           |
//! | t3   | C11  | r1 x 4*c1                           |
//! | t4   | A0   | r0 x 64                             |
//! | t5   | A1   | r1 x 64                             |
//! | t6   | B0   | 16 x 4*c0 (VNNI: 16 k-groups)       |
//! | t7   | B1   | 16 x 4*c1                           |
//!
//! where a micro-tile of `rows x cols` outputs (each 1..=32) splits into tile rows
//! `r0 = min(rows, 16)`, `r1 = rows - r0` and tile columns `c0 = min(cols, 16)`,
//! `c1 = cols - c0`. A tile with 0 rows or columns is left unused (and the micro-kernel skips
//! it), so the table covers the full 2x2 kernel (`32 x 32`), the 2x1, 1x2 and 1x1 variants, and
//! every remainder of M and N: 32 x 32 = 1024 configurations, indexed by the remaining rows and
//! columns. The K tail needs none: packing pads it with zeros.
//!
//! Each entry is a `tilecfg!` configuration, checked at compile time, in a `static` table
//! generated with `macro_rules`. On first use the whole table is also checked against the
//! micro-kernel: the tiles it names, and the dot products it issues under the same operand rule
//! the silicon applies (`amx_tilecfg::check_dot`). That check is what makes the unchecked
//! silicon path sound: an entry that would make any instruction of the kernel raise #UD is
//! never handed out.

use std::sync::OnceLock;

use amx_runtime::rules::{check_dot, PaletteTable, TileShape, TmulLimits};
use amx_runtime::{tilecfg, TileConfig};

use crate::error::{GemmError, InternalError, Unsupported};

/// Tile register of C rows 0..16, columns 0..16 of the micro-tile.
pub(crate) const C00: i32 = 0;
/// Tile register of C rows 0..16, columns 16..32.
pub(crate) const C01: i32 = 1;
/// Tile register of C rows 16..32, columns 0..16.
pub(crate) const C10: i32 = 2;
/// Tile register of C rows 16..32, columns 16..32.
pub(crate) const C11: i32 = 3;
/// Tile register of A rows 0..16 (one k-step).
pub(crate) const A0: i32 = 4;
/// Tile register of A rows 16..32.
pub(crate) const A1: i32 = 5;
/// Tile register of B columns 0..16 (one k-step, VNNI).
pub(crate) const B0: i32 = 6;
/// Tile register of B columns 16..32.
pub(crate) const B1: i32 = 7;

/// The outputs one micro-kernel call computes: `rows x cols`, each in `1..=32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MicroShape {
    rows: u8,
    cols: u8,
}

impl MicroShape {
    /// The full 2x2 register tile: 32 x 32 outputs.
    pub(crate) const FULL: MicroShape = MicroShape { rows: 32, cols: 32 };

    /// A shape of `rows x cols` outputs, or `None` unless both are in `1..=32`.
    pub(crate) fn new(rows: usize, cols: usize) -> Option<MicroShape> {
        ((1..=32).contains(&rows) && (1..=32).contains(&cols)).then_some(MicroShape {
            rows: rows as u8,
            cols: cols as u8,
        })
    }

    /// Rows and columns of outputs.
    pub(crate) fn dims(self) -> (usize, usize) {
        (self.rows as usize, self.cols as usize)
    }

    /// Rows of the upper tile row (t0, t1, t4).
    pub(crate) fn r0(self) -> u8 {
        self.rows.min(16)
    }

    /// Rows of the lower tile row (t2, t3, t5); 0 when unused.
    pub(crate) fn r1(self) -> u8 {
        self.rows - self.r0()
    }

    /// Columns of the left tile column (t0, t2, t6).
    pub(crate) fn c0(self) -> u8 {
        self.cols.min(16)
    }

    /// Columns of the right tile column (t1, t3, t7); 0 when unused.
    pub(crate) fn c1(self) -> u8 {
        self.cols - self.c0()
    }

    /// Whether the lower tile row is used.
    pub(crate) fn two_rows(self) -> bool {
        self.r1() > 0
    }

    /// Whether the right tile column is used.
    pub(crate) fn two_cols(self) -> bool {
        self.c1() > 0
    }

    /// The shape of every tile register in this shape's configuration (`0x0` when unused).
    pub(crate) fn tiles(self) -> [TileShape; 8] {
        let (r0, r1, c0, c1) = (self.r0(), self.r1(), self.c0(), self.c1());
        let shape = |rows: u8, colsb: u16| {
            if rows == 0 || colsb == 0 {
                TileShape::new(0, 0)
            } else {
                TileShape::new(rows, colsb)
            }
        };
        let mut t = [TileShape::new(0, 0); 8];
        t[C00 as usize] = shape(r0, 4 * c0 as u16);
        t[C01 as usize] = shape(r0, 4 * c1 as u16);
        t[C10 as usize] = shape(r1, 4 * c0 as u16);
        t[C11 as usize] = shape(r1, 4 * c1 as u16);
        t[A0 as usize] = shape(r0, 64);
        t[A1 as usize] = shape(r1, 64);
        t[B0 as usize] = shape(16, 4 * c0 as u16);
        t[B1 as usize] = shape(16, 4 * c1 as u16);
        t
    }

    /// The dot products (C, A, B) the micro-kernel issues for this shape.
    pub(crate) fn dots(self) -> impl Iterator<Item = (i32, i32, i32)> {
        let (r2, c2) = (self.two_rows(), self.two_cols());
        [
            (true, (C00, A0, B0)),
            (c2, (C01, A0, B1)),
            (r2, (C10, A1, B0)),
            (r2 && c2, (C11, A1, B1)),
        ]
        .into_iter()
        .filter_map(|(used, dot)| used.then_some(dot))
    }
}

/// Expands to the table: one row of 32 configurations per row split (the cartesian product is
/// the nesting of `@row` inside the outer repetition).
macro_rules! config_table {
    (rows: [$(($r0:tt $r1:tt))*] cols: $cols:tt) => {
        [$(config_table!(@row $r0 $r1 $cols)),*]
    };
    (@row $r0:tt $r1:tt [$(($c0:tt $c1:tt))*]) => {
        [$(config_table!(@cfg $r0 $r1 $c0 $c1)),*]
    };
    // 1x1 tile: C00, A0, B0.
    (@cfg $r0:tt 0 $c0:tt 0) => {
        tilecfg! {
            palette 1;
            t0: $r0 x $c0 i32; // C00
            t4: $r0 x 64; // A0
            t6: 16 x $c0 i32; // B0
        }
    };
    // 1x2 tiles: one row of C tiles, two B tiles.
    (@cfg $r0:tt 0 $c0:tt $c1:tt) => {
        tilecfg! {
            palette 1;
            t0: $r0 x $c0 i32; // C00
            t1: $r0 x $c1 i32; // C01
            t4: $r0 x 64; // A0
            t6: 16 x $c0 i32; // B0
            t7: 16 x $c1 i32; // B1
        }
    };
    // 2x1 tiles: two A tiles, one column of C tiles.
    (@cfg $r0:tt $r1:tt $c0:tt 0) => {
        tilecfg! {
            palette 1;
            t0: $r0 x $c0 i32; // C00
            t2: $r1 x $c0 i32; // C10
            t4: $r0 x 64; // A0
            t5: $r1 x 64; // A1
            t6: 16 x $c0 i32; // B0
        }
    };
    // The full 2x2 register tile (and its row and column remainders).
    (@cfg $r0:tt $r1:tt $c0:tt $c1:tt) => {
        tilecfg! {
            palette 1;
            t0: $r0 x $c0 i32; // C00
            t1: $r0 x $c1 i32; // C01
            t2: $r1 x $c0 i32; // C10
            t3: $r1 x $c1 i32; // C11
            t4: $r0 x 64; // A0
            t5: $r1 x 64; // A1
            t6: 16 x $c0 i32; // B0
            t7: 16 x $c1 i32; // B1
        }
    };
}

/// One configuration per micro-tile shape, `TABLE[rows - 1][cols - 1]`, each checked by
/// `tilecfg!` at compile time. Generated by [`config_table!`] from the 32 row splits and the 32
/// column splits `(first tile, second tile)`; a second tile of 0 is left out of the
/// configuration (the kernel variant without it runs).
static TABLE: [[TileConfig; 32]; 32] = config_table! {
    rows: [(1 0) (2 0) (3 0) (4 0) (5 0) (6 0) (7 0) (8 0) (9 0) (10 0) (11 0) (12 0) (13 0)
           (14 0) (15 0) (16 0) (16 1) (16 2) (16 3) (16 4) (16 5) (16 6) (16 7) (16 8) (16 9)
           (16 10) (16 11) (16 12) (16 13) (16 14) (16 15) (16 16)]
    cols: [(1 0) (2 0) (3 0) (4 0) (5 0) (6 0) (7 0) (8 0) (9 0) (10 0) (11 0) (12 0) (13 0)
           (14 0) (15 0) (16 0) (16 1) (16 2) (16 3) (16 4) (16 5) (16 6) (16 7) (16 8) (16 9)
           (16 10) (16 11) (16 12) (16 13) (16 14) (16 15) (16 16)]
};

/// The configuration of `shape`. The first call checks the whole table against the micro-kernel
/// (every tile it names used with the shape [`MicroShape::tiles`] gives, every dot product it
/// issues accepted by the silicon's operand rule); an entry that failed would be an error, never
/// handed out.
pub(crate) fn config(shape: MicroShape) -> Result<&'static TileConfig, GemmError> {
    static CHECKED: OnceLock<Result<(), GemmError>> = OnceLock::new();
    CHECKED.get_or_init(check_table).clone()?;
    Ok(&TABLE[shape.rows as usize - 1][shape.cols as usize - 1])
}

/// Whether the micro-kernel of `shape` runs under these TMUL limits: every dot product it issues
/// passes the silicon's operand rule with them. The table is checked against the architectural
/// limits; a CPU (or VM, or emulator) that reports smaller ones would raise #UD on the unchecked
/// path, so the driver asks this of every shape before it configures anything.
pub(crate) fn check_limits(shape: MicroShape, limits: TmulLimits) -> Result<(), GemmError> {
    let tiles = shape.tiles();
    for (c, a, b) in shape.dots() {
        let at = |t: i32| (t as u8, tiles[t as usize]);
        check_dot(at(c), at(a), at(b), limits).map_err(|mismatch| {
            GemmError::Unsupported(Unsupported::TmulLimits {
                limits,
                micro_tile: (shape.rows, shape.cols),
                mismatch,
            })
        })?;
    }
    Ok(())
}

/// Whether the unit's palette table accepts the configuration of `shape` (the load-time rules
/// LDTILECFG applies, the same code `configure` runs): a unit with a smaller palette 1 would
/// refuse it at `configure`, with an error naming the crate's internal tiles.
pub(crate) fn check_palette(shape: MicroShape, table: &PaletteTable) -> Result<(), GemmError> {
    config(shape)?.check_against(table).map_err(|error| {
        GemmError::Unsupported(Unsupported::Palette {
            palette: table.get(1).copied(),
            micro_tile: (shape.rows, shape.cols),
            error,
        })
    })
}

fn check_table() -> Result<(), GemmError> {
    for rows in 1..=32 {
        for cols in 1..=32 {
            let shape = MicroShape { rows, cols };
            let cfg = &TABLE[rows as usize - 1][cols as usize - 1];
            let tiles = shape.tiles();
            let wrong = |why: String| {
                GemmError::Internal(InternalError::new(format!(
                    "micro-tile {rows}x{cols}: {why}"
                )))
            };
            for (t, want) in tiles.iter().enumerate() {
                let have = cfg.tile(t as u8).unwrap_or(TileShape::new(0, 0));
                if have != *want || cfg.start_row() != 0 {
                    return Err(wrong(format!("t{t} is {have}, the kernel needs {want}")));
                }
            }
            for (c, a, b) in shape.dots() {
                let at = |t: i32| (t as u8, tiles[t as usize]);
                check_dot(at(c), at(a), at(b), TmulLimits::ARCHITECTURAL)
                    .map_err(|why| wrong(why.to_string()))?;
            }
        }
    }
    Ok(())
}

/// The full 2x2 register tile as typed layouts (the item form of `tilecfg!`), one per precision
/// because a typed tile carries its element type. Their images equal the table's 32 x 32 entry
/// (tested), and [`typed_kernel_operands`](typed::typed_kernel_operands) proves at compile time
/// that the micro-kernel's four dot products fit them (as do `tile_ops::Full2x2`'s
/// implementations, which issue them). Every region of full 32 x 32 micro-tiles runs through them
/// (`tile_ops::Typed`, configured with `configure_typed_on` on the backend
/// [`Gemm::backend`](crate::Gemm::backend) picks for the call); the edges run under the table.
pub(crate) mod typed {
    pub(crate) use layouts::*;

    /// The layouts themselves. Each also gets a `CONFIG` and a `configure()`, which the driver
    /// does not call (it configures through `configure_typed_on`, on the call's backend).
    #[allow(dead_code)]
    mod layouts {
        use amx_runtime::tilecfg;

        /// A 2x2 layout: four `16 x 16` C tiles of `$c`, two A and two B tiles of 16 rows of
        /// `$cols` elements of `$a` and `$b`.
        macro_rules! layout_2x2 {
            ($(#[$doc:meta])* $name:ident: $c:ident += $a:ident x $b:ident, $cols:literal) => {
                tilecfg! {
                    $(#[$doc])*
                    pub(crate) struct $name;
                    palette 1;
                    t0 as c00: 16 x 16 $c;
                    t1 as c01: 16 x 16 $c;
                    t2 as c10: 16 x 16 $c;
                    t3 as c11: 16 x 16 $c;
                    t4 as a0: 16 x $cols $a;
                    t5 as a1: 16 x $cols $a;
                    t6 as b0: 16 x $cols $b;
                    t7 as b1: 16 x $cols $b;
                }
            };
        }

        layout_2x2! {
            /// The 2x2 kernel for [`Int8`](crate::Int8): TDPBSSD.
            Int8Kernel: i32 += i8 x i8, 64
        }
        layout_2x2! {
            /// The 2x2 kernel for [`U8S8`](crate::U8S8): TDPBUSD.
            U8S8Kernel: i32 += u8 x i8, 64
        }
        layout_2x2! {
            /// The 2x2 kernel for [`S8U8`](crate::S8U8): TDPBSUD.
            S8U8Kernel: i32 += i8 x u8, 64
        }
        layout_2x2! {
            /// The 2x2 kernel for [`U8U8`](crate::U8U8): TDPBUUD.
            U8U8Kernel: i32 += u8 x u8, 64
        }
        layout_2x2! {
            /// The 2x2 kernel for [`Bf16`](crate::Bf16): TDPBF16PS.
            Bf16Kernel: f32 += bf16 x bf16, 32
        }
        layout_2x2! {
            /// The 2x2 kernel for [`Fp16`](crate::Fp16): TDPFP16PS.
            Fp16Kernel: f32 += f16 x f16, 32
        }
        layout_2x2! {
            /// The 2x2 kernel for [`Bf8Bf8`](crate::Bf8Bf8): TDPBF8PS.
            Bf8Bf8Kernel: f32 += bf8 x bf8, 64
        }
        layout_2x2! {
            /// The 2x2 kernel for [`Hf8Hf8`](crate::Hf8Hf8): TDPHF8PS.
            Hf8Hf8Kernel: f32 += hf8 x hf8, 64
        }
        layout_2x2! {
            /// The 2x2 kernel for [`Bf8Hf8`](crate::Bf8Hf8): TDPBHF8PS.
            Bf8Hf8Kernel: f32 += bf8 x hf8, 64
        }
        layout_2x2! {
            /// The 2x2 kernel for [`Hf8Bf8`](crate::Hf8Bf8): TDPHBF8PS.
            Hf8Bf8Kernel: f32 += hf8 x bf8, 64
        }
    }

    /// The micro-kernel's dot products on the typed layouts: this compiles only if every
    /// operand triple fits its instruction (the `Dot` bound). Never called.
    #[allow(dead_code)]
    pub(crate) fn typed_kernel_operands(
        i8: &mut amx_runtime::TypedTiles<Int8Kernel>,
        u8: &mut amx_runtime::TypedTiles<U8S8Kernel>,
        su: &mut amx_runtime::TypedTiles<S8U8Kernel>,
        uu: &mut amx_runtime::TypedTiles<U8U8Kernel>,
        bf: &mut amx_runtime::TypedTiles<Bf16Kernel>,
        fp: &mut amx_runtime::TypedTiles<Fp16Kernel>,
        fp8: (
            &mut amx_runtime::TypedTiles<Bf8Bf8Kernel>,
            &mut amx_runtime::TypedTiles<Hf8Hf8Kernel>,
            &mut amx_runtime::TypedTiles<Bf8Hf8Kernel>,
            &mut amx_runtime::TypedTiles<Hf8Bf8Kernel>,
        ),
    ) {
        macro_rules! four {
            ($t:ident, $k:ident, $op:ident) => {
                $t.$op($k::c00, $k::a0, $k::b0);
                $t.$op($k::c01, $k::a0, $k::b1);
                $t.$op($k::c10, $k::a1, $k::b0);
                $t.$op($k::c11, $k::a1, $k::b1);
            };
        }
        four!(i8, Int8Kernel, tdpbssd);
        four!(u8, U8S8Kernel, tdpbusd);
        four!(su, S8U8Kernel, tdpbsud);
        four!(uu, U8U8Kernel, tdpbuud);
        four!(bf, Bf16Kernel, tdpbf16ps);
        // The check is the bound; whether the unit runs it is decided at run time.
        let _ = (
            fp.tdpfp16ps(Fp16Kernel::c00, Fp16Kernel::a0, Fp16Kernel::b0),
            fp.tdpfp16ps(Fp16Kernel::c01, Fp16Kernel::a0, Fp16Kernel::b1),
            fp.tdpfp16ps(Fp16Kernel::c10, Fp16Kernel::a1, Fp16Kernel::b0),
            fp.tdpfp16ps(Fp16Kernel::c11, Fp16Kernel::a1, Fp16Kernel::b1),
        );
        macro_rules! four_checked {
            ($t:expr, $k:ident, $op:ident) => {
                let _ = (
                    $t.$op($k::c00, $k::a0, $k::b0),
                    $t.$op($k::c01, $k::a0, $k::b1),
                    $t.$op($k::c10, $k::a1, $k::b0),
                    $t.$op($k::c11, $k::a1, $k::b1),
                );
            };
        }
        four_checked!(fp8.0, Bf8Bf8Kernel, tdpbf8ps);
        four_checked!(fp8.1, Hf8Hf8Kernel, tdphf8ps);
        four_checked!(fp8.2, Bf8Hf8Kernel, tdpbhf8ps);
        four_checked!(fp8.3, Hf8Bf8Kernel, tdphbf8ps);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_builds_and_fits_the_kernel() {
        for rows in 1..=32 {
            for cols in 1..=32 {
                let shape = MicroShape::new(rows, cols).unwrap();
                let cfg = config(shape).unwrap();
                assert_eq!(cfg.start_row(), 0);
                let used = (0..8).filter(|&t| cfg.tile(t).is_some()).count();
                let expect = shape.tiles().iter().filter(|s| !s.is_unused()).count();
                assert_eq!(used, expect, "{rows}x{cols}");
                assert!(used >= 3);
            }
        }
    }

    #[test]
    fn full_config_is_the_typed_2x2_kernel() {
        let cfg = config(MicroShape::FULL).unwrap();
        assert_eq!(cfg, &typed::Int8Kernel::CONFIG);
        assert_eq!(cfg, &typed::U8S8Kernel::CONFIG);
        assert_eq!(cfg, &typed::Bf16Kernel::CONFIG);
        assert_eq!(cfg, &typed::S8U8Kernel::CONFIG);
        assert_eq!(cfg, &typed::U8U8Kernel::CONFIG);
        assert_eq!(cfg, &typed::Fp16Kernel::CONFIG);
        assert_eq!(cfg, &typed::Bf8Bf8Kernel::CONFIG);
        assert_eq!(cfg, &typed::Hf8Hf8Kernel::CONFIG);
        assert_eq!(cfg, &typed::Bf8Hf8Kernel::CONFIG);
        assert_eq!(cfg, &typed::Hf8Bf8Kernel::CONFIG);
        for t in 0..8 {
            let s = cfg.tile(t).unwrap();
            assert_eq!((s.rows, s.colsb), (16, 64), "t{t}");
        }
        assert_eq!(MicroShape::FULL.dots().count(), 4);
    }

    #[test]
    fn edge_shapes() {
        let s = MicroShape::new(17, 5).unwrap();
        assert_eq!((s.r0(), s.r1(), s.c0(), s.c1()), (16, 1, 5, 0));
        let cfg = config(s).unwrap();
        assert_eq!(cfg.tile(C10 as u8).unwrap(), TileShape::new(1, 20));
        assert_eq!(cfg.tile(B0 as u8).unwrap(), TileShape::new(16, 20));
        assert!(cfg.tile(C01 as u8).is_none());
        assert!(MicroShape::new(0, 4).is_none());
        assert!(MicroShape::new(4, 33).is_none());
    }
}
