// A handle's rows and bytes per row bound the memory a typed load or store touches, so only the
// macro's handles implement `Handle`: one written by hand, claiming a smaller tile, is refused.
use amx_runtime::tilecfg;
use amx_runtime::typed::Handle;

tilecfg! {
    pub struct Kernel;
    palette 1;
    t0 as c: 16x64;
}

#[derive(Clone, Copy)]
struct Forged;

impl Handle for Forged {
    type Layout = Kernel;
    type Elem = u8;
    const INDEX: u8 = 0;
    const ROWS: u8 = 1;
    const COLSB: u16 = 4;
}

fn main() {}
