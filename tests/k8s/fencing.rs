//! Integration tier: the fencer on the real control plane with an in-process StorageOS
//! simulator. Each test has its own Nodes (not managed by kwok), StorageClass, PVs, PVCs, pods
//! and VolumeAttachments, and its own simulator that knows only its nodes and volumes, so the
//! fencer of one test never touches another test's pods.
//!
//! Maintenance (an upgrade in progress) is cluster-wide and tests/k8s/upgrade.rs switches it on,
//! so every test here holds the cross-process [`support::cluster_lock`] the upgrade and cluster
//! tests hold: the tests run one at a time, and never during an upgrade test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use storageos_operator::apimanager::controllers::fencing;
use storageos_operator::reasons;
use storageos_operator::sim::{self, Faults, SimHandle, Simulator};
use storageos_operator::storageos::Health;
use support::{
    ClusterObjects, TestNamespace, end_maintenance, events, from_json, message, start_maintenance, suffix, wait_for,
};

pub(crate) const POLL: Duration = Duration::from_secs(5);
pub(crate) const FLAGS: &[&str] = &[
    "-node-poll-interval",
    "5s",
    "-node-fencer-retry-interval",
    "1s",
    "-node-fencer-timeout",
    "30s",
];

/// One test's world: the plane, its simulator and its cluster-scoped objects.
pub(crate) struct World {
    pub(crate) ns: TestNamespace,
    pub(crate) client: Client,
    pub(crate) sim: SimHandle,
    pub(crate) objects: ClusterObjects,
    class: String,
    pub(crate) id: String,
}

impl World {
    pub(crate) async fn new(prefix: &str) -> Self {
        Self::with_sim(prefix, Simulator::start(sim::Config::default()).await.unwrap()).await
    }

    /// A world around a simulator started elsewhere.
    pub(crate) async fn with_sim(prefix: &str, sim: SimHandle) -> Self {
        let ns = TestNamespace::new(prefix).await;
        let client = ns.client.clone();
        let id = suffix();
        let objects = ClusterObjects::default();
        let class = format!("t-fence-{id}");
        objects.storage_class(&client, &class).await;
        Self {
            ns,
            client,
            sim,
            objects,
            class,
            id,
        }
    }

    /// A unique node name, registered in Kubernetes (if `k8s`) and in StorageOS (online).
    pub(crate) async fn node(&self, short: &str, k8s: bool) -> String {
        let name = format!("fence-{}-{short}", self.id);
        if k8s {
            self.objects.node(&self.client, &name, json!({})).await;
        }
        self.sim.add_node(&name, Health::Online).unwrap();
        name
    }

