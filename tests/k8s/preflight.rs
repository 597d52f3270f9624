//! Integration tier: the cluster controller keeps checking its prerequisites. Its kv backend
//! (`KVBackendReachable`): the plane's own etcd, a wrong address, and a real etcd serving TLS
//! with client certificates (the right CA, a CA that did not sign etcd's certificate, an expired
//! client certificate). Its nodes (`NodesEligible`): an arm64 node is named and not counted.
//! A foreign `csi.storageos.com` CSIDriver is taken over and reported. And `kubectl storageos
//! preflight` checks only the nodes StorageOS will use: a host port held on another node passes,
//! on a selected one it fails naming the node (with `--node-selector` and with `-f`); the
//! per-node checks skip kwok's fake nodes and leave no pod.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::storage::v1::CSIDriver;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use serde_json::json;
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::sim::{self, Simulator};
use support::operator::{operator_config, spawn_cluster_controller};
use support::{TestNamespace, from_json, wait_for};

const SETTLE: Duration = Duration::from_secs(90);

/// The plane's etcd, as its kube-apiserver was started with (`hack/k8s.sh` records the command).
fn plane_etcd() -> String {
    let dir = support::kubeconfig_path().parent().unwrap().to_path_buf();
    let cmd = std::fs::read(dir.join("kube-apiserver.cmd")).unwrap();
    let args: Vec<String> = cmd
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let at = args.iter().position(|a| a == "--etcd-servers").unwrap();
    args[at + 1].clone()
}

fn offset(t: chrono::DateTime<chrono::Utc>) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(t.timestamp()).unwrap()
}

/// A CA (certificate PEM, issuer).
fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().unwrap();
    let cert = p.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(p, key))
}

/// A leaf for `purpose`, valid from `from` to `to`: (certificate PEM, key PEM).
fn leaf(
    issuer: &Issuer<'static, KeyPair>,
    names: &[&str],
    purpose: ExtendedKeyUsagePurpose,
    valid: (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>),
) -> (String, String) {
    let mut p = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, names[0]);
    p.extended_key_usages = vec![purpose];
    p.not_before = offset(valid.0);
    p.not_after = offset(valid.1);
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A one-member etcd serving TLS on loopback that requires a client certificate of `ca`.
struct TlsEtcd {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl TlsEtcd {
    fn start(ca_pem: &str, server: &(String, String)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let ca = write("ca.crt", ca_pem);
        let cert = write("server.crt", &server.0);
        let key = write("server.key", &server.1);
        let (client, peer) = (free_port(), free_port());
        let url = format!("https://127.0.0.1:{client}");
        let arg = |p: &Path| p.to_string_lossy().into_owned();
        let child = Command::new(support::etcd_binary())
            .args(["--data-dir", &arg(&dir.path().join("data")), "--name", "tls"])
            .args(["--listen-client-urls", &url, "--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-cluster", &format!("tls=http://127.0.0.1:{peer}")])
            .args(["--cert-file", &arg(&cert), "--key-file", &arg(&key)])
            .args(["--trusted-ca-file", &arg(&ca), "--client-cert-auth"])
            .args(["--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcd (built by hack/k8s.sh up)");
        Self { child, url, _dir: dir }
    }
}

impl Drop for TlsEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_secret(name: &str, ca: &str, client: &(String, String)) -> Secret {
    from_json(json!({
        "metadata": {"name": name},
        "stringData": {"etcd-client-ca.crt": ca, "etcd-client.crt": client.0, "etcd-client.key": client.1}
    }))
}

/// Waits until the cluster's KVBackendReachable condition has `reason`; returns its message.
async fn reachability(clusters: &Api<StorageOSCluster>, name: &str, status: &str, reason: &str) -> String {
    wait_for(
        &format!("KVBackendReachable={status} with reason {reason}"),
        SETTLE,
        || async {
            let c = clusters.get(name).await.ok()?;
            let cond = c
                .status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "KVBackendReachable")?;
            (cond.status == status && cond.reason == reason).then_some(cond.message)
        },
    )
    .await
}

/// The cluster controller, acting as the operator's ServiceAccount, talking to `sim`, as if
/// it had found a Kubernetes newer than the newest tested at start.
async fn operator(sim: &sim::SimHandle) -> tokio::task::JoinHandle<()> {
    let newer = semver::Version::new(1, storageos_operator::checks::TESTED_KUBERNETES.1 + 1, 0);
    spawn_cluster_controller(operator_config(sim.url(), Some(newer))).await
}

/// A StorageOSCluster in `ns` with this kv backend address.
fn cluster_json(ns: &str, name: &str, address: &str) -> StorageOSCluster {
    from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"secretRefName": "storageos-api", "secretRefNamespace": ns, "namespace": ns,
                 "disableTelemetry": true, "kvBackend": {"address": address}}
    }))
}

