// A bf8 tile loads from a slice of `Bf8`, an hf8 tile from `Hf8`: raw bytes or the other
// format are refused
use amx_runtime::{tilecfg, Bf8};

tilecfg! {
    struct Kernel;
    palette 1;
    t4 as a: 16x64 bf8;
    t5 as h: 16x64 hf8;
}

fn main() {
    let mut tiles = Kernel::configure().unwrap();
    tiles.load(Kernel::a, &[0u8; 1024], 64).unwrap();
    tiles.load(Kernel::h, &[Bf8::from_bits(0); 1024], 64).unwrap();
}
