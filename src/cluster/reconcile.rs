//! One reconcile of a StorageOSCluster: observe → build → apply → status.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::context::Context;
use super::error::{Error, Step};
use super::ownership::{FINALIZER, children_selector, owned_kinds, selector};
use super::status::{self as cluster_status, phase};
use super::{adopt, finalize, select, settings_push};
use crate::crd::{PAUSED_BY_ANNOTATION, StorageOSCluster, StorageOSClusterStatus, active_cluster, same_cluster};
use crate::reasons::{
    self, NAMESPACE_NOT_ALLOWED, OPERAND_NAMESPACE_NOT_ALLOWED, Reason, SECRET_NAMESPACE_NOT_ALLOWED,
};
use crate::render::{self, Inputs, Plan};
use crate::runtime::kube::conditions::{self, now};
use crate::runtime::kube::status;
use crate::runtime::kube::trusted::TrustedNamespaces;
use crate::runtime::{kube::apply, kube::finalizer};

/// Reconciles one cluster. A failure is also shown on the cluster (Ready=False with the
/// apiserver's message, which names the verb and resource of a forbidden request), never only in
/// the log; the reconcile is then retried with backoff.
pub async fn reconcile(cluster: Arc<StorageOSCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let result = reconcile_steps(&cluster, &ctx).await;
    match &result {
        // The apply step reports its own failures, naming each object; a write that lost a
        // race (409) or an object that just went away (404) is retried, not reported.
        Err(Error::ApplyFailed { .. }) | Ok(_) => {}
        Err(e @ Error::Kube { .. }) if matches!(e.api_code(), Some(409 | 404)) => {}
        Err(e) => report(&cluster, &ctx, e).await,
    }
    result
}

/// The condition reason for a failed reconcile step.
fn failure_reason(e: &Error) -> Reason {
    if e.api_code() == Some(403) {
        return reasons::FORBIDDEN;
    }
    match e {
        Error::Apply(_) | Error::ApplyFailed { .. } => reasons::APPLY_FAILED,
        Error::Kube { .. } => reasons::KUBERNETES_ERROR,
        Error::StorageOS { .. } => reasons::STORAGEOS_ERROR,
    }
}

/// Puts a reconcile failure on the cluster's status (best effort: if even that is refused, the
/// log and the reconcile error metric are all that is left).
async fn report(cluster: &StorageOSCluster, ctx: &Context, e: &Error) {
    let api: Api<StorageOSCluster> = Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    // Read back: the failed step may have been preceded by status writes of this reconcile.
    let current = match api.get_opt(&cluster.name_any()).await {
        Ok(Some(c)) => c,
        Ok(None) => return,
        Err(read) => {
            tracing::warn!(cluster = %cluster.name_any(), error = %read, "cannot read the cluster to report a failure");
            return;
        }
    };
    let message = format!("reconcile failed: {e}");
    if let Err(write) = not_ready(&current, &api, ctx, failure_reason(e), message).await {
        tracing::warn!(cluster = %cluster.name_any(), error = %write, "cannot report a failure on the cluster status");
    }
}

async fn reconcile_steps(cluster: &StorageOSCluster, ctx: &Context) -> Result<Action, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let api: Api<StorageOSCluster> = Api::namespaced(ctx.client.clone(), &ns);
    if !ctx.trusted.allows(&ns) {
        // Nothing is rendered, read or deleted for it; a finalizer it carries from a time its
        // namespace was trusted is released without touching anything.
        if cluster.metadata.deletion_timestamp.is_some() {
            return finalize::finalize(cluster, false, ctx).await;
        }
        return not_allowed(cluster, &api, ctx).await;
    }
    let all = Api::<StorageOSCluster>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await
        .step("list the StorageOSClusters")?;
    // Only a cluster in a trusted namespace can be (or hold back) the active one.
    let trusted: Vec<StorageOSCluster> = all
        .items
        .into_iter()
        .filter(|c| ctx.trusted.allows(&c.namespace().unwrap_or_default()))
        .collect();
    let is_active = active_cluster(&trusted).is_some_and(|a| same_cluster(a, cluster));

    if cluster.metadata.deletion_timestamp.is_some() {
        // A cluster on its way out is not one to alert about.
        ctx.cluster_metrics.forget(&ns, &cluster.name_any());
        return finalize::finalize(cluster, is_active, ctx).await;
    }
    if finalizer::add(&api, cluster, FINALIZER, &PatchParams::default())
        .await
        .step("add the finalizer")?
        .is_some()
    {
        // The patch triggers the next reconcile.
        return Ok(Action::await_change());
    }
    if !is_active {
        return pending(cluster, &api, ctx).await;
    }
    if let Some((reason, message)) = paused(cluster) {
        tracing::info!(cluster = %cluster.name_any(), %reason, "paused; not reconciling");
        let previous = cluster.status.clone().unwrap_or_default();
        let mut status = previous.clone();
        let conds = status.conditions.get_or_insert_with(Vec::new);
        conditions::set(conds, PAUSED, true, reason, message, cluster.meta().generation, &now());
        write_status(ctx, &api, cluster, &previous, status).await?;
        return Ok(Action::await_change());
    }
    deploy(cluster, &api, ctx).await
}

