// In the item form a name given twice is one error, not also rustc's "defined multiple times".
use amx_runtime::tilecfg;

tilecfg! {
    pub struct Kernel;
    palette 1;
    t0 as acc: 16x16 i32;
    t1 as acc: 16x16 i32;
}

fn main() {}
