// The AMX-FP8 products share the shape rule of every dot product: K = A.colsb / 4 = B.rows
use amx_runtime::tilecfg;

tilecfg! {
    struct Kernel;
    palette 1;
    t0 as c: 16x16 f32;
    t4 as a: 16x64 hf8;
    t6 as b: 8x64 hf8;
}

fn main() {
    let mut tiles = Kernel::configure().unwrap();
    let _ = tiles.tdphf8ps(Kernel::c, Kernel::a, Kernel::b);
}
