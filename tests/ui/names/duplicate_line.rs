// A statement written twice is one mistake: the tile given twice, not also its name.
use amx_runtime::tilecfg;

tilecfg! {
    pub struct Kernel;
    palette 1;
    t0 as a: 16x64;
    t0 as a: 16x64;
}

fn main() {}
