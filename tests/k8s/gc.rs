//! Integration tier: the node delete and namespace delete controllers on the real control plane
//! with an in-process StorageOS simulator: deletes mirrored from Kubernetes, retried while
//! StorageOS refuses (409 in use, 423 locked), garbage collection of StorageOS objects without a
//! Kubernetes counterpart, maintenance, and an unreachable API.
//!
//! Every test has its own simulator, so the controllers of one test only ever delete in it;
//! Kubernetes Nodes are the test's own, with unique names.
//!
//! Maintenance (an upgrade in progress) is cluster-wide and tests/k8s/upgrade.rs switches it on,
//! so every test here holds the cross-process [`support::cluster_lock`] the upgrade and cluster
//! tests hold: the tests run one at a time, and never during an upgrade test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, DeleteParams};
use serde_json::json;
use storageos_operator::apimanager::controllers::{namespace_delete, node_delete};
use storageos_operator::sim::{self, Faults, RequestRecord, SimHandle, Simulator, VolumeSeed};
use storageos_operator::storageos::Health;
use storageos_operator::storageos::kube::{CSI_DRIVER, CSI_NODE_ANNOTATION};
use support::{ClusterObjects, TestNamespace, end_maintenance, events, message, start_maintenance, suffix, wait_for};

const NO_GC: &[&str] = &["-node-delete-gc-interval", "0s", "-namespace-delete-gc-interval", "0s"];
const FAST_GC: &[&str] = &[
    "-node-delete-gc-delay",
    "1s",
    "-node-delete-gc-interval",
    "2s",
    "-namespace-delete-gc-delay",
    "1s",
    "-namespace-delete-gc-interval",
    "2s",
];
const SETTLE: Duration = Duration::from_secs(30);

async fn simulator(lock: Duration) -> SimHandle {
    Simulator::start(sim::Config {
        node_lock_ttl: lock,
        ..sim::Config::default()
    })
    .await
    .unwrap()
}

/// The DELETE requests for `path_part` (a node or namespace ID), oldest first.
fn deletes(sim: &SimHandle, path_part: &str) -> Vec<RequestRecord> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.path.contains(path_part))
        .collect()
}

fn statuses(records: &[RequestRecord]) -> Vec<u16> {
    let mut s: Vec<u16> = records.iter().map(|r| r.status).collect();
    s.dedup();
    s
}

