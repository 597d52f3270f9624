//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager).
//!
//! Every replica serves health and webhooks; only the lease holder runs controllers and writes.
//! A replica that loses the lease stops its controllers by returning from [`Leadership::lost`],
//! and the process exits so that it restarts clean rather than acting on stale state.

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;

/// Why leader election failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Lease could not be read or written; check the Role allows `leases` get/create/update/patch.
    #[error("leader election on Lease {namespace}/{name}: {source}")]
    Lease {
        namespace: String,
        name: String,
        #[source]
        source: Box<LeaseManagerError>,
    },
    /// The background lease task stopped.
    #[error("leader election on Lease {0} stopped unexpectedly")]
    Stopped(String),
}

/// Timing of the lease.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// How long a holder keeps the lease without renewing, in seconds.
    pub duration_secs: u64,
    /// How long before expiry the holder renews, in seconds.
    pub grace_secs: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            duration_secs: 15,
            grace_secs: 5,
        }
    }
}

/// Held leadership; dropping it releases the lease.
pub struct Leadership {
    state: watch::Receiver<bool>,
    name: String,
}

impl Leadership {
    /// Waits until this replica holds the lease `namespace/name` under `identity`, writing it
    /// as the field manager `manager`.
    pub async fn acquire(
        client: Client,
        (namespace, name): (&str, &str),
        (identity, manager): (&str, &str),
        timing: Timing,
    ) -> Result<Self, Error> {
        let manager = LeaseManagerBuilder::new(client, name)
            .with_namespace(namespace)
            .with_identity(identity)
            .with_duration(timing.duration_secs)
            .with_grace(timing.grace_secs)
            .with_field_manager(manager)
            .build()
            .await
            .map_err(|e| Error::Lease {
                namespace: namespace.into(),
                name: name.into(),
                source: Box::new(e),
            })?;
        let (mut state, _task) = manager.watch().await;
        let full_name = format!("{namespace}/{name}");
        while !*state.borrow_and_update() {
            tracing::info!(lease = %full_name, %identity, "waiting to become leader");
            state.changed().await.map_err(|_| Error::Stopped(full_name.clone()))?;
        }
        tracing::info!(lease = %full_name, %identity, "became leader");
        Ok(Self { state, name: full_name })
    }

    /// Resolves when the lease is lost (or its background task ends).
    pub async fn lost(&mut self) -> Error {
        loop {
            if self.state.changed().await.is_err() {
                return Error::Stopped(self.name.clone());
            }
            if !*self.state.borrow_and_update() {
                tracing::warn!(lease = %self.name, "lost leadership");
                return Error::Stopped(self.name.clone());
            }
        }
    }
}
