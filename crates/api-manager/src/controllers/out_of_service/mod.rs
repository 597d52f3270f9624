//! The out-of-service controller (controller `out-of-service`, docs/api-manager.md), off unless
//! `spec.nodeOutOfService.automatic` (`--enable-node-out-of-service`): it taints a lost node
//! `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`, the Kubernetes signal of a
//! non-graceful node shutdown, so that Kubernetes force-deletes its pods and detaches its
//! volumes and the fencer moves every StorageOS pod on it (not only the opted-in ones).
//!
//! - A node is tainted when StorageOS has reported it offline for
//!   `--node-out-of-service-offline-polls` consecutive polls of the shared node poll, **and** its
//!   Kubernetes Node is NotReady (Ready False or Unknown), **and** it is not cordoned (a drain
//!   or a node upgrade on purpose), **and** at most half of the StorageOS nodes are offline (the
//!   fencer's partition guard), **and** no upgrade holds maintenance (nor is that unreadable).
//! - The taint is marked as this controller's with the annotation [`MARK`] on the Node; only a
//!   marked taint is ever removed, once the node has been online in StorageOS and Ready for
//!   `--node-out-of-service-cool-down`, poll after poll. A taint someone else applied stays.
//! - The Nodes come from the process's watch cache of Node states (taints, cordon, Ready, the
//!   mark; no list of every Node per poll); a failed StorageOS read taints nothing and starts
//!   every count again ([`decide`]). Each write carries the Node's resourceVersion, so a Node
//!   changed meanwhile, or a stale cached copy, is not overwritten (made again from a later poll).
//! - Events: `OutOfServiceTainted` (Warning) and `OutOfServiceUntainted` (Normal) on the Node
//!   and the StorageOSCluster, `OutOfServiceHeld` (Warning) on the StorageOSCluster once per
//!   hold. Metrics: `storageos_out_of_service_nodes` (Nodes carrying the marked taint) and
//!   `storageos_out_of_service_taints_total{action}`.

pub mod decide;

use std::sync::Arc;

use super::node_state::NodeState as Node;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::fencing::select::OUT_OF_SERVICE_TAINT;
use super::snapshot::{OnSnapshot, Subscription};
use super::{Context, cluster_event};
use crate::reasons;
use crate::runtime::kube::controller::ControllerKit;
use crate::storageos_poll::NodeSnapshot;
use decide::{Action, Decision, Hold, Memory, Rules, Seen};

/// The controller name (metrics, logs).
pub const CONTROLLER: &str = "out-of-service";

/// The annotation marking the out-of-service taint as this controller's (kept by the Node cache).
pub use super::node_state::MARK;

/// The taint's value, as the Kubernetes documentation of non-graceful node shutdown shows it.
pub const TAINT_VALUE: &str = "nodeshutdown";

/// Runs the controller until the future is dropped; returns at once when it is off.
pub async fn run(ctx: Arc<Context>) {
    let Some(config) = ctx.config.out_of_service else {
        return;
    };
    tracing::info!(controller = CONTROLLER, offline_polls = config.offline_polls, cool_down = ?config.cool_down, "tainting lost nodes out of service");
    let subscription = Subscription::to::<OutOfService>(&ctx);
    let kit = ctx.kit(CONTROLLER);
    let node_states = ctx.nodes.get(&ctx.kube, CONTROLLER);
    ctx.nodes.ready().await;
    let mut controller = OutOfService {
        node_states,
        kit,
        rules: config,
        memory: Memory::default(),
        held: None,
        ctx,
    };
    subscription.follow(&mut controller).await;
}

/// The controller between node snapshots.
struct OutOfService {
    ctx: Arc<Context>,
    /// Every Node's taints, cordon, Ready condition and mark ([`Context::nodes`]).
    node_states: kube::runtime::reflector::Store<Node>,
    kit: ControllerKit,
    rules: Rules,
    memory: Memory,
    /// The hold announced last, so that each is said once.
    held: Option<Hold>,
}

impl OnSnapshot for OutOfService {
    const NODES: bool = true;
    const VOLUMES: bool = false;

    async fn nodes(&mut self, snapshot: &NodeSnapshot) {
        let storageos = snapshot.ok().map(Vec::as_slice);
        // From the watch cache, not a list each poll; a patch made from a stale copy conflicts
        // (it carries the resourceVersion) and is made again from a later poll.
        let kube: Option<Vec<Arc<Node>>> = storageos.map(|_| self.node_states.state());
        let maintenance = self.ctx.maintenance().await.ok();
        let seen = Seen {
            storageos,
            kube: kube.as_deref(),
            maintenance: maintenance.as_ref(),
        };
        let decision = self.memory.decide(self.rules, seen, Instant::now());
        // A failed read decides nothing (not even that a hold ended).
        if let Some(nodes) = &kube {
            self.act(decision, nodes).await;
        }
    }
}

