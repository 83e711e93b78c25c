use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    palette 1;
    t0: 16x64u8;
    t1: 16 x 16i32;
};

fn main() {}
