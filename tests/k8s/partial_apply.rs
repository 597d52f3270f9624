//! Integration tier: one object the apiserver rejects does not block the others. A
//! ValidatingAdmissionPolicy denies the node DaemonSet of one cluster: every other object is
//! applied, the status names the DaemonSet and the policy's answer, and nothing is pruned until
//! the policy goes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::render::{self, Inputs, labels};
use support::operator::{ClusterOperator, OPERATOR_IMAGE, StorageOS, api_of};
use support::{TestNamespace, from_json, wait_for};

const SETTLE: Duration = Duration::from_secs(90);

fn admission_api(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

/// Deletes the policy and its binding, also when the test fails.
struct Policy {
    client: kube::Client,
    name: String,
}

impl Policy {
    /// Denies creating or updating a DaemonSet named `storageos-daemonset` in `namespace`.
    async fn deny_node_daemonset(client: &kube::Client, namespace: &str) -> Self {
        let name = format!("deny-storageos-daemonset-{}", support::suffix());
        let policy = json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["apps"], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["daemonsets"]
                }]},
                "validations": [{
                    "expression": "object.metadata.name != 'storageos-daemonset'",
                    "message": "node DaemonSets are not allowed here"
                }]
            }
        });
        let binding = json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name, "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
            }
        });
        let this = Self {
            client: client.clone(),
            name,
        };
        admission_api(client, "ValidatingAdmissionPolicy")
            .create(&PostParams::default(), &from_json(policy))
            .await
            .unwrap();
        admission_api(client, "ValidatingAdmissionPolicyBinding")
            .create(&PostParams::default(), &from_json(binding))
            .await
            .unwrap();
        this
    }

    async fn remove_binding(&self) {
        let _ = admission_api(&self.client, "ValidatingAdmissionPolicyBinding")
            .delete(&self.name, &DeleteParams::default())
            .await;
    }
}

impl Drop for Policy {
    fn drop(&mut self) {
        for kind in ["validatingadmissionpolicybinding", "validatingadmissionpolicy"] {
            let _ = std::process::Command::new(support::kubectl())
                .arg("--kubeconfig")
                .arg(support::kubeconfig_path())
                .args(["delete", "--ignore-not-found", kind, &self.name])
                .output();
        }
    }
}

/// A DaemonSet named like the node DaemonSet, for probing the policy with a dry run.
fn probe() -> DaemonSet {
    from_json(json!({
        "metadata": {"name": "storageos-daemonset"},
        "spec": {"selector": {"matchLabels": {"app": "probe"}},
                 "template": {"metadata": {"labels": {"app": "probe"}},
                              "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}}
    }))
}

#[tokio::test]
async fn one_rejected_object_leaves_the_others_applied_and_nothing_pruned() {
    let _lock = support::cluster_lock();
    support::logs();
    let ns = TestNamespace::new("partial").await;
    let client = ns.client.clone();
    support::install_crds(&client).await;

    // The policy is in force once a dry-run create is denied by it.
    let policy = Policy::deny_node_daemonset(&client, &ns.name).await;
    let dss = ns.api::<DaemonSet>();
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    wait_for("the policy to deny the node DaemonSet", SETTLE, || async {
        match dss.create(&dry_run, &probe()).await {
            Err(kube::Error::Api(s)) if s.message.contains(&policy.name) => Some(()),
            _ => None,
        }
    })
    .await;

    // A stale object of the cluster, which a clean pass would prune: applied earlier by the
    // operator (its field manager), as only objects the operator wrote are ever pruned.
    let stale = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "stale", "labels": labels::pruning("storageos", &ns.name)},
        "data": {"k": "v"}
    });
    let cms = ns.api::<ConfigMap>();
    cms.patch(
        "stale",
        &kube::api::PatchParams::apply(storageos_operator::crd::contract::OPERATOR_FIELD_MANAGER),
        &kube::api::Patch::Apply(&stale),
    )
    .await
    .unwrap();

    let secret: Secret = from_json(json!({
        "metadata": {"name": "storageos-api", "namespace": ns.name},
        "stringData": {"username": "storageos", "password": "storageos"}
    }));
    let secret = ns
        .api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let cluster: StorageOSCluster = from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
        "metadata": {"name": "storageos", "namespace": ns.name},
        "spec": {"secretRefName": "storageos-api", "secretRefNamespace": ns.name, "namespace": ns.name,
                 "kvBackend": {"address": support::KV_ADDRESS}}
    }));
    let clusters = ns.api::<StorageOSCluster>();
    let cluster = clusters.create(&PostParams::default(), &cluster).await.unwrap();
    let storageos = StorageOS::start(&client).await;
    let operator = ClusterOperator::start(&support::operator_client().await, &storageos);

    // The failure is on the status, naming the object and the apiserver's answer.
    let message = wait_for("Ready=False with ApplyFailed", SETTLE, || async {
        let c = clusters.get("storageos").await.ok()?;
        let cond = c.status?.conditions?.into_iter().find(|c| c.type_ == "Ready")?;
        (cond.status == "False" && cond.reason == "ApplyFailed").then_some(cond.message)
    })
    .await;
    assert!(
        message.contains(&format!("DaemonSet {}/storageos-daemonset: 422 Invalid: ", ns.name)),
        "{message}"
    );
    assert!(message.contains(&policy.name), "{message}");
    assert!(message.contains("node DaemonSets are not allowed here"), "{message}");
    assert!(message.starts_with("cannot apply 1 of "), "{message}");

    // Every other object was applied; nothing was pruned.
    let mut inputs = Inputs::new(cluster, OPERATOR_IMAGE);
    inputs.secret = Some(secret);
    let wanted = render::build(&inputs).unwrap();
    assert!(wanted.len() > 30, "{}", wanted.len());
    for obj in &wanted {
        let value = obj.to_value().unwrap();
        let found = api_of(&client, &value)
            .get_metadata_opt(value["metadata"]["name"].as_str().unwrap())
            .await
            .unwrap();
        if obj.describe() == format!("DaemonSet {}/storageos-daemonset", ns.name) {
            assert!(found.is_none(), "the denied DaemonSet exists");
        } else {
            assert!(found.is_some(), "{} was not applied", obj.describe());
        }
    }
    assert!(
        cms.get_opt("stale").await.unwrap().is_some(),
        "pruned in a pass with a failed apply"
    );

    // Once the policy goes, the retry applies the DaemonSet and prunes.
    policy.remove_binding().await;
    wait_for("the DaemonSet applied and the stale object pruned", SETTLE, || async {
        let ds = dss.get_opt("storageos-daemonset").await.ok()?;
        let stale = cms.get_opt("stale").await.ok()?;
        (ds.is_some() && stale.is_none()).then_some(())
    })
    .await;
    wait_for("the cluster to be Ready", SETTLE, || async {
        let c = clusters.get("storageos").await.ok()?;
        let cond = c.status?.conditions?.into_iter().find(|c| c.type_ == "Ready")?;
        (cond.status == "True").then_some(())
    })
    .await;

    clusters.delete("storageos", &DeleteParams::default()).await.unwrap();
    wait_for("the cluster to be deleted", SETTLE, || async {
        clusters.get_opt("storageos").await.ok()?.is_none().then_some(())
    })
    .await;
    operator.stop().await;
}
