//! `storageos-operator run`: health, metrics and the validating webhook on every replica,
//! controllers on the leader.

pub mod caller_gate;
pub mod go_migration;
pub mod upgradeable;
pub mod watched_namespaces;
pub mod webhook;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;

use crate::cluster::metrics::ClusterMetrics;
use crate::cluster::{self, Context, OperatorConfig};
use crate::job;
use crate::render;
use crate::runtime::kube::leader::{self, Leadership};
use crate::runtime::kube::metrics::ReconcileMetrics;
use crate::runtime::process::health::HealthServer;
use crate::runtime::process::signal;
use crate::storageos::ApiMetrics;
use crate::upgrade;

/// The Lease the operator's replicas elect a leader on (its RBAC grants exactly this name).
pub use crate::rbac::operator::LEASE as LEASE_NAME;

/// Arguments of `run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Kubeconfig to use; without it `KUBECONFIG`, `~/.kube/config`, then the pod's
    /// ServiceAccount.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// Address of the metrics and health server (`HOST:PORT`, or `:PORT` for every interface).
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: String,

    /// Override the StorageOS API address (for example `http://127.0.0.1:5705`) instead of the
    /// cluster's Service; useful where Services are not routable, such as the demo.
    #[arg(long, env = "STORAGEOS_ENDPOINT")]
    pub storageos_endpoint: Option<String>,

    /// Namespace of the leader-election Lease (the operator's own namespace in a cluster).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leader_election_namespace: String,

    /// This replica's identity in leader election.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// The operator's own image, which runs the api-manager unless a cluster sets
    /// `images.apiManagerContainer`.
    #[arg(long, env = "OPERATOR_IMAGE", default_value = crate::render::DEFAULT_OPERATOR_IMAGE)]
    pub operator_image: String,

    /// For demos and tests: wait this long (for example `2s`) before each step of a
    /// StorageOSUpgrade, so its progress can be followed, or the operator stopped inside any
    /// phase to show that it resumes. Leave unset in production.
    #[arg(long, default_value = "0s", value_parser = crate::duration::parse_flag)]
    pub upgrade_step_delay: std::time::Duration,

    /// Host paths a `jobs.storageos.com` Job may mount, comma-separated: `P` allows exactly `P`,
    /// `P/*` allows `P` and anything under it. Admission (the CRD) allows only the default;
    /// this flag can narrow it.
    #[arg(long, env = "JOB_HOST_PATHS", default_value = crate::job::hostpath::DEFAULT)]
    pub job_host_paths: crate::job::hostpath::AllowList,

    /// Namespaces whose StorageOSClusters, StorageOSUpgrades and Jobs the operator honours,
    /// comma-separated (default: its own namespace, `--leader-election-namespace`). Objects
    /// elsewhere get Ready=False with reason NamespaceNotAllowed. A cluster's Secret references
    /// and operand namespace may name only its own namespace, these (and kube-system for the
    /// operands). Creating these kinds is cluster-admin-equivalent: list only namespaces whose
    /// every editor may act as cluster-admin. `*` trusts every namespace.
    #[arg(long, env = "WATCH_NAMESPACES")]
    pub watch_namespaces: Option<crate::runtime::kube::trusted::TrustedNamespaces>,

    /// More namespaces whose Secrets a StorageOSCluster may name (`spec.secretRefNamespace`,
    /// `spec.tlsEtcdSecretRefNamespace`), comma-separated, besides its own and the watched ones:
    /// the operator only reads the named Secrets there, so this is safe where watching is not
    /// (the Go operator's e2e cluster keeps its Secret in `default`).
    #[arg(long, env = "SECRET_NAMESPACES")]
    pub secret_namespaces: Option<crate::runtime::kube::trusted::SecretNamespaces>,

    /// Address of the validating webhook that refuses a second StorageOSCluster (`HOST:PORT`
    /// or `:PORT`); empty serves none (its `failurePolicy: Ignore` then lets creates through).
    #[arg(long, env = "WEBHOOK_ADDR", default_value = ":9443")]
    pub webhook_addr: String,

    /// Directory of a mounted webhook certificate (`tls.crt`, `tls.key`), as OLM provides it.
    /// Without those files the replicas share a certificate they issue in the Secret
    /// `storageos-operator-webhook` and inject its CA into the ValidatingWebhookConfiguration
    /// `storageos-operator`.
    #[arg(long, env = "WEBHOOK_CERT_DIR", default_value = webhook::OLM_CERT_DIR)]
    pub webhook_cert_dir: PathBuf,
}

impl RunArgs {
    /// The trusted namespaces: `--watch-namespaces`, else the operator's own namespace.
    pub fn trusted_namespaces(&self) -> crate::runtime::kube::trusted::TrustedNamespaces {
        self.watch_namespaces
            .clone()
            .unwrap_or_else(|| crate::runtime::kube::trusted::TrustedNamespaces::only(&self.leader_election_namespace))
    }
}

