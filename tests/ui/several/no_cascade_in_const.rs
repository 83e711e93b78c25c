use amx_runtime::{tilecfg, TileConfig};

// Only the two violations are reported: the expansion is still a `TileConfig` (INIT), so the
// const and its uses type-check and nothing cascades.
const CFG: TileConfig = tilecfg! { palette 1; t0: 16x66 };

fn main() {
    let palette: u8 = CFG.palette();
    let _ = palette;
}
