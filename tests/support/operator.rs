//! The cluster controller run in-process against the StorageOS simulator, as `run` would, for
//! tests that start, stop and restart the operator over the same cluster.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use storageos_operator::cluster::{self, Context, OperatorConfig};
use storageos_operator::render::DefaultImages;
use storageos_operator::runtime::kube::metrics::ReconcileMetrics;
use storageos_operator::runtime::kube::trusted::TrustedNamespaces;
use storageos_operator::sim::{self, SimHandle, Simulator};
use tokio::task::JoinHandle;

/// The API of `obj` (a rendered or fixture object, with apiVersion, kind and maybe a namespace).
pub fn api_of(client: &kube::Client, obj: &serde_json::Value) -> kube::Api<kube::core::DynamicObject> {
    use kube::core::{ApiResource, GroupVersionKind};
    let api_version = obj["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, obj["kind"].as_str().unwrap()));
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) => kube::Api::namespaced_with(client.clone(), ns, &ar),
        None => kube::Api::all_with(client.clone(), &ar),
    }
}

/// `storageos-operator run` as its ServiceAccount (`kubeconfig`), talking to the simulator at
/// `sim_url`, electing a leader on the install's Lease under `identity` as a replica of the
/// Deployment does; metrics on a free port.
pub fn run_command(kubeconfig: &std::path::Path, sim_url: &str, identity: &str) -> std::process::Command {
    run_command_with_metrics(kubeconfig, sim_url, identity, 0)
}

/// [`run_command`] serving `/metrics` on `metrics_port` (0: any free port, unknown to the test).
pub fn run_command_with_metrics(
    kubeconfig: &std::path::Path,
    sim_url: &str,
    identity: &str,
    metrics_port: u16,
) -> std::process::Command {
    // Tests put their clusters in namespaces of their own; the trusted-namespaces rule has
    // tests of its own (k8s/cluster, k8s/job, k8s/upgrade).
    run_command_watching(kubeconfig, sim_url, identity, metrics_port, "*")
}

/// [`run_command_with_metrics`] watching `namespaces` (`--watch-namespaces`).
pub fn run_command_watching(
    kubeconfig: &std::path::Path,
    sim_url: &str,
    identity: &str,
    metrics_port: u16,
    namespaces: &str,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_storageos-operator"));
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    cmd.args(["run", "--metrics-addr", &metrics_addr, "--storageos-endpoint", sim_url])
        .args(["--leader-election-namespace", storageos_operator::install::NAMESPACE])
        .args(["--identity", identity])
        // Replicas share this machine: the webhook on a free port (tests/k8s/one_cluster.rs
        // serves it where the apiserver reaches it).
        .args(["--webhook-addr", "127.0.0.1:0"])
        .args(["--watch-namespaces", namespaces])
        .env("KUBECONFIG", kubeconfig);
    cmd
}

/// The image the operator believes it runs as (and so the api-manager's default image).
pub const OPERATOR_IMAGE: &str = "registry.invalid/storageos-operator:test";

/// The StorageOS simulator, kept in sync with the node pods; stopped when dropped.
pub struct StorageOS {
    pub sim: SimHandle,
    sync: JoinHandle<()>,
}

impl StorageOS {
    /// Starts the simulator and its sync with the local plane.
    pub async fn start(client: &kube::Client) -> Self {
        let sim = Simulator::start(sim::Config::default()).await.unwrap();
        let sync = sim.sync_with_kubernetes(client.clone());
        Self { sim, sync }
    }
}

impl Drop for StorageOS {
    fn drop(&mut self) {
        self.sync.abort();
    }
}

/// A running cluster controller; stopped when dropped. Each start is a fresh operator (its
/// apply memory empty), as after a restart.
pub struct ClusterOperator {
    task: JoinHandle<()>,
    registry: Registry,
}

/// The operator's settings in the tests: [`OPERATOR_IMAGE`], the built-in default images, the
/// StorageOS API at `storageos_url`, and `kubernetes_version` (what `run` reads at start).
pub fn operator_config(storageos_url: String, kubernetes_version: Option<semver::Version>) -> OperatorConfig {
    OperatorConfig {
        operator_image: OPERATOR_IMAGE.into(),
        default_images: DefaultImages::default(),
        node_env: Default::default(),
        storageos_endpoint: Some(storageos_url),
        storageos_timeouts: (Duration::from_secs(5), Duration::from_secs(5)),
        operator_namespace: storageos_operator::install::NAMESPACE.into(),
        kubernetes_version,
    }
}

/// The cluster controller, acting as the operator's ServiceAccount, with `config`; stopped when
/// the handle is aborted.
pub async fn spawn_cluster_controller(config: OperatorConfig) -> JoinHandle<()> {
    let metrics = ReconcileMetrics::register(&mut Registry::default());
    let ctx = Context::new(crate::support::operator_client().await, config, metrics, None);
    tokio::spawn(cluster::run(Arc::new(ctx), std::future::pending()))
}

impl ClusterOperator {
    /// Starts the cluster controller, talking to `storageos`, honouring clusters in every
    /// namespace.
    pub fn start(client: &kube::Client, storageos: &StorageOS) -> Self {
        Self::start_watching(client, storageos, TrustedNamespaces::Any)
    }

    /// Starts the cluster controller, talking to `storageos`, honouring clusters only in
    /// `watched` (what `--watch-namespaces` / `WATCH_NAMESPACES` sets).
    pub fn start_watching(client: &kube::Client, storageos: &StorageOS, watched: TrustedNamespaces) -> Self {
        let config = operator_config(storageos.sim.url(), None);
        let mut registry = Registry::default();
        let metrics = ReconcileMetrics::register(&mut registry);
        let ctx = Arc::new(Context::new(client.clone(), config, metrics, None).with_trusted_namespaces(watched));
        Self {
            task: tokio::spawn(cluster::run(ctx, std::future::pending())),
            registry,
        }
    }

    /// How many reconciles ended without an error (`controller_runtime_reconcile_total` with
    /// result success or requeue_after): each is a complete pass.
    pub fn completed_passes(&self) -> u64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        text.lines()
            .filter(|l| l.starts_with("controller_runtime_reconcile_total{"))
            .filter(|l| l.contains("result=\"success\"") || l.contains("result=\"requeue_after\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Stops the controller and waits until it has stopped.
    pub async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for ClusterOperator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `storageos-operator plan` of the StorageOSCluster `cr` (written to a file, as a user
/// would), rendered with [`OPERATOR_IMAGE`]; entries sorted by object.
pub async fn plan(client: &kube::Client, cr: &impl serde::Serialize) -> Vec<storageos_operator::preview::diff::Entry> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cr.yaml");
    std::fs::write(&file, serde_yaml::to_string(cr).unwrap()).unwrap();
    let args = storageos_operator::preview::PlanArgs {
        file,
        kubeconfig: None,
        operator_image: Some(OPERATOR_IMAGE.into()),
        operator_namespace: storageos_operator::install::NAMESPACE.into(),
        json: false,
        storageos_endpoint: None,
    };
    let version = client.apiserver_version().await.unwrap().git_version;
    let mut entries = storageos_operator::preview::plan(client, &args, &version)
        .await
        .unwrap();
    entries.sort_by(|a, b| a.object.cmp(&b.object));
    entries
}
