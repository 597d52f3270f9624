//! The build step of a Job: the DaemonSet that runs the task on every selected node (pure).
//!
//! Each Job's pods carry a label unique to the Job and its DaemonSet selects on that label
//! only, so two Jobs in one namespace never see each other's pods (the Go operator selected on
//! the shared `daemonset-job=true`).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, HostPathVolumeSource, NodeAffinity, NodeSelector, PodSpec, PodTemplateSpec,
    SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::ResourceExt;

use super::Error;
use super::hostpath::HostMount;
use crate::crd::Job;
use crate::render::labels::{MANAGED_BY, label_value};

/// Label on a Job's DaemonSet and pods naming the Job; the DaemonSet selects on it alone.
pub const JOB_LABEL: &str = "storageos.com/job";
/// The label put on task pods when `spec.labelSelector` is not set (the Go default).
pub const DEFAULT_LABEL_SELECTOR: &str = "daemonset-job=true";
/// Name of the task container, as in the Go operator.
pub const CONTAINER: &str = "job-container";
/// Suffix of the DaemonSet name after the Job name.
pub const DAEMONSET_SUFFIX: &str = "-daemonset-job";
const VOLUME: &str = "target";

/// Name of the DaemonSet of the Job named `job`.
pub fn daemonset_name(job: &str) -> String {
    format!("{job}{DAEMONSET_SUFFIX}")
}

/// The Job a DaemonSet named `daemonset` belongs to, if it is named like one of ours.
pub fn job_of_daemonset(daemonset: &str) -> Option<&str> {
    daemonset.strip_suffix(DAEMONSET_SUFFIX).filter(|j| !j.is_empty())
}

/// The selector of the Job's pods (also the DaemonSet selector, which is immutable).
pub fn selector(job: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(JOB_LABEL.to_string(), label_value(job))])
}

/// Parses `spec.labelSelector`: `key=value` pairs separated by commas (as the Go operator's
/// `labels.ConvertSelectorToLabelsMap`), default `daemonset-job=true`.
pub fn parse_label_selector(spec: Option<&str>) -> Result<BTreeMap<String, String>, Error> {
    let raw = spec
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or(DEFAULT_LABEL_SELECTOR);
    let mut labels = BTreeMap::new();
    for pair in raw.split(',') {
        let (k, v) = pair
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim()))
            .ok_or_else(|| Error::InvalidLabelSelector(raw.to_string()))?;
        if k.is_empty() || v.contains('=') || k.contains('!') {
            return Err(Error::InvalidLabelSelector(raw.to_string()));
        }
        labels.insert(k.to_string(), v.to_string());
    }
    Ok(labels)
}

/// The labels of the Job's pods: the `labelSelector` label(s) plus the Job's own label (which
/// wins over a user label with the same key).
pub fn pod_labels(job: &Job) -> Result<BTreeMap<String, String>, Error> {
    let mut labels = parse_label_selector(job.spec.label_selector.as_deref())?;
    labels.extend(selector(&job.name_any()));
    Ok(labels)
}

/// The DaemonSet that runs the Job's task on every selected node. The owner reference is added
/// by the apply step. The `hostPath` was checked against the allow-list before (see
/// [`super::hostpath`]); the pod is hardened: the host path must be an existing directory (no
/// file, socket or symlink surprises), no ServiceAccount token, no privilege escalation and no
/// capabilities. The task still runs as the image's user (root for the cleanup image), which
/// can remove root-owned files such as `/var/lib/storageos` without any capability.
pub fn build(job: &Job) -> Result<DaemonSet, Error> {
    build_mounting(
        job,
        &HostMount {
            volume: job.spec.host_path.clone(),
            sub_path: None,
        },
    )
}

