//! Tells the engine whether it is compiled without optimization (cargo's `OPT_LEVEL` of this
//! package is 0, as in the dev profile), where its Rust code needs many times the stack it
//! needs optimized: the work stack is larger there and hot sites are not patched, since a
//! patched site runs the engine on the program's own stack (`slot::WORK`, `patch::prepare`).
fn main() {
    println!("cargo::rustc-check-cfg=cfg(amx_trap_unoptimized)");
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("OPT_LEVEL").as_deref() == Ok("0") {
        println!("cargo::rustc-cfg=amx_trap_unoptimized");
    }
}
