//! What the cluster controller keeps of Nodes and StorageOS node pods in its watch caches.
//!
//! Status, node selection and the membership filter read a Node's name, labels, taints, Ready
//! status and eligibility (OS, architecture, kernel), and a node pod's labels, node name and Ready status. The rest is dropped as
//! each object arrives: a node pod's spec (containers, env, volumes) is most of its size, and
//! the full objects of a large cluster dominated the operator's memory (docs/benchmarks.md).

use k8s_openapi::api::core::v1::{
    Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The identity and labels of an object; annotations, managedFields and the rest go.
fn slim_meta(meta: &mut ObjectMeta) {
    let old = std::mem::take(meta);
    *meta = ObjectMeta {
        name: old.name,
        namespace: old.namespace,
        uid: old.uid,
        resource_version: old.resource_version,
        labels: old.labels,
        deletion_timestamp: old.deletion_timestamp,
        ..ObjectMeta::default()
    };
}

/// Keeps a Node's name, labels, taints, the status of its Ready condition and what its
/// eligibility is decided from (OS, architecture, kernel).
pub fn slim_node(node: &mut Node) {
    slim_meta(&mut node.metadata);
    let taints = node.spec.take().and_then(|s| s.taints);
    node.spec = Some(NodeSpec {
        taints,
        ..NodeSpec::default()
    });
    let status = node.status.take().unwrap_or_default();
    let ready = status
        .conditions
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"));
    let node_info = status.node_info.map(|i| NodeSystemInfo {
        architecture: i.architecture,
        operating_system: i.operating_system,
        kernel_version: i.kernel_version,
        ..NodeSystemInfo::default()
    });
    node.status = Some(NodeStatus {
        conditions: ready.map(|c| {
            vec![NodeCondition {
                type_: c.type_,
                status: c.status,
                ..NodeCondition::default()
            }]
        }),
        node_info,
        ..NodeStatus::default()
    });
}

/// Keeps a pod's name, namespace, labels, deletion mark, node name and the status of its Ready
/// condition.
pub fn slim_pod(pod: &mut Pod) {
    slim_meta(&mut pod.metadata);
    let node_name = pod.spec.take().and_then(|s| s.node_name);
    pod.spec = Some(PodSpec {
        node_name,
        ..PodSpec::default()
    });
    let ready = pod
        .status
        .take()
        .and_then(|s| s.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"));
    pod.status = Some(PodStatus {
        conditions: ready.map(|c| {
            vec![PodCondition {
                type_: c.type_,
                status: c.status,
                ..PodCondition::default()
            }]
        }),
        ..PodStatus::default()
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{node_membership_hash, select, status};
    use serde_json::json;

    fn node() -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"zone": "a", "kubernetes.io/hostname": "n1"},
                         "annotations": {"big": "x".repeat(4096)},
                         "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
            "spec": {"podCIDR": "10.0.0.0/24", "taints": [{"key": "dedicated", "value": "storage", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z", "reason": "KubeletReady", "message": "ready"}
                ],
                "images": [{"names": ["storageos/node:v2.10.0"], "sizeBytes": 1}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]
            }
        }))
        .unwrap()
    }

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "storageos-node-x", "namespace": "kube-system",
                         "labels": {"app": "storageos", "kind": "daemonset", "storageos_cr": "storageos"},
                         "annotations": {"a": "b"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "storageos", "image": "storageos/node:v2.10.0",
                     "env": [{"name": "X", "value": "y".repeat(4096)}]}]},
            "status": {"conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "storageos", "image": "i", "imageID": "", "ready": true, "restartCount": 0}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_slim_node_is_selected_and_hashed_as_the_full_one() {
        let full = node();
        let mut slim = full.clone();
        slim_node(&mut slim);
        let terms =
            serde_json::from_value(json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]))
                .unwrap();
        let tolerate: Vec<_> = serde_json::from_value(json!([{"key": "dedicated", "operator": "Exists"}])).unwrap();
        for (terms, tolerations) in [(None, &[][..]), (Some(&terms), &tolerate[..])] {
            let terms: Option<&Vec<_>> = terms;
            assert_eq!(
                select::selected_nodes(std::slice::from_ref(&slim), terms.map(Vec::as_slice), tolerations),
                select::selected_nodes(std::slice::from_ref(&full), terms.map(Vec::as_slice), tolerations)
            );
        }
        assert_eq!(node_membership_hash(&slim), node_membership_hash(&full));
        assert!(serde_json::to_vec(&slim).unwrap().len() * 10 < serde_json::to_vec(&full).unwrap().len());
    }

    #[test]
    fn a_slim_pod_counts_as_ready_on_its_node_as_the_full_one() {
        let full = pod();
        let mut slim = full.clone();
        slim_pod(&mut slim);
        assert_eq!(status::pod_ready_nodes([&slim]), status::pod_ready_nodes([&full]));
        assert_eq!(status::pod_ready_nodes([&slim]).into_iter().collect::<Vec<_>>(), ["n1"]);
        assert_eq!(slim.labels().get("storageos_cr").map(String::as_str), Some("storageos"));
        assert!(serde_json::to_vec(&slim).unwrap().len() * 10 < serde_json::to_vec(&full).unwrap().len());
    }

    use kube::ResourceExt;
}
