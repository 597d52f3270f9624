//! Integration tier: node and PVC label sync against the real control plane and an in-process
//! StorageOS simulator. Nodes are this test's own (unique names, deleted at the end); the kwok
//! nodes and other tests' objects are unknown to the simulator, so the controllers leave them be.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use storageos_operator::apimanager::controllers::{Context, node_label, pvc_label};
use storageos_operator::sim::{self, Faults, NodeSeed, SimHandle, Simulator, VolumeSeed};
use storageos_operator::storageos::models::{Health, Labels};
use support::{TestNamespace, from_json, wait_event, wait_for};

const WAIT: Duration = Duration::from_secs(30);

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:06}", rand::random::<u32>() % 1_000_000)
}

/// Deletes cluster-scoped objects of the test when dropped, also on failure.
struct Cleanup {
    nodes: Vec<String>,
    pvs: Vec<String>,
    classes: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let (nodes, pvs, classes) = (self.nodes.clone(), self.pvs.clone(), self.classes.clone());
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                let c = support::client().await;
                let dp = DeleteParams::background();
                for n in nodes {
                    let _ = Api::<Node>::all(c.clone()).delete(&n, &dp).await;
                }
                for n in pvs {
                    let _ = Api::<PersistentVolume>::all(c.clone()).delete(&n, &dp).await;
                }
                for n in classes {
                    let _ = Api::<StorageClass>::all(c.clone()).delete(&n, &dp).await;
                }
            });
        })
        .join();
    }
}

/// Runs one controller against `sim` with these api-manager flags.
async fn start<F, Fut>(sim: &SimHandle, flags: &[&str], run: F) -> tokio::task::JoinHandle<()>
where
    F: FnOnce(Arc<Context>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let ctx = support::api_manager_context(sim, flags).await;
    tokio::spawn(run(ctx))
}

/// The non-GET requests the simulator saw (writes), as `METHOD path`.
fn writes(sim: &SimHandle) -> Vec<String> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method != "GET" && !r.path.starts_with("/v2/auth/"))
        .map(|r| format!("{} {} {}", r.method, r.path, r.status))
        .collect()
}

/// A reserved label key StorageOS does not know: reported by the label syncs, never sent.
const IDLE_PROBE: &str = "storageos.com/idle-probe";

/// The StorageOS reads behind the node label resync (the shared node poll).
const NODE_POLL: &str = "GET /v2/nodes";
/// The StorageOS reads behind the PVC label resync (the shared volume poll).
const VOLUME_POLL: &str = "GET /v2/namespaces/{id}/volumes";

/// Asserts that the simulator saw no write over the next two polls of `route` (so across the
/// resync passes they fed).
async fn assert_no_writes_at_idle(sim: &SimHandle, route: &str) {
    sim.clear_requests();
    support::after_polls(sim, route, 2).await;
    let w = writes(sim);
    assert!(w.is_empty(), "writes at idle: {w:?}");
}

async fn patch_labels<K>(api: &Api<K>, name: &str, labels: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": labels}})),
    )
    .await
    .unwrap();
}

// ------------------------------------------------------------------------------------- nodes

fn sim_node_labels(sim: &SimHandle, name: &str) -> Labels {
    sim.nodes()
        .into_iter()
        .find(|n| n.name == name)
        .map(|n| n.labels.to_map())
        .unwrap_or_default()
}

async fn wait_node_labels(sim: &SimHandle, name: &str, want: &Labels) {
    wait_for(&format!("StorageOS node {name} labels {want:?}"), WAIT, || async {
        (sim_node_labels(sim, name) == *want).then_some(())
    })
    .await;
}

fn k8s_node(name: &str, annotated: bool, labels: serde_json::Value) -> Node {
    let annotations = if annotated {
        support::storageos_node_annotations(name)
    } else {
        json!({})
    };
    from_json(
        json!({"metadata": {"name": name, "labels": labels, "annotations": annotations},
                     "spec": {"taints": [support::no_kubelet_taint()]}}),
    )
}

