use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    palette 1;
    t1: 16x17 i32;
};

fn main() {}
