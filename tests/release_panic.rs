//! The release profile unwinds on panic, so a panic in one connection's task ends that
//! connection only (runtime::https tests the server under the test profile): checked by building
//! crates/panic-check with the release profile's settings (`release-panic-check` inherits them,
//! without link-time optimisation) and running it. A `panic = "abort"` under `[profile.release]`
//! fails this test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::Command;

#[test]
fn a_binary_of_the_release_profile_survives_a_panic_in_another_thread() {
    // Its own target directory (kept in the cache, so warm runs rebuild nothing): no wait on
    // the lock of the one the tests are built in.
    let target = support::dist::cache().join("target-panic-check");
    let out = Command::new(env!("CARGO"))
        .args([
            "build",
            "--offline",
            "--locked",
            "-p",
            "panic-check",
            "--profile",
            "release-panic-check",
        ])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(support::repo_root())
        .output()
        .expect("run cargo build");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = Command::new(target.join("release-panic-check/panic-check"))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "the release profile's binary died of a panic in another thread ({}): the release profile must unwind",
        run.status
    );
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "survived");
}
