//! Every Node as the api-manager caches it, once for the process ([`super::Context::nodes`]): what
//! the fencer, the out-of-service controller, the node label sync, the mirror and the drain
//! guard read of it. Its name, UID, version and labels; its taints and cordon; its Ready
//! condition; and what two annotations say (the StorageOS CSI driver registered on it, the
//! out-of-service controller's mark).
//!
//! [`NodeState`] is a view (`runtime::kube::view`): parsed from the Node's JSON with the same
//! field paths as the k8s-openapi `Node` for what it keeps, and nothing else. A real Node's
//! status (images, addresses, capacity) is most of its size, and a cached `Node` struct is
//! 1,496 bytes before its first string; 5,000 of them were ~10 MB of the api-manager's heap.
//! One cache for every reader: a second, metadata-only cache of the same Nodes (name, UID,
//! labels, the CSI annotation) cost ~4 MB more at 5,000 nodes, and a watch more.

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};

use crate::runtime::kube::view::{self, Condition, condition_status};
use crate::storageos::LabelSet as Labels;
use crate::storageos::kube::{CSI_NODE_ANNOTATION, runs_storageos};

/// The annotation marking the out-of-service taint as the out-of-service controller's (value:
/// when it was applied, RFC 3339).
pub const MARK: &str = "storageos.com/out-of-service-tainted";

/// A Node as the api-manager's controllers read it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "Parsed")]
pub struct NodeState {
    /// Name, UID, resourceVersion and creation time; never labels ([`NodeState::labels`]) or
    /// annotations (what the two read ones say is [`NodeState::annotated`]): a map costs a
    /// B-tree node of ~0.5 KB however few entries it holds.
    pub metadata: ObjectMeta,
    pub spec: Option<NodeStateSpec>,
    pub status: Option<NodeStateStatus>,
    /// The Node's labels (`ResourceExt::labels()` is empty on a `NodeState`).
    pub labels: Labels,
    pub annotated: NodeAnnotated,
}
operator_kit::view_of!(NodeState, Node);

/// What a Node's annotations say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeAnnotated {
    /// The CSI annotation names the StorageOS driver: StorageOS runs there
    /// ([`runs_storageos`]).
    pub runs_storageos: bool,
    /// The out-of-service controller's [`MARK`] is on it.
    pub marked: bool,
}

/// The part of a Node's spec kept: taints and cordon.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct NodeStateSpec {
    pub taints: Option<Vec<Taint>>,
    pub unschedulable: Option<bool>,
}

/// The part of a Node's status kept: its Ready condition (type and status only).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeStateStatus {
    pub conditions: Option<Vec<ReadyCondition>>,
}

/// A condition's type and status.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadyCondition {
    pub type_: String,
    pub status: String,
}

impl NodeState {
    /// Whether the StorageOS CSI driver is registered on the Node.
    pub fn runs_storageos(&self) -> bool {
        self.annotated.runs_storageos
    }
}

/// The annotations parsed (into a map dropped at once); the others are skipped unparsed.
struct Kept;

impl view::Annotations for Kept {
    const KEEP: &'static [&'static str] = &[MARK, CSI_NODE_ANNOTATION];
}

#[derive(Deserialize)]
struct Parsed {
    #[serde(default, deserialize_with = "view::meta_keeping::<Kept, _>")]
    metadata: ObjectMeta,
    spec: Option<NodeStateSpec>,
    #[serde(default, deserialize_with = "ready_only")]
    status: Option<NodeStateStatus>,
}

impl From<Parsed> for NodeState {
    fn from(mut p: Parsed) -> Self {
        let annotations = p.metadata.annotations.take().unwrap_or_default();
        NodeState {
            labels: p.metadata.labels.take().into(),
            metadata: p.metadata,
            spec: p.spec,
            status: p.status,
            annotated: NodeAnnotated {
                runs_storageos: runs_storageos(&annotations),
                marked: annotations.contains_key(MARK),
            },
        }
    }
}

fn ready_only<'de, D: Deserializer<'de>>(d: D) -> Result<Option<NodeStateStatus>, D::Error> {
    #[derive(Deserialize)]
    struct Status {
        conditions: Option<Vec<Condition>>,
    }
    let status = Option::<Status>::deserialize(d)?;
    Ok(status.map(|s| {
        let had = s.conditions.is_some();
        let ready = condition_status(s.conditions, "Ready");
        NodeStateStatus {
            conditions: match ready {
                Some(status) => Some(vec![ReadyCondition {
                    type_: "Ready".into(),
                    status,
                }]),
                None => had.then(Vec::new),
            },
        }
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_node_state_keeps_labels_taints_cordon_ready_and_what_two_annotations_say() {
        let node: NodeState = serde_json::from_value(json!({
            "metadata": {"name": "n", "uid": "u", "resourceVersion": "7", "labels": {"a": "b"},
                "annotations": {MARK: "2026-01-01T00:00:00Z", "other": "x",
                    CSI_NODE_ANNOTATION: r#"{"csi.storageos.com":"n"}"#},
                "managedFields": [{"manager": "kubelet"}]},
            "spec": {"unschedulable": true, "podCIDR": "10.0.0.0/24",
                "taints": [{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}]},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "False"}],
                "images": [{"names": ["big"], "sizeBytes": 1}]}
        }))
        .unwrap();
        assert_eq!(
            (
                node.metadata.name.as_deref(),
                node.metadata.uid.as_deref(),
                node.metadata.resource_version.as_deref()
            ),
            (Some("n"), Some("u"), Some("7"))
        );
        assert_eq!(node.labels.get("a"), Some("b"));
        assert!(node.metadata.labels.is_none() && node.metadata.managed_fields.is_none());
        assert!(
            node.metadata.annotations.is_none(),
            "what they say is kept, not the map"
        );
        assert_eq!(
            node.annotated,
            NodeAnnotated {
                runs_storageos: true,
                marked: true
            }
        );
        assert!(node.runs_storageos());
        let spec = node.spec.as_ref().unwrap();
        assert_eq!(spec.unschedulable, Some(true));
        assert_eq!(
            spec.taints.as_ref().unwrap()[0].key,
            "node.kubernetes.io/out-of-service"
        );
        let conditions = node.status.unwrap().conditions.unwrap();
        assert_eq!(
            (
                conditions.len(),
                conditions[0].type_.as_str(),
                conditions[0].status.as_str()
            ),
            (1, "Ready", "False")
        );
    }

    #[test]
    fn a_node_without_the_mark_the_driver_or_a_ready_condition_keeps_none() {
        let node: NodeState = serde_json::from_value(json!({
            "metadata": {"name": "n", "annotations": {"other": "x",
                CSI_NODE_ANNOTATION: r#"{"other.csi.example.com":"n"}"#}},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}]}
        }))
        .unwrap();
        assert!(node.metadata.annotations.is_none());
        assert_eq!(
            node.annotated,
            NodeAnnotated::default(),
            "another driver is not StorageOS"
        );
        assert_eq!(node.status.unwrap().conditions, Some(vec![]));
        let bare: NodeState = serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap();
        assert_eq!((bare.spec, bare.status), (None, None));
    }

    #[test]
    fn a_node_state_is_a_fraction_of_a_node() {
        assert!(std::mem::size_of::<NodeState>() * 3 < std::mem::size_of::<Node>());
    }
}
