//! Pure status computation: which selected nodes are ready, the phase, and the conditions.
//!
//! A member is ready when its node DaemonSet pod is Ready *and* the StorageOS API reports the
//! node `online` (the Go operator only dialled a TCP port). `0/0` is not Running. A cluster that
//! was Running and lost a node is Degraded, not Creating.

use std::collections::{BTreeMap, BTreeSet};

use super::node_cache::NodePod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::settings_push::ClientError;
use crate::crd::{ContainerImages, MembersStatus, StorageOSClusterStatus};
use crate::reasons;
use crate::runtime::kube::conditions;
use crate::storageos::models::{Health, NodeHealth};

/// The condition that says a cluster is paused: nothing is applied or repaired meanwhile.
pub const PAUSED: &str = "Paused";

/// Phases of a cluster.
pub mod phase {
    /// Installing; not every node is ready yet.
    pub const CREATING: &str = "Creating";
    /// Every selected node is ready.
    pub const RUNNING: &str = "Running";
    /// Was Running; a node is no longer ready.
    pub const DEGRADED: &str = "Degraded";
    /// Another cluster is active.
    pub const PENDING: &str = "Pending";
    /// Being deleted.
    pub const TERMINATING: &str = "Terminating";
}

/// What the status is computed from.
pub struct ClusterObservation<'a> {
    /// Names of the nodes selected to run StorageOS.
    pub selected: &'a [String],
    /// Nodes whose node DaemonSet pod is Ready ([`pod_ready_nodes`]).
    pub pods_ready_on: BTreeSet<String>,
    /// StorageOS nodes, or why they could not be read (typed: a caller may ask
    /// `is_not_found()` or the status of a StorageOS answer).
    pub api_nodes: Result<&'a [NodeHealth], &'a ClientError>,
    /// The status before this reconcile.
    pub previous: Option<&'a StorageOSClusterStatus>,
    /// `metadata.generation` of the cluster.
    pub generation: Option<i64>,
    /// Images in use.
    pub images: ContainerImages,
    /// Now, for condition transition times.
    pub now: &'a Time,
}

/// The nodes of the Ready, not deleted, pods among `pods`.
pub fn pod_ready_nodes<'a>(pods: impl IntoIterator<Item = &'a NodePod>) -> BTreeSet<String> {
    pods.into_iter()
        .filter(|p| !p.deleting && p.ready)
        .filter_map(|p| p.node_name.as_deref().map(str::to_owned))
        .collect()
}

