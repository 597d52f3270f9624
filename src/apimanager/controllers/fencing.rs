//! The fencer (controller `fencer`, docs/api-manager.md): when StorageOS reports a node
//! `offline`, pods on it that opted in (`storageos.com/fenced=true`) and use StorageOS volumes
//! whose masters are all online elsewhere are deleted with grace period 0, with their
//! VolumeAttachments on that node, so that a StatefulSet can start them on another node without
//! waiting for the lost node. A pod with any volume not known to be healthy is left alone (the
//! node may hold the only copy of its data) and gets a warning event saying why.
//!
//! - StorageOS nodes come from the shared poll (`-node-poll-interval`, at least 5 s,
//!   [`storageos_poll`]); each new node list is looked at at once. A node that goes offline
//!   starts one *episode* ([`episodes`]); `unknown` is never fenced, and a node without a
//!   Kubernetes Node of its name is left alone.
//! - An episode retries every `-node-fencer-retry-interval` while pods remain to be fenced and
//!   the node stays offline, for at most `-node-fencer-timeout`. At most `-node-fencer-workers`
//!   nodes are worked on at once. Episodes are tasks owned by the controller: they end with it
//!   (the Go fencer's actions outlived it).
//! - Nothing is fenced while more than half of the StorageOS nodes are offline at once (a
//!   partition or an API fault is likelier than half the cluster dying): running episodes stop,
//!   the StorageOSCluster gets one `FencingHeld` event, `storageos_fencer_held_passes_total`
//!   counts the polls held. A volume whose master StorageOS still places on the offline node is
//!   not considered safe. `--enable-node-fencing=false` (`spec.disableFencing`) turns it off.
//! - Nothing is fenced while an upgrade is in progress (or while that cannot be read); the Node
//!   gets a `FencingSuspended` event once per episode.
//! - Events: `Fenced` (Warning) on each deleted pod, `FencingSkipped` (Warning) once per pod and
//!   episode for a pod left alone.

pub mod episodes;
pub mod select;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Client, ResourceExt};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use super::Context;
use super::config::FencerConfig;
use crate::apimanager::maintenance::Maintenance;
use crate::apimanager::metrics::FencerOutcome;
use crate::apimanager::storageos_poll;
use crate::crd::StorageOSCluster;
use crate::reasons;
use crate::runtime::controller::Kit;
use crate::storageos::models::{Namespace, Volume};
use crate::telemetry::spans;
use episodes::{Episodes, Start};
use select::Claim;

/// The controller name (metrics, logs).
pub const CONTROLLER: &str = "fencer";

/// Why a fencing pass could not look at the node's pods.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the Node or listing its pods failed; the pass is retried.
    #[error("Kubernetes API: {0}; check that the apiserver is reachable and the api-manager may list pods and nodes")]
    Kube(#[from] kube::Error),
}

/// Runs the controller until the future is dropped (its episodes are aborted with it); returns
/// at once when fencing is turned off (`--enable-node-fencing=false`).
pub async fn run(ctx: Arc<Context>) {
    let Some(config) = ctx.config.fencer else {
        tracing::info!(controller = CONTROLLER, "fencing is turned off (spec.disableFencing)");
        return;
    };
    let kit = Arc::new(ctx.kit(CONTROLLER));
    let workers = Arc::new(Semaphore::new(config.workers.into()));
    let mut episodes = Episodes::new(config.expiry);
    let mut running: JoinSet<(String, u64)> = JoinSet::new();
    let mut held = false;
    let mut nodes = ctx.storageos.nodes();
    let work = async {
        loop {
            tokio::select! {
                snapshot = storageos_poll::next(&mut nodes) => {
                    let Some(snapshot) = snapshot else { break };
                    // A failed read says nothing about any node: nothing starts or stops.
                    let Some(nodes) = snapshot.ok() else { continue };
                    if let Some((offline, total)) = episodes::too_many_offline(nodes) {
                        ctx.metrics.count_fencing_held();
                        episodes.hold_all();
                        if !held {
                            held = true;
                            announce_hold(&ctx, &kit, offline, total).await;
                        }
                        continue;
                    }
                    held = false;
                    for start in episodes.observe(nodes, Instant::now()) {
                        tracing::info!(controller = CONTROLLER, node = %start.node, "StorageOS reports the node offline");
                        running.spawn(episode(ctx.clone(), kit.clone(), workers.clone(), config, start));
                    }
                }
                Some(ended) = running.join_next(), if !running.is_empty() => match ended {
                    Ok((node, id)) => episodes.ended(&node, id),
                    Err(e) => tracing::error!(controller = CONTROLLER, error = %e, "a fencing task failed"),
                },
            }
        }
    };
    work.await;
}

