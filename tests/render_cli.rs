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

#[test]
fn logs_written_to_a_pipe_carry_no_colour_codes() {
    // Without --secret, render warns on stderr, which is a pipe here, not a terminal.
    let out = render(&["-f", CLUSTER]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("WARN"), "a warning is logged: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "no escape codes on a pipe: {stderr:?}");
}

#[test]
fn render_refuses_what_the_apiserver_refuses_with_its_message() {
    // Each invalid StorageOSCluster example names the message the apiserver gives
    // (tests/k8s/crds.rs checks that against a real apiserver); render gives the same.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/invalid");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        if !text.contains("kind: StorageOSCluster") {
            continue;
        }
        let expect = text
            .lines()
            .next()
            .unwrap()
            .strip_prefix("# expect: ")
            .unwrap()
            .to_string();
        let out = render(&["-f", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{}: rendered", path.display());
        assert!(
            stderr.contains(&expect),
            "{}: expected {expect:?} in {stderr}",
            path.display()
        );
        checked += 1;
    }
    assert!(checked >= 5, "the invalid cluster examples");
}

#[test]
fn unknown_fields_a_missing_etcd_and_several_clusters_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let base = "apiVersion: storageos.com/v1\nkind: StorageOSCluster\nmetadata: {name: NAME}\nspec:\n  secretRefName: s\n  secretRefNamespace: default\n";
    let typo = write(
        "typo.yaml",
        &format!(
            "{}  kvBackend: {{adress: http://etcd:2379}}\n",
            base.replace("NAME", "a")
        ),
    );
    let out = render(&["-f", &typo]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("spec.kvBackend.adress: unknown field"), "{stderr}");
    assert!(
        stderr.contains("spec.kvBackend.address: Required value: StorageOS v2 keeps its state in etcd"),
        "{stderr}"
    );

    let wrong_type = write(
        "type.yaml",
        &format!(
            "{}  kvBackend: {{address: x}}\n  debug: \"yes\"\n",
            base.replace("NAME", "a")
        ),
    );
    let stderr = String::from_utf8_lossy(&render(&["-f", &wrong_type]).stderr).to_string();
    assert!(stderr.contains("spec.debug: Invalid value: \"string\""), "{stderr}");

    let two = write(
        "two.yaml",
        &format!(
            "{}  kvBackend: {{address: x}}\n---\n{}  kvBackend: {{address: x}}\n",
            base.replace("NAME", "first"),
            base.replace("NAME", "second")
        ),
    );
    let out = render(&["-f", &two]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("2 StorageOSClusters (first, second)"), "{stderr}");
}

/// Every StorageOSCluster example renders (checked against the CRD's schema and CEL rules, as the
/// apiserver checks it), and each shows what it is an example of.
#[test]
fn every_cluster_example_renders_and_shows_its_setup() {
    let mut examples: Vec<_> = std::fs::read_dir("deploy/examples")
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .filter(|p| std::fs::read_to_string(p).unwrap().contains("kind: StorageOSCluster"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 5, "{examples:?}");
    let kinds = |docs: &[serde_json::Value], kind: &str| docs.iter().filter(|d| d["kind"] == kind).count();
    let find = |docs: &[serde_json::Value], kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    for example in &examples {
        let out = render(&["-f", example, "--secret", SECRET]);
        assert!(
            out.status.success(),
            "{example}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let docs = documents(&out.stdout);
        let node_pods = &find(&docs, "DaemonSet", "storageos-daemonset")["spec"]["template"]["spec"];
        let config = &find(&docs, "ConfigMap", "storageos-node-config")["data"];
        match example.trim_start_matches("deploy/examples/") {
            "storageoscluster-etcd-tls.yaml" => {
                assert_eq!(config["ETCD_ENDPOINTS"], "https://etcd.storageos-etcd.svc:2379");
                assert!(
                    node_pods.to_string().contains("storageos-tls-etcd"),
                    "{example}: no TLS mount"
                );
            }
            "storageoscluster-openshift.yaml" => {
                find(&docs, "ClusterRoleBinding", "storageos:openshift-scc");
            }
            "storageoscluster-csi-statefulset.yaml" => {
                find(&docs, "StatefulSet", "storageos-statefulset");
                assert_eq!(
                    kinds(&docs, "Deployment"),
                    2,
                    "{example}: api-manager and scheduler only"
                );
            }
            "storageoscluster-storage-nodes.yaml" => {
                let affinity = node_pods["affinity"].to_string();
                assert!(affinity.contains("storageos.com/storage-node"), "{example}: {affinity}");
                let tolerations = node_pods["tolerations"].to_string();
                assert!(
                    tolerations.contains("storageos.com/storage-node"),
                    "{example}: {tolerations}"
                );
            }
            "storageoscluster.yaml" => {}
            other => panic!("{other}: a new example; say here what it shows"),
        }
    }
}
