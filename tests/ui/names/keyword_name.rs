// `gen` is a keyword since Rust 2024: a handle of that name would not parse in a 2024 crate.
use amx_runtime::tilecfg;

tilecfg! {
    pub struct Kernel;
    palette 1;
    t0 as gen: 16x16 i32;
    t1 as r#gen: 16x16 i32;
}

fn main() {}
