//! Integration tier: attach recovery and volume health from StorageOS's own truth, on the real
//! control plane with an in-process simulator driven as the CSI path drives StorageOS (attach
//! and detach per node through `/v2`, replica health, nodes going offline).
//!
//! - A VolumeAttachment whose node StorageOS does not hold the volume on, while a pod on another
//!   node uses the PVC, is deleted within one volume poll, for a pod not opted in to fencing;
//!   one StorageOS confirms stays. A lost node's attachment (offline in StorageOS, NotReady, its
//!   pod force-deleted) is deleted, but not while more than half the nodes are offline nor
//!   while an upgrade holds maintenance.
//! - A replica going syncing is one Warning `VolumeConditionAbnormal` on the PVC (and its pod),
//!   ready again one Normal `VolumeConditionNormal`, and an idle minute after it neither events
//!   nor writes.
//!
//! Maintenance is cluster-wide, so every test holds [`support::exclusive`].
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::fencing::World;
use crate::out_of_service::set_ready;
use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use storageos_operator::apimanager::controllers::{Context, attach, volume_health};
use storageos_operator::apimanager::metrics::AttachmentDeleted;
use storageos_operator::reasons;
use storageos_operator::sim::{SimHandle, VolumeSeed};
use storageos_operator::storageos::Health;
use support::evidence::after_polls;
use support::identity::{API_MANAGER, writes_by};
use support::{events, from_json, message, wait_for};

const FLAGS: &[&str] = &[
    "-node-poll-interval",
    "5s",
    "-volume-poll-interval",
    "1s",
    "-enable-attach-recovery",
];
/// The simulator's volume list of one namespace: one per volume poll.
const VOLUME_POLL: &str = "GET /v2/namespaces/{id}/volumes";
/// The fresh read of one volume attach recovery makes before it deletes anything.
const VOLUME_READ: &str = "GET /v2/namespaces/{id}/volumes/{id}";
/// The StorageClass of the tests' static PVs (no such class needs to exist to bind).
const CLASS: &str = "storageos-attach-test";

/// Attach recovery as the api-manager runs it, on `sim`; also the controllers' context (its
/// metrics).
async fn start_recovery(sim: &SimHandle) -> (tokio::task::JoinHandle<()>, Arc<Context>) {
    let ctx = support::api_manager_context(sim, FLAGS).await;
    let task = tokio::spawn(attach::run(ctx.clone()));
    // Its caches filled and a volume poll or two seen.
    after_polls(sim, VOLUME_POLL, 2).await;
    (task, ctx)
}

/// PVC `claim` bound to a StorageOS PV, with its volume (master on `master`, `replicas`
/// replicas, all ready) in the simulator; the PV's name.
async fn bound_claim(w: &World, claim: &str, master: &str, replicas: u8) -> String {
    let pv = format!("pv-{}-{claim}", w.id);
    w.objects.pv(&w.client, &pv, CLASS, &w.ns.name, claim, true).await;
    let pvc: PersistentVolumeClaim = from_json(json!({
        "metadata": {"name": claim},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": CLASS, "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}}
    }));
    w.ns.api::<PersistentVolumeClaim>()
        .create(&PostParams::default(), &pvc)
        .await
        .unwrap();
    w.sim
        .add_volume(VolumeSeed {
            replicas,
            ..support::seed::volume(&w.ns.name, &pv, claim, master)
        })
        .unwrap();
    pv
}

/// An attachment of `pv` on `node` the attacher reported attached (`status.attached`).
async fn attached(w: &World, short: &str, node: &str, pv: &str) -> String {
    let name = w.attachment(short, node, Some(pv)).await;
    Api::<VolumeAttachment>::all(w.client.clone())
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"attached": true}})),
        )
        .await
        .unwrap();
    name
}

/// Attaches (`Some(node)`) or detaches the volume of `pv` in StorageOS through `/v2`, as the
/// CSI driver's ControllerPublish and ControllerUnpublish do.
async fn storageos_attach(sim: &SimHandle, pv: &str, node: Option<&str>) {
    let v = sim.volumes().into_iter().find(|v| v.name == pv).expect("the volume");
    let http = reqwest::Client::new();
    let token = support::sim_login(&http, sim).await;
    let path = format!("{}/v2/namespaces/{}/volumes/{}/attach", sim.url(), v.namespace_id, v.id);
    let answer = match node {
        Some(node) => {
            let id = sim.nodes().into_iter().find(|n| n.name == node).expect("the node").id;
            http.post(&path)
                .header("authorization", &token)
                .json(&json!({"nodeID": id}))
                .send()
                .await
        }
        None => {
            http.delete(format!("{path}?version={}", v.version))
                .header("authorization", &token)
                .send()
                .await
        }
    }
    .unwrap();
    assert!(answer.status().is_success(), "{:?}", answer.text().await);
}

