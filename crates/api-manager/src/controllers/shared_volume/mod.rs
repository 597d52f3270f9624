//! The shared volume (RWX/NFS) controller ("shared-volume"): for every StorageOS volume attached
//! as shared, a Service named after the PV in the PVC's namespace, owned by the PVC, fronts the
//! NFS server through Endpoints of the same name; once both are read back as wanted, the
//! Service's `<ClusterIP>:2049` is published as the volume's mount endpoint.
//!
//! Each pass runs on a new volume snapshot of the shared StorageOS poll (every
//! `-volume-poll-interval`, `apimanager::storageos_poll`). Kubernetes is read from caches (PVCs, and
//! the Services and Endpoints labelled `storageos.com/volume-id`), so a steady state costs the
//! apiserver nothing; a cached difference is re-read fresh before anything is written. The
//! ClusterIP is never changed (clients would get "Stale NFS filehandle"): a failover only
//! retargets the Endpoints and the Service targetPort. Nothing is ever deleted here; the PVC owns
//! both objects, so Kubernetes' garbage collector removes them with it.

pub mod desired;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, PersistentVolumeClaim, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, PostParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::snapshot::{OnSnapshot, Subscription};
use super::{Context, reflect};
use crate::cached_pvc::CachedPvc;
use crate::reasons;
use crate::runtime::kube::controller::{ControllerKit, ReconcileError, category};
use crate::storageos::{self, LABEL_NFS_MOUNT_ENDPOINT};
use crate::storageos_poll::VolumeSnapshot;
use desired::{Candidate, Fix, SharedVolume};

/// The controller name in metrics and logs.
pub const CONTROLLER: &str = "shared-volume";
/// How many volumes are reconciled at once (a new Service may wait for its ClusterIP).
const CONCURRENCY: usize = 8;

/// Why one shared volume was not reconciled; it is retried at the next poll.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing the Service or Endpoints failed.
    #[error("Kubernetes API: {0}; retried at the next poll")]
    Kube(#[from] Box<kube::Error>),
    /// Publishing the mount endpoint failed.
    #[error("StorageOS API: {0}")]
    StorageOs(#[from] Box<storageos::Error>),
    /// A Service or Endpoints was not as written (or had no ClusterIP) when read back in time.
    #[error(
        "{kind} {object} was not as written when read back within {waited:?}; retried at the next poll (raise -k8s-create-wait-duration if the apiserver is slow)"
    )]
    NotVerified {
        kind: String,
        object: String,
        waited: Duration,
    },
    /// The Service exists but is headless (`clusterIP: None`, immutable), so it has no address
    /// to publish.
    #[error(
        "Service {0} is headless (clusterIP None), so NFS clients cannot mount through it; delete it and it is recreated with a ClusterIP"
    )]
    Headless(String),
    /// The cached PVC is gone or replaced (a fresh read says so): nothing is created for it.
    #[error("PVC {0} is gone or was replaced; nothing is created for it")]
    PvcGone(String),
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Kube(e) => e.category(),
            Error::StorageOs(_) => category::STORAGEOS,
            Error::NotVerified { .. } => category::UNVERIFIED,
            Error::Headless(_) => category::USER,
            Error::PvcGone(_) => category::GONE,
        }
    }
}

impl From<kube::Error> for Error {
    fn from(e: kube::Error) -> Self {
        Error::Kube(Box::new(e))
    }
}

impl From<storageos::Error> for Error {
    fn from(e: storageos::Error) -> Self {
        Error::StorageOs(Box::new(e))
    }
}

/// Runs the controller until the future is dropped.
pub async fn run(ctx: Arc<Context>) {
    let (caches, watches) = Caches::start(&ctx);
    let subscription = Subscription::to::<SharedVolumes>(&ctx);
    // Made before the caches fill, so /metrics lists the controller from its start.
    let kit = ctx.kit(CONTROLLER);
    let work = async {
        caches.ready(&ctx).await;
        tracing::info!(controller = CONTROLLER, every = ?ctx.config.poll.volumes, "reconciling shared volumes at every StorageOS volume poll");
        let mut controller = SharedVolumes {
            ctx: &ctx,
            kit: &kit,
            caches: &caches,
            reported: HashSet::new(),
        };
        subscription.follow(&mut controller).await;
    };
    tokio::join!(watches, work);
}