/// The condition that says a cluster is paused: nothing is applied or repaired meanwhile.
pub const PAUSED: &str = "Paused";

/// Why `cluster` is paused (condition reason and message), or None when it is not.
pub fn paused(cluster: &StorageOSCluster) -> Option<(Reason, String)> {
    if cluster.spec.pause == Some(true) {
        return Some((
            reasons::SPEC_PAUSE,
            "spec.pause is true: changes are not applied and deleted objects are not recreated until it is false"
                .into(),
        ));
    }
    let upgrade = cluster.annotations().get(PAUSED_BY_ANNOTATION)?;
    Some((
        reasons::UPGRADE_IN_PROGRESS,
        format!(
            "StorageOSUpgrade {upgrade} is upgrading the cluster; reconciling resumes when it completes or is deleted"
        ),
    ))
}

/// Marks a cluster in a namespace the operator does not trust: Ready=False with reason
/// `NamespaceNotAllowed` and one Warning event; nothing else is done for it.
async fn not_allowed(cluster: &StorageOSCluster, api: &Api<StorageOSCluster>, ctx: &Context) -> Result<Action, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    tracing::warn!(cluster = %cluster.name_any(), namespace = %namespace, "ignoring a StorageOSCluster in a namespace that is not trusted");
    ctx.cluster_metrics.forget(&namespace, &cluster.name_any());
    let message = ctx.trusted.refusal("StorageOSCluster", &namespace);
    let previous = cluster.status.clone().unwrap_or_default();
    let mut status = previous.clone();
    status.phase = Some(phase::PENDING.into());
    let reasons = (NAMESPACE_NOT_ALLOWED, NAMESPACE_NOT_ALLOWED);
    status::set_not_ready(api, &ctx.kit, cluster, &previous, status, reasons, message)
        .await
        .step("write the status")?;
    Ok(Action::await_change())
}

/// Why `cluster` (in a trusted namespace) may not be rendered: a Secret reference or the operand
/// namespace names a namespace outside its own and the trusted ones (condition reason and
/// message), or None.
pub fn namespace_refusal(cluster: &StorageOSCluster, trusted: &TrustedNamespaces) -> Option<(Reason, String)> {
    let own = cluster.namespace().unwrap_or_default();
    let spec = &cluster.spec;
    let mut refs = vec![("secretRefNamespace", spec.secret_ref_namespace.clone())];
    if let Some((_, ns)) = render::defaults::etcd_tls_secret_ref(spec) {
        refs.push(("tlsEtcdSecretRefNamespace", ns));
    }
    if let Some((field, ns)) = refs.into_iter().find(|(_, ns)| !trusted.allows_secret_ref(&own, ns)) {
        return Some((
            SECRET_NAMESPACE_NOT_ALLOWED,
            format!(
                "spec.{field} {ns:?} is neither the cluster's namespace {own:?} nor a trusted one ({trusted}): \
                 the operator copies the Secrets it names, so it reads them only there; move the Secret into \
                 {own:?} and set spec.{field} to it; nothing is applied or pruned meanwhile"
            ),
        ));
    }
    let target = render::resolve(spec).namespace;
    if !trusted.allows_operand_namespace(&own, &target) {
        return Some((
            OPERAND_NAMESPACE_NOT_ALLOWED,
            format!(
                "spec.namespace {target:?} is neither the cluster's namespace {own:?}, kube-system nor a trusted \
                 one ({trusted}): StorageOS's ServiceAccounts there get cluster-wide rights; use one of those \
                 (delete and re-create the cluster to move it); nothing is applied or pruned meanwhile"
            ),
        ));
    }
    None
}

