//! Writing a plan: apply every object in waves, then, only when all of them applied, prune what
//! is no longer wanted and remove what only the Go operator used.

use k8s_openapi::api::storage::v1::CSIDriver;
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::adopt;
use super::context::Context;
use super::error::{Error, Step};
use super::ownership::{GO_FIELD_MANAGER, children_selector, owned_kinds};
use super::prepare::{Refusal, Then};
use crate::cluster::ownership::FIELD_MANAGER;
use crate::crd::StorageOSCluster;
use crate::reasons;
use crate::render::Plan;
use crate::render::labels::MANAGED_BY;
use crate::runtime::kube::apply;
use crate::runtime::kube::object::ObjectKey;
use crate::storageos::CSI_DRIVER;

/// How the apiserver refuses content in a namespace being deleted.
const NAMESPACE_TERMINATING: &str = "because it is being terminated";

/// Applies the plan and prunes; a refusal (Ready=False naming the objects, then a failed pass)
/// when an object was not applied. Nothing is pruned then: pruning could delete something still
/// wanted (a half-applied switch of the CSI strategy, say) until a pass applies everything.
pub async fn roll_out(cluster: &StorageOSCluster, ctx: &Context, plan: &Plan) -> Result<Result<(), Refusal>, Error> {
    let name = cluster.name_any();
    let values = plan
        .objects
        .iter()
        .map(|o| o.to_value())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| apply::Error::from(crate::runtime::kube::object::Malformed("a serialisable object")))?;
    // Owned by the cluster where they share its namespace.
    let owner = cluster.controller_owner_ref(&());
    let cluster_ns = cluster.namespace().unwrap_or_default();
    let owner_in = owner.as_ref().map(|o| (o, cluster_ns.as_str()));
    let foreign = foreign_csi_driver(ctx).await?;
    let report = ctx.applier.apply_all(&values, owner_in, apply_wave).await;
    // Said by the pass that took it over, whatever else in it fails: the next pass finds the
    // driver already the operator's and could not say it any more.
    if let Some(made_by) = foreign.filter(|_| report.keep.iter().any(is_csi_driver)) {
        let message = format!(
            "CSIDriver {CSI_DRIVER} existed, made by {made_by} (not this operator, not the Go operator): it is StorageOS's name, so it was taken over; if another StorageOS install used it, that install's volumes now go through this one"
        );
        tracing::warn!(cluster = %name, %message, "took over a foreign CSIDriver");
        ctx.event(cluster, EventType::Warning, reasons::FOREIGN_CSI_DRIVER, message)
            .await;
    }
    if !report.failures.is_empty() {
        let message = report.failed_message();
        let failed = Error::ApplyFailed {
            failed: report.failures.len(),
            message: message.clone(),
        };
        let reason = report.failed_reason();
        // The drain guards' namespace is deleted with the last cluster; a cluster created
        // right after applies into it while it is still terminating, for a few seconds.
        // A namespace just gone is the end of that: the next pass creates it again.
        let transient =
            |r: &str| r.contains(NAMESPACE_TERMINATING) || (r.contains("namespaces \"") && r.contains("not found"));
        let then = if report.failures.iter().all(|f| transient(&f.reason)) {
            Then::Retry(kube::runtime::controller::Action::requeue(
                std::time::Duration::from_secs(2),
            ))
        } else {
            Then::Fail(failed)
        };
        return Ok(Err(Refusal { reason, message, then }));
    }
    let pruned = ctx
        .applier
        .prune(&owned_kinds(), &children_selector(cluster), &report.keep)
        .await?;
    for key in &pruned {
        tracing::info!(cluster = %name, object = %key, "pruned");
    }
    adopt::remove_go_leftovers_once(cluster, ctx, &plan.resolved.namespace).await?;
    if report.written > 0 || !pruned.is_empty() {
        tracing::info!(cluster = %name, written = report.written, pruned = pruned.len(), "applied cluster objects");
    }
    Ok(Ok(()))
}

/// Whether a key is the StorageOS CSIDriver.
fn is_csi_driver(key: &ObjectKey) -> bool {
    key.kind == "CSIDriver" && key.name == CSI_DRIVER
}

/// Who made the StorageOS CSIDriver, when it exists and neither this operator nor the Go one
/// did (a leftover of another install, or another tool's): the appliers take that name over,
/// so the take-over is reported.
async fn foreign_csi_driver(ctx: &Context) -> Result<Option<String>, Error> {
    let drivers: Api<CSIDriver> = Api::all(ctx.client.clone());
    let Some(meta) = drivers
        .get_metadata_opt(CSI_DRIVER)
        .await
        .step(format!("read CSIDriver {CSI_DRIVER}"))?
    else {
        return Ok(None);
    };
    let (key, value) = MANAGED_BY;
    if meta.labels().get(key).is_some_and(|v| v == value) {
        return Ok(None);
    }
    let managers: Vec<String> = meta
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|f| f.manager.clone())
        .collect();
    let ours = |m: &String| m == FIELD_MANAGER || m == GO_FIELD_MANAGER;
    if managers.iter().any(ours) {
        return Ok(None);
    }
    Ok(Some(if managers.is_empty() {
        "an unknown writer".to_string()
    } else {
        managers.join(", ")
    }))
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

#[cfg(test)]
mod tests {
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
}
