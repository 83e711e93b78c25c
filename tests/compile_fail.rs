//! `tilecfg!` rejects every invalid configuration at compile time, with one error per mistake on
//! the token that caused it. One file per rule under `tests/ui/<category>/`, the expected
//! compiler output beside it (`TRYBUILD=overwrite` regenerates them; read every one before
//! committing).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*/*.rs");
}
