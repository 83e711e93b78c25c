use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    palette 1u8;
    t0: 16x64;
};

fn main() {}