/// Says once, on the StorageOSCluster(s), that fencing is held because too many nodes are
/// offline at once.
async fn announce_hold(ctx: &Context, kit: &Kit, offline: usize, total: usize) {
    let note = format!(
        "StorageOS reports {offline} of {total} nodes offline at once: more likely a network partition or an API fault \
         than lost nodes, so no pod is fenced until at most half are offline"
    );
    tracing::warn!(controller = CONTROLLER, offline, total, "{note}");
    match Api::<StorageOSCluster>::all(ctx.kube.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(clusters) => {
            for c in &clusters.items {
                kit.event(c, EventType::Warning, reasons::FENCING_HELD, note.clone())
                    .await;
            }
        }
        Err(e) => {
            tracing::warn!(controller = CONTROLLER, error = %e, "cannot list StorageOSClusters to report the hold")
        }
    }
}

/// What one episode has already done and said, so that each warning is published once.
#[derive(Debug, Default)]
struct Memory {
    suspended: bool,
    /// UIDs of pods warned about.
    skipped: HashSet<String>,
    /// UIDs of pods deleted (one with a finalizer stays until it is removed: not again).
    fenced: HashSet<String>,
}

/// One episode: fence, then retry while something is left, the node stays offline and the
/// timeout has not passed.
async fn episode(
    ctx: Arc<Context>,
    kit: Arc<Kit>,
    workers: Arc<Semaphore>,
    config: FencerConfig,
    start: Start,
) -> (String, u64) {
    let Start {
        node,
        id,
        episode,
        mut stop,
    } = start;
    let deadline = Instant::now() + config.timeout;
    let retry = config.retry;
    let mut memory = Memory::default();
    let span = spans::fencing(&node, episode);
    let outcome = async {
        loop {
            if *stop.borrow() {
                break "stopped";
            }
            let finished = {
                let Ok(_permit) = workers.acquire().await else { break "stopped" };
                match attempt(&ctx, &kit, &node, &id, &mut memory).await {
                    Ok(finished) => finished,
                    Err(e) => {
                        tracing::warn!(controller = CONTROLLER, node, error = %e, "fencing pass failed; retrying");
                        false
                    }
                }
            };
            if finished {
                break "done";
            }
            if Instant::now() + retry >= deadline {
                tracing::info!(controller = CONTROLLER, node, timeout = ?config.timeout, "fencing timed out; pods were left on the offline node");
                break "timed_out";
            }
            if wait_or_stop(&mut stop, retry).await {
                break "stopped";
            }
        }
    }
    .instrument(span.clone())
    .await;
    spans::fencing_done(&span, memory.fenced.len(), memory.skipped.len(), outcome);
    (node, episode)
}

/// Sleeps `retry`; true if told to stop meanwhile.
async fn wait_or_stop(stop: &mut watch::Receiver<bool>, retry: std::time::Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(retry) => *stop.borrow(),
        changed = stop.changed() => changed.is_err() || *stop.borrow(),
    }
}

/// One pass over the node; Ok(true) when nothing is left to fence.
async fn attempt(ctx: &Context, kit: &Kit, node: &str, id: &str, memory: &mut Memory) -> Result<bool, Error> {
    let Some(k8s_node) = Api::<Node>::all(ctx.kube.clone()).get_opt(node).await? else {
        tracing::info!(
            controller = CONTROLLER,
            node,
            "no Kubernetes node of this name; nothing to fence"
        );
        return Ok(true);
    };
    let mut finished = false;
    kit.timed(&k8s_node, async {
        finished = fence_node(ctx, kit, &k8s_node, id, memory).await?;
        Ok::<_, Error>(Action::await_change())
    })
    .await?;
    Ok(finished)
}

/// A StorageOS claim of a pod: the volume is `namespace/pv`.
#[derive(Debug, Clone)]
struct StorageOSClaim {
    namespace: String,
    pv: String,
}

