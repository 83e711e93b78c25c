// An error elsewhere in a layout does not turn correct uses of its handles into operand errors:
// only t7's violation is reported.
use amx_runtime::tilecfg;

tilecfg! {
    pub struct Kernel;
    palette 1;
    t0 as c: 16x16 i32;
    t4 as a: 16x64 i8;
    t6 as b: 16x64 i8;
    t7: 16x66;
}

fn main() {
    let mut tiles = Kernel::configure().unwrap();
    tiles.zero(Kernel::c);
    tiles.tdpbssd(Kernel::c, Kernel::a, Kernel::b);
}
