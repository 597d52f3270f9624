//! Deleting a StorageOSCluster: remove everything it created (found by label, so nothing
//! leaks), keep the namespace, then release the finalizer.
//!
//! Storage safety first: while pods still use StorageOS volumes, deletion is held with a
//! condition naming them, unless the cluster carries `storageos.com/force-delete: "true"`.
//! Deleting a cluster that is not the active one touches nothing.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::context::Context;
use super::error::{Error, Step};
use super::ownership::{FINALIZER, children_selector, owned_kinds};
use super::status::phase;
use crate::crd::FORCE_DELETE_ANNOTATION;
use crate::crd::StorageOSCluster;
use crate::rbac::components::DRAIN_GUARD_NAMESPACE;
use crate::reasons::{self, Reason};
use crate::render::labels;
use crate::runtime::kube::apply::ObjectKey;
use crate::runtime::{kube::cache, kube::conditions, kube::finalizer};

use crate::storageos::kube::{is_storageos_volume, storageos_claims};

/// `namespace/name` of running pods that mount a StorageOS-provisioned volume.
pub fn pods_using_volumes(pvs: &[PersistentVolume], pods: &[Pod]) -> Vec<String> {
    let claims = storageos_claims(pvs);
    let mut users: Vec<String> = pods
        .iter()
        .filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
        .filter(|p| {
            let ns = p.namespace().unwrap_or_default();
            p.spec.as_ref().and_then(|s| s.volumes.as_ref()).is_some_and(|vols| {
                vols.iter()
                    .filter_map(|v| v.persistent_volume_claim.as_ref())
                    .any(|c| claims.contains(&(ns.clone(), c.claim_name.clone())))
            })
        })
        .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
        .collect();
    users.sort();
    users
}

async fn set_terminating(
    cluster: &StorageOSCluster,
    ctx: &Context,
    ready_reason: Reason,
    message: &str,
) -> Result<(), Error> {
    let api: Api<StorageOSCluster> = Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    let previous = cluster.status.clone().unwrap_or_default();
    let mut status = previous.clone();
    status.phase = Some(phase::TERMINATING.into());
    let mut conds = status.conditions.take().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    conditions::set(
        &mut conds,
        "Ready",
        false,
        ready_reason,
        message,
        cluster.meta().generation,
        &now,
    );
    status.conditions = Some(conds);
    crate::runtime::kube::status::write_if_changed(
        &api,
        cluster,
        (&previous, &status),
        crate::cluster::ownership::FIELD_MANAGER,
    )
    .await
    .step("write the status")?;
    Ok(())
}

