use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    palette 1,
    t0: 16x64,
};

fn main() {}
