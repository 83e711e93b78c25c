use amx_runtime::tilecfg;

tilecfg! {
    struct Kernel;
    palette 1;
    t0 as t1: 16x64;
}

fn main() {}