/// Handles a cluster with a deletion timestamp.
pub async fn finalize(cluster: &StorageOSCluster, is_active: bool, ctx: &Context) -> Result<Action, Error> {
    if !finalizer::has(cluster, FINALIZER) {
        return Ok(Action::await_change());
    }
    let name = cluster.name_any();
    if is_active {
        let forced = cluster
            .annotations()
            .get(FORCE_DELETE_ANNOTATION)
            .is_some_and(|v| v == "true");
        if !forced {
            // Both lists go a page at a time and keep only what matters (StorageOS volumes, the
            // names of pods using them): this runs every 10 s while deletion is held, and a
            // cluster can have tens of thousands of pods.
            let pvs = cache::pick_in_pages(
                &Api::<PersistentVolume>::all(ctx.client.clone()),
                cache::LIST_PAGE,
                |page| page.into_iter().filter(is_storageos_volume).collect(),
            )
            .await
            .step("list the PersistentVolumes")?;
            let mut users = if pvs.is_empty() {
                Vec::new()
            } else {
                cache::pick_in_pages(&Api::<Pod>::all(ctx.client.clone()), cache::LIST_PAGE, |page| {
                    pods_using_volumes(&pvs, &page)
                })
                .await
                .step("list the pods")?
            };
            users.sort();
            if !users.is_empty() {
                let shown: Vec<_> = users.iter().take(10).cloned().collect();
                let message = format!(
                    "deletion is held: {} pod(s) still use StorageOS volumes ({}); delete them, or annotate the cluster with {FORCE_DELETE_ANNOTATION}=\"true\" to delete anyway",
                    users.len(),
                    shown.join(", ")
                );
                if cluster.status.as_ref().and_then(|s| s.phase.as_deref()) != Some(phase::TERMINATING) {
                    ctx.event(cluster, EventType::Warning, reasons::TERMINATING, message.clone())
                        .await;
                }
                set_terminating(cluster, ctx, reasons::DELETION_BLOCKED, &message).await?;
                return Ok(Action::requeue(Duration::from_secs(10)));
            }
        }
        ctx.event(
            cluster,
            EventType::Normal,
            reasons::TERMINATING,
            "deleting every object of the StorageOS cluster".into(),
        )
        .await;
        set_terminating(
            cluster,
            ctx,
            reasons::TERMINATING,
            "deleting every object of the StorageOS cluster",
        )
        .await?;
        let children = ctx.applier.list(&owned_kinds(), &children_selector(cluster)).await?;
        for key in &children {
            ctx.applier.delete(key).await?;
        }
        // The drain guards' namespace is the cluster's alone (unlike the operand namespace):
        // it goes with the guards in it, so no guard outlives the api-manager that removes them.
        let guards = ObjectKey {
            api_version: "v1".into(),
            kind: "Namespace".into(),
            namespace: None,
            name: DRAIN_GUARD_NAMESPACE.into(),
        };
        // Only when the operator made it and no other StorageOSCluster remains: another cluster
        // (one waiting its turn, or a replacement) keeps it. Its labels name whichever cluster
        // applied it last, so they cannot tell.
        let made_by_us = Api::<Namespace>::all(ctx.client.clone())
            .get_metadata_opt(DRAIN_GUARD_NAMESPACE)
            .await
            .step("read the drain guards' namespace")?
            .and_then(|n| n.metadata.labels)
            .is_some_and(|l| {
                let (k, v) = labels::MANAGED_BY;
                l.get(k).map(String::as_str) == Some(v)
            });
        let uid = cluster.uid();
        let others = ctx
            .trusted
            .list::<PartialObjectMeta<StorageOSCluster>>(&ctx.client)
            .await
            .step("list the StorageOSClusters that may share the drain guards' namespace")?
            .into_iter()
            .any(|c| c.metadata.uid != uid && c.metadata.deletion_timestamp.is_none());
        let labelled = made_by_us && !others;
        if labelled {
            ctx.applier.delete_ours(&guards).await?;
        }
        tracing::info!(cluster = %name, deleted = children.len(), "deleted cluster objects; the namespace is kept");
    } else {
        tracing::info!(cluster = %name, "deleting a cluster that was never active; nothing to clean up");
    }
    let api: Api<StorageOSCluster> = Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    finalizer::remove(&api, cluster, FINALIZER, &PatchParams::default())
        .await
        .step("release the finalizer")?;
    Ok(Action::await_change())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_live_pods_on_storageos_claims_hold_deletion() {
        let pvs: Vec<PersistentVolume> = serde_json::from_value(json!([
            {"metadata": {"name": "pv1"}, "spec": {"csi": {"driver": "csi.storageos.com", "volumeHandle": "v1"},
                "claimRef": {"namespace": "app", "name": "data"}}},
            {"metadata": {"name": "pv2"}, "spec": {"csi": {"driver": "other.csi", "volumeHandle": "v2"},
                "claimRef": {"namespace": "app", "name": "other"}}}
        ]))
        .unwrap();
        let pod = |name: &str, claim: &str, phase: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "app"},
                "spec": {"containers": [], "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]},
                "status": {"phase": phase}
            }))
            .unwrap()
        };
        let pods = vec![
            pod("db-0", "data", "Running"),
            pod("done", "data", "Succeeded"),
            pod("elsewhere", "other", "Running"),
        ];
        assert_eq!(pods_using_volumes(&pvs, &pods), ["app/db-0"]);
    }
}