/// Waits until the cluster is deleted.
async fn delete_cluster(clusters: &Api<StorageOSCluster>, name: &str) {
    clusters.delete(name, &DeleteParams::default()).await.unwrap();
    wait_for("the cluster to be deleted", SETTLE, || async {
        clusters.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_kv_backend_is_checked_and_each_failure_says_what_to_fix() {
    let _lock = support::cluster_lock();
    let ns = TestNamespace::new("kv").await;
    let client = ns.client.clone();
    support::install_crds(&client).await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let operator = operator(&sim).await;
    support::create_api_secret(&ns, "storageos", "storageos").await;

    // The plane's own etcd (plain HTTP).
    let clusters: Api<StorageOSCluster> = ns.api();
    let name = "kv";
    let cluster = json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
        "metadata": {"name": name, "namespace": ns.name},
        "spec": {"secretRefName": "storageos-api", "secretRefNamespace": ns.name, "namespace": ns.name,
                 "disableTelemetry": true, "kvBackend": {"address": plane_etcd()}}
    });
    clusters
        .create(&PostParams::default(), &from_json(cluster))
        .await
        .unwrap();
    let ok = reachability(&clusters, name, "True", "EtcdHealthy").await;
    assert!(ok.contains(&plane_etcd()), "{ok}");
    // The Kubernetes version: newer than tested is said, and applied as usual.
    let status = clusters.get(name).await.unwrap().status.unwrap();
    let k8s = support::condition(&status, "KubernetesSupported").expect("KubernetesSupported");
    assert_eq!(
        (k8s.status.as_str(), k8s.reason.as_str()),
        ("True", "KubernetesNewerThanTested"),
        "{k8s:?}"
    );
    assert!(k8s.message.contains("newer than the newest tested"), "{k8s:?}");

    let patch = |spec: serde_json::Value| {
        let clusters = clusters.clone();
        async move {
            clusters
                .patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": spec})))
                .await
                .unwrap();
        }
    };
    // A wrong address: nothing listens there.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    patch(json!({"kvBackend": {"address": nowhere}})).await;
    let msg = reachability(&clusters, name, "False", "EtcdUnreachable").await;
    assert!(
        msg.contains(&nowhere) && msg.contains("check spec.kvBackend.address"),
        "{msg}"
    );
    support::wait_event(&client, &ns.name, name, "EtcdUnreachable", &nowhere).await;

    // A real etcd serving TLS, requiring client certificates of its CA.
    let now = chrono::Utc::now();
    let valid = (now - chrono::Duration::hours(1), now + chrono::Duration::days(1));
    let (ca_pem, issuer) = ca("etcd-ca");
    let server = leaf(&issuer, &["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth, valid);
    let good_client = leaf(&issuer, &["storageos"], ExtendedKeyUsagePurpose::ClientAuth, valid);
    let etcd = TlsEtcd::start(&ca_pem, &server);
    let secrets: Api<Secret> = ns.api();
    for (secret, ca_of) in [("etcd-good", ca_pem.clone()), ("etcd-wrong-ca", ca("other-ca").0)] {
        secrets
            .create(&PostParams::default(), &tls_secret(secret, &ca_of, &good_client))
            .await
            .unwrap();
    }
    let expired = leaf(
        &issuer,
        &["storageos"],
        ExtendedKeyUsagePurpose::ClientAuth,
        (now - chrono::Duration::days(2), now - chrono::Duration::days(1)),
    );
    secrets
        .create(&PostParams::default(), &tls_secret("etcd-expired", &ca_pem, &expired))
        .await
        .unwrap();

    patch(
        json!({"kvBackend": {"address": etcd.url}, "tlsEtcdSecretRefName": "etcd-good",
                 "tlsEtcdSecretRefNamespace": ns.name}),
    )
    .await;
    let ok = reachability(&clusters, name, "True", "EtcdHealthy").await;
    assert!(ok.contains("the client certificate is valid until"), "{ok}");

    patch(json!({"tlsEtcdSecretRefName": "etcd-wrong-ca"})).await;
    let msg = reachability(&clusters, name, "False", "EtcdTLSInvalid").await;
    assert!(msg.contains("UnknownIssuer") || msg.contains("certificate"), "{msg}");
    assert!(msg.contains("etcd-client-ca.crt of Secret"), "{msg}");

    patch(json!({"tlsEtcdSecretRefName": "etcd-expired"})).await;
    let msg = reachability(&clusters, name, "False", "EtcdClientCertExpired").await;
    assert!(msg.contains("etcd-expired") && msg.contains("issue a new one"), "{msg}");

    delete_cluster(&clusters, name).await;
    operator.abort();
}

/// Deletes a Node when dropped (also when the test fails).
struct NodeGuard(String);

impl Drop for NodeGuard {
    fn drop(&mut self) {
        let _ = Command::new(support::kubectl())
            .args(["delete", "node", &self.0, "--ignore-not-found", "--wait=false"])
            .env("KUBECONFIG", support::kubeconfig_path())
            .output();
    }
}

#[tokio::test]
async fn an_arm64_node_is_named_and_a_foreign_csi_driver_is_reported() {
    let _lock = support::cluster_lock();
    let ns = TestNamespace::new("eligible").await;
    let client = ns.client.clone();
    support::install_crds(&client).await;
    support::wait_no_clusters(&client, SETTLE).await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let operator = operator(&sim).await;
    support::create_api_secret(&ns, "storageos", "storageos").await;

    // A kwok node that reports arm64 once kwok has initialised it.
    let arm = format!("kwok-arm64-{}", support::suffix());
    let _guard = NodeGuard(arm.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = from_json(json!({
        "metadata": {"name": arm, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {"kubernetes.io/arch": "arm64", "storageos-operator-test": "true"}}
    }));
    nodes.create(&PostParams::default(), &node).await.unwrap();
    wait_for("kwok to initialise the node", SETTLE, || async {
        let n = nodes.get(&arm).await.ok()?;
        (!n.status?.node_info?.kubelet_version.is_empty()).then_some(())
    })
    .await;
    let arch = json!({"status": {"nodeInfo": {"architecture": "arm64"}}});
    nodes
        .patch_status(&arm, &PatchParams::default(), &Patch::Merge(arch))
        .await
        .unwrap();

    // A CSIDriver of StorageOS's name that someone else made (none of ours is left: no cluster).
    let drivers: Api<CSIDriver> = Api::all(client.clone());
    let _ = drivers.delete("csi.storageos.com", &DeleteParams::default()).await;
    wait_for("no csi.storageos.com CSIDriver", SETTLE, || async {
        drivers.get_opt("csi.storageos.com").await.ok()?.is_none().then_some(())
    })
    .await;
    let foreign: CSIDriver = from_json(json!({
        "metadata": {"name": "csi.storageos.com"}, "spec": {"attachRequired": false}
    }));
    let theirs = drivers.create(&PostParams::default(), &foreign).await.unwrap();

    let clusters: Api<StorageOSCluster> = ns.api();
    let name = "eligible";
    clusters
        .create(&PostParams::default(), &cluster_json(&ns.name, name, &plane_etcd()))
        .await
        .unwrap();
    // It is StorageOS's name: taken over, and said so (in the first pass, which on a loaded CI
    // machine, beside the fault matrix and the soak, can take longer than an event usually does).
    let said = wait_for("a ForeignCSIDriver event naming csi.storageos.com", SETTLE, || async {
        support::events(&client, &ns.name, None, name, "ForeignCSIDriver")
            .await
            .into_iter()
            .find(|e| support::message(e).contains("csi.storageos.com"))
    })
    .await;
    assert!(
        support::message(&said).contains("was taken over"),
        "{}",
        support::message(&said)
    );
    wait_for("the CSIDriver to be the operator's", SETTLE, || async {
        let d = drivers.get("csi.storageos.com").await.ok()?;
        (d.metadata.uid != theirs.metadata.uid || d.labels().contains_key("app.kubernetes.io/managed-by")).then_some(())
    })
    .await;

    let msg = wait_for("NodesEligible=False naming the arm64 node", SETTLE, || async {
        let c = clusters.get(name).await.ok()?;
        let cond = c.status?.conditions?.into_iter().find(|c| c.type_ == "NodesEligible")?;
        (cond.status == "False" && cond.reason == "NodesIneligible").then_some(cond.message)
    })
    .await;
    assert!(msg.contains(&format!("{arm} (architecture arm64)")), "{msg}");
    let c = clusters.get(name).await.unwrap();
    let counted = c.status.unwrap().nodes.unwrap_or_default();
    assert!(!counted.contains(&arm), "the arm64 node is counted: {counted:?}");
    support::wait_event(&client, &ns.name, name, "NodesIneligible", &arm).await;

    delete_cluster(&clusters, name).await;
    operator.abort();
}

/// `kubectl storageos preflight ARGS -o json` with the plane's admin kubeconfig: (exit ok, report).
fn preflight(args: &[&str]) -> (bool, serde_json::Value) {
    support::preflight(support::kubeconfig_path(), args)
}

/// The check named `name` of a report.
fn named<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no {name} in {report:#}"))
}

fn failed(report: &serde_json::Value) -> Vec<&serde_json::Value> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["result"] == "FAIL")
        .collect()
}

#[tokio::test]
async fn preflight_checks_only_the_nodes_storageos_selects() {
    // Not beside the arm64 test: the node it adds would change the set of nodes checked here.
    let _lock = support::cluster_lock();
    use k8s_openapi::api::core::v1::Pod;
    let ns = TestNamespace::new("preflight-nodes").await;
    // A pod that holds host port 5705 on kwok-node-0 (pinned there: the scheduler has no say).
    let holder: Pod = from_json(json!({
        "metadata": {"name": "holds-5705"},
        "spec": {"nodeName": "kwok-node-0", "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "c", "image": "registry.invalid/holder:1",
                                 "ports": [{"containerPort": 5705, "hostPort": 5705}]}]}
    }));
    ns.api::<Pod>().create(&PostParams::default(), &holder).await.unwrap();
    let holds = format!("{}/holds-5705 on kwok-node-0 holds 5705", ns.name);

    // StorageOS does not use kwok-node-0: the port is no concern, and preflight passes.
    let (ok, report) = preflight(&["--node-selector", "kubernetes.io/hostname in (kwok-node-1,kwok-node-2)"]);
    assert_eq!(named(&report, "host-ports")["result"], "PASS", "{report:#}");
    assert!(failed(&report).is_empty() && ok, "{report:#}");
    let nodes = named(&report, "nodes");
    assert!(
        nodes["message"].as_str().unwrap().contains("2 of")
            && nodes["message"].as_str().unwrap().contains("kwok-node-1, kwok-node-2"),
        "{nodes}"
    );
    assert!(
        !report.to_string().contains("node/kwok-node-0/"),
        "a node StorageOS does not use is not checked: {report:#}"
    );

    // It does: FAIL naming the pod, its node and the port.
    let (ok, report) = preflight(&["--node-selector", "kubernetes.io/hostname=kwok-node-0"]);
    let ports = named(&report, "host-ports");
    assert_eq!(ports["result"], "FAIL", "{report:#}");
    assert!(ports["message"].as_str().unwrap().contains(&holds), "{ports}");
    assert!(!ok, "preflight passed with a held host port");

    // The same from a cluster file's nodeSelectorTerms (and its tolerations).
    let dir = tempfile::tempdir().unwrap();
    let file = |nodes: &[&str]| {
        let path = dir.path().join(format!("cluster-{}.yaml", nodes.len()));
        let cluster = json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": "storageos", "namespace": "storageos"},
            "spec": {"secretRefName": "storageos-api", "secretRefNamespace": "storageos",
                     "nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}],
                     "tolerations": [{"operator": "Exists"}]}
        });
        std::fs::write(&path, serde_yaml::to_string(&cluster).unwrap()).unwrap();
        path.to_string_lossy().into_owned()
    };
    let (_, report) = preflight(&["-f", &file(&["kwok-node-0"])]);
    let ports = named(&report, "host-ports");
    assert_eq!(ports["result"], "FAIL", "{report:#}");
    assert!(ports["message"].as_str().unwrap().contains(&holds), "{ports}");
    assert!(
        named(&report, "nodes")["message"]
            .as_str()
            .unwrap()
            .contains("cluster-1.yaml"),
        "{report:#}"
    );
    let (_, report) = preflight(&["-f", &file(&["kwok-node-1", "kwok-node-2"])]);
    assert_eq!(named(&report, "host-ports")["result"], "PASS", "{report:#}");
    // A selector that selects nothing is a FAIL of its own.
    let (ok, report) = preflight(&["--node-selector", "storageos-preflight-test=nowhere"]);
    assert_eq!(named(&report, "nodes")["result"], "FAIL", "{report:#}");
    assert!(!ok);

    // The per-node checks: a kwok node runs no pods, so it is skipped with the reason, and no
    // node-check pod is created or left.
    let (_, report) = preflight(&["--node-selector", "kubernetes.io/hostname=kwok-node-1", "--node-checks"]);
    let skipped = named(&report, "node/kwok-node-1/node-checks");
    assert_eq!(skipped["result"], "SKIP", "{skipped}");
    assert!(skipped["message"].as_str().unwrap().contains("kwok"), "{skipped}");
    assert!(report.get("notChecked").is_none(), "{report:#}");
    let left = Api::<Pod>::namespaced(support::client().await, "kube-system")
        .list(&kube::api::ListParams::default().labels("app.kubernetes.io/name=storageos-preflight"))
        .await
        .unwrap();
    assert!(
        left.items.is_empty(),
        "node-check pods left: {:?}",
        left.items.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
}
