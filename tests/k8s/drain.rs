//! Integration tier: the drain gate enforced on the real control plane (the disruption
//! controller and the eviction API are Kubernetes' own; the nodes are kwok's) with an in-process
//! simulator. A volume's master on node A with its only replica still syncing: evictions from A
//! are refused (429, by the guard's PodDisruptionBudget), `kubectl drain A` waits and the events
//! say why (the PVC's name only in its own namespace); once the replica is ready the guard goes
//! and the drain proceeds. The policies: 0-replica and orphaned volumes never hold a drain by
//! default, `BlockLastCopy` holds for the 0-replica one, `AllowAlways` for none; a maximum hold
//! ends a wait; a finished upgrade left in place holds nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::process::Command;
use std::time::Duration;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use storageos_operator::apimanager::controllers::Context;
use storageos_operator::apimanager::controllers::drain::{self, guard};
use storageos_operator::apimanager::maintenance::{self, Maintenance};
use storageos_operator::sim::{SimHandle, VolumeSeed};
use support::{ClusterObjects, TestNamespace, from_json, logs, wait_event, wait_for};

/// The plane's three kwok nodes, registered in the simulator as StorageOS nodes.
const NODES: [&str; 3] = support::KWOK_NODES;
const FLAGS: &[&str] = &[
    "-node-poll-interval",
    "5s",
    "-volume-poll-interval",
    "1s",
    "-drain-guard-image",
    "example.com/storageos-operator:test",
];
/// The StorageClass name of the tests' static PVs (no such class needs to exist to bind).
const CLASS: &str = "storageos-drain-test";
const SETTLE: Duration = Duration::from_secs(60);

/// `kubectl <args>` on the plane: (success, stdout and stderr).
fn kubectl(args: &[&str]) -> (bool, String) {
    let out = Command::new(support::kubectl())
        .arg("--kubeconfig")
        .arg(support::kubeconfig_path())
        .args(args)
        .output()
        .expect("run kubectl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `kubectl drain` as an admin types it (`--force` for the bare application pod, as kured's
/// drain does; the guard has a controller, so it is evicted, not deleted).
fn drain_node(node: &str, timeout: &str) -> (bool, String) {
    let timeout = format!("--timeout={timeout}");
    kubectl(&[
        "drain",
        node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--force",
        &timeout,
    ])
}

/// Evicts `name` in `ns` through the Eviction API and expects 429 (kube's default client
/// retries a 429 up to 15 times with backoff: the answer is read without).
async fn assert_eviction_refused(ns: &TestNamespace, name: &str) {
    let kubeconfig = kube::config::Kubeconfig::read_from(support::kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    let once: Api<Pod> = Api::namespaced(kube::Client::try_from(config).unwrap(), &ns.name);
    match once.evict(name, &EvictParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 429, "{s:?}"),
        other => panic!("the eviction of {name} was not refused: {other:?}"),
    }
}

/// The drain guard controller as the api-manager runs it, with the test namespace as the
/// guards' namespace: they live there, under its namespaced Role only.
async fn start_guards(sim: &SimHandle, ns: &TestNamespace) -> tokio::task::JoinHandle<()> {
    start_guards_with(sim, ns, &[]).await.0
}

/// [`start_guards`] with more api-manager flags; also the controllers' context (its metrics).
async fn start_guards_with(
    sim: &SimHandle,
    ns: &TestNamespace,
    extra: &[&str],
) -> (tokio::task::JoinHandle<()>, Arc<Context>) {
    support::identity::install_drain_guard_role(&support::client().await, &ns.name).await;
    let kube = support::api_manager_client().await;
    let mut flags: Vec<&str> = FLAGS.to_vec();
    flags.extend(["-drain-guard-namespace", ns.name.as_str()]);
    flags.extend(extra);
    let ctx = support::api_manager_context_in(sim, &flags, kube, "storageos-api-manager-elsewhere").await;
    (tokio::spawn(drain::run(ctx.clone())), ctx)
}

/// PVC `pvc` of `ns` bound to a static StorageOS PV `pv` (removed when `objects` drops), as CSI
/// would have made them: the volume is in use, not an orphan.
async fn bound(objects: &ClusterObjects, ns: &TestNamespace, pvc: &str, pv: &str) {
    objects.pv(&ns.client, pv, CLASS, &ns.name, pvc, true).await;
    let claim: PersistentVolumeClaim = from_json(json!({
        "metadata": {"name": pvc},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": CLASS, "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}}
    }));
    ns.api::<PersistentVolumeClaim>()
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
}

