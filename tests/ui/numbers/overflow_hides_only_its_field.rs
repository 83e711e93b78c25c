use amx_runtime::{tilecfg, TileConfig};

// A number too wide for its field is reported once; the rules still check the other fields.
static CFG: TileConfig = tilecfg! {
    palette 1;
    t0: 300 x 0;
    t1: 300 x 68;
};

fn main() {}
