//! What the fencer and the out-of-service controller read of a Node, each poll, from one watch
//! cache ([`super::Context::node_states`]): its name and version, the out-of-service mark, its
//! taints and cordon, and its Ready condition.
//!
//! [`NodeState`] is a view (`runtime::kube::view`): parsed from the Node's JSON with the same
//! field paths as the k8s-openapi `Node` for what it keeps, and nothing else. A real Node's
//! status (images, addresses, capacity) is most of its size, and a cached `Node` struct is
//! 1,496 bytes before its first string; 5,000 of them were ~10 MB of the api-manager's heap.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};

use crate::runtime::kube::view::{self, Condition, condition_status};

/// The annotation marking the out-of-service taint as the out-of-service controller's (value:
/// when it was applied, RFC 3339); the one annotation a [`NodeState`] keeps.
pub const MARK: &str = "storageos.com/out-of-service-tainted";

/// A Node as the fencer and the out-of-service controller read it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct NodeState {
    /// Name, UID, resourceVersion and the out-of-service mark (the only annotation kept).
    #[serde(default, deserialize_with = "meta_with_mark")]
    pub metadata: ObjectMeta,
    pub spec: Option<NodeStateSpec>,
    #[serde(default, deserialize_with = "ready_only")]
    pub status: Option<NodeStateStatus>,
}
crate::view_of!(NodeState, Node);

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

fn meta_with_mark<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    // Not `view::meta`: a Node's labels are not read here, and are a map of their own.
    #[derive(Deserialize, Default)]
    #[serde(rename_all = "camelCase", default)]
    struct WithMark {
        name: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
        #[serde(deserialize_with = "view::annotations::<Mark, _>")]
        annotations: Option<BTreeMap<String, String>>,
    }
    let m = WithMark::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        uid: m.uid,
        resource_version: m.resource_version,
        annotations: m.annotations,
        ..ObjectMeta::default()
    })
}

/// Of a Node's annotations, only [`MARK`] is kept.
struct Mark;

impl view::Annotations for Mark {
    const KEEP: &'static [&'static str] = &[MARK];
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
    fn a_node_state_keeps_taints_cordon_ready_and_the_mark_only() {
        let node: NodeState = serde_json::from_value(json!({
            "metadata": {"name": "n", "uid": "u", "resourceVersion": "7", "labels": {"a": "b"},
                "annotations": {MARK: "2026-01-01T00:00:00Z", "other": "x"},
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
        assert!(node.metadata.labels.is_none() && node.metadata.managed_fields.is_none());
        assert_eq!(
            node.metadata.annotations.clone().unwrap(),
            BTreeMap::from([(MARK.to_string(), "2026-01-01T00:00:00Z".to_string())]),
            "only the mark"
        );
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
    fn a_node_without_the_mark_or_a_ready_condition_keeps_neither() {
        let node: NodeState = serde_json::from_value(json!({
            "metadata": {"name": "n", "annotations": {"other": "x"}},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}]}
        }))
        .unwrap();
        assert!(node.metadata.annotations.is_none());
        assert_eq!(node.status.unwrap().conditions, Some(vec![]));
        let bare: NodeState = serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap();
        assert_eq!((bare.spec, bare.status), (None, None));
    }

    #[test]
    fn a_node_state_is_a_fraction_of_a_node() {
        assert!(std::mem::size_of::<NodeState>() * 3 < std::mem::size_of::<Node>());
    }
}
