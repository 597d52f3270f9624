//! Integration tier: taking over an installation of the Go operator v2.4.2 (docs/adoption.md).
//!
//! For each fixture under `tests/fixtures/adoption/` the Go operator's objects are created as it
//! created them (`kubectl create --field-manager=cluster-operator`), with the CR as it left it
//! (its defaults written back into the spec), and the node pods run. Then this operator starts:
//! the cluster reaches 3/3 Running without an apply error, no object is recreated, no node pod
//! restarts, the Go-only leftovers go, and a restarted operator writes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod, Secret, Service};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde::Deserialize;
use serde_json::{Value, json};
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::preview::diff::Restart;
use support::operator::{ClusterOperator, OPERATOR_IMAGE, StorageOS, api_of};
use support::{TestNamespace, from_json, wait_for};

pub(crate) const SETTLE: Duration = Duration::from_secs(90);
/// Label the all-fields CR selects nodes by.
const WORKER_LABEL: &str = "node-role.kubernetes.io/worker";

/// The Go operator's own image defaults (v2.4.2), which it wrote into `spec.images`.
pub(crate) fn go_written_images(scheduler: &str) -> Value {
    json!({
        "nodeContainer": "storageos/node:v2.4.2",
        "initContainer": "storageos/init:v2.1.0",
        "apiManagerContainer": "storageos/api-manager:v1.1.2",
        "csiNodeDriverRegistrarContainer": "quay.io/k8scsi/csi-node-driver-registrar:v2.1.0",
        "csiClusterDriverRegistrarContainer": "quay.io/k8scsi/csi-cluster-driver-registrar:v1.0.1",
        "csiExternalProvisionerContainer": "storageos/csi-provisioner:v2.1.1-patched",
        "csiExternalAttacherContainer": "quay.io/k8scsi/csi-attacher:v3.1.0",
        "csiExternalResizerContainer": "quay.io/k8scsi/csi-resizer:v1.1.0",
        "csiLivenessProbeContainer": "quay.io/k8scsi/livenessprobe:v2.2.0",
        "kubeSchedulerContainer": scheduler,
    })
}

