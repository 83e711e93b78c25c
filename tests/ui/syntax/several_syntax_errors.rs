use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    palette 1;
    t0 16x64;
    t1: 16x16 i64;
    t2: 0x40;
    t3: 16x64;
};

fn main() {}
