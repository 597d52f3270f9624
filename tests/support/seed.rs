//! Simulator seeding the tests share (also used by the API tier, which has no plane).

use storageos_operator::sim::VolumeSeed;

/// A volume as CSI provisions it for PVC `pvc` of Kubernetes namespace `ns` (the StorageOS
/// namespace of the same name), named after its PV `pv`, its master on node `master`. Extend it
/// with `VolumeSeed { replicas: 1, ..volume(..) }`.
pub fn volume(ns: &str, pv: &str, pvc: &str, master: &str) -> VolumeSeed {
    VolumeSeed {
        namespace: ns.into(),
        name: pv.into(),
        pvc_name: pvc.into(),
        pvc_namespace: ns.into(),
        master_node: master.into(),
        ..VolumeSeed::default()
    }
}