async fn wait_gone(w: &World, attachment: &str) {
    wait_for(
        &format!("VolumeAttachment {attachment} deleted"),
        Duration::from_secs(30),
        || async { (!w.attachment_exists(attachment).await).then_some(()) },
    )
    .await;
}

/// Waits for the `StaleAttachmentDeleted` event on `name` that mentions `mentions`.
async fn stale_event(w: &World, name: &str, mentions: &str) -> Event {
    support::wait_event(
        &w.client,
        &w.ns.name,
        name,
        reasons::STALE_ATTACHMENT_DELETED.name(),
        mentions,
    )
    .await
}

async fn stale_events(w: &World, kind: &str, name: &str) -> Vec<Event> {
    events(
        &w.client,
        &w.ns.name,
        Some(kind),
        name,
        reasons::STALE_ATTACHMENT_DELETED.name(),
    )
    .await
}

#[tokio::test]
async fn an_attachment_storageos_has_detached_goes_within_one_volume_poll_for_any_pod() {
    let _lock = support::exclusive().await;
    let w = World::new("attach-stale").await;
    let a = w.node("a", true).await;
    let b = w.node("b", true).await;
    let pv = bound_claim(&w, "data", &a, 0).await;
    // The pod moved to B (not opted in to fencing); StorageOS has the volume detached.
    w.pod("app", &b, None, &["data"]).await;
    let pod = w.ns.api::<Pod>().get("app").await.unwrap();
    assert!(
        !pod.metadata
            .labels
            .unwrap_or_default()
            .contains_key("storageos.com/fenced")
    );
    let (task, ctx) = start_recovery(&w.sim).await;

    let va = attached(&w, "stale", &a, &pv).await;
    let since = w.sim.requests().last().map_or(0, |r| r.seq);
    wait_gone(&w, &va).await;
    let polls = w
        .sim
        .requests()
        .iter()
        .filter(|r| r.seq > since && support::evidence::on_route(r, VOLUME_POLL))
        .count();
    assert!(
        polls <= 2,
        "deleted at the first volume poll that could see it (one may have been under way): {polls} polls"
    );
    let on_pvc = stale_event(&w, "data", &a).await;
    let note = message(&on_pvc);
    assert_eq!(on_pvc.type_.as_deref(), Some("Warning"));
    assert!(
        note.contains(&va) && note.contains("detached") && note.contains("app"),
        "{note}"
    );
    let on_pod = stale_event(&w, "app", &a).await;
    assert!(message(&on_pod).contains("data"), "{on_pod:?}");
    assert_eq!(ctx.metrics.attachments_deleted(AttachmentDeleted::Contradicted), 1);
    task.abort();
}

#[tokio::test]
async fn an_attachment_storageos_confirms_stays_and_goes_once_storageos_detaches() {
    let _lock = support::exclusive().await;
    let w = World::new("attach-held").await;
    let a = w.node("a", true).await;
    let b = w.node("b", true).await;
    let pv = bound_claim(&w, "data", &a, 0).await;
    storageos_attach(&w.sim, &pv, Some(&a)).await;
    // A second pod of the claim on B (it would wait with Multi-Attach): the volume is A's.
    w.pod("app", &b, None, &["data"]).await;
    let (task, _) = start_recovery(&w.sim).await;
    let va = attached(&w, "live", &a, &pv).await;

    after_polls(&w.sim, VOLUME_POLL, 4).await;
    assert!(
        w.attachment_exists(&va).await,
        "StorageOS holds the volume on online node {a}"
    );
    assert!(stale_events(&w, "PersistentVolumeClaim", "data").await.is_empty());

    // Control: once StorageOS detaches it, the same attachment goes.
    storageos_attach(&w.sim, &pv, None).await;
    wait_gone(&w, &va).await;
    task.abort();
}

