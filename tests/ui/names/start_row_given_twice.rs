use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    palette 1;
    start_row 1;
    t0: 16x64;
    start_row 2;
};

fn main() {}
