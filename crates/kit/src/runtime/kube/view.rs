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
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

/// The annotations a view keeps, by key; every other annotation is skipped unparsed.
pub trait Annotations {
    const KEEP: &'static [&'static str];
}

/// No annotation at all.
pub struct NoAnnotations;

impl Annotations for NoAnnotations {
    const KEEP: &'static [&'static str] = &[];
}

/// The metadata a view keeps: identity, creation and deletion times, labels, owners, and the
/// annotations `A` names. `managedFields` and the other annotations (most of a small object's
/// metadata) are skipped while parsing.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", default, bound = "")]
pub struct Meta<A: Annotations = NoAnnotations> {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    creation_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    #[serde(deserialize_with = "annotations::<A, _>")]
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    deletion_timestamp: Option<Time>,
    #[serde(skip)]
    keep: PhantomData<A>,
}

impl<A: Annotations> Default for Meta<A> {
    fn default() -> Self {
        Self {
            name: None,
            namespace: None,
            uid: None,
            resource_version: None,
            creation_timestamp: None,
            labels: None,
            annotations: None,
            owner_references: None,
            deletion_timestamp: None,
            keep: PhantomData,
        }
    }
}

impl<A: Annotations> From<Meta<A>> for ObjectMeta {
    fn from(m: Meta<A>) -> Self {
        ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            creation_timestamp: m.creation_timestamp,
            labels: m.labels,
            annotations: m.annotations,
            owner_references: m.owner_references,
            deletion_timestamp: m.deletion_timestamp,
            ..ObjectMeta::default()
        }
    }
}

/// `#[serde(deserialize_with = "view::meta")]` for a view's `metadata`: [`Meta`] as `ObjectMeta`.
pub fn meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    Meta::<NoAnnotations>::deserialize(d).map(ObjectMeta::from)
}

/// `#[serde(deserialize_with = "view::meta_keeping::<A, _>")]`: [`meta`], keeping the
/// annotations `A` names too.
pub fn meta_keeping<'de, A: Annotations, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    Meta::<A>::deserialize(d).map(ObjectMeta::from)
}

/// `#[serde(deserialize_with = "view::annotations::<A, _>")]`: an annotations map holding only
/// the keys `A` names (`None` when it has none of them; an empty map is not kept either, as
/// each map costs a B-tree node of ~0.5 KB); the other values are skipped unparsed.
pub fn annotations<'de, A: Annotations, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Visit<A>(PhantomData<A>);
    impl<'de, A: Annotations> serde::de::Visitor<'de> for Visit<A> {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of annotations, or null")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
            let mut kept = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if A::KEEP.contains(&key.as_str()) {
                    kept.insert(key, map.next_value()?);
                } else {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok((!kept.is_empty()).then_some(kept))
        }
    }
    d.deserialize_option(Visit::<A>(PhantomData))
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

    struct Owner;
    impl Annotations for Owner {
        const KEEP: &'static [&'static str] = &["owner", "absent"];
    }

    #[derive(Deserialize, Clone, Debug)]
    struct PodOwner {
        #[serde(deserialize_with = "meta_keeping::<Owner, _>")]
        metadata: ObjectMeta,
    }

    #[test]
    fn a_view_keeps_the_annotations_it_names_only_and_no_empty_map() {
        let parse = |annotations: serde_json::Value| -> ObjectMeta {
            let v: PodOwner = serde_json::from_value(json!({
                "metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": annotations}
            }))
            .unwrap();
            v.metadata
        };
        let m = parse(json!({"owner": "me", "big": "x".repeat(4096), "nested": "{\"a\": 1}"}));
        assert_eq!(
            m.annotations,
            Some(BTreeMap::from([("owner".to_string(), "me".to_string())]))
        );
        assert_eq!(m.creation_timestamp.unwrap().0.to_string(), "2026-01-01T00:00:00Z");
        assert_eq!(parse(json!({"other": "x"})).annotations, None);
        assert_eq!(parse(json!(null)).annotations, None);
        assert_eq!(parse(json!({})).annotations, None);
        // A malformed value of a kept key is an error, not a silent drop.
        let bad: Result<PodOwner, _> = serde_json::from_value(json!({"metadata": {"annotations": {"owner": 1}}}));
        assert!(bad.is_err());
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