/// The controller between volume snapshots.
struct SharedVolumes<'a> {
    ctx: &'a Context,
    kit: &'a ControllerKit,
    caches: &'a Caches,
    /// IDs of invalid shared volumes already reported.
    reported: HashSet<String>,
}

impl OnSnapshot for SharedVolumes<'_> {
    const NODES: bool = false;
    const VOLUMES: bool = true;

    async fn volumes(&mut self, snapshot: &VolumeSnapshot) {
        pass(self.ctx, self.kit, self.caches, snapshot, &mut self.reported).await;
    }
}

/// Caches of the Kubernetes objects a pass looks at.
struct Caches {
    pvcs: Store<CachedPvc>,
    services: Store<Service>,
    endpoints: Store<Endpoints>,
}

impl Caches {
    fn start(ctx: &Context) -> (Self, impl Future<Output = ()>) {
        let client = &ctx.kube;
        let ours = crate::runtime::kube::cache::every().labels(desired::VOLUME_ID_LABEL);
        let pvcs = ctx.pvcs.get(client, CONTROLLER);
        let (services, b) = reflect(CONTROLLER, watcher(Api::<Service>::all(client.clone()), ours.clone()));
        let (endpoints, c) = reflect(CONTROLLER, watcher(Api::<Endpoints>::all(client.clone()), ours));
        let drive = async move {
            tokio::join!(b, c);
        };
        (
            Self {
                pvcs,
                services,
                endpoints,
            },
            drive,
        )
    }

    /// Waits until every cache holds its first full list (the process's PVC cache through `ctx`:
    /// it has other readers).
    async fn ready(&self, ctx: &Context) {
        let _ = tokio::join!(
            ctx.pvcs.ready(),
            self.services.wait_until_ready(),
            self.endpoints.wait_until_ready()
        );
    }
}

fn cached<K>(store: &Store<K>, sv: &SharedVolume) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store.get(&ObjectRef::new(&sv.service_name).within(&sv.namespace))
}

/// One poll: reconcile every shared volume of the snapshot. A namespace whose listing failed is
/// reported and skipped (this controller draws no conclusion from a volume's absence).
async fn pass(
    ctx: &Context,
    kit: &ControllerKit,
    caches: &Caches,
    snapshot: &VolumeSnapshot,
    reported: &mut HashSet<String>,
) {
    let started = Instant::now();
    match &snapshot.read {
        Err(e) => {
            tracing::warn!(controller = CONTROLLER, error = %e, "cannot list StorageOS volumes; retrying at the next poll");
        }
        Ok(listing) => {
            for (namespace, e) in &listing.failed {
                tracing::warn!(controller = CONTROLLER, %namespace, error = %e, "cannot list the volumes of a StorageOS namespace; its shared volumes wait for the next poll");
            }
            let mut shared = Vec::new();
            let mut invalid = HashSet::new();
            for (v, storageos_namespace) in listing.volumes_with_namespace() {
                match desired::classify_in(v, storageos_namespace) {
                    Candidate::NotShared => {}
                    Candidate::Shared(sv) => shared.push(sv),
                    Candidate::Invalid { reason } => {
                        if !reported.contains(&v.id) {
                            tracing::warn!(controller = CONTROLLER, volume = %v.id, pv = %v.name, "shared volume ignored: {reason}");
                        }
                        invalid.insert(v.id.clone());
                    }
                }
            }
            // Report each invalid volume once while it stays invalid; with namespaces missing
            // from the listing, nothing can be known to have been fixed.
            if listing.complete() {
                *reported = invalid;
            } else {
                reported.extend(invalid);
            }
            futures::stream::iter(shared)
                .for_each_concurrent(CONCURRENCY, |sv| reconcile_volume(ctx, kit, caches, sv))
                .await;
        }
    }
    ctx.metrics.observe_shared_volume_pass(started.elapsed().as_secs_f64());
}

