//! `Job` (`jobs.storageos.com`): run a task once on every selected node, such as a cleanup.

use k8s_openapi::api::core::v1::{NodeSelectorTerm, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::validation;

/// A task that runs one pod on every selected node and completes when each has printed the
/// completion word.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "storageos.com",
    version = "v1",
    kind = "Job",
    plural = "jobs",
    singular = "job",
    namespaced,
    status = "JobStatus",
    printcolumn = r#"{"name":"Completed","type":"boolean","jsonPath":".status.completed","description":"Every node finished the task."}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.progress","description":"Nodes finished out of nodes selected."}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "A task run once on every selected node (for example removing /var/lib/storageos before a fresh install)."
)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    /// Container image of the task.
    #[schemars(extend("x-kubernetes-validations" = validation::non_empty("image")))]
    pub image: String,

    /// Arguments passed to the task container.
    pub args: Vec<String>,

    /// Path inside the container where hostPath is mounted.
    #[schemars(extend("x-kubernetes-validations" = validation::non_empty("mountPath")))]
    pub mount_path: String,

    /// Host directory mounted into the task container: `/var/lib/storageos` (a path under it only
    /// when the operator's flag `--job-host-paths` allows it; the task empties the directory, it
    /// cannot remove it).
    #[schemars(extend("x-kubernetes-validations" = validation::job_host_path(), "maxLength" = 4096))]
    pub host_path: String,

    /// Word the task prints to its log when it has finished on a node.
    #[schemars(extend("x-kubernetes-validations" = validation::non_empty("completionWord")))]
    pub completion_word: String,

    /// Label (`key=value`) put on the task pods. Each Job's pods are also labelled with the Job's
    /// own name, so Jobs never see each other's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "daemonset-job=true"))]
    pub label_selector: Option<String>,

    /// Nodes to run on. Terms are ORed; expressions inside a term are ANDed. Empty means all nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector_terms: Option<Vec<NodeSelectorTerm>>,

    /// Tolerations for the task pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = validation::tolerations(), "maxItems" = validation::MAX_TOLERATIONS))]
    pub tolerations: Option<Vec<Toleration>>,
}

/// Observed state of a Job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    /// True once every selected node has finished the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<bool>,
    /// Nodes that have finished the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_completed: Option<i32>,
    /// Nodes selected to run the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_total: Option<i32>,
    /// `nodesCompleted/nodesTotal`, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// Ready and Progressing, each with a reason and message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// The kit's status writer keeps the conditions' transition times.
impl operator_kit::runtime::kube::status::WithConditions for JobStatus {
    fn conditions_mut(&mut self) -> &mut Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>> {
        &mut self.conditions
    }
}
