//! `storageos-operator simulate`: the StorageOS API simulator (crate `storageos-sim`) served as
//! a process for the demo and the benchmarks. Only in builds with the `simulator` feature; the
//! release image is built without it.

use std::path::PathBuf;

use crate::crd::contract::user_agent;
use crate::runtime::kube::connect;
use crate::runtime::process::{addr, signal};
use crate::sim::{Config, Simulator};

/// Arguments of `simulate`.
#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
    /// Address to listen on (`:PORT` means every interface).
    #[arg(long, env = "STORAGEOS_SIM_ADDR", default_value = "127.0.0.1:5705")]
    pub listen: String,

    /// Username the simulator accepts at login.
    #[arg(long, default_value = "storageos")]
    pub username: String,

    /// Password the simulator accepts at login.
    #[arg(long, default_value = "storageos")]
    pub password: String,

    /// Lifetime of issued tokens, for example `300s`, `5m` or `1h`.
    #[arg(long, default_value = "5m", value_parser = crate::duration::parse_flag)]
    pub token_ttl: std::time::Duration,

    /// Register a StorageOS node (online) for every Running pod of the StorageOS node
    /// DaemonSet in the cluster this kubeconfig points at.
    #[arg(long, conflicts_with = "in_cluster")]
    pub kubeconfig: Option<PathBuf>,

    /// The same, in the cluster the simulator runs in as a pod (its ServiceAccount needs to
    /// list and watch pods); outside a pod, the cluster of `KUBECONFIG`.
    #[arg(long)]
    pub in_cluster: bool,
}

/// Why `simulate` stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The simulator could not start or serve.
    #[error(transparent)]
    Sim(#[from] crate::sim::Error),
    /// The `--kubeconfig` or `--in-cluster` mode could not connect to Kubernetes.
    #[error(transparent)]
    Kube(#[from] connect::Error),
}

/// Serves the simulator until interrupted.
pub async fn run(args: SimulateArgs) -> Result<(), Error> {
    let config = Config {
        listen: addr::listen_addr(&args.listen),
        username: args.username.clone(),
        password: args.password.clone(),
        token_ttl: args.token_ttl,
        ..Config::default()
    };
    let kube_client = match &args.kubeconfig {
        Some(path) => Some(connect::connect(Some(path), &user_agent(None)).await?.client),
        // In a pod without KUBECONFIG, the environment is the pod's ServiceAccount.
        None if args.in_cluster => Some(connect::connect(None, &user_agent(None)).await?.client),
        None => None,
    };
    let handle = Simulator::start(config).await?;
    tracing::info!(
        addr = %handle.addr(),
        username = %args.username,
        token_ttl = ?args.token_ttl,
        "StorageOS simulator listening; control it under /_sim/"
    );
    let _sync = kube_client.map(|c| {
        tracing::info!("registering a StorageOS node for every Running StorageOS node pod");
        handle.sync_with_kubernetes(c)
    });
    signal::shutdown().await;
    tracing::info!("stopping the simulator");
    handle.shutdown().await;
    Ok(())
}
