use amx_runtime::tilecfg;

tilecfg! {
    struct Kernel;
    palette 1;
    t0 as a: 16x64;
    t1 as a: 16x64;
}

fn main() {}