    /// PVC `claim` bound to a pre-provisioned PV `pv-<claim>` (StorageOS CSI unless
    /// `storageos` is false), optionally with the StorageOS provisioner annotation (dynamic
    /// provisioning), and the StorageOS volume with its master on `master`.
    pub(crate) async fn claim(&self, claim: &str, storageos: bool, annotated: bool, master: &str) -> String {
        let pv = format!("pv-{}-{claim}", self.id);
        self.objects
            .pv(&self.client, &pv, &self.class, &self.ns.name, claim, storageos)
            .await;
        let annotations = if annotated {
            json!({"volume.beta.kubernetes.io/storage-provisioner": "csi.storageos.com"})
        } else {
            json!({})
        };
        let pvc: PersistentVolumeClaim = from_json(json!({
            "metadata": {"name": claim, "annotations": annotations},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": self.class,
                "volumeName": pv,
                "resources": {"requests": {"storage": "1Gi"}}
            }
        }));
        self.ns
            .api::<PersistentVolumeClaim>()
            .create(&PostParams::default(), &pvc)
            .await
            .unwrap();
        if storageos {
            self.sim
                .add_volume(support::seed::volume(&self.ns.name, &pv, claim, master))
                .unwrap();
        }
        pv
    }

    /// A pod on `node` mounting `claims`, opted into fencing with `fenced` (label omitted if None).
    pub(crate) async fn pod(&self, name: &str, node: &str, fenced: Option<&str>, claims: &[&str]) {
        let labels = match fenced {
            Some(v) => json!({"storageos.com/fenced": v}),
            None => json!({}),
        };
        let volumes: Vec<_> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        let pod: Pod = from_json(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                "volumes": volumes
            }
        }));
        self.ns.api::<Pod>().create(&PostParams::default(), &pod).await.unwrap();
    }

    pub(crate) async fn attachment(&self, short: &str, node: &str, pv: Option<&str>) -> String {
        let name = format!("csi-{}-{short}", self.id);
        self.objects.attachment(&self.client, &name, node, pv).await;
        name
    }

    pub(crate) async fn pod_exists(&self, name: &str) -> bool {
        self.ns.api::<Pod>().get_opt(name).await.unwrap().is_some()
    }

    pub(crate) async fn attachment_exists(&self, name: &str) -> bool {
        Api::<VolumeAttachment>::all(self.client.clone())
            .get_opt(name)
            .await
            .unwrap()
            .is_some()
    }

    /// Waits until the fencer has listed the StorageOS nodes once (it saw them online).
    pub(crate) async fn polled(&self) {
        support::apimanager::fencer_polled(&self.sim, Duration::from_secs(60)).await;
    }

    /// A world with nodes `lost` and `healthy`, PVC `data` (master on `healthy`) and the
    /// opted-in pod `app` on `lost`; the world, `lost` and the PV.
    async fn one_pod_on_a_node_to_lose(prefix: &str) -> (Self, String, String) {
        let w = Self::new(prefix).await;
        let lost = w.node("lost", true).await;
        let healthy = w.node("healthy", true).await;
        let pv = w.claim("data", true, false, &healthy).await;
        w.pod("app", &lost, Some("true"), &["data"]).await;
        (w, lost, pv)
    }

    pub(crate) async fn pod_events(&self, pod: &str, reason: &str) -> Vec<k8s_openapi::api::core::v1::Event> {
        events(&self.client, &self.ns.name, Some("Pod"), pod, reason).await
    }
}

#[tokio::test]
async fn fences_opted_in_pods_whose_volumes_are_healthy_and_nothing_else() {
    let _lock = support::exclusive().await;
    let w = World::new("fence").await;
    let lost = w.node("lost", true).await;
    let healthy = w.node("healthy", true).await;
    // Pre-provisioned PV (the PV's driver decides) and dynamic (the annotation decides).
    let pv_static = w.claim("static", true, false, &healthy).await;
    let pv_dynamic = w.claim("dynamic", true, true, &healthy).await;
    // Its master is on the lost node and has no replica: unhealthy once the node is offline.
    let pv_only_copy = w.claim("only-copy", true, false, &lost).await;
    let pv_optout = w.claim("optout", true, false, &healthy).await;
    w.claim("hostpath", false, false, &healthy).await;
    w.pod("fenced-static", &lost, Some("true"), &["static"]).await;
    w.pod("fenced-dynamic", &lost, Some("1"), &["dynamic", "hostpath"])
        .await;
    w.pod("only-copy", &lost, Some("true"), &["only-copy", "static"]).await;
    w.pod("opted-out", &lost, Some("false"), &["optout"]).await;
    w.pod("not-labelled", &lost, None, &["optout"]).await;
    w.pod("bad-label", &lost, Some("yes"), &["optout"]).await;
    w.pod("foreign-only", &lost, Some("true"), &["hostpath"]).await;
    w.pod("other-node", &healthy, Some("true"), &["optout"]).await;
    let va_static = w.attachment("static", &lost, Some(&pv_static)).await;
    let va_dynamic = w.attachment("dynamic", &lost, Some(&pv_dynamic)).await;
    let va_only_copy = w.attachment("only-copy", &lost, Some(&pv_only_copy)).await;
    let va_optout = w.attachment("optout", &lost, Some(&pv_optout)).await;
    let va_inline = w.attachment("inline", &lost, None).await;
    let va_elsewhere = w.attachment("elsewhere", &healthy, Some(&pv_static)).await;

    let ctx = support::api_manager_context(&w.sim, FLAGS).await;
    let fencer = tokio::spawn(fencing::run(ctx.clone()));
    w.polled().await;

    let offline_at = Instant::now();
    w.sim.set_health(&lost, Health::Offline).unwrap();
    wait_for(
        "the fenced pods and their VolumeAttachments to be deleted",
        // Generous on a loaded machine; the latency itself is measured by the bench (examples/bench).
        POLL * 2 + Duration::from_secs(5),
        || async {
            let gone = !w.pod_exists("fenced-static").await
                && !w.pod_exists("fenced-dynamic").await
                && !w.attachment_exists(&va_static).await
                && !w.attachment_exists(&va_dynamic).await;
            gone.then_some(())
        },
    )
    .await;
    let took = offline_at.elapsed();
    eprintln!("fenced {took:?} after the node went offline (poll interval {POLL:?})");

    // The episode retries (every second, while the only-copy pod is left): each retry lists the
    // StorageOS namespaces again. After three, nothing else went and each warning was said once.
    support::after_polls(&w.sim, "GET /v2/namespaces", 3).await;
    for pod in [
        "only-copy",
        "opted-out",
        "not-labelled",
        "bad-label",
        "foreign-only",
        "other-node",
    ] {
        assert!(w.pod_exists(pod).await, "pod {pod} must be left alone");
    }
    for va in [&va_only_copy, &va_optout, &va_inline, &va_elsewhere] {
        assert!(w.attachment_exists(va).await, "VolumeAttachment {va} must stay");
    }
    let fenced = w.pod_events("fenced-static", "Fenced").await;
    assert_eq!(fenced.len(), 1, "{fenced:?}");
    let note = message(&fenced[0]);
    assert!(note.contains(&lost) && note.contains(&va_static), "{note}");
    assert_eq!(w.pod_events("fenced-dynamic", "Fenced").await.len(), 1);
    let skipped = w.pod_events("only-copy", "FencingSkipped").await;
    assert_eq!(skipped.len(), 1, "one warning per episode: {skipped:?}");
    assert!(skipped[0].count.unwrap_or(1) == 1, "{skipped:?}");
    let note = message(&skipped[0]);
    assert!(
        note.contains(&pv_only_copy) && note.contains("master offline"),
        "{note}"
    );
    assert!(w.pod_events("opted-out", "FencingSkipped").await.is_empty());
    assert!(!fencer.is_finished());
    fencer.abort();
}

