// TDPBHF8PS takes bf8 A and hf8 B: a bf8 B is refused, as is the reverse order of formats
use amx_runtime::tilecfg;

tilecfg! {
    struct Kernel;
    palette 1;
    t0 as c: 16x16 f32;
    t4 as a: 16x64 bf8;
    t6 as b: 16x64 bf8;
    t7 as h: 16x64 hf8;
}

fn main() {
    let mut tiles = Kernel::configure().unwrap();
    let _ = tiles.tdpbhf8ps(Kernel::c, Kernel::a, Kernel::b);
    let _ = tiles.tdpbhf8ps(Kernel::c, Kernel::h, Kernel::a);
}