/// Why the operator stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable kubeconfig or in-cluster configuration, or no API server there.
    #[error(transparent)]
    Connect(#[from] crate::runtime::kube::connect::Error),
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
    /// The webhook cannot be served.
    #[error(transparent)]
    Webhook(#[from] webhook::Error),
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
    use crate::runtime::kube::connect::{STARTUP_PATIENCE, connect_patiently};
    let connection = connect_patiently(
        args.kubeconfig.as_deref(),
        &crate::crd::contract::user_agent(None),
        STARTUP_PATIENCE,
    )
    .await?;
    connection.require(&crate::render::MIN_KUBERNETES)?;
    tracing::info!(server = %connection.server, from = %connection.from, version = %connection.version, "connected to Kubernetes");
    let kubernetes_version = connection.version.clone();
    let client = connection.client;
    let mut registry = Registry::default();
    let OperatorMetrics {
        reconcile: metrics,
        api: api_metrics,
        cluster: cluster_metrics,
    } = register_metrics(&mut registry);
    let health = HealthServer::new(registry);

    health
        .spawn_server(&args.metrics_addr)
        .await
        .map_err(|source| Error::Listen {
            addr: args.metrics_addr.clone(),
            source,
        })?;
    health.set_ready();

    // The caller gate, on every install path: in place before anyone relies on it, and again
    // at each start in case it was removed or changed.
    tokio::spawn(caller_gate::keep_trying(client.clone()));
    // The Go operator's start-up migration, on every replica, whether or not a cluster exists.
    tokio::spawn(go_migration::keep_trying(
        client.clone(),
        args.leader_election_namespace.clone(),
    ));

    // Every replica says so on its own pod when a watched namespace does not exist.
    tokio::spawn(watched_namespaces::keep_checking(
        client.clone(),
        args.trusted_namespaces(),
        args.identity
            .clone()
            .map(|pod| (args.leader_election_namespace.clone(), pod)),
    ));

    // Every replica serves the webhook; it only reads.
    if !args.webhook_addr.is_empty() {
        let listener = webhook::bind(&args.webhook_addr).await?;
        let settings = webhook::Settings {
            addr: args.webhook_addr.clone(),
            cert_dir: args.webhook_cert_dir.clone(),
            namespace: args.leader_election_namespace.clone(),
            trusted: args.trusted_namespaces(),
        };
        let client = client.clone();
        tokio::spawn(async move {
            if let Err(e) = webhook::serve(client, listener, settings).await {
                tracing::error!(error = %e, "not serving the StorageOSCluster webhook; a second cluster is left Pending instead of refused");
            }
        });
    }

    let identity = args
        .identity
        .clone()
        .unwrap_or_else(|| format!("storageos-operator-{}", rand::random::<u32>()));
    let mut leadership = tokio::select! {
        l = Leadership::acquire(client.clone(), (&args.leader_election_namespace, LEASE_NAME), (&identity, crate::cluster::ownership::FIELD_MANAGER), Default::default()) => l?,
        () = signal::shutdown() => return Ok(()),
    };

    let config = OperatorConfig {
        operator_image: args.operator_image.clone(),
        default_images: render::default_images_from_env(),
        node_env: render::node_env_from_process(),
        storageos_endpoint: args.storageos_endpoint.clone(),
        storageos_timeouts: (Duration::from_secs(10), Duration::from_secs(20)),
        operator_namespace: args.leader_election_namespace.clone(),
        kubernetes_version: render::parse_k8s_version(&kubernetes_version).ok(),
    };
    let trusted = args.trusted_namespaces();
    let secret_namespaces = args.secret_namespaces.clone().unwrap_or_default();
    let jobs = Arc::new(
        job::Context::new(client.clone(), metrics.clone())
            .with_host_paths(args.job_host_paths.clone())
            .with_trusted_namespaces(trusted.clone()),
    );
    let endpoint = config.storageos_endpoint.clone();
    let ctx = Arc::new(
        Context::new(client.clone(), config, metrics.clone(), Some(api_metrics))
            .with_cluster_metrics(cluster_metrics)
            .with_trusted_namespaces(trusted.clone())
            .with_secret_namespaces(secret_namespaces),
    );
    let upgrades = Arc::new(
        upgrade::Context::new(client.clone(), metrics)
            .with_step_delay(args.upgrade_step_delay)
            .with_trusted_namespaces(trusted.clone())
            .with_storageos(ctx.api_clients.clone(), endpoint),
    );
    tracing::info!(identity = %identity, trusted_namespaces = %trusted, "starting controllers");
    // Under OLM only: OLM names the operator's OperatorCondition in the Deployment's environment.
    let operator_condition = std::env::var(upgradeable::ENV).ok().filter(|n| !n.is_empty());
    let olm = async {
        if let Some(name) = operator_condition {
            let namespace = args.leader_election_namespace.clone();
            upgradeable::run(client.clone(), namespace, name, trusted.clone(), signal::shutdown()).await;
        }
    };
    let controllers = async {
        tokio::join!(
            cluster::run(ctx, signal::shutdown()),
            job::run(jobs, signal::shutdown()),
            upgrade::run(upgrades, signal::shutdown()),
            olm
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
