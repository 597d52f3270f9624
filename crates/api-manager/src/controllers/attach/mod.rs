//! Attach recovery (controller `storageos-attach-recovery`, docs/api-manager.md): a pod waiting
//! in `ContainerCreating` with "Multi-Attach error" because a VolumeAttachment still names the
//! node its volume was on gets the volume, from StorageOS's own truth and for every pod (the
//! fencer only deletes the attachments of pods opted in to fencing).
//!
//! At each volume snapshot of the shared poll, every VolumeAttachment of `csi.storageos.com`
//! (a watch cache: an idle cluster costs no read) is compared with where StorageOS has its
//! volume attached ([`decide::suspect`]). One StorageOS contradicts is deleted when
//! [`decide::confirm`] says so: a pod on another node waits for the volume, or the node is lost
//! and no pod of the PVC is left on it. Before a delete, the PVC's pods, the volume and the
//! maintenance state are read fresh; nothing is deleted on a partial or failed read, while an
//! upgrade holds maintenance, or while more than half of the StorageOS nodes are offline (the
//! fencer's partition guard). Each deletion is a Warning `StaleAttachmentDeleted` on the PVC and
//! on each waiting pod, and counts in `storageos_attachments_deleted_total{reason}`.
//! `--enable-attach-recovery` (`spec.attachRecovery`) turns it on.

pub mod decide;

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use super::fencing::episodes::too_many_offline;
use super::node_state::NodeState;
use super::out_of_service::decide::ready;
use super::snapshot::{OnSnapshot, Subscription};
use super::volume_claims::pvc_of_in;
use super::{Context, reflect};
use crate::cached_pvc::CachedPvc;
use crate::maintenance::Maintenance;
use crate::reasons;
use crate::runtime::kube::controller::ControllerKit;
use crate::storageos::models::{Node, Volume};
use crate::storageos_poll::VolumeSnapshot;
use decide::{Attachment, K8sNode, Suspect};

/// The controller name in logs and metrics.
pub const CONTROLLER: &str = "storageos-attach-recovery";

/// Why a suspect attachment was left for the next poll.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A read or the delete failed in Kubernetes.
    #[error(
        "Kubernetes API: {0}; retried at the next volume poll (check that the api-manager may list pods and delete volumeattachments)"
    )]
    Kube(#[from] kube::Error),
    /// The fresh read of the volume failed.
    #[error("StorageOS API: {0}; retried at the next volume poll")]
    StorageOS(#[from] crate::storageos::Error),
}

/// Runs the controller until the future is dropped; returns at once when it is off.
pub async fn run(ctx: Arc<Context>) {
    if !ctx.config.attach_recovery {
        tracing::info!(
            controller = CONTROLLER,
            "attach recovery is off (spec.attachRecovery): only the fencer deletes VolumeAttachments"
        );
        return;
    }
    let subscription = Subscription::to::<Recovery>(&ctx);
    let (attachments, watch) = reflect(
        CONTROLLER,
        watcher(
            Api::<VolumeAttachment>::all(ctx.kube.clone()),
            watcher::Config::default(),
        ),
    );
    let k8s_nodes = ctx.nodes.get(&ctx.kube, CONTROLLER);
    let pvcs = ctx.pvcs.get(&ctx.kube, CONTROLLER);
    let work = async {
        let _ = tokio::join!(
            attachments.wait_until_ready(),
            ctx.nodes.ready(),
            pvcs.wait_until_ready()
        );
        tracing::info!(
            controller = CONTROLLER,
            "deleting VolumeAttachments StorageOS contradicts"
        );
        let mut recovery = Recovery {
            ctx: &ctx,
            kit: ctx.kit(CONTROLLER),
            attachments: &attachments,
            k8s_nodes: &k8s_nodes,
            pvcs: &pvcs,
            held: false,
        };
        subscription.follow(&mut recovery).await;
    };
    tokio::join!(watch, work);
}

struct Recovery<'a> {
    ctx: &'a Context,
    kit: ControllerKit,
    attachments: &'a Store<VolumeAttachment>,
    k8s_nodes: &'a Store<NodeState>,
    pvcs: &'a Store<CachedPvc>,
    /// Whether the partition hold was logged.
    held: bool,
}

