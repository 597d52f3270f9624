//! How Kubernetes objects show that they belong to StorageOS: the CSI driver name on volumes
//! and storage classes, the provisioner annotations on claims and the CSI node annotation on
//! nodes. The operator, the upgrade and the api-manager all decide by these.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::PersistentVolume;

/// The CSI driver name of StorageOS volumes (and of the StorageOS CSIDriver object); also the
/// provisioner of StorageOS storage classes.
pub const CSI_DRIVER: &str = "csi.storageos.com";
/// Node annotation the CSI node plugin writes: JSON `{driver: node ID}`.
pub const CSI_NODE_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";
/// PVC annotations naming the provisioner (GA first, then the beta one older clusters set).
pub const PROVISIONER_ANNOTATIONS: [&str; 2] = [
    "volume.kubernetes.io/storage-provisioner",
    "volume.beta.kubernetes.io/storage-provisioner",
];

/// Whether `pv` is a StorageOS volume (provisioned by its CSI driver).
pub fn is_storageos_volume(pv: &PersistentVolume) -> bool {
    pv.spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .is_some_and(|c| c.driver == CSI_DRIVER)
}

/// (namespace, name) of the claims bound to StorageOS volumes.
pub fn storageos_claims(pvs: &[PersistentVolume]) -> BTreeSet<(String, String)> {
    pvs.iter()
        .filter(|pv| is_storageos_volume(pv))
        .filter_map(|pv| pv.spec.as_ref()?.claim_ref.as_ref())
        .filter_map(|c| Some((c.namespace.clone()?, c.name.clone()?)))
        .collect()
}

/// Whether the node runs the StorageOS CSI node plugin (its `nodeid` annotation names the
/// driver). A malformed annotation counts as no.
pub fn runs_storageos(annotations: &BTreeMap<String, String>) -> bool {
    annotations
        .get(CSI_NODE_ANNOTATION)
        .and_then(|v| serde_json::from_str::<HashMap<String, serde_json::Value>>(v).ok())
        .is_some_and(|drivers| drivers.contains_key(CSI_DRIVER))
}

/// Whether the PVC is (being) provisioned by StorageOS.
pub fn provisioned_by_storageos(annotations: &BTreeMap<String, String>) -> bool {
    PROVISIONER_ANNOTATIONS
        .iter()
        .any(|a| annotations.get(*a).map(String::as_str) == Some(CSI_DRIVER))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn storageos_nodes_and_pvcs_are_recognised_by_annotation() {
        let a = |k: &str, v: &str| labels(&[(k, v)]);
        assert!(runs_storageos(&a(CSI_NODE_ANNOTATION, r#"{"csi.storageos.com":"n1"}"#)));
        assert!(!runs_storageos(&a(CSI_NODE_ANNOTATION, r#"{"other.csi":"n1"}"#)));
        assert!(!runs_storageos(&a(CSI_NODE_ANNOTATION, "csi.storageos.com")));
        assert!(!runs_storageos(&BTreeMap::new()));
        for ann in PROVISIONER_ANNOTATIONS {
            assert!(provisioned_by_storageos(&a(ann, "csi.storageos.com")));
            assert!(!provisioned_by_storageos(&a(ann, "ebs.csi.aws.com")));
        }
    }
}