#[tokio::test]
async fn node_labels_sync_compute_only_and_unreserved_labels() {
    let client = support::client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let name = unique("t-lbl-node");
    let plain = unique("t-lbl-plain");
    let unknown = unique("t-lbl-unknown");
    let _cleanup = Cleanup {
        nodes: vec![name.clone(), plain.clone(), unknown.clone()],
        pvs: vec![],
        classes: vec![],
    };
    // The StorageOS node already holds a reserved label: later unreserved updates must carry it
    // (regression for the Go payload bug, docs/api-manager.md).
    sim.add_node_with(NodeSeed {
        name: name.clone(),
        labels: labels(&[("storageos.com/computeonly", "true"), ("stale", "x")]),
        ..NodeSeed::default()
    })
    .unwrap();
    sim.add_node_with(NodeSeed {
        name: plain.clone(),
        labels: labels(&[("keep", "me")]),
        ..NodeSeed::default()
    })
    .unwrap();
    let controller = start(
        &sim,
        &["-node-label-resync-delay", "1s", "-node-label-resync-interval", "1h"],
        node_label::run,
    )
    .await;

    // Created with the CSI annotation: labels applied, stale ones removed, reserved kept.
    nodes
        .create(
            &PostParams::default(),
            &k8s_node(&name, true, json!({"storageos.com/computeonly": "true", "zone": "a"})),
        )
        .await
        .unwrap();
    // Not StorageOS (no annotation), and annotated but unknown to StorageOS: left alone.
    nodes
        .create(&PostParams::default(), &k8s_node(&plain, false, json!({"zone": "b"})))
        .await
        .unwrap();
    nodes
        .create(&PostParams::default(), &k8s_node(&unknown, true, json!({"zone": "c"})))
        .await
        .unwrap();
    let mut want = labels(&[("storageos.com/computeonly", "true"), ("zone", "a")]);
    wait_node_labels(&sim, &name, &want).await;
    let put = sim
        .requests()
        .into_iter()
        .rfind(|r| r.method == "PUT" && r.path.starts_with("/v2/nodes/") && !r.path.ends_with("compute-only"))
        .expect("a label update");
    let sent = &put.body.as_ref().unwrap()["labels"];
    assert_eq!(
        sent["storageos.com/computeonly"], "true",
        "reserved labels are sent: {sent}"
    );
    assert_eq!(sent["zone"], "a");
    let events_seen = wait_event(&client, "default", &name, "LabelsSynced", "unreserved labels").await;
    assert_eq!(
        events_seen.reporting_component.as_deref(),
        Some("storageos-api-manager")
    );

    // Removing computeonly reverts it to false; a changed label follows.
    patch_labels(
        &nodes,
        &name,
        json!({"storageos.com/computeonly": null, "zone": "z", "rack": "r1"}),
    )
    .await;
    want = labels(&[("zone", "z"), ("rack", "r1")]);
    wait_node_labels(&sim, &name, &want).await;

    // Invalid and unknown reserved values: reported, nothing reset, valid labels still applied.
    patch_labels(&nodes, &name, json!({"storageos.com/computeonly": "true"})).await;
    want.insert("storageos.com/computeonly".into(), "true".into());
    wait_node_labels(&sim, &name, &want).await;
    patch_labels(
        &nodes,
        &name,
        json!({"storageos.com/computeonly": "maybe", "storageos.com/replicas": "2", "storageos.com/bogus": "1", "rack": "r2"}),
    )
    .await;
    want.insert("rack".into(), "r2".into());
    wait_node_labels(&sim, &name, &want).await;
    let ev = wait_event(&client, "default", &name, "LabelNotSynced", "storageos.com/computeonly").await;
    let msg = ev.message.unwrap_or_default();
    assert!(msg.contains("current setting is kept"), "{msg}");
    assert!(
        msg.contains("storageos.com/replicas") && msg.contains("storageos.com/bogus"),
        "{msg}"
    );
    patch_labels(
        &nodes,
        &name,
        json!({"storageos.com/computeonly": "false", "storageos.com/replicas": null, "storageos.com/bogus": null}),
    )
    .await;
    want.remove("storageos.com/computeonly");
    wait_node_labels(&sim, &name, &want).await;

    // A failing API is retried with backoff until the change lands.
    sim.clear_requests();
    sim.set_faults(Faults {
        fail_next: 2,
        status: 500,
        path: Some("/compute-only".into()),
        ..Faults::default()
    });
    patch_labels(&nodes, &name, json!({"storageos.com/computeonly": "true"})).await;
    want.insert("storageos.com/computeonly".into(), "true".into());
    wait_node_labels(&sim, &name, &want).await;
    let attempts: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/compute-only"))
        .map(|r| (r.status, r.injected))
        .collect();
    assert_eq!(attempts, vec![(500, true), (500, true), (200, false)]);

    // The annotation appearing later syncs the existing labels at once.
    assert_eq!(sim_node_labels(&sim, &plain), labels(&[("keep", "me")]));
    let annotate = k8s_node(&plain, true, json!({}));
    nodes
        .patch(
            &plain,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotate.annotations()}})),
        )
        .await
        .unwrap();
    wait_node_labels(&sim, &plain, &labels(&[("zone", "b")])).await;

    // Idle (the resync runs hourly here): a reconcile that has nothing to write writes nothing.
    // An unknown reserved key is reported, never sent; its event proves the reconcile ran.
    sim.clear_requests();
    patch_labels(&nodes, &plain, json!({IDLE_PROBE: "x"})).await;
    wait_event(&client, "default", &plain, "LabelNotSynced", IDLE_PROBE).await;
    let w = writes(&sim);
    assert!(w.is_empty(), "writes at idle: {w:?}");
    controller.abort();
}

