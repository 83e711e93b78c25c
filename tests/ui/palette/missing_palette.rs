use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    t0: 16x64;
};

fn main() {}
