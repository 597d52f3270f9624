//! Prints `survived` when a panic in a spawned thread comes back as an error at its join, which
//! only unwinding allows: built with the release profile's panic strategy (tests/release_panic.rs),
//! it shows that a panic in one connection's task cannot end the operator's process. Under
//! `panic = "abort"` the process dies instead.
#![allow(clippy::panic)]

fn main() {
    std::panic::set_hook(Box::new(|_| {}));
    let caught = std::thread::spawn(|| panic!("a handler panics")).join().is_err();
    println!("{}", if caught { "survived" } else { "the thread did not panic" });
}