#[tokio::test]
async fn node_label_resync_applies_changes_made_while_stopped() {
    let client = support::client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let name = unique("t-lbl-resync");
    let _cleanup = Cleanup {
        nodes: vec![name.clone()],
        pvs: vec![],
        classes: vec![],
    };
    sim.add_node(&name, Health::Online).unwrap();
    // The Kubernetes node exists before the controller starts: the watch's first list leaves it
    // to the resync, which compares and applies only the difference.
    nodes
        .create(
            &PostParams::default(),
            &k8s_node(&name, true, json!({"storageos.com/computeonly": "true", "zone": "a"})),
        )
        .await
        .unwrap();
    let started = chrono::Utc::now();
    let controller = start(
        &sim,
        &["-node-label-resync-delay", "10s", "-node-label-resync-interval", "1s"],
        node_label::run,
    )
    .await;
    wait_node_labels(
        &sim,
        &name,
        &labels(&[("storageos.com/computeonly", "true"), ("zone", "a")]),
    )
    .await;
    // Nothing was written before the 10 s delay (the controller started after `started`).
    let first_write = sim
        .requests()
        .into_iter()
        .find(|r| r.method != "GET" && !r.path.starts_with("/v2/auth/"))
        .expect("the resync's writes");
    assert!(
        first_write.time - started >= chrono::Duration::seconds(10),
        "written {} after the start, before the resync delay: {first_write:?}",
        first_write.time - started
    );
    assert_no_writes_at_idle(&sim, NODE_POLL).await;
    controller.abort();
}

// -------------------------------------------------------------------------------------- PVCs

/// A StorageOS StorageClass with create-time-only parameters (which must not cause retries).
async fn storage_class(client: &Client, name: &str) -> StorageClass {
    let sc: StorageClass = from_json(json!({
        "metadata": {"name": name},
        "provisioner": "csi.storageos.com",
        "parameters": {
            "storageos.com/replicas": "1",
            "storageos.com/nocache": "true",
            "storageos.com/encryption": "true",
            "csi.storage.k8s.io/fstype": "ext4"
        }
    }));
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await
        .unwrap()
}

/// A static PV bound to PVC `pvc` of `ns`, the PVC itself, and the StorageOS volume behind them.
async fn bound_pvc(
    ns: &TestNamespace,
    sim: &SimHandle,
    class: &str,
    pvc: &str,
    pv: &str,
    pvc_labels: serde_json::Value,
    annotations: serde_json::Value,
) -> PersistentVolumeClaim {
    sim.add_volume(VolumeSeed {
        namespace: ns.name.clone(),
        name: pv.into(),
        pvc_name: pvc.into(),
        pvc_namespace: ns.name.clone(),
        replicas: 1,
        ..VolumeSeed::default()
    })
    .unwrap();
    let pv_obj: PersistentVolume = from_json(json!({
        "metadata": {"name": pv},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": class,
            "csi": {"driver": "csi.storageos.com", "volumeHandle": pv},
            "claimRef": {"namespace": ns.name, "name": pvc}
        }
    }));
    Api::<PersistentVolume>::all(ns.client.clone())
        .create(&PostParams::default(), &pv_obj)
        .await
        .unwrap();
    let mut ann = json!({"volume.kubernetes.io/storage-provisioner": "csi.storageos.com"});
    ann.as_object_mut()
        .unwrap()
        .extend(annotations.as_object().cloned().unwrap_or_default());
    let claim: PersistentVolumeClaim = from_json(json!({
        "metadata": {"name": pvc, "labels": pvc_labels, "annotations": ann},
        "spec": {
            "storageClassName": class, "volumeName": pv, "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}
        }
    }));
    ns.api::<PersistentVolumeClaim>()
        .create(&PostParams::default(), &claim)
        .await
        .unwrap()
}

fn sim_volume_labels(sim: &SimHandle, namespace: &str, pv: &str) -> Labels {
    let ns_id = sim
        .namespaces()
        .into_iter()
        .find(|n| n.name == namespace)
        .map(|n| n.id)
        .unwrap_or_default();
    sim.volumes()
        .into_iter()
        .find(|v| v.namespace_id == ns_id && v.name == pv)
        .map(|v| v.labels.to_map())
        .unwrap_or_default()
}

