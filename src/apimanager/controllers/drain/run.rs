//! The drain guard controller ("storageos-drain-guard"): at each volume snapshot of the shared
//! poll, places a guard ([`super::guard`]) on each node [`super::blocking`] says is unsafe and
//! removes the guards of nodes that are safe again, as [`super::plan`] decides. Guards are read
//! from watch caches of the api-manager's namespace, so an unchanged cluster costs no writes.
//!
//! The refusal is explained on the Node: `DrainBlocked` when a guard is placed (naming the
//! PVCs), `DrainWaiting` when the node is cordoned while guarded (`kubectl drain`, kured and
//! managed node upgrades cordon before they evict), `DrainUnblocked` when the guard goes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::guard::{self, BLOCKED_BY_ANNOTATION, NODE_ANNOTATION};
use super::plan::{self, Inputs, Upgrade};
use crate::apimanager::controllers::mirror::owner_of;
use crate::apimanager::controllers::node_state::NodeState;
use crate::apimanager::controllers::snapshot::{OnSnapshot, Subscription};
use crate::apimanager::controllers::{Context, reflect};
use crate::apimanager::maintenance::Maintenance;
use crate::apimanager::storageos_poll::{NodeSnapshot, VolumeSnapshot};
use crate::reasons;
use crate::runtime::kube::controller::ControllerKit;

/// The controller name in logs and metrics.
pub const CONTROLLER: &str = "storageos-drain-guard";

/// Why a guard was not written or removed; retried at the next volume poll.
#[derive(Debug, thiserror::Error)]
#[error(
    "Kubernetes API: {0}; retried at the next StorageOS poll (check the api-manager's Role storageos:api-manager-drain-guard in its namespace)"
)]
pub struct Error(#[from] kube::Error);

/// Runs the controller until the future is dropped; returns at once without a guard image.
pub async fn run(ctx: Arc<Context>) {
    let Some(config) = ctx.config.drain_guard.clone() else {
        tracing::info!(
            controller = CONTROLLER,
            "no --drain-guard-image: the drain gate is shown on nodes.api.storageos.com but not enforced"
        );
        return;
    };
    let subscription = Subscription::to::<Guards>(&ctx);
    let selector = guard::guard_selector();
    let config_of = || watcher::Config::default().labels(&selector);
    let (pods, a) = reflect(
        CONTROLLER,
        watcher(Api::<Pod>::namespaced(ctx.kube.clone(), &ctx.namespace), config_of()),
    );
    let (budgets, b) = reflect(
        CONTROLLER,
        watcher(
            Api::<PodDisruptionBudget>::namespaced(ctx.kube.clone(), &ctx.namespace),
            config_of(),
        ),
    );
    let k8s_nodes = ctx.nodes.get(&ctx.kube, CONTROLLER);
    let work = async {
        let _ = tokio::join!(pods.wait_until_ready(), budgets.wait_until_ready(), ctx.nodes.ready());
        tracing::info!(controller = CONTROLLER, namespace = %ctx.namespace, "guarding nodes that hold the last copy of a volume");
        let mut guards = Guards {
            ctx: &ctx,
            image: config.image,
            pods: &pods,
            budgets: &budgets,
            k8s_nodes: &k8s_nodes,
            kit: ctx.kit(CONTROLLER),
            node_names: None,
            announced: HashMap::new(),
        };
        subscription.follow(&mut guards).await;
    };
    tokio::join!(a, b, work);
}

/// What was last said on a guarded Node, so each event is published once.
#[derive(Default)]
struct Announced {
    blocked_by: String,
    cordoned: bool,
}

struct Guards<'a> {
    ctx: &'a Context,
    image: String,
    pods: &'a Store<Pod>,
    budgets: &'a Store<PodDisruptionBudget>,
    k8s_nodes: &'a Store<NodeState>,
    kit: ControllerKit,
    /// StorageOS node ID → name, from the last node list read.
    node_names: Option<HashMap<String, String>>,
    /// By node name.
    announced: HashMap<String, Announced>,
}

