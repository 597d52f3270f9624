//! Helpers shared by the fencer and node/namespace delete integration tests
//! (tests/k8s_fencing.rs, tests/k8s_gc.rs): cluster-scoped fixtures cleaned up on drop, the
//! maintenance signal, and events.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Event, Node, PersistentVolume};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttachment};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use storageos_operator::crd::StorageOSCluster;

use crate::support::{self, TestNamespace, from_json};

/// Controller logs in the test output (shown for failed tests; `RUST_LOG` overrides).
pub fn logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("storageos_operator=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// A short random suffix for cluster-scoped names.
pub fn suffix() -> String {
    format!("{:06}", rand::random::<u32>() % 1_000_000)
}

/// Cluster-scoped objects of one test, deleted when dropped (also on failure).
#[derive(Default)]
pub struct ClusterObjects {
    made: Mutex<Vec<(&'static str, String)>>,
}

impl ClusterObjects {
    fn remember(&self, kind: &'static str, name: &str) {
        self.made.lock().unwrap().push((kind, name.to_string()));
    }

    /// Creates a Node with these annotations (not managed by kwok: no kubelet, no heartbeat).
    pub async fn node(&self, client: &Client, name: &str, annotations: serde_json::Value) -> Node {
        let node: Node = from_json(json!({
            "metadata": {"name": name, "annotations": annotations, "labels": {"storageos-operator-test": "true"}}
        }));
        self.remember("Node", name);
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap()
    }

    /// Creates a StorageClass of the StorageOS provisioner.
    pub async fn storage_class(&self, client: &Client, name: &str) {
        let sc: StorageClass = from_json(json!({
            "metadata": {"name": name},
            "provisioner": "csi.storageos.com",
            "reclaimPolicy": "Retain",
            "volumeBindingMode": "Immediate"
        }));
        self.remember("StorageClass", name);
        Api::<StorageClass>::all(client.clone())
            .create(&PostParams::default(), &sc)
            .await
            .unwrap();
    }

    /// Creates a pre-provisioned PV bound to claim `ns/claim`: a StorageOS CSI volume, or a
    /// host path volume when `storageos` is false.
    pub async fn pv(&self, client: &Client, name: &str, class: &str, ns: &str, claim: &str, storageos: bool) {
        let source = if storageos {
            json!({"csi": {"driver": "csi.storageos.com", "volumeHandle": format!("handle-{name}")}})
        } else {
            json!({"hostPath": {"path": format!("/tmp/{name}")}})
        };
        let mut spec = json!({
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": class,
            "claimRef": {"namespace": ns, "name": claim}
        });
        spec.as_object_mut()
            .unwrap()
            .extend(source.as_object().unwrap().clone());
        let pv: PersistentVolume = from_json(json!({"metadata": {"name": name}, "spec": spec}));
        self.remember("PersistentVolume", name);
        Api::<PersistentVolume>::all(client.clone())
            .create(&PostParams::default(), &pv)
            .await
            .unwrap();
    }

    /// Creates a VolumeAttachment of the StorageOS attacher on `node`, for `pv` (or an inline
    /// volume when `pv` is None).
    pub async fn attachment(&self, client: &Client, name: &str, node: &str, pv: Option<&str>) {
        let source = match pv {
            Some(pv) => json!({"persistentVolumeName": pv}),
            None => json!({"inlineVolumeSpec": {
                "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": "csi.storageos.com", "volumeHandle": "inline"}
            }}),
        };
        let va: VolumeAttachment = from_json(json!({
            "metadata": {"name": name},
            "spec": {"attacher": "csi.storageos.com", "nodeName": node, "source": source}
        }));
        self.remember("VolumeAttachment", name);
        Api::<VolumeAttachment>::all(client.clone())
            .create(&PostParams::default(), &va)
            .await
            .unwrap();
    }
}

impl Drop for ClusterObjects {
    fn drop(&mut self) {
        let made = std::mem::take(&mut *self.made.lock().unwrap());
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                let client = support::client().await;
                let dp = DeleteParams::background();
                for (kind, name) in made {
                    let _ = match kind {
                        "Node" => Api::<Node>::all(client.clone()).delete(&name, &dp).await.map(|_| ()),
                        "StorageClass" => Api::<StorageClass>::all(client.clone())
                            .delete(&name, &dp)
                            .await
                            .map(|_| ()),
                        "PersistentVolume" => Api::<PersistentVolume>::all(client.clone())
                            .delete(&name, &dp)
                            .await
                            .map(|_| ()),
                        _ => Api::<VolumeAttachment>::all(client.clone())
                            .delete(&name, &dp)
                            .await
                            .map(|_| ()),
                    };
                }
            });
        })
        .join();
    }
}

/// What every test here starts with: the cross-process [`support::cluster_lock`] (maintenance is
/// cluster-wide and the upgrade tests switch it on; they hold the same lock), the CRDs, no
/// maintenance left by a killed run, and logs.
pub async fn exclusive() -> support::ClusterLock {
    let lock = support::cluster_lock();
    // As where the api-manager runs: without the CRD, maintenance cannot be read and the
    // controllers hold back their deletes.
    support::install_crds(&support::client().await).await;
    no_maintenance().await;
    logs();
    lock
}

/// Waits (up to two minutes) until no upgrade holds the cluster in maintenance.
async fn no_maintenance() {
    use storageos_operator::apimanager::maintenance::{self, Maintenance};
    let client = support::client().await;
    support::wait_for(
        "other tests' upgrades to end (maintenance is cluster-wide)",
        std::time::Duration::from_secs(120),
        || async { matches!(maintenance::current(&client).await, Ok(Maintenance::Off)).then_some(()) },
    )
    .await;
}

/// Puts the cluster in maintenance: a paused StorageOSCluster in `ns` annotated as paused by
/// upgrade `upgrade` (no operator acts on a paused cluster).
pub async fn start_maintenance(ns: &TestNamespace, upgrade: &str) {
    let c: StorageOSCluster = from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
        "metadata": {"name": "maintenance", "annotations": {"storageos.com/paused-by-upgrade": upgrade}},
        "spec": {"secretRefName": "storageos-api", "secretRefNamespace": ns.name, "pause": true}
    }));
    ns.api::<StorageOSCluster>()
        .create(&PostParams::default(), &c)
        .await
        .unwrap();
}

/// Ends the maintenance [`start_maintenance`] began (deletes the cluster, finalizers included).
pub async fn end_maintenance(ns: &TestNamespace) {
    let api = ns.api::<StorageOSCluster>();
    let _ = api
        .patch(
            "maintenance",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": null, "annotations": {"storageos.com/paused-by-upgrade": null}}}),
            ),
        )
        .await;
    let _ = api.delete("maintenance", &DeleteParams::background()).await;
}

/// Events in `namespace` about the object `kind/name` with this reason (cluster-scoped objects
/// have theirs in `default`).
pub async fn events(client: &Client, namespace: &str, kind: &str, name: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some(kind) && e.reason.as_deref() == Some(reason))
        .collect()
}

/// The message of an event.
pub fn message(e: &Event) -> String {
    e.message.clone().unwrap_or_default()
}

/// Names of the objects in a list.
pub fn names<K: ResourceExt>(items: &[K]) -> Vec<String> {
    items.iter().map(ResourceExt::name_any).collect()
}