/// [`build`] with the host path mounted as `mount` says (from the allow-list: a path under a
/// subtree entry is the entry's volume plus a `subPath`, which the kubelet never resolves
/// outside the volume, so a planted symlink is not followed out of it). Mount propagation is
/// `None`: nothing the task mounts reaches the host, and nothing mounted later on the host
/// appears in the task.
pub fn build_mounting(job: &Job, mount: &HostMount) -> Result<DaemonSet, Error> {
    let name = job.name_any();
    let spec = &job.spec;
    let pod_labels = pod_labels(job)?;
    let mut ds_labels = selector(&name);
    ds_labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    let affinity = spec
        .node_selector_terms
        .clone()
        .filter(|terms| !terms.is_empty())
        .map(|terms| Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: terms,
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
    Ok(DaemonSet {
        metadata: ObjectMeta {
            name: Some(daemonset_name(&name)),
            namespace: job.namespace(),
            labels: Some(ds_labels),
            ..Default::default()
        },
        spec: Some(DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(selector(&name)),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: CONTAINER.into(),
                        image: Some(spec.image.clone()),
                        args: Some(spec.args.clone()),
                        volume_mounts: Some(vec![VolumeMount {
                            name: VOLUME.into(),
                            mount_path: spec.mount_path.clone(),
                            sub_path: mount.sub_path.clone(),
                            mount_propagation: Some("None".into()),
                            ..Default::default()
                        }]),
                        security_context: Some(SecurityContext {
                            allow_privilege_escalation: Some(false),
                            capabilities: Some(Capabilities {
                                drop: Some(vec!["ALL".into()]),
                                add: None,
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    automount_service_account_token: Some(false),
                    volumes: Some(vec![Volume {
                        name: VOLUME.into(),
                        host_path: Some(HostPathVolumeSource {
                            path: mount.volume.clone(),
                            type_: Some("Directory".into()),
                        }),
                        ..Default::default()
                    }]),
                    affinity,
                    tolerations: spec.tolerations.clone().filter(|t| !t.is_empty()),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    })
}

/// The first of `pods` whose container a kubelet refused to start because the Job's `subPath`
/// could not be mounted inside the allowed directory (it resolves outside it, through a
/// symlink planted under a subtree entry): the pod's node and the kubelet's message.
pub fn refused_subpath(pods: &[k8s_openapi::api::core::v1::Pod]) -> Option<(String, String)> {
    pods.iter().find_map(|p| {
        let node = p.spec.as_ref()?.node_name.clone().unwrap_or_default();
        let statuses = p.status.as_ref()?.container_statuses.as_ref()?;
        statuses.iter().find_map(|c| {
            let waiting = c.state.as_ref()?.waiting.as_ref()?;
            let message = waiting.message.clone().unwrap_or_default();
            (waiting.reason.as_deref() == Some("CreateContainerConfigError")
                && message.to_ascii_lowercase().contains("subpath"))
            .then(|| (node.clone(), message))
        })
    })
}

/// Whether a live DaemonSet selects exactly the Job's own label. One that does not (made by the
/// Go operator, whose selector was the shared label) cannot be changed in place: selectors are
/// immutable, so it has to be replaced.
pub fn has_own_selector(live: &DaemonSet, job: &str) -> bool {
    let Some(spec) = &live.spec else { return false };
    let s = &spec.selector;
    s.match_expressions.as_deref().unwrap_or_default().is_empty() && s.match_labels.as_ref() == Some(&selector(job))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_kubelet_refusing_the_subpath_is_found_with_its_node_and_message() {
        let pod = |reason: &str, message: &str| -> k8s_openapi::api::core::v1::Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "p"},
                "spec": {"nodeName": "n1", "containers": [{"name": "job"}]},
                "status": {"containerStatuses": [{"name": "job", "image": "i", "imageID": "", "ready": false,
                    "restartCount": 0, "state": {"waiting": {"reason": reason, "message": message}}}]}
            }))
            .unwrap()
        };
        let refused = pod(
            "CreateContainerConfigError",
            "failed to prepare subPath for volumeMount \"target\" of container \"job\"",
        );
        let (node, message) = refused_subpath(&[pod("ContainerCreating", ""), refused]).unwrap();
        assert_eq!(node, "n1");
        assert!(message.contains("subPath"));
        assert_eq!(
            refused_subpath(&[pod("CreateContainerConfigError", "secret \"x\" not found")]),
            None
        );
        assert_eq!(refused_subpath(&[pod("ImagePullBackOff", "subPath")]), None);
    }

    fn job(name: &str, extra: serde_json::Value) -> Job {
        let mut spec = json!({
            "image": "darkowlzz/cleanup:v0.0.2",
            "args": ["/var/lib/storageos"],
            "mountPath": "/var/lib",
            "hostPath": "/var/lib",
            "completionWord": "done"
        });
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        serde_json::from_value(json!({
            "apiVersion": "storageos.com/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ns1"},
            "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn the_seed_cleanup_job_becomes_a_daemonset_with_its_own_selector() {
        let j = job(
            "cleanup-job",
            json!({
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "node-role.kubernetes.io/worker", "operator": "In", "values": ["true"]}]}],
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]
            }),
        );
        let ds = serde_json::to_value(build(&j).unwrap()).unwrap();
        assert_eq!(ds["apiVersion"], "apps/v1");
        assert_eq!(ds["kind"], "DaemonSet");
        assert_eq!(ds["metadata"]["name"], "cleanup-job-daemonset-job");
        assert_eq!(ds["metadata"]["namespace"], "ns1");
        assert_eq!(
            ds["spec"]["selector"],
            json!({"matchLabels": {"storageos.com/job": "cleanup-job"}})
        );
        let tpl = &ds["spec"]["template"];
        assert_eq!(
            tpl["metadata"]["labels"],
            json!({"daemonset-job": "true", "storageos.com/job": "cleanup-job"})
        );
        let pod = &tpl["spec"];
        assert_eq!(
            pod["containers"],
            json!([{
                "name": "job-container", "image": "darkowlzz/cleanup:v0.0.2",
                "args": ["/var/lib/storageos"],
                "volumeMounts": [{"name": "target", "mountPath": "/var/lib", "mountPropagation": "None"}],
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}
            }])
        );
        assert_eq!(
            pod["volumes"],
            json!([{"name": "target", "hostPath": {"path": "/var/lib", "type": "Directory"}}])
        );
        assert_eq!(pod["automountServiceAccountToken"], false);
        assert_eq!(
            pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
                [0]["key"],
            "node-role.kubernetes.io/worker"
        );
        assert_eq!(
            pod["tolerations"],
            json!([{"key": "k", "operator": "Exists", "effect": "NoSchedule"}])
        );
        // Not privileged, no default tolerations.
        assert!(pod["containers"][0]["securityContext"].get("privileged").is_none());
        assert!(has_own_selector(&build(&j).unwrap(), "cleanup-job"));
    }

    #[test]
    fn no_node_selection_means_no_affinity_and_no_tolerations() {
        let j = job("all", json!({"nodeSelectorTerms": [], "tolerations": []}));
        let ds = serde_json::to_value(build(&j).unwrap()).unwrap();
        assert!(ds["spec"]["template"]["spec"].get("affinity").is_none());
        assert!(ds["spec"]["template"]["spec"].get("tolerations").is_none());
    }

    #[test]
    fn two_jobs_select_disjoint_pods_even_with_the_same_label_selector() {
        let a = pod_labels(&job("a", json!({}))).unwrap();
        let b = pod_labels(&job("b", json!({}))).unwrap();
        let sel_a = selector("a");
        let matches = |sel: &BTreeMap<String, String>, labels: &BTreeMap<String, String>| {
            sel.iter().all(|(k, v)| labels.get(k) == Some(v))
        };
        assert!(matches(&sel_a, &a));
        assert!(!matches(&sel_a, &b));
        assert_eq!(a.get("daemonset-job"), b.get("daemonset-job"));
    }

    #[test]
    fn label_selector_is_parsed_like_the_go_operator() {
        assert_eq!(
            parse_label_selector(None).unwrap(),
            BTreeMap::from([("daemonset-job".into(), "true".into())])
        );
        assert_eq!(
            parse_label_selector(Some(" app=clean, tier = ops ")).unwrap(),
            BTreeMap::from([("app".into(), "clean".into()), ("tier".into(), "ops".into())])
        );
        for bad in ["justakey", "=v", "a=b,c", "a!=b", "a==b"] {
            assert!(
                matches!(parse_label_selector(Some(bad)), Err(Error::InvalidLabelSelector(_))),
                "{bad} accepted"
            );
        }
        // The user's label cannot take over the Job's own label.
        let j = job("mine", json!({"labelSelector": "storageos.com/job=other"}));
        assert_eq!(pod_labels(&j).unwrap()[JOB_LABEL], "mine");
    }

    #[test]
    fn daemonset_names_map_back_to_their_job() {
        assert_eq!(job_of_daemonset(&daemonset_name("cleanup")), Some("cleanup"));
        assert_eq!(job_of_daemonset("storageos-daemonset"), None);
        assert_eq!(job_of_daemonset("-daemonset-job"), None);
    }

    #[test]
    fn a_go_operator_daemonset_is_recognised_as_foreign() {
        let j = job("cleanup-job", json!({}));
        let mut ds = build(&j).unwrap();
        ds.spec.as_mut().unwrap().selector.match_labels = Some(BTreeMap::from([
            ("daemonset-job".into(), "true".into()),
            ("job".into(), "cleanup-job".into()),
        ]));
        assert!(!has_own_selector(&ds, "cleanup-job"));
    }

    #[test]
    fn a_path_under_a_subtree_entry_is_mounted_as_a_sub_path_of_the_entry() {
        let j = job(
            "cleanup-job",
            json!({"hostPath": "/var/lib/storageos/x", "mountPath": "/data"}),
        );
        let allow: super::super::hostpath::AllowList = "/var/lib/storageos/*".parse().unwrap();
        let ds = build_mounting(&j, &allow.mount("/var/lib/storageos/x").unwrap()).unwrap();
        let pod = ds.spec.unwrap().template.spec.unwrap();
        let volume = &pod.volumes.unwrap()[0];
        assert_eq!(volume.host_path.as_ref().unwrap().path, "/var/lib/storageos");
        assert_eq!(volume.host_path.as_ref().unwrap().type_.as_deref(), Some("Directory"));
        let m = &pod.containers[0].volume_mounts.as_ref().unwrap()[0];
        assert_eq!(m.sub_path.as_deref(), Some("x"));
        assert_eq!(m.mount_path, "/data");
        assert_eq!(m.mount_propagation.as_deref(), Some("None"));
    }
}