/// Reconciles one volume whose PVC exists; errors are logged and retried at the next poll.
async fn reconcile_volume(ctx: &Context, kit: &ControllerKit, caches: &Caches, sv: SharedVolume) {
    let key = ObjectRef::new(&sv.pvc_name).within(&sv.namespace);
    let Some(pvc) = caches.pvcs.get(&key) else {
        tracing::debug!(controller = CONTROLLER, volume = %sv.id, pvc = %format!("{}/{}", sv.namespace, sv.pvc_name), "PVC not found; no Service for this shared volume");
        return;
    };
    let owner = match desired::owner(&pvc, &sv) {
        Ok(o) => o,
        Err(why) => {
            tracing::debug!(controller = CONTROLLER, volume = %sv.id, pvc = %pvc.name_any(), "not fronting this shared volume: {why}");
            return;
        }
    };
    let result = kit.measure(pvc.as_ref(), ensure(ctx, kit, caches, &sv, &owner)).await;
    if let Err(e @ Error::PvcGone(_)) = &result {
        tracing::debug!(controller = CONTROLLER, volume = %sv.id, error = %e, "shared volume skipped");
    } else if let Err(e) = result {
        tracing::warn!(controller = CONTROLLER, volume = %sv.id, service = %sv.service_ref(), error = %e, "shared volume not reconciled; retrying at the next poll");
    }
}

/// Service, then Endpoints, then (once both are read back as wanted) the mount endpoint, each
/// written only if it differs.
async fn ensure(
    ctx: &Context,
    kit: &ControllerKit,
    caches: &Caches,
    sv: &SharedVolume,
    owner: &OwnerReference,
) -> Result<(), Error> {
    let svc: Written<Service> = write(ctx, cached(&caches.services, sv), sv, owner).await?;
    let name = sv.service_ref();
    if svc.created {
        kit.event(
            &svc.object,
            EventType::Normal,
            reasons::CREATED,
            format!("Created service for shared volume {name}"),
        )
        .await;
    }
    if !svc.restored.is_empty() {
        let what = svc.restored.join(", ");
        let note = format!("Put back the {what} of shared volume service {name}; it is managed by the api-manager");
        kit.event(&svc.object, EventType::Warning, reasons::RESTORED, note)
            .await;
    }
    let eps: Written<Endpoints> = write(ctx, cached(&caches.endpoints, sv), sv, owner).await?;
    if !svc.created && (svc.target_changed || eps.target_changed) {
        let note = format!("Shared volume service target changed {name}");
        kit.event(&svc.object, EventType::Warning, reasons::UPDATED, note).await;
    }
    let svc = verify(ctx, svc, sv, owner).await?;
    verify(ctx, eps, sv, owner).await?;
    let Some(mount) = desired::mount_endpoint(&svc) else {
        return Err(Error::Headless(name));
    };
    if sv.mount_endpoint.as_deref() != Some(mount.as_str()) {
        let published = ctx
            .metrics
            .track("set_external_endpoint", set_external_endpoint(&ctx.api, sv, &mount))
            .await?;
        if published {
            tracing::info!(controller = CONTROLLER, volume = %sv.id, service = %name, mount_endpoint = %mount, "published the shared volume's mount endpoint");
        }
    }
    Ok(())
}

/// The two objects a shared volume needs, handled alike by [`write`] and [`verify`].
trait Managed:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Serialize
    + std::fmt::Debug
    + Sized
{
    /// The object to create.
    fn want(sv: &SharedVolume, owner: &OwnerReference) -> Self;
    /// The corrected copy to write back, or `None` when it is as wanted.
    fn fix(&self, sv: &SharedVolume, owner: &OwnerReference) -> Option<Fix<Self>>;
    /// Whether it is as wanted and usable.
    fn ready(&self, sv: &SharedVolume, owner: &OwnerReference) -> bool;
    /// An error no write or wait can cure.
    fn stuck(&self, _sv: &SharedVolume) -> Option<Error> {
        None
    }
}

impl Managed for Service {
    fn want(sv: &SharedVolume, owner: &OwnerReference) -> Self {
        desired::desired_service(sv, owner)
    }
    fn fix(&self, sv: &SharedVolume, owner: &OwnerReference) -> Option<Fix<Self>> {
        desired::service_fix(self, sv, owner)
    }
    fn ready(&self, sv: &SharedVolume, owner: &OwnerReference) -> bool {
        desired::service_ready(self, sv, owner)
    }
    fn stuck(&self, sv: &SharedVolume) -> Option<Error> {
        let headless = self.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None");
        headless.then(|| Error::Headless(sv.service_ref()))
    }
}

impl Managed for Endpoints {
    fn want(sv: &SharedVolume, owner: &OwnerReference) -> Self {
        desired::desired_endpoints(sv, owner)
    }
    fn fix(&self, sv: &SharedVolume, owner: &OwnerReference) -> Option<Fix<Self>> {
        desired::endpoints_fix(self, sv, owner)
    }
    fn ready(&self, sv: &SharedVolume, owner: &OwnerReference) -> bool {
        desired::endpoints_ready(self, sv, owner)
    }
}