/// A volume of PVC `ns/pvc` with its master on `node`, `replicas` replicas (all syncing), bound
/// to a PV when `in_use`.
async fn volume(
    objects: &ClusterObjects,
    sim: &SimHandle,
    ns: &TestNamespace,
    pvc: &str,
    node: &str,
    replicas: u8,
    in_use: bool,
) -> String {
    let pv = format!("pvc-{}", support::suffix());
    sim.add_volume(VolumeSeed {
        replicas,
        ..support::seed::volume(&ns.name, &pv, pvc, node)
    })
    .unwrap();
    if replicas > 0 {
        sim.set_replica_health(&ns.name, &pv, "syncing").unwrap();
    }
    if in_use {
        bound(objects, ns, pvc, &pv).await;
    }
    pv
}

/// Waits until `node` has a guard whose budget allows no disruption.
async fn wait_guarded(ns: &TestNamespace, node: &str) -> PodDisruptionBudget {
    let name = guard::name(node);
    let budgets: Api<PodDisruptionBudget> = ns.api();
    wait_for(&format!("a guard on {node} allowing no disruption"), SETTLE, || async {
        let b = budgets.get_opt(&name).await.ok()??;
        let s = b.status.as_ref()?;
        (s.observed_generation == b.metadata.generation && s.current_healthy == 1 && s.disruptions_allowed == 0)
            .then_some(b)
    })
    .await
}

/// No event in `default` (where Node events go) names `pvc` (`namespace/name`).
async fn no_event_in_default_names(client: &kube::Client, pvc: &str) {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    for e in events.list(&ListParams::default()).await.unwrap().items {
        let note = e.note.clone().unwrap_or_default();
        assert!(
            !note.contains(pvc),
            "an event in default names the tenant's PVC {pvc}: {note}"
        );
    }
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    for e in core.list(&ListParams::default()).await.unwrap().items {
        let message = e.message.clone().unwrap_or_default();
        assert!(
            !message.contains(pvc),
            "an event in default names the tenant's PVC {pvc}: {message}"
        );
    }
}

/// `kubectl auth can-i VERB pods -n NS` as the api-manager's ServiceAccount.
fn api_manager_can(verb: &str, namespace: &str) -> bool {
    let who = format!(
        "--as=system:serviceaccount:{}:{}",
        support::identity::API_MANAGER.namespace,
        support::identity::API_MANAGER.name
    );
    let (_, out) = kubectl(&["auth", "can-i", verb, "pods", "-n", namespace, &who]);
    out.trim() == "yes"
}

