//! What the cluster controller keeps of Nodes and StorageOS node pods in its watch caches.
//!
//! Status, node selection and the membership filter read a Node's name, labels, taints, Ready
//! status and platform (OS, architecture, kernel), and a node pod's name, namespace, labels,
//! node name, deletion mark and Ready status. The caches ([`ViewStore`]) hold just that
//! ([`CachedNode`], [`NodePod`]): no `ObjectMeta`, short strings inline. The watch parses each
//! event as a listed type ([`ListedNode`], [`ListedNodePod`]): the identity the watcher needs
//! and the view, from the watch's JSON without the rest. A node pod's spec (containers, env,
//! volumes) is most of its size, and full objects, then views still carrying an `ObjectMeta`
//! and kube's per-entry store key, dominated the operator's memory at scale
//! (docs/benchmarks.md).
//!
//! [`ViewStore`]: crate::runtime::kube::view_store::ViewStore

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};
use smol_str::SmolStr;

use crate::checks::Platform;
use crate::runtime::kube::view::{self, Condition, condition_status};
use crate::runtime::kube::view_store::{Listed, View};
use crate::storageos::LabelSet as Labels;

/// A Node as the cluster controller keeps it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "NodeShape")]
pub struct CachedNode {
    pub name: SmolStr,
    pub labels: Labels,
    pub taints: Box<[NodeTaint]>,
    /// The status of its Ready condition (`True`, `False`, `Unknown`), if reported.
    pub ready: Option<SmolStr>,
    /// What its kubelet reports of its platform, if anything.
    pub platform: Option<Platform>,
}

/// A Node's taint: what toleration matching reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct NodeTaint {
    pub key: SmolStr,
    #[serde(default)]
    pub value: Option<SmolStr>,
    pub effect: SmolStr,
}

/// A Node as its watch parses it: identity (name, resourceVersion, UID; never labels) and the
/// [`CachedNode`] the cache keeps.
pub type ListedNode = Listed<CachedNode>;

impl View for CachedNode {
    type Of = Node;
    fn listed<'de, D: Deserializer<'de>>(d: D) -> Result<ListedNode, D::Error> {
        NodeShape::deserialize(d).map(ListedNode::from)
    }
}

#[derive(Deserialize)]
struct NodeShape {
    #[serde(default, deserialize_with = "view::meta")]
    metadata: ObjectMeta,
    spec: Option<NodeSpecShape>,
    status: Option<NodeStatusShape>,
}

