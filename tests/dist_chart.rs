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

/// Helm's labels of the release, which only the chart's objects carry (`deploy/operator.yaml` has
/// the others, with the same values).
const CHART_ONLY_LABELS: [&str; 3] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
];

/// The rendered objects without [`CHART_ONLY_LABELS`], after checking that every object of the
/// chart (not the CRDs of `crds/`) has them, for release `release`.
fn without_chart_labels(mut objects: Objects, release: &str) -> Objects {
    for (id, o) in objects.iter_mut() {
        // The CR's labels go onto every object StorageOS runs as: it has none of the chart's.
        if o["kind"] == "CustomResourceDefinition" || o["kind"] == "StorageOSCluster" {
            continue;
        }
        for pointer in ["/metadata/labels", "/spec/template/metadata/labels"] {
            let Some(labels) = o.pointer_mut(pointer).and_then(Value::as_object_mut) else {
                assert_ne!(pointer, "/metadata/labels", "{id} has no labels");
                continue;
            };
            assert_eq!(labels["app.kubernetes.io/instance"], release, "{id}{pointer}");
            assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm", "{id}{pointer}");
            assert!(
                labels["helm.sh/chart"]
                    .as_str()
                    .unwrap()
                    .starts_with("storageos-operator-"),
                "{id}{pointer}"
            );
            for key in CHART_ONLY_LABELS {
                labels.remove(key);
            }
        }
    }
    objects
}

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Every value of the chart set away from its default (but `serviceAccount.create`, which would
/// leave the rest unchanged), as `--set` arguments.
const EVERY_OPTION: &[&str] = &[
    "namespace.create=true",
    "cluster.create=true",
    "cluster.apiSecret.password=pw",
    "cluster.spec.kvBackend.address=http://etcd.example:2379",
    "metrics.serviceMonitor.enabled=true",
    "metrics.serviceMonitor.labels.release=prometheus",
    "podDisruptionBudget.enabled=true",
    "podAnnotations.example\\.com/a=b",
    "podLabels.team=storage",
    "serviceAccount.name=storageos-ops",
    "serviceAccount.annotations.example\\.com/role=ops",
    "logLevel=debug",
    "extraEnv[0].name=HTTPS_PROXY",
    "extraEnv[0].value=http://proxy.example:3128",
    "image.tag=v9",
    "image.pullPolicy=Always",
    "imagePullSecrets[0].name=reg",
    "watchNamespaces={storageos-operator,tenant-a}",
    "priorityClassName=system-cluster-critical",
    "tolerations[0].operator=Exists",
    "global.imageRegistry=registry.example",
    "enabled=true",
];

#[test]
fn helm_lint_is_clean_at_the_defaults_and_with_every_option_on() {
    let out = run(helm().args(["lint", "--strict", &chart()]));
    assert!(out.contains("0 chart(s) failed"), "{out}");
    let mut cmd = helm();
    cmd.args(["lint", "--strict", &chart()]);
    for s in EVERY_OPTION {
        cmd.args(["--set", s]);
    }
    let out = run(&mut cmd);
    assert!(out.contains("0 chart(s) failed"), "{out}");
    // And every option renders: the objects each value names are there.
    let all = template("storageos-operator", EVERY_OPTION);
    for id in [
        "Namespace/storageos-operator",
        "StorageOSCluster/storageos",
        "Secret/storageos-api",
        "ServiceMonitor/storageos-operator",
        "PodDisruptionBudget/storageos-operator",
        "ServiceAccount/storageos-ops",
    ] {
        assert!(all.contains_key(id), "{id} missing: {:?}", all.keys());
    }
    without_chart_labels(all, "storageos-operator");
}

/// As a subchart of an umbrella chart (`dependencies:` with `file://`, `global:` values, a
/// `condition:`), the chart renders with the parent's values for it and Helm's `global`.
#[test]
fn the_chart_renders_as_a_subchart_with_global_values() {
    let dir = tempfile::tempdir().unwrap();
    let parent = dir.path().join("umbrella");
    std::fs::create_dir(&parent).unwrap();
    std::fs::write(
        parent.join("Chart.yaml"),
        format!(
            "apiVersion: v2\nname: umbrella\nversion: 1.0.0\ndependencies:\n  - name: storageos-operator\n    version: \">=0.0.0-0\"\n    repository: file://{}\n    condition: storageos-operator.enabled\n",
            chart()
        ),
    )
    .unwrap();
    std::fs::write(
        parent.join("values.yaml"),
        "global:\n  imageRegistry: registry.example\n  storageClass: fast\nstorageos-operator:\n  enabled: true\n  replicaCount: 3\n  logLevel: debug\n  podDisruptionBudget:\n    enabled: true\n",
    )
    .unwrap();
    std::fs::create_dir(parent.join("templates")).unwrap();
    std::fs::write(
        parent.join("templates/configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-platform\n",
    )
    .unwrap();
    run(helm().arg("dependency").arg("update").arg(&parent));
    let mut cmd = helm();
    cmd.args(["template", "platform"])
        .arg(&parent)
        .args(["--namespace", "storage"]);
    let rendered = by_id(documents(&run(&mut cmd)));
    let d = &rendered["Deployment/storageos-operator"];
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["metadata"]["namespace"], "storage");
    assert_eq!(d["metadata"]["labels"]["app.kubernetes.io/instance"], "platform");
    assert!(
        d["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "LOG_LEVEL" && e["value"] == "debug")
    );
    assert_eq!(
        rendered["PodDisruptionBudget/storageos-operator"]["spec"]["minAvailable"],
        1
    );
    // helm lint --strict of the umbrella chart checks the subchart's values against its schema.
    let out = run(helm().args(["lint", "--strict"]).arg(&parent));
    assert!(out.contains("0 chart(s) failed"), "{out}");
    // The condition turns it off.
    let mut cmd = helm();
    cmd.args(["template", "platform"])
        .arg(&parent)
        .args(["--set", "storageos-operator.enabled=false"]);
    assert!(!run(&mut cmd).contains("kind: Deployment"));
    // And the subchart's schema still refuses a misspelt value of it.
    let out = helm()
        .args(["template", "platform"])
        .arg(&parent)
        .args(["--set", "storageos-operator.replicas=3"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("replicas"));
}

/// `cluster.spec` is checked against the StorageOSCluster CRD's schema: a misspelt field, here
/// and at any depth, is refused by `helm template` and `helm lint`, naming it.
#[test]
fn the_schema_refuses_a_misspelt_cluster_spec_field() {
    for (set, named) in [
        ("cluster.spec.kvBackend.adress=http://etcd:2379", "adress"),
        ("cluster.spec.kvbackend.address=http://etcd:2379", "kvbackend"),
        (
            "cluster.spec.images.nodeContainr=registry.example/node:v2",
            "nodeContainr",
        ),
    ] {
        for verb in ["template", "lint"] {
            let mut cmd = helm();
            cmd.arg(verb);
            if verb == "template" {
                cmd.arg("x");
            }
            let out = cmd.args([&chart(), "--set", set]).output().unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                !out.status.success() && text.contains(named),
                "helm {verb} --set {set}: {text}"
            );
        }
    }
    // A correct spec passes, as does a field of the right type at depth.
    let out = template(
        "x",
        &[
            "cluster.create=true",
            "cluster.apiSecret.password=pw",
            "cluster.spec.kvBackend.address=http://etcd:2379",
            "cluster.spec.debug=true",
        ],
    );
    assert_eq!(out["StorageOSCluster/storageos"]["spec"]["debug"], true);
    // A mistyped one is refused.
    let out = helm()
        .args(["template", "x", &chart(), "--set", "cluster.spec.debug=often"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("debug"));
}

#[test]
fn helm_template_at_the_defaults_is_deploy_operator_yaml_but_the_namespace() {
    // But Helm's labels of the release (CHART_ONLY_LABELS), which every object of the chart has.
    let expected = operator_yaml();
    let rendered = without_chart_labels(template("storageos-operator", &[]), "storageos-operator");
    let mut without_ns = expected.clone();
    without_ns.remove("Namespace/storageos-operator").unwrap();
    assert_eq!(diff(&without_ns, &rendered), Vec::<String>::new());
    // The Namespace too, when asked for (for `helm template | kubectl apply` and GitOps tools).
    assert_eq!(
        diff(
            &expected,
            &without_chart_labels(
                template("storageos-operator", &["namespace.create=true"]),
                "storageos-operator"
            )
        ),
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
        (
            vec!["image.tag=v9".into()],
            vec![
                format!("{container}/env/{}/value", env_index("OPERATOR_IMAGE")),
                format!("{container}/env/{}/value", env_index("RELATED_IMAGE_API_MANAGER")),
                format!("{container}/image"),
            ],
        ),
        (
            vec!["logLevel=debug".into()],
            vec![format!("{container}/env/{env_len}")],
        ),
        (
            vec![
                "extraEnv[0].name=HTTPS_PROXY".into(),
                "extraEnv[0].value=http://proxy:3128".into(),
            ],
            vec![format!("{container}/env/{env_len}")],
        ),
        (
            vec!["podAnnotations.example\\.com/a=b".into()],
            vec![format!("{d}/spec/template/metadata/annotations")],
        ),
        (
            vec!["podLabels.team=storage".into()],
            vec![format!("{d}/spec/template/metadata/labels/team")],
        ),
        (
            vec!["serviceAccount.annotations.example\\.com/role=ops".into()],
            vec!["ServiceAccount/storageos-operator/metadata/annotations".into()],
        ),
        (
            vec!["serviceAccount.create=false".into()],
            vec!["ServiceAccount/storageos-operator".into()],
        ),
        (
            vec!["serviceAccount.name=storageos-ops".into()],
            vec![
                "ServiceAccount/storageos-operator".into(),
                "ServiceAccount/storageos-ops".into(),
                format!("{pod}/serviceAccountName"),
                "ClusterRoleBinding/storageos-operator/subjects/0/name".into(),
                "RoleBinding/storageos-operator-leader-election/subjects/0/name".into(),
            ],
        ),
        (
            vec!["podDisruptionBudget.enabled=true".into()],
            vec!["PodDisruptionBudget/storageos-operator".into()],
        ),
        // One replica: no budget (minAvailable 1 would block every drain).
        (
            vec!["podDisruptionBudget.enabled=true".into(), "replicaCount=1".into()],
            vec![format!("{d}/spec/replicas")],
        ),
        (
            vec![
                "metrics.serviceMonitor.enabled=true".into(),
                "metrics.serviceMonitor.labels.release=prometheus".into(),
            ],
            vec!["ServiceMonitor/storageos-operator".into()],
        ),
        // Helm's global values and a parent's condition change nothing.
        (vec!["global.imageRegistry=registry.example".into()], vec![]),
        (vec!["enabled=false".into()], vec![]),
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
        if set[0] == "image.tag=v9" {
            assert_eq!(
                changed[d]["spec"]["template"]["spec"]["containers"][0]["image"],
                "storageos/storageos-operator:v9"
            );
        }
        if set[0] == "logLevel=debug" {
            let e = &changed[d]["spec"]["template"]["spec"]["containers"][0]["env"][env_len];
            assert_eq!((&e["name"], &e["value"]), (&"LOG_LEVEL".into(), &"debug".into()));
        }
        if set[0].starts_with("extraEnv") {
            let e = &changed[d]["spec"]["template"]["spec"]["containers"][0]["env"][env_len];
            assert_eq!(
                (&e["name"], &e["value"]),
                (&"HTTPS_PROXY".into(), &"http://proxy:3128".into())
            );
        }
        if set[0] == "podDisruptionBudget.enabled=true" && set.len() == 1 {
            let p = &changed["PodDisruptionBudget/storageos-operator"];
            assert_eq!(p["spec"]["minAvailable"], 1);
            assert_eq!(p["metadata"]["namespace"], "storageos-operator");
            assert_eq!(
                p["spec"]["selector"]["matchLabels"],
                base[d]["spec"]["selector"]["matchLabels"]
            );
        }
        if set[0] == "metrics.serviceMonitor.enabled=true" && set.len() == 2 {
            let labels = &changed["ServiceMonitor/storageos-operator"]["metadata"]["labels"];
            assert_eq!(labels["release"], "prometheus");
            assert_eq!(labels["app.kubernetes.io/name"], "storageos-operator");
            assert_eq!(labels["app.kubernetes.io/version"], env!("CARGO_PKG_VERSION"));
        }
        if set[0] == "serviceAccount.name=storageos-ops" {
            assert_eq!(
                changed[d]["spec"]["template"]["spec"]["serviceAccountName"],
                "storageos-ops"
            );
            let b = &changed["ClusterRoleBinding/storageos-operator"]["subjects"][0];
            assert_eq!(
                (&b["kind"], &b["name"]),
                (&"ServiceAccount".into(), &"storageos-ops".into())
            );
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
    // The version label is the chart's appVersion.
    assert_eq!(
        base[d]["metadata"]["labels"]["app.kubernetes.io/version"],
        env!("CARGO_PKG_VERSION")
    );
    // values.schema.json: a misspelt or mistyped value is refused, naming it.
    for (set, named) in [
        ("replicas=3", "replicas"),
        ("replicaCount=two", "replicaCount"),
        ("image.digest=latest", "digest"),
        ("podDisruptionBudget.minAvailable=0", "minAvailable"),
        // A variable the chart sets has its own value.
        ("extraEnv[0].name=WATCH_NAMESPACES", "extraEnv"),
        ("extraEnv[0].name=RELATED_IMAGE_API_MANAGER", "extraEnv"),
        // A label the chart sets would be a duplicate key.
        ("podLabels.app\\.kubernetes\\.io/name=x", "app.kubernetes.io/name"),
        ("metrics.serviceMonitor.labels.helm\\.sh/chart=x", "helm.sh/chart"),
        ("serviceAccount.nmae=x", "nmae"),
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
    let rendered = without_chart_labels(rendered, "storageos-operator");
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