/// Uncordons the node when dropped, so a failed test leaves the plane schedulable.
struct Uncordon(&'static str);

impl Drop for Uncordon {
    fn drop(&mut self) {
        let _ = kubectl(&["uncordon", self.0]);
    }
}

/// The Must-show of the drain gate's enforcement.
#[tokio::test]
async fn a_drain_of_the_node_holding_the_last_copy_waits_until_the_replica_is_ready() {
    logs();
    // Alone on the plane: an upgrade another test holds would guard every node.
    let _lock = support::exclusive().await;
    let (client, sim) = support::sim_on_the_plane().await;
    let ns = TestNamespace::new("drain").await;
    let objects = ClusterObjects::default();
    let node = NODES[0];
    let _uncordon = Uncordon(node);
    // The master on A, its one replica placed elsewhere but still syncing; its PVC bound.
    let pv = volume(&objects, &sim, &ns, "data", node, 1, true).await;
    let blocked = format!("{}/data", ns.name);

    // An application pod on A, as a drain finds it.
    let pods: Api<Pod> = ns.api();
    let app: Pod = from_json(json!({
        "metadata": {"name": "app", "labels": {"app": "drain-test"}},
        "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "app", "image": "example.com/app:1"}]}
    }));
    pods.create(&PostParams::default(), &app).await.unwrap();

    let controller = start_guards(&sim, &ns).await;

    // A guard pod bound to A and a budget that allows no eviction, both naming the PVC.
    let name = guard::name(node);
    let budgets: Api<PodDisruptionBudget> = ns.api();
    let budget = wait_for("the guard's budget to allow no disruption", SETTLE, || async {
        let b = budgets.get_opt(&name).await.ok()??;
        let s = b.status.as_ref()?;
        (s.observed_generation == b.metadata.generation && s.current_healthy == 1 && s.disruptions_allowed == 0)
            .then_some(b)
    })
    .await;
    let annotations = budget.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations[guard::BLOCKED_BY_ANNOTATION], blocked);
    let guard_pod = pods.get(&name).await.unwrap();
    assert_eq!(guard_pod.spec.as_ref().unwrap().node_name.as_deref(), Some(node));
    assert_eq!(
        guard_pod.metadata.owner_references.as_ref().unwrap()[0].uid,
        budget.metadata.uid.clone().unwrap(),
        "the budget is the guard's controller"
    );
    // The Node's event counts the volumes and says where they are listed; the PVC's own event,
    // in its namespace, names the node.
    wait_event(&client, "default", node, "DrainBlocked", "1 volume").await;
    wait_event(&client, &ns.name, "data", "DrainBlocked", node).await;
    // Guards run in their own namespace, restricted; the api-manager writes no pod elsewhere.
    assert!(
        api_manager_can("create", &ns.name),
        "the guard Role works where it is bound"
    );
    for verb in ["create", "patch"] {
        assert!(!api_manager_can(verb, "kube-system"), "{verb} pods in kube-system");
    }

    // The Eviction API, as `kubectl drain` calls it: the guard may not go (429).
    assert_eviction_refused(&ns, &name).await;
    // `kubectl drain` evicts the application pod and waits on the guard until its timeout.
    let (drained, out) = drain_node(node, "10s");
    println!("$ kubectl drain {node} (blocked)\n{out}");
    assert!(!drained, "the drain finished while the node held the last copy: {out}");
    assert!(out.contains("disruption budget"), "{out}");
    // The node is cordoned now: the event says why its drain waits, naming the PVC.
    let waiting = wait_event(&client, "default", node, "DrainWaiting", "1 volume").await;
    println!("DrainWaiting: {}", support::message(&waiting));
    assert!(pods.get_opt(&name).await.unwrap().is_some(), "the guard stays");

    // The replica is ready: the guard and its budget go, and the drain proceeds.
    sim.set_replica_health(&ns.name, &pv, "ready").unwrap();
    wait_for("the guard and its budget to be removed", SETTLE, || async {
        let pod = pods.get_opt(&name).await.ok()?;
        let budget = budgets.get_opt(&name).await.ok()?;
        (pod.is_none() && budget.is_none()).then_some(())
    })
    .await;
    wait_event(&client, "default", node, "DrainUnblocked", node).await;
    let (drained, out) = drain_node(node, "60s");
    println!("$ kubectl drain {node} (safe)\n{out}");
    assert!(drained, "the drain did not proceed: {out}");

    // No guard or budget is left behind.
    let selector = ListParams::default().labels(&drain::guard_selector());
    assert!(pods.list(&selector).await.unwrap().items.is_empty());
    assert!(budgets.list(&selector).await.unwrap().items.is_empty());
    // Nothing said in `default` names the tenant's PVC.
    no_event_in_default_names(&client, &blocked).await;
    controller.abort();
}