#[derive(Deserialize)]
struct NodeSpecShape {
    taints: Option<Box<[NodeTaint]>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeStatusShape {
    conditions: Option<Vec<Condition>>,
    node_info: Option<Platform>,
}

impl From<NodeShape> for ListedNode {
    fn from(mut n: NodeShape) -> Self {
        let (conditions, platform) = n.status.map(|s| (s.conditions, s.node_info)).unwrap_or_default();
        let node = CachedNode {
            name: n.metadata.name.as_deref().unwrap_or_default().into(),
            labels: n.metadata.labels.take().into(),
            taints: n.spec.and_then(|s| s.taints).unwrap_or_default(),
            ready: condition_status(conditions, "Ready").map(SmolStr::from),
            platform,
        };
        Listed {
            metadata: n.metadata,
            view: node,
        }
    }
}

impl From<NodeShape> for CachedNode {
    fn from(n: NodeShape) -> Self {
        ListedNode::from(n).view
    }
}

impl CachedNode {
    /// Why StorageOS cannot run on this node ([`crate::checks::ineligible_platform`]).
    pub fn ineligible(&self) -> Option<String> {
        crate::checks::ineligible_platform(self.platform.as_ref()?)
    }
}

/// A StorageOS node pod as the cluster controller keeps it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "PodShape")]
pub struct NodePod {
    pub name: SmolStr,
    pub namespace: SmolStr,
    pub labels: Labels,
    pub node_name: Option<SmolStr>,
    /// Whether its Ready condition is `True`.
    pub ready: bool,
    /// Whether it is being deleted (`metadata.deletionTimestamp` set).
    pub deleting: bool,
}

/// A node pod as its watch parses it: identity (name, namespace, resourceVersion, UID,
/// deletion mark; never labels) and the [`NodePod`] the cache keeps.
pub type ListedNodePod = Listed<NodePod>;

impl View for NodePod {
    type Of = Pod;
    fn listed<'de, D: Deserializer<'de>>(d: D) -> Result<ListedNodePod, D::Error> {
        PodShape::deserialize(d).map(ListedNodePod::from)
    }
}

#[derive(Deserialize)]
struct PodShape {
    #[serde(default, deserialize_with = "view::meta")]
    metadata: ObjectMeta,
    spec: Option<PodSpecShape>,
    status: Option<PodStatusShape>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpecShape {
    node_name: Option<SmolStr>,
}

#[derive(Deserialize)]
struct PodStatusShape {
    conditions: Option<Vec<Condition>>,
}

impl From<PodShape> for ListedNodePod {
    fn from(mut p: PodShape) -> Self {
        let pod = NodePod {
            name: p.metadata.name.as_deref().unwrap_or_default().into(),
            namespace: p.metadata.namespace.as_deref().unwrap_or_default().into(),
            labels: p.metadata.labels.take().into(),
            node_name: p.spec.and_then(|s| s.node_name),
            ready: condition_status(p.status.and_then(|s| s.conditions), "Ready").as_deref() == Some("True"),
            deleting: p.metadata.deletion_timestamp.is_some(),
        };
        Listed {
            metadata: p.metadata,
            view: pod,
        }
    }
}

impl From<PodShape> for NodePod {
    fn from(p: PodShape) -> Self {
        ListedNodePod::from(p).view
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cluster::{select, status};
    use kube::ResourceExt;
    use serde_json::json;

    fn node_json() -> serde_json::Value {
        json!({
            "metadata": {"name": "n1", "labels": {"zone": "a", "kubernetes.io/hostname": "n1"},
                         "annotations": {"big": "x".repeat(4096)},
                         "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
            "spec": {"podCIDR": "10.0.0.0/24", "taints": [{"key": "dedicated", "value": "storage", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z", "reason": "KubeletReady", "message": "ready"}
                ],
                "nodeInfo": {"operatingSystem": "linux", "architecture": "arm64", "kernelVersion": "5.15.0",
                             "kubeletVersion": "v1.33.0", "machineID": "m", "systemUUID": "s", "bootID": "b",
                             "containerRuntimeVersion": "containerd://2", "kubeProxyVersion": "", "osImage": "Debian"},
                "images": [{"names": ["storageos/node:v2.10.0"], "sizeBytes": 1}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]
            }
        })
    }

    fn pod_json(ready: &str) -> serde_json::Value {
        json!({
            "metadata": {"name": "storageos-node-x", "namespace": "kube-system",
                         "labels": {"app": "storageos", "kind": "daemonset", "storageos_cr": "storageos"},
                         "annotations": {"a": "b"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "storageos", "image": "storageos/node:v2.10.0",
                     "env": [{"name": "X", "value": "y".repeat(4096)}]}]},
            "status": {"conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": ready}],
                       "containerStatuses": [{"name": "storageos", "image": "i", "imageID": "", "ready": true, "restartCount": 0}]}
        })
    }

