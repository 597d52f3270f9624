//! Integration tier: the fault matrix. Each fault lands at an observable point (the first object
//! a reconcile applies, an upgrade's persisted phase, a pod fenced while another waits) and each
//! test asserts that nothing was lost and nothing was done wrongly or twice: the operator's and
//! the api-manager's deletes are counted from the apiserver's audit log, their StorageOS writes
//! from the simulator's request log.
//!
//! These tests restart the kube-apiserver, so they run on a control plane of their own, which
//! `support::faults` starts (with `hack/k8s.sh up`, on free ports) and stops when the process
//! ends; they run one at a time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use storageos_operator::cluster::PAUSED_BY_ANNOTATION;
use storageos_operator::crd::{ScaledApp, StorageOSCluster, StorageOSUpgrade, UpgradePhase};
use storageos_operator::sim::{self, Faults, SimHandle, Simulator};
use storageos_operator::storageos::Health;
use storageos_operator::upgrade::apps::REPLICAS_ANNOTATION;
use storageos_operator::upgrade::nodes::{NODE_DAEMONSET, node_image};
use support::faults::{self, ApiManagerHome, CLUSTER};
use support::identity::{API_MANAGER, OPERATOR};
use support::operator::StorageOS;
use support::{ClusterObjects, TestNamespace, from_json, suffix, wait_for};

/// Long enough for anything on a loaded two-core machine; the tests never wait this long when
/// things work.
const SETTLE: Duration = Duration::from_secs(150);
const OLD_IMAGE: &str = "storageos/node:v2.9.0";
const NEW_IMAGE: &str = "storageos/node:v2.10.0";
/// The operator's lease (15 s) runs out before a standby can take over from a killed leader.
const TAKEOVER: Duration = Duration::from_secs(60);

/// Waits for the reconcile's first children in the cluster's namespace while the cluster is not
/// yet Running: the point "mid-reconcile" at which the tests inject their fault.
async fn mid_reconcile(ns: &TestNamespace) -> BTreeMap<String, String> {
    let first = wait_for("the reconcile's first child objects", SETTLE, || async {
        let seen = faults::children(ns).await;
        (!seen.is_empty()).then_some(seen)
    })
    .await;
    let state = faults::cluster_state(ns).await;
    assert!(
        state.as_ref().is_none_or(|(phase, _, _)| phase != "Running"),
        "the fault was meant to land mid-reconcile, but the cluster is already Running: {state:?}"
    );
    first
}

/// Asserts what a fault during a reconcile must not cause: every child seen before the fault
/// still exists with the same UID, the operator deleted nothing, and no StorageOS write was
/// made twice.
async fn assert_nothing_lost_or_repeated(
    ns: &TestNamespace,
    before: &BTreeMap<String, String>,
    since: chrono::DateTime<Utc>,
    sim: &SimHandle,
) {
    let after = faults::children(ns).await;
    for (child, uid) in before {
        assert_eq!(
            after.get(child),
            Some(uid),
            "{child} was deleted (or replaced) after the fault"
        );
    }
    let deleted = faults::deletes_by(OPERATOR, since);
    assert!(deleted.is_empty(), "the operator deleted {deleted:?}");
    assert_no_write_twice(sim);
}

/// Asserts the simulator saw no state-changing StorageOS request twice.
fn assert_no_write_twice(sim: &SimHandle) {
    let mut writes: BTreeMap<String, usize> = BTreeMap::new();
    for w in faults::storageos_writes(sim) {
        *writes.entry(w).or_insert(0) += 1;
    }
    let twice: Vec<_> = writes.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "StorageOS writes made more than once: {twice:?}");
}

/// A Deployment `web` (2 replicas) on a claim bound to a StorageOS volume; waits until it is
/// ready.
async fn storageos_app(ns: &TestNamespace) -> PersistentVolume {
    let pv: PersistentVolume = from_json(json!({
        "metadata": {"name": format!("{}-web", ns.name)},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                 "storageClassName": "", "persistentVolumeReclaimPolicy": "Retain",
                 "csi": {"driver": "csi.storageos.com", "volumeHandle": format!("{}-web", ns.name)},
                 "claimRef": {"namespace": ns.name, "name": "web-data"}}
    }));
    let pv = Api::<PersistentVolume>::all(ns.client.clone())
        .create(&PostParams::default(), &pv)
        .await
        .unwrap();
    let pvc: PersistentVolumeClaim = from_json(json!({
        "metadata": {"name": "web-data"},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv.name_any(),
                 "resources": {"requests": {"storage": "1Gi"}}}
    }));
    ns.api::<PersistentVolumeClaim>()
        .create(&PostParams::default(), &pvc)
        .await
        .unwrap();
    let d: Deployment = from_json(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "registry.invalid/app:1"}],
                                       "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "web-data"}}]}}}
    }));
    ns.api::<Deployment>().create(&PostParams::default(), &d).await.unwrap();
    wait_for("the application to be ready", SETTLE, || async {
        let d = ns.api::<Deployment>().get("web").await.ok()?;
        (d.status?.ready_replicas == Some(2)).then_some(())
    })
    .await;
    pv
}

