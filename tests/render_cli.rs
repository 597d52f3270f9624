//! `storageos-operator render` as a user runs it: the examples render, Secrets are redacted
//! unless `--show-secrets`, and bad input gives a clear error and a non-zero exit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code may fail loudly

use std::path::Path;
use std::process::{Command, Output};

fn render(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_storageos-operator"))
        .arg("render")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("OPERATOR_IMAGE")
        .output()
        .expect("run the binary")
}

fn documents(stdout: &[u8]) -> Vec<serde_json::Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_slice(stdout)
        .map(|d| serde_json::Value::deserialize(d).unwrap())
        .collect()
}

const CLUSTER: &str = "deploy/examples/storageoscluster.yaml";
const SECRET: &str = "deploy/examples/storageos-secret.yaml";

#[test]
fn examples_render_with_secrets_redacted_by_default() {
    let out = render(&["-f", CLUSTER, "--secret", SECRET]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let docs = documents(&out.stdout);
    let init = docs
        .iter()
        .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == "init-secret")
        .expect("init-secret");
    assert_eq!(init["data"]["username"], "<redacted>");
    assert_eq!(init["data"]["password"], "<redacted>");
    let text = String::from_utf8_lossy(&out.stdout);
    // base64("storageos") must not appear anywhere.
    assert!(!text.contains("c3RvcmFnZW9z"), "a secret value leaked");
    assert!(docs.iter().any(|d| d["kind"] == "DaemonSet"));
}

#[test]
fn show_secrets_prints_the_values() {
    let out = render(&["-f", CLUSTER, "--secret", SECRET, "--show-secrets"]);
    assert!(out.status.success());
    let docs = documents(&out.stdout);
    let init = docs
        .iter()
        .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == "init-secret")
        .unwrap();
    assert_eq!(init["data"]["username"], "c3RvcmFnZW9z");
}

#[test]
fn without_a_secret_file_the_copied_secrets_are_left_out() {
    let out = render(&["-f", CLUSTER]);
    assert!(out.status.success());
    let docs = documents(&out.stdout);
    assert!(!docs.iter().any(|d| d["kind"] == "Secret"));
    assert!(docs.iter().any(|d| d["kind"] == "StorageClass"));
}

#[test]
fn missing_file_is_a_clear_error() {
    let out = render(&["-f", "does/not/exist.yaml"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot read does/not/exist.yaml"), "{err}");
}

#[test]
fn invalid_inputs_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let not_yaml = write("bad.yaml", "a: [unclosed\n");
    let err = String::from_utf8_lossy(&render(&["-f", &not_yaml]).stderr).into_owned();
    assert!(err.contains("not valid YAML"), "{err}");

    let no_cluster = write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n");
    let err = String::from_utf8_lossy(&render(&["-f", &no_cluster]).stderr).into_owned();
    assert!(err.contains("no StorageOSCluster"), "{err}");

    let bad_spec = write(
        "c.yaml",
        "apiVersion: storageos.com/v1\nkind: StorageOSCluster\nmetadata: {name: x}\nspec: {secretRefName: s}\n",
    );
    let err = String::from_utf8_lossy(&render(&["-f", &bad_spec]).stderr).into_owned();
    assert!(err.contains("secretRefNamespace"), "{err}");

    let wrong_secret = write(
        "s.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: other, namespace: default}\n",
    );
    let err = String::from_utf8_lossy(&render(&["-f", CLUSTER, "--secret", &wrong_secret]).stderr).into_owned();
    assert!(err.contains("no Secret storageos-operator/storageos-api"), "{err}");

    let err = String::from_utf8_lossy(&render(&["-f", CLUSTER, "--k8s-version", "1.20.0"]).stderr).into_owned();
    assert!(err.contains("not supported"), "{err}");
    let err = String::from_utf8_lossy(&render(&["-f", CLUSTER, "--k8s-version", "latest"]).stderr).into_owned();
    assert!(err.contains("invalid Kubernetes version"), "{err}");
}

#[test]
fn examples_exist() {
    assert!(Path::new(env!("CARGO_MANIFEST_DIR")).join(CLUSTER).exists());
}