async fn fence_node(ctx: &Context, kit: &Kit, node: &Node, id: &str, memory: &mut Memory) -> Result<bool, Error> {
    let name = node.name_any();
    let pods = Api::<Pod>::all(ctx.kube.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
        .await?;
    let mut left = 0usize;
    let mut targets = Vec::new();
    for pod in pods.items {
        if memory.fenced.contains(&pod.uid().unwrap_or_default()) {
            continue;
        }
        match select::opted_in(&pod) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(why) => {
                tracing::debug!(controller = CONTROLLER, pod = %pod.name_any(), "not fenced: {why}");
                continue;
            }
        }
        match storageos_claims(&ctx.kube, &pod).await {
            Ok(claims) if claims.is_empty() => {}
            Ok(claims) => targets.push((pod, claims)),
            Err(e) => {
                tracing::warn!(controller = CONTROLLER, pod = %pod.name_any(), error = %e, "cannot read the pod's claims; retrying");
                left += 1;
            }
        }
    }
    if targets.is_empty() {
        return Ok(left == 0);
    }
    match ctx.maintenance().await {
        Ok(Maintenance::Off) => {}
        Ok(Maintenance::On { upgrade }) => {
            tracing::info!(controller = CONTROLLER, node = %name, upgrade, "fencing suspended during the upgrade");
            if !memory.suspended {
                memory.suspended = true;
                let note = format!(
                    "StorageOS reports node {name} offline, but upgrade {upgrade} is in progress: {} pod(s) are not fenced while it runs",
                    targets.len()
                );
                ctx.metrics.count_fencer(FencerOutcome::Suspended);
                kit.event(node, EventType::Warning, reasons::FENCING_SUSPENDED, note)
                    .await;
            }
            return Ok(false);
        }
        Err(e) => {
            tracing::warn!(controller = CONTROLLER, node = %name, error = %e, "cannot tell whether an upgrade is in progress; not fencing now");
            return Ok(false);
        }
    }
    let mut volumes = Volumes::default();
    let mut attachments = None;
    for (pod, claims) in targets {
        let problems = volumes.problems(ctx, &claims, id).await;
        if !problems.is_empty() {
            left += 1;
            let problems = problems.join("; ");
            tracing::info!(controller = CONTROLLER, node = %name, pod = %pod.name_any(), "not fenced: {problems}");
            if memory.skipped.insert(pod.uid().unwrap_or_default()) {
                let note = format!(
                    "StorageOS reports node {name} offline, but the pod is not fenced: {problems}. It is left alone because the node may hold the only copy of the data"
                );
                ctx.metrics.count_fencer(FencerOutcome::Skipped);
                kit.event(&pod, EventType::Warning, reasons::FENCING_SKIPPED, note)
                    .await;
            }
            continue;
        }
        match fence_pod(ctx, kit, &name, &pod, &claims, &mut attachments).await {
            Ok(()) => {
                memory.fenced.insert(pod.uid().unwrap_or_default());
            }
            Err(e) => {
                tracing::warn!(controller = CONTROLLER, node = %name, pod = %pod.name_any(), error = %e, "cannot delete the pod; retrying");
                left += 1;
            }
        }
    }
    Ok(left == 0)
}

/// The pod's claims that are StorageOS volumes. A missing PVC or PV is not StorageOS (nothing
/// to fence for it); a failed read is an error (the pod waits for the next pass).
async fn storageos_claims(kube: &Client, pod: &Pod) -> Result<Vec<StorageOSClaim>, kube::Error> {
    let namespace = pod.namespace().unwrap_or_default();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(kube.clone(), &namespace);
    let pvs: Api<PersistentVolume> = Api::all(kube.clone());
    let mut claims = Vec::new();
    for claim in select::claim_names(pod) {
        let Some(pvc) = pvcs.get_opt(&claim).await? else {
            continue;
        };
        let pv = match select::classify(&pvc) {
            Claim::Unbound => continue,
            Claim::StorageOS { pv } => pv,
            Claim::AskPv { pv } => match pvs.get_opt(&pv).await? {
                Some(v) if select::is_storageos_pv(&v) => pv,
                _ => continue,
            },
        };
        claims.push(StorageOSClaim {
            namespace: namespace.clone(),
            pv,
        });
    }
    Ok(claims)
}

/// StorageOS volumes looked up during one pass: each list is read at most once per pass.
#[derive(Default)]
struct Volumes {
    namespaces: Option<Result<Vec<Namespace>, String>>,
    /// By namespace ID.
    volumes: HashMap<String, Result<Vec<Volume>, String>>,
}