/// The upgrade's persisted phase.
async fn phase(ns: &TestNamespace, name: &str) -> Option<UpgradePhase> {
    ns.api::<StorageOSUpgrade>().get(name).await.ok()?.status?.phase
}

async fn wait_phase(ns: &TestNamespace, name: &str, want: UpgradePhase) {
    wait_for(&format!("upgrade {name} to reach {want:?}"), SETTLE, || async {
        (phase(ns, name).await == Some(want)).then_some(())
    })
    .await;
}

/// A Running cluster's operator (as its ServiceAccount, with `--upgrade-step-delay 1s`) and
/// simulator, for the apiserver restart tests.
struct Restarts {
    ns: TestNamespace,
    storageos: StorageOS,
    _operator: faults::Process,
    _dir: tempfile::TempDir,
}

impl Restarts {
    async fn start(prefix: &str) -> Self {
        let ns = TestNamespace::new(prefix).await;
        faults::clear_clusters(&ns.client).await;
        let storageos = StorageOS::start(&ns.client).await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = support::operator_kubeconfig(dir.path()).await;
        let operator = faults::operator(&kubeconfig, &storageos.sim, prefix, &["--upgrade-step-delay", "1s"]);
        Self {
            ns,
            storageos,
            _operator: operator,
            _dir: dir,
        }
    }
}

/// kube-apiserver restarted while the operator reconciles a new cluster (after its first
/// children appear): the cluster becomes 3/3 Running and Ready, nothing seen before the restart
/// is deleted or replaced, the operator deletes nothing and repeats no StorageOS write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_restarted_mid_reconcile_the_cluster_becomes_ready_and_nothing_is_lost() {
    let _lock = faults::exclusive().await;
    let plane = faults::own_plane();
    let r = Restarts::start("fault-apiserver").await;
    let since = Utc::now();
    faults::create_cluster(&r.ns, OLD_IMAGE).await;
    let before = mid_reconcile(&r.ns).await;
    plane.restart_apiserver().await;
    faults::wait_running(&r.ns, SETTLE).await;
    assert_nothing_lost_or_repeated(&r.ns, &before, since, &r.storageos.sim).await;
    faults::delete_cluster(&r.ns).await;
}

