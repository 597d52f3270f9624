//! The PVC as the api-manager caches it: one watch cache of every PVC, shared by the webhooks,
//! the PVC label sync, the shared-volume controller, the mirror, the fencer and the StorageOS
//! poll ([`super::controllers::Context::pvcs`]).
//!
//! [`CachedPvc`] is a view (`runtime::kube::view`): parsed from the PVC's JSON with the same field
//! paths as the k8s-openapi `PersistentVolumeClaim` for what it keeps, and nothing else. A cached
//! `PersistentVolumeClaim` is 1,008 bytes before its first string, however little of it is set,
//! and its annotations map (the binder's and the provisioner's, ~0.5 KB a map) came with it: at
//! 10,000 PVCs the cache was ~28 MB of the api-manager's heap (docs/benchmarks.md).

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::storageclass::{LEGACY_CLASS_ANNOTATION, PvcFields, STORAGECLASS_ANNOTATION};
use crate::runtime::kube::view;
use crate::storageos::LabelSet as Labels;
use crate::storageos::kube::{CSI_DRIVER, PROVISIONER_ANNOTATIONS, provisioned_by_storageos};

/// A PVC as its cache keeps it: name, namespace, UID, version, creation and deletion times,
/// labels (the label sync copies them to the volume), its class and bound PV, and what its
/// annotations say about who provisions it and which class it was made from.
///
/// Neither map is kept in `metadata` (`labels` and `annotations` are always `None` there): a
/// map is a B-tree node of ~0.5 KB however few entries it holds, so the labels are kept compact
/// ([`CachedPvc::labels`]) and what the annotations say as fields ([`Annotated`]).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(from = "Parsed")]
pub struct CachedPvc {
    pub metadata: ObjectMeta,
    pub spec: Option<CachedPvcSpec>,
    /// The PVC's labels (`ResourceExt::labels()` is empty on a `CachedPvc`).
    pub labels: Labels,
    pub annotated: Annotated,
}
operator_kit::view_of!(CachedPvc, PersistentVolumeClaim);

/// The part of a PVC's spec kept: the class it asks for and the PV it is bound to.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CachedPvcSpec {
    pub storage_class_name: Option<String>,
    pub volume_name: Option<String>,
}

/// What a PVC's annotations say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Annotated {
    /// A provisioner annotation names the StorageOS CSI driver.
    pub by_storageos: bool,
    /// A provisioner annotation names another provisioner.
    pub by_another: bool,
    /// The legacy class annotation ([`LEGACY_CLASS_ANNOTATION`]).
    pub legacy_class: Option<String>,
    /// The UID of the class the volume was made from ([`STORAGECLASS_ANNOTATION`]).
    pub class_uid: Option<String>,
}

/// The annotations parsed (into a map dropped at once); the others are skipped unparsed.
struct Kept;

impl view::Annotations for Kept {
    const KEEP: &'static [&'static str] = &[
        PROVISIONER_ANNOTATIONS[0],
        PROVISIONER_ANNOTATIONS[1],
        LEGACY_CLASS_ANNOTATION,
        STORAGECLASS_ANNOTATION,
    ];
}

#[derive(Deserialize)]
struct Parsed {
    #[serde(default, deserialize_with = "view::meta_keeping::<Kept, _>")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<CachedPvcSpec>,
}

impl From<Parsed> for CachedPvc {
    fn from(mut p: Parsed) -> Self {
        let mut annotations = p.metadata.annotations.take().unwrap_or_default();
        let by_storageos = provisioned_by_storageos(&annotations);
        let by_another = PROVISIONER_ANNOTATIONS
            .iter()
            .any(|a| annotations.get(*a).is_some_and(|p| p != CSI_DRIVER));
        CachedPvc {
            labels: p.metadata.labels.take().into(),
            metadata: p.metadata,
            spec: p.spec,
            annotated: Annotated {
                by_storageos,
                by_another,
                legacy_class: annotations.remove(LEGACY_CLASS_ANNOTATION),
                class_uid: annotations.remove(STORAGECLASS_ANNOTATION),
            },
        }
    }
}

impl PvcFields for CachedPvc {
    fn storage_class_name(&self) -> Option<&String> {
        self.spec.as_ref()?.storage_class_name.as_ref()
    }
    fn legacy_class(&self) -> Option<&String> {
        self.annotated.legacy_class.as_ref()
    }
}