impl OnSnapshot for Guards<'_> {
    const NODES: bool = true;
    const VOLUMES: bool = true;

    async fn nodes(&mut self, snapshot: &NodeSnapshot) {
        if let Some(nodes) = snapshot.ok() {
            self.node_names = Some(nodes.iter().map(|n| (n.id.clone(), n.name.to_string())).collect());
        }
    }

    async fn volumes(&mut self, snapshot: &VolumeSnapshot) {
        // A failed read says nothing; guards wait for a node list to name their nodes.
        let Some(list) = snapshot.ok() else { return };
        let Some(node_names) = self.node_names.clone() else {
            tracing::debug!(controller = CONTROLLER, "guards wait for a node list");
            return;
        };
        let blocking = super::rule::blocking(list);
        let upgrade = match self.ctx.maintenance().await {
            Ok(Maintenance::Off) => Upgrade::Off,
            Ok(Maintenance::On { upgrade }) => Upgrade::On(upgrade),
            Err(e) => {
                tracing::warn!(controller = CONTROLLER, error = %e, "cannot tell whether an upgrade is under way: guards are kept");
                Upgrade::Unknown
            }
        };
        let guarded = self.guarded();
        let k8s_nodes: BTreeSet<String> = self.k8s_nodes.state().iter().map(|n| n.name_any()).collect();
        let plan = plan::plan(&Inputs {
            blocking: &blocking,
            complete: list.complete(),
            node_names: &node_names,
            k8s_nodes: &k8s_nodes,
            upgrade: &upgrade,
            guarded: &guarded,
        });
        if !plan.unnamed.is_empty() {
            tracing::warn!(controller = CONTROLLER, nodes = ?plan.unnamed, "StorageOS node IDs hold a last copy but are in no node list yet: guarded once listed");
        }
        for (node, blockers) in &plan.apply {
            match self.place(node, blockers).await {
                Ok(()) => self.announce_blocked(node, blockers).await,
                Err(e) => tracing::warn!(controller = CONTROLLER, %node, error = %e, "cannot place the drain guard"),
            }
        }
        for node in &plan.remove {
            match self.remove(node).await {
                Ok(true) => self.announce_unblocked(node).await,
                Ok(false) => {}
                Err(e) => tracing::warn!(controller = CONTROLLER, %node, error = %e, "cannot remove the drain guard"),
            }
        }
        let still: BTreeSet<&String> = guarded
            .keys()
            .chain(plan.apply.keys())
            .filter(|n| !plan.remove.contains(*n))
            .collect();
        self.announced.retain(|node, _| still.contains(node));
        for node in still {
            self.watch_for_drain(node).await;
        }
    }
}