/// Marks a cluster that is not the active one, once, and checks back for a takeover.
async fn pending(cluster: &StorageOSCluster, api: &Api<StorageOSCluster>, ctx: &Context) -> Result<Action, Error> {
    // A duplicate waiting its turn runs nothing: no readiness series (the alert would fire).
    let previous = cluster.status.clone().unwrap_or_default();
    if previous.phase.as_deref() != Some(phase::PENDING) {
        ctx.event(
            cluster,
            EventType::Warning,
            reasons::FAILED_CREATION,
            "can't create more than one storageos cluster".into(),
        )
        .await;
    }
    let mut status = previous.clone();
    status.phase = Some(phase::PENDING.into());
    let mut conds = status.conditions.take().unwrap_or_default();
    let now = now();
    let msg = "another StorageOSCluster is active; this one waits until it is deleted";
    conditions::set(
        &mut conds,
        "Ready",
        false,
        reasons::DUPLICATE_CLUSTER,
        msg,
        cluster.meta().generation,
        &now,
    );
    status.conditions = Some(conds);
    write_status(ctx, api, cluster, &previous, status).await?;
    ctx.cluster_metrics
        .forget(&cluster.namespace().unwrap_or_default(), &cluster.name_any());
    Ok(Action::requeue(Duration::from_secs(5)))
}

async fn write_status(
    ctx: &Context,
    api: &Api<StorageOSCluster>,
    cluster: &StorageOSCluster,
    previous: &StorageOSClusterStatus,
    status: StorageOSClusterStatus,
) -> Result<(), Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    ctx.cluster_metrics.observe(&namespace, &cluster.name_any(), &status);
    status::write_if_changed(api, cluster, previous, &status)
        .await
        .step("write the status")?;
    Ok(())
}

/// Sets Ready=False with `reason`, emits a Warning event the first time, and writes status.
async fn not_ready(
    cluster: &StorageOSCluster,
    api: &Api<StorageOSCluster>,
    ctx: &Context,
    reason: Reason,
    message: String,
) -> Result<(), Error> {
    let previous = cluster.status.clone().unwrap_or_default();
    let mut status = previous.clone();
    if status.phase.is_none() {
        status.phase = Some(phase::CREATING.into());
    }
    let reasons = (reason, reasons::FAILED_CREATION);
    let status = status::set_not_ready(api, &ctx.kit, cluster, &previous, status, reasons, message)
        .await
        .step("write the status")?;
    let namespace = cluster.namespace().unwrap_or_default();
    ctx.cluster_metrics.observe(&namespace, &cluster.name_any(), &status);
    Ok(())
}

impl status::WithConditions for StorageOSClusterStatus {
    fn conditions_mut(&mut self) -> &mut Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>> {
        &mut self.conditions
    }
}

async fn get_secret(ctx: &Context, namespace: &str, name: &str) -> Result<Option<Secret>, Error> {
    Api::<Secret>::namespaced(ctx.client.clone(), namespace)
        .get_opt(name)
        .await
        .step(format!("read Secret {namespace}/{name}"))
}