#[tokio::test]
async fn a_lost_nodes_attachment_goes_but_not_in_a_partition_nor_during_an_upgrade() {
    let _lock = support::exclusive().await;
    let w = World::new("attach-lost").await;
    let a = w.node("a", true).await;
    let b = w.node("b", true).await;
    let c = w.node("c", true).await;
    let pv = bound_claim(&w, "data", &a, 0).await;
    storageos_attach(&w.sim, &pv, Some(&a)).await;
    w.pod("app", &a, None, &["data"]).await;
    let va = attached(&w, "lost", &a, &pv).await;
    let (task, ctx) = start_recovery(&w.sim).await;

    // A is lost: offline in StorageOS and NotReady, but its pod is still there.
    w.sim.set_health(&a, Health::Offline).unwrap();
    set_ready(&w.client, &a, false).await;
    after_polls(&w.sim, "GET /v2/nodes", 1).await;
    after_polls(&w.sim, VOLUME_POLL, 3).await;
    assert!(
        w.attachment_exists(&va).await,
        "the pod on {a} was not force-deleted yet"
    );

    // Force-deleted: but B is offline too, 2 of 3 nodes: a partition is likelier. (The node
    // list read after B went offline, and a volume poll after it, before the pod goes.)
    w.sim.set_health(&b, Health::Offline).unwrap();
    after_polls(&w.sim, "GET /v2/nodes", 1).await;
    after_polls(&w.sim, VOLUME_POLL, 1).await;
    w.ns.api::<Pod>()
        .delete(
            "app",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    after_polls(&w.sim, "GET /v2/nodes", 2).await;
    after_polls(&w.sim, VOLUME_POLL, 3).await;
    assert!(w.attachment_exists(&va).await, "more than half of the nodes offline");

    // Back to one of three offline, but an upgrade holds maintenance.
    support::start_maintenance(&w.ns, "up-attach").await;
    w.sim.set_health(&b, Health::Online).unwrap();
    after_polls(&w.sim, "GET /v2/nodes", 2).await;
    // Evidence it got as far as the fresh reads before the delete, twice.
    after_polls(&w.sim, VOLUME_READ, 2).await;
    assert!(w.attachment_exists(&va).await, "an upgrade is in progress");
    assert!(stale_events(&w, "PersistentVolumeClaim", "data").await.is_empty());

    // The upgrade ends: the attachment goes, and a pod on C attaches next.
    support::end_maintenance(&w.ns).await;
    w.pod("app-new", &c, None, &["data"]).await;
    wait_gone(&w, &va).await;
    let e = stale_event(&w, "data", &a).await;
    assert!(message(&e).contains("offline"), "{e:?}");
    assert_eq!(ctx.metrics.attachments_deleted(AttachmentDeleted::NodeLost), 1);
    task.abort();
}

/// The api-manager's writes in the test namespace (events included) since `since`.
fn writes_in(w: &World, since: chrono::DateTime<chrono::Utc>) -> Vec<String> {
    let marker = format!(" {}/", w.ns.name);
    writes_by(API_MANAGER, since)
        .into_iter()
        .filter(|r| r.contains(&marker))
        .collect()
}

#[tokio::test]
async fn a_syncing_replica_is_one_warning_and_ready_again_one_normal_event_then_nothing() {
    let _lock = support::exclusive().await;
    let w = World::new("volume-health").await;
    let a = w.node("a", true).await;
    let _b = w.node("b", true).await;
    let pv = bound_claim(&w, "data", &a, 1).await;
    w.pod("app", &a, None, &["data"]).await;
    let ctx = support::api_manager_context(&w.sim, FLAGS).await;
    let task = tokio::spawn(volume_health::run(ctx));
    after_polls(&w.sim, VOLUME_POLL, 3).await;
    let abnormal = reasons::VOLUME_CONDITION_ABNORMAL.name();
    let normal = reasons::VOLUME_CONDITION_NORMAL.name();
    let of = |reason: &'static str| {
        let w = &w;
        async move { events(&w.client, &w.ns.name, Some("PersistentVolumeClaim"), "data", reason).await }
    };
    assert!(of(abnormal).await.is_empty(), "healthy at first sight: nothing to say");

    w.sim.set_replica_health(&w.ns.name, &pv, "syncing").unwrap();
    let warning = support::wait_event(&w.client, &w.ns.name, "data", abnormal, "syncing").await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert!(message(&warning).contains("left at"), "the sync progress: {warning:?}");
    support::wait_event(&w.client, &w.ns.name, "app", abnormal, "syncing").await;
    after_polls(&w.sim, VOLUME_POLL, 3).await;
    let warnings = of(abnormal).await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].count.unwrap_or(1), 1, "one event per change, not per poll");

    w.sim.set_replica_health(&w.ns.name, &pv, "ready").unwrap();
    let back = support::wait_event(&w.client, &w.ns.name, "data", normal, "healthy again").await;
    assert_eq!(back.type_.as_deref(), Some("Normal"));
    // The pod's too, before the idle minute starts: it is published after the claim's.
    support::wait_event(&w.client, &w.ns.name, "app", normal, "healthy again").await;

    // An idle minute, with the polls to show the controller ran through it.
    let idle_from = chrono::Utc::now();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        after_polls(&w.sim, VOLUME_POLL, 10).await;
    }
    let (warnings, normals) = (of(abnormal).await, of(normal).await);
    assert_eq!((warnings.len(), normals.len()), (1, 1), "{warnings:?} {normals:?}");
    assert_eq!(normals[0].count.unwrap_or(1), 1);
    let writes = writes_in(&w, idle_from);
    assert!(writes.is_empty(), "writes at idle: {writes:#?}");
    task.abort();
}
