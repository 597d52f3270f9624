//! The drain guard controller ("storageos-drain-guard"): at each volume snapshot of the shared
//! poll, places a guard ([`super::guard`]) on each node the cluster's drain policy says a drain
//! must wait for ([`super::rule::view`]), holds it at most the cluster's maximum hold once the
//! node is cordoned, and removes the guards of nodes that are safe again, as [`super::plan`]
//! decides. Guards live in a namespace of their own ((`DrainGuardConfig::namespace`)) and are
//! read from watch caches of it, so an unchanged cluster costs no writes.
//!
//! The refusal is explained on the Node (`DrainBlocked` when a guard is placed, `DrainWaiting`
//! when the node is cordoned while guarded, `DrainHoldExpired` when the hold ends,
//! `DrainUnblocked` when the guard goes), by how many volumes and where they are listed; the
//! PVCs are named only on the cluster-scoped node mirror and in events in each PVC's namespace.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use chrono::{DateTime, Utc};

use super::guard::{self, BLOCKED_BY_ANNOTATION, NODE_ANNOTATION};
use super::plan::{self, Inputs, Placed, Upgrade, Want};
use crate::cached_pvc::CachedPvc;
use crate::controllers::node_state::NodeState;
use crate::controllers::snapshot::{OnSnapshot, Subscription};
use crate::controllers::volume_claims::owner_of;
use crate::controllers::{Context, reflect};
use crate::maintenance::Maintenance;
use crate::reasons;
use crate::runtime::kube::controller::ControllerKit;
use crate::storageos_poll::{NodeSnapshot, VolumeSnapshot};

/// The controller name in logs and metrics.
pub const CONTROLLER: &str = "storageos-drain-guard";

