// TCMMIMFP16PS and TCMMRLFP16PS take complex f16 tiles into f32: bf16 or fp8 tiles are refused
use amx_runtime::tilecfg;

tilecfg! {
    struct Kernel;
    palette 1;
    t0 as c: 16x16 f32;
    t2 as a: 16x32 bf16;
    t3 as b: 16x32 bf16;
    t4 as x: 16x64 hf8;
    t5 as y: 16x64 hf8;
}

fn main() {
    let mut tiles = Kernel::configure().unwrap();
    let _ = tiles.tcmmimfp16ps(Kernel::c, Kernel::a, Kernel::b);
    let _ = tiles.tcmmrlfp16ps(Kernel::c, Kernel::x, Kernel::y);
}
