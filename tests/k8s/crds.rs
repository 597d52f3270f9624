//! Integration tier: the generated CRDs are accepted by the real kube-apiserver, the known CRs
//! apply unchanged, and invalid ones are rejected at admission with their message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

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

/// `kubectl apply` of a Job mounting `/` or `/var/lib` is refused by admission, naming the allowed
/// paths; `/var/lib/storageos` and one under it are accepted (the operator's flag decides those).
#[tokio::test]
async fn a_job_with_hostpath_root_or_var_lib_is_rejected_at_admission() {
    let ns = TestNamespace::new("job-hostpath").await;
    support::install_crds(&ns.client).await;
    let apply = |host_path: &str| {
        let manifest = format!(
            "apiVersion: storageos.com/v1\nkind: Job\nmetadata:\n  name: j{}\n  namespace: {}\nspec:\n  image: busybox\n  args: [\"true\"]\n  mountPath: /host\n  hostPath: {host_path:?}\n  completionWord: done\n",
            host_path.len(),
            ns.name
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("job.yaml");
        std::fs::write(&file, manifest).unwrap();
        std::process::Command::new(support::kubectl())
            .arg("--kubeconfig")
            .arg(support::kubeconfig_path())
            .arg("apply")
            .arg("-f")
            .arg(&file)
            .output()
            .expect("run kubectl")
    };
    for refused in ["/", "/var/lib", "/var/lib/kubelet", "/var/lib/storageos/../kubelet"] {
        let out = apply(refused);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "a Job mounting {refused} was accepted");
        assert!(
            stderr.contains("spec.hostPath") && stderr.contains("hostPath must be /var/lib/storageos"),
            "{stderr}"
        );
    }
    for ok in ["/var/lib/storageos", "/var/lib/storageos/data"] {
        let out = apply(ok);
        assert!(out.status.success(), "{ok}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// `spec.namespace` cannot change once set (the running StorageOS would be pruned and another
/// started on the same nodes); other fields still can.
#[tokio::test]
async fn spec_namespace_cannot_change_once_set() {
    let ns = TestNamespace::new("immutable-ns").await;
    support::install_crds(&ns.client).await;
    let (_, doc) = load(
        &support::repo_root().join("tests/fixtures/valid/storageoscluster-csi.yaml"),
        &ns.name,
    );
    let obj: DynamicObject = serde_json::from_value(doc.clone()).expect("dynamic object");
    let api = api_for(&ns, &doc);
    let name = doc["metadata"]["name"].as_str().unwrap().to_string();
    api.create(&PostParams::default(), &obj).await.expect("create");
    let patch = |spec: Value| {
        let api = api.clone();
        let name = name.clone();
        async move {
            api.patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({"spec": spec})),
            )
            .await
        }
    };
    match patch(serde_json::json!({"namespace": "elsewhere"})).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422, "{s:?}");
            assert!(
                s.message.contains("spec.namespace cannot change once set"),
                "{}",
                s.message
            );
        }
        other => panic!("changing spec.namespace was accepted: {other:?}"),
    }
    patch(serde_json::json!({"storageClassName": "other"}))
        .await
        .expect("other fields still change");
}