/// A suspect attachment with what its deletion needs.
struct Case<'v> {
    attachment: Attachment,
    suspect: Suspect,
    k8s: K8sNode,
    volume: &'v Volume,
    /// The PVC (namespace, name) bound to the attachment's PV.
    pvc: (String, String),
}

impl OnSnapshot for Recovery<'_> {
    /// Subscribed so that the nodes are polled; each volume snapshot reads the latest list.
    const NODES: bool = true;
    const VOLUMES: bool = true;

    async fn volumes(&mut self, snapshot: &VolumeSnapshot) {
        // Only a complete volume read and a node list that worked (the latest: a failed one
        // says nothing) say where volumes are.
        let Some(list) = snapshot.complete() else { return };
        let Some(node_snapshot) = self.ctx.storageos.latest_nodes() else {
            return;
        };
        let Some(nodes) = node_snapshot.ok() else { return };
        if let Some((offline, total)) = too_many_offline(nodes) {
            if !self.held {
                tracing::warn!(
                    controller = CONTROLLER,
                    offline,
                    total,
                    "more than half of the StorageOS nodes are offline: no VolumeAttachment is deleted until at most half are"
                );
                self.held = true;
            }
            return;
        }
        self.held = false;
        let cases = self.cases(list.volumes_with_namespace(), nodes);
        if cases.is_empty() {
            return;
        }
        let mut pods: HashMap<String, Vec<Pod>> = HashMap::new();
        let mut maintenance_off = None;
        for case in cases {
            if let Err(e) = self.recover(&case, nodes, &mut pods, &mut maintenance_off).await {
                tracing::warn!(controller = CONTROLLER, attachment = %case.attachment.name, error = %e, "cannot recover the attachment");
            }
        }
    }
}

