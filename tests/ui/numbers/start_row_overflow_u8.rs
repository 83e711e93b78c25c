use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    palette 1;
    start_row 256;
    t0: 16x64;
};

fn main() {}