#[tokio::test]
async fn unknown_nodes_and_nodes_unknown_to_kubernetes_are_never_fenced() {
    let _lock = support::exclusive().await;
    let w = World::new("fence-unknown").await;
    let unknown = w.node("unknown", true).await;
    let ghost = w.node("ghost", false).await;
    let healthy = w.node("healthy", true).await;
    w.claim("data", true, false, &healthy).await;
    w.pod("on-unknown", &unknown, Some("true"), &["data"]).await;
    w.pod("on-ghost", &ghost, Some("true"), &["data"]).await;
    let ctx = support::api_manager_context(&w.sim, FLAGS).await;
    let fencer = tokio::spawn(fencing::run(ctx.clone()));
    w.polled().await;
    w.sim.set_health(&unknown, Health::Unknown).unwrap();
    w.sim.set_health(&ghost, Health::Offline).unwrap();
    // Two node polls after the change: the fencer has seen both healths.
    support::after_polls(&w.sim, "GET /v2/nodes", 2).await;
    assert!(w.pod_exists("on-unknown").await);
    assert!(w.pod_exists("on-ghost").await);
    assert!(w.pod_events("on-unknown", "Fenced").await.is_empty());
    assert!(!fencer.is_finished());
    fencer.abort();
}

#[tokio::test]
async fn api_faults_delay_fencing_but_do_not_prevent_it() {
    let _lock = support::exclusive().await;
    let (w, lost, _) = World::one_pod_on_a_node_to_lose("fence-faults").await;
    let ctx = support::api_manager_context(&w.sim, FLAGS).await;
    let fencer = tokio::spawn(fencing::run(ctx.clone()));
    w.polled().await;

    // The next node list fails: that poll is skipped.
    w.sim.set_faults(Faults {
        fail_next: 1,
        status: 503,
        method: Some("GET".into()),
        path: Some("/v2/nodes".into()),
        ..Faults::default()
    });
    w.sim.set_health(&lost, Health::Offline).unwrap();
    wait_for("the failed node list", POLL * 2, || async {
        (w.sim.faults().fail_next == 0).then_some(())
    })
    .await;
    // The first volume lookup fails: the pod is left alone, with a warning, then retried.
    w.sim.set_faults(Faults {
        fail_next: 1,
        status: 500,
        method: Some("GET".into()),
        path: Some("/volumes".into()),
        ..Faults::default()
    });
    wait_for("the pod to be fenced after the faults", POLL * 3, || async {
        (!w.pod_exists("app").await).then_some(())
    })
    .await;
    assert_eq!(w.sim.faults().fail_next, 0, "the volume lookup fault was hit");
    let skipped = w.pod_events("app", "FencingSkipped").await;
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(message(&skipped[0]).contains("cannot look up"), "{skipped:?}");
    // The event follows the delete (and the attachment cleanup): wait for it, then count it.
    wait_for("the Fenced event", POLL * 2, || async {
        (!w.pod_events("app", "Fenced").await.is_empty()).then_some(())
    })
    .await;
    assert_eq!(w.pod_events("app", "Fenced").await.len(), 1);
    fencer.abort();
}

