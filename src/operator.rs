//! `storageos-operator run`: health and metrics on every replica, controllers on the leader.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;

use crate::cli::RunArgs;
use crate::cluster::metrics::ClusterMetrics;
use crate::cluster::{self, Context, OperatorConfig};
use crate::job;
use crate::render;
use crate::runtime::health::Health;
use crate::runtime::leader::{self, Leadership};
use crate::runtime::metrics::ReconcileMetrics;
use crate::runtime::signal;
use crate::storageos::ApiMetrics;
use crate::upgrade;

/// The Lease the operator's replicas elect a leader on (its RBAC grants exactly this name).
pub use crate::rbac::operator::LEASE as LEASE_NAME;

/// Why the operator stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable kubeconfig or in-cluster configuration, or no API server there.
    #[error(transparent)]
    Connect(#[from] crate::runtime::connect::Error),
    /// The metrics address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// Leader election failed or leadership was lost; the process exits to restart clean.
    #[error(transparent)]
    Leader(#[from] leader::Error),
}

/// Every metric family `run` serves on `/metrics`.
pub struct OperatorMetrics {
    pub reconcile: ReconcileMetrics,
    pub api: ApiMetrics,
    pub cluster: ClusterMetrics,
}

/// Registers every metric family of `run` in `registry` (also used by the test that checks the
/// dashboard and alerts name only metrics that exist).
pub fn register_metrics(registry: &mut Registry) -> OperatorMetrics {
    OperatorMetrics {
        reconcile: ReconcileMetrics::register(registry),
        api: ApiMetrics::register(registry),
        cluster: ClusterMetrics::register(registry),
    }
}

/// Runs the operator until a signal arrives or leadership is lost.
pub async fn run(args: RunArgs) -> Result<(), Error> {
    let connection = crate::runtime::connect::connect(args.kubeconfig.as_deref(), None).await?;
    connection.require(&crate::render::MIN_KUBERNETES)?;
    tracing::info!(server = %connection.server, from = %connection.from, version = %connection.version, "connected to Kubernetes");
    let client = connection.client;
    let mut registry = Registry::default();
    let OperatorMetrics {
        reconcile: metrics,
        api: api_metrics,
        cluster: cluster_metrics,
    } = register_metrics(&mut registry);
    let health = Health::new(registry);

    health
        .spawn_server(&args.metrics_addr)
        .await
        .map_err(|source| Error::Listen {
            addr: args.metrics_addr.clone(),
            source,
        })?;
    health.set_ready(true);

    let identity = args
        .identity
        .clone()
        .unwrap_or_else(|| format!("storageos-operator-{}", rand::random::<u32>()));
    let mut leadership = tokio::select! {
        l = Leadership::acquire(client.clone(), &args.leader_election_namespace, LEASE_NAME, &identity, Default::default()) => l?,
        () = signal::shutdown() => return Ok(()),
    };

    let config = OperatorConfig {
        operator_image: args.operator_image.clone(),
        default_images: render::default_images_from_env(),
        node_env: render::node_env_from_process(),
        storageos_endpoint: args.storageos_endpoint.clone(),
        storageos_timeouts: (Duration::from_secs(10), Duration::from_secs(20)),
        operator_namespace: args.leader_election_namespace.clone(),
    };
    let trusted = args.trusted_namespaces();
    let jobs = Arc::new(
        job::Context::new(client.clone(), metrics.clone())
            .with_host_paths(args.job_host_paths.clone())
            .with_trusted_namespaces(trusted.clone()),
    );
    let upgrades = Arc::new(
        upgrade::Context::new(client.clone(), metrics.clone())
            .with_step_delay(args.upgrade_step_delay)
            .with_trusted_namespaces(trusted.clone()),
    );
    let ctx = Arc::new(
        Context::new(client, config, metrics, Some(api_metrics))
            .with_cluster_metrics(cluster_metrics)
            .with_trusted_namespaces(trusted.clone()),
    );
    tracing::info!(identity = %identity, trusted_namespaces = %trusted, "starting controllers");
    let controllers = async {
        tokio::join!(
            cluster::run(ctx, signal::shutdown()),
            job::run(jobs, signal::shutdown()),
            upgrade::run(upgrades, signal::shutdown())
        );
    };
    tokio::select! {
        () = controllers => {
            tracing::info!("controllers stopped");
            Ok(())
        }
        e = leadership.lost() => Err(e.into()),
    }
}
