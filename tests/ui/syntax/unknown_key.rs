use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    palette 1;
    start_rows 1;
    t0: 16x64;
};

fn main() {}
