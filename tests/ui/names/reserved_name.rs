// A layout's handles live beside its `CONFIG` and `configure`: those names are taken.
use amx_runtime::tilecfg;

tilecfg! {
    pub struct Kernel;
    palette 1;
    t0 as CONFIG: 16x16 i32;
    t1 as configure: 16x64 i8;
}

fn main() {}
