//! The api-manager's controllers. They run only on the replica holding the Lease
//! `storageos-api-manager-lease` (the Go api-manager also ran its GC/resync loops on every
//! replica; here every loop stops with leadership).
//!
//! Each controller has an explicit name, used for its reconcile metrics and logs.

pub mod attach;
pub mod config;
pub mod delete_sync;
pub mod drain;
pub mod fencing;
pub mod labels;
pub mod mirror;
pub mod namespace_delete;
pub mod node_delete;
pub mod node_label;
pub mod node_state;
pub mod out_of_service;
pub mod pvc_label;
pub mod shared_volume;
pub mod snapshot;
pub mod volume_claims;
pub mod volume_health;

use std::future::Future;
use std::sync::Arc;

use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::events::EventType;

use super::cached_pvc::CachedPvc;
use super::maintenance::{self, Maintenance};
use super::metrics::ApiManagerMetrics;
use super::storageos_poll::Subscriptions;
use crate::crd::StorageOSCluster;
use crate::reasons::Reason;
use crate::runtime::kube::cache::Shared;
use crate::runtime::kube::controller::ControllerKit;
use crate::runtime::kube::metrics::ReconcileMetrics;
use crate::storageos;

/// The name events are reported under, as in the Go api-manager (its field manager's).
pub use crate::crd::contract::API_MANAGER_FIELD_MANAGER as EVENT_SOURCE;

pub use config::{Config, DrainConfig, DrainGuardConfig, Loop};

/// What every controller shares; made by `apimanager::polls::wire`, with the poll it subscribes
/// to.
pub struct Context {
    /// Kubernetes.
    pub kube: Client,
    /// The StorageOS API (logged in; the token is refreshed by the process).
    pub api: storageos::Client,
    /// What each controller is told (built from the command line in one place).
    pub config: Config,
    /// The namespace the api-manager runs in.
    pub namespace: String,
    /// Reconcile metrics, labelled per controller.
    pub reconcile_metrics: ReconcileMetrics,
    /// StorageOS helper and shared volume metrics.
    pub metrics: ApiManagerMetrics,
    /// The one StorageOS poll the controllers share (nodes and volumes): they subscribe, the
    /// process runs it (`apimanager::polls`).
    pub storageos: Subscriptions,
    /// Every PVC, cached once for the process (the webhooks' cache in `run`).
    pub pvcs: Shared<CachedPvc>,
    /// Every Node, cached once for the process as what its readers read of it
    /// ([`node_state::NodeState`]: the fencer, out-of-service, the node label sync, the mirror
    /// and the drain guard): read each poll without listing every Node.
    pub nodes: Shared<node_state::NodeState>,
}

impl Context {
    /// The same context (configuration, caches, poll, metrics) talking through other clients:
    /// the fencer's worker uses clients whose connections its own runtime drives.
    pub fn with_clients(&self, kube: Client, api: storageos::Client) -> Self {
        Self {
            kube,
            api,
            config: self.config.clone(),
            namespace: self.namespace.clone(),
            reconcile_metrics: self.reconcile_metrics.clone(),
            metrics: self.metrics.clone(),
            storageos: self.storageos.clone(),
            pvcs: self.pvcs.clone(),
            nodes: self.nodes.clone(),
        }
    }

    /// Events, backoff and reconcile metrics for the controller called `name`.
    pub fn kit(&self, name: &'static str) -> ControllerKit {
        ControllerKit::reporting_as(self.kube.clone(), name, self.reconcile_metrics.clone(), EVENT_SOURCE)
    }

    /// Whether an upgrade holds the cluster in maintenance. `Err` means "cannot tell": do
    /// nothing destructive.
    pub async fn maintenance(&self) -> Result<Maintenance, kube::Error> {
        maintenance::current(&self.kube, self.config.maintenance_of.as_ref()).await
    }
}

/// Publishes an event on every StorageOSCluster (there is one per install; the api-manager
/// does not know which object is its own when `-storageos-cluster` is unset). A failed list
/// is logged: an event is never worth failing a controller's work for.
pub async fn cluster_event(ctx: &Context, kit: &ControllerKit, kind: EventType, reason: Reason, note: String) {
    match Api::<StorageOSCluster>::all(ctx.kube.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(clusters) => {
            for c in &clusters.items {
                kit.event(c, kind, reason, note.clone()).await;
            }
        }
        Err(e) => tracing::warn!(reason = %reason, error = %e, "cannot list StorageOSClusters to publish an event"),
    }
}

/// The process's PVC cache: every PVC, as a [`CachedPvc`] view.
pub fn pvc_cache() -> Shared<CachedPvc> {
    Shared::default()
}

/// Keeps a reflector of `events` going forever (without managedFields), logging and backing
/// off on watch errors; the first argument names the controller in the logs.
pub use crate::runtime::kube::cache::reflect_events as reflect;

/// Runs `pass` after `schedule.delay`, then every `schedule.every`; returns at once (never
/// running it) when the loop is disabled.
pub async fn periodic<F, Fut>(schedule: Loop, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(every) = schedule.every else {
        return;
    };
    tokio::time::sleep(schedule.delay).await;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        pass().await;
    }
}

/// Runs every enabled controller but the fencer until the future is dropped (shutdown or lost
/// leadership). Each subscribes to the StorageOS poll it needs; the process runs the volume poll
/// next to them, and the node poll and the fencer on a worker of their own
/// ([`fencing::worker`]), so that none of this work can delay fencing.
pub async fn run(ctx: Arc<Context>) {
    tokio::join!(
        shared_volume::run(ctx.clone()),
        mirror::run(ctx.clone()),
        drain::run(ctx.clone()),
        attach::run(ctx.clone()),
        volume_health::run(ctx.clone()),
        out_of_service::run(ctx.clone()),
        node_delete::run(ctx.clone()),
        namespace_delete::run(ctx.clone()),
        node_label::run(ctx.clone()),
        pvc_label::run(ctx.clone()),
    );
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_periodic_loop_runs_after_its_delay_then_every_interval_and_not_at_all_when_off() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::Duration;
        let runs = Arc::new(AtomicUsize::new(0));
        let count = || {
            let runs = runs.clone();
            move || {
                let runs = runs.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                }
            }
        };
        let off = Loop::new(Duration::from_secs(3), Duration::ZERO);
        tokio::time::timeout(Duration::from_secs(1), periodic(off, count()))
            .await
            .expect("a loop that is off returns at once");
        assert_eq!(runs.load(Ordering::SeqCst), 0);

        let on = Loop::new(Duration::from_secs(3), Duration::from_secs(10));
        let task = tokio::spawn(periodic(on, count()));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 0, "not before the delay");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 1, "at the delay");
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 3, "then every interval");
        task.abort();
        assert_eq!(
            Loop::new(Duration::ZERO, Duration::from_secs(1)).delay,
            Duration::from_secs(10),
            "0s delay means 10s"
        );
    }
}
