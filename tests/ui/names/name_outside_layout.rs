// A tile name in the expression form, where no handle is declared that could use it.
use amx_runtime::{tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! {
    palette 1;
    t0 as c: 16x16 i32;
    t4: 16x64 i8;
};

fn main() {
    let _ = &CFG;
}