/// Reads every input of the build: the Secrets it copies and whether ServiceMonitors are served.
/// (The status step reads Nodes and node pods, from the caches when they run, and StorageOS.)
async fn observe(cluster: &StorageOSCluster, ctx: &Context) -> Result<Inputs, Error> {
    let spec = &cluster.spec;
    let mut inputs = Inputs::new(cluster.clone(), ctx.config.operator_image.clone());
    inputs.default_images = ctx.config.default_images.clone();
    inputs.node_env = ctx.config.node_env.clone();
    inputs.operator_namespace = ctx.config.operator_namespace.clone();
    inputs.secret = get_secret(ctx, &spec.secret_ref_namespace, &spec.secret_ref_name).await?;
    if let Some((name, ns)) = render::defaults::etcd_tls_secret_ref(spec) {
        inputs.etcd_tls_secret = get_secret(ctx, &ns, &name).await?;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    inputs.service_monitor_crd = crds
        .get_metadata_opt("servicemonitors.monitoring.coreos.com")
        .await
        .step("look up the ServiceMonitor CRD")?
        .is_some();
    Ok(inputs)
}

/// Applies everything the cluster wants, prunes what it no longer wants, updates status:
/// observe → plan → apply → (failures: report; else prune → Go leftovers) → status → push.
async fn deploy(cluster: &StorageOSCluster, api: &Api<StorageOSCluster>, ctx: &Context) -> Result<Action, Error> {
    let name = cluster.name_any();
    if let Some((reason, message)) = namespace_refusal(cluster, &ctx.trusted) {
        not_ready(cluster, api, ctx, reason, message).await?;
        return Ok(Action::await_change());
    }
    let inputs = observe(cluster, ctx).await?;
    if let Some((reason, message)) = missing_secret(cluster, &inputs) {
        not_ready(cluster, api, ctx, reason, message).await?;
        return Ok(Action::requeue(Duration::from_secs(15)));
    }
    let plan = match render::plan(&inputs) {
        Ok(plan) => plan,
        Err(e) => {
            // An invalid spec: say so and wait for the user to change it.
            let message = format!("cannot render the cluster: {e}");
            not_ready(cluster, api, ctx, reasons::INVALID_SPEC, message).await?;
            return Ok(Action::await_change());
        }
    };
    let report = apply(cluster, ctx, &plan).await?;
    if !report.failures.is_empty() {
        // Pruning now could delete something still wanted (a half-applied switch of the CSI
        // strategy, say): nothing is pruned until a pass applies everything. Retried with backoff.
        let message = report.failed_message();
        not_ready(cluster, api, ctx, report.failed_reason(), message.clone()).await?;
        return Err(Error::ApplyFailed {
            failed: report.failures.len(),
            message,
        });
    }
    // Everything applied: now it is safe to delete what is no longer wanted.
    let pruned = ctx
        .applier
        .prune(&owned_kinds(), &children_selector(cluster), &report.keep)
        .await?;
    for key in &pruned {
        tracing::info!(cluster = %name, object = %key, "pruned");
    }
    remove_go_leftovers(cluster, ctx, &plan.resolved.namespace).await?;
    if report.written > 0 || !pruned.is_empty() {
        tracing::info!(cluster = %name, written = report.written, pruned = pruned.len(), "applied cluster objects");
    }
    let status = update_status(cluster, api, ctx, &inputs, &plan).await?;
    if status.phase.as_deref() == Some(phase::RUNNING) {
        settings_push::push(cluster, ctx, &inputs, &plan).await?;
        Ok(Action::requeue(Duration::from_secs(60)))
    } else {
        Ok(Action::requeue(Duration::from_secs(10)))
    }
}

/// Why the build cannot start: a Secret it copies does not exist (condition reason and
/// message), or None.
fn missing_secret(cluster: &StorageOSCluster, inputs: &Inputs) -> Option<(Reason, String)> {
    let spec = &cluster.spec;
    if inputs.secret.is_none() {
        return Some((
            reasons::SECRET_NOT_FOUND,
            format!(
                "Secret {}/{} with the StorageOS API credentials does not exist; create it (keys username and password)",
                spec.secret_ref_namespace, spec.secret_ref_name
            ),
        ));
    }
    // The node pods mount the copy of the etcd TLS Secret: without its source, applying would
    // leave the copy out and prune it, and no node pod could start again. Wait instead.
    let (name, ns) = render::defaults::etcd_tls_secret_ref(spec)?;
    inputs.etcd_tls_secret.is_none().then(|| {
        (
            reasons::ETCD_TLS_SECRET_NOT_FOUND,
            format!(
                "Secret {ns}/{name} with the etcd TLS client certificate does not exist; create it (or remove tlsEtcdSecretRefName); nothing is changed meanwhile"
            ),
        )
    })
}

/// Applies the plan's objects, owned by `cluster` where they share its namespace.
async fn apply(cluster: &StorageOSCluster, ctx: &Context, plan: &Plan) -> Result<apply::ApplyReport, Error> {
    let values = plan
        .objects
        .iter()
        .map(|o| o.to_value())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| apply::Error::from(crate::runtime::kube::object::Malformed("a serialisable object")))?;
    let owner = cluster.controller_owner_ref(&());
    let cluster_ns = cluster.namespace().unwrap_or_default();
    let owner_in = owner.as_ref().map(|o| (o, cluster_ns.as_str()));
    Ok(ctx.applier.apply_all(&values, owner_in, apply_wave).await)
}