/// Waits until the volume's labels named in `want` have those values (None = absent).
async fn wait_volume(sim: &SimHandle, namespace: &str, pv: &str, want: &[(&str, Option<&str>)]) -> Labels {
    wait_for(&format!("volume {namespace}/{pv} labels {want:?}"), WAIT, || async {
        let got = sim_volume_labels(sim, namespace, pv);
        want.iter()
            .all(|(k, v)| got.get(*k).map(String::as_str) == *v)
            .then_some(got)
    })
    .await
}

fn add_storage_nodes(sim: &SimHandle) {
    for n in ["sos-1", "sos-2", "sos-3", "sos-4"] {
        sim.add_node(n, Health::Online).unwrap();
    }
}

#[tokio::test]
async fn pvc_labels_sync_replicas_failure_mode_and_unreserved_labels() {
    let ns = TestNamespace::new("pvc-label").await;
    let client = ns.client.clone();
    let class = format!("{}-sc", ns.name);
    let pv = format!("{}-pv", ns.name);
    let _cleanup = Cleanup {
        nodes: vec![],
        pvs: vec![pv.clone()],
        classes: vec![class.clone()],
    };
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    add_storage_nodes(&sim);
    let sc = storage_class(&client, &class).await;
    let controller = start(
        &sim,
        &["-pvc-label-resync-delay", "1s", "-pvc-label-resync-interval", "1h"],
        pvc_label::run,
    )
    .await;
    let pvcs = ns.api::<PersistentVolumeClaim>();
    bound_pvc(&ns, &sim, &class, "data", &pv, json!({"app": "web"}), json!({})).await;

    // Unreserved labels are applied (CSI and class-default labels untouched); the class UID is
    // recorded on the PVC.
    let got = wait_volume(&sim, &ns.name, &pv, &[("app", Some("web"))]).await;
    assert_eq!(got.get("storageos.com/replicas").map(String::as_str), Some("1"));
    assert_eq!(got.get("csi.storage.k8s.io/pv/name"), Some(&pv));
    let uid = sc.uid().unwrap();
    wait_for("the StorageClass UID annotation", WAIT, || async {
        let p = pvcs.get("data").await.ok()?;
        (p.annotations().get("storageos.com/storageclass") == Some(&uid)).then_some(())
    })
    .await;

    // Replicas and failure mode (intent, then threshold) follow the PVC labels.
    patch_labels(&pvcs, "data", json!({"storageos.com/replicas": "2"})).await;
    wait_volume(&sim, &ns.name, &pv, &[("storageos.com/replicas", Some("2"))]).await;
    patch_labels(&pvcs, "data", json!({"storageos.com/failure-mode": "soft"})).await;
    wait_volume(&sim, &ns.name, &pv, &[("storageos.com/failure-mode", Some("soft"))]).await;
    patch_labels(
        &pvcs,
        "data",
        json!({"storageos.com/failure-mode": "2", "tier": "gold"}),
    )
    .await;
    wait_volume(
        &sim,
        &ns.name,
        &pv,
        &[("storageos.com/failure-mode", Some("2")), ("tier", Some("gold"))],
    )
    .await;

    // Invalid values: an event, nothing reset (Go reset replicas to 0).
    patch_labels(
        &pvcs,
        "data",
        json!({"storageos.com/replicas": "lots", "storageos.com/failure-mode": "sometimes", "storageos.com/nocompress": "true"}),
    )
    .await;
    let ev = wait_event(&client, &ns.name, "data", "LabelNotSynced", "storageos.com/replicas").await;
    let msg = ev.message.unwrap_or_default();
    assert!(msg.contains("storageos.com/failure-mode"), "{msg}");
    assert!(
        !msg.contains("nocompress"),
        "create-time-only labels are ignored quietly: {msg}"
    );
    // Reconciles of one PVC never overlap: once a later change is synced, the reconcile that
    // reported the invalid values has finished, including any write it would have made.
    patch_labels(&pvcs, "data", json!({"probe": "1"})).await;
    wait_volume(&sim, &ns.name, &pv, &[("probe", Some("1"))]).await;
    let got = sim_volume_labels(&sim, &ns.name, &pv);
    assert_eq!(got.get("storageos.com/replicas").map(String::as_str), Some("2"));
    assert_eq!(got.get("storageos.com/failure-mode").map(String::as_str), Some("2"));

    // Removed labels fall back to the class (replicas 1) and the default (hard); the threshold
    // goes first so it never exceeds the replicas.
    patch_labels(
        &pvcs,
        "data",
        json!({"storageos.com/replicas": null, "storageos.com/failure-mode": null, "tier": null, "probe": null}),
    )
    .await;
    wait_volume(
        &sim,
        &ns.name,
        &pv,
        &[
            ("storageos.com/replicas", Some("1")),
            ("storageos.com/failure-mode", Some("hard")),
            ("tier", None),
            ("app", Some("web")),
        ],
    )
    .await;

    // A conflict is retried with backoff until it converges.
    sim.set_faults(Faults {
        fail_next: 2,
        status: 409,
        path: Some("/replicas".into()),
        ..Faults::default()
    });
    sim.clear_requests();
    patch_labels(&pvcs, "data", json!({"storageos.com/replicas": "3"})).await;
    wait_volume(&sim, &ns.name, &pv, &[("storageos.com/replicas", Some("3"))]).await;
    let attempts: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/replicas"))
        .map(|r| (r.status, r.injected))
        .collect();
    assert_eq!(attempts, vec![(409, true), (409, true), (202, false)]);

    // Idle with create-time-only class parameters and a PVC label: no retries, no writes (the
    // resync runs hourly here). A reconcile that has nothing to write writes nothing; an unknown
    // reserved key is reported, never sent, and its event proves the reconcile ran.
    sim.clear_requests();
    patch_labels(&pvcs, "data", json!({IDLE_PROBE: "x"})).await;
    wait_event(&ns.client, &ns.name, "data", "LabelNotSynced", IDLE_PROBE).await;
    let w = writes(&sim);
    assert!(w.is_empty(), "writes at idle: {w:?}");
    controller.abort();
}