impl Recovery<'_> {
    /// The attachments StorageOS contradicts in this read, with their PVCs.
    fn cases<'v>(&self, volumes: impl Iterator<Item = (&'v Volume, Option<&'v str>)>, nodes: &[Node]) -> Vec<Case<'v>> {
        let by_pv: HashMap<&str, (&Volume, Option<&str>)> = volumes.map(|(v, ns)| (v.name.as_str(), (v, ns))).collect();
        let mut cases = Vec::new();
        for va in self.attachments.state() {
            let Some(attachment) = decide::attachment(&va) else {
                continue;
            };
            let Some((volume, storageos_ns)) = by_pv.get(attachment.pv.as_str()) else {
                continue;
            };
            // The PVC the volume's labels name, only while it is bound to this PV.
            let Some((ns, claim)) = pvc_of_in(volume, *storageos_ns) else {
                continue;
            };
            let bound = self
                .pvcs
                .get(&ObjectRef::new(&claim).within(&ns))
                .is_some_and(|p| p.bound_pv() == Some(attachment.pv.as_str()));
            if !bound {
                continue;
            }
            let k8s = self.k8s_node(&attachment.node);
            if let Some(suspect) = decide::suspect(&attachment, volume, nodes, k8s) {
                cases.push(Case {
                    attachment,
                    suspect,
                    k8s,
                    volume,
                    pvc: (ns, claim),
                });
            }
        }
        cases
    }

    fn k8s_node(&self, name: &str) -> K8sNode {
        match self.k8s_nodes.get(&ObjectRef::new(name)).map(|n| ready(&n)) {
            None => K8sNode::Gone,
            Some(Some(false)) => K8sNode::NotReady,
            Some(_) => K8sNode::Ready,
        }
    }

    /// Confirms one case from fresh reads (the PVC's pods, once per namespace and pass; the
    /// volume; the maintenance state, once per pass) and deletes its attachment.
    async fn recover(
        &self,
        case: &Case<'_>,
        nodes: &[Node],
        pods: &mut HashMap<String, Vec<Pod>>,
        maintenance_off: &mut Option<bool>,
    ) -> Result<(), Error> {
        let (ns, claim) = &case.pvc;
        if !pods.contains_key(ns) {
            let listed = Api::<Pod>::namespaced(self.ctx.kube.clone(), ns)
                .list(&ListParams::default())
                .await?;
            pods.insert(ns.clone(), listed.items);
        }
        let in_ns = pods.get(ns).map(Vec::as_slice).unwrap_or_default();
        let users = decide::users(in_ns, claim);
        let a = &case.attachment;
        let Some((deleted, waiting)) = decide::confirm(a, case.suspect, case.k8s, &users) else {
            tracing::debug!(controller = CONTROLLER, attachment = %a.name, "StorageOS contradicts the attachment but no pod needs it gone");
            return Ok(());
        };
        // The volume again, read after the attachment: an attach that completed since the
        // poll's read shows here.
        let fresh = self
            .ctx
            .metrics
            .track(
                "get_volume",
                self.ctx.api.get_volume(&case.volume.namespace_id, &case.volume.id),
            )
            .await?;
        if decide::suspect(a, &fresh, nodes, case.k8s).is_none() {
            return Ok(());
        }
        if !*maintenance_off.get_or_insert(self.maintenance_off().await) {
            return Ok(());
        }
        let why = decide::why(a, &fresh, nodes, deleted);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: a.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match Api::<VolumeAttachment>::all(self.ctx.kube.clone())
            .delete(&a.name, &params)
            .await
        {
            Ok(_) => {}
            // Gone, or another object of that name now: not this decision's.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        tracing::warn!(controller = CONTROLLER, attachment = %a.name, node = %a.node, pvc = %format!("{ns}/{claim}"), reason = deleted.label(), waiting = ?waiting, "deleted a VolumeAttachment StorageOS contradicts");
        self.ctx.metrics.count_attachment_deleted(deleted);
        self.announce(case, &why, &waiting, in_ns).await;
        Ok(())
    }

    /// Whether no upgrade holds maintenance (a failed read counts as held: do nothing).
    async fn maintenance_off(&self) -> bool {
        match self.ctx.maintenance().await {
            Ok(Maintenance::Off) => true,
            Ok(Maintenance::On { upgrade }) => {
                tracing::info!(controller = CONTROLLER, %upgrade, "an upgrade is in progress: no VolumeAttachment is deleted");
                false
            }
            Err(e) => {
                tracing::warn!(controller = CONTROLLER, error = %e, "cannot tell whether an upgrade is in progress: no VolumeAttachment is deleted");
                false
            }
        }
    }

    /// `StaleAttachmentDeleted` on the PVC and on each pod waiting for the volume.
    async fn announce(&self, case: &Case<'_>, why: &str, waiting: &[String], pods: &[Pod]) {
        let a = &case.attachment;
        let (ns, claim) = &case.pvc;
        let waiters = if waiting.is_empty() {
            String::new()
        } else {
            format!("; pod(s) {} can attach it now", waiting.join(", "))
        };
        let note = format!(
            "Deleted VolumeAttachment {} of volume {} on node {}: {why}{waiters}",
            a.name, a.pv, a.node
        );
        if let Some(pvc) = self.pvcs.get(&ObjectRef::new(claim).within(ns)) {
            self.kit
                .event(
                    pvc.as_ref(),
                    EventType::Warning,
                    reasons::STALE_ATTACHMENT_DELETED,
                    note,
                )
                .await;
        }
        for pod in pods.iter().filter(|p| waiting.contains(&p.name_any())) {
            let note = format!(
                "Deleted VolumeAttachment {} of PVC {claim} on node {}: {why}; the volume can attach here now",
                a.name, a.node
            );
            self.kit
                .event(pod, EventType::Warning, reasons::STALE_ATTACHMENT_DELETED, note)
                .await;
        }
    }
}