#[tokio::test]
async fn nothing_is_fenced_during_an_upgrade() {
    let _lock = support::exclusive().await;
    let (w, lost, pv) = World::one_pod_on_a_node_to_lose("fence-maint").await;
    let va = w.attachment("data", &lost, Some(&pv)).await;
    start_maintenance(&w.ns, "to-v2").await;

    let ctx = support::api_manager_context(&w.sim, FLAGS).await;
    let fencer = tokio::spawn(fencing::run(ctx.clone()));
    w.polled().await;
    w.sim.set_health(&lost, Health::Offline).unwrap();
    let suspended = wait_for("the FencingSuspended event on the node", POLL * 2, || async {
        let e = events(&w.client, "default", Some("Node"), &lost, "FencingSuspended").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    let note = message(&suspended[0]);
    assert!(note.contains("to-v2"), "{note}");
    // A node poll later (the episode retries every second meanwhile) nothing is fenced.
    support::after_polls(&w.sim, "GET /v2/nodes", 1).await;
    assert!(w.pod_exists("app").await, "not fenced during the upgrade");
    assert!(w.attachment_exists(&va).await);
    assert_eq!(
        events(&w.client, "default", Some("Node"), &lost, "FencingSuspended")
            .await
            .len(),
        1,
        "said once per episode"
    );

    // The upgrade ends while the node is still offline: the retry loop fences.
    end_maintenance(&w.ns).await;
    wait_for(
        "the pod to be fenced after the upgrade",
        Duration::from_secs(10),
        || async { (!w.pod_exists("app").await && !w.attachment_exists(&va).await).then_some(()) },
    )
    .await;
    fencer.abort();
}

impl World {
    /// Starts the fencer, takes `lost` offline and waits until its pod and attachment `va` are
    /// fenced, with no FencingSuspended event: whatever pause the test set up holds nothing.
    async fn fenced_without_suspension(&self, lost: &str, va: &str) -> tokio::task::JoinHandle<()> {
        let ctx = support::api_manager_context(&self.sim, FLAGS).await;
        let fencer = tokio::spawn(fencing::run(ctx.clone()));
        self.polled().await;
        self.sim.set_health(lost, Health::Offline).unwrap();
        wait_for("the pod to be fenced", Duration::from_secs(20), || async {
            (!self.pod_exists("app").await && !self.attachment_exists(va).await).then_some(())
        })
        .await;
        let suspended = events(&self.client, "default", Some("Node"), lost, "FencingSuspended").await;
        assert!(suspended.is_empty(), "{suspended:?}");
        fencer
    }
}

/// A pause annotation on a Pending duplicate cluster in a tenant's namespace, naming no upgrade
/// there, does not suspend fencing: the pod on the lost node is fenced and no
/// FencingSuspended event is sent.
#[tokio::test]
async fn a_forged_pause_annotation_does_not_suspend_fencing() {
    use kube::api::PostParams;
    use storageos_operator::crd::StorageOSCluster;

    let _lock = support::exclusive().await;
    let (w, lost, pv) = World::one_pod_on_a_node_to_lose("fence-forged").await;
    let va = w.attachment("data", &lost, Some(&pv)).await;
    let forged: StorageOSCluster = support::from_json(serde_json::json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
        "metadata": {"name": "forged", "annotations": {"storageos.com/paused-by-upgrade": "to-v2"}},
        "spec": {"secretRefName": "storageos-api", "secretRefNamespace": w.ns.name, "pause": true,
                 "kvBackend": {"address": support::KV_ADDRESS}}
    }));
    w.ns.api::<StorageOSCluster>()
        .create(&PostParams::default(), &forged)
        .await
        .unwrap();

    let fencer = w.fenced_without_suspension(&lost, &va).await;
    fencer.abort();
    end_maintenance(&w.ns).await;
    let _ =
        w.ns.api::<StorageOSCluster>()
            .delete("forged", &kube::api::DeleteParams::default())
            .await;
}

