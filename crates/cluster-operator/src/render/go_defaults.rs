//! Image values the Go operator v2.4.2 wrote back into `spec.images` as its own defaults on its
//! first reconcile. Nobody chose them, so they count as unset and this operator's defaults apply
//! (a migrated CR would otherwise run the Go api-manager and a kube-scheduler too old for this
//! Kubernetes). Any other value is the user's and is honoured. See docs/adoption.md.

use crate::crd::ContainerImages;

/// The Go kube-scheduler default was this repository with the cluster's Kubernetes version at
/// install as tag, so any tag matches.
const GO_SCHEDULER_REPOSITORY: &str = "k8s.gcr.io/kube-scheduler:";

/// Where the Go operator's CSI sidecars came from; no release lands there any more.
const GO_SIDECAR_REGISTRY: &str = "quay.io/k8scsi/";

/// Whether a pod template still runs only the Go operator's sidecars (an adopted cluster whose
/// written-back `quay.io/k8scsi` images are kept as pinned). Such a template keeps the Go shape
/// exactly, without the `kubectl.kubernetes.io/default-container` annotation this operator adds
/// (storageos/cluster-operator#353), so a take-over changes nothing in it; the annotation comes
/// with the first change that rolls the template anyway (removing those pins).
pub fn kept_in_go_shape(sidecars: &[&str]) -> bool {
    sidecars.iter().all(|image| image.starts_with(GO_SIDECAR_REGISTRY))
}

type Field = fn(&mut ContainerImages) -> &mut Option<String>;

/// (JSON field, how to reach it, the Go operator's default for it).
///
/// The four `quay.io/k8scsi` sidecars of the Go operator are not here: this operator's defaults
/// are the same releases from `registry.k8s.io/sig-storage`, and counting the written-back values
/// as unset would change the node DaemonSet's and the CSI helper's pod templates on adoption
/// (restarting the CSI helper) for no gain. An adopted cluster keeps running them, as pinned
/// values, until its `spec.images` entries are removed (docs/adoption.md).
const GO_DEFAULTS: [(&str, Field, &str); 5] = [
    ("nodeContainer", |i| &mut i.node_container, "storageos/node:v2.4.2"),
    ("initContainer", |i| &mut i.init_container, "storageos/init:v2.1.0"),
    (
        "apiManagerContainer",
        |i| &mut i.api_manager_container,
        "storageos/api-manager:v1.1.2",
    ),
    (
        "csiClusterDriverRegistrarContainer",
        |i| &mut i.csi_cluster_driver_registrar_container,
        "quay.io/k8scsi/csi-cluster-driver-registrar:v1.0.1",
    ),
    (
        "csiExternalProvisionerContainer",
        |i| &mut i.csi_external_provisioner_container,
        "storageos/csi-provisioner:v2.1.1-patched",
    ),
];

/// An image field of the CR that holds the Go operator's default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoDefault {
    /// JSON name under `spec.images`.
    pub field: &'static str,
    /// The value in the CR.
    pub value: String,
}

fn is_go_scheduler(value: &str) -> bool {
    value.trim().starts_with(GO_SCHEDULER_REPOSITORY)
}

/// Every image field of `images` that holds the Go operator's written-back default.
pub fn go_defaults_in(images: &ContainerImages) -> Vec<GoDefault> {
    let mut images = images.clone();
    let mut found = Vec::new();
    for (field, get, default) in GO_DEFAULTS {
        if let Some(v) = get(&mut images).as_deref()
            && v.trim() == default
        {
            found.push(GoDefault {
                field,
                value: v.to_string(),
            });
        }
    }
    if let Some(v) = images.kube_scheduler_container.as_deref()
        && is_go_scheduler(v)
    {
        found.push(GoDefault {
            field: "kubeSchedulerContainer",
            value: v.to_string(),
        });
    }
    found
}