fn yaml_docs(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(support::repo_root().join(path)).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// Moves every reference to namespace `old` to `new`: namespace fields and keys
/// (`metadata.namespace`, subjects, `K8S_NAMESPACE`, StorageClass `*-secret-namespace`), env
/// values named `*NAMESPACE`, in-cluster host names and the Go scheduler's namespace flag.
fn move_namespace(v: &mut Value, old: &str, new: &str) {
    match v {
        Value::Object(map) => {
            let env_ns = map
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| n.ends_with("NAMESPACE"));
            for (k, child) in map.iter_mut() {
                let ns_key = k.to_ascii_lowercase().ends_with("namespace") || (k == "value" && env_ns);
                match child {
                    Value::String(s) if ns_key && s == old => *s = new.to_string(),
                    other => move_namespace(other, old, new),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| move_namespace(i, old, new)),
        Value::String(s) => {
            *s = s.replace(&format!(".{old}.svc"), &format!(".{new}.svc")).replace(
                &format!("--policy-configmap-namespace={old}"),
                &format!("--policy-configmap-namespace={new}"),
            );
        }
        _ => {}
    }
}

pub(crate) fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// Source Secrets of the test, and what the Go operator copied from them into its Secrets
/// (the fixtures carry no Secret data). The CSI Secrets got empty values: the source has no
/// `csi*Username`/`csi*Password` keys.
fn secret_data(name: &str) -> Value {
    let api = json!({"username": b64("storageos"), "password": b64("storageos")});
    match name {
        "init-secret" => api,
        "tls-secret" => json!({"tls.crt": b64("golden-crt"), "tls.key": b64("golden-key")}),
        "storageos-tls-etcd" => etcd_data(),
        _ => json!({"username": "", "password": ""}),
    }
}

fn etcd_data() -> Value {
    json!({
        "tls.crt": b64("etcd-crt"), "tls.key": b64("etcd-key"),
        "etcd-client-ca.crt": b64("ca"), "etcd-client.crt": b64("crt"), "etcd-client.key": b64("key")
    })
}

async fn source_secrets(ns: &TestNamespace) {
    let api = ns.api::<Secret>();
    let mut credentials = json!({"username": b64("storageos"), "password": b64("storageos")});
    credentials["tls.crt"] = json!(b64("golden-crt"));
    credentials["tls.key"] = json!(b64("golden-key"));
    for s in [
        json!({"metadata": {"name": "storageos-api"}, "data": credentials}),
        json!({"metadata": {"name": "etcd-client-tls"}, "type": "kubernetes.io/tls", "data": etcd_data()}),
    ] {
        api.create(&PostParams::default(), &from_json(s)).await.unwrap();
    }
}

/// The Go objects of `fixture`, moved into `ns`, Secrets filled; without the Namespace.
pub(crate) fn go_objects(fixture: &str, ns: &str) -> Vec<Value> {
    let docs = yaml_docs(&format!("tests/fixtures/adoption/{fixture}"));
    let old = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .and_then(|d| d["metadata"]["namespace"].as_str())
        .unwrap()
        .to_string();
    docs.into_iter()
        .filter(|d| d["kind"] != "Namespace")
        .map(|mut d| {
            move_namespace(&mut d, &old, ns);
            if d["kind"] == "Secret" {
                d["data"] = secret_data(d["metadata"]["name"].as_str().unwrap());
            }
            d
        })
        .collect()
}

/// The image of the Go scheduler Deployment among the Go objects `go`.
pub(crate) fn scheduler_image(go: &[Value]) -> String {
    go.iter()
        .find(|d| d["metadata"]["name"] == "storageos-scheduler" && d["kind"] == "Deployment")
        .and_then(|d| d.pointer("/spec/template/spec/containers/0/image")?.as_str())
        .unwrap()
        .to_string()
}

/// `kind namespace/name` of an object.
pub(crate) fn describe(d: &Value) -> String {
    format!(
        "{} {}/{}",
        d["kind"].as_str().unwrap(),
        d["metadata"]["namespace"].as_str().unwrap_or(""),
        d["metadata"]["name"].as_str().unwrap()
    )
}

/// (uid, change marker) of every object in `docs`, by [`describe`]; None when missing. The
/// marker moves on a write to the object: its generation where it has one (status updates by
/// controllers do not count), else its resourceVersion, and the time of our field manager's
/// last write.
pub(crate) async fn live(client: &kube::Client, docs: &[Value]) -> BTreeMap<String, Option<(String, String)>> {
    let mut out = BTreeMap::new();
    for d in docs {
        let name = d["metadata"]["name"].as_str().unwrap();
        let found = api_of(client, d).get_metadata_opt(name).await.unwrap();
        out.insert(
            describe(d),
            found.map(|m| {
                let m = m.metadata;
                let ours = m
                    .managed_fields
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|f| f.manager.as_deref() == Some("storageos-operator"))
                    .map(|f| format!("{:?}", f.time))
                    .collect::<Vec<_>>();
                let version = match m.generation {
                    Some(g) => format!("g{g}"),
                    None => format!("rv{}", m.resource_version.unwrap_or_default()),
                };
                (m.uid.unwrap_or_default(), format!("{version} {ours:?}"))
            }),
        );
    }
    out
}

/// Events about StorageOSClusters in `ns`.
async fn cluster_events(ns: &TestNamespace) -> usize {
    let list = ns.api::<Event>().list(&ListParams::default()).await.unwrap();
    list.items
        .iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("StorageOSCluster"))
        .count()
}

/// Deletes cluster-scoped objects a crashed earlier run may have left, so the creates succeed.
pub(crate) async fn clear_cluster_scoped(client: &kube::Client, docs: &[Value]) {
    for d in docs.iter().filter(|d| d["metadata"]["namespace"].is_null()) {
        let api = api_of(client, d);
        let name = d["metadata"]["name"].as_str().unwrap().to_string();
        let _ = api.delete(&name, &DeleteParams::default()).await;
        wait_for(
            &format!("{} to be gone", describe(d)),
            Duration::from_secs(30),
            || async { api.get_metadata_opt(&name).await.unwrap().is_none().then_some(()) },
        )
        .await;
    }
}