/// A StorageOSUpgrade that completed and that nobody deleted (the cluster still carries its
/// pause annotation) holds nothing: the pod on the lost node is fenced, and no FencingSuspended
/// event is sent.
#[tokio::test]
async fn a_completed_upgrade_left_in_place_does_not_suspend_fencing() {
    use kube::api::{Patch, PatchParams};
    use storageos_operator::crd::StorageOSUpgrade;

    let _lock = support::exclusive().await;
    let (w, lost, pv) = World::one_pod_on_a_node_to_lose("fence-done").await;
    let va = w.attachment("data", &lost, Some(&pv)).await;
    start_maintenance(&w.ns, "to-v2").await;
    w.ns.api::<StorageOSUpgrade>()
        .patch_status(
            "to-v2",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"phase": "Completed", "completed": true}})),
        )
        .await
        .unwrap();

    let fencer = w.fenced_without_suspension(&lost, &va).await;
    assert!(
        w.ns.api::<StorageOSUpgrade>().get_opt("to-v2").await.unwrap().is_some(),
        "the completed upgrade is still there"
    );
    fencer.abort();
    end_maintenance(&w.ns).await;
}

/// docs/features.md: "if that [maintenance] cannot be read, they wait too". The fencer runs as an
/// api-manager whose role lacks the StorageOSCluster rule, so it cannot tell whether an upgrade
/// runs: the offline node's pod is left alone over several polls. Given the rule back, the
/// retry loop fences it.
#[tokio::test]
async fn maintenance_unreadable_means_no_fencing() {
    use support::identity::{self, Identity};
    const BLIND: Identity = Identity {
        namespace: identity::API_MANAGER_NAMESPACE,
        name: "storageos-api-manager-blind",
    };
    const ROLE: &str = "storageos-tests:api-manager-blind";
    let _lock = support::exclusive().await;
    let w = World::new("fence-blind").await;
    let admin = w.client.clone();
    identity::install_api_manager_rbac(&admin).await;
    identity::apply_as_admin(
        &admin,
        &json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": BLIND.name, "namespace": BLIND.namespace}}),
    )
    .await;
    let all = storageos_operator::rbac::components::api_manager_rules(
        storageos_operator::rbac::components::API_MANAGER_WEBHOOK_CONFIG,
    );
    let without_clusters: Vec<_> = all
        .iter()
        .filter(|r| !r.resources.iter().flatten().any(|res| res == "storageosclusters"))
        .cloned()
        .collect();
    assert!(without_clusters.len() < all.len());
    identity::put_cluster_role(&admin, ROLE, serde_json::to_value(&without_clusters).unwrap()).await;
    identity::apply_as_admin(&admin, &identity::binding(ROLE, ROLE, BLIND)).await;
    let blind = identity::client_as(BLIND).await;

    let lost = w.node("lost", true).await;
    let healthy = w.node("healthy", true).await;
    let pv = w.claim("data", true, false, &healthy).await;
    w.pod("app", &lost, Some("true"), &["data"]).await;
    let va = w.attachment("data", &lost, Some(&pv)).await;
    let ctx = support::api_manager_context_as(&w.sim, FLAGS, blind).await;
    let fencer = tokio::spawn(fencing::run(ctx.clone()));
    w.polled().await;
    w.sim.set_health(&lost, Health::Offline).unwrap();
    // Several polls and retries see the node offline (a negative window: nothing may happen).
    let seen_offline = w.sim.requests().len();
    wait_for("two more node polls", POLL * 3, || async {
        let polls = w.sim.requests()[seen_offline..]
            .iter()
            .filter(|r| r.method == "GET" && r.path == "/v2/nodes")
            .count();
        (polls >= 2).then_some(())
    })
    .await;
    assert!(
        w.pod_exists("app").await,
        "fenced although maintenance could not be read"
    );
    assert!(w.attachment_exists(&va).await);

    // Readable again: the fencer acts.
    put_back(&admin, ROLE, &all).await;
    wait_for(
        "the pod to be fenced once maintenance is readable",
        POLL * 4,
        || async { (!w.pod_exists("app").await && !w.attachment_exists(&va).await).then_some(()) },
    )
    .await;
    fencer.abort();
    identity::delete_cluster_role(&admin, ROLE).await;
}

