//! Distribution tier, no cluster: the Helm chart and the kustomize base that `manifests` writes
//! beside `deploy/operator.yaml` install exactly its objects, and each value (each kustomize
//! field) changes only what it names. Uses helm built by `hack/tools.sh go` and the plane's
//! kubectl (its built-in kustomize), both cached by the project's scripts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::dist::run;

fn root() -> PathBuf {
    support::repo_root()
}

fn chart() -> String {
    root().join("deploy/helm/storageos-operator").display().to_string()
}

fn helm() -> Command {
    support::dist::go_tool("helm")
}

/// The plane's kubectl (hack/k8s.sh builds it; built here if this machine has none yet).
fn kubectl() -> Command {
    let kubectl = support::kubectl();
    if !kubectl.exists() {
        run(Command::new("bash").arg(root().join("hack/k8s.sh")).arg("build"));
    }
    Command::new(kubectl)
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML document"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

type Objects = BTreeMap<String, Value>;

fn by_id(docs: Vec<Value>) -> Objects {
    let mut out = BTreeMap::new();
    for d in docs {
        let id = format!(
            "{}/{}",
            d["kind"].as_str().unwrap(),
            d["metadata"]["name"].as_str().unwrap()
        );
        assert!(out.insert(id.clone(), d).is_none(), "{id} twice");
    }
    out
}

fn operator_yaml() -> Objects {
    by_id(documents(
        &std::fs::read_to_string(root().join("deploy/operator.yaml")).unwrap(),
    ))
}

fn template(namespace: &str, set: &[&str]) -> Objects {
    let mut cmd = helm();
    cmd.args([
        "template",
        "storageos-operator",
        &chart(),
        "--include-crds",
        "--namespace",
        namespace,
    ]);
    for s in set {
        cmd.args(["--set", s]);
    }
    by_id(documents(&run(&mut cmd)))
}

/// Every JSON pointer (prefixed with the object's id) where `a` and `b` differ; an object or
/// array element only on one side is reported once, at its own path.
fn diff(a: &Objects, b: &Objects) -> Vec<String> {
    fn walk(path: String, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<String>) {
        match (a, b) {
            (Some(Value::Object(x)), Some(Value::Object(y))) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    walk(format!("{path}/{k}"), x.get(k), y.get(k), out);
                }
            }
            (Some(Value::Array(x)), Some(Value::Array(y))) => {
                for i in 0..x.len().max(y.len()) {
                    walk(format!("{path}/{i}"), x.get(i), y.get(i), out);
                }
            }
            // One number (kustomize writes the CRDs' `65535.0` as `65535`).
            (Some(Value::Number(x)), Some(Value::Number(y))) if x.as_f64() == y.as_f64() => {}
            (x, y) if x != y => out.push(path),
            _ => {}
        }
    }
    let mut out = vec![];
    let ids: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for id in ids {
        match (a.get(id), b.get(id)) {
            (Some(x), Some(y)) => walk(id.clone(), Some(x), Some(y), &mut out),
            _ => out.push(id.clone()),
        }
    }
    out
}

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

#[test]
fn helm_lint_is_clean_at_the_defaults_and_with_every_option_on() {
    let out = run(helm().args(["lint", "--strict", &chart()]));
    assert!(out.contains("0 chart(s) failed"), "{out}");
    let out = run(helm().args([
        "lint",
        "--strict",
        &chart(),
        "--set",
        "namespace.create=true,cluster.create=true,cluster.apiSecret.password=pw,metrics.serviceMonitor.enabled=true",
    ]));
    assert!(out.contains("0 chart(s) failed"), "{out}");
}

#[test]
fn helm_template_at_the_defaults_is_deploy_operator_yaml_but_the_namespace() {
    let expected = operator_yaml();
    let rendered = template("storageos-operator", &[]);
    let mut without_ns = expected.clone();
    without_ns.remove("Namespace/storageos-operator").unwrap();
    assert_eq!(diff(&without_ns, &rendered), Vec::<String>::new());
    // The Namespace too, when asked for (for `helm template | kubectl apply` and GitOps tools).
    assert_eq!(
        diff(&expected, &template("storageos-operator", &["namespace.create=true"])),
        Vec::<String>::new()
    );
}

