//! The StorageOSUpgrade controller: an offline upgrade of the StorageOS node image, run as a
//! state machine persisted in the upgrade's status ([`plan`]), so an operator killed at any
//! point resumes and finishes, and no application is left scaled down.
//!
//! Pending → PullingImage ([`pull`]) → Pausing → ScalingDown ([`apps`]) → UpgradingNodes
//! ([`nodes`]) → ScalingUp → Completed. It starts only when it is safe to ([`health`]: every
//! volume in sync, no blocked drain), and after the nodes restart a health gate bounded by
//! `spec.timeout` decides between ScalingUp and RollingBack → ScalingUp → RolledBack. One
//! upgrade runs at a time; deleting one (finalizer) restores what it scaled down and un-pauses
//! the cluster ([`reconcile`]).
//!
//! Watches the upgrades, the puller DaemonSets and pods (by label), and the StorageOS node pods
//! (by label, for upgrades under way). Waiting for applications' pods to stop is polled while
//! an upgrade is under way rather than watching every pod in the cluster; a completed upgrade
//! costs nothing.

pub mod apps;
pub mod drain;
pub mod health;
pub mod nodes;
mod observe;
pub mod path;
pub mod plan;
pub mod plan_command;
pub mod preview;
pub mod pull;
pub mod read;
pub mod reconcile;
pub mod status;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::cluster::api_clients::ApiClients;
use crate::cluster::ownership::FIELD_MANAGER;
use crate::crd::{StorageOSUpgrade, UpgradePhase};
use crate::render::labels::ACTED_MARK_SELECTOR;
use crate::runtime::kube::apply::{self, Applier};
use crate::runtime::kube::controller::{
    self as kit, ControllerKit, ReconcileError, Reconciler, category, controlling_owner,
};
use crate::runtime::kube::metrics::ReconcileMetrics;
use crate::runtime::kube::trusted::TrustedNamespaces;

/// The controller name used in metrics and logs.
pub const CONTROLLER: &str = "storageosupgrade";
/// Finalizer that holds an upgrade until it has un-paused the cluster and restored applications.
pub const FINALIZER: &str = "finalizer.storageosupgrade.storageos.com";
/// How often an upgrade under way looks again while it waits.
pub const POLL: Duration = Duration::from_secs(2);

/// Why an upgrade reconcile failed; every variant is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing an object failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Applying the puller failed.
    #[error(transparent)]
    Apply(#[from] apply::Error),
    /// Something the user must fix; shown as Degraded in the upgrade's status.
    #[error("{0}")]
    Problem(plan::Problem),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Kube(e) => e.category(),
            Error::Apply(_) => category::APPLY,
            Error::Problem(_) => category::USER,
        }
    }

    fn lost_to_a_newer_version(&self) -> bool {
        matches!(self, Error::Kube(e) if e.lost_to_a_newer_version())
    }
}

/// Shared state of the upgrade controller.
pub struct Context {
    pub client: Client,
    pub applier: Applier,
    /// Events, backoff and reconcile metrics.
    pub kit: ControllerKit,
    /// Pause before each step (demos and tests; zero in production).
    pub(crate) step_delay: Duration,
    /// The namespaces whose upgrades are honoured (every namespace unless set).
    pub(crate) trusted: TrustedNamespaces,
    /// StorageOS API clients, and the endpoint that overrides the cluster's Service (demo,
    /// tests); without them StorageOS cannot be read, so no upgrade starts.
    pub(crate) storageos: Option<(Arc<ApiClients>, Option<String>)>,
}

impl Context {
    pub fn new(client: Client, metrics: ReconcileMetrics) -> Self {
        Self {
            applier: Applier::new(client.clone(), crate::cluster::ownership::APPLY_OWNERSHIP),
            kit: ControllerKit::reporting_as(
                client.clone(),
                CONTROLLER,
                metrics,
                crate::cluster::ownership::FIELD_MANAGER,
            ),
            client,
            step_delay: Duration::ZERO,
            trusted: TrustedNamespaces::Any,
            storageos: None,
        }
    }

    /// Reads StorageOS with `clients`, at `endpoint` when set (else the cluster's Service):
    /// whether it is safe to start, and the health gate.
    #[must_use]
    pub fn with_storageos(mut self, clients: Arc<ApiClients>, endpoint: Option<String>) -> Self {
        self.storageos = Some((clients, endpoint));
        self
    }

    /// Waits `delay` before each step of an upgrade, so a demo can be followed and a test can
    /// stop the operator inside any phase (`run --upgrade-step-delay`).
    #[must_use]
    pub fn with_step_delay(mut self, delay: Duration) -> Self {
        self.step_delay = delay;
        self
    }

    /// Honours upgrades only in `trusted` namespaces, and only clusters there can be upgraded;
    /// an upgrade elsewhere gets Ready=False with reason `NamespaceNotAllowed`.
    #[must_use]
    pub fn with_trusted_namespaces(mut self, trusted: TrustedNamespaces) -> Self {
        self.trusted = trusted;
        self
    }
}