#[tokio::test]
async fn pvc_label_resync_matches_pv_names_and_skips_a_changed_class() {
    let ns = TestNamespace::new("pvc-resync").await;
    let client = ns.client.clone();
    let class = format!("{}-sc", ns.name);
    let (pv1, pv2) = (format!("{}-pv1", ns.name), format!("{}-pv2", ns.name));
    let _cleanup = Cleanup {
        nodes: vec![],
        pvs: vec![pv1.clone(), pv2.clone()],
        classes: vec![class.clone()],
    };
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    add_storage_nodes(&sim);
    storage_class(&client, &class).await;
    // Made before the controller runs: the PVC name differs from the PV name, which the Go
    // resync confused (docs/api-manager.md).
    bound_pvc(&ns, &sim, &class, "db", &pv1, json!({"tier": "gold"}), json!({})).await;
    // Annotated with another class's UID, as if the class had been recreated.
    let mismatch = json!({"storageos.com/storageclass": "0000-not-the-class"});
    bound_pvc(&ns, &sim, &class, "old", &pv2, json!({"tier": "silver"}), mismatch).await;
    // Never bound: waits quietly.
    let unbound: PersistentVolumeClaim = from_json(json!({
        "metadata": {"name": "later", "labels": {"tier": "x"},
                     "annotations": {"volume.kubernetes.io/storage-provisioner": "csi.storageos.com"}},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }));
    let pvcs = ns.api::<PersistentVolumeClaim>();
    pvcs.create(&PostParams::default(), &unbound).await.unwrap();

    let controller = start(
        &sim,
        &["-pvc-label-resync-delay", "1s", "-pvc-label-resync-interval", "1s"],
        pvc_label::run,
    )
    .await;
    wait_volume(&sim, &ns.name, &pv1, &[("tier", Some("gold"))]).await;
    assert_no_writes_at_idle(&sim, VOLUME_POLL).await;
    assert_eq!(sim_volume_labels(&sim, &ns.name, &pv2).get("tier"), None);

    // A label change on the mismatching PVC: skipped with an event saying what to do.
    patch_labels(&pvcs, "old", json!({"tier": "bronze"})).await;
    wait_event(
        &client,
        &ns.name,
        "old",
        "StorageClassMismatch",
        "remove the annotation",
    )
    .await;
    assert!(writes(&sim).is_empty(), "{:?}", writes(&sim));

    // Removing the annotation re-enables sync (and records the current class).
    pvcs.patch(
        "old",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"storageos.com/storageclass": null}}})),
    )
    .await
    .unwrap();
    wait_volume(&sim, &ns.name, &pv2, &[("tier", Some("bronze"))]).await;
    let got: BTreeMap<String, String> = pvcs.get("old").await.unwrap().annotations().clone();
    assert!(got.contains_key("storageos.com/storageclass"), "{got:?}");
    controller.abort();
}