/// Why a guard was not written or removed; retried at the next volume poll.
#[derive(Debug, thiserror::Error)]
#[error(
    "Kubernetes API: {0}; retried at the next StorageOS poll (check the api-manager's Role storageos:api-manager-drain-guard in the guards' namespace, storageos-drain-guard unless --drain-guard-namespace says otherwise)"
)]
pub struct Error(#[from] kube::Error);

/// Runs the controller until the future is dropped; returns at once without a guard image or
/// under `AllowAlways` (the gate is then only shown on the mirrors).
pub async fn run(ctx: Arc<Context>) {
    let Some(config) = ctx.config.drain_guard.clone() else {
        tracing::info!(
            controller = CONTROLLER,
            "no --drain-guard-image: the drain gate is shown on nodes.api.storageos.com but not enforced"
        );
        return;
    };
    if !super::rule::guards(ctx.config.drain.policy) {
        tracing::info!(
            controller = CONTROLLER,
            policy = %ctx.config.drain.policy,
            "the drain policy places no guards: what is at risk is shown on nodes.api.storageos.com only"
        );
        return;
    }
    let subscription = Subscription::to::<Guards>(&ctx);
    let selector = guard::guard_selector();
    let config_of = || watcher::Config::default().labels(&selector);
    let (pods, a) = reflect(
        CONTROLLER,
        watcher(Api::<Pod>::namespaced(ctx.kube.clone(), &config.namespace), config_of()),
    );
    let (budgets, b) = reflect(
        CONTROLLER,
        watcher(
            Api::<PodDisruptionBudget>::namespaced(ctx.kube.clone(), &config.namespace),
            config_of(),
        ),
    );
    let k8s_nodes = ctx.nodes.get(&ctx.kube, CONTROLLER);
    let pvcs = ctx.pvcs.get(&ctx.kube, CONTROLLER);
    let work = async {
        // The PVC cache says which volumes are orphans: guards wait for it, or every volume
        // would look like one.
        let _ = tokio::join!(
            pods.wait_until_ready(),
            budgets.wait_until_ready(),
            ctx.nodes.ready(),
            pvcs.wait_until_ready()
        );
        tracing::info!(controller = CONTROLLER, namespace = %config.namespace, policy = %ctx.config.drain.policy, max_hold = ?ctx.config.drain.max_hold, "guarding nodes whose drain would take the last copy of a volume");
        let mut guards = Guards {
            ctx: &ctx,
            image: config.image,
            namespace: config.namespace.clone(),
            pods: &pods,
            budgets: &budgets,
            k8s_nodes: &k8s_nodes,
            pvcs: &pvcs,
            kit: ctx.kit(CONTROLLER),
            node_names: None,
            announced: HashMap::new(),
        };
        subscription.follow(&mut guards).await;
    };
    tokio::join!(a, b, work);
}

struct Guards<'a> {
    ctx: &'a Context,
    image: String,
    /// Where the guards live.
    namespace: String,
    pods: &'a Store<Pod>,
    budgets: &'a Store<PodDisruptionBudget>,
    k8s_nodes: &'a Store<NodeState>,
    pvcs: &'a Store<CachedPvc>,
    kit: ControllerKit,
    /// StorageOS node ID → name, from the last node list read.
    node_names: Option<HashMap<String, String>>,
    /// By node name, the blockers last announced (each `DrainBlocked` is published once).
    announced: HashMap<String, Vec<String>>,
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
        let drain = self.ctx.config.drain;
        let view = super::rule::view(list, drain.policy, |ns, pvc, pv| {
            self.pvcs
                .get(&ObjectRef::new(pvc).within(ns))
                .is_some_and(|p| p.bound_pv() == Some(pv))
        });
        let upgrade = match self.ctx.maintenance().await {
            Ok(Maintenance::Off) => Upgrade::Off,
            Ok(Maintenance::On { upgrade }) => Upgrade::On(upgrade),
            Err(e) => {
                tracing::warn!(controller = CONTROLLER, error = %e, "cannot tell whether an upgrade is under way: guards are kept");
                Upgrade::Unknown
            }
        };
        let guarded = self.guarded();
        let nodes = self.k8s_nodes.state();
        let k8s_nodes: BTreeSet<String> = nodes.iter().map(|n| n.name_any()).collect();
        let cordoned: BTreeSet<String> = nodes
            .iter()
            .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
            .map(|n| n.name_any())
            .collect();
        let now = now();
        let plan = plan::plan(&Inputs {
            blocking: &view.at_risk,
            complete: list.complete(),
            node_names: &node_names,
            k8s_nodes: &k8s_nodes,
            cordoned: &cordoned,
            upgrade: &upgrade,
            guarded: &guarded,
            max_hold: drain.max_hold,
            enforce: super::rule::guards(drain.policy),
            now,
        });
        if !plan.unnamed.is_empty() {
            tracing::warn!(controller = CONTROLLER, nodes = ?plan.unnamed, "StorageOS node IDs hold a last copy but are in no node list yet: guarded once listed");
        }
        for (node, want) in &plan.apply {
            match self.place(node, want).await {
                Ok(()) => self.announce(node, want, &plan).await,
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
        // The drains waiting now: the guards kept as they were and the ones just written.
        let mut holds: BTreeMap<String, Want> = guarded
            .iter()
            .filter(|(node, _)| !plan.remove.contains(*node))
            .map(|(node, p)| {
                let want = Want {
                    blockers: Vec::new(),
                    waiting_since: p.waiting_since,
                    released: p.released,
                };
                (node.clone(), want)
            })
            .collect();
        holds.extend(plan.apply.iter().map(|(n, w)| (n.clone(), w.clone())));
        self.ctx.metrics.set_drain_waiting(&plan::waiting(&holds, now));
        self.announced.retain(|node, _| holds.contains_key(node));
    }
}

/// Now, in whole seconds (the annotations keep no more, and a read-back must compare equal).
fn now() -> DateTime<Utc> {
    let t = Utc::now();
    DateTime::from_timestamp(t.timestamp(), 0).unwrap_or(t)
}

/// How long a hold lasted, for events.
fn waited(since: Option<DateTime<Utc>>, until: DateTime<Utc>) -> String {
    let secs = since.map_or(0, |s| (until - s).num_seconds().max(0));
    match (secs / 3600, secs % 3600 / 60, secs % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

impl Guards<'_> {
    /// The guards in place by node name, as their budgets (and pods) show them.
    fn guarded(&self) -> BTreeMap<String, Placed> {
        let node_of = |meta: &kube::api::ObjectMeta| {
            let annotated = meta.annotations.as_ref().and_then(|a| a.get(NODE_ANNOTATION)).cloned();
            annotated.or_else(|| meta.labels.as_ref().and_then(|l| l.get(guard::NODE_LABEL)).cloned())
        };
        let annotation =
            |meta: &kube::api::ObjectMeta, key: &str| meta.annotations.as_ref().and_then(|a| a.get(key)).cloned();
        let mut out = BTreeMap::new();
        for b in self.budgets.state() {
            let Some(node) = node_of(&b.metadata) else { continue };
            let shown = annotation(&b.metadata, BLOCKED_BY_ANNOTATION);
            let released = guard::annotated_time(annotation(&b.metadata, guard::RELEASED_ANNOTATION).as_ref());
            let pod = self.pods.get(&ObjectRef::new(&b.name_any()).within(&self.namespace));
            let pod_agrees = pod.is_some_and(|p| {
                p.metadata.deletion_timestamp.is_none() && annotation(&p.metadata, BLOCKED_BY_ANNOTATION) == shown
            });
            // A released guard's pod is evicted by the drain it let through: not a half guard.
            let whole = released.is_some() || pod_agrees;
            out.insert(
                node,
                Placed {
                    blocked_by: if whole { shown } else { None },
                    waiting_since: guard::annotated_time(
                        annotation(&b.metadata, guard::WAITING_SINCE_ANNOTATION).as_ref(),
                    ),
                    released,
                },
            );
        }
        for p in self.pods.state() {
            if let Some(node) = node_of(&p.metadata) {
                out.entry(node).or_default();
            }
        }
        out
    }

    /// Writes the budget, then (unless its hold ended) the pod it controls.
    async fn place(&self, node: &str, want: &Want) -> Result<(), Error> {
        let ns = &self.namespace;
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
                &Patch::Apply(guard::budget(ns, node, want, &owner)),
            )
            .await?;
        if want.released.is_some() {
            tracing::warn!(controller = CONTROLLER, %node, "drain guard released: its hold ended");
            return Ok(());
        }
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
            &Patch::Apply(guard::pod(ns, node, &want.blockers, &self.image, &controller)),
        )
        .await?;
        tracing::info!(controller = CONTROLLER, %node, blocked_by = %guard::blocked_by(&want.blockers), waiting_since = ?want.waiting_since, "drain guard in place");
        Ok(())
    }

    /// Deletes the budget, then the pod (which the budget's deletion would delete too); whether
    /// either was still there (a cache that lags a removal asks for it twice).
    async fn remove(&self, node: &str) -> Result<bool, Error> {
        let name = guard::name(node);
        let budget = delete::<PodDisruptionBudget>(self.ctx, &self.namespace, &name).await?;
        let pod = delete::<Pod>(self.ctx, &self.namespace, &name).await?;
        if budget || pod {
            tracing::info!(controller = CONTROLLER, %node, "drain guard removed");
        }
        Ok(budget || pod)
    }

    /// The events of a guard just written: `DrainBlocked` when its blockers changed (on the Node,
    /// and on each PVC newly held), `DrainWaiting` when a drain starts waiting on it,
    /// `DrainHoldExpired` when its hold ends.
    async fn announce(&mut self, node: &str, want: &Want, plan: &plan::Plan) {
        let Some(n) = self.k8s_nodes.get(&ObjectRef::new(node)) else {
            return;
        };
        let before = self.announced.get(node).cloned().unwrap_or_default();
        if before != want.blockers && want.released.is_none() {
            let note = guard::blocked_note(node, &want.blockers, &self.namespace);
            self.kit
                .event(n.as_ref(), EventType::Normal, reasons::DRAIN_BLOCKED, note)
                .await;
            for pvc in want.blockers.iter().filter(|b| !before.contains(b)) {
                self.pvc_event(
                    pvc,
                    EventType::Normal,
                    reasons::DRAIN_BLOCKED,
                    guard::pvc_blocked_note(node),
                )
                .await;
            }
            self.announced.insert(node.to_string(), want.blockers.clone());
        }
        if plan.now_waiting.contains(node) && want.released.is_none() {
            let ends = want
                .waiting_since
                .zip(self.ctx.config.drain.max_hold)
                .and_then(|(since, max)| chrono::Duration::from_std(max).ok().map(|max| since + max));
            let note = guard::waiting_note(node, &want.blockers, &self.namespace, ends);
            self.kit
                .event(n.as_ref(), EventType::Warning, reasons::DRAIN_WAITING, note)
                .await;
        }
        if plan.now_released.contains(node) {
            let waited = waited(want.waiting_since, want.released.unwrap_or_else(now));
            self.ctx.metrics.count_drain_hold_expired();
            let note = guard::released_note(node, &want.blockers, &waited);
            self.kit
                .event(n.as_ref(), EventType::Warning, reasons::DRAIN_HOLD_EXPIRED, note)
                .await;
            for pvc in &want.blockers {
                self.pvc_event(
                    pvc,
                    EventType::Warning,
                    reasons::DRAIN_HOLD_EXPIRED,
                    guard::pvc_released_note(node, &waited),
                )
                .await;
            }
        }
    }

    /// An event on the PVC `namespace/name` a guard names (in its own namespace); nothing for a
    /// blocker that is not a PVC in the cache (an upgrade, a volume without a PVC).
    async fn pvc_event(&self, blocker: &str, kind: EventType, reason: reasons::Reason, note: String) {
        let Some((ns, name)) = blocker.split_once('/') else {
            return;
        };
        if let Some(pvc) = self.pvcs.get(&ObjectRef::new(name).within(ns)) {
            self.kit.event(pvc.as_ref(), kind, reason, note).await;
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
}

/// Deletes `name` of kind `K` in the guards' `namespace`; whether it was there (gone already is
/// fine).
async fn delete<K>(ctx: &Context, namespace: &str, name: &str) -> Result<bool, Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    match Api::<K>::namespaced(ctx.kube.clone(), namespace)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}
