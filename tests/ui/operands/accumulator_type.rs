// TDPBF16PS needs an f32 accumulator
use amx_runtime::tilecfg;

tilecfg! {
    struct Kernel;
    palette 1;
    t0 as c: 16x16 i32;
    t4 as a: 16x32 bf16;
    t6 as b: 16x32 bf16;
}

fn main() {
    let mut tiles = Kernel::configure().unwrap();
    tiles.tdpbf16ps(Kernel::c, Kernel::a, Kernel::b);
}
