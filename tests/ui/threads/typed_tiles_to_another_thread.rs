// Typed tiles belong to the thread that configured them: moving them into another thread does
// not compile.
use amx_runtime::tilecfg;

tilecfg! {
    pub struct Block;
    palette 1;
    t0 as c: 16x16 i32;
    t1 as a: 16x64 i8;
    t2 as b: 16x64 i8;
}

fn main() {
    let mut tiles = Block::configure().unwrap();
    std::thread::spawn(move || tiles.zero(Block::c)).join().unwrap();
}
