//! The fencer's decisions, free of I/O: which pods opted in, which of their claims are
//! StorageOS volumes, whether those volumes are healthy, and which VolumeAttachments go.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{PersistentVolume, Pod};

use super::super::node_state::NodeState as Node;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::ResourceExt;

use crate::cached_pvc::CachedPvc;
use crate::go::parse_bool;
use crate::storageos::CSI_DRIVER as DRIVER;
use crate::storageos::kube::is_storageos_volume;
use crate::storageos::models::{Health, Volume};

/// The pod label that opts a pod into fencing.
pub const FENCED_LABEL: &str = "storageos.com/fenced";

/// The Kubernetes taint saying a node is down for good (non-graceful node shutdown): with it,
/// every pod using StorageOS volumes there is fenced, opted in or not.
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

/// Whether the Node carries the out-of-service taint (any value or effect).
pub fn out_of_service(node: &Node) -> bool {
    node.spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .any(|t| t.key == OUT_OF_SERVICE_TAINT)
}

/// Whether the pod opted in: its fenced label parses as true (Go `strconv.ParseBool`). `Err`
/// for a value that is not a boolean (the pod is then not fenced).
pub fn opted_in(pod: &Pod) -> Result<bool, String> {
    match pod.labels().get(FENCED_LABEL) {
        None => Ok(false),
        Some(v) => parse_bool(v).ok_or_else(|| {
            format!("label {FENCED_LABEL}={v:?} is not a boolean; use \"true\" to opt the pod into fencing")
        }),
    }
}

/// The names of the PVCs the pod mounts, each once.
pub fn claim_names(pod: &Pod) -> BTreeSet<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone())
        .collect()
}

/// What a PVC tells about being a StorageOS volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Not bound to a PV: nothing is attached for it.
    Unbound,
    /// Provisioned by StorageOS (its annotation says so); the volume is named after this PV.
    StorageOS { pv: String },
    /// No StorageOS provisioner annotation (pre-provisioned, or another provisioner): the PV
    /// decides.
    AskPv { pv: String },
}

/// Classifies a PVC by its binding and provisioner annotations.
pub fn classify(pvc: &CachedPvc) -> Claim {
    let Some(pv) = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .filter(|v| !v.is_empty())
    else {
        return Claim::Unbound;
    };
    if pvc.provisioned_by_storageos() {
        Claim::StorageOS { pv }
    } else {
        Claim::AskPv { pv }
    }
}

/// Whether the PV is a StorageOS CSI volume.
pub fn is_storageos_pv(pv: &PersistentVolume) -> bool {
    is_storageos_volume(pv)
}

/// Why the volume makes fencing unsafe, if it does: its master is not online, so the offline
/// node may hold the only up-to-date copy; or StorageOS still places its master on the offline
/// node `offline_id` (a report that contradicts itself is not acted on).
pub fn unhealthy(volume: &Volume, namespace: &str, offline_id: &str) -> Option<String> {
    if volume.master.health != Health::Online {
        return Some(format!(
            "StorageOS volume {namespace}/{} has its master {}",
            volume.name,
            volume.master.health.as_str()
        ));
    }
    (volume.master.node_id.is_empty() || volume.master.node_id == offline_id).then(|| {
        format!(
            "StorageOS volume {namespace}/{} has its master on the offline node (or on no known node)",
            volume.name
        )
    })
}

