//! The process's StorageOS poll: `api-manager run` builds it beside the controllers' context
//! ([`wire`]) and runs it for as long as it leads; the controllers are handed only its
//! [`Subscriptions`]. The tests wire it through the same function.

use std::sync::Arc;

use kube::Client;
use kube::runtime::reflector::Store;

use super::cached_pvc::CachedPvc;
use super::controllers::{Config, Context};
use super::metrics::ApiManagerMetrics;
use super::storageos_poll::{ApiSource, PollConfig, StorageOSPoll, Subscriptions};
use crate::runtime::kube::cache::Shared;
use crate::runtime::kube::metrics::ReconcileMetrics;
use crate::storageos;

/// Who the PVC cache's watch errors are logged under.
const PVC_READER: &str = "storageos-poll";

/// The poll and what it reads with besides the StorageOS API: each half is run with a client
/// of the runtime that runs it (the node half on the fencer's worker).
pub struct Polls {
    poll: StorageOSPoll,
    every: PollConfig,
    metrics: ApiManagerMetrics,
    pvcs: Store<CachedPvc>,
}

impl Polls {
    /// What the controllers subscribe to.
    pub fn subscriptions(&self) -> Subscriptions {
        self.poll.subscriptions()
    }

    /// Reads the StorageOS nodes through `api` until the future is dropped.
    pub async fn run_nodes(&self, api: storageos::Client) {
        self.poll.run_nodes(&self.source(api), self.every).await;
    }

    /// Reads the StorageOS volumes through `api` until the future is dropped.
    pub async fn run_volumes(&self, api: storageos::Client) {
        self.poll.run_volumes(&self.source(api), self.every).await;
    }

    /// Both halves on the calling runtime, for a process without a fencer's worker (the tests
    /// that run one controller).
    pub async fn run(&self, api: storageos::Client) {
        tokio::join!(self.run_nodes(api.clone()), self.run_volumes(api));
    }

    fn source(&self, api: storageos::Client) -> ApiSource {
        ApiSource {
            api,
            metrics: self.metrics.clone(),
            pvcs: self.pvcs.clone(),
        }
    }
}

/// What `api-manager run` gives its controllers, and the poll it runs for them. `pvcs` is the
/// process's PVC cache, shared with the webhooks; the poll's reader of it starts here (needs a
/// Tokio runtime).
pub fn wire(
    kube: Client,
    api: storageos::Client,
    config: Config,
    namespace: String,
    reconcile_metrics: ReconcileMetrics,
    metrics: ApiManagerMetrics,
    pvcs: Shared<CachedPvc>,
) -> (Arc<Context>, Arc<Polls>) {
    let poll = StorageOSPoll::default();
    let polls = Polls {
        every: config.poll,
        metrics: metrics.clone(),
        pvcs: pvcs.get(&kube, PVC_READER),
        poll,
    };
    let ctx = Context {
        storageos: polls.subscriptions(),
        kube,
        api,
        config,
        namespace,
        reconcile_metrics,
        metrics,
        pvcs,
        nodes: Shared::default(),
    };
    (Arc::new(ctx), Arc::new(polls))
}
