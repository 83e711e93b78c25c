// Doc comments may precede a statement (they document a tile's handle); other attributes may not.
use amx_runtime::tilecfg;

tilecfg! {
    pub struct Kernel;
    palette 1;
    /// The accumulator.
    t0 as c: 16x16 i32;
    #[inline]
    t4 as a: 16x64 i8;
}

fn main() {}
