//! Pre-pulling the new node image on every StorageOS node before anything is stopped, so the
//! offline window is a restart, not a download.
//!
//! Mechanism: a DaemonSet `<upgrade>-image-puller` owned by the upgrade, placed exactly like the
//! node DaemonSet (its affinity, node selector, tolerations and pull secrets are copied), whose
//! init container uses the new image with a no-op command. The kubelet pulls the image through
//! whatever container runtime the node has: no Docker socket, no privileges, no host mount.
//! A node has the image once the init container was created (its status is running or
//! terminated, or carries an image ID), whether or not the no-op command exists in the image;
//! the pod then idles on the pause image, which every node already holds as its sandbox image.
//!
//! Why not a Job CR (`jobs.storageos.com`) as the Go operator did: a Job completes when its
//! task prints a word, so the task image must be one that pulls and reports, which meant
//! `docker pull` through `/var/run/docker.sock` (broken on containerd nodes). Running the new
//! image itself is the only runtime-independent pull, and the node image prints no such word.
//! Completion uses the Job controller's rule all the same ([`is_complete`]): every pod the
//! DaemonSet wants exists, is scheduled, and has the image.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, Pod, PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile,
    SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::{Resource, ResourceExt};

use crate::crd::StorageOSUpgrade;
use crate::job::status::{PodView, is_complete};
use crate::render::labels::MANAGED_BY;
use crate::render::labels::label_value;

/// Label naming the upgrade on its puller DaemonSet and pods.
pub const UPGRADE_LABEL: &str = "storageos.com/upgrade";
/// The container that idles once the image is pulled: the sandbox image, present on every node.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// Name of the init container that runs the new image.
pub const PULL_CONTAINER: &str = "pull";
const NOBODY: i64 = 65534;

/// Name of the puller DaemonSet of the upgrade named `upgrade`.
pub fn daemonset_name(upgrade: &str) -> String {
    format!("{upgrade}-image-puller")
}

/// The selector of the puller's pods.
pub fn selector(upgrade: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(UPGRADE_LABEL.to_string(), label_value(upgrade))])
}

fn small_resources() -> ResourceRequirements {
    let q = |cpu: &str, mem: &str| {
        BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.into())),
            ("memory".to_string(), Quantity(mem.into())),
        ])
    };
    ResourceRequirements {
        requests: Some(q("1m", "8Mi")),
        limits: Some(q("100m", "64Mi")),
        ..Default::default()
    }
}

