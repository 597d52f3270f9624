//! Integration tier: the generated CRDs are accepted by the real kube-apiserver, the known CRs
//! apply unchanged, and invalid ones are rejected at admission with their message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use kube::api::{Api, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;
use std::path::Path;
use support::TestNamespace;

fn api_for(ns: &TestNamespace, doc: &Value) -> Api<DynamicObject> {
    let kind = doc["kind"].as_str().expect("kind");
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("storageos.com", "v1", kind));
    Api::namespaced_with(ns.client.clone(), &ns.name, &ar)
}

fn load(path: &Path, ns: &str) -> (String, Value) {
    let text = std::fs::read_to_string(path).expect("read fixture");
    let mut doc: Value = serde_yaml::from_str(&text).expect("fixture is YAML");
    doc["metadata"]["namespace"] = Value::String(ns.to_string());
    // Two seed examples share a name; one namespace holds them all.
    let stem = path.file_stem().expect("file name").to_string_lossy().into_owned();
    doc["metadata"]["name"] = Value::String(stem);
    (text, doc)
}

fn fixtures(kind: &str) -> Vec<std::path::PathBuf> {
    let dir = support::repo_root().join("tests/fixtures").join(kind);
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn crds_install_and_known_resources_apply_unchanged() {
    let ns = TestNamespace::new("crds").await;
    support::install_crds(&ns.client).await;
    for path in fixtures("valid") {
        let (_, doc) = load(&path, &ns.name);
        let obj: DynamicObject = serde_json::from_value(doc.clone()).expect("dynamic object");
        let created = api_for(&ns, &doc)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("{} was rejected: {e}", path.display()));
        // Whatever the user wrote comes back as written (schema defaults may add fields).
        let stored = serde_json::to_value(&created).expect("json");
        assert_subset(&doc["spec"], &stored["spec"], &format!("{}: spec", path.display()));
    }
}

#[tokio::test]
async fn schema_defaults_are_applied_by_the_apiserver() {
    let ns = TestNamespace::new("defaults").await;
    support::install_crds(&ns.client).await;
    let (_, doc) = load(
        &support::repo_root().join("tests/fixtures/valid/storageoscluster-csi.yaml"),
        &ns.name,
    );
    let obj: DynamicObject = serde_json::from_value(doc.clone()).expect("dynamic object");
    let created = api_for(&ns, &doc)
        .create(&PostParams::default(), &obj)
        .await
        .expect("create");
    let spec = &serde_json::to_value(&created).expect("json")["spec"];
    assert_eq!(spec["namespace"], "kube-system");
    assert_eq!(spec["storageClassName"], "fast");
    assert_eq!(spec["service"]["name"], "storageos");
    assert_eq!(spec["service"]["type"], "ClusterIP");
    assert_eq!(spec["service"]["externalPort"], 5705);
    assert_eq!(spec["csi"]["deploymentStrategy"], "deployment");
    assert_eq!(spec["csi"]["enable"], true);
}

#[tokio::test]
async fn invalid_resources_are_rejected_with_their_message() {
    let ns = TestNamespace::new("invalid").await;
    support::install_crds(&ns.client).await;
    let files = fixtures("invalid");
    assert!(files.len() >= 7, "expected the invalid examples");
    for path in files {
        let (text, doc) = load(&path, &ns.name);
        let expected = text
            .lines()
            .find_map(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{} has no '# expect:' line", path.display()))
            .trim();
        let obj: DynamicObject = serde_json::from_value(doc.clone()).expect("dynamic object");
        match api_for(&ns, &doc).create(&PostParams::default(), &obj).await {
            Ok(_) => panic!("{} was accepted; expected rejection with {expected:?}", path.display()),
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{}: {status:?}", path.display());
                assert!(
                    status.message.contains(expected),
                    "{}: message {:?} does not contain {expected:?}",
                    path.display(),
                    status.message
                );
            }
            Err(e) => panic!("{}: unexpected error {e}", path.display()),
        }
    }
}

/// Every field of `want` is in `got` with the same value.
fn assert_subset(want: &Value, got: &Value, at: &str) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, v) in w {
                let sub = g
                    .get(k)
                    .unwrap_or_else(|| panic!("{at}.{k} was dropped by the apiserver"));
                assert_subset(v, sub, &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(want, got, "{at} changed"),
    }
}
