//! Integration tier: the out-of-service bridge on the real control plane with an in-process
//! StorageOS simulator. The fencer fences every StorageOS pod on a Node tainted
//! `node.kubernetes.io/out-of-service` (opted in or not) and leaves the others to Kubernetes;
//! the out-of-service controller taints a node offline in StorageOS and NotReady, never while
//! more than half the nodes are offline, and takes its taint off when the node is back.
//!
//! The test Nodes have no kubelet: their Ready condition is written here (with a fresh
//! heartbeat, so the node lifecycle controller leaves it for its 40 s grace period). The
//! fencing test taints with effect `NoSchedule`, so that Kubernetes's own taint eviction (which
//! a `NoExecute` taint starts) does not touch the pods: what goes is the fencer's doing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::fencing::{FLAGS, POLL, World};
use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use storageos_operator::apimanager::controllers::fencing::select::OUT_OF_SERVICE_TAINT;
use storageos_operator::apimanager::controllers::{fencing, out_of_service};
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::reasons;
use storageos_operator::storageos::Health;
use support::{events, from_json, message, wait_for};

/// Adds a taint `key=nodeshutdown:<effect>` to the Node, keeping its others.
async fn taint(client: &Client, node: &str, effect: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut taints = nodes.get(node).await.unwrap().spec.unwrap().taints.unwrap_or_default();
    taints.push(from_json(
        json!({"key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown", "effect": effect}),
    ));
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": taints}})),
        )
        .await
        .unwrap();
}

/// Writes the Node's Ready condition, with a heartbeat of now.
pub(crate) async fn set_ready(client: &Client, node: &str, ready: bool) {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let status = if ready { "True" } else { "False" };
    let patch = json!({"status": {"conditions": [{
        "type": "Ready", "status": status, "reason": "Test", "message": "set by the test",
        "lastHeartbeatTime": now, "lastTransitionTime": now
    }]}});
    Api::<Node>::all(client.clone())
        .patch_status(node, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// Whether the Node carries the out-of-service taint, and the controller's mark.
async fn tainted(client: &Client, node: &str) -> (bool, bool) {
    let n = Api::<Node>::all(client.clone()).get(node).await.unwrap();
    let taint = n
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .iter()
        .any(|t| t.key == OUT_OF_SERVICE_TAINT);
    (
        taint,
        n.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(out_of_service::MARK),
    )
}

/// A StorageOSCluster in the test's namespace, for the events on it.
async fn cluster(w: &World, name: &str) {
    let cluster: StorageOSCluster = from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
        "metadata": {"name": name},
        "spec": {"secretRefName": "none", "secretRefNamespace": w.ns.name,
                 "kvBackend": {"address": support::KV_ADDRESS}}
    }));
    w.ns.api::<StorageOSCluster>()
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
}

/// The api-manager flags of the automatic mode: two offline polls, a one-second cool-down.
fn automatic_flags() -> Vec<&'static str> {
    FLAGS
        .iter()
        .copied()
        .chain([
            "-enable-node-out-of-service=true",
            "-node-out-of-service-offline-polls=2",
            "-node-out-of-service-cool-down=1s",
        ])
        .collect()
}

/// A world of five Ready nodes online in StorageOS and a StorageOSCluster `cluster_name`, with
/// the out-of-service controller running in automatic mode under its RBAC, past its first poll.
async fn automatic(prefix: &str, cluster_name: &str) -> (World, Vec<String>, tokio::task::JoinHandle<()>) {
    let w = World::new(prefix).await;
    cluster(&w, cluster_name).await;
    let mut nodes = Vec::new();
    for n in ["a", "b", "c", "d", "e"] {
        let name = w.node(n, true).await;
        set_ready(&w.client, &name, true).await;
        nodes.push(name);
    }
    support::identity::install_out_of_service_role(&w.client).await;
    let ctx = support::api_manager_context(&w.sim, &automatic_flags()).await;
    let controller = tokio::spawn(out_of_service::run(ctx.clone()));
    w.polled().await;
    (w, nodes, controller)
}