async fn delete_node(client: &kube::Client, name: &str) {
    Api::<Node>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

/// Waits until the node-delete controller's watch is live: a throwaway annotated probe Node is
/// deleted (again, under a new name, until it is seen) and the controller reacts — it reads the
/// StorageOS nodes (`GET /v2/nodes`), or says it waits (DeleteSuspended, during an upgrade) or
/// retries (DeleteRetrying, StorageOS unreachable). A delete made before the watch's first list
/// would never be seen, by design.
async fn node_watch_synced(client: &kube::Client, sim: Option<&SimHandle>) {
    for attempt in 0..10 {
        let probe = format!("nd-probe-{}-{attempt}", suffix());
        let objects = ClusterObjects::default();
        objects
            .node(client, &probe, support::storageos_node_annotations(&probe))
            .await;
        let before = sim.map_or(0, |s| reads(s, "/v2/nodes"));
        delete_node(client, &probe).await;
        let seen = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let mut said = false;
                for reason in ["DeleteSuspended", "DeleteRetrying"] {
                    said |= !events(client, "default", Some("Node"), &probe, reason).await.is_empty();
                }
                if sim.map_or(0, |s| reads(s, "/v2/nodes")) > before || said {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        if seen.is_ok() {
            return;
        }
    }
    panic!("the node-delete controller never reacted to a probe Node's delete");
}

/// The same for the namespace-delete controller, with a probe Namespace (a read of the
/// StorageOS namespaces, or DeleteRetrying while StorageOS is unreachable).
async fn namespace_watch_synced(client: &kube::Client, sim: Option<&SimHandle>) {
    for attempt in 0..10 {
        let probe = format!("t-nsprobe-{}-{attempt}", suffix());
        let api = Api::<Namespace>::all(client.clone());
        api.create(
            &kube::api::PostParams::default(),
            &support::from_json(json!({"metadata": {"name": probe}})),
        )
        .await
        .unwrap();
        let before = sim.map_or(0, |s| reads(s, "/v2/namespaces"));
        api.delete(&probe, &DeleteParams::default()).await.unwrap();
        let seen = tokio::time::timeout(Duration::from_secs(10), async {
            while sim.map_or(0, |s| reads(s, "/v2/namespaces")) <= before
                && events(client, "default", Some("Namespace"), &probe, "DeleteRetrying")
                    .await
                    .is_empty()
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        if seen.is_ok() {
            return;
        }
    }
    panic!("the namespace-delete controller never reacted to a probe Namespace's delete");
}

/// How many `GET <path>` reached the simulator.
fn reads(sim: &SimHandle, path: &str) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path == path)
        .count()
}

#[tokio::test]
async fn a_deleted_storageos_node_is_deleted_in_storageos_through_409_and_423() {
    let _lock = support::exclusive().await;
    let client = support::client().await;
    let objects = ClusterObjects::default();
    let id = suffix();
    let (gone, plain, broken) = (
        format!("nd-{id}-gone"),
        format!("nd-{id}-plain"),
        format!("nd-{id}-broken"),
    );
    objects
        .node(&client, &gone, support::storageos_node_annotations(&gone))
        .await;
    objects.node(&client, &plain, json!({})).await;
    objects
        .node(&client, &broken, json!({CSI_NODE_ANNOTATION: CSI_DRIVER}))
        .await;
    // Offline now, so locked for 3 s (423), then deletable.
    let sim = simulator(Duration::from_secs(3)).await;
    // Online now; offline (and so locked for 3 s) only right before the deletes, so the 423
    // window does not depend on how long the set-up takes.
    let gone_id = sim.add_node(&gone, Health::Online).unwrap().id;
    let plain_id = sim.add_node(&plain, Health::Online).unwrap().id;
    let broken_id = sim.add_node(&broken, Health::Online).unwrap().id;

    let ctx = support::api_manager_context(&sim, NO_GC).await;
    let controller = tokio::spawn(node_delete::run(ctx.clone()));
    node_watch_synced(&client, Some(&sim)).await;
    sim.set_faults(Faults {
        fail_next: 2,
        status: 409,
        method: Some("DELETE".into()),
        path: Some("/v2/nodes/".into()),
        error: Some("node still in use".into()),
        ..Faults::default()
    });
    for n in [&gone, &plain, &broken] {
        sim.set_health(n, Health::Offline).unwrap();
    }
    for n in [&gone, &plain, &broken] {
        delete_node(&client, n).await;
    }
    wait_for("the StorageOS node to be deleted", SETTLE, || async {
        (!sim.nodes().iter().any(|n| n.name == gone)).then_some(())
    })
    .await;
    let tries = deletes(&sim, &gone_id);
    assert_eq!(statuses(&tries), [409, 423, 200], "{tries:?}");
    assert!(tries.iter().all(|r| r.query.contains("version=")), "{tries:?}");

    let deleted = wait_for("the Deleted event", SETTLE, || async {
        let e = events(&client, "default", Some("Node"), &gone, "Deleted").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(message(&deleted[0]).contains(&gone), "{deleted:?}");
    let retrying = events(&client, "default", Some("Node"), &gone, "DeleteRetrying").await;
    assert_eq!(retrying.len(), 1, "said once: {retrying:?}");

    // Nodes without the StorageOS annotation (or with a malformed one) are not touched: a
    // probe deleted after them is seen, so the watch is past their deletes.
    node_watch_synced(&client, Some(&sim)).await;
    assert!(deletes(&sim, &plain_id).is_empty());
    assert!(deletes(&sim, &broken_id).is_empty());
    assert_eq!(sim.nodes().len(), 2);
    assert!(!controller.is_finished());
    controller.abort();
}

#[tokio::test]
async fn garbage_collection_deletes_storageos_nodes_and_namespaces_kubernetes_lacks() {
    let _lock = support::exclusive().await;
    let ns = TestNamespace::new("gc").await;
    let client = ns.client.clone();
    let objects = ClusterObjects::default();
    let id = suffix();
    let (orphan, kept, online) = (
        format!("gc-{id}-orphan"),
        format!("gc-{id}-kept"),
        format!("gc-{id}-online"),
    );
    objects.node(&client, &kept, json!({})).await;
    let sim = simulator(Duration::ZERO).await;
    sim.add_node(&orphan, Health::Offline).unwrap();
    let kept_id = sim.add_node(&kept, Health::Offline).unwrap().id;
    sim.add_node(&online, Health::Online).unwrap();
    let ghost_ns = format!("gc-{id}-ghost");
    let busy_ns = format!("gc-{id}-busy");
    sim.add_namespace(&ghost_ns).unwrap();
    sim.add_namespace(&ns.name).unwrap();
    sim.add_volume(VolumeSeed {
        namespace: busy_ns.clone(),
        name: "pv-1".into(),
        master_node: online.clone(),
        ..VolumeSeed::default()
    })
    .unwrap();
    // The first StorageOS node list fails: that pass deletes nothing.
    sim.set_faults(Faults {
        fail_next: 1,
        status: 500,
        method: Some("GET".into()),
        path: Some("/v2/nodes".into()),
        ..Faults::default()
    });

    let ctx = support::api_manager_context(&sim, FAST_GC).await;
    let nodes = tokio::spawn(node_delete::run(ctx.clone()));
    let namespaces = tokio::spawn(namespace_delete::run(ctx.clone()));
    wait_for("the orphans to be collected", SETTLE, || async {
        let node_gone = !sim.nodes().iter().any(|n| n.name == orphan);
        let ns_gone = !sim.namespaces().iter().any(|n| n.name == ghost_ns);
        (node_gone && ns_gone).then_some(())
    })
    .await;
    let log = sim.requests();
    let failed_list = log.iter().position(|r| r.injected).expect("the injected fault");
    let first_delete = log
        .iter()
        .position(|r| r.method == "DELETE" && r.path.starts_with("/v2/nodes/"))
        .unwrap();
    let next_list = log
        .iter()
        .skip(failed_list + 1)
        .position(|r| r.method == "GET" && r.path == "/v2/nodes")
        .unwrap()
        + failed_list
        + 1;
    assert!(first_delete > next_list, "nothing deleted on the failed read");

    // Two more passes of each collection (each lists StorageOS first) leave the rest alone.
    support::after_polls(&sim, "GET /v2/nodes", 2).await;
    support::after_polls(&sim, "GET /v2/namespaces", 2).await;
    let names: Vec<String> = sim.nodes().into_iter().map(|n| n.name.to_string()).collect();
    assert!(names.contains(&kept) && names.contains(&online), "{names:?}");
    assert!(
        deletes(&sim, &kept_id).is_empty(),
        "a node Kubernetes has is never deleted"
    );
    let namespaces_left: Vec<String> = sim.namespaces().into_iter().map(|n| n.name.to_string()).collect();
    assert!(namespaces_left.contains(&ns.name), "{namespaces_left:?}");
    assert!(
        namespaces_left.contains(&busy_ns),
        "409: it holds a volume; {namespaces_left:?}"
    );
    assert!(!nodes.is_finished() && !namespaces.is_finished());
    nodes.abort();
    namespaces.abort();
}

#[tokio::test]
async fn node_delete_waits_for_the_upgrade_to_end() {
    let _lock = support::exclusive().await;
    let ns = TestNamespace::new("nd-maint").await;
    let client = ns.client.clone();
    let objects = ClusterObjects::default();
    let node = format!("nd-{}-maint", suffix());
    objects
        .node(&client, &node, support::storageos_node_annotations(&node))
        .await;
    let sim = simulator(Duration::ZERO).await;
    let node_id = sim.add_node(&node, Health::Offline).unwrap().id;
    start_maintenance(&ns, "to-v2").await;

    let ctx = support::api_manager_context(&sim, NO_GC).await;
    let controller = tokio::spawn(node_delete::run(ctx.clone()));
    node_watch_synced(&client, Some(&sim)).await;
    delete_node(&client, &node).await;
    let suspended = wait_for("the DeleteSuspended event", SETTLE, || async {
        let e = events(&client, "default", Some("Node"), &node, "DeleteSuspended").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(message(&suspended[0]).contains("to-v2"), "{suspended:?}");
    // A probe deleted afterwards is seen (and suspended too): the controller is still at work.
    node_watch_synced(&client, Some(&sim)).await;
    assert!(deletes(&sim, &node_id).is_empty(), "nothing deleted during the upgrade");
    assert_eq!(
        events(&client, "default", Some("Node"), &node, "DeleteSuspended")
            .await
            .len(),
        1
    );

    end_maintenance(&ns).await;
    wait_for("the delete after the upgrade", SETTLE, || async {
        (!sim.nodes().iter().any(|n| n.id == node_id)).then_some(())
    })
    .await;
    controller.abort();
}

/// Deletes a volume through the API, as the CSI driver does when its PV goes.
async fn delete_volume(sim: &SimHandle, namespace_id: &str, volume_id: &str, version: &str) {
    let http = reqwest::Client::new();
    let token = support::sim_login(&http, sim).await;
    let resp = http
        .delete(format!(
            "{}/v2/namespaces/{namespace_id}/volumes/{volume_id}?version={version}",
            sim.url()
        ))
        .header("authorization", token)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{resp:?}");
}

#[tokio::test]
async fn a_deleted_namespace_is_deleted_in_storageos_once_its_volumes_are_gone() {
    let _lock = support::exclusive().await;
    let ns = TestNamespace::new("nsdel").await;
    let client = ns.client.clone();
    let sim = simulator(Duration::ZERO).await;
    sim.add_node("nsdel-node", Health::Online).unwrap();
    let volume = sim
        .add_volume(VolumeSeed {
            namespace: ns.name.clone(),
            name: "pv-1".into(),
            master_node: "nsdel-node".into(),
            ..VolumeSeed::default()
        })
        .unwrap();
    let ctx = support::api_manager_context(&sim, NO_GC).await;
    let controller = tokio::spawn(namespace_delete::run(ctx.clone()));
    namespace_watch_synced(&client, Some(&sim)).await;

    Api::<Namespace>::all(client.clone())
        .delete(&ns.name, &DeleteParams::default())
        .await
        .unwrap();
    wait_for("a delete refused while the volume remains", SETTLE, || async {
        deletes(&sim, &volume.namespace_id)
            .iter()
            .any(|r| r.status == 409 && !r.injected)
            .then_some(())
    })
    .await;
    assert!(sim.namespaces().iter().any(|n| n.name == ns.name));
    delete_volume(&sim, &volume.namespace_id, &volume.id, &volume.version).await;
    wait_for("the StorageOS namespace to be deleted", SETTLE, || async {
        (!sim.namespaces().iter().any(|n| n.name == ns.name)).then_some(())
    })
    .await;
    let tries = deletes(&sim, &volume.namespace_id);
    let tries: Vec<_> = tries
        .iter()
        .filter(|r| !r.path.contains("/volumes/"))
        .cloned()
        .collect();
    assert_eq!(statuses(&tries), [409, 200], "{tries:?}");
    assert!(!controller.is_finished());
    controller.abort();
}

#[tokio::test]
async fn an_unreachable_api_never_stops_the_controllers() {
    let _lock = support::exclusive().await;
    let ns = TestNamespace::new("nd-down").await;
    let client = ns.client.clone();
    let objects = ClusterObjects::default();
    let node = format!("nd-{}-down", suffix());
    objects
        .node(&client, &node, support::storageos_node_annotations(&node))
        .await;
    let sim = simulator(Duration::ZERO).await;
    let ctx = support::api_manager_context(&sim, FAST_GC).await;
    sim.shutdown().await;
    let nodes = tokio::spawn(node_delete::run(ctx.clone()));
    let namespaces = tokio::spawn(namespace_delete::run(ctx.clone()));
    node_watch_synced(&client, None).await;
    namespace_watch_synced(&client, None).await;
    delete_node(&client, &node).await;
    Api::<Namespace>::all(client.clone())
        .delete(&ns.name, &DeleteParams::default())
        .await
        .unwrap();
    // Deletes and GC passes fail with transport errors: the controllers say so and go on.
    let retrying = wait_for("the DeleteRetrying event", SETTLE, || async {
        let e = events(&client, "default", Some("Node"), &node, "DeleteRetrying").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(message(&retrying[0]).contains("cannot reach StorageOS"), "{retrying:?}");
    assert!(!nodes.is_finished() && !namespaces.is_finished());
    nodes.abort();
    namespaces.abort();
}

#[tokio::test]
async fn the_garbage_collection_reads_every_page_of_names() {
    let client = support::client().await;
    let api: Api<Namespace> = Api::all(client);
    let whole = async || -> std::collections::HashSet<String> {
        let list = api.list_metadata(&Default::default()).await.unwrap();
        list.items.iter().map(kube::ResourceExt::name_any).collect()
    };
    // Other tests create and delete namespaces meanwhile: what exists before and after must be
    // in the paged read.
    let before = whole().await;
    let paged = storageos_operator::runtime::kube::cache::names_in_pages(&api, 2)
        .await
        .unwrap();
    let after = whole().await;
    let throughout: Vec<_> = before.intersection(&after).collect();
    assert!(throughout.len() > 3, "{throughout:?}");
    let missing: Vec<_> = throughout.into_iter().filter(|n| !paged.contains(*n)).collect();
    assert!(missing.is_empty(), "names missing from the paged read: {missing:?}");
}
