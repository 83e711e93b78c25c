use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    palette 1;
    start_row 4;
    t0: 17x64;
    t1: 16x65;
    t2: 2x8;
    t3: 0 x 64;
};

fn main() {}
