//! Node label sync ("node-label"): Kubernetes node labels are the source of truth for the labels
//! of the StorageOS node of the same name.
//!
//! `storageos.com/computeonly` goes through `PUT /nodes/{id}/compute-only` (missing = false,
//! invalid = reported and unchanged); unreserved labels are sent as one set together with the
//! node's current reserved labels (the Go api-manager sent only the unreserved ones, which the API
//! rejects once a node holds a reserved label, docs/api-manager.md); other `storageos.com/` keys are
//! reported, never sent. A node StorageOS does not know is left alone.
//!
//! Only nodes whose CSI annotation names StorageOS are synced: before the StorageOS CSI node
//! plugin registered on a node, StorageOS has nothing to label there. Reconciles run on label
//! changes of those nodes (and when the annotation appears); the resync loop compares all of
//! those nodes in one pass and reconciles only the ones that differ, so an idle cluster sees no
//! writes.

use std::collections::HashMap;
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::Context;
use super::config::LabelSyncConfig;
use super::labels::{self, Failures, LabelSync, NodePlan, Syncing, plan_node};
use super::node_state::NodeState;
use crate::runtime::kube::cache::Shared;
use crate::runtime::kube::controller::{ReconcileError, category};
use crate::storageos;
use crate::storageos_poll;
use std::future::Future;

/// The controller's name in metrics, logs and events.
pub const NAME: &str = "node-label";

/// The process's Node cache: labels and whether StorageOS runs there are all this reads.
type NodeMeta = NodeState;

/// Why a node's labels could not be synced (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// StorageOS could not be read or refused a write for now.
    #[error("cannot sync the labels of node {node} to StorageOS: {failures}; retrying with backoff")]
    Api { node: String, failures: Failures },
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        category::STORAGEOS
    }
}

fn api_error(node: &NodeMeta, failures: Failures) -> Error {
    Error::Api {
        node: node.name_any(),
        failures,
    }
}

/// What the watch reacts to: the labels of nodes that run StorageOS.
fn fingerprint(node: &NodeMeta) -> Option<u64> {
    node.runs_storageos().then(|| labels::fingerprint(&node.labels))
}

/// Runs the controller until the future is dropped (at once, when it is turned off).
pub async fn run(ctx: Arc<Context>) {
    labels::run::<NodeLabelSync>(ctx).await;
}

/// The Node label sync, run by [`labels::run`].
pub struct NodeLabelSync;

impl LabelSync for NodeLabelSync {
    type Object = NodeMeta;
    type Error = Error;
    const NAME: &'static str = NAME;

    fn config(ctx: &Context) -> Option<LabelSyncConfig> {
        ctx.config.node_label
    }

    fn source(ctx: &Context) -> Shared<NodeMeta> {
        ctx.nodes.clone()
    }

    fn fingerprint(obj: &NodeMeta) -> Option<u64> {
        fingerprint(obj)
    }

    fn sync(obj: Arc<NodeMeta>, st: Arc<Syncing>) -> impl Future<Output = Result<Action, Error>> + Send {
        sync(obj, st)
    }

    fn resync(st: Arc<Syncing>, cached: Vec<Arc<NodeMeta>>) -> impl Future<Output = Vec<ObjectRef<NodeMeta>>> {
        resync(st, cached)
    }
}

async fn sync(node: Arc<NodeMeta>, st: Arc<Syncing>) -> Result<Action, Error> {
    if !node.runs_storageos() {
        return Ok(Action::await_change());
    }
    let ctx = &st.ctx;
    let name = node.name_any();
    let nodes = ctx
        .metrics
        .track("list_nodes", ctx.api.list_nodes())
        .await
        .map_err(|e| api_error(&node, Failures::of("list nodes", &e)))?;
    let Some(current) = nodes.into_iter().find(|n| n.name == name) else {
        tracing::debug!(node = %name, "StorageOS does not know this node; nothing to sync");
        return Ok(Action::await_change());
    };
    let plan = plan_node(&node.labels.to_map(), &current);
    st.report_not_applied(node.as_ref(), &plan.not_applied).await;
    apply(&node, &st, plan, current).await
}

/// Writes what `plan` says, each step even if another failed.
async fn apply(
    node: &NodeMeta,
    st: &Syncing,
    plan: NodePlan,
    mut current: storageos::models::Node,
) -> Result<Action, Error> {
    let ctx = &st.ctx;
    let mut failures = Failures::default();
    let mut applied = Vec::new();
    if let Some(compute_only) = plan.compute_only {
        let call = ctx.api.set_compute_only(&current.id, compute_only, &current.version);
        match ctx.metrics.track("ensure_compute_only", call).await {
            Ok(n) => {
                current = n;
                applied.push(format!("compute-only {compute_only}"));
            }
            Err(e) => failures.add("set compute-only", &e),
        }
    }
    if let Some(wanted) = &plan.labels {
        let call = ctx.api.set_node_unreserved_labels(&current, wanted);
        match ctx.metrics.track("ensure_unreserved_node_labels", call).await {
            Ok(_) => applied.push(format!("{} unreserved labels", wanted.len())),
            Err(e) => failures.add("set labels", &e),
        }
    }
    st.finish(node, "node", &applied, failures)
        .await
        .map_err(|f| api_error(node, f))
}

/// The next node list of the shared poll, then the Kubernetes nodes that run StorageOS (the
/// same scope as [`sync`]) whose StorageOS node differs.
async fn resync(st: Arc<Syncing>, cached: Vec<Arc<NodeMeta>>) -> Vec<ObjectRef<NodeMeta>> {
    let mut polls = st.ctx.storageos.nodes();
    let snapshot = storageos_poll::next(&mut polls).await;
    let Some(nodes) = snapshot.as_ref().and_then(|s| s.ok()) else {
        tracing::warn!(
            controller = NAME,
            "node label resync cannot list StorageOS nodes; the next pass retries"
        );
        return Vec::new();
    };
    let by_name: HashMap<&str, &storageos::models::Node> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    cached
        .iter()
        .filter(|node| node.runs_storageos())
        .filter(|node| {
            by_name
                .get(node.name_any().as_str())
                .is_some_and(|current| plan_node(&node.labels.to_map(), current).has_writes())
        })
        .map(|node| ObjectRef::from_obj(node.as_ref()))
        .collect()
}
