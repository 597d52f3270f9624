//! Which Kubernetes objects a StorageOS volume belongs to, and how the api-manager's own
//! objects name their owners and their writer: what the mirror, the drain gate, attach recovery
//! and volume health share, so none of them imports another.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use crate::storageos::models::{LABEL_CSI_PVC_NAME, LABEL_CSI_PVC_NAMESPACE, Volume};

/// The field manager of the api-manager's writes (mirrors, drain guards).
pub use crate::crd::contract::API_MANAGER_FIELD_MANAGER as FIELD_MANAGER;

/// The PVC a volume was provisioned for (`None` for a volume CSI did not make).
pub fn pvc_of(v: &Volume) -> Option<(String, String)> {
    let ns = v.labels.get(LABEL_CSI_PVC_NAMESPACE).filter(|s| !s.is_empty())?;
    let name = v.labels.get(LABEL_CSI_PVC_NAME).filter(|s| !s.is_empty())?;
    Some((ns.to_string(), name.to_string()))
}

/// [`pvc_of`] of a volume StorageOS keeps in its namespace `storageos_namespace` (None when not
/// known): None when the labels name another Kubernetes namespace. The labels are writable
/// through the StorageOS API; a volume is only ever tied to a PVC where StorageOS keeps it.
pub fn pvc_of_in(v: &Volume, storageos_namespace: Option<&str>) -> Option<(String, String)> {
    pvc_of(v).filter(|(ns, _)| storageos_namespace == Some(ns.as_str()))
}

/// An owner reference to `owner` (no `blockOwnerDeletion`: that would need rights on the
/// owner's finalizers, and the api-manager's objects must never hold up a Node or PVC delete).
pub fn owner_of<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.name_any(),
        uid: owner.uid().filter(|u| !u.is_empty())?,
        ..OwnerReference::default()
    })
}
