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
//! - **Out of service.** A Kubernetes Node tainted `node.kubernetes.io/out-of-service` (by an
//!   admin after a non-graceful shutdown, or by the [`super::out_of_service`] controller) is
//!   fenced too, at each poll, whatever StorageOS says of it: *every* pod there using StorageOS
//!   volumes goes, opted in or not, cordoned or not, and the hold does not apply (the taint is
//!   a statement, not a report that could be a partition). The volume checks, the upgrade
//!   suspension and the fresh reads still do; pods without StorageOS volumes are left to
//!   Kubernetes. The taints come from the process's watch cache of Node states (no list of
//!   every Node per poll); a pass reads its Node fresh and does nothing if the taint is gone.
//! - **Its own worker.** The process runs the node poll and the fencer on a thread with a
//!   runtime and clients of their own ([`worker`]), so that no other work of the api-manager
//!   (mirror passes, label syncs, webhook load) can hold a fencing pass past the poll.

pub mod episodes;
pub mod lookups;
pub mod pass;
pub mod select;
pub mod worker;

use std::collections::BTreeSet;
use std::sync::Arc;

use super::node_state::NodeState;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::events::EventType;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use super::config::FencerConfig;
use super::snapshot::{OnSnapshot, Subscription};
use super::{Context, cluster_event};
use crate::reasons;
use crate::runtime::kube::controller::ControllerKit;
use crate::storageos_poll::NodeSnapshot;
use crate::telemetry::spans;
use episodes::{Episodes, Start, Trigger};
use lookups::Live;

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
    let subscription = Subscription::to::<Fencer>(&ctx);
    // Which Nodes carry the out-of-service taint is read from the process's Node-state cache.
    // The kit (its metrics series) exists from the start, not once the cache is filled.
    let kit = Arc::new(ctx.kit(CONTROLLER));
    let node_states = ctx.nodes.get(&ctx.kube, CONTROLLER);
    ctx.nodes.ready().await;
    let mut fencer = Fencer {
        node_states,
        kit,
        workers: Arc::new(Semaphore::new(config.workers.into())),
        episodes: Episodes::new(config.expiry),
        running: JoinSet::new(),
        held: false,
        config,
        ctx,
    };
    subscription.follow(&mut fencer).await;
}

/// The fencer between node snapshots: its episodes, each a task it owns.
struct Fencer {
    ctx: Arc<Context>,
    /// Every Node's taints ([`Context::nodes`]).
    node_states: kube::runtime::reflector::Store<NodeState>,
    kit: Arc<ControllerKit>,
    config: FencerConfig,
    workers: Arc<Semaphore>,
    episodes: Episodes,
    /// Episode tasks, ending with `(node, episode)`; aborted when the fencer is dropped.
    running: JoinSet<(String, u64)>,
    /// Whether the hold (too many nodes offline) was announced.
    held: bool,
}

impl OnSnapshot for Fencer {
    const NODES: bool = true;
    const VOLUMES: bool = false;

    async fn nodes(&mut self, snapshot: &NodeSnapshot) {
        // Episodes that ended since the last snapshot: their nodes may start new ones.
        while let Some(ended) = self.running.try_join_next() {
            match ended {
                Ok((node, id)) => self.episodes.ended(&node, id),
                Err(e) => tracing::error!(controller = CONTROLLER, error = %e, "a fencing task failed"),
            }
        }
        // A failed read says nothing about any node: nothing starts or stops.
        let Some(nodes) = snapshot.ok() else { return };
        let tainted: BTreeSet<String> = self
            .node_states
            .state()
            .iter()
            .filter(|n| select::out_of_service(n))
            .map(|n| n.name_any())
            .collect();
        let held = episodes::too_many_offline(nodes);
        if let Some((offline, total)) = held {
            self.ctx.metrics.count_fencing_held();
            if !self.held {
                self.held = true;
                announce_hold(&self.ctx, &self.kit, offline, total).await;
            }
        } else {
            self.held = false;
        }
        let seen = episodes::triggers(nodes, &tainted, held.is_some());
        for start in self.episodes.observe(&seen, Instant::now()) {
            tracing::info!(controller = CONTROLLER, node = %start.node, trigger = ?start.trigger, "fencing the node");
            let (ctx, kit, workers) = (self.ctx.clone(), self.kit.clone(), self.workers.clone());
            self.running.spawn(episode(ctx, kit, workers, self.config, start));
        }
    }
}

/// Says once, on the StorageOSCluster(s), that fencing is held because too many nodes are
/// offline at once.
async fn announce_hold(ctx: &Context, kit: &ControllerKit, offline: usize, total: usize) {
    let note = format!(
        "StorageOS reports {offline} of {total} nodes offline at once: more likely a network partition or an API fault \
         than lost nodes, so no pod is fenced until at most half are offline"
    );
    tracing::warn!(controller = CONTROLLER, offline, total, "{note}");
    cluster_event(ctx, kit, EventType::Warning, reasons::FENCING_HELD, note).await;
}

/// One episode: fence, then retry while something is left, the node stays offline and the
/// timeout has not passed.
async fn episode(
    ctx: Arc<Context>,
    kit: Arc<ControllerKit>,
    workers: Arc<Semaphore>,
    config: FencerConfig,
    start: Start,
) -> (String, u64) {
    let Start {
        node,
        id,
        trigger,
        episode,
        mut stop,
    } = start;
    let deadline = Instant::now() + config.timeout;
    let retry = config.retry;
    let mut memory = pass::Memory::default();
    let span = spans::fencing(&node, episode);
    let outcome = async {
        loop {
            if *stop.borrow() {
                break "stopped";
            }
            let finished = {
                let Ok(_permit) = workers.acquire().await else { break "stopped" };
                match attempt(&ctx, &kit, &node, &id, trigger, &mut memory).await {
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
    spans::fencing_done(&span, memory.fenced(), memory.skipped(), outcome);
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
async fn attempt(
    ctx: &Context,
    kit: &ControllerKit,
    node: &str,
    id: &str,
    trigger: Trigger,
    memory: &mut pass::Memory,
) -> Result<bool, Error> {
    let Some(k8s_node) = Api::<NodeState>::all(ctx.kube.clone()).get_opt(node).await? else {
        tracing::info!(
            controller = CONTROLLER,
            node,
            "no Kubernetes node of this name; nothing to fence"
        );
        return Ok(true);
    };
    if trigger == Trigger::OutOfService && !select::out_of_service(&k8s_node) {
        tracing::info!(
            controller = CONTROLLER,
            node,
            "the out-of-service taint is gone; nothing to fence"
        );
        return Ok(true);
    }
    let io = Live { ctx, kit };
    let finished = kit
        .measure(&k8s_node, pass::fence_node(&io, &k8s_node, id, trigger, memory))
        .await?;
    Ok(finished)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_episode_waits_its_retry_interval_unless_told_to_stop() {
        let (stop, mut stopped) = watch::channel(false);
        let started = Instant::now();
        assert!(!wait_or_stop(&mut stopped, Duration::from_secs(30)).await);
        assert_eq!(started.elapsed(), Duration::from_secs(30));

        let started = Instant::now();
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(4)).await;
            stop.send(true).unwrap();
            stop
        });
        assert!(wait_or_stop(&mut stopped, Duration::from_secs(30)).await, "stopped");
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(4),
            "at once, not after the interval"
        );
        drop(stopper.await.unwrap());
        assert!(
            wait_or_stop(&mut stopped, Duration::from_secs(30)).await,
            "a closed channel stops too"
        );
    }
}
