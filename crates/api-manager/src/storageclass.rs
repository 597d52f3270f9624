//! Which StorageClass a PVC asks for, resolved as Kubernetes does; free of I/O, so the PVC
//! webhook (which looks classes up) and pvc-label (which lists them) resolve alike.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;

/// PVC annotation that takes precedence over `spec.storageClassName`, as in Kubernetes.
pub const LEGACY_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";
/// PVC annotation in which the PVC webhook records the UID of the StorageClass the volume was
/// made from (the PVC label sync checks it).
pub const STORAGECLASS_ANNOTATION: &str = "storageos.com/storageclass";
/// StorageClass annotation marking the default class.
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
/// The beta annotation marking the default class, still honoured by Kubernetes.
pub const BETA_DEFAULT_CLASS_ANNOTATION: &str = "storageclass.beta.kubernetes.io/is-default-class";

/// The class a PVC names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassRef<'a> {
    /// An empty name: no class (and no default).
    NoClass,
    /// The class of this name.
    Named(&'a str),
    /// No name at all: the default class.
    Default,
}

/// What [`class_ref`] reads of a PVC, as admitted (a whole `PersistentVolumeClaim`) or as cached
/// (`super::cached_pvc::CachedPvc`).
pub trait PvcFields: ResourceExt {
    /// `spec.storageClassName`.
    fn storage_class_name(&self) -> Option<&String>;
    /// The legacy class annotation ([`LEGACY_CLASS_ANNOTATION`]).
    fn legacy_class(&self) -> Option<&String>;
}

impl PvcFields for PersistentVolumeClaim {
    fn storage_class_name(&self) -> Option<&String> {
        self.spec.as_ref()?.storage_class_name.as_ref()
    }
    fn legacy_class(&self) -> Option<&String> {
        self.annotations().get(LEGACY_CLASS_ANNOTATION)
    }
}

/// The class `pvc` names: the legacy annotation if present, else `spec.storageClassName`; an
/// empty name means "no class", none means the default class.
pub fn class_ref(pvc: &impl PvcFields) -> ClassRef<'_> {
    let named = pvc.legacy_class().or_else(|| pvc.storage_class_name());
    match named.map(String::as_str) {
        Some("") => ClassRef::NoClass,
        Some(name) => ClassRef::Named(name),
        None => ClassRef::Default,
    }
}

/// Whether `class` is marked default (GA or beta annotation).
pub fn is_default(class: &StorageClass) -> bool {
    let annotations = class.annotations();
    [DEFAULT_CLASS_ANNOTATION, BETA_DEFAULT_CLASS_ANNOTATION]
        .iter()
        .any(|a| annotations.get(*a).map(String::as_str) == Some("true"))
}

/// The default class among `classes`: the newest, if several are marked default.
pub fn pick_default(classes: &[StorageClass]) -> Option<&StorageClass> {
    classes
        .iter()
        .filter(|c| is_default(c))
        .max_by_key(|c| c.creation_timestamp())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pvc(annotation: Option<&str>, spec: Option<&str>) -> PersistentVolumeClaim {
        let mut v = json!({"metadata": {"name": "p"}, "spec": {}});
        if let Some(a) = annotation {
            v["metadata"]["annotations"] = json!({LEGACY_CLASS_ANNOTATION: a});
        }
        if let Some(s) = spec {
            v["spec"]["storageClassName"] = json!(s);
        }
        serde_json::from_value(v).unwrap()
    }

    fn sc(name: &str, created: &str, annotation: Option<&str>) -> StorageClass {
        let mut v = json!({"metadata": {"name": name, "creationTimestamp": created}, "provisioner": "x"});
        if let Some(a) = annotation {
            v["metadata"]["annotations"] = json!({a: "true"});
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_legacy_annotation_wins_and_empty_means_no_class() {
        assert_eq!(class_ref(&pvc(Some("a"), Some("b"))), ClassRef::Named("a"));
        assert_eq!(class_ref(&pvc(None, Some("b"))), ClassRef::Named("b"));
        assert_eq!(class_ref(&pvc(Some(""), Some("b"))), ClassRef::NoClass);
        assert_eq!(class_ref(&pvc(None, Some(""))), ClassRef::NoClass);
        assert_eq!(class_ref(&pvc(None, None)), ClassRef::Default);
    }

    #[test]
    fn the_newest_default_wins_beta_annotation_included() {
        let classes = [
            sc("old", "2020-01-01T00:00:00Z", Some(DEFAULT_CLASS_ANNOTATION)),
            sc("new", "2021-01-01T00:00:00Z", Some(BETA_DEFAULT_CLASS_ANNOTATION)),
            sc("newest", "2022-01-01T00:00:00Z", None),
        ];
        assert_eq!(pick_default(&classes).unwrap().name_any(), "new");
        assert!(pick_default(&classes[2..]).is_none());
    }
}
