// A handle of one layout used with the tiles of another.
use amx_runtime::tilecfg;

tilecfg! {
    struct First;
    palette 1;
    t0 as c: 16x16 i32;
}

tilecfg! {
    struct Second;
    palette 1;
    t0 as c: 16x16 i32;
}

fn main() {
    let mut tiles = Second::configure().unwrap();
    tiles.zero(First::c);
}