/// The interlock with upgrades: while a StorageOSUpgrade holds maintenance every StorageOS node
/// is guarded (a drain started meanwhile waits), and the guards go when the upgrade ends.
#[tokio::test]
async fn while_an_upgrade_holds_maintenance_every_node_is_guarded() {
    logs();
    let _lock = support::exclusive().await;
    let (_, sim) = support::sim_on_the_plane().await;
    let ns = TestNamespace::new("drain-upgrade").await;
    let controller = start_guards(&sim, &ns).await;
    let pods: Api<Pod> = ns.api();
    let budgets: Api<PodDisruptionBudget> = ns.api();
    let selector = ListParams::default().labels(&drain::guard_selector());

    support::start_maintenance(&ns, "to-v2").await;
    for node in NODES {
        let name = guard::name(node);
        let budget = wait_for(&format!("a guard on {node} during the upgrade"), SETTLE, || async {
            let b = budgets.get_opt(&name).await.ok()??;
            (b.status.as_ref()?.disruptions_allowed == 0 && pods.get_opt(&name).await.ok()?.is_some()).then_some(b)
        })
        .await;
        let why = &budget.metadata.annotations.unwrap()[guard::BLOCKED_BY_ANNOTATION];
        assert!(why.contains("StorageOSUpgrade to-v2"), "{why}");
    }
    assert_eviction_refused(&ns, &guard::name(NODES[1])).await;

    // The upgrade completes and nobody deletes it: its guards go all the same, and the
    // maintenance state fencing reads says no upgrade holds the cluster.
    let upgrades = ns.api::<storageos_operator::crd::StorageOSUpgrade>();
    upgrades
        .patch_status(
            "to-v2",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Completed"}})),
        )
        .await
        .unwrap();
    wait_for("every guard to go once the upgrade completed", SETTLE, || async {
        let left = pods.list(&selector).await.ok()?.items.len() + budgets.list(&selector).await.ok()?.items.len();
        (left == 0).then_some(())
    })
    .await;
    assert!(
        upgrades.get_opt("to-v2").await.unwrap().is_some(),
        "the upgrade is still there"
    );
    let client = support::client().await;
    assert_eq!(maintenance::current(&client, None).await.unwrap(), Maintenance::Off);
    support::end_maintenance(&ns).await;
    controller.abort();
}

/// The default policy: a volume with 0 replicas, and one whose PVC is gone, never hold a drain
/// (while a replicated volume at risk on another node is guarded: the controller ran).
#[tokio::test]
async fn a_volume_without_replicas_or_without_a_pvc_never_holds_a_drain() {
    logs();
    let _lock = support::exclusive().await;
    let (_, sim) = support::sim_on_the_plane().await;
    let ns = TestNamespace::new("drain-default").await;
    let objects = ClusterObjects::default();
    let (node, other) = (NODES[1], NODES[2]);
    let _uncordon = Uncordon(node);
    volume(&objects, &sim, &ns, "scratch", node, 0, true).await;
    volume(&objects, &sim, &ns, "orphan", node, 1, false).await;
    volume(&objects, &sim, &ns, "db", other, 1, true).await;
    let controller = start_guards(&sim, &ns).await;
    // Evidence the controller read these volumes: the replicated one at risk is guarded.
    wait_guarded(&ns, other).await;
    let budgets: Api<PodDisruptionBudget> = ns.api();
    assert!(
        budgets.get_opt(&guard::name(node)).await.unwrap().is_none(),
        "no guard on {node}"
    );
    let (drained, out) = drain_node(node, "60s");
    println!("$ kubectl drain {node}\n{out}");
    assert!(drained, "a 0-replica or orphaned volume held the drain: {out}");
    assert!(budgets.get_opt(&guard::name(node)).await.unwrap().is_none());
    controller.abort();
}

