// Operands of two layouts in one dot product, with the same tile names in both.
use amx_runtime::tilecfg;

tilecfg! {
    struct First;
    palette 1;
    t0 as c: 16x16 i32;
    t4 as a: 16x64 i8;
    t6 as b: 16x64 i8;
}

tilecfg! {
    struct Second;
    palette 1;
    t0 as c: 16x16 i32;
    t4 as a: 16x64 i8;
    t6 as b: 16x64 i8;
}

fn main() {
    let mut tiles = Second::configure().unwrap();
    tiles.tdpbssd(Second::c, First::a, Second::b);
}