/// kube-apiserver restarted twice during an upgrade, in ScalingDown and in UpgradingNodes (by
/// the upgrade's persisted phase): the upgrade completes with the application's original
/// replicas recorded once and restored, and nothing is deleted that should stay or deleted
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_restarted_mid_upgrade_the_upgrade_completes_and_nothing_is_lost() {
    let _lock = faults::exclusive().await;
    let plane = faults::own_plane();
    let r = Restarts::start("fault-upgrade").await;
    let ns = &r.ns;
    faults::create_cluster(ns, OLD_IMAGE).await;
    faults::wait_running(ns, SETTLE).await;
    let pv = storageos_app(ns).await;
    let before = faults::children(ns).await;
    let since = Utc::now();
    let upgrade: StorageOSUpgrade = from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSUpgrade",
        "metadata": {"name": "up"}, "spec": {"newImage": NEW_IMAGE}
    }));
    let upgrades = ns.api::<StorageOSUpgrade>();
    upgrades.create(&PostParams::default(), &upgrade).await.unwrap();
    for fault_in in [UpgradePhase::ScalingDown, UpgradePhase::UpgradingNodes] {
        wait_phase(ns, "up", fault_in).await;
        plane.restart_apiserver().await;
    }
    wait_phase(ns, "up", UpgradePhase::Completed).await;

    let status = upgrades.get("up").await.unwrap().status.unwrap();
    assert_eq!(
        status.scaled_apps.unwrap_or_default(),
        [ScaledApp {
            kind: "Deployment".into(),
            namespace: ns.name.clone(),
            name: "web".into(),
            replicas: 2
        }],
        "the application is recorded once, with its original replicas"
    );
    let web = ns.api::<Deployment>().get("web").await.unwrap();
    assert_eq!(
        web.spec.as_ref().unwrap().replicas,
        Some(2),
        "the application is restored"
    );
    assert!(!web.annotations().contains_key(REPLICAS_ANNOTATION));
    let ds = ns.api::<DaemonSet>().get(NODE_DAEMONSET).await.unwrap();
    assert_eq!(
        node_image(ds.spec.as_ref().and_then(|s| s.template.spec.as_ref())),
        Some(NEW_IMAGE)
    );
    // Deleted: only node pods (each once) and the image puller DaemonSet (once).
    let deleted = faults::deletes_by(OPERATOR, since);
    for (object, times) in &deleted {
        assert_eq!(*times, 1, "{object} deleted {times} times: {deleted:?}");
        let expected = object.starts_with(&format!("pods {}/{NODE_DAEMONSET}-", ns.name))
            || object == &format!("daemonsets {}/up-image-puller", ns.name);
        assert!(expected, "the upgrade deleted {object}: {deleted:?}");
    }
    let after = faults::children(ns).await;
    for (child, uid) in &before {
        assert_eq!(after.get(child), Some(uid), "{child} was deleted during the upgrade");
    }

    // Deleting the completed upgrade leaves maintenance; the cluster runs on.
    upgrades.delete("up", &DeleteParams::default()).await.unwrap();
    wait_for("maintenance to end", SETTLE, || async {
        let c = ns.api::<StorageOSCluster>().get(CLUSTER).await.ok()?;
        (!c.annotations().contains_key(PAUSED_BY_ANNOTATION)).then_some(())
    })
    .await;
    faults::wait_running(ns, SETTLE).await;
    assert_no_write_twice(&r.storageos.sim);
    faults::delete_cluster(ns).await;
    let _ = Api::<PersistentVolume>::all(ns.client.clone())
        .delete(&pv.name_any(), &DeleteParams::default())
        .await;
}

/// Two operator replicas; the leader is SIGKILLed after the reconcile's first children appear:
/// the standby takes the Lease over and finishes (3/3 Running, Ready), deleting nothing and
/// repeating no StorageOS write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_leader_killed_mid_reconcile_the_standby_finishes() {
    let _lock = faults::exclusive().await;
    let ns = TestNamespace::new("fault-operator").await;
    faults::clear_clusters(&ns.client).await;
    let storageos = StorageOS::start(&ns.client).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = support::operator_kubeconfig(dir.path()).await;
    let since = Utc::now();
    let lease = storageos_operator::operator::LEASE_NAME;
    let lease_ns = storageos_operator::install::NAMESPACE;
    let mut leader = faults::operator(&kubeconfig, &storageos.sim, "replica-a", &[]);
    wait_for("replica-a to lead", TAKEOVER, || async {
        let holder = faults::lease_holder(&ns.client, lease_ns, lease).await?;
        (holder == "replica-a").then_some(())
    })
    .await;
    let _standby = faults::operator(&kubeconfig, &storageos.sim, "replica-b", &[]);

    faults::create_cluster(&ns, OLD_IMAGE).await;
    let before = mid_reconcile(&ns).await;
    leader.kill();
    faults::wait_running(&ns, SETTLE).await;
    assert_eq!(
        faults::lease_holder(&ns.client, lease_ns, lease).await.as_deref(),
        Some("replica-b"),
        "the standby finished the reconcile"
    );
    assert_nothing_lost_or_repeated(&ns, &before, since, &storageos.sim).await;
    faults::delete_cluster(&ns).await;
}

/// One fencing world of its own: Kubernetes Nodes (no kubelet) registered online in a simulator
/// that knows nothing else, PVCs on StorageOS volumes and opted-in pods.
struct Fencing {
    ns: TestNamespace,
    sim: SimHandle,
    objects: ClusterObjects,
    class: String,
    id: String,
}

impl Fencing {
    async fn new(ns: TestNamespace, sim: SimHandle) -> Self {
        let id = suffix();
        let objects = ClusterObjects::default();
        let class = format!("t-fault-{id}");
        objects.storage_class(&ns.client, &class).await;
        Self {
            ns,
            sim,
            objects,
            class,
            id,
        }
    }

