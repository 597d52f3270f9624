//! Integration tier: the drain gate enforced on the real control plane (the disruption
//! controller and the eviction API are Kubernetes' own; the nodes are kwok's) with an in-process
//! simulator. A volume's master on node A with its only replica still syncing: evictions from A
//! are refused (429, by the guard's PodDisruptionBudget), `kubectl drain A` waits and the events
//! name the PVC; once the replica is ready the guard goes and the drain proceeds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, EvictParams, ListParams, PostParams};
use serde_json::json;
use storageos_operator::apimanager::controllers::drain::{self, guard};
use storageos_operator::sim::{SimHandle, VolumeSeed};
use support::{TestNamespace, from_json, logs, wait_event, wait_for};

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

/// The drain guard controller as the api-manager runs it, with the test namespace as its own:
/// its guards live there, under its namespaced Role only.
async fn start_guards(sim: &SimHandle, ns: &TestNamespace) -> tokio::task::JoinHandle<()> {
    support::identity::install_drain_guard_role(&support::client().await, &ns.name).await;
    let kube = support::api_manager_client().await;
    let ctx = support::api_manager_context_in(sim, FLAGS, kube, &ns.name).await;
    tokio::spawn(drain::run(ctx))
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
    let node = NODES[0];
    let _uncordon = Uncordon(node);
    // The master on A, its one replica placed elsewhere but still syncing.
    let pv = format!("pvc-{}", support::suffix());
    sim.add_volume(VolumeSeed {
        replicas: 1,
        ..support::seed::volume(&ns.name, &pv, "data", node)
    })
    .unwrap();
    sim.set_replica_health(&ns.name, &pv, "syncing").unwrap();
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
    wait_event(&client, "default", node, "DrainBlocked", &blocked).await;

    // The Eviction API, as `kubectl drain` calls it: the guard may not go (429).
    assert_eviction_refused(&ns, &name).await;
    // `kubectl drain` evicts the application pod and waits on the guard until its timeout.
    let (drained, out) = drain_node(node, "10s");
    println!("$ kubectl drain {node} (blocked)\n{out}");
    assert!(!drained, "the drain finished while the node held the last copy: {out}");
    assert!(out.contains("disruption budget"), "{out}");
    // The node is cordoned now: the event says why its drain waits, naming the PVC.
    let waiting = wait_event(&client, "default", node, "DrainWaiting", &blocked).await;
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

    support::end_maintenance(&ns).await;
    wait_for("every guard to go after the upgrade", SETTLE, || async {
        let left = pods.list(&selector).await.ok()?.items.len() + budgets.list(&selector).await.ok()?.items.len();
        (left == 0).then_some(())
    })
    .await;
    controller.abort();
}