impl Guards<'_> {
    /// The guards in place by node name: the `blocked-by` their pod and budget both show, or
    /// `None` when one is missing or the two disagree.
    fn guarded(&self) -> BTreeMap<String, Option<String>> {
        let node_of = |meta: &kube::api::ObjectMeta| {
            let annotated = meta.annotations.as_ref().and_then(|a| a.get(NODE_ANNOTATION)).cloned();
            annotated.or_else(|| meta.labels.as_ref().and_then(|l| l.get(guard::NODE_LABEL)).cloned())
        };
        let shown = |meta: &kube::api::ObjectMeta| {
            meta.annotations
                .as_ref()
                .and_then(|a| a.get(BLOCKED_BY_ANNOTATION))
                .cloned()
        };
        let mut out = BTreeMap::new();
        for b in self.budgets.state() {
            let Some(node) = node_of(&b.metadata) else { continue };
            let pod = self
                .pods
                .get(&ObjectRef::new(&b.name_any()).within(&self.ctx.namespace));
            let whole =
                pod.filter(|p| p.metadata.deletion_timestamp.is_none() && shown(&p.metadata) == shown(&b.metadata));
            out.insert(node, whole.and_then(|_| shown(&b.metadata)));
        }
        for p in self.pods.state() {
            if let Some(node) = node_of(&p.metadata) {
                out.entry(node).or_insert(None);
            }
        }
        out
    }

    /// Writes the budget, then the pod it controls.
    async fn place(&self, node: &str, blockers: &[String]) -> Result<(), Error> {
        let ns = &self.ctx.namespace;
        let Some(owner) = self
            .k8s_nodes
            .get(&ObjectRef::new(node))
            .and_then(|n| owner_of(n.as_ref()))
        else {
            return Ok(());
        };
        let params = PatchParams::apply(guard::FIELD_MANAGER).force();
        let budgets: Api<PodDisruptionBudget> = Api::namespaced(self.ctx.kube.clone(), ns);
        let budget = budgets
            .patch(
                &guard::name(node),
                &params,
                &Patch::Apply(guard::budget(ns, node, blockers, &owner)),
            )
            .await?;
        let controller = OwnerReference {
            api_version: PodDisruptionBudget::api_version(&()).into_owned(),
            kind: PodDisruptionBudget::kind(&()).into_owned(),
            name: budget.name_any(),
            uid: budget.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: None,
        };
        let pods: Api<Pod> = Api::namespaced(self.ctx.kube.clone(), ns);
        pods.patch(
            &guard::name(node),
            &params,
            &Patch::Apply(guard::pod(ns, node, blockers, &self.image, &controller)),
        )
        .await?;
        tracing::info!(controller = CONTROLLER, %node, blocked_by = %guard::blocked_by(blockers), "drain guard in place");
        Ok(())
    }

    /// Deletes the budget, then the pod (which the budget's deletion would delete too); whether
    /// either was still there (a cache that lags a removal asks for it twice).
    async fn remove(&self, node: &str) -> Result<bool, Error> {
        let name = guard::name(node);
        let budget = delete::<PodDisruptionBudget>(self.ctx, &name).await?;
        let pod = delete::<Pod>(self.ctx, &name).await?;
        if budget || pod {
            tracing::info!(controller = CONTROLLER, %node, "drain guard removed");
        }
        Ok(budget || pod)
    }

    async fn announce_blocked(&mut self, node: &str, blockers: &[String]) {
        let shown = guard::blocked_by(blockers);
        let said = self.announced.entry(node.to_string()).or_default();
        if said.blocked_by == shown {
            return;
        }
        said.blocked_by = shown;
        if let Some(n) = self.k8s_nodes.get(&ObjectRef::new(node)) {
            let note = guard::blocked_note(node, blockers, &self.ctx.namespace);
            self.kit
                .event(n.as_ref(), EventType::Normal, reasons::DRAIN_BLOCKED, note)
                .await;
        }
    }

    async fn announce_unblocked(&mut self, node: &str) {
        self.announced.remove(node);
        if let Some(n) = self.k8s_nodes.get(&ObjectRef::new(node)) {
            let note = guard::unblocked_note(node);
            self.kit
                .event(n.as_ref(), EventType::Normal, reasons::DRAIN_UNBLOCKED, note)
                .await;
        }
    }

    /// A guarded node that is cordoned is being drained (`kubectl drain`, kured and managed node
    /// upgrades cordon first): say once per cordon why its evictions are refused.
    async fn watch_for_drain(&mut self, node: &str) {
        let nodes: Api<Node> = Api::all(self.ctx.kube.clone());
        let live = match nodes.get_opt(node).await {
            Ok(Some(n)) => n,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(controller = CONTROLLER, %node, error = %e, "cannot read the node");
                return;
            }
        };
        let cordoned = live.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
        let said = self.announced.entry(node.to_string()).or_default();
        if !cordoned || said.cordoned {
            said.cordoned = cordoned;
            return;
        }
        said.cordoned = true;
        let mut shown = said.blocked_by.clone();
        if shown.is_empty() {
            // Placed before this process started: as its annotation says.
            shown = self.guarded().get(node).cloned().flatten().unwrap_or_default();
        }
        let note = guard::waiting_note(node, &shown, &self.ctx.namespace);
        self.kit
            .event(&live, EventType::Warning, reasons::DRAIN_WAITING, note)
            .await;
    }
}

/// Deletes `name` of kind `K` in the api-manager's namespace; whether it was there (gone
/// already is fine).
async fn delete<K>(ctx: &Context, name: &str) -> Result<bool, Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    match Api::<K>::namespaced(ctx.kube.clone(), &ctx.namespace)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}
