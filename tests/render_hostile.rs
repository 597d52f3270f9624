//! Hostile user strings stay data: a cluster whose every string holds newlines, quotes, `{{`,
//! `---`, `: ` and `#` renders exactly the objects of the same cluster with plain strings, with
//! the hostile strings in place of the plain ones, and not one extra object or key.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code may fail loudly

use serde_json::{Value, json};
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::render::labels::label_value;
use storageos_operator::render::{self, Inputs};

/// The n-th hostile string. Each is unique and none is a prefix of another.
fn hostile(n: usize) -> String {
    format!("h{n}\"\n---\nkind: Secret\nmetadata: {{{{name}}}} {{{{{{raw}}}}}}: x # '\\ \t<&>\n---")
}

/// The plain string the n-th hostile string stands for (sorting like it, as tolerations are sorted
/// by key).
fn plain(n: usize) -> String {
    format!("h{n}-plain")
}

/// A cluster and its Secret with string number n produced by `s(n)` in every user-settable place.
fn inputs(s: impl Fn(usize) -> String) -> Inputs {
    let cluster: StorageOSCluster = serde_json::from_value(json!({
        "apiVersion": "storageos.com/v1",
        "kind": "StorageOSCluster",
        "metadata": {"name": s(1), "namespace": "default", "labels": {"team": s(2)}},
        "spec": {
            "secretRefName": "creds",
            "secretRefNamespace": "default",
            "namespace": s(3),
            "storageClassName": s(4),
            "sharedDir": s(5),
            "k8sDistro": s(6),
            "debug": true,
            "tlsEtcdSecretRefName": "etcd",
            "kvBackend": {"address": s(7)},
            "service": {
                "name": s(8),
                "type": s(9),
                "annotations": {s(10): s(11)},
            },
            "ingress": {"enable": true, "tls": true, "hostname": s(12), "annotations": {s(13): s(14)}},
            "csi": {
                "endpoint": s(15),
                "version": s(16),
                "registrarSocketDir": s(17),
                "kubeletDir": s(18),
                "pluginDir": s(19),
                "deviceDir": s(20),
                "registrationDir": s(21),
                "kubeletRegistrationPath": s(22),
            },
            "images": {
                "nodeContainer": s(23),
                "initContainer": s(24),
                "apiManagerContainer": s(25),
                "csiNodeDriverRegistrarContainer": s(26),
                "csiExternalProvisionerContainer": s(27),
                "csiExternalAttacherContainer": s(28),
                "csiExternalResizerContainer": s(29),
                "csiLivenessProbeContainer": s(30),
                "kubeSchedulerContainer": s(31),
            },
            "nodeSelectorTerms": [{"matchExpressions": [{"key": s(32), "operator": "In", "values": [s(33)]}]}],
            "tolerations": [{"key": s(34), "operator": "Equal", "value": s(35), "effect": "NoSchedule"}],
            "resources": {"requests": {"memory": "1Gi"}},
        },
    }))
    .unwrap();
    let secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "default"},
        "stringData": {"username": s(36), "password": s(37), "tls.crt": s(38), "tls.key": s(39)},
    }))
    .unwrap();
    let etcd = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "etcd", "namespace": "default"},
        "type": s(40),
        "stringData": {s(41): s(42)},
    }))
    .unwrap();
    let mut inputs = Inputs::new(cluster, "operator:v1");
    inputs.secret = Some(secret);
    inputs.etcd_tls_secret = Some(etcd);
    inputs.service_monitor_crd = true;
    inputs
}

const STRINGS: usize = 42;

/// `s` with every hostile string (raw, JSON-escaped, base64 of a Secret value, or the label
/// value made of a long name) replaced by its plain counterpart.
fn to_plain(s: &str) -> String {
    use base64::Engine;
    let b64 = |v: &str| base64::engine::general_purpose::STANDARD.encode(v);
    let mut out = s.to_string();
    // Longest numbers first, so h1 never matches inside h10.
    for n in (1..=STRINGS).rev() {
        let h = hostile(n);
        let escaped = serde_json::to_string(&h).unwrap();
        out = out
            .replace(&label_value(&h), &label_value(&plain(n)))
            .replace(&h, &plain(n))
            .replace(&escaped[1..escaped.len() - 1], &plain(n))
            .replace(&b64(&h), &b64(&plain(n)));
    }
    out
}

/// A JSON value with every string (keys too) mapped through `to_plain`.
fn plain_value(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(to_plain(s)),
        Value::Array(a) => Value::Array(a.iter().map(plain_value).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (to_plain(k), plain_value(v))).collect()),
        other => other.clone(),
    }
}

fn build(inputs: &Inputs) -> Vec<Value> {
    render::build(inputs)
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(|o| o.to_value().unwrap())
        .collect()
}

#[test]
fn hostile_strings_render_the_same_objects_as_plain_ones() {
    let plain_objects = build(&inputs(plain));
    let hostile_objects = build(&inputs(hostile));
    assert_eq!(
        hostile_objects.len(),
        plain_objects.len(),
        "hostile strings changed the object count"
    );
    for (h, p) in hostile_objects.iter().zip(&plain_objects) {
        pretty_assertions::assert_eq!(&plain_value(h), p);
    }
}

#[test]
fn hostile_strings_arrive_exactly() {
    let objects = build(&inputs(hostile));
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let service = find("Service", &hostile(8));
    assert_eq!(service["metadata"]["namespace"], json!(hostile(3)));
    assert_eq!(service["metadata"]["annotations"], json!({hostile(10): hostile(11)}));
    assert_eq!(service["spec"]["type"], json!(hostile(9)));
    let ds = find("DaemonSet", "storageos-daemonset");
    let node = &ds["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(node["image"], json!(hostile(23)));
    assert!(
        node["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["mountPath"] == json!(hostile(5)))
    );
    let config = find("ConfigMap", "storageos-node-config");
    assert_eq!(config["data"]["ETCD_ENDPOINTS"], json!(hostile(7)));
    assert_eq!(config["data"]["K8S_DISTRO"], json!(hostile(6)));
    assert_eq!(config["data"]["DEVICE_DIR"], json!(format!("{}/devices", hostile(5))));
    let sc = find("StorageClass", &hostile(4));
    assert_eq!(
        sc["parameters"]["csi.storage.k8s.io/provisioner-secret-namespace"],
        json!(hostile(3))
    );
    let ingress = find("Ingress", "storageos-ingress");
    assert_eq!(ingress["spec"]["tls"][0]["hosts"][0], json!(hostile(12)));
    let scheduler_config = find("ConfigMap", "storageos-scheduler-policy")["data"]["config.yaml"]
        .as_str()
        .unwrap()
        .to_string();
    let parsed: Value = serde_yaml::from_str(&scheduler_config).unwrap();
    assert_eq!(
        parsed["extenders"][0]["urlPrefix"],
        json!(format!(
            "http://{}.{}.svc:5705/v2/k8s/scheduler",
            hostile(8),
            hostile(3)
        ))
    );
    assert_eq!(parsed["leaderElection"]["resourceNamespace"], json!(hostile(3)));
}

#[test]
fn hostile_documents_type_without_losing_a_field() {
    for doc in render::render_documents(&inputs(hostile)).unwrap() {
        let untyped = doc.value.clone();
        let typed = render::parse_document(doc).unwrap();
        pretty_assertions::assert_eq!(typed.to_value().unwrap(), untyped);
    }
}