    #[test]
    fn a_cached_node_keeps_what_selection_status_and_eligibility_read() {
        let listed: ListedNode = serde_json::from_value(node_json()).unwrap();
        // The watcher reads the listed node's identity; the cache keeps the view alone.
        assert_eq!(listed.name_any(), "n1");
        assert!(listed.metadata.labels.is_none(), "labels are kept once, compact");
        assert!(listed.metadata.annotations.is_none() && listed.metadata.managed_fields.is_none());
        let node = listed.view;
        assert_eq!(node, serde_json::from_value::<CachedNode>(node_json()).unwrap());
        assert_eq!(node.name, "n1");
        assert_eq!(node.labels.get("zone"), Some("a"));
        assert_eq!((node.taints.len(), node.taints[0].key.as_str()), (1, "dedicated"));
        assert_eq!(node.ready.as_deref(), Some("True"));
        assert_eq!(node.ineligible().as_deref(), Some("architecture arm64"));
        // The same node as the full type says the same about eligibility.
        let full: Node = serde_json::from_value(node_json()).unwrap();
        assert_eq!(crate::checks::ineligible(&full), node.ineligible());

        let terms =
            serde_json::from_value(json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]))
                .unwrap();
        let tolerate: Vec<_> = serde_json::from_value(json!([{"key": "dedicated", "operator": "Exists"}])).unwrap();
        let selected = |terms: Option<&Vec<_>>, tolerations| {
            select::selected_nodes(std::slice::from_ref(&node), terms.map(Vec::as_slice), tolerations)
        };
        assert!(
            selected(None, &[]).is_empty(),
            "an untolerated NoSchedule taint keeps the node out"
        );
        assert_eq!(selected(Some(&terms), &tolerate), ["n1"]);

        // The view (what the cache compares to wake the controller) changes with readiness, and
        // not with what it does not keep.
        let mut not_ready = node_json();
        not_ready["status"]["conditions"][1]["status"] = json!("False");
        not_ready["metadata"]["annotations"] = json!({"other": "y"});
        let not_ready: CachedNode = serde_json::from_value(not_ready).unwrap();
        assert_ne!(node, not_ready);
        let mut heartbeat = node_json();
        heartbeat["status"]["conditions"][1]["lastHeartbeatTime"] = json!("2026-01-01T00:01:00Z");
        let heartbeat: CachedNode = serde_json::from_value(heartbeat).unwrap();
        assert_eq!(node, heartbeat);
    }

    #[test]
    fn a_node_reporting_nothing_is_not_ready_and_not_excluded() {
        let node: CachedNode = serde_json::from_value(json!({"metadata": {"name": "bare"}})).unwrap();
        assert_eq!((node.ready.as_deref(), node.ineligible()), (None, None));
        assert!(node.taints.is_empty());
    }

    #[test]
    fn a_node_pod_keeps_its_labels_node_and_readiness() {
        let ready: NodePod = serde_json::from_value(pod_json("True")).unwrap();
        let not_ready: NodePod = serde_json::from_value(pod_json("False")).unwrap();
        assert_eq!(
            status::pod_ready_nodes([&ready, &not_ready])
                .into_iter()
                .collect::<Vec<_>>(),
            ["n1"]
        );
        assert!(status::pod_ready_nodes([&not_ready]).is_empty());
        assert_eq!(ready.labels.get("storageos_cr"), Some("storageos"));
        assert_eq!(
            (ready.name.as_str(), ready.namespace.as_str()),
            ("storageos-node-x", "kube-system")
        );
        assert!(!ready.deleting);
        let mut deleting = pod_json("True");
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let deleting: ListedNodePod = serde_json::from_value(deleting).unwrap();
        assert!(deleting.view.deleting && deleting.metadata.deletion_timestamp.is_some());
        assert!(
            status::pod_ready_nodes([&deleting.view]).is_empty(),
            "a pod being deleted is not counted"
        );
    }

    #[test]
    fn the_views_are_a_fraction_of_the_full_types() {
        // The point of the views (docs/benchmarks.md): each cached object costs its struct.
        assert!(std::mem::size_of::<CachedNode>() * 3 < std::mem::size_of::<Node>());
        assert!(std::mem::size_of::<NodePod>() * 4 < std::mem::size_of::<Pod>());
    }
}