async fn put_back(admin: &Client, role: &str, rules: &[k8s_openapi::api::rbac::v1::PolicyRule]) {
    support::identity::put_cluster_role(admin, role, serde_json::to_value(rules).unwrap()).await;
}

/// More than half of the StorageOS nodes offline at once (3 of 5) looks like a partition or an
/// API fault: nothing is fenced, and the StorageOSCluster gets one FencingHeld warning. Once at
/// most half are offline again, a node still offline is fenced.
#[tokio::test]
async fn more_than_half_offline_fences_nothing_until_it_heals() {
    let _lock = support::exclusive().await;
    let w = World::new("fence-mass").await;
    let cluster: storageos_operator::crd::StorageOSCluster = from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
        "metadata": {"name": "held"},
        "spec": {"secretRefName": "none", "secretRefNamespace": w.ns.name,
                 "kvBackend": {"address": support::KV_ADDRESS}}
    }));
    w.ns.api::<storageos_operator::crd::StorageOSCluster>()
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let mut nodes = Vec::new();
    for n in ["a", "b", "c", "d", "e"] {
        nodes.push(w.node(n, true).await);
    }
    let healthy = &nodes[4];
    w.claim("data", true, false, healthy).await;
    for (i, node) in nodes[..3].iter().enumerate() {
        w.pod(&format!("app-{i}"), node, Some("true"), &["data"]).await;
    }
    let ctx = support::api_manager_context(&w.sim, FLAGS).await;
    let fencer = tokio::spawn(fencing::run(ctx.clone()));
    w.polled().await;
    for node in &nodes[..3] {
        w.sim.set_health(node, Health::Offline).unwrap();
    }
    let held_events = || {
        events(
            &w.client,
            &w.ns.name,
            Some("StorageOSCluster"),
            "held",
            reasons::FENCING_HELD.name(),
        )
    };
    let held = wait_for("the FencingHeld warning", POLL * 3, || async {
        let e = held_events().await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(message(&held[0]).contains("3 of 5 nodes offline"), "{held:?}");
    // Several more polls: still nothing fenced, still one warning.
    let polls_before = w.sim.requests().iter().filter(|r| r.path == "/v2/nodes").count();
    wait_for("two more polls", POLL * 3, || async {
        let n = w.sim.requests().iter().filter(|r| r.path == "/v2/nodes").count();
        (n >= polls_before + 2).then_some(())
    })
    .await;
    for i in 0..3 {
        assert!(
            w.pod_exists(&format!("app-{i}")).await,
            "app-{i} was fenced during the hold"
        );
        assert!(w.pod_events(&format!("app-{i}"), "Fenced").await.is_empty());
    }
    let held = held_events().await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].count.unwrap_or(1), 1, "{held:?}");

    // Two come back: 1 of 5 offline, and its pod is fenced.
    w.sim.set_health(&nodes[1], Health::Online).unwrap();
    w.sim.set_health(&nodes[2], Health::Online).unwrap();
    wait_for("the pod on the node still offline to be fenced", POLL * 3, || async {
        (!w.pod_exists("app-0").await).then_some(())
    })
    .await;
    assert!(w.pod_exists("app-1").await && w.pod_exists("app-2").await);
    fencer.abort();
}