/// Removes what only the Go operator used, once per cluster generation in this process (and
/// again after a pass that failed).
async fn remove_go_leftovers(cluster: &StorageOSCluster, ctx: &Context, target_ns: &str) -> Result<(), Error> {
    let seen = (cluster.uid().unwrap_or_default(), cluster.meta().generation);
    if ctx.go_leftovers_checked(&seen) {
        return Ok(());
    }
    let leftovers = adopt::remove_go_leftovers(&ctx.client, cluster, target_ns)
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

/// The controller's Node and node pod caches once both have listed everything; None when the
/// controller does not run them (a reconcile called on its own) or they are not filled within
/// a minute: status then lists from the apiserver.
async fn ready_caches(ctx: &Context) -> Option<super::NodeCaches> {
    let caches = ctx.caches.get()?;
    let ready =
        async { caches.nodes.wait_until_ready().await.is_ok() && caches.node_pods.wait_until_ready().await.is_ok() };
    match tokio::time::timeout(Duration::from_secs(60), ready).await {
        Ok(true) => Some(caches.clone()),
        _ => None,
    }
}

/// The wave a kind is applied in. A fresh cluster's ~40 applies take one round trip each, so
/// they go a few at once (docs/benchmarks.md), in waves: Namespaces (the other objects may live
/// in them), then everything but role bindings and workloads, then role bindings (the apiserver
/// checks a binding against its role, which must exist by then), then the workloads: their pods
/// start with their RBAC, Services and config in place, and the burst of node pods a DaemonSet
/// brings does not slow the other applies down.
fn apply_wave(kind: &str) -> u8 {
    match kind {
        "Namespace" => 0,
        // A policy binding with a parameter is authorized against its policy, which must exist.
        "ClusterRoleBinding" | "RoleBinding" | "ValidatingAdmissionPolicyBinding" => 2,
        "DaemonSet" | "Deployment" | "StatefulSet" => LAST_WAVE,
        _ => 1,
    }
}

/// The wave of the workloads, applied last.
const LAST_WAVE: u8 = 3;

async fn update_status(
    cluster: &StorageOSCluster,
    api: &Api<StorageOSCluster>,
    ctx: &Context,
    inputs: &Inputs,
    plan: &Plan,
) -> Result<StorageOSClusterStatus, Error> {
    let target_ns = plan.resolved.namespace.clone();
    let caches = ready_caches(ctx).await;
    // From the caches, shared (their objects are slimmed: `node_cache`); else listed.
    let nodes: Vec<Arc<Node>> = match &caches {
        Some(c) => c.nodes.state(),
        None => Api::<Node>::all(ctx.client.clone())
            .list(&ListParams::default())
            .await
            .step("list the Nodes")?
            .items
            .into_iter()
            .map(Arc::new)
            .collect(),
    };
    let selected = select::selected_nodes(&nodes, cluster.spec.node_selector_terms.as_deref(), &plan.tolerations);
    let pod_labels = &plan.node_pod_labels;
    let pods_ready_on = match &caches {
        Some(c) => cluster_status::pod_ready_nodes(c.node_pods.state().iter().map(AsRef::as_ref).filter(|p| {
            p.namespace().as_deref() == Some(target_ns.as_str())
                && pod_labels.iter().all(|(k, v)| p.labels().get(k) == Some(v))
        })),
        None => cluster_status::pod_ready_nodes(
            &Api::<Pod>::namespaced(ctx.client.clone(), &target_ns)
                .list(&ListParams::default().labels(&selector(pod_labels)))
                .await
                .step("list the StorageOS node pods")?
                .items,
        ),
    };
    let api_nodes = match settings_push::api_client(ctx, inputs, plan) {
        Ok(client) => client.list_nodes().await.map_err(settings_push::ClientError::from),
        Err(e) => Err(e),
    };
    let previous = cluster.status.clone().unwrap_or_default();
    let now = now();
    let images = plan.images.to_container_images();
    let mut status = cluster_status::compute(&cluster_status::ClusterObservation {
        selected: &selected,
        pods_ready_on,
        api_nodes: api_nodes.as_deref(),
        previous: Some(&previous),
        generation: cluster.meta().generation,
        images,
        now: &now,
    });
    let news = adopt::note_replaced_images(
        status.conditions.get_or_insert_with(Vec::new),
        render::replaced_message(&plan.replaced_go_defaults),
        cluster.meta().generation,
        &now,
    );
    if let Some(message) = news {
        ctx.event(cluster, EventType::Normal, reasons::GO_DEFAULT_IMAGES_REPLACED, message)
            .await;
    }
    // Only a cluster that was paused carries the condition; it now says it is not.
    let conds = status.conditions.get_or_insert_with(Vec::new);
    if conds.iter().any(|c| c.type_ == PAUSED) {
        let generation = cluster.meta().generation;
        conditions::set(
            conds,
            PAUSED,
            false,
            reasons::RESUMED,
            "the cluster is reconciled again",
            generation,
            &now,
        );
    }
    if status.ready != previous.ready {
        let ready = status.ready.clone().unwrap_or_default();
        let all = status.phase.as_deref() == Some(phase::RUNNING);
        let note = if all {
            format!("{ready} StorageOS nodes are functional. Cluster healthy")
        } else {
            format!("{ready} StorageOS nodes are functional")
        };
        let type_ = if all { EventType::Normal } else { EventType::Warning };
        ctx.event(cluster, type_, reasons::CHANGED_STATUS, note).await;
    }
    write_status(ctx, api, cluster, &previous, status.clone()).await?;
    Ok(status)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn namespaces_come_first_bindings_after_roles_and_workloads_last() {
        let order = [
            "Namespace",
            "ClusterRole",
            "Service",
            "ClusterRoleBinding",
            "RoleBinding",
            "DaemonSet",
        ];
        let waves: Vec<u8> = order.iter().map(|k| apply_wave(k)).collect();
        assert!(waves.windows(2).all(|w| w[0] <= w[1]), "{waves:?}");
        assert!(apply_wave("ClusterRole") < apply_wave("ClusterRoleBinding"));
        assert!(apply_wave("ValidatingAdmissionPolicy") < apply_wave("ValidatingAdmissionPolicyBinding"));
        for workload in ["DaemonSet", "Deployment", "StatefulSet"] {
            assert_eq!(apply_wave(workload), LAST_WAVE);
        }
        assert!(apply_wave("ConfigMap") < LAST_WAVE && apply_wave("Secret") < LAST_WAVE);
    }

    fn with_spec(ns: &str, spec: serde_json::Value) -> StorageOSCluster {
        serde_json::from_value(json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": "storageos", "namespace": ns}, "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn secret_refs_outside_the_cluster_namespace_and_trusted_ones_are_refused() {
        let trusted = TrustedNamespaces::only("storageos-operator");
        let own = with_spec(
            "storageos-operator",
            json!({"secretRefName": "s", "secretRefNamespace": "storageos-operator",
                   "tlsEtcdSecretRefName": "etcd"}),
        );
        assert_eq!(namespace_refusal(&own, &trusted), None);
        let creds = with_spec(
            "storageos-operator",
            json!({"secretRefName": "s", "secretRefNamespace": "kube-system"}),
        );
        let (reason, msg) = namespace_refusal(&creds, &trusted).unwrap();
        assert_eq!(reason, SECRET_NAMESPACE_NOT_ALLOWED);
        assert!(msg.contains("spec.secretRefNamespace \"kube-system\""), "{msg}");
        let etcd = with_spec(
            "storageos-operator",
            json!({"secretRefName": "s", "secretRefNamespace": "storageos-operator",
                   "tlsEtcdSecretRefName": "etcd", "tlsEtcdSecretRefNamespace": "tenant"}),
        );
        let (reason, msg) = namespace_refusal(&etcd, &trusted).unwrap();
        assert_eq!(reason, SECRET_NAMESPACE_NOT_ALLOWED);
        assert!(msg.contains("spec.tlsEtcdSecretRefNamespace \"tenant\""), "{msg}");
        // A trusted namespace other than the cluster's own may be named.
        let wider: TrustedNamespaces = "storageos-operator,default".parse().unwrap();
        let go = with_spec(
            "default",
            json!({"secretRefName": "s", "secretRefNamespace": "storageos-operator"}),
        );
        assert_eq!(namespace_refusal(&go, &wider), None);
    }

    #[test]
    fn operands_go_only_to_kube_system_the_cluster_namespace_or_trusted_ones() {
        let trusted = TrustedNamespaces::only("ops");
        let spec = |ns: Option<&str>| {
            let mut s = json!({"secretRefName": "s", "secretRefNamespace": "ops"});
            if let Some(ns) = ns {
                s["namespace"] = json!(ns);
            }
            with_spec("ops", s)
        };
        for ok in [None, Some("kube-system"), Some("ops")] {
            assert_eq!(namespace_refusal(&spec(ok), &trusted), None, "{ok:?}");
        }
        let (reason, msg) = namespace_refusal(&spec(Some("tenant")), &trusted).unwrap();
        assert_eq!(reason, OPERAND_NAMESPACE_NOT_ALLOWED);
        assert!(msg.contains("spec.namespace \"tenant\""), "{msg}");
    }
}