impl CachedPvc {
    /// The PV it is bound to (`spec.volumeName`), if any.
    pub fn bound_pv(&self) -> Option<&str> {
        self.spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .filter(|n| !n.is_empty())
    }

    /// Whether StorageOS provisions it (or is provisioning it), by its provisioner annotations.
    pub fn provisioned_by_storageos(&self) -> bool {
        self.annotated.by_storageos
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use serde_json::json;

    fn bound() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": "app", "uid": "u1", "resourceVersion": "9",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"tier": "gold"},
                "annotations": {
                    "pv.kubernetes.io/bind-completed": "yes",
                    "pv.kubernetes.io/bound-by-controller": "yes",
                    "volume.kubernetes.io/storage-provisioner": "csi.storageos.com",
                    "volume.beta.kubernetes.io/storage-provisioner": "csi.storageos.com",
                    STORAGECLASS_ANNOTATION: "class-uid",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "finalizers": ["kubernetes.io/pvc-protection"],
                "deletionTimestamp": "2026-11-24T00:00:00Z",
                "managedFields": [{"manager": "kube-controller-manager"}]},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}},
                "storageClassName": "fast", "volumeMode": "Filesystem", "volumeName": "pvc-1"},
            "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "5Gi"}}
        })
    }

    #[test]
    fn a_cached_pvc_keeps_what_its_readers_read_only() {
        let pvc: CachedPvc = serde_json::from_value(bound()).unwrap();
        assert_eq!(
            (pvc.name_any(), pvc.namespace(), pvc.uid(), pvc.resource_version()),
            ("data".into(), Some("app".into()), Some("u1".into()), Some("9".into()))
        );
        assert!(pvc.creation_timestamp().is_some() && pvc.metadata.deletion_timestamp.is_some());
        assert_eq!(pvc.labels.get("tier"), Some("gold"));
        assert!(pvc.metadata.labels.is_none(), "kept compact, beside the metadata");
        assert!(pvc.metadata.annotations.is_none(), "what they say is kept, not the map");
        assert_eq!(
            pvc.annotated,
            Annotated {
                by_storageos: true,
                by_another: false,
                legacy_class: None,
                class_uid: Some("class-uid".into())
            }
        );
        assert!(pvc.provisioned_by_storageos());
        assert!(pvc.metadata.finalizers.is_none() && pvc.metadata.managed_fields.is_none());
        assert_eq!(pvc.storage_class_name().map(String::as_str), Some("fast"));
        assert_eq!(pvc.bound_pv(), Some("pvc-1"));
    }

    #[test]
    fn what_the_annotations_say_is_kept_for_each_provisioner_and_class() {
        let parse = |annotations: serde_json::Value| -> Annotated {
            serde_json::from_value::<CachedPvc>(json!({"metadata": {"name": "p", "annotations": annotations}}))
                .unwrap()
                .annotated
        };
        let other = parse(json!({PROVISIONER_ANNOTATIONS[0]: "ebs.csi.aws.com", LEGACY_CLASS_ANNOTATION: "gp3"}));
        assert!(!other.by_storageos && other.by_another);
        assert_eq!(other.legacy_class.as_deref(), Some("gp3"));
        // The beta annotation alone (older clusters) is enough.
        let beta = parse(json!({PROVISIONER_ANNOTATIONS[1]: CSI_DRIVER}));
        assert!(beta.by_storageos && !beta.by_another);
        // Two annotations that disagree say both.
        let both = parse(json!({PROVISIONER_ANNOTATIONS[0]: CSI_DRIVER, PROVISIONER_ANNOTATIONS[1]: "other"}));
        assert!(both.by_storageos && both.by_another);
        assert_eq!(parse(json!(null)), Annotated::default());
    }

    #[test]
    fn an_unbound_pvc_with_nothing_set_parses() {
        let pvc: CachedPvc =
            serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "n"}, "spec": {"volumeName": ""}}))
                .unwrap();
        assert_eq!(pvc.bound_pv(), None);
        assert!(pvc.metadata.annotations.is_none());
        let bare: CachedPvc = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        assert!(bare.spec.is_none() && bare.bound_pv().is_none());
    }

    #[test]
    fn a_cached_pvc_is_under_half_the_whole_struct() {
        assert!(std::mem::size_of::<CachedPvc>() * 2 < std::mem::size_of::<PersistentVolumeClaim>());
    }
}
