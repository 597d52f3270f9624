//! StorageOS control-plane API simulator: an in-memory, faithful subset of the v2 REST API
//! (see the operator's docs/api-manager.md) for tests (in-process, through [`SimHandle`]) and
//! demos (`storageos-operator simulate`, controlled over HTTP under `/_sim/`). It is its own
//! crate so that the operator's release binary, built without the `simulator` feature, does
//! not contain it.

mod control;
mod http;
mod kube_sync;
mod server;
mod state;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use kube_sync::{NODE_POD_SELECTOR, PodView, Seen, SyncAction, plan_sync};
pub use state::{ApiError, DropPoint, Faults, Injected, NodeSeed, RequestRecord, VolumeSeed};

use http::Shared;
use state::State;
use storageos_client::models::{Cluster, Health, Namespace, Node, Volume};

/// Why the simulator failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}; pick a free address with --listen")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The server stopped with an I/O error.
    #[error("the simulator's HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
    /// A control call was refused (same status and text the `/_sim/` API would answer).
    #[error("the simulator refused the request ({status}): {message}")]
    Rejected { status: u16, message: String },
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        Error::Rejected {
            status: e.status,
            message: e.message,
        }
    }
}

/// Simulator settings. `Debug` hides the password.
#[derive(Clone)]
pub struct Config {
    /// Address to bind; `127.0.0.1:0` (the default) picks a free port.
    pub listen: String,
    /// The one admin user login accepts.
    pub username: String,
    pub password: String,
    /// Lifetime of issued tokens (default 300 s).
    pub token_ttl: Duration,
    /// How long after going offline a node stays locked (423 on delete; default 30 s).
    pub node_lock_ttl: Duration,
    /// Accept writes without a `version` (default: 412, or 400 for a DELETE without the query
    /// parameter).
    pub accept_missing_version: bool,
    /// Promote a ready replica when a master's node goes offline (default on).
    pub auto_failover: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:0".into(),
            username: "storageos".into(),
            password: "storageos".into(),
            token_ttl: Duration::from_secs(300),
            node_lock_ttl: Duration::from_secs(30),
            accept_missing_version: false,
            auto_failover: true,
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("token_ttl", &self.token_ttl)
            .field("node_lock_ttl", &self.node_lock_ttl)
            .field("accept_missing_version", &self.accept_missing_version)
            .field("auto_failover", &self.auto_failover)
            .finish()
    }
}

/// Starts simulators.
pub struct Simulator;

impl Simulator {
    /// Binds `config.listen` and serves in a background task until the handle is dropped or
    /// shut down.
    pub async fn start(config: Config) -> Result<SimHandle, Error> {
        let listener = tokio::net::TcpListener::bind(config.listen.as_str())
            .await
            .map_err(|source| Error::Bind {
                addr: config.listen.clone(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: config.listen.clone(),
            source,
        })?;
        let shared = Arc::new(Shared::new(State::new(config)));
        let app = server::router(shared.clone(), control::routes());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = rx.await;
            });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "simulator server stopped");
            }
        });
        Ok(SimHandle {
            shared,
            addr,
            task,
            shutdown: Some(tx),
        })
    }
}

/// Control of a running simulator, with the same powers as the `/_sim/` API. Dropping it stops
/// the server.
pub struct SimHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    task: JoinHandle<()>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl SimHandle {
    /// Base URL to give a client, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Registers a node with this health (IP allocated).
    pub fn add_node(&self, name: &str, health: Health) -> Result<Node, Error> {
        self.add_node_with(NodeSeed {
            name: name.into(),
            health: Some(health),
            ..NodeSeed::default()
        })
    }

    /// Registers a node with an explicit IP and labels.
    pub fn add_node_with(&self, seed: NodeSeed) -> Result<Node, Error> {
        Ok(self.shared.lock().add_node(seed)?)
    }

    /// Sets a node's health by name (offline starts the node lock and fails volumes over).
    pub fn set_health(&self, name: &str, health: Health) -> Result<Node, Error> {
        Ok(self.shared.lock().set_health(name, health)?)
    }

    /// Creates an empty namespace.
    pub fn add_namespace(&self, name: &str) -> Result<Namespace, Error> {
        Ok(self.shared.lock().create_namespace(name, Default::default())?)
    }

    /// Seeds a volume (creating its namespace).
    pub fn add_volume(&self, seed: VolumeSeed) -> Result<Volume, Error> {
        Ok(self.shared.lock().seed_volume(seed)?)
    }

    /// Removes a volume by namespace and name, attached or not.
    pub fn remove_volume(&self, namespace: &str, name: &str) -> Result<Volume, Error> {
        Ok(self.shared.lock().remove_volume(namespace, name)?)
    }

    /// Sets the health of every replica of a volume (`syncing`, `ready`).
    pub fn set_replica_health(&self, namespace: &str, name: &str, health: &str) -> Result<Volume, Error> {
        Ok(self.shared.lock().set_replica_health(namespace, name, health)?)
    }

    /// Replaces the injected faults.
    pub fn set_faults(&self, faults: Faults) {
        self.shared.lock().set_faults(faults);
    }

    /// The faults still pending.
    pub fn faults(&self) -> Faults {
        self.shared.lock().faults()
    }

    /// Expires every token issued so far; returns how many were valid.
    pub fn expire_tokens(&self) -> usize {
        self.shared.lock().expire_tokens()
    }

    /// The request log (every non-`/_sim/` request, oldest first).
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.lock().requests()
    }

    /// Empties the request log.
    pub fn clear_requests(&self) {
        self.shared.lock().clear_requests();
    }

    /// Moves the simulated clock forward (token expiry, node lock).
    pub fn advance_clock(&self, by: Duration) {
        self.shared.lock().advance_clock(by);
    }

    /// Gives the cluster a new version, so a write with the old one gets 412.
    pub fn bump_cluster_version(&self) -> String {
        self.shared.lock().bump_cluster_version()
    }

    /// Gives a volume (by namespace name and volume name) a new version.
    pub fn bump_volume_version(&self, namespace: &str, name: &str) -> Result<String, Error> {
        Ok(self.shared.lock().bump_volume_version(namespace, name)?)
    }

    /// Moves a volume's NFS server to `endpoint` (`ip:port`; `None` clears it), as a master
    /// failover or an NFS restart does.
    pub fn set_nfs_endpoint(&self, namespace: &str, name: &str, endpoint: Option<&str>) -> Result<Volume, Error> {
        Ok(self
            .shared
            .lock()
            .set_nfs_endpoint(namespace, name, endpoint.map(str::to_string))?)
    }

    /// Current cluster settings.
    pub fn cluster(&self) -> Cluster {
        self.shared.lock().cluster()
    }

    /// Every node.
    pub fn nodes(&self) -> Vec<Node> {
        self.shared.lock().nodes()
    }

    /// Every namespace.
    pub fn namespaces(&self) -> Vec<Namespace> {
        self.shared.lock().namespaces()
    }

    /// Every volume of every namespace.
    pub fn volumes(&self) -> Vec<Volume> {
        self.shared.lock().all_volumes()
    }

    /// Keeps registering nodes for the Running pods of the StorageOS node DaemonSet in the
    /// cluster `client` points at (the `--kubeconfig` mode). Runs until the handle drops.
    pub fn sync_with_kubernetes(&self, client: kube::Client) -> JoinHandle<()> {
        let shared = self.shared.clone();
        tokio::spawn(kube_sync::run(shared, client))
    }

    /// Stops the server and waits for it to finish.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let task = std::mem::replace(&mut self.task, tokio::spawn(async {}));
        let _ = task.await;
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;