impl Volumes {
    /// Why fencing a pod with these claims is unsafe; empty when every volume was found with
    /// its master online.
    async fn problems(&mut self, ctx: &Context, claims: &[StorageOSClaim], offline_id: &str) -> Vec<String> {
        let mut problems = Vec::new();
        for c in claims {
            match self.find(ctx, &c.namespace, &c.pv).await {
                Ok(v) => problems.extend(select::unhealthy(&v, &c.namespace, offline_id)),
                Err(e) => problems.push(format!("cannot look up StorageOS volume {}/{}: {e}", c.namespace, c.pv)),
            }
        }
        problems
    }

    async fn find(&mut self, ctx: &Context, namespace: &str, pv: &str) -> Result<Volume, String> {
        if self.namespaces.is_none() {
            let listed = ctx.metrics.track("list_namespaces", ctx.api.list_namespaces()).await;
            self.namespaces = Some(listed.map_err(|e| e.to_string()));
        }
        let namespaces = match &self.namespaces {
            Some(Ok(n)) => n,
            Some(Err(e)) => return Err(e.clone()),
            None => return Err("namespaces not read".into()),
        };
        let id = namespaces
            .iter()
            .find(|n| n.name == namespace)
            .map(|n| n.id.clone())
            .ok_or_else(|| format!("StorageOS has no namespace {namespace:?}"))?;
        if !self.volumes.contains_key(&id) {
            let listed = ctx.metrics.track("list_volumes", ctx.api.list_volumes(&id)).await;
            self.volumes.insert(id.clone(), listed.map_err(|e| e.to_string()));
        }
        match self.volumes.get(&id) {
            Some(Ok(list)) => list
                .iter()
                .find(|v| v.name == pv)
                .cloned()
                .ok_or_else(|| format!("StorageOS has no volume {pv:?} in namespace {namespace:?}")),
            Some(Err(e)) => Err(e.clone()),
            None => Err("volumes not read".into()),
        }
    }
}

/// Deletes the pod (grace 0, only this very pod) and then its StorageOS VolumeAttachments on
/// the node. Attachment failures are reported, not retried: the attach-detach controller removes
/// them in time anyway.
async fn fence_pod(
    ctx: &Context,
    kit: &Kit,
    node: &str,
    pod: &Pod,
    claims: &[StorageOSClaim],
    attachments: &mut Option<Result<Vec<VolumeAttachment>, String>>,
) -> Result<(), kube::Error> {
    let pods: Api<Pod> = Api::namespaced(ctx.kube.clone(), &pod.namespace().unwrap_or_default());
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match pods.delete(&pod.name_any(), &now).await {
        Ok(_) => {}
        // Gone already, or replaced by a new pod of the same name (precondition failed).
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return Ok(()),
        Err(e) => return Err(e),
    }
    let vas: Api<VolumeAttachment> = Api::all(ctx.kube.clone());
    if attachments.is_none() {
        *attachments = Some(
            vas.list(&ListParams::default())
                .await
                .map(|l| l.items)
                .map_err(|e| e.to_string()),
        );
    }
    let pvs: BTreeSet<String> = claims.iter().map(|c| c.pv.clone()).collect();
    let mut deleted = Vec::new();
    let mut failed = Vec::new();
    match attachments {
        Some(Ok(list)) => {
            for va in select::attachments(list, node, &pvs) {
                let name = va.name_any();
                match vas.delete(&name, &DeleteParams::default().grace_period(0)).await {
                    Ok(_) => deleted.push(name),
                    Err(kube::Error::Api(s)) if s.code == 404 => deleted.push(name),
                    Err(e) => failed.push(format!("{name} ({e})")),
                }
            }
        }
        Some(Err(e)) => failed.push(format!("cannot list VolumeAttachments ({e})")),
        None => {}
    }
    let mut note = format!(
        "StorageOS reports node {node} offline and the pod's StorageOS volumes are online elsewhere: deleted the pod (grace period 0) so that it can start on another node"
    );
    if !deleted.is_empty() {
        note.push_str(&format!(", and VolumeAttachments {}", deleted.join(", ")));
    }
    if !failed.is_empty() {
        note.push_str(&format!("; could not delete VolumeAttachments: {}", failed.join(", ")));
    }
    tracing::info!(controller = CONTROLLER, node, pod = %pod.name_any(), namespace = ?pod.namespace(), attachments = ?deleted, failed = ?failed, "pod fenced");
    ctx.metrics.count_fencer(FencerOutcome::Fenced);
    kit.event(pod, EventType::Warning, reasons::FENCED, note).await;
    Ok(())
}
