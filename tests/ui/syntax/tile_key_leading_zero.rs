// `t07` is not a tile key (keys are written as rustc would print the number), but the message
// suggests the one meant.
use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    palette 1;
    t07: 16x64;
    T00: 16x64;
};

fn main() {}