/// A Node tainted out of service while StorageOS still reports it online: every pod with a
/// StorageOS volume there is fenced (opted in or not) with its VolumeAttachment there; pods
/// without StorageOS volumes, and everything on other nodes, stay.
#[tokio::test]
async fn an_out_of_service_node_has_every_storageos_pod_fenced_and_the_others_left_to_kubernetes() {
    let _lock = support::exclusive().await;
    let w = World::new("oos-fence").await;
    let lost = w.node("lost", true).await;
    let healthy = w.node("healthy", true).await;
    let pv_data = w.claim("data", true, false, &healthy).await;
    let pv_dynamic = w.claim("dynamic", true, true, &healthy).await;
    w.claim("hostpath", false, false, &healthy).await;
    w.pod("unlabelled", &lost, None, &["data"]).await;
    w.pod("opted-out", &lost, Some("false"), &["dynamic", "hostpath"]).await;
    w.pod("plain", &lost, None, &["hostpath"]).await;
    w.pod("no-volumes", &lost, None, &[]).await;
    w.pod("elsewhere", &healthy, None, &["data"]).await;
    let va_data = w.attachment("data", &lost, Some(&pv_data)).await;
    let va_dynamic = w.attachment("dynamic", &lost, Some(&pv_dynamic)).await;
    let va_elsewhere = w.attachment("elsewhere", &healthy, Some(&pv_data)).await;

    let ctx = support::api_manager_context(&w.sim, FLAGS).await;
    let fencer = tokio::spawn(fencing::run(ctx.clone()));
    w.polled().await;
    // A node StorageOS reports online, without the taint: nothing happens.
    support::after_polls(&w.sim, "GET /v2/nodes", 2).await;
    assert!(w.pod_exists("unlabelled").await);

    taint(&w.client, &lost, "NoSchedule").await;
    wait_for(
        "every StorageOS pod on the out-of-service node and its VolumeAttachments to go",
        POLL * 2 + Duration::from_secs(5),
        || async {
            let gone = !w.pod_exists("unlabelled").await
                && !w.pod_exists("opted-out").await
                && !w.attachment_exists(&va_data).await
                && !w.attachment_exists(&va_dynamic).await;
            gone.then_some(())
        },
    )
    .await;
    support::after_polls(&w.sim, "GET /v2/nodes", 2).await;
    for pod in ["plain", "no-volumes", "elsewhere"] {
        assert!(w.pod_exists(pod).await, "pod {pod} must be left to Kubernetes");
    }
    assert!(w.attachment_exists(&va_elsewhere).await);
    let fenced = w.pod_events("unlabelled", "Fenced").await;
    assert_eq!(fenced.len(), 1, "{fenced:?}");
    let note = message(&fenced[0]);
    assert!(note.contains(OUT_OF_SERVICE_TAINT) && note.contains(&va_data), "{note}");
    assert!(!fencer.is_finished());
    fencer.abort();
}

/// Automatic mode: of five nodes, one offline in StorageOS and NotReady is tainted (and marked),
/// one offline but Ready is not; once the lost one is online and Ready again, the taint goes.
#[tokio::test]
async fn automatic_mode_taints_a_lost_node_and_removes_the_taint_when_it_is_back() {
    let _lock = support::exclusive().await;
    let (w, nodes, controller) = automatic("oos-auto", "oos").await;
    let (lost, flapping) = (&nodes[0], &nodes[1]);

    w.sim.set_health(lost, Health::Offline).unwrap();
    w.sim.set_health(flapping, Health::Offline).unwrap();
    set_ready(&w.client, lost, false).await;
    wait_for("the lost node to be tainted out of service", POLL * 4, || async {
        (tainted(&w.client, lost).await == (true, true)).then_some(())
    })
    .await;
    // The events follow the patch: on the Node, then on the StorageOSCluster.
    let on_cluster = wait_for("the OutOfServiceTainted events", Duration::from_secs(30), || async {
        let e = events(
            &w.client,
            &w.ns.name,
            Some("StorageOSCluster"),
            "oos",
            reasons::OUT_OF_SERVICE_TAINTED.name(),
        )
        .await;
        e.into_iter().find(|e| message(e).contains(lost.as_str()))
    })
    .await;
    assert!(message(&on_cluster).contains("NotReady"), "{on_cluster:?}");
    let on_node = events(
        &w.client,
        "default",
        Some("Node"),
        lost,
        reasons::OUT_OF_SERVICE_TAINTED.name(),
    )
    .await;
    assert_eq!(on_node.len(), 1, "{on_node:?}");
    for other in &nodes[1..] {
        assert_eq!(tainted(&w.client, other).await, (false, false), "{other}");
    }

    // Back: online in StorageOS and Ready; after the cool-down the taint and the mark go.
    w.sim.set_health(lost, Health::Online).unwrap();
    set_ready(&w.client, lost, true).await;
    wait_for("the taint to be removed", POLL * 4, || async {
        (tainted(&w.client, lost).await == (false, false)).then_some(())
    })
    .await;
    support::wait_event(
        &w.client,
        "default",
        lost,
        reasons::OUT_OF_SERVICE_UNTAINTED.name(),
        "Ready",
    )
    .await;
    // The no-kubelet taint the test Nodes carry is kept.
    let kept = Api::<Node>::all(w.client.clone()).get(lost).await.unwrap();
    let taints = kept.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(taints.iter().any(|t| t.key == support::NO_KUBELET_TAINT), "{taints:?}");
    assert!(!controller.is_finished());
    controller.abort();
}

/// Automatic mode with three of five nodes offline and NotReady: likelier a partition, so none
/// is tainted, and the StorageOSCluster gets one OutOfServiceHeld warning naming them.
#[tokio::test]
async fn automatic_mode_taints_no_node_while_more_than_half_are_offline() {
    let _lock = support::exclusive().await;
    let (w, nodes, controller) = automatic("oos-held", "held").await;
    for node in &nodes[..3] {
        w.sim.set_health(node, Health::Offline).unwrap();
        set_ready(&w.client, node, false).await;
    }
    let held = wait_for("the OutOfServiceHeld warning", POLL * 4, || async {
        let e = events(
            &w.client,
            &w.ns.name,
            Some("StorageOSCluster"),
            "held",
            reasons::OUT_OF_SERVICE_HELD.name(),
        )
        .await;
        e.into_iter().find(|e| message(e).contains(nodes[0].as_str()))
    })
    .await;
    assert!(message(&held).contains("3 of 5 nodes offline"), "{held:?}");
    // Several more polls (twice the offline polls needed): still no taint.
    support::after_polls(&w.sim, "GET /v2/nodes", 4).await;
    for node in &nodes {
        assert_eq!(tainted(&w.client, node).await, (false, false), "{node}");
    }
    assert!(!controller.is_finished());
    controller.abort();
}
