//! Taking over an installation of the Go operator v2.4.2 in place. Everything it created that
//! this operator also renders is adopted by the apply itself (same names, labels and selectors);
//! this module handles the rest: Go-only objects are removed, and image fields holding the Go
//! operator's written-back defaults are reported. The facts are in docs/adoption.md.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Client, Resource, ResourceExt};

use super::context::Context;
use super::error::{Error, Step};
use crate::cluster::ownership::FIELD_MANAGER;
use crate::crd::StorageOSCluster;
use crate::reasons;
use crate::render::labels::CLUSTER_LABEL;
use crate::runtime::kube::conditions;

/// Condition naming the image fields whose Go defaults were replaced.
pub const GO_DEFAULTS_CONDITION: &str = reasons::GO_DEFAULT_IMAGES_REPLACED.name();

/// Cluster-scoped objects only the Go operator created: the NFS provisioner's role (the
/// NFSServer CRD is not shipped any more) and its binding to the node ServiceAccount.
const LEFTOVER_NAME: &str = "storageos:nfs-provisioner";

/// Whether `labels` are the Go operator's common labels for `cluster` (`app=storageos` and the
/// instance, which a CR label may override) without this operator's own labels: an object the
/// Go operator created for this cluster and that was never applied by us.
pub fn made_by_go_for(labels: &BTreeMap<String, String>, cluster: &StorageOSCluster) -> bool {
    let instance = cluster
        .labels()
        .get("app.kubernetes.io/instance")
        .cloned()
        .unwrap_or_else(|| cluster.name_any());
    labels.get("app").is_some_and(|v| v == "storageos")
        && labels.get("app.kubernetes.io/instance") == Some(&instance)
        && !labels.contains_key(CLUSTER_LABEL)
}

async fn remove<K>(client: &Client, cluster: &StorageOSCluster) -> Result<Option<String>, kube::Error>
where
    K: Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    let Some(found) = api.get_metadata_opt(LEFTOVER_NAME).await? else {
        return Ok(None);
    };
    if !made_by_go_for(found.labels(), cluster) {
        return Ok(None);
    }
    match api.delete(LEFTOVER_NAME, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e),
    }
    Ok(Some(format!("{} {LEFTOVER_NAME}", K::kind(&()))))
}

/// The Go scheduler's legacy Policy, a key of the scheduler ConfigMap that this operator never
/// writes (its configuration is `config.yaml`). Server-side apply keeps a key another manager
/// owns, so it is removed explicitly.
const GO_SCHEDULER_POLICY: (&str, &str) = ("storageos-scheduler-policy", "policy.cfg");

async fn remove_go_scheduler_policy(client: &Client, namespace: &str) -> Result<Option<String>, kube::Error> {
    let (name, key) = GO_SCHEDULER_POLICY;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let has_key = api
        .get_opt(name)
        .await?
        .and_then(|cm| cm.data)
        .is_some_and(|d| d.contains_key(key));
    if !has_key {
        return Ok(None);
    }
    let patch = serde_json::json!({"data": {key: null}});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch(name, &params, &Patch::Merge(&patch)).await?;
    Ok(Some(format!("key {key} of ConfigMap {namespace}/{name}")))
}

/// The pod-scheduler webhook that Go operators before v2.4.0 served themselves (port 5720): a
/// MutatingWebhookConfiguration and a Service of this name, the Service in the Go operator's
/// namespace. The Go operator's start-up migration deleted both; an install that began on such
/// an operator and was never migrated still has them, and the configuration can still intercept
/// pod creates (with nothing answering).
pub const GO_SCHEDULER_WEBHOOK: &str = "storageos-scheduler-webhook";

/// The namespace of the Service the legacy scheduler webhook configuration `mwc` calls, when it
/// has that shape: every webhook calls the Service `storageos-scheduler-webhook`, in one
/// namespace. Anything else of that name is someone else's.
fn legacy_scheduler_webhook_namespace(mwc: &MutatingWebhookConfiguration) -> Option<String> {
    let webhooks = mwc.webhooks.as_deref().filter(|w| !w.is_empty())?;
    let mut namespaces = webhooks.iter().map(|w| {
        let service = w.client_config.service.as_ref()?;
        (service.name == GO_SCHEDULER_WEBHOOK).then(|| service.namespace.clone())
    });
    let first = namespaces.next()??;
    namespaces.all(|n| n.as_ref() == Some(&first)).then_some(first)
}

