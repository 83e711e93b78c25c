use amx_runtime::tilecfg;

tilecfg! {
    pub struct;
    palette 1;
    t0 as c: 16x16 i32;
}

fn main() {}