/// Creates `docs` as the Go operator did: plain creates under its field manager.
pub(crate) fn kubectl_create(docs: &[Value]) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    for d in docs {
        writeln!(file, "---\n{}", serde_yaml::to_string(d).unwrap()).unwrap();
    }
    let out = std::process::Command::new(support::kubectl())
        .arg("--kubeconfig")
        .arg(support::kubeconfig_path())
        .args(["create", "--field-manager=cluster-operator", "-f"])
        .arg(file.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl create of the Go objects failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The CR as the Go operator left it: `cr` with its namespaces moved to `ns` and the Go
/// defaults written back (images, namespace, service, CSI flags and strategy).
fn go_era_cr(cr: &str, ns: &str, scheduler_image: &str) -> StorageOSCluster {
    let mut cr = yaml_docs(cr).remove(0);
    cr["metadata"]["namespace"] = json!(ns);
    let spec = cr["spec"].as_object_mut().unwrap();
    spec.insert("namespace".into(), json!(ns));
    spec.insert("secretRefNamespace".into(), json!(ns));
    if spec.contains_key("tlsEtcdSecretRefNamespace") {
        spec.insert("tlsEtcdSecretRefNamespace".into(), json!(ns));
    }
    if !spec.contains_key("images") {
        spec.insert("images".into(), go_written_images(scheduler_image));
    }
    spec.entry("service")
        .or_insert(json!({"name": "storageos", "type": "ClusterIP", "externalPort": 5705, "internalPort": 5705}));
    let csi = spec.entry("csi").or_insert(json!({})).as_object_mut().unwrap();
    for flag in [
        "enable",
        "enableProvisionCreds",
        "enableControllerPublishCreds",
        "enableNodePublishCreds",
        "enableControllerExpandCreds",
    ] {
        csi.insert(flag.into(), json!(true));
    }
    csi.entry("deploymentStrategy").or_insert(json!("deployment"));
    from_json(cr)
}

/// The nodes kwok runs pods on (not the kubelet-less ones tests create).
pub(crate) async fn kwok_nodes(client: &kube::Client) -> Vec<String> {
    let taint = support::no_kubelet_taint()["key"].as_str().unwrap().to_string();
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    nodes
        .items
        .iter()
        .filter(|n| {
            !n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| ts.iter().any(|t| t.key == taint))
        })
        .map(|n| n.name_any())
        .collect()
}

/// Labels `nodes` with `key=true`.
async fn label_nodes(client: &kube::Client, nodes: &[String], key: &str) {
    let api = Api::<Node>::all(client.clone());
    for n in nodes {
        let patch = json!({"metadata": {"labels": {key: "true"}}});
        api.patch(n, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
}

/// Pod UIDs of the node DaemonSet, by node.
pub(crate) async fn node_pods(ns: &TestNamespace) -> BTreeMap<String, String> {
    let pods = ns
        .api::<Pod>()
        .list(&ListParams::default().labels("app=storageos,kind=daemonset"))
        .await
        .unwrap();
    pods.items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            (
                p.spec.as_ref().unwrap().node_name.clone().unwrap_or_default(),
                p.uid().unwrap(),
            )
        })
        .collect()
}

/// Asserts that no node pod in `ns` was restarted (the same pod UIDs on the same nodes as
/// `pods_before`) and that the node DaemonSet's pod template did not change (its generation is
/// still `generation`).
pub(crate) async fn assert_node_pods_untouched(
    ns: &TestNamespace,
    pods_before: &BTreeMap<String, String>,
    generation: Option<i64>,
) {
    assert_eq!(&node_pods(ns).await, pods_before, "node pods were restarted");
    let ds = ns.api::<DaemonSet>().get("storageos-daemonset").await.unwrap();
    assert_eq!(
        ds.metadata.generation,
        generation,
        "the node pod template changed on adoption: {:#?}",
        ds.spec.unwrap().template
    );
}

/// Undoes what a failed run would leave behind: the cluster's finalizer (its operator is gone)
/// and the worker label on the nodes.
pub(crate) struct Cleanup {
    pub(crate) namespace: String,
    pub(crate) cluster: Option<String>,
    pub(crate) unlabel: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let kubectl = |args: &[&str]| {
            let _ = std::process::Command::new(support::kubectl())
                .arg("--kubeconfig")
                .arg(support::kubeconfig_path())
                .args(args)
                .output();
        };
        if let Some(cluster) = &self.cluster {
            let patch = r#"{"metadata":{"finalizers":null}}"#;
            kubectl(&[
                "-n",
                &self.namespace,
                "patch",
                "stos",
                cluster,
                "--type=merge",
                "-p",
                patch,
            ]);
        }
        if self.unlabel {
            kubectl(&["label", "nodes", "--all", &format!("{WORKER_LABEL}-")]);
        }
    }
}