impl OutOfService {
    async fn act(&mut self, decision: Decision, nodes: &[Arc<Node>]) {
        let Decision { actions, held, marked } = decision;
        let mut marked = marked as i64;
        match held {
            // Once per hold: a partition whose count changes is the same hold.
            Some((hold, names))
                if self.held.as_ref().map(std::mem::discriminant) != Some(std::mem::discriminant(&hold)) =>
            {
                let note = hold.note(&names);
                tracing::warn!(controller = CONTROLLER, "{note}");
                cluster_event(
                    &self.ctx,
                    &self.kit,
                    EventType::Warning,
                    reasons::OUT_OF_SERVICE_HELD,
                    note,
                )
                .await;
                self.held = Some(hold);
            }
            Some(_) => {}
            None => self.held = None,
        }
        for action in actions {
            let name = match &action {
                Action::Taint { node, .. } | Action::Untaint { node } | Action::Unmark { node } => node.clone(),
            };
            let Some(node) = nodes.iter().find(|n| n.name_any() == name) else {
                continue;
            };
            let patch = match &action {
                Action::Taint { .. } => taint(
                    node,
                    &chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                ),
                Action::Untaint { .. } => untaint(node),
                Action::Unmark { .. } => unmark(node),
            };
            let patched = Api::<Node>::all(self.ctx.kube.clone())
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            if let Err(e) = patched {
                tracing::warn!(controller = CONTROLLER, node = %name, error = %e, "cannot change the Node's out-of-service taint; trying again at the next poll");
                continue;
            }
            match action {
                Action::Taint { why, .. } => {
                    marked += 1;
                    self.ctx.metrics.count_out_of_service(true);
                    let note = format!(
                        "{why}: tainted node {name} {OUT_OF_SERVICE_TAINT}={TAINT_VALUE}:NoExecute, so that its pods and volumes move to other nodes. \
                         The taint goes once the node is online in StorageOS and Ready for {:?}",
                        self.rules.cool_down
                    );
                    self.announce(node, EventType::Warning, reasons::OUT_OF_SERVICE_TAINTED, note)
                        .await;
                }
                Action::Untaint { .. } => {
                    marked -= 1;
                    self.ctx.metrics.count_out_of_service(false);
                    let note = format!(
                        "node {name} is online in StorageOS and Ready again for {:?}: removed the {OUT_OF_SERVICE_TAINT} taint this api-manager applied",
                        self.rules.cool_down
                    );
                    self.announce(node, EventType::Normal, reasons::OUT_OF_SERVICE_UNTAINTED, note)
                        .await;
                }
                Action::Unmark { .. } => {
                    tracing::info!(controller = CONTROLLER, node = %name, "the out-of-service taint was removed by someone else; forgot the mark");
                }
            }
        }
        self.ctx.metrics.set_out_of_service_nodes(marked.max(0));
    }

    /// Says it on the Node and on the StorageOSCluster.
    async fn announce(&self, node: &Node, kind: EventType, reason: reasons::Reason, note: String) {
        tracing::info!(controller = CONTROLLER, node = %node.name_any(), "{note}");
        self.kit.event(node, kind, reason, note.clone()).await;
        cluster_event(&self.ctx, &self.kit, kind, reason, note).await;
    }
}

/// The Node's taints without the out-of-service one, as JSON.
fn other_taints(node: &Node) -> Vec<Value> {
    node.spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .filter(|t| t.key != OUT_OF_SERVICE_TAINT)
        .filter_map(|t| serde_json::to_value(t).ok())
        .collect()
}

/// A merge patch applying the taint and the mark, only to the Node as read (its
/// resourceVersion: a Node changed meanwhile answers 409 and is retried at the next poll).
pub fn taint(node: &Node, now: &str) -> Value {
    let mut taints = other_taints(node);
    taints.push(json!({"key": OUT_OF_SERVICE_TAINT, "value": TAINT_VALUE, "effect": "NoExecute", "timeAdded": now}));
    json!({
        "metadata": {"resourceVersion": node.resource_version(), "annotations": {MARK: now}},
        "spec": {"taints": taints}
    })
}

/// A merge patch removing the taint and the mark, only from the Node as read.
pub fn untaint(node: &Node) -> Value {
    json!({
        "metadata": {"resourceVersion": node.resource_version(), "annotations": {MARK: null}},
        "spec": {"taints": other_taints(node)}
    })
}

/// A merge patch removing the mark only, from the Node as read.
pub fn unmark(node: &Node) -> Value {
    json!({"metadata": {"resourceVersion": node.resource_version(), "annotations": {MARK: null}}})
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn node(taints: Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "a", "resourceVersion": "42", "annotations": {"keep": "me", MARK: "t0"}},
            "spec": {"taints": taints}
        }))
        .unwrap()
    }

    #[test]
    fn patches_keep_other_taints_and_are_bound_to_the_node_as_read() {
        let other = json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"});
        let n = node(json!([other]));
        let p = taint(&n, "2026-11-26T21:00:00Z");
        assert_eq!(p["metadata"]["resourceVersion"], "42");
        assert_eq!(p["metadata"]["annotations"][MARK], "2026-11-26T21:00:00Z");
        assert_eq!(
            p["metadata"]["annotations"].as_object().unwrap().len(),
            1,
            "other annotations are merged, not sent"
        );
        let taints = p["spec"]["taints"].as_array().unwrap();
        assert_eq!(taints.len(), 2);
        assert_eq!(taints[0], other);
        assert_eq!(taints[1]["key"], OUT_OF_SERVICE_TAINT);
        assert_eq!(taints[1]["effect"], "NoExecute");

        let tainted = node(json!([other, {"key": OUT_OF_SERVICE_TAINT, "value": TAINT_VALUE, "effect": "NoExecute"}]));
        let p = untaint(&tainted);
        assert_eq!(p["spec"]["taints"], json!([other]));
        assert_eq!(p["metadata"]["annotations"][MARK], Value::Null);
        assert_eq!(p["metadata"]["resourceVersion"], "42");
        let p = unmark(&tainted);
        assert!(p.get("spec").is_none(), "the taints are not touched");
        assert_eq!(p["metadata"]["annotations"][MARK], Value::Null);
    }
}
