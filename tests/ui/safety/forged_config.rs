// A `TileConfig` is loadable by construction: safe code cannot wrap an image that skipped the
// rules (unsafe code loads any `TileConfig` without a check, so a forged one would be #GP).
use amx_runtime::TileConfig;

fn main() {
    let forged = TileConfig::__from_validated_bytes([255; 64]);
    assert_eq!(forged.as_bytes()[0], 255);
}
