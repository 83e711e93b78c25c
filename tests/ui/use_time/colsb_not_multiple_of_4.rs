use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    palette 1;
    t2: 4x6;
};

fn main() {}