    /// Registers a Kubernetes Node and an online StorageOS node of the same name.
    async fn node(&self, short: &str) -> String {
        let name = format!("fault-{}-{short}", self.id);
        self.objects.node(&self.ns.client, &name, json!({})).await;
        self.sim.add_node(&name, Health::Online).unwrap();
        name
    }

    /// PVC `claim` on a StorageOS PV; its volume is registered in StorageOS (master on
    /// `master`) unless `master` is None. The PV's name.
    async fn claim(&self, claim: &str, master: Option<&str>) -> String {
        let pv = format!("pv-{}-{claim}", self.id);
        self.objects
            .pv(&self.ns.client, &pv, &self.class, &self.ns.name, claim, true)
            .await;
        let pvc: PersistentVolumeClaim = from_json(json!({
            "metadata": {"name": claim},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": self.class, "volumeName": pv,
                     "resources": {"requests": {"storage": "1Gi"}}}
        }));
        self.ns
            .api::<PersistentVolumeClaim>()
            .create(&PostParams::default(), &pvc)
            .await
            .unwrap();
        if let Some(master) = master {
            self.volume(claim, &pv, master);
        }
        pv
    }

    /// Registers the StorageOS volume of `claim` (PV `pv`), its master on `master`.
    fn volume(&self, claim: &str, pv: &str, master: &str) {
        self.sim
            .add_volume(support::seed::volume(&self.ns.name, pv, claim, master))
            .unwrap();
    }

    /// An opted-in pod on `node` mounting `claim`, and a StorageOS VolumeAttachment for it.
    async fn pod(&self, name: &str, node: &str, claim: &str, pv: &str) {
        let pod: Pod = from_json(json!({
            "metadata": {"name": name, "labels": {"storageos.com/fenced": "true"}},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                     "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]}
        }));
        self.ns.api::<Pod>().create(&PostParams::default(), &pod).await.unwrap();
        let va = format!("csi-{}-{name}", self.id);
        self.objects.attachment(&self.ns.client, &va, node, Some(pv)).await;
    }

    async fn pod_exists(&self, name: &str) -> bool {
        self.ns.api::<Pod>().get_opt(name).await.unwrap().is_some()
    }

    /// Waits until the fencer has listed the StorageOS nodes (and so seen them online).
    async fn polled(&self) {
        support::apimanager::fencer_polled(&self.sim, SETTLE).await;
    }
}

/// The api-manager's flags in the fencing tests.
const FENCING_FLAGS: &[&str] = &[
    "-node-poll-interval=5s",
    "-node-fencer-retry-interval=1s",
    "-node-fencer-timeout=5m",
];

/// Two api-manager replicas; the node goes offline and the leader fences the first pod while the
/// second waits (its volume is not known to StorageOS yet). Then the leader is SIGKILLed, the
/// volume appears, and the standby takes over and fences the second pod. Each pod and each
/// VolumeAttachment is deleted exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_manager_leader_killed_mid_fencing_the_standby_finishes_and_nothing_twice() {
    let _lock = faults::exclusive().await;
    let ns = TestNamespace::new("fault-fence").await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let w = Fencing::new(ns, sim).await;
    let lost = w.node("lost").await;
    let healthy = w.node("healthy").await;
    w.node("other").await;
    let pv_first = w.claim("first", Some(&healthy)).await;
    let pv_second = w.claim("second", None).await;
    w.pod("first", &lost, "first", &pv_first).await;
    w.pod("second", &lost, "second", &pv_second).await;

    let home = ApiManagerHome::new(&w.ns).await;
    let since = Utc::now();
    let flags: Vec<&str> = [&["-enable-leader-election"], FENCING_FLAGS].concat();
    let lease = storageos_operator::apimanager::run::LEASE_NAME;
    let mut leader = home.replica(&w.sim, "replica-a", &flags);
    wait_for("replica-a to lead", TAKEOVER, || async {
        (faults::lease_holder(&w.ns.client, &w.ns.name, lease).await? == "replica-a").then_some(())
    })
    .await;
    let _standby = home.replica(&w.sim, "replica-b", &flags);
    w.polled().await;

    w.sim.set_health(&lost, Health::Offline).unwrap();
    wait_for(
        "the first pod fenced while the second waits (FencingSkipped)",
        SETTLE,
        || async {
            let skipped = support::events(&w.ns.client, &w.ns.name, Some("Pod"), "second", "FencingSkipped").await;
            (!w.pod_exists("first").await && !skipped.is_empty()).then_some(())
        },
    )
    .await;
    assert!(w.pod_exists("second").await);
    leader.kill();
    w.volume("second", &pv_second, &healthy);
    wait_for("the standby to fence the second pod", SETTLE, || async {
        (!w.pod_exists("second").await).then_some(())
    })
    .await;
    assert_eq!(
        faults::lease_holder(&w.ns.client, &w.ns.name, lease).await.as_deref(),
        Some("replica-b")
    );
    let ns = &w.ns.name;
    let expected: BTreeMap<String, usize> = [
        format!("pods {ns}/first"),
        format!("pods {ns}/second"),
        format!("volumeattachments /csi-{}-first", w.id),
        format!("volumeattachments /csi-{}-second", w.id),
    ]
    .into_iter()
    .map(|k| (k, 1))
    .collect();
    // The pod is gone before its attachment's delete is in the audit log (the fencer deletes
    // the attachments after the pod, and the apiserver writes the log in batches).
    let deleted = wait_for("the attachments' deletes in the audit log", SETTLE, || async {
        let deleted = faults::deletes_by(API_MANAGER, since);
        expected.keys().all(|k| deleted.contains_key(k)).then_some(deleted)
    })
    .await;
    assert_eq!(deleted, expected, "each pod and attachment deleted exactly once");
}

