// C.rows != A.rows (M)
use amx_runtime::tilecfg;

tilecfg! {
    struct Kernel;
    palette 1;
    t0 as c: 16x16 i32;
    t4 as a: 8x64 i8;
    t6 as b: 16x64 i8;
}

fn main() {
    let mut tiles = Kernel::configure().unwrap();
    tiles.tdpbssd(Kernel::c, Kernel::a, Kernel::b);
}
