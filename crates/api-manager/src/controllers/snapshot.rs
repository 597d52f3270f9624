//! The snapshot-driven controller shape (fencer, shared volume, mirror): a controller that acts
//! on each new snapshot of the shared StorageOS poll. The event-driven shape is
//! [`super::labels::LabelSync`] and [`super::delete_sync::DeleteSync`].

use std::future::Future;
use std::sync::Arc;

use super::Context;
use crate::storageos_poll::{self, NodeSnapshot, Receiver, Snapshot, VolumeSnapshot};

/// A controller fed by the shared poll. It says which snapshots it reads; [`Subscription`]
/// calls it with each new one, in order, one at a time.
pub trait OnSnapshot: Send {
    /// Whether it reads node snapshots.
    const NODES: bool;
    /// Whether it reads volume snapshots.
    const VOLUMES: bool;

    /// A new node snapshot (a failed read included: it must not act on that).
    fn nodes(&mut self, _snapshot: &NodeSnapshot) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// A new volume snapshot (a failed or partial read included).
    fn volumes(&mut self, _snapshot: &VolumeSnapshot) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// The subscriptions of one snapshot-driven controller. Made when the controller starts, before
/// its caches fill, so that a snapshot published meanwhile is handed over once they have.
pub struct Subscription {
    nodes: Option<Receiver<Vec<crate::storageos::models::Node>>>,
    volumes: Option<Receiver<storageos_poll::VolumeList>>,
}

impl Subscription {
    /// Subscribes to what `C` reads.
    pub fn to<C: OnSnapshot>(ctx: &Context) -> Self {
        Self {
            nodes: C::NODES.then(|| ctx.storageos.nodes()),
            volumes: C::VOLUMES.then(|| ctx.storageos.volumes()),
        }
    }

    /// Feeds `controller` every new snapshot until the poll's channels close.
    pub async fn follow<C: OnSnapshot>(mut self, controller: &mut C) {
        loop {
            tokio::select! {
                Some(s) = next_of(&mut self.nodes) => controller.nodes(&s).await,
                Some(s) = next_of(&mut self.volumes) => controller.volumes(&s).await,
                else => break,
            }
        }
    }
}

/// The next snapshot of a subscription; `None` at once without one.
async fn next_of<T>(rx: &mut Option<Receiver<T>>) -> Option<Arc<Snapshot<T>>> {
    match rx {
        Some(rx) => storageos_poll::next(rx).await,
        None => None,
    }
}