/// One adoption case.
struct Case {
    /// Fixture of the Go objects.
    fixture: &'static str,
    /// The CR the Go operator reconciled.
    cr: &'static str,
    /// Whether the CR selects nodes labelled as workers.
    label_workers: bool,
    /// A non-default `service.internalPort` (the Go Service's port; the node stays on 5705).
    internal_port: Option<i32>,
}

/// The Go operator's Service for `internalPort` `port` (`externalPort` 5705, the only other
/// value that worked with it): one port entry, port → 5705.
fn with_service_port(go: &mut [Value], cr: &mut StorageOSCluster, port: i32) {
    for d in go
        .iter_mut()
        .filter(|d| d["kind"] == "Service" && d["metadata"]["name"] == "storageos")
    {
        d["spec"]["ports"] = json!([{"name": "storageos", "protocol": "TCP", "port": port, "targetPort": 5705}]);
    }
    let service = cr.spec.service.get_or_insert_with(Default::default);
    service.internal_port = Some(port);
    service.external_port = Some(5705);
}

/// The pod-scheduler webhook of Go operators before v2.4.0.
const LEGACY_WEBHOOK: &str = "storageos-scheduler-webhook";

/// Creates what a Go operator before v2.4.0 left of its own scheduler webhook: the configuration
/// (intercepting nothing here: no namespace matches, and it fails open) and its Service in `ns`.
async fn legacy_scheduler_webhook(ns: &TestNamespace) -> (Api<MutatingWebhookConfiguration>, Api<Service>) {
    let mwcs: Api<MutatingWebhookConfiguration> = Api::all(ns.client.clone());
    let _ = mwcs.delete(LEGACY_WEBHOOK, &DeleteParams::default()).await;
    let mwc: MutatingWebhookConfiguration = from_json(json!({
        "metadata": {"name": LEGACY_WEBHOOK},
        "webhooks": [{
            "name": "scheduler.storageos.com",
            "clientConfig": {"service": {"namespace": ns.name, "name": LEGACY_WEBHOOK, "path": "/mutate-pods", "port": 5720}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"storageos-operator-test/never": "true"}},
            "failurePolicy": "Ignore", "sideEffects": "None", "admissionReviewVersions": ["v1"]
        }]
    }));
    mwcs.create(&PostParams::default(), &mwc).await.unwrap();
    let svc: Service = from_json(json!({"metadata": {"name": LEGACY_WEBHOOK},
        "spec": {"ports": [{"port": 5720, "targetPort": 5720}]}}));
    ns.api::<Service>().create(&PostParams::default(), &svc).await.unwrap();
    (mwcs, ns.api())
}

