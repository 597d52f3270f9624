//! What the apply step and the live index both know of an object: its identity, what marks a
//! change of it, and whether the operator wrote it.

use kube::core::{ApiResource, GroupVersionKind, ObjectMeta};
use serde_json::Value;

/// A rendered object lacks the named field (a template bug).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rendered object is missing {0}; this is a bug in the templates")]
pub struct Malformed(pub &'static str);

/// Identity of one object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

impl ObjectKey {
    /// The key of a rendered object.
    pub fn of(obj: &Value) -> Result<Self, Malformed> {
        let s = |v: &Value| v.as_str().map(str::to_string);
        Ok(Self {
            api_version: s(&obj["apiVersion"]).ok_or(Malformed("apiVersion"))?,
            kind: s(&obj["kind"]).ok_or(Malformed("kind"))?,
            namespace: s(&obj["metadata"]["namespace"]),
            name: s(&obj["metadata"]["name"]).ok_or(Malformed("metadata.name"))?,
        })
    }

    pub fn api_resource(&self) -> ApiResource {
        let (group, version) = match self.api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", self.api_version.as_str()),
        };
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &self.kind))
    }
}

/// Whether the field manager `manager` ever wrote the object.
pub fn written_by(meta: &ObjectMeta, manager: &str) -> bool {
    meta.managed_fields
        .iter()
        .flatten()
        .any(|f| f.manager.as_deref() == Some(manager))
}

/// What tells whether the live object changed since we applied it.
pub fn live_marker(meta: &ObjectMeta) -> String {
    match meta.generation {
        Some(g) => format!("g{g}"),
        None => format!("rv{}", meta.resource_version.clone().unwrap_or_default()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_of_namespaced_and_cluster_objects() {
        let k = ObjectKey::of(&json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "storageos-daemonset", "namespace": "kube-system"}}))
        .unwrap();
        assert_eq!(k.to_string(), "DaemonSet kube-system/storageos-daemonset");
        assert_eq!(k.api_resource().plural, "daemonsets");
        let k = ObjectKey::of(&json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "fast"}}))
        .unwrap();
        assert_eq!(k.namespace, None);
        assert_eq!(k.api_resource().group, "storage.k8s.io");
        let k = ObjectKey::of(&json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}})).unwrap();
        assert_eq!(k.api_resource().group, "");
        assert!(matches!(
            ObjectKey::of(&json!({"kind": "Service"})),
            Err(Malformed("apiVersion"))
        ));
    }

    #[test]
    fn live_marker_prefers_generation() {
        let meta = ObjectMeta {
            generation: Some(3),
            resource_version: Some("99".into()),
            ..Default::default()
        };
        assert_eq!(live_marker(&meta), "g3");
        let meta = ObjectMeta {
            resource_version: Some("99".into()),
            ..Default::default()
        };
        assert_eq!(live_marker(&meta), "rv99");
    }
}
