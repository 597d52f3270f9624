//! The fencer's own worker: an OS thread with a single-threaded Tokio runtime of its own that
//! runs the StorageOS node poll and the fencer, with a Kubernetes client and a StorageOS client
//! whose connections that runtime drives.
//!
//! Why: fencing latency is the node poll plus one pass, and the target is poll + 200 ms. On the
//! process's main runtime, anything else the api-manager does between two awaits (a mirror pass
//! over thousands of volumes, a label sync's first pass, webhook admissions at hundreds a
//! second) delays the node read, the fencer's reaction to it and the I/O of its requests,
//! because the main runtime's workers also drive every socket. Here nothing but the node poll
//! and fencing runs, and the other controllers only read the node snapshots it publishes
//! (`watch` channels work across runtimes). The caches the fencer reads (Node states, PVCs)
//! stay on the main runtime: a pass reads everything it acts on fresh (see [`super::lookups`]).
//!
//! The worker stops when its [`Worker`] is dropped (leadership lost, shutdown): its runtime
//! ends with the thread and aborts any running episode. A worker that ends by itself (a panic)
//! is reported through [`Worker::ended`] so that the process exits rather than run unfenced.

use std::sync::Arc;

use tokio::sync::oneshot;

use crate::controllers::Context;
use crate::polls::Polls;

/// The worker thread's name (in `ps -T`, `top -H`, panics).
pub const THREAD: &str = "fencer";

/// Why the worker could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The OS refused a thread.
    #[error("cannot start the fencer's thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// The running worker; dropping it stops the worker.
pub struct Worker {
    /// Dropped with the worker: the thread's runtime then stops.
    _stop: oneshot::Sender<()>,
    ended: oneshot::Receiver<String>,
}

impl Worker {
    /// Waits until the worker ends by itself, which it never should; says why.
    pub async fn ended(&mut self) -> String {
        (&mut self.ended)
            .await
            .unwrap_or_else(|_| "its thread ended without saying why".into())
    }
}

/// Tells the owner why the worker ended, however it ends (a panic unwinds through `drop`).
struct Report {
    to: Option<oneshot::Sender<String>>,
    why: String,
}

impl Drop for Report {
    fn drop(&mut self) {
        if let Some(to) = self.to.take() {
            // The owner may be gone (stopped on purpose): nobody to tell.
            let _ = to.send(std::mem::take(&mut self.why));
        }
    }
}

/// Runs the node half of the process's `polls` and the fencer of `ctx` on a thread of their
/// own. `kube` is the configuration of `ctx.kube` (a client is made from it on the worker's
/// runtime). Call it on the main runtime: the fencer's Node-state cache is started there, with
/// the other caches.
pub fn start(ctx: &Arc<Context>, kube: kube::Config, polls: Arc<Polls>) -> Result<Worker, Error> {
    if ctx.config.fencer.is_some() {
        ctx.nodes.get(&ctx.kube, super::CONTROLLER);
    }
    let (stop_tx, stop) = oneshot::channel::<()>();
    let (ended_tx, ended) = oneshot::channel();
    let ctx = ctx.clone();
    std::thread::Builder::new().name(THREAD.into()).spawn(move || {
        let mut report = Report {
            to: Some(ended_tx),
            why: "it panicked (see the log)".into(),
        };
        report.why = run(&ctx, kube, &polls, stop);
    })?;
    Ok(Worker { _stop: stop_tx, ended })
}

/// The thread's body: until told to stop, or until something fails; returns why it ended.
fn run(ctx: &Context, kube: kube::Config, polls: &Polls, stop: oneshot::Receiver<()>) -> String {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return format!("cannot start its runtime: {e}"),
    };
    runtime.block_on(async move {
        // Made here, so their connections are this runtime's.
        let kube = match crate::runtime::kube::http::client(kube) {
            Ok(client) => client,
            Err(e) => return format!("cannot make its Kubernetes client: {e}"),
        };
        let api = match ctx.api.with_own_connections() {
            Ok(api) => api,
            Err(e) => return format!("cannot make its StorageOS client: {e}"),
        };
        let own = Arc::new(ctx.with_clients(kube, api.clone()));
        let work = async { tokio::join!(polls.run_nodes(api), super::run(own.clone())) };
        tokio::select! {
            _ = stop => "stopped".to_string(),
            _ = work => "the node poll ended".to_string(),
        }
    })
}
