//! Distribution tier, no cluster: the release workflow (.github/workflows/release.yml) passes
//! actionlint (built by `hack/tools.sh actionlint`), pins every action to a commit, builds what
//! docs/release.md says it builds, and the krew manifest it fills in is a complete krew Plugin.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;
use support::dist::{run, tools};

const WORKFLOW: &str = ".github/workflows/release.yml";
const KREW: &str = "hack/krew/storageos.yaml";
const PLATFORMS: [&str; 4] = ["linux-amd64", "linux-arm64", "darwin-amd64", "darwin-arm64"];

fn read(path: &str) -> String {
    std::fs::read_to_string(support::repo_root().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

fn workflow() -> Value {
    serde_yaml::from_str(&read(WORKFLOW)).unwrap()
}

#[test]
fn actionlint_finds_nothing_in_the_workflows() {
    let actionlint = tools("actionlint");
    let out = run(Command::new(actionlint.trim())
        .current_dir(support::repo_root())
        .arg("-no-color"));
    assert!(out.trim().is_empty(), "actionlint:\n{out}");
}

#[test]
fn every_action_is_pinned_to_a_commit() {
    let text = read(WORKFLOW);
    let uses: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().trim_start_matches("- ").strip_prefix("uses: "))
        .collect();
    assert!(!uses.is_empty());
    for u in uses {
        let (action, rest) = u.split_once('@').unwrap_or_else(|| panic!("{u}: no @"));
        let sha = rest.split_whitespace().next().unwrap();
        assert!(
            sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit()),
            "{action} is pinned to {sha:?}, not a commit"
        );
        assert!(rest.contains("# v"), "{u}: say which release the commit is");
    }
}

#[test]
fn a_tag_builds_the_multi_arch_image_the_four_plugin_archives_and_the_release() {
    let w = workflow();
    assert_eq!(w["on"]["push"]["tags"][0], "v*.*.*");
    assert_eq!(w["permissions"]["contents"], "read", "least privilege by default");
    let jobs = &w["jobs"];

    let image = serde_json::to_string(&jobs["image"]["steps"]).unwrap();
    assert!(image.contains("hack/image.sh --arch amd64,arm64 --push"), "{image}");
    assert!(
        image.contains("manifests --image"),
        "operator.yaml pinned to the pushed digest"
    );
    assert_eq!(jobs["image"]["permissions"]["packages"], "write");

    let matrix: BTreeSet<&str> = jobs["plugin"]["strategy"]["matrix"]["include"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["platform"].as_str().unwrap())
        .collect();
    assert_eq!(matrix, PLATFORMS.into_iter().collect());
    let plugin = serde_json::to_string(&jobs["plugin"]["steps"]).unwrap();
    assert!(
        plugin.contains("--no-default-features --bin kubectl-storageos"),
        "{plugin}"
    );

    assert_eq!(jobs["release"]["needs"], serde_json::json!(["image", "plugin"]));
    assert_eq!(jobs["release"]["permissions"]["contents"], "write");
    let release = serde_json::to_string(&jobs["release"]["steps"]).unwrap();
    for asset in [
        "dist/operator.yaml",
        "dist/storageos.yaml",
        "dist/kubectl-storageos_*.tar.gz",
    ] {
        assert!(release.contains(asset), "{asset} not attached");
    }
}

/// The substitution the workflow's "krew manifest" step makes.
fn fill_krew(version: &str) -> String {
    let mut text = read(KREW).replace("{{VERSION}}", version);
    for (i, p) in PLATFORMS.iter().enumerate() {
        let sum = format!("{i:064x}");
        text = text.replace(&format!("{{{{SHA256_{}}}}}", p.replace('-', "_")), &sum);
    }
    text
}

#[test]
fn the_filled_in_krew_manifest_is_a_plugin_for_each_platform_of_the_release() {
    let text = fill_krew("v1.2.3");
    assert!(!text.contains("{{"), "placeholders left:\n{text}");
    let krew: Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(krew["apiVersion"], "krew.googlecontainertools.github.com/v1alpha2");
    assert_eq!(krew["kind"], "Plugin");
    assert_eq!(krew["metadata"]["name"], "storageos", "kubectl storageos");
    assert_eq!(krew["spec"]["version"], "v1.2.3");
    assert!(!krew["spec"]["shortDescription"].as_str().unwrap().is_empty());
    let platforms = krew["spec"]["platforms"].as_array().unwrap();
    let mut seen = BTreeSet::new();
    for p in platforms {
        let labels = &p["selector"]["matchLabels"];
        let platform = format!(
            "{}-{}",
            labels["os"].as_str().unwrap(),
            labels["arch"].as_str().unwrap()
        );
        let uri = p["uri"].as_str().unwrap();
        assert!(
            uri.ends_with(&format!("/v1.2.3/kubectl-storageos_v1.2.3_{platform}.tar.gz")),
            "{uri}: the archive the workflow names for {platform}"
        );
        assert_eq!(p["sha256"].as_str().unwrap().len(), 64);
        assert_eq!(p["bin"], "kubectl-storageos");
        seen.insert(platform);
    }
    assert_eq!(seen, PLATFORMS.iter().map(|p| p.to_string()).collect::<BTreeSet<_>>());
}