/// Whether the operator starting in `operator_namespace` removes the legacy scheduler webhook
/// configuration `mwc` before any cluster exists, as the Go operator's start-up migration did:
/// one with no webhooks (as the Go operator's own e2e suite creates it), or of the Go shape
/// calling the Service in the operator's namespace. One that calls anything else is someone
/// else's.
pub fn legacy_scheduler_webhook_at_start(mwc: &MutatingWebhookConfiguration, operator_namespace: &str) -> bool {
    mwc.webhooks.as_ref().is_none_or(Vec::is_empty)
        || legacy_scheduler_webhook_namespace(mwc).as_deref() == Some(operator_namespace)
}

/// Removes the legacy scheduler webhook (configuration first, so no pod create is sent to a
/// Service that is gone), as the Go operator's migration did, but only in that shape.
async fn remove_legacy_scheduler_webhook(client: &Client) -> Result<Vec<String>, kube::Error> {
    let mwcs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let Some(mwc) = mwcs.get_opt(GO_SCHEDULER_WEBHOOK).await? else {
        return Ok(Vec::new());
    };
    let Some(namespace) = legacy_scheduler_webhook_namespace(&mwc) else {
        return Ok(Vec::new());
    };
    let mut removed = Vec::new();
    match mwcs.delete(GO_SCHEDULER_WEBHOOK, &DeleteParams::background()).await {
        Ok(_) => removed.push(format!("MutatingWebhookConfiguration {GO_SCHEDULER_WEBHOOK}")),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e),
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    match services.delete(GO_SCHEDULER_WEBHOOK, &DeleteParams::background()).await {
        Ok(_) => removed.push(format!("Service {namespace}/{GO_SCHEDULER_WEBHOOK}")),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e),
    }
    Ok(removed)
}

/// Removes what only the Go operator used, once per cluster generation in this process (and
/// again after a pass that failed).
pub async fn remove_go_leftovers_once(cluster: &StorageOSCluster, ctx: &Context, target_ns: &str) -> Result<(), Error> {
    let seen = (cluster.uid().unwrap_or_default(), cluster.meta().generation);
    if ctx.go_leftovers_checked(&seen) {
        return Ok(());
    }
    let leftovers = remove_go_leftovers(&ctx.client, cluster, target_ns)
        .await
        .step("remove the Go operator's leftovers")?;
    for removed in leftovers {
        tracing::info!(cluster = %cluster.name_any(), object = %removed, "removed the Go operator's leftover");
        ctx.event(
            cluster,
            EventType::Normal,
            reasons::ADOPTED,
            format!("removed {removed}, which only the Go operator used"),
        )
        .await;
    }
    ctx.set_go_leftovers_checked(seen);
    Ok(())
}

/// Deletes the Go-only objects of `cluster` (binding first, so no binding points at a missing
/// role), the Go scheduler Policy in `namespace`, the cluster's target namespace, and the
/// pre-v2.4 scheduler webhook. Returns what it removed. Call only after every desired object
/// applied.
pub async fn remove_go_leftovers(
    client: &Client,
    cluster: &StorageOSCluster,
    namespace: &str,
) -> Result<Vec<String>, kube::Error> {
    let mut removed = Vec::new();
    removed.extend(remove::<ClusterRoleBinding>(client, cluster).await?);
    removed.extend(remove::<ClusterRole>(client, cluster).await?);
    removed.extend(remove_go_scheduler_policy(client, namespace).await?);
    removed.extend(remove_legacy_scheduler_webhook(client).await?);
    Ok(removed)
}