/// The VolumeAttachments of StorageOS volumes `pvs` on `node`. Attachments of inline volumes
/// (no PV name) and of other attachers are never chosen.
pub fn attachments<'a>(vas: &'a [VolumeAttachment], node: &str, pvs: &BTreeSet<String>) -> Vec<&'a VolumeAttachment> {
    vas.iter()
        .filter(|va| va.spec.node_name == node && va.spec.attacher == DRIVER)
        .filter(|va| {
            va.spec
                .source
                .persistent_volume_name
                .as_ref()
                .is_some_and(|pv| pvs.contains(pv))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::storageos::kube::PROVISIONER_ANNOTATIONS;
    use crate::storageos::models::Master;

    fn from<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn pod(labels: serde_json::Value) -> Pod {
        from(json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": labels},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}], "volumes": [
                {"name": "a", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "b", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "c", "persistentVolumeClaim": {"claimName": "logs"}},
                {"name": "d", "emptyDir": {}}
            ]}
        }))
    }

    #[test]
    fn the_label_opts_in_with_go_booleans() {
        assert_eq!(opted_in(&pod(json!({}))), Ok(false));
        for yes in ["true", "True", "1", "t"] {
            assert_eq!(opted_in(&pod(json!({FENCED_LABEL: yes}))), Ok(true), "{yes}");
        }
        assert_eq!(opted_in(&pod(json!({FENCED_LABEL: "false"}))), Ok(false));
        let e = opted_in(&pod(json!({FENCED_LABEL: "yes"}))).unwrap_err();
        assert!(e.contains("not a boolean"), "{e}");
        assert_eq!(
            claim_names(&pod(json!({}))).into_iter().collect::<Vec<_>>(),
            ["data", "logs"]
        );
    }

    #[test]
    fn any_out_of_service_taint_counts() {
        let node = |taints: serde_json::Value| -> Node {
            from(json!({"metadata": {"name": "n"}, "spec": {"taints": taints}}))
        };
        assert!(!out_of_service(&from(json!({"metadata": {"name": "n"}}))));
        assert!(!out_of_service(&node(
            json!([{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}])
        )));
        assert!(out_of_service(&node(
            json!([{"key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown", "effect": "NoExecute"}])
        )));
        assert!(out_of_service(&node(
            json!([{"key": OUT_OF_SERVICE_TAINT, "effect": "NoSchedule"}])
        )));
    }

    #[test]
    fn claims_are_storageos_by_annotation_else_by_their_pv() {
        let pvc = |ann: serde_json::Value, volume: Option<&str>| -> CachedPvc {
            from(json!({"metadata": {"name": "c", "annotations": ann}, "spec": {"volumeName": volume}}))
        };
        assert_eq!(classify(&pvc(json!({}), None)), Claim::Unbound);
        assert_eq!(classify(&pvc(json!({}), Some(""))), Claim::Unbound);
        assert_eq!(
            classify(&pvc(json!({PROVISIONER_ANNOTATIONS[0]: DRIVER}), Some("pv1"))),
            Claim::StorageOS { pv: "pv1".into() }
        );
        assert_eq!(
            classify(&pvc(json!({PROVISIONER_ANNOTATIONS[1]: DRIVER}), Some("pv1"))),
            Claim::StorageOS { pv: "pv1".into() }
        );
        assert_eq!(
            classify(&pvc(
                json!({PROVISIONER_ANNOTATIONS[0]: "ebs.csi.aws.com"}),
                Some("pv1")
            )),
            Claim::AskPv { pv: "pv1".into() }
        );
        let pv = |driver: &str| -> PersistentVolume {
            from(json!({"metadata": {"name": "pv1"}, "spec": {"csi": {"driver": driver, "volumeHandle": "h"}}}))
        };
        assert!(is_storageos_pv(&pv(DRIVER)));
        assert!(!is_storageos_pv(&pv("ebs.csi.aws.com")));
        assert!(!is_storageos_pv(&from(
            json!({"metadata": {"name": "pv1"}, "spec": {"hostPath": {"path": "/x"}}})
        )));
    }

    #[test]
    fn a_volume_is_unhealthy_unless_its_master_is_online() {
        let v = |health| Volume {
            name: "pv1".into(),
            master: Master {
                health,
                node_id: "elsewhere".into(),
                ..Master::default()
            },
            ..Volume::default()
        };
        assert_eq!(unhealthy(&v(Health::Online), "ns", "lost"), None);
        assert_eq!(
            unhealthy(&v(Health::Offline), "ns", "lost").as_deref(),
            Some("StorageOS volume ns/pv1 has its master offline")
        );
        assert!(unhealthy(&v(Health::Unknown), "ns", "lost").is_some());
    }

    #[test]
    fn a_master_reported_online_on_the_offline_node_is_not_fenced() {
        let on = |node: &str| Volume {
            name: "pv1".into(),
            master: Master {
                health: Health::Online,
                node_id: node.into(),
                ..Master::default()
            },
            ..Volume::default()
        };
        let why = unhealthy(&on("lost"), "ns", "lost").unwrap();
        assert!(why.contains("master on the offline node"), "{why}");
        assert!(unhealthy(&on(""), "ns", "lost").is_some());
        assert_eq!(unhealthy(&on("other"), "ns", "lost"), None);
    }

    #[test]
    fn only_storageos_attachments_of_the_pods_volumes_on_the_node_go() {
        let va = |name: &str, node: &str, attacher: &str, source: serde_json::Value| -> VolumeAttachment {
            from(
                json!({"metadata": {"name": name}, "spec": {"attacher": attacher, "nodeName": node, "source": source}}),
            )
        };
        let vas = vec![
            va(
                "keep-inline",
                "n1",
                DRIVER,
                json!({"inlineVolumeSpec": {"csi": {"driver": DRIVER, "volumeHandle": "h"}}}),
            ),
            va("keep-other-node", "n2", DRIVER, json!({"persistentVolumeName": "pv1"})),
            va(
                "keep-other-attacher",
                "n1",
                "ebs.csi.aws.com",
                json!({"persistentVolumeName": "pv1"}),
            ),
            va("keep-other-pv", "n1", DRIVER, json!({"persistentVolumeName": "pv9"})),
            va("go", "n1", DRIVER, json!({"persistentVolumeName": "pv1"})),
        ];
        let pvs: BTreeSet<String> = ["pv1".to_string()].into();
        let chosen: Vec<String> = attachments(&vas, "n1", &pvs).iter().map(|v| v.name_any()).collect();
        assert_eq!(chosen, ["go"]);
    }
}