/// How long the StorageOS API is down.
const OUTAGE: Duration = Duration::from_secs(60);

/// The StorageOS API answers every request with 503 for 60 s, while the cluster runs and the
/// api-manager fences, deletes and garbage-collects against it: no pod is fenced, no StorageOS
/// object is deleted; once it is back, the cluster is Ready again and fencing works, within the
/// controllers' backoff cap (5 minutes; it is far quicker).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storageos_api_down_for_60s_nothing_fenced_or_deleted_then_recovers() {
    let _lock = faults::exclusive().await;
    let ns = TestNamespace::new("fault-outage").await;
    faults::clear_clusters(&ns.client).await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    // StorageOS nodes for the cluster's node pods, as in a cluster.
    let sync = sim.sync_with_kubernetes(ns.client.clone());
    let w = Fencing::new(ns, sim).await;
    let lost = w.node("lost").await;
    let healthy = w.node("healthy").await;
    w.node("other").await;
    let pv = w.claim("data", Some(&healthy)).await;
    w.pod("app", &lost, "data", &pv).await;
    let home = ApiManagerHome::new(&w.ns).await;
    let gc = [
        "-node-delete-gc-delay=0s",
        "-node-delete-gc-interval=5s",
        "-namespace-delete-gc-delay=0s",
        "-namespace-delete-gc-interval=5s",
    ];
    let flags: Vec<&str> = [FENCING_FLAGS, &gc].concat();
    let _api_manager = home.replica(&w.sim, "outage", &flags);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = support::operator_kubeconfig(dir.path()).await;
    let _operator = faults::operator(&kubeconfig, &w.sim, "outage", &[]);
    // The cluster's operands in a namespace of their own (its webhook Service is not ours).
    let cluster_ns = TestNamespace::new("fault-outage-c").await;
    faults::create_cluster(&cluster_ns, OLD_IMAGE).await;
    faults::wait_running(&cluster_ns, SETTLE).await;
    w.polled().await;
    let nodes_before: Vec<String> = w.sim.nodes().into_iter().map(|n| n.name.to_string()).collect();
    let namespaces_before: Vec<String> = w.sim.namespaces().into_iter().map(|n| n.name.to_string()).collect();

    // Down: every StorageOS request fails with 503.
    let down_from = w.sim.requests().len();
    w.sim.set_faults(Faults {
        fail_next: u32::MAX,
        status: 503,
        error: Some("StorageOS is down (fault test)".into()),
        ..Faults::default()
    });
    wait_for("the controllers to meet the outage", SETTLE, || async {
        let failed = w.sim.requests()[down_from..].iter().filter(|r| r.injected).count();
        (failed >= 3).then_some(())
    })
    .await;
    tokio::time::sleep(OUTAGE).await; // the fault's duration, not a synchronisation
    w.sim.set_faults(Faults::default());
    let back_from = w.sim.requests().len();
    assert!(
        w.sim.requests()[down_from..back_from]
            .iter()
            .filter(|r| r.injected)
            .count()
            > 10,
        "the controllers kept calling during the outage"
    );

    // Back: the cluster is Ready again, then fencing works.
    faults::wait_running(&cluster_ns, Duration::from_secs(300) + Duration::from_secs(60)).await;
    wait_for("the fencer to poll again", SETTLE, || async {
        w.sim.requests()[back_from..]
            .iter()
            .any(|r| r.method == "GET" && r.path == "/v2/nodes" && r.status == 200)
            .then_some(())
    })
    .await;
    assert!(w.pod_exists("app").await, "a pod was fenced during the outage");
    let deletes: Vec<String> = w
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .map(|r| r.path)
        .collect();
    assert!(deletes.is_empty(), "StorageOS objects were deleted: {deletes:?}");
    let nodes_after: Vec<String> = w.sim.nodes().into_iter().map(|n| n.name.to_string()).collect();
    let namespaces_after: Vec<String> = w.sim.namespaces().into_iter().map(|n| n.name.to_string()).collect();
    assert_eq!(nodes_after, nodes_before);
    assert_eq!(namespaces_after, namespaces_before);

    w.sim.set_health(&lost, Health::Offline).unwrap();
    wait_for("the pod to be fenced after the API came back", SETTLE, || async {
        (!w.pod_exists("app").await).then_some(())
    })
    .await;
    faults::delete_cluster(&cluster_ns).await;
    sync.abort();
}