fn summarise(names: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut s = names.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > SHOWN {
        s.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    s
}

/// The status for `obs`.
pub fn compute(obs: &ClusterObservation<'_>) -> StorageOSClusterStatus {
    let pods_ready = &obs.pods_ready_on;
    let online: BTreeMap<&str, Health> = match &obs.api_nodes {
        Ok(nodes) => nodes.iter().map(|n| (n.name.as_str(), n.health)).collect(),
        Err(_) => BTreeMap::new(),
    };
    let (ready, unready): (Vec<String>, Vec<String>) = obs
        .selected
        .iter()
        .cloned()
        .partition(|n| pods_ready.contains(n) && online.get(n.as_str()) == Some(&Health::Online));
    let total = obs.selected.len();
    let was_running = obs
        .previous
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == phase::RUNNING || p == phase::DEGRADED);
    let phase = if total > 0 && ready.len() == total {
        phase::RUNNING
    } else if was_running && total > 0 {
        phase::DEGRADED
    } else {
        phase::CREATING
    };
    let ready_str = format!("{}/{}", ready.len(), total);

    let mut conds = obs.previous.and_then(|s| s.conditions.clone()).unwrap_or_default();
    let (g, now) = (obs.generation, obs.now);
    let (ready_ok, reason, message) = if total == 0 {
        (
            false,
            reasons::NO_NODES_SELECTED,
            "no node matches spec.nodeSelectorTerms with tolerated taints; check the selector and tolerations"
                .to_string(),
        )
    } else if ready.len() == total {
        (
            true,
            reasons::CLUSTER_READY,
            format!("{ready_str} StorageOS nodes are functional"),
        )
    } else if let Err(e) = &obs.api_nodes {
        (
            false,
            reasons::STORAGEOS_API_UNAVAILABLE,
            format!("{ready_str} nodes ready; cannot read node health from the StorageOS API: {e}"),
        )
    } else {
        (
            false,
            reasons::NODES_NOT_READY,
            format!(
                "{ready_str} StorageOS nodes are functional; not ready: {}",
                summarise(&unready)
            ),
        )
    };
    conditions::set(&mut conds, "Ready", ready_ok, reason, message.clone(), g, now);
    let creating = phase == phase::CREATING;
    conditions::set(
        &mut conds,
        "Progressing",
        creating,
        if creating { reasons::CREATING } else { reasons::STABLE },
        if creating {
            message.clone()
        } else {
            "every object is applied".to_string()
        },
        g,
        now,
    );
    let degraded = phase == phase::DEGRADED;
    conditions::set(
        &mut conds,
        "Degraded",
        degraded,
        if degraded {
            reasons::NODES_LOST
        } else {
            reasons::AS_EXPECTED
        },
        if degraded { message } else { String::new() },
        g,
        now,
    );

    StorageOSClusterStatus {
        phase: Some(phase.into()),
        node_health_status: None,
        nodes: Some(obs.selected.to_vec()),
        ready: Some(ready_str),
        members: Some(MembersStatus {
            ready: Some(ready),
            unready: Some(unready),
        }),
        conditions: Some(conds),
        observed_generation: g,
        images: Some(obs.images.clone()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: &str, ready: bool) -> NodePod {
        serde_json::from_value(json!({
            "metadata": {"name": format!("p-{node}")},
            "spec": {"nodeName": node, "containers": []},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap()
    }

    fn api(name: &str, health: &str) -> NodeHealth {
        serde_json::from_value(json!({"id": name, "name": name, "health": health, "version": "1"})).unwrap()
    }

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap())
    }

    fn run(
        selected: &[&str],
        pods: &[NodePod],
        api_nodes: Result<&[NodeHealth], &ClientError>,
        prev: Option<&StorageOSClusterStatus>,
    ) -> StorageOSClusterStatus {
        let selected: Vec<String> = selected.iter().map(|s| s.to_string()).collect();
        let now = now();
        compute(&ClusterObservation {
            selected: &selected,
            pods_ready_on: pod_ready_nodes(pods),
            api_nodes,
            previous: prev,
            generation: Some(1),
            images: ContainerImages::default(),
            now: &now,
        })
    }

    fn cond<'a>(
        s: &'a StorageOSClusterStatus,
        t: &str,
    ) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        s.conditions.as_ref().unwrap().iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn all_pods_ready_and_online_is_running() {
        let pods = [pod("a", true), pod("b", true)];
        let nodes = [api("a", "online"), api("b", "online")];
        let s = run(&["a", "b"], &pods, Ok(&nodes), None);
        assert_eq!((s.phase.as_deref(), s.ready.as_deref()), (Some("Running"), Some("2/2")));
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(cond(&s, "Progressing").status, "False");
    }

    #[test]
    fn zero_of_zero_is_not_running() {
        let s = run(&[], &[], Ok(&[]), None);
        assert_eq!(
            (s.phase.as_deref(), s.ready.as_deref()),
            (Some("Creating"), Some("0/0"))
        );
        assert_eq!(cond(&s, "Ready").reason, "NoNodesSelected");
    }

    #[test]
    fn a_ready_pod_whose_node_is_offline_is_not_ready() {
        let pods = [pod("a", true), pod("b", true)];
        let nodes = [api("a", "online"), api("b", "offline")];
        let s = run(&["a", "b"], &pods, Ok(&nodes), None);
        assert_eq!(s.ready.as_deref(), Some("1/2"));
        assert_eq!(s.members.as_ref().unwrap().unready, Some(vec!["b".to_string()]));
        assert_eq!(cond(&s, "Ready").reason, "NodesNotReady");
        assert!(cond(&s, "Ready").message.contains("not ready: b"));
    }

    #[test]
    fn losing_a_node_after_running_is_degraded() {
        let pods = [pod("a", true), pod("b", false)];
        let nodes = [api("a", "online"), api("b", "online")];
        let prev = StorageOSClusterStatus {
            phase: Some("Running".into()),
            ..Default::default()
        };
        let s = run(&["a", "b"], &pods, Ok(&nodes), Some(&prev));
        assert_eq!(s.phase.as_deref(), Some("Degraded"));
        assert_eq!(cond(&s, "Degraded").status, "True");
    }

    #[test]
    fn unreadable_api_says_so() {
        let pods = [pod("a", true)];
        let refused = ClientError::Client(crate::storageos::Error::InvalidEndpoint {
            endpoint: "sos".into(),
            reason: "connection refused".into(),
        });
        let s = run(&["a"], &pods, Err(&refused), None);
        assert_eq!(s.ready.as_deref(), Some("0/1"));
        assert_eq!(cond(&s, "Ready").reason, "StorageOSAPIUnavailable");
        assert!(cond(&s, "Ready").message.contains("connection refused"));
    }
}
