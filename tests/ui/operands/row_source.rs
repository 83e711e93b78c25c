// TCVTROWD2PS reads an i32 tile; TCVTROWPS2BF16H/L and TCVTROWPS2PHH/L read f32 tiles
use amx_runtime::tilecfg;

tilecfg! {
    struct Kernel;
    palette 1;
    t0 as acc: 16x16 f32;
    t1 as ints: 16x16 i32;
    t2 as bytes8: 16x64 bf8;
}

fn main() {
    let mut tiles = Kernel::configure().unwrap();
    let _ = tiles.tcvtrowd2ps(Kernel::acc, 0);
    let _ = tiles.tcvtrowps2bf16(Kernel::ints, 0, true);
    let _ = tiles.tcvtrowps2ph(Kernel::bytes8, 0, false);
}
