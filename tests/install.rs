//! Unit tier: the install manifests (`deploy/operator.yaml`) are up to date with the Rust source,
//! and no RBAC the project ships or renders uses a wildcard or holds less than it hands out.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use serde_json::Value;
use storageos_operator::install::{self, operator_yaml};
use storageos_operator::rbac;
use storageos_operator::render::DEFAULT_OPERATOR_IMAGE;

fn repo(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML document"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// Rules of every ClusterRole and Role in a YAML stream.
fn rules_in(text: &str) -> Vec<(String, Vec<PolicyRule>)> {
    documents(text)
        .into_iter()
        .filter_map(|d| match d["kind"].as_str() {
            Some("ClusterRole") => {
                let r: ClusterRole = serde_json::from_value(d).unwrap();
                Some((r.metadata.name.unwrap_or_default(), r.rules.unwrap_or_default()))
            }
            Some("Role") => {
                let r: Role = serde_json::from_value(d).unwrap();
                Some((r.metadata.name.unwrap_or_default(), r.rules.unwrap_or_default()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn deploy_operator_yaml_is_what_the_manifests_command_writes() {
    let generated = operator_yaml(DEFAULT_OPERATOR_IMAGE).unwrap();
    let committed = repo("deploy/operator.yaml");
    assert!(
        committed == generated,
        "deploy/operator.yaml is out of date; regenerate it with `cargo run -- manifests --out-dir deploy`"
    );
}

#[test]
fn operator_yaml_lists_crds_first_then_the_install_objects() {
    let kinds: Vec<String> = documents(&repo("deploy/operator.yaml"))
        .iter()
        .map(|d| d["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        [
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Deployment",
            "Service"
        ]
    );
}

#[test]
fn no_role_in_deploy_or_in_any_render_golden_has_a_wildcard() {
    let mut streams = vec![("deploy/operator.yaml".to_string(), repo("deploy/operator.yaml"))];
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    for entry in std::fs::read_dir(&golden).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            streams.push((path.display().to_string(), std::fs::read_to_string(&path).unwrap()));
        }
    }
    let mut roles = 0;
    for (file, text) in streams {
        for (name, rules) in rules_in(&text) {
            roles += 1;
            assert!(!rbac::has_wildcard(&rules), "{file}: role {name} has a wildcard");
            for r in &rules {
                for v in ["escalate", "bind", "impersonate"] {
                    assert!(!r.verbs.iter().any(|x| x == v), "{file}: role {name} has {v}");
                }
            }
        }
    }
    assert!(
        roles > 10,
        "expected the operator's and the rendered roles, saw {roles}"
    );
}

#[test]
fn the_operator_may_create_every_role_the_all_fields_cluster_renders() {
    let held = install::build("x").unwrap().cluster_role.rules.unwrap();
    for file in ["tests/golden/all-fields.yaml", "tests/golden/openshift.yaml"] {
        for (name, rules) in rules_in(&repo(file)) {
            let m = rbac::missing(&held, &rules);
            assert!(m.is_empty(), "{file}: creating {name} would need {m:?}");
        }
    }
}
