use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    t0: 16x64;
    palette 1;
};

fn main() {}
