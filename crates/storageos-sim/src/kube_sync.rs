//! The `--kubeconfig` mode: a StorageOS node (online) for every Running pod of the StorageOS
//! node DaemonSet, so a demo cluster becomes Ready the way a real one does.
//!
//! A health set through `/_sim/` stays in force until that node's pod changes (another pod, or
//! the pod starts or stops running): only pod changes produce actions. A running pod whose
//! StorageOS container runs the image named by `Faults::offline_with_image` leaves its node
//! offline (a new image that does not come up, for upgrade rollback tests).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};

use super::http::Shared;
use super::state::NodeSeed;
use storageos_client::models::Health;

/// Pod labels of the node DaemonSet (the selector the Go operator uses).
pub const NODE_POD_SELECTOR: &str = "app=storageos,kind=daemonset";

/// What the sync needs of a node pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    pub node_name: String,
    pub uid: String,
    /// The pod IP (equal to the host IP for the host-network node pods).
    pub ip: Option<String>,
    /// Phase Running and not being deleted.
    pub running: bool,
    /// Image of its `storageos` container.
    pub image: Option<String>,
}

impl PodView {
    /// `None` for a pod not yet scheduled.
    pub fn from_pod(pod: &Pod) -> Option<Self> {
        let node_name = pod.spec.as_ref()?.node_name.clone()?;
        let status = pod.status.as_ref();
        let running =
            pod.metadata.deletion_timestamp.is_none() && status.and_then(|s| s.phase.as_deref()) == Some("Running");
        Some(Self {
            node_name,
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            // Node pods use host networking, so the pod IP is the node's; it is also distinct
            // per node under kwok, where every host IP is 127.0.0.1.
            ip: status.and_then(|s| s.pod_ip.clone().or_else(|| s.host_ip.clone())),
            running,
            image: pod
                .spec
                .as_ref()?
                .containers
                .iter()
                .find(|c| c.name == "storageos")
                .and_then(|c| c.image.clone()),
        })
    }
}

/// A change to apply to the simulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncAction {
    /// Register the node, online.
    Register { node: String, ip: Option<String> },
    /// Set an existing node's health.
    SetHealth { node: String, health: Health },
}

/// What the sync remembers of each node's pod: its uid and whether it ran.
pub type Seen = BTreeMap<String, (String, bool)>;

/// Compares the pods now with what was seen before and says what to change; returns the new
/// memory. `registered` holds the names of nodes the simulator already has; a running pod on
/// `offline_image` leaves its node offline.
pub fn plan_sync(
    seen: &Seen,
    pods: &[PodView],
    registered: &BTreeSet<String>,
    offline_image: Option<&str>,
) -> (Vec<SyncAction>, Seen) {
    // One pod per node: a running one wins over others (rollouts briefly have two).
    let mut current: BTreeMap<String, &PodView> = BTreeMap::new();
    for p in pods {
        let keep = current.get(&p.node_name).is_some_and(|old| old.running && !p.running);
        if !keep {
            current.insert(p.node_name.clone(), p);
        }
    }
    let mut actions = Vec::new();
    let mut next = Seen::new();
    for (node, p) in &current {
        let fp = (p.uid.clone(), p.running);
        let changed = seen.get(node) != Some(&fp);
        next.insert(node.clone(), fp);
        if !changed {
            continue;
        }
        let known = registered.contains(node);
        if p.running && offline_image.is_some() && p.image.as_deref() == offline_image {
            if !known {
                actions.push(SyncAction::Register {
                    node: node.clone(),
                    ip: p.ip.clone(),
                });
            }
            actions.push(SyncAction::SetHealth {
                node: node.clone(),
                health: Health::Offline,
            });
            continue;
        }
        match (p.running, known) {
            (true, false) => actions.push(SyncAction::Register {
                node: node.clone(),
                ip: p.ip.clone(),
            }),
            (true, true) => actions.push(SyncAction::SetHealth {
                node: node.clone(),
                health: Health::Online,
            }),
            (false, true) => actions.push(SyncAction::SetHealth {
                node: node.clone(),
                health: Health::Offline,
            }),
            (false, false) => {}
        }
    }
    for (node, (_, was_running)) in seen {
        if *was_running && !current.contains_key(node) && registered.contains(node) {
            actions.push(SyncAction::SetHealth {
                node: node.clone(),
                health: Health::Offline,
            });
        }
    }
    (actions, next)
}

fn apply(shared: &Shared, actions: Vec<SyncAction>) {
    let mut st = shared.lock();
    for a in actions {
        let result = match &a {
            SyncAction::Register { node, ip } => st
                .add_node(NodeSeed {
                    name: node.clone(),
                    health: Some(Health::Online),
                    ip: ip.clone(),
                    ..NodeSeed::default()
                })
                .map(|_| ()),
            SyncAction::SetHealth { node, health } => st.set_health(node, *health).map(|_| ()),
        };
        match result {
            Ok(()) => tracing::info!(action = ?a, "simulator follows the node pods"),
            Err(e) => tracing::warn!(action = ?a, error = %e.message, "cannot apply node pod change"),
        }
    }
}

/// Watches the node pods in every namespace and applies [`plan_sync`] on every change.
pub async fn run(shared: Arc<Shared>, client: kube::Client) {
    let api: Api<Pod> = Api::all(client);
    let (store, writer) = reflector::store::<Pod>();
    let stream = reflector(
        writer,
        watcher(api, watcher::Config::default().labels(NODE_POD_SELECTOR)),
    )
    .default_backoff();
    futures::pin_mut!(stream);
    let mut seen = Seen::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "watching StorageOS node pods failed; retrying");
                continue;
            }
        }
        let pods: Vec<PodView> = store.state().iter().filter_map(|p| PodView::from_pod(p)).collect();
        let (registered, offline_image) = {
            let st = shared.lock();
            let names: BTreeSet<String> = st.nodes().into_iter().map(|n| n.name.to_string()).collect();
            (names, st.faults().offline_with_image)
        };
        let (actions, next) = plan_sync(&seen, &pods, &registered, offline_image.as_deref());
        seen = next;
        apply(&shared, actions);
    }
}
