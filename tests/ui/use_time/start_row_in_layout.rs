// A layout's typed loads and stores move whole tiles; start_row would make the first one skip
// rows.
use amx_runtime::tilecfg;

tilecfg! {
    pub struct Kernel;
    palette 1;
    start_row 3;
    t0 as c: 16x16 i32;
}

fn main() {}