fn least_privilege() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The puller DaemonSet of `upgrade`, placed like the node pods of `node_pod` (the node
/// DaemonSet's pod template spec). The owner reference is added by the apply step.
pub fn build(upgrade: &StorageOSUpgrade, node_pod: &PodSpec) -> DaemonSet {
    let name = upgrade.name_any();
    let labels = selector(&name);
    let mut ds_labels = labels.clone();
    ds_labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    let container = |name: &str, image: &str, command: Option<Vec<String>>| Container {
        name: name.into(),
        image: Some(image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        command,
        resources: Some(small_resources()),
        security_context: Some(least_privilege()),
        ..Default::default()
    };
    DaemonSet {
        metadata: ObjectMeta {
            name: Some(daemonset_name(&name)),
            namespace: upgrade.namespace(),
            labels: Some(ds_labels),
            ..Default::default()
        },
        spec: Some(DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    init_containers: Some(vec![container(
                        PULL_CONTAINER,
                        &upgrade.spec.new_image,
                        Some(vec!["sh".into(), "-c".into(), "exit 0".into()]),
                    )]),
                    containers: vec![container("wait", PAUSE_IMAGE, None)],
                    affinity: node_pod.affinity.clone(),
                    node_selector: node_pod.node_selector.clone(),
                    tolerations: node_pod.tolerations.clone(),
                    image_pull_secrets: node_pod.image_pull_secrets.clone(),
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    termination_grace_period_seconds: Some(0),
                    // Passes the "restricted" Pod Security Standard of the upgrade's namespace.
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(NOBODY),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Whether `pod`'s node holds the new image: the pull container was created at least once.
pub fn pulled(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == PULL_CONTAINER))
        .is_some_and(|c| {
            let ran = |s: Option<&k8s_openapi::api::core::v1::ContainerState>| {
                s.is_some_and(|s| s.running.is_some() || s.terminated.is_some())
            };
            !c.image_id.is_empty() || ran(c.state.as_ref()) || ran(c.last_state.as_ref())
        })
}

/// The puller as the upgrade sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PullerView {
    /// The DaemonSet exists.
    pub exists: bool,
    /// Pods it wants, once its controller has seen its current spec.
    pub desired: Option<i32>,
    /// Its live pods.
    pub pods: Vec<PodView>,
}

impl PullerView {
    /// Every node the DaemonSet wants holds the image.
    pub fn complete(&self) -> bool {
        is_complete(self.desired, &self.pods)
    }

    /// `n of m nodes`, for messages.
    pub fn progress(&self) -> String {
        let done = self.pods.iter().filter(|p| p.scheduled && p.finished).count();
        format!("{done} of {} nodes", self.desired.unwrap_or(0))
    }
}

/// The view of the puller `ds` (None when absent) and its `pods` (pure).
pub fn view(ds: Option<&DaemonSet>, pods: &[Pod]) -> PullerView {
    let Some(ds) = ds else { return PullerView::default() };
    let desired = ds.status.as_ref().and_then(|s| {
        let current = s.observed_generation.unwrap_or(0) >= ds.meta().generation.unwrap_or(0);
        current.then_some(s.desired_number_scheduled)
    });
    PullerView {
        exists: true,
        desired,
        pods: pods
            .iter()
            .filter(|p| p.meta().deletion_timestamp.is_none())
            .map(|p| PodView {
                scheduled: p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some(),
                finished: pulled(p),
            })
            .collect(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [], "nodeName": "n1"},
            "status": status}),
        )
        .unwrap()
    }

    #[test]
    fn pulled_once_the_pull_container_was_created() {
        let status = |state: serde_json::Value, image_id: &str| {
            json!({"initContainerStatuses": [{"name": "pull", "image": "x", "imageID": image_id, "ready": false,
                   "restartCount": 0, "state": state}]})
        };
        assert!(pulled(&pod(status(json!({"terminated": {"exitCode": 0}}), ""))));
        // The no-op command is missing from the image: it still was pulled.
        assert!(pulled(&pod(status(
            json!({"terminated": {"exitCode": 128, "reason": "StartError"}}),
            ""
        ))));
        assert!(pulled(&pod(status(json!({"running": {}}), ""))));
        assert!(pulled(&pod(status(
            json!({"waiting": {"reason": "CrashLoopBackOff"}}),
            "sha256:1"
        ))));
        assert!(!pulled(&pod(status(
            json!({"waiting": {"reason": "ErrImagePull"}}),
            ""
        ))));
        assert!(!pulled(&pod(status(
            json!({"waiting": {"reason": "PodInitializing"}}),
            ""
        ))));
        assert!(!pulled(&pod(json!({}))));
    }

    #[test]
    fn complete_only_when_every_wanted_node_pulled() {
        let ds = |generation: i64, observed: i64, desired: i32| -> DaemonSet {
            serde_json::from_value(json!({"metadata": {"name": "u-image-puller", "generation": generation},
                "spec": {"selector": {}, "template": {}},
                "status": {"observedGeneration": observed, "desiredNumberScheduled": desired,
                           "currentNumberScheduled": 0, "numberMisscheduled": 0, "numberReady": 0}}))
            .unwrap()
        };
        let done = pod(
            json!({"initContainerStatuses": [{"name": "pull", "image": "x", "imageID": "",
            "ready": true, "restartCount": 0, "state": {"terminated": {"exitCode": 0}}}]}),
        );
        let waiting = pod(json!({}));
        assert!(view(Some(&ds(1, 1, 2)), &[done.clone(), done.clone()]).complete());
        assert!(!view(Some(&ds(1, 1, 3)), &[done.clone(), done.clone()]).complete());
        assert!(!view(Some(&ds(1, 1, 2)), &[done.clone(), waiting]).complete());
        // The DaemonSet controller has not seen the current spec: its count means nothing yet.
        assert!(!view(Some(&ds(2, 1, 1)), std::slice::from_ref(&done)).complete());
        assert_eq!(view(None, &[]), PullerView::default());
        assert_eq!(view(Some(&ds(1, 1, 2)), &[done]).progress(), "1 of 2 nodes");
    }

    #[test]
    fn the_puller_runs_the_new_image_where_the_node_pods_run() {
        let up: StorageOSUpgrade = serde_json::from_value(json!({"apiVersion": "storageos.com/v1",
            "kind": "StorageOSUpgrade", "metadata": {"name": "u", "namespace": "ns"},
            "spec": {"newImage": "storageos/node:v2.10.0"}}))
        .unwrap();
        let node: PodSpec = serde_json::from_value(json!({"containers": [],
            "tolerations": [{"operator": "Exists"}], "nodeSelector": {"disk": "ssd"},
            "imagePullSecrets": [{"name": "regcred"}]}))
        .unwrap();
        let ds = build(&up, &node);
        assert_eq!(ds.metadata.name.as_deref(), Some("u-image-puller"));
        let spec = ds.spec.unwrap();
        assert_eq!(spec.selector.match_labels.unwrap()[UPGRADE_LABEL], "u");
        let pod = spec.template.spec.unwrap();
        let init = &pod.init_containers.unwrap()[0];
        assert_eq!(init.image.as_deref(), Some("storageos/node:v2.10.0"));
        assert_eq!(pod.containers[0].image.as_deref(), Some(PAUSE_IMAGE));
        assert_eq!(pod.tolerations, node.tolerations);
        assert_eq!(pod.node_selector, node.node_selector);
        assert_eq!(pod.image_pull_secrets, node.image_pull_secrets);
        assert_eq!(pod.volumes, None, "no host access");
    }
}