/// What [`write`] did to one object.
struct Written<K> {
    /// The object as the cache, the fresh read or the write answered it.
    object: K,
    /// Whether it is known to be as wanted (a cached or fresh read said so) or must be read back.
    verified: bool,
    created: bool,
    target_changed: bool,
    restored: Vec<&'static str>,
}

impl<K> Written<K> {
    fn read(object: K, verified: bool) -> Self {
        Self {
            object,
            verified,
            created: false,
            target_changed: false,
            restored: Vec::new(),
        }
    }
}

/// Makes one object as wanted: nothing when the cached copy already is; otherwise a fresh read,
/// then a create or a replace (with the read resourceVersion) if it is missing or differs.
async fn write<K: Managed>(
    ctx: &Context,
    cached: Option<Arc<K>>,
    sv: &SharedVolume,
    owner: &OwnerReference,
) -> Result<Written<K>, Error> {
    if let Some(c) = cached.filter(|c| c.ready(sv, owner)) {
        return Ok(Written::read(c.as_ref().clone(), true));
    }
    let api: Api<K> = Api::namespaced(ctx.kube.clone(), &sv.namespace);
    let name = sv.service_name.as_str();
    let pp = PostParams::default();
    let Some(current) = api.get_opt(name).await? else {
        // The PVC came from a cache: make sure it still exists before creating what it owns.
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.kube.clone(), &sv.namespace);
        let pvc = pvcs.get_opt(&sv.pvc_name).await?;
        if pvc.is_none_or(|p| p.uid().as_deref() != Some(owner.uid.as_str()) || p.metadata.deletion_timestamp.is_some())
        {
            return Err(Error::PvcGone(format!("{}/{}", sv.namespace, sv.pvc_name)));
        }
        let created = api.create(&pp, &K::want(sv, owner)).await?;
        return Ok(Written {
            created: true,
            ..Written::read(created, false)
        });
    };
    if let Some(e) = current.stuck(sv) {
        return Err(e);
    }
    Ok(match current.fix(sv, owner) {
        None => {
            let ready = current.ready(sv, owner);
            Written::read(current, ready)
        }
        Some(f) => Written {
            target_changed: f.target_changed,
            restored: f.restored,
            ..Written::read(api.replace(name, &pp, &f.object).await?, false)
        },
    })
}

/// Reads a written object back until it is as wanted (for a new Service: until it has its
/// ClusterIP), every `-k8s-create-poll-interval` for at most `-k8s-create-wait-duration`.
async fn verify<K: Managed>(
    ctx: &Context,
    w: Written<K>,
    sv: &SharedVolume,
    owner: &OwnerReference,
) -> Result<K, Error> {
    if w.verified {
        return Ok(w.object);
    }
    let api: Api<K> = Api::namespaced(ctx.kube.clone(), &sv.namespace);
    let poll = ctx.config.shared_volume.read_back_every;
    let wait = ctx.config.shared_volume.read_back_for;
    let deadline = Instant::now() + wait;
    loop {
        if let Some(o) = api.get_opt(&sv.service_name).await? {
            if o.ready(sv, owner) {
                return Ok(o);
            }
            if let Some(e) = o.stuck(sv) {
                return Err(e);
            }
        }
        if Instant::now() >= deadline {
            return Err(Error::NotVerified {
                kind: K::kind(&()).to_string(),
                object: sv.service_ref(),
                waited: wait,
            });
        }
        tokio::time::sleep(poll).await;
    }
}

/// Publishes `endpoint` as the volume's mount endpoint unless the fresh volume already has it;
/// true when it was written. Uses the fresh volume's version, so a concurrent change is a 412
/// retried at the next poll.
async fn set_external_endpoint(
    api: &storageos::Client,
    sv: &SharedVolume,
    endpoint: &str,
) -> Result<bool, storageos::Error> {
    let volume = api.get_volume(&sv.namespace_id, &sv.id).await?;
    if volume.labels.get(LABEL_NFS_MOUNT_ENDPOINT) == Some(endpoint) {
        return Ok(false);
    }
    api.set_nfs_mount_endpoint(&sv.namespace_id, &sv.id, endpoint, &volume.version)
        .await?;
    Ok(true)
}