/// `spec.disableFencing` renders `--enable-node-fencing=false`: the fencer does not run, and an
/// opted-in pod on an offline node stays.
#[tokio::test]
async fn disable_fencing_turns_the_fencer_off() {
    let _lock = support::exclusive().await;
    let (w, lost, _) = World::one_pod_on_a_node_to_lose("fence-off").await;
    let flags: Vec<&str> = FLAGS.iter().copied().chain(["-enable-node-fencing=false"]).collect();
    let ctx = support::api_manager_context(&w.sim, &flags).await;
    w.sim.set_health(&lost, Health::Offline).unwrap();
    // The fencer returns at once, having asked StorageOS nothing.
    tokio::time::timeout(Duration::from_secs(30), fencing::run(ctx.clone()))
        .await
        .expect("the fencer is off and returns");
    assert!(!w.sim.requests().iter().any(|r| r.path == "/v2/nodes"));
    assert!(w.pod_exists("app").await);
}

/// A simulator serving from a thread and runtime of its own, until the sender is dropped.
fn simulator_on_its_own_thread() -> (SimHandle, std::sync::mpsc::Sender<()>) {
    let (handle_tx, handle_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            handle_tx
                .send(Simulator::start(sim::Config::default()).await.unwrap())
                .unwrap();
            // Serves until told to stop (checked without blocking this runtime).
            while matches!(stop_rx.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty)) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    });
    (handle_rx.recv().unwrap(), stop_tx)
}

/// The fencer and its node poll run on a worker of their own (`fencing::worker`, as the process
/// runs them): with the rest of the process blocked outright — its runtime, so no other
/// controller, cache, volume poll or webhook can run, nor drive the fencer's I/O — a node that
/// goes offline still has its opted-in pod fenced. On one shared runtime, nothing would be.
#[tokio::test]
async fn the_fencer_fences_while_the_rest_of_the_process_is_blocked() {
    let _lock = support::exclusive().await;
    // This test blocks its own runtime below: the simulator serves from another.
    let (sim, stop_sim) = simulator_on_its_own_thread();
    let w = World::with_sim("fence-busy", sim).await;
    let lost = w.node("lost", true).await;
    let healthy = w.node("healthy", true).await;
    w.claim("data", true, false, &healthy).await;
    w.pod("app", &lost, Some("true"), &["data"]).await;
    let config = support::identity::api_manager_config().await;
    // Wired and run as `api-manager run` does: the node poll and the fencer on the worker, the
    // volume poll on this runtime.
    let kube = Client::try_from(config.clone()).unwrap();
    let (ctx, polls) = support::api_manager_wired_in(&w.sim, FLAGS, kube, "default").await;
    let mut worker = fencing::worker::start(&ctx, config, polls.clone()).unwrap();
    let api = ctx.api.clone();
    tokio::spawn(async move { polls.run_volumes(api).await });
    // The Node-state cache the fencer waits for is filled by this runtime, before it is blocked.
    ctx.nodes.ready().await;
    w.polled().await;

    w.sim.set_health(&lost, Health::Offline).unwrap();
    // From here this runtime (the process's main runtime, in the process) does nothing: the
    // thread below watches for the pod's deletion and this one waits for it without yielding.
    let (namespace, pod) = (w.ns.name.clone(), "app");
    let watcher = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let pods: Api<Pod> = Api::namespaced(support::client().await, &namespace);
            // Generous on a loaded machine; the latency itself is measured by the bench (examples/bench).
            let deadline = Instant::now() + POLL * 2 + Duration::from_secs(20);
            while Instant::now() < deadline {
                if pods.get_opt(pod).await.unwrap().is_none() {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            false
        })
    });
    let fenced = watcher.join().unwrap();
    assert!(
        fenced,
        "the pod on the offline node was not fenced while the process's runtime was blocked"
    );
    // The event follows the delete (and the attachment cleanup), published from the worker:
    // wait for it, then count it (read at once, it was missing in one CI run).
    wait_for("the Fenced event", POLL * 2, || async {
        (!w.pod_events("app", "Fenced").await.is_empty()).then_some(())
    })
    .await;
    assert_eq!(w.pod_events("app", "Fenced").await.len(), 1);
    // Dropped, the worker stops; it never ended by itself.
    assert!(
        futures::FutureExt::now_or_never(worker.ended()).is_none(),
        "the worker ended by itself"
    );
    drop(worker);
    drop(stop_sim);
}
