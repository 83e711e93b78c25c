// The silicon's handle tracks the configuration of its own thread: it stays there.
fn main() {
    let unit = amx_runtime::Hardware::new().unwrap();
    std::thread::spawn(move || drop(unit)).join().unwrap();
}
