use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    palette 0;
    start_row 1;
};

fn main() {}
