use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    palette 1;
    start_row 4;
    t0: 4x64;
    t1: 16x64;
};

fn main() {}
