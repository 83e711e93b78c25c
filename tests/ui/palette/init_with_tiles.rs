use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    palette 0;
    t0: 16x64;
    t1: 16x16 i32;
};

fn main() {}
