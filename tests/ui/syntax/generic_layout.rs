// A layout type has no generic parameters; the error says so (rather than rustc rejecting the
// expansion in item position).
use amx_runtime::tilecfg;

tilecfg! {
    struct Kernel<T>;
    palette 1;
    t0 as c: 16x16 i32;
}

fn main() {}