/// `images` with every Go default cleared (so the defaults of this operator apply).
pub fn without_go_defaults(images: &ContainerImages) -> ContainerImages {
    let mut out = images.clone();
    for (_, get, default) in GO_DEFAULTS {
        let slot = get(&mut out);
        if slot.as_deref().is_some_and(|v| v.trim() == default) {
            *slot = None;
        }
    }
    if out.kube_scheduler_container.as_deref().is_some_and(is_go_scheduler) {
        out.kube_scheduler_container = None;
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_template_keeps_the_go_shape_only_while_all_its_sidecars_are_go_era() {
        let go = "quay.io/k8scsi/csi-attacher:v3.1.0";
        let ours = "registry.k8s.io/sig-storage/csi-attacher:v3.1.0";
        assert!(kept_in_go_shape(&[go, "quay.io/k8scsi/csi-resizer:v1.1.0"]));
        assert!(
            !kept_in_go_shape(&[go, ours]),
            "one sidecar moved: the template rolls anyway"
        );
        assert!(!kept_in_go_shape(&[ours, ours]));
    }

    fn go_era() -> ContainerImages {
        ContainerImages {
            node_container: Some("storageos/node:v2.4.2".into()),
            init_container: Some("storageos/init:v2.1.0".into()),
            api_manager_container: Some("storageos/api-manager:v1.1.2".into()),
            csi_node_driver_registrar_container: Some("quay.io/k8scsi/csi-node-driver-registrar:v2.1.0".into()),
            csi_cluster_driver_registrar_container: Some("quay.io/k8scsi/csi-cluster-driver-registrar:v1.0.1".into()),
            csi_external_provisioner_container: Some("storageos/csi-provisioner:v2.1.1-patched".into()),
            csi_external_attacher_container: Some("quay.io/k8scsi/csi-attacher:v3.1.0".into()),
            csi_external_resizer_container: Some("quay.io/k8scsi/csi-resizer:v1.1.0".into()),
            csi_liveness_probe_container: Some("quay.io/k8scsi/livenessprobe:v2.2.0".into()),
            kube_scheduler_container: Some("k8s.gcr.io/kube-scheduler:v1.21.0".into()),
            nfs_container: Some("storageos/nfs:1.0.0".into()),
            ..Default::default()
        }
    }

    #[test]
    fn every_written_back_default_counts_as_unset() {
        let found = go_defaults_in(&go_era());
        assert_eq!(found.len(), 6, "{found:?}");
        assert!(found.iter().any(|g| g.field == "apiManagerContainer"));
        assert!(
            found
                .iter()
                .any(|g| g.field == "kubeSchedulerContainer" && g.value == "k8s.gcr.io/kube-scheduler:v1.21.0")
        );
        // The Go sidecars stay: kept, they change no pod template on adoption.
        let cleared = without_go_defaults(&go_era());
        assert_eq!(
            cleared,
            ContainerImages {
                csi_node_driver_registrar_container: Some("quay.io/k8scsi/csi-node-driver-registrar:v2.1.0".into()),
                csi_external_attacher_container: Some("quay.io/k8scsi/csi-attacher:v3.1.0".into()),
                csi_external_resizer_container: Some("quay.io/k8scsi/csi-resizer:v1.1.0".into()),
                csi_liveness_probe_container: Some("quay.io/k8scsi/livenessprobe:v2.2.0".into()),
                nfs_container: Some("storageos/nfs:1.0.0".into()),
                ..Default::default()
            }
        );
    }

    #[test]
    fn any_other_value_is_the_users_and_kept() {
        let mine = ContainerImages {
            api_manager_container: Some("storageos/api-manager:v1.2.12".into()),
            kube_scheduler_container: Some("registry.k8s.io/kube-scheduler:v1.23.4".into()),
            node_container: Some("mirror.local/storageos/node:v2.4.2".into()),
            ..Default::default()
        };
        assert_eq!(go_defaults_in(&mine), []);
        assert_eq!(without_go_defaults(&mine), mine);
    }
}