async fn adopt(case: Case) {
    let Case {
        fixture,
        cr: cr_file,
        label_workers,
        internal_port,
    } = case;
    let _lock = support::cluster_lock();
    support::logs();
    let ns = TestNamespace::new("adopt").await;
    let client = ns.client.clone();
    support::install_crds(&client).await;
    let nodes = kwok_nodes(&client).await;
    assert_eq!(nodes.len(), 3, "the plane's kwok nodes: {nodes:?}");
    let mut cleanup = Cleanup {
        namespace: ns.name.clone(),
        cluster: None,
        unlabel: label_workers,
    };
    if label_workers {
        label_nodes(&client, &nodes, WORKER_LABEL).await;
    }

    // The installation as the Go operator left it, its node pods running.
    let mut go = go_objects(fixture, &ns.name);
    let scheduler_image = scheduler_image(&go);
    let mut cr = go_era_cr(cr_file, &ns.name, &scheduler_image);
    if let Some(port) = internal_port {
        with_service_port(&mut go, &mut cr, port);
    }
    clear_cluster_scoped(&client, &go).await;
    source_secrets(&ns).await;
    kubectl_create(&go);
    let clusters = ns.api::<StorageOSCluster>();
    let cr_name = clusters.create(&PostParams::default(), &cr).await.unwrap().name_any();
    cleanup.cluster = Some(cr_name.clone());
    let dss = ns.api::<DaemonSet>();
    wait_for("the Go node pods to run on every node", SETTLE, || async {
        let s = dss.get("storageos-daemonset").await.ok()?.status?;
        (s.desired_number_scheduled == 3 && s.number_ready == 3).then_some(())
    })
    .await;
    let pods_before = node_pods(&ns).await;
    let ds_generation = dss.get("storageos-daemonset").await.unwrap().metadata.generation;
    let before = live(&client, &go).await;
    assert!(before.values().all(Option::is_some), "{before:?}");
    let legacy_webhook = legacy_scheduler_webhook(&ns).await;

    // `plan` previews the take-over, writing nothing: the only pods it restarts are the
    // api-manager's and the scheduler's (checked below against what the take-over does).
    let planned = support::operator::plan(&client, &cr).await;
    let restarts: Vec<(&str, Restart)> = planned
        .iter()
        .filter_map(|e| Some((e.object.as_str(), e.restart?)))
        .collect();
    let expected = [
        format!("Deployment {}/storageos-api-manager", ns.name),
        format!("Deployment {}/storageos-scheduler", ns.name),
    ];
    assert_eq!(
        restarts,
        expected.iter().map(|o| (o.as_str(), Restart::Now)).collect::<Vec<_>>(),
        "{planned:#?}"
    );
    assert_eq!(live(&client, &go).await, before, "plan wrote to the Go install");

    // Our operator takes over.
    let storageos = StorageOS::start(&client).await;
    let operator = ClusterOperator::start(&support::operator_client().await, &storageos);
    let running = wait_for("the adopted cluster to be 3/3 Running and Ready", SETTLE, || async {
        let c = clusters.get(&cr_name).await.ok()?;
        let s = c.status.clone()?;
        let ready = support::condition(&s, "Ready")?.status == "True";
        (s.phase.as_deref() == Some("Running") && s.ready.as_deref() == Some("3/3") && ready).then_some(c)
    })
    .await;

    // No apply error on the way (a failed pass raises FailedCreation with the reason).
    let failures = support::events(&client, &ns.name, Some("StorageOSCluster"), &cr_name, "FailedCreation").await;
    assert!(
        failures.is_empty(),
        "apply errors: {:?}",
        failures.iter().map(support::message).collect::<Vec<_>>()
    );

    // Every Go object that we render is the same object; the leftovers are gone.
    let leftovers = |d: &&Value| d["metadata"]["name"] == "storageos:nfs-provisioner";
    let after = live(&client, &go).await;
    // The Go operator gave its etcd TLS copy the source's type; ours is always Opaque, and a
    // Secret's type is immutable: that copy (certificates only, no volume data) is replaced.
    let replaced_on_purpose =
        |d: &Value| d["kind"] == "Secret" && d["metadata"]["name"] == "storageos-tls-etcd" && d["type"] != "Opaque";
    for d in &go {
        let key = describe(d);
        let (was, now) = (&before[&key], &after[&key]);
        if leftovers(&d) {
            assert_eq!(now, &None, "{key} is a Go-only leftover and must be removed");
        } else if replaced_on_purpose(d) {
            assert!(now.is_some(), "{key} was deleted");
        } else {
            let now = now.as_ref().unwrap_or_else(|| panic!("{key} was deleted"));
            assert_eq!(was.as_ref().unwrap().0, now.0, "{key} was recreated");
        }
    }
    for key in ["ClusterRole", "ClusterRoleBinding"] {
        assert!(
            after.contains_key(&format!("{key} /storageos:nfs-provisioner")),
            "the fixture has the {key} leftover"
        );
    }
    assert!(
        Api::<ClusterRole>::all(client.clone())
            .get_opt("storageos:nfs-provisioner")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<ClusterRoleBinding>::all(client.clone())
            .get_opt("storageos:nfs-provisioner")
            .await
            .unwrap()
            .is_none()
    );

    // The pre-v2.4 scheduler webhook (configuration and Service) is gone, as the Go operator's
    // migration would have removed it.
    assert!(
        legacy_webhook.0.get_opt(LEGACY_WEBHOOK).await.unwrap().is_none(),
        "the legacy scheduler webhook configuration is still there"
    );
    assert!(
        legacy_webhook.1.get_opt(LEGACY_WEBHOOK).await.unwrap().is_none(),
        "the legacy scheduler webhook Service is still there"
    );

    // The Go scheduler's Policy key is gone from the scheduler ConfigMap.
    if let Some(cm) = ns
        .api::<ConfigMap>()
        .get_opt("storageos-scheduler-policy")
        .await
        .unwrap()
    {
        let data = cm.data.unwrap_or_default();
        assert!(
            !data.contains_key("policy.cfg") && data.contains_key("config.yaml"),
            "{data:?}"
        );
    }

    // Pod templates: only the api-manager (our image replaces the Go one) and the scheduler
    // (our image and configuration) change; the node DaemonSet and the CSI helper keep theirs.
    let workload = |d: &&Value| ["DaemonSet", "Deployment", "StatefulSet"].contains(&d["kind"].as_str().unwrap());
    let generation = |m: &Option<(String, String)>| m.as_ref().unwrap().1.split(' ').next().unwrap().to_string();
    let changed: Vec<String> = go
        .iter()
        .filter(workload)
        .map(describe)
        .filter(|k| generation(&before[k]) != generation(&after[k]))
        .collect();
    assert_eq!(
        changed,
        [
            format!("Deployment {}/storageos-api-manager", ns.name),
            format!("Deployment {}/storageos-scheduler", ns.name)
        ],
        "workloads whose pod template changed on adoption"
    );

    // No node pod restarted, and the node pod template did not have to change.
    assert_node_pods_untouched(&ns, &pods_before, ds_generation).await;

    // The Go defaults in spec.images were replaced by ours, and the status says so.
    let replaced = support::condition(running.status.as_ref().unwrap(), "GoDefaultImagesReplaced")
        .expect("the replaced images condition");
    assert_eq!(replaced.status, "True");
    let message = &replaced.message;
    assert!(
        message.contains("spec.images.apiManagerContainer storageos/api-manager:v1.1.2"),
        "{message}"
    );
    assert!(
        message.contains(&format!("spec.images.kubeSchedulerContainer {scheduler_image}")),
        "{message}"
    );
    let deployments = ns.api::<Deployment>();
    let image = |d: Deployment| {
        d.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .clone()
            .unwrap()
    };
    assert_eq!(
        image(deployments.get("storageos-api-manager").await.unwrap()),
        OPERATOR_IMAGE
    );
    assert!(
        image(deployments.get("storageos-scheduler").await.unwrap()).starts_with("registry.k8s.io/kube-scheduler:")
    );
    // The API Service kept its single Go port entry: port = internalPort, targeting the node.
    let ports = ns
        .api::<Service>()
        .get("storageos")
        .await
        .unwrap()
        .spec
        .unwrap()
        .ports
        .unwrap();
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert_eq!(ports[0].port, internal_port.unwrap_or(5705));
    assert_eq!(
        ports[0].target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(5705))
    );

    // A restarted operator writes nothing.
    operator.stop().await;
    let settled = live(&client, &go).await;
    let cr_version = clusters.get(&cr_name).await.unwrap().resource_version();
    let events_before = cluster_events(&ns).await;
    let operator = ClusterOperator::start(&support::operator_client().await, &storageos);
    wait_for("a complete pass of the restarted operator", SETTLE, || async {
        (operator.completed_passes() >= 1).then_some(())
    })
    .await;
    assert_eq!(
        live(&client, &go).await,
        settled,
        "the restarted operator wrote objects"
    );
    assert_eq!(clusters.get(&cr_name).await.unwrap().resource_version(), cr_version);
    assert_eq!(
        cluster_events(&ns).await,
        events_before,
        "the restarted operator raised events"
    );

    // Clean up: deleting the cluster removes everything, Go-made objects included.
    clusters.delete(&cr_name, &DeleteParams::default()).await.unwrap();
    wait_for("the cluster to be deleted", SETTLE, || async {
        clusters.get_opt(&cr_name).await.ok()?.is_none().then_some(())
    })
    .await;
    operator.stop().await;
}

#[tokio::test]
async fn adopts_the_go_default_install() {
    adopt(Case {
        fixture: "go-default.yaml",
        cr: "tests/fixtures/adoption/cr-default.yaml",
        label_workers: false,
        internal_port: None,
    })
    .await;
}

#[tokio::test]
async fn adopts_the_go_statefulset_install() {
    adopt(Case {
        fixture: "go-sts.yaml",
        cr: "tests/fixtures/adoption/cr-sts.yaml",
        label_workers: false,
        internal_port: None,
    })
    .await;
}

#[tokio::test]
async fn adopts_the_go_all_fields_install() {
    adopt(Case {
        fixture: "go-all.yaml",
        cr: "tests/fixtures/valid/storageoscluster-all-fields.yaml",
        label_workers: true,
        internal_port: None,
    })
    .await;
}

/// The one non-default port pair that worked with the Go operator: Service port 80 → node 5705.
#[tokio::test]
async fn adopts_a_go_install_with_a_non_default_service_port() {
    adopt(Case {
        fixture: "go-default.yaml",
        cr: "tests/fixtures/adoption/cr-default.yaml",
        label_workers: false,
        internal_port: Some(80),
    })
    .await;
}