/// Pods are created one after another while the webhook certificate Secret is deleted: every
/// create is admitted (the hook fails open), the api-manager issues a new certificate and
/// injects its CA, and pods are mutated again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_secret_deleted_while_pods_are_created_no_create_is_blocked() {
    let _lock = faults::exclusive().await;
    let ns = TestNamespace::new("fault-webhook").await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    // A claim of a StorageOS class: the pods mounting it get the StorageOS scheduler.
    let objects = ClusterObjects::default();
    let class = format!("t-fault-{}", suffix());
    objects.storage_class(&ns.client, &class).await;
    let pvc: PersistentVolumeClaim = from_json(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                 "resources": {"requests": {"storage": "1Gi"}}}
    }));
    ns.api::<PersistentVolumeClaim>()
        .create(&PostParams::default(), &pvc)
        .await
        .unwrap();
    let home = ApiManagerHome::new(&ns).await;
    let _api_manager = home.replica(&sim, "webhook", &["-webhook-cert-refresh-interval=1s"]);
    let first_ca = home.serving_ca().await;

    let pods = ns.api::<Pod>();
    let mut n = 0;
    let mut create = || {
        n += 1;
        let pod: Pod = from_json(json!({
            "metadata": {"name": format!("p{n}")},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/app:1"}],
                     "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
        }));
        let pods = pods.clone();
        async move {
            pods.create(&PostParams::default(), &pod)
                .await
                .unwrap_or_else(|e| panic!("pod create blocked: {e}"))
        }
    };
    let mutated = |p: &Pod| p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some("storageos-scheduler");
    // The webhook answers before the fault.
    let mut seen_mutated = false;
    for _ in 0..50 {
        if mutated(&create().await) {
            seen_mutated = true;
            break;
        }
    }
    assert!(seen_mutated, "the webhook never mutated a pod before the fault");

    let secrets = ns.api::<Secret>();
    secrets
        .delete("storageos-webhook", &DeleteParams::default())
        .await
        .unwrap();
    // Keep creating until a new certificate is issued and its CA injected, then until a pod is
    // mutated again (served with the new certificate).
    let mut created_during = 0;
    let new_ca = loop {
        create().await;
        created_during += 1;
        if let Some(ca) = new_ca(&secrets).await.filter(|ca| *ca != first_ca) {
            break ca;
        }
        assert!(created_during < 10_000, "no new certificate was issued");
    };
    assert_ne!(new_ca, first_ca);
    let again = home.serving_ca().await;
    assert_eq!(again, new_ca);
    let mut mutated_again = false;
    for _ in 0..100 {
        if mutated(&create().await) {
            mutated_again = true;
            break;
        }
    }
    assert!(mutated_again, "pods are not mutated with the new certificate");
    eprintln!("{created_during} pods created while the certificate was re-issued");
}

/// The CA in the webhook Secret, if it exists.
async fn new_ca(secrets: &Api<Secret>) -> Option<String> {
    let s = secrets.get_opt("storageos-webhook").await.ok()??;
    String::from_utf8(s.data?.get("ca-cert.pem")?.0.clone()).ok()
}