/// Sets (or clears) the condition naming image fields that held Go defaults. Returns the message
/// when it is news, i.e. when an event is due: once per change, not on every reconcile.
pub fn note_replaced_images(
    conds: &mut Vec<Condition>,
    message: Option<String>,
    generation: Option<i64>,
    now: &Time,
) -> Option<String> {
    match message {
        Some(message) => {
            let news = !conds
                .iter()
                .any(|c| c.type_ == GO_DEFAULTS_CONDITION && c.message == message);
            conditions::set(
                conds,
                GO_DEFAULTS_CONDITION,
                true,
                reasons::GO_DEFAULTS,
                &message,
                generation,
                now,
            );
            news.then_some(message)
        }
        None => {
            conds.retain(|c| c.type_ != GO_DEFAULTS_CONDITION);
            None
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_legacy_scheduler_webhook_of_the_go_shape_is_taken_for_one() {
        let mwc = |services: serde_json::Value| -> MutatingWebhookConfiguration {
            let webhooks: Vec<serde_json::Value> = services
                .as_array()
                .unwrap()
                .iter()
                .map(|svc| {
                    json!({"name": "x.storageos.com", "clientConfig": {"service": svc},
                    "sideEffects": "None", "admissionReviewVersions": ["v1"]})
                })
                .collect();
            serde_json::from_value(json!({"metadata": {"name": GO_SCHEDULER_WEBHOOK}, "webhooks": webhooks})).unwrap()
        };
        let go = json!({"name": "storageos-scheduler-webhook", "namespace": "storageos-operator"});
        assert_eq!(
            legacy_scheduler_webhook_namespace(&mwc(json!([go.clone(), go.clone()]))).as_deref(),
            Some("storageos-operator")
        );
        let other = json!({"name": "my-webhook", "namespace": "storageos-operator"});
        assert_eq!(
            legacy_scheduler_webhook_namespace(&mwc(json!([go.clone(), other]))),
            None
        );
        let elsewhere = json!({"name": "storageos-scheduler-webhook", "namespace": "other"});
        assert_eq!(legacy_scheduler_webhook_namespace(&mwc(json!([go, elsewhere]))), None);
        assert_eq!(legacy_scheduler_webhook_namespace(&mwc(json!([]))), None);
        let by_url: MutatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": GO_SCHEDULER_WEBHOOK},
            "webhooks": [{"name": "x", "clientConfig": {"url": "https://example.com/"},
                "sideEffects": "None", "admissionReviewVersions": ["v1"]}]}))
        .unwrap();
        assert_eq!(legacy_scheduler_webhook_namespace(&by_url), None);

        // At start, before any cluster: an empty one, or one calling the operator's namespace.
        let go = json!({"name": "storageos-scheduler-webhook", "namespace": "storageos-operator"});
        assert!(legacy_scheduler_webhook_at_start(&mwc(json!([])), "storageos-operator"));
        let unset: MutatingWebhookConfiguration =
            serde_json::from_value(json!({"metadata": {"name": GO_SCHEDULER_WEBHOOK}})).unwrap();
        assert!(legacy_scheduler_webhook_at_start(&unset, "storageos-operator"));
        assert!(legacy_scheduler_webhook_at_start(
            &mwc(json!([go.clone()])),
            "storageos-operator"
        ));
        assert!(!legacy_scheduler_webhook_at_start(&mwc(json!([go])), "elsewhere"));
        let other = json!({"name": "my-webhook", "namespace": "storageos-operator"});
        assert!(!legacy_scheduler_webhook_at_start(
            &mwc(json!([other])),
            "storageos-operator"
        ));
        assert!(!legacy_scheduler_webhook_at_start(&by_url, "storageos-operator"));
    }

    fn cluster(labels: serde_json::Value) -> StorageOSCluster {
        serde_json::from_value(json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": "storageos", "namespace": "default", "labels": labels},
            "spec": {"secretRefName": "s", "secretRefNamespace": "default"}
        }))
        .unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn only_the_go_operators_objects_for_this_cluster_are_leftovers() {
        let c = cluster(json!({}));
        let go = labels(&[("app", "storageos"), ("app.kubernetes.io/instance", "storageos")]);
        assert!(made_by_go_for(&go, &c));
        let mut ours = go.clone();
        ours.insert(CLUSTER_LABEL.into(), "storageos".into());
        assert!(!made_by_go_for(&ours, &c), "an object we applied is ours");
        let other = labels(&[("app", "storageos"), ("app.kubernetes.io/instance", "other")]);
        assert!(!made_by_go_for(&other, &c), "another cluster's");
        assert!(!made_by_go_for(&BTreeMap::new(), &c), "a user's own role");
        let c = cluster(json!({"app.kubernetes.io/instance": "custom"}));
        let go = labels(&[("app", "storageos"), ("app.kubernetes.io/instance", "custom")]);
        assert!(made_by_go_for(&go, &c), "the CR's label overrode the instance");
    }

    #[test]
    fn the_replaced_images_condition_is_news_once() {
        let now = Time(k8s_openapi::jiff::Timestamp::from_second(1).unwrap());
        let mut conds = Vec::new();
        let msg = Some("spec.images.apiManagerContainer".to_string());
        assert_eq!(note_replaced_images(&mut conds, msg.clone(), Some(1), &now), msg);
        assert_eq!(note_replaced_images(&mut conds, msg.clone(), Some(2), &now), None);
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].status, "True");
        assert_eq!(note_replaced_images(&mut conds, None, Some(3), &now), None);
        assert!(conds.is_empty());
    }
}
