//! Cache views: types that read only the fields a controller needs from a Kubernetes object,
//! for watch caches of many objects.
//!
//! A cache of k8s-openapi objects keeps each object's whole struct, however little of it is
//! set: a `Pod` is 2,176 bytes before its first string, a `Node` 1,496, and every watch event
//! parses the full object (a StorageOS node pod's containers, env and volumes) before anything
//! can be dropped. At 5,000 nodes those structs were most of the operator's heap
//! (docs/benchmarks.md). A view is deserialized from the same JSON, skipping every field it
//! does not name, and is a [`kube::Resource`] of the same kind ([`view_of!`]), so `Api`,
//! `watcher` and reflector stores take it as they take the full type.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Deserialize;

/// The metadata a view keeps: identity, labels, owners and the deletion mark. Annotations and
/// `managedFields` (most of a small object's metadata) are skipped while parsing.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    deletion_timestamp: Option<Time>,
}

impl From<Meta> for ObjectMeta {
    fn from(m: Meta) -> Self {
        ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            labels: m.labels,
            owner_references: m.owner_references,
            deletion_timestamp: m.deletion_timestamp,
            ..ObjectMeta::default()
        }
    }
}

/// `#[serde(deserialize_with = "view::meta")]` for a view's `metadata`: [`Meta`] as `ObjectMeta`.
pub fn meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    Meta::deserialize(d).map(ObjectMeta::from)
}

/// A condition's type and status (the rest of it is skipped).
#[derive(Deserialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
}

/// The status of the condition `type_` among `conditions`, if reported.
pub fn condition_status(conditions: Option<Vec<Condition>>, type_: &str) -> Option<String> {
    conditions?.into_iter().find(|c| c.type_ == type_).map(|c| c.status)
}

/// Makes `$view` (a struct with `metadata: ObjectMeta`) a [`kube::Resource`] of the same kind,
/// group, version, plural and scope as `$of`.
#[macro_export]
macro_rules! view_of {
    ($view:ty, $of:ty) => {
        impl ::kube::Resource for $view {
            type DynamicType = ();
            type Scope = <$of as ::kube::Resource>::Scope;

            fn kind(_: &()) -> ::std::borrow::Cow<'_, str> {
                <$of as ::kube::Resource>::kind(&())
            }
            fn group(_: &()) -> ::std::borrow::Cow<'_, str> {
                <$of as ::kube::Resource>::group(&())
            }
            fn version(_: &()) -> ::std::borrow::Cow<'_, str> {
                <$of as ::kube::Resource>::version(&())
            }
            fn plural(_: &()) -> ::std::borrow::Cow<'_, str> {
                <$of as ::kube::Resource>::plural(&())
            }
            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::Resource;
    use serde_json::json;

    #[derive(Deserialize, Clone, Debug)]
    struct PodName {
        #[serde(deserialize_with = "meta")]
        metadata: ObjectMeta,
    }
    crate::view_of!(PodName, Pod);

    #[test]
    fn a_view_is_the_same_resource_and_keeps_identity_labels_and_owners_only() {
        let v: PodName = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                         "labels": {"a": "b"}, "annotations": {"big": "x".repeat(4096)},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "nu"}],
                         "managedFields": [{"manager": "kubelet"}]},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .unwrap();
        assert_eq!(PodName::url_path(&(), Some("ns")), Pod::url_path(&(), Some("ns")));
        assert_eq!(PodName::kind(&()), "Pod");
        let m = v.meta();
        assert_eq!(
            (
                m.name.as_deref(),
                m.namespace.as_deref(),
                m.uid.as_deref(),
                m.resource_version.as_deref()
            ),
            (Some("p"), Some("ns"), Some("u"), Some("7"))
        );
        assert_eq!(m.labels.as_ref().unwrap()["a"], "b");
        assert_eq!(m.owner_references.as_ref().unwrap()[0].uid, "nu");
        assert!(m.annotations.is_none() && m.managed_fields.is_none());
    }

    #[test]
    fn a_condition_status_is_found_by_type() {
        let cs: Vec<Condition> = serde_json::from_value(json!([
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
        ]))
        .unwrap();
        assert_eq!(condition_status(Some(cs), "Ready").as_deref(), Some("False"));
        assert_eq!(condition_status(None, "Ready"), None);
    }
}