/// `BlockLastCopy` holds a drain for a 0-replica volume; `AllowAlways` holds none.
#[tokio::test]
async fn block_last_copy_holds_for_a_volume_without_replicas_and_allow_always_for_none() {
    logs();
    let _lock = support::exclusive().await;
    let (_, sim) = support::sim_on_the_plane().await;
    let ns = TestNamespace::new("drain-policies").await;
    let objects = ClusterObjects::default();
    let node = NODES[1];
    let _uncordon = Uncordon(node);
    volume(&objects, &sim, &ns, "scratch", node, 0, true).await;
    let (controller, _) = start_guards_with(&sim, &ns, &["-drain-policy", "BlockLastCopy"]).await;
    wait_guarded(&ns, node).await;
    assert_eviction_refused(&ns, &guard::name(node)).await;
    controller.abort();
    // Under AllowAlways no controller runs to remove what the first left: an admin removes it
    // (its pod goes with it), then a drain proceeds with a replicated volume at risk too.
    let budgets: Api<PodDisruptionBudget> = ns.api();
    budgets
        .delete(&guard::name(node), &kube::api::DeleteParams::background())
        .await
        .unwrap();
    volume(&objects, &sim, &ns, "db", node, 1, true).await;
    let (controller, _) = start_guards_with(&sim, &ns, &["-drain-policy", "AllowAlways"]).await;
    let (drained, out) = drain_node(node, "60s");
    println!("$ kubectl drain {node} (AllowAlways)\n{out}");
    assert!(drained, "AllowAlways held a drain: {out}");
    let pods: Api<Pod> = ns.api();
    assert!(
        pods.get_opt(&guard::name(node)).await.unwrap().is_none(),
        "no guard pod"
    );
    controller.abort();
}

/// A maximum hold of 20 s: while the drain waits, the alert's expression holds; at the
/// end the guard is released with a Warning event, and the drain completes.
#[tokio::test]
async fn a_drain_waits_at_most_the_maximum_hold() {
    logs();
    let _lock = support::exclusive().await;
    let (client, sim) = support::sim_on_the_plane().await;
    let ns = TestNamespace::new("drain-hold").await;
    let objects = ClusterObjects::default();
    let node = NODES[2];
    let _uncordon = Uncordon(node);
    volume(&objects, &sim, &ns, "db", node, 1, true).await;
    let (controller, ctx) = start_guards_with(&sim, &ns, &["-drain-max-hold", "20s"]).await;
    wait_guarded(&ns, node).await;
    let drain = std::thread::spawn(move || drain_node(node, "240s"));
    // The alert: `max by (namespace, node) (storageos_drain_waiting_seconds) > 0` (for 15m).
    let rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/monitoring/prometheusrule.yaml"
    ))
    .unwrap();
    assert!(
        rules.contains("expr: max by (namespace, node) (storageos_drain_waiting_seconds) > 0"),
        "the alert's expression is the one evaluated here"
    );
    let waited = wait_for(
        "the drain to be seen waiting (the alert's expression true)",
        SETTLE,
        || async { ctx.metrics.drain_waiting_seconds(node).filter(|s| *s > 0) },
    )
    .await;
    println!("storageos_drain_waiting_seconds{{node={node}}} = {waited}");
    wait_event(&client, "default", node, "DrainWaiting", "maxDrainHold").await;
    // The end of the hold: released (the budget allows the eviction), said on the Node and
    // the PVC, and the drain completes.
    let budgets: Api<PodDisruptionBudget> = ns.api();
    wait_for(
        "the hold to end (20 s after the cordon)",
        Duration::from_secs(90),
        || async {
            let b = budgets.get_opt(&guard::name(node)).await.ok()??;
            b.metadata
                .annotations?
                .contains_key(guard::RELEASED_ANNOTATION)
                .then_some(())
        },
    )
    .await;
    let expired = wait_event(&client, "default", node, "DrainHoldExpired", "1 volume").await;
    println!("DrainHoldExpired: {}", support::message(&expired));
    wait_event(&client, &ns.name, "db", "DrainHoldExpired", node).await;
    let (drained, out) = drain.join().unwrap();
    println!("$ kubectl drain {node} (held at most 20s)\n{out}");
    assert!(drained, "the drain did not complete after the hold: {out}");
    let budget = budgets.get(&guard::name(node)).await.unwrap();
    assert!(
        budget
            .metadata
            .annotations
            .unwrap()
            .contains_key(guard::RELEASED_ANNOTATION)
    );
    assert_eq!(ctx.metrics.drain_waiting_seconds(node), None, "no drain waits any more");
    no_event_in_default_names(&client, &format!("{}/db", ns.name)).await;
    controller.abort();
}