/// Merge and strategic patches the controller makes, under the operator's field manager.
pub(crate) fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// The upgrade owning a puller DaemonSet.
fn upgrade_of_puller(ds: PartialObjectMeta<DaemonSet>) -> Option<ObjectRef<StorageOSUpgrade>> {
    controlling_owner(&ds)
}

/// The upgrade of a puller pod: its DaemonSet is named after the upgrade.
fn upgrade_of_puller_pod(pod: PartialObjectMeta<Pod>) -> Option<ObjectRef<StorageOSUpgrade>> {
    let ds = controlling_owner::<DaemonSet, _>(&pod)?;
    let upgrade = ds
        .name
        .strip_suffix(&pull::daemonset_name(""))
        .filter(|u| !u.is_empty())?;
    Some(ObjectRef::new(upgrade).within(&pod.namespace()?))
}

/// Upgrades in `store` at one of `phases`.
fn at_phases(store: &Store<StorageOSUpgrade>, phases: &[UpgradePhase]) -> Vec<ObjectRef<StorageOSUpgrade>> {
    store
        .state()
        .iter()
        .filter(|u| phases.contains(&plan::phase_of(u)))
        .map(|u| ObjectRef::from_obj(u.as_ref()))
        .collect()
}

impl Reconciler for Context {
    type Object = StorageOSUpgrade;
    type Error = Error;
    const NAME: &'static str = CONTROLLER;

    fn kit(&self) -> &ControllerKit {
        &self.kit
    }

    fn trusted(&self) -> &TrustedNamespaces {
        &self.trusted
    }

    async fn reconcile(upgrade: Arc<StorageOSUpgrade>, ctx: Arc<Self>) -> Result<Action, Error> {
        reconcile::reconcile(upgrade, ctx).await
    }

    async fn untrusted(upgrade: Arc<StorageOSUpgrade>, ctx: Arc<Self>, refusal: String) -> Result<Action, Error> {
        reconcile::untrusted(upgrade, ctx, refusal).await
    }
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let client = ctx.client.clone();
    // One reconcile at a time: upgrades are rare, and "one upgrade at a time" is then decided
    // without races between two upgrades' reconciles.
    // Only the watched namespaces, and elsewhere only upgrades the operator once finalized (one
    // deleted after its namespace stopped being watched still un-pauses its cluster).
    let controller = kit::controller_in::<StorageOSUpgrade>(&client, &ctx.trusted, Some(ACTED_MARK_SELECTOR))
        .with_config(controller::Config::default().concurrency(1));
    let store = controller.store();
    let labelled = crate::runtime::kube::cache::every().labels(pull::UPGRADE_LABEL);
    let pullers = watcher(
        Api::<PartialObjectMeta<DaemonSet>>::all(client.clone()),
        labelled.clone(),
    )
    .default_backoff()
    .touched_objects();
    let puller_pods = watcher(Api::<PartialObjectMeta<Pod>>::all(client.clone()), labelled)
        .default_backoff()
        .touched_objects();
    // A node pod's metadata carries its managedFields, parsed as nested maps: kube's default
    // page of 500 was a 30 MB peak of the operator's heap at 5,000 nodes (docs/benchmarks.md).
    let node_pods = watcher(
        Api::<PartialObjectMeta<Pod>>::all(client.clone()),
        crate::runtime::kube::cache::every().labels(crate::crd::NODE_POD_SELECTOR),
    )
    .default_backoff()
    .touched_objects();
    // Any change of an upgrade (completed, deleted) may give a waiting one its turn.
    let upgrades = watcher(
        Api::<PartialObjectMeta<StorageOSUpgrade>>::all(client.clone()),
        crate::runtime::kube::cache::every(),
    )
    .default_backoff()
    .touched_objects();
    let (node_store, waiting_store) = (store.clone(), store);
    let controller = controller
        .watches_stream(pullers, upgrade_of_puller)
        .watches_stream(puller_pods, upgrade_of_puller_pod)
        .watches_stream(node_pods, move |_| {
            at_phases(
                &node_store,
                &[
                    UpgradePhase::PullingImage,
                    UpgradePhase::UpgradingNodes,
                    UpgradePhase::RollingBack,
                ],
            )
        })
        .watches_stream(upgrades, move |_| at_phases(&waiting_store, &[UpgradePhase::Pending]));
    kit::run(controller, ctx, shutdown).await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use operator_kit::testing::partial_meta as meta;
    use serde_json::json;

    #[test]
    fn pullers_and_their_pods_map_back_to_their_upgrade() {
        let ds = meta::<DaemonSet>(json!({"name": "u-image-puller", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "storageos.com/v1", "kind": "StorageOSUpgrade", "name": "u",
                                 "uid": "x", "controller": true}]}));
        assert_eq!(upgrade_of_puller(ds), Some(ObjectRef::new("u").within("ns")));
        let pod = meta::<Pod>(json!({"name": "u-image-puller-abcde", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "u-image-puller",
                                 "uid": "y", "controller": true}]}));
        assert_eq!(upgrade_of_puller_pod(pod), Some(ObjectRef::new("u").within("ns")));
        let stray = meta::<Pod>(json!({"name": "p", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "-image-puller",
                                 "uid": "y", "controller": true}]}));
        assert_eq!(upgrade_of_puller_pod(stray), None);
    }
}
