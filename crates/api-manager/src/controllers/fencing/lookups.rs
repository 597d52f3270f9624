//! Everything a fencing pass reads and does, behind two traits: [`Live`] talks to Kubernetes and
//! StorageOS, and the unit tests of [`super::pass`] use a fake, so the most dangerous lines of
//! the api-manager are tested without a control plane.
//!
//! **Freshness.** Every read here is fresh: a request to the apiserver or to StorageOS at the
//! time of the pass, never a watch cache or the shared poll's snapshot. A pass deletes pods, and
//! a cache can be seconds behind: a pod that was just rescheduled, a PVC rebound, a volume whose
//! master just failed back onto the offline node, or an upgrade that just started would be
//! missed. A pass reads each StorageOS list at most once (the caller memoises), so it acts on one
//! consistent view; the next pass reads again.

use k8s_openapi::api::core::v1::{PersistentVolume, Pod};

use super::super::node_state::NodeState as Node;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::runtime::events::EventType;

use super::select::{self, Claim};
use crate::cached_pvc::CachedPvc;
use crate::controllers::Context;
use crate::maintenance::Maintenance;
use crate::metrics::FencerOutcome;
use crate::reasons::Reason;
use crate::runtime::kube::controller::ControllerKit;
use crate::storageos;
use crate::storageos::models::{Namespace, Volume};

/// A StorageOS claim of a pod: the volume is `namespace/pv`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageOSClaim {
    pub namespace: String,
    pub pv: String,
}

/// How a pod delete ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// This pod was deleted now.
    Now,
    /// Gone already, or replaced by a new pod of the same name (the UID precondition failed):
    /// nothing was done.
    Already,
}

/// What an event is about.
#[derive(Debug, Clone, Copy)]
pub enum About<'a> {
    Node(&'a Node),
    Pod(&'a Pod),
}

/// The reads of a fencing pass; each one fresh (see the module doc).
pub trait FenceLookups: Sync {
    /// Every pod bound to the node (`spec.nodeName`).
    fn pods_on(&self, node: &str) -> impl Future<Output = Result<Vec<Pod>, kube::Error>> + Send;
    /// The pod's claims that are StorageOS volumes. A missing PVC or PV is not StorageOS's
    /// (nothing to fence for it); a failed read is an error (the pod waits for the next pass).
    fn storageos_claims(&self, pod: &Pod) -> impl Future<Output = Result<Vec<StorageOSClaim>, kube::Error>> + Send;
    /// Whether an upgrade holds the cluster in maintenance. `Err`: cannot tell.
    fn maintenance(&self) -> impl Future<Output = Result<Maintenance, kube::Error>> + Send;
    /// Every StorageOS namespace.
    fn namespaces(&self) -> impl Future<Output = Result<Vec<Namespace>, storageos::Error>> + Send;
    /// The volumes of one StorageOS namespace.
    fn volumes(&self, namespace_id: &str) -> impl Future<Output = Result<Vec<Volume>, storageos::Error>> + Send;
    /// Every VolumeAttachment.
    fn attachments(&self) -> impl Future<Output = Result<Vec<VolumeAttachment>, kube::Error>> + Send;
}

/// The writes and reports of a fencing pass.
pub trait FenceActions: Sync {
    /// Deletes this very pod (its UID) with grace period 0.
    fn delete_pod(&self, pod: &Pod) -> impl Future<Output = Result<Deleted, kube::Error>> + Send;
    /// Deletes a VolumeAttachment (gone already counts as deleted).
    fn delete_attachment(&self, name: &str) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// Publishes a warning event.
    fn warn(&self, about: About<'_>, reason: Reason, note: String) -> impl Future<Output = ()> + Send;
    /// Counts one outcome in the fencer's metrics.
    fn count(&self, outcome: FencerOutcome);
}

/// The real thing: the apiserver and the StorageOS API.
pub struct Live<'a> {
    pub ctx: &'a Context,
    pub kit: &'a ControllerKit,
}

impl FenceLookups for Live<'_> {
    async fn pods_on(&self, node: &str) -> Result<Vec<Pod>, kube::Error> {
        let pods = Api::<Pod>::all(self.ctx.kube.clone())
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await?;
        Ok(pods.items)
    }

    async fn storageos_claims(&self, pod: &Pod) -> Result<Vec<StorageOSClaim>, kube::Error> {
        let namespace = pod.namespace().unwrap_or_default();
        // Read as the cache's view: the same fields `classify` reads, without the rest.
        let pvcs: Api<CachedPvc> = Api::namespaced(self.ctx.kube.clone(), &namespace);
        let pvs: Api<PersistentVolume> = Api::all(self.ctx.kube.clone());
        let mut claims = Vec::new();
        for claim in select::claim_names(pod) {
            let Some(pvc) = pvcs.get_opt(&claim).await? else {
                continue;
            };
            let pv = match select::classify(&pvc) {
                Claim::Unbound => continue,
                Claim::StorageOS { pv } => pv,
                Claim::AskPv { pv } => match pvs.get_opt(&pv).await? {
                    Some(v) if select::is_storageos_pv(&v) => pv,
                    _ => continue,
                },
            };
            claims.push(StorageOSClaim {
                namespace: namespace.clone(),
                pv,
            });
        }
        Ok(claims)
    }

    async fn maintenance(&self) -> Result<Maintenance, kube::Error> {
        self.ctx.maintenance().await
    }

    async fn namespaces(&self) -> Result<Vec<Namespace>, storageos::Error> {
        let ctx = self.ctx;
        ctx.metrics.track("list_namespaces", ctx.api.list_namespaces()).await
    }

    async fn volumes(&self, namespace_id: &str) -> Result<Vec<Volume>, storageos::Error> {
        let ctx = self.ctx;
        ctx.metrics
            .track("list_volumes", ctx.api.list_volumes(namespace_id))
            .await
    }

    async fn attachments(&self) -> Result<Vec<VolumeAttachment>, kube::Error> {
        let vas: Api<VolumeAttachment> = Api::all(self.ctx.kube.clone());
        Ok(vas.list(&ListParams::default()).await?.items)
    }
}

impl FenceActions for Live<'_> {
    async fn delete_pod(&self, pod: &Pod) -> Result<Deleted, kube::Error> {
        let pods: Api<Pod> = Api::namespaced(self.ctx.kube.clone(), &pod.namespace().unwrap_or_default());
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match pods.delete(&pod.name_any(), &now).await {
            Ok(_) => Ok(Deleted::Now),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Deleted::Already),
            Err(e) => Err(e),
        }
    }

    async fn delete_attachment(&self, name: &str) -> Result<(), kube::Error> {
        let vas: Api<VolumeAttachment> = Api::all(self.ctx.kube.clone());
        match vas.delete(name, &DeleteParams::default().grace_period(0)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn warn(&self, about: About<'_>, reason: Reason, note: String) {
        match about {
            About::Node(n) => self.kit.event(n, EventType::Warning, reason, note).await,
            About::Pod(p) => self.kit.event(p, EventType::Warning, reason, note).await,
        }
    }

    fn count(&self, outcome: FencerOutcome) {
        self.ctx.metrics.count_fencer(outcome);
    }
}
