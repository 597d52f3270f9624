//! The simulator is not in what users build: the `simulator` feature (a fake StorageOS API that
//! accepts any write) is off by default, so `cargo build --release` has no `simulate`; the tests
//! get it through this package's dev-dependency on itself, and the scripts and the bench command that run
//! `simulate` from a binary they build ask for it. (hack/image.sh also runs each release binary it builds
//! and fails if `simulate` answers.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::Command;

use serde_json::Value;

fn package() -> Value {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--no-deps", "--format-version", "1", "--offline"])
        .current_dir(support::repo_root())
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "storageos-operator")
        .cloned()
        .expect("the storageos-operator package")
}

#[test]
fn the_simulator_is_off_by_default_and_on_only_for_the_tests() {
    let p = package();
    assert_eq!(
        p["features"]["default"],
        serde_json::json!([]),
        "a default build has no simulator"
    );
    assert_eq!(p["features"]["simulator"], serde_json::json!(["dep:storageos-sim"]));
    let itself = p["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "storageos-operator")
        .expect("a dev-dependency on this package");
    assert_eq!(itself["kind"], "dev", "only the tests may turn it on: {itself}");
    assert_eq!(itself["features"], serde_json::json!(["simulator"]));
    let sim = p["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "storageos-sim")
        .unwrap();
    assert_eq!(sim["optional"], true, "{sim}");
}

#[test]
fn the_tests_binary_has_simulate_and_every_script_that_runs_it_asks_for_the_feature() {
    let out = Command::new(env!("CARGO_BIN_EXE_storageos-operator"))
        .args(["simulate", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success(), "the binary built for the tests lacks simulate");

    let root = support::repo_root();
    for script in ["hack/demo.sh", "hack/demo-real.sh"] {
        let text = std::fs::read_to_string(root.join(script)).unwrap();
        let builds: Vec<&str> = text
            .lines()
            .filter(|l| l.trim_start().starts_with("cargo build") && l.contains("storageos-operator"))
            .collect();
        assert!(!builds.is_empty(), "{script} builds no operator binary");
        for b in builds {
            assert!(b.contains("--features simulator"), "{script}: {b}");
        }
    }

    // The bench command: every documented invocation asks for the feature, and the operator
    // binary it builds for itself does too.
    let doc = std::fs::read_to_string(root.join("docs/benchmarks.md")).unwrap();
    let runs: Vec<&str> = doc
        .lines()
        .filter(|l| l.trim_start().starts_with("cargo run") && l.contains("--example bench"))
        .collect();
    assert!(
        !runs.is_empty(),
        "docs/benchmarks.md shows no `cargo run ... --example bench`"
    );
    for r in runs {
        assert!(r.contains("--features simulator"), "docs/benchmarks.md: {r}");
    }
    let bench: String = std::fs::read_to_string(root.join("examples/bench/main.rs"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert!(
        bench.contains(r#"["build","--quiet","--features","simulator","--bin","storageos-operator""#),
        "examples/bench/main.rs must build the operator with --features simulator"
    );
}
