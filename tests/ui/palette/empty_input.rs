use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {};

fn main() {}