#[test]
fn each_chart_value_changes_only_what_it_names() {
    let base = template("storageos-operator", &[]);
    let d = "Deployment/storageos-operator";
    let pod = format!("{d}/spec/template/spec");
    let container = format!("{pod}/containers/0");
    let env_index = |name: &str| {
        base[d]["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .position(|e| e["name"] == name)
            .unwrap()
    };
    let env_len = base[d]["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .len();
    let image = format!("registry.example:5000/storageos/op@{DIGEST}");
    let cases: Vec<(Vec<String>, Vec<String>)> = vec![
        (vec!["replicaCount=3".into()], vec![format!("{d}/spec/replicas")]),
        (
            vec![
                "image.repository=registry.example:5000/storageos/op".into(),
                "image.tag=".into(),
                format!("image.digest={DIGEST}"),
            ],
            vec![
                format!("{container}/env/{}/value", env_index("OPERATOR_IMAGE")),
                format!("{container}/env/{}/value", env_index("RELATED_IMAGE_API_MANAGER")),
                format!("{container}/image"),
            ],
        ),
        (
            vec!["image.pullPolicy=Always".into()],
            vec![format!("{container}/imagePullPolicy")],
        ),
        (
            vec!["resources.limits.memory=512Mi".into()],
            vec![format!("{container}/resources/limits/memory")],
        ),
        (
            vec!["watchNamespaces={storageos-operator,tenant-a}".into()],
            vec![format!("{container}/env/{env_len}")],
        ),
        (
            vec![
                "tolerations[0].key=dedicated".into(),
                "tolerations[0].operator=Exists".into(),
            ],
            vec![format!("{pod}/tolerations")],
        ),
        (
            vec!["nodeSelector.role=infra".into()],
            vec![format!("{pod}/nodeSelector/role")],
        ),
        (
            vec!["priorityClassName=system-cluster-critical".into()],
            vec![format!("{pod}/priorityClassName")],
        ),
        (
            vec!["imagePullSecrets[0].name=reg".into()],
            vec![format!("{pod}/imagePullSecrets")],
        ),
        (
            vec!["metrics.service.enabled=false".into()],
            vec!["Service/storageos-operator-metrics".into()],
        ),
        (
            vec!["metrics.serviceMonitor.enabled=true".into()],
            vec!["ServiceMonitor/storageos-operator".into()],
        ),
        (
            vec!["cluster.create=true".into(), "cluster.apiSecret.password=pw".into()],
            vec!["Secret/storageos-api".into(), "StorageOSCluster/storageos".into()],
        ),
    ];
    for (set, expected) in cases {
        let set: Vec<&str> = set.iter().map(String::as_str).collect();
        let changed = template("storageos-operator", &set);
        let mut got = diff(&base, &changed);
        got.sort();
        let mut expected = expected;
        expected.sort();
        assert_eq!(got, expected, "--set {set:?}");
        if set[0].starts_with("image.") && set.len() == 3 {
            assert_eq!(
                changed[d]["spec"]["template"]["spec"]["containers"][0]["image"],
                image.as_str()
            );
        }
        if set[0].starts_with("watchNamespaces") {
            let e = &changed[d]["spec"]["template"]["spec"]["containers"][0]["env"][env_len];
            assert_eq!(e["name"], "WATCH_NAMESPACES");
            assert_eq!(e["value"], "storageos-operator,tenant-a");
        }
        if set[0] == "cluster.create=true" {
            let c = &changed["StorageOSCluster/storageos"];
            assert_eq!(c["metadata"]["namespace"], "storageos-operator");
            assert_eq!(c["spec"]["secretRefName"], "storageos-api");
            assert_eq!(c["spec"]["secretRefNamespace"], "storageos-operator");
            assert_eq!(c["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
            let s = &changed["Secret/storageos-api"];
            assert_eq!(s["stringData"]["password"], "pw");
            let _: storageos_operator::crd::StorageOSCluster = serde_json::from_value(c.clone()).unwrap();
        }
    }
    // The release namespace is where every namespaced object and every RBAC subject goes.
    let other = template("ops", &[]);
    for (id, o) in &other {
        if let Some(ns) = o["metadata"].get("namespace") {
            assert_eq!(ns, "ops", "{id}");
        }
        for s in o.get("subjects").and_then(Value::as_array).into_iter().flatten() {
            assert_eq!(s["namespace"], "ops", "{id}");
        }
    }
    // values.schema.json: a misspelt or mistyped value is refused, naming it.
    for (set, named) in [
        ("replicas=3", "replicas"),
        ("replicaCount=two", "replicaCount"),
        ("image.digest=latest", "digest"),
    ] {
        let out = helm().args(["template", "x", &chart(), "--set", set]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(named), "--set {set}: {err}");
    }
    // A created cluster without a password is refused with a message naming the value.
    let out = helm()
        .args(["template", "x", &chart(), "--set", "cluster.create=true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cluster.apiSecret.password is required"));
}

fn kustomize(dir: &Path) -> Objects {
    by_id(documents(&run(kubectl().arg("kustomize").arg(dir))))
}

#[test]
fn the_kustomize_base_is_deploy_operator_yaml_and_overlays_change_namespace_and_image() {
    let expected = operator_yaml();
    assert_eq!(
        diff(&expected, &kustomize(&root().join("deploy"))),
        Vec::<String>::new()
    );

    // An overlay as a user writes it (`kustomize edit set namespace`, `kustomize edit set image`).
    let dir = tempfile::tempdir().unwrap();
    let base = root().join("deploy");
    let overlay = dir.path().join("overlay");
    std::fs::create_dir(&overlay).unwrap();
    // kustomize wants a base path relative to the overlay.
    let rel = pathdiff(&base, &overlay);
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "resources: [{rel}]\nnamespace: ops\nimages:\n- name: storageos/storageos-operator\n  newName: registry.example:5000/op\n  digest: {DIGEST}\n"
        ),
    )
    .unwrap();
    let got = kustomize(&overlay);
    let image = format!("registry.example:5000/op@{DIGEST}");
    let mut changed = diff(&expected, &got);
    changed.sort();
    let d = "Deployment/storageos-operator";
    let env = expected[d]["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap();
    let at = |name: &str| env.iter().position(|e| e["name"] == name).unwrap();
    let container = format!("{d}/spec/template/spec/containers/0");
    let mut want = vec![
        "Namespace/ops".to_string(),
        "Namespace/storageos-operator".into(),
        format!("{container}/image"),
        format!("{container}/env/{}/value", at("OPERATOR_IMAGE")),
        format!("{container}/env/{}/value", at("RELATED_IMAGE_API_MANAGER")),
        "ClusterRoleBinding/storageos-operator/subjects/0/namespace".into(),
        "RoleBinding/storageos-operator-leader-election/subjects/0/namespace".into(),
        // kustomize moves the webhook's Service reference along with the namespace.
        "ValidatingWebhookConfiguration/storageos-operator/webhooks/0/clientConfig/service/namespace".into(),
    ];
    for id in expected.keys() {
        if expected[id]["metadata"].get("namespace").is_some() {
            want.push(format!("{id}/metadata/namespace"));
        }
    }
    want.sort();
    assert_eq!(changed, want);
    assert_eq!(
        got[d]["spec"]["template"]["spec"]["containers"][0]["image"],
        image.as_str()
    );
    assert_eq!(
        got["Namespace/ops"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    for id in got.keys() {
        if let Some(ns) = got[id]["metadata"].get("namespace") {
            assert_eq!(ns, "ops", "{id}");
        }
    }
}

/// `to` relative to `from` (both absolute).
fn pathdiff(to: &Path, from: &Path) -> String {
    let to: Vec<_> = to.components().collect();
    let from: Vec<_> = from.components().collect();
    let common = to.iter().zip(&from).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".into(); from.len() - common];
    parts.extend(
        to[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

/// `manifests --image` is the one place the image is given: operator.yaml, the chart's defaults
/// and the OLM bundle all name it, digest included, and the chart still renders operator.yaml.
#[test]
fn manifests_image_sets_operator_yaml_the_chart_and_the_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let image = format!("registry.example:5000/storage/storageos-operator:v9@{DIGEST}");
    run(Command::new(env!("CARGO_BIN_EXE_storageos-operator"))
        .args(["manifests", "--image", &image, "--out-dir"])
        .arg(dir.path())
        .arg("--olm-dir")
        .arg(dir.path().join("olm")));
    let operator = by_id(documents(
        &std::fs::read_to_string(dir.path().join("operator.yaml")).unwrap(),
    ));
    let container = &operator["Deployment/storageos-operator"]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], image.as_str());
    for name in ["OPERATOR_IMAGE", "RELATED_IMAGE_API_MANAGER"] {
        let e = container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap();
        assert_eq!(e["value"], image.as_str(), "{name}");
    }
    let chart = dir.path().join("helm/storageos-operator");
    let rendered = by_id(documents(&run(helm()
        .args(["template", "storageos-operator"])
        .arg(&chart)
        .args([
            "--include-crds",
            "--namespace",
            "storageos-operator",
            "--set",
            "namespace.create=true",
        ]))));
    assert_eq!(diff(&operator, &rendered), Vec::<String>::new());
    let csv = std::fs::read_to_string(
        dir.path()
            .join("olm/manifests/storageos-operator.clusterserviceversion.yaml"),
    )
    .unwrap();
    let csv: Value = serde_yaml::from_str(&csv).unwrap();
    assert_eq!(csv["metadata"]["annotations"]["containerImage"], image.as_str());
    assert_eq!(csv["spec"]["relatedImages"][0]["image"], image.as_str());
    // And kustomize's image transformer takes it from there (name without tag or digest).
    let got = kustomize(dir.path());
    assert_eq!(diff(&operator, &got), Vec::<String>::new());
}
