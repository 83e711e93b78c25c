// A typed load from a slice of another element type.
use amx_runtime::tilecfg;

tilecfg! {
    struct Kernel;
    palette 1;
    t0 as c: 16x16 i32;
    t4 as a: 16x32 bf16;
}

fn main() {
    let mut tiles = Kernel::configure().unwrap();
    let bits = [0u16; 16 * 32];
    tiles.load(Kernel::a, &bits, 32).unwrap();
    let floats = [0f32; 16 * 16];
    tiles.load(Kernel::c, &floats, 16).unwrap();
}
