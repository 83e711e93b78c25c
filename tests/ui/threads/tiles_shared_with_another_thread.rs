// Nor can another thread borrow a guard: `Tiles` is not `Sync`.
use amx_runtime::{configure, tilecfg, TileConfig};

static CFG: TileConfig = tilecfg! { palette 1; t0: 16x64 };

fn main() {
    let tiles = configure(&CFG).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| tiles.config());
    });
}
