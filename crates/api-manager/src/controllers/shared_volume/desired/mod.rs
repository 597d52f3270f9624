//! The pure half of the shared volume controller: which StorageOS volumes are shared, the
//! Service and Endpoints each one needs, and what to change in the ones that exist. Nothing here
//! talks to an API, so every decision is unit-tested from fixtures.

use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::cached_pvc::CachedPvc;
use crate::storageos::models::{
    LABEL_CSI_PV_NAME, LABEL_CSI_PVC_NAME, LABEL_CSI_PVC_NAMESPACE, LABEL_NFS_MOUNT_ENDPOINT, Volume,
};

/// The port NFS clients mount (`<ClusterIP>:2049`); fixed, as in the Go api-manager.
pub const NFS_PORT: i32 = 2049;
/// Name of the Service and Endpoints port.
pub const NFS_PORT_NAME: &str = "nfs";
/// Back-reference from the Service and Endpoints to the StorageOS volume; also selects the
/// objects this controller caches.
pub const VOLUME_ID_LABEL: &str = "storageos.com/volume-id";

const TCP: &str = "TCP";
const CLUSTER_IP: &str = "ClusterIP";

/// A StorageOS volume attached as shared (NFS), with everything needed to front it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedVolume {
    /// StorageOS volume ID.
    pub id: String,
    /// StorageOS namespace ID of the volume (to publish the mount endpoint).
    pub namespace_id: String,
    /// PV name: the name of the Service and Endpoints.
    pub service_name: String,
    /// The PVC that owns them.
    pub pvc_name: String,
    /// The PVC's namespace, where they live.
    pub namespace: String,
    /// Where the NFS server listens now (`nfs.serviceEndpoint`).
    pub nfs: SocketAddr,
    /// The current `storageos.com/nfs/mount-endpoint` label, if any.
    pub mount_endpoint: Option<String>,
}

impl SharedVolume {
    /// `namespace/name` of the Service, for logs and events.
    pub fn service_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.service_name)
    }
}

/// What a StorageOS volume is to this controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidate {
    /// Not shared: no NFS endpoint, or not provisioned through CSI (no PV/PVC labels).
    NotShared,
    /// Shared, but it cannot be fronted by a Service; `reason` says why.
    Invalid { reason: String },
    /// Shared and usable.
    Shared(SharedVolume),
}

fn label<'a>(v: &'a Volume, key: &str) -> Option<&'a str> {
    v.labels.get(key).map(|s| s.trim()).filter(|s| !s.is_empty())
}

/// Sorts a volume: shared when it carries the three CSI labels and `nfs.serviceEndpoint`.
pub fn classify(v: &Volume) -> Candidate {
    let (Some(pv), Some(pvc), Some(ns), Some(endpoint)) = (
        label(v, LABEL_CSI_PV_NAME),
        label(v, LABEL_CSI_PVC_NAME),
        label(v, LABEL_CSI_PVC_NAMESPACE),
        v.nfs_endpoint(),
    ) else {
        return Candidate::NotShared;
    };
    let nfs = match parse_nfs_endpoint(endpoint) {
        Ok(a) => a,
        Err(reason) => return Candidate::Invalid { reason },
    };
    if !is_dns1035_label(pv) {
        return Candidate::Invalid {
            reason: format!("its PV name {pv:?} cannot name a Service (it must be a DNS-1035 label)"),
        };
    }
    if !is_label_value(&v.id) {
        return Candidate::Invalid {
            reason: format!("its ID {:?} cannot be a Kubernetes label value", v.id),
        };
    }
    Candidate::Shared(SharedVolume {
        id: v.id.clone(),
        namespace_id: v.namespace_id.clone(),
        service_name: pv.to_string(),
        pvc_name: pvc.to_string(),
        namespace: ns.to_string(),
        nfs,
        mount_endpoint: label(v, LABEL_NFS_MOUNT_ENDPOINT).map(str::to_string),
    })
}

/// [`classify`] of a volume that StorageOS keeps in its namespace `storageos_namespace` (None
/// when that namespace is not known): a shared volume whose CSI labels name another Kubernetes
/// namespace is invalid. The labels are writable through the StorageOS API, and the Service and
/// Endpoints would otherwise be made wherever they point.
pub fn classify_in(v: &Volume, storageos_namespace: Option<&str>) -> Candidate {
    match classify(v) {
        Candidate::Shared(sv) if storageos_namespace != Some(sv.namespace.as_str()) => Candidate::Invalid {
            reason: format!(
                "its label {LABEL_CSI_PVC_NAMESPACE} names namespace {:?}, but StorageOS keeps it in {:?}",
                sv.namespace,
                storageos_namespace.unwrap_or("an unknown namespace")
            ),
        },
        other => other,
    }
}

/// Parses `nfs.serviceEndpoint`: an `ip:port` (`[ip]:port` for IPv6) that Kubernetes Endpoints
/// can hold, so no host names, port 0, loopback, link-local or multicast addresses.
pub fn parse_nfs_endpoint(endpoint: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = endpoint.trim().parse().map_err(|_| {
        format!("its NFS endpoint {endpoint:?} is not ip:port (an IPv6 address needs brackets: [ip]:port)")
    })?;
    if addr.port() == 0 {
        return Err(format!("its NFS endpoint {endpoint:?} has port 0"));
    }
    let ip = addr.ip();
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_unicast_link_local(),
    };
    if ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || link_local {
        return Err(format!(
            "its NFS endpoint {endpoint:?} is a loopback, unspecified, link-local or multicast address, which Kubernetes Endpoints cannot hold"
        ));
    }
    Ok(addr)
}

fn is_dns1035_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && !s.ends_with('-')
}

fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    !b.is_empty()
        && b.len() <= 63
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// The mount endpoint a ClusterIP gives: `ip:2049` (`[ip]:2049` for IPv6). `None` for a
/// Service without a usable ClusterIP (not allocated yet, or headless `None`).
pub fn mount_endpoint(service: &Service) -> Option<String> {
    let ip: IpAddr = service.spec.as_ref()?.cluster_ip.as_deref()?.parse().ok()?;
    let port = u16::try_from(NFS_PORT).ok()?;
    Some(SocketAddr::new(ip, port).to_string())
}

/// Why a PVC cannot own the objects of a shared volume; `Ok` with the owner reference if it can.
pub fn owner(pvc: &CachedPvc, sv: &SharedVolume) -> Result<OwnerReference, String> {
    if pvc.metadata.deletion_timestamp.is_some() {
        return Err("the PVC is being deleted".into());
    }
    // Only the PVC bound to the volume's PV: the PVC labels on a StorageOS volume are writable
    // through the StorageOS API, and an unbound PVC of the named name may be anyone's.
    match pvc.bound_pv() {
        None => return Err(format!("the PVC is not bound (to PV {:?})", sv.service_name)),
        Some(bound) if bound != sv.service_name => {
            return Err(format!("the PVC is bound to PV {bound:?}, not {:?}", sv.service_name));
        }
        Some(_) => {}
    }
    let uid = pvc.uid().filter(|u| !u.is_empty()).ok_or("the PVC has no UID yet")?;
    Ok(OwnerReference {
        api_version: "v1".into(),
        kind: "PersistentVolumeClaim".into(),
        name: pvc.name_any(),
        uid,
        ..OwnerReference::default()
    })
}

fn meta(sv: &SharedVolume, owner: &OwnerReference) -> ObjectMeta {
    ObjectMeta {
        name: Some(sv.service_name.clone()),
        namespace: Some(sv.namespace.clone()),
        labels: Some([(VOLUME_ID_LABEL.to_string(), sv.id.clone())].into()),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}

fn service_port(sv: &SharedVolume) -> ServicePort {
    ServicePort {
        name: Some(NFS_PORT_NAME.into()),
        port: NFS_PORT,
        protocol: Some(TCP.into()),
        target_port: Some(IntOrString::Int(i32::from(sv.nfs.port()))),
        ..ServicePort::default()
    }
}

/// The Service to create: ClusterIP, no selector (its Endpoints are ours), one NFS port.
pub fn desired_service(sv: &SharedVolume, owner: &OwnerReference) -> Service {
    Service {
        metadata: meta(sv, owner),
        spec: Some(ServiceSpec {
            type_: Some(CLUSTER_IP.into()),
            ports: Some(vec![service_port(sv)]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

fn endpoint_subsets(sv: &SharedVolume) -> Vec<EndpointSubset> {
    vec![EndpointSubset {
        addresses: Some(vec![EndpointAddress {
            ip: sv.nfs.ip().to_string(),
            ..EndpointAddress::default()
        }]),
        not_ready_addresses: None,
        ports: Some(vec![EndpointPort {
            name: Some(NFS_PORT_NAME.into()),
            port: i32::from(sv.nfs.port()),
            protocol: Some(TCP.into()),
            app_protocol: None,
        }]),
    }]
}

/// The Endpoints to create: the NFS server's address and port. Owned by the PVC as well, so it
/// never outlives it (Kubernetes' endpoints controller also deletes it with the Service).
pub fn desired_endpoints(sv: &SharedVolume, owner: &OwnerReference) -> Endpoints {
    Endpoints {
        metadata: meta(sv, owner),
        subsets: Some(endpoint_subsets(sv)),
    }
}

/// A corrected copy of an existing object and what the correction means.
#[derive(Debug, Clone, PartialEq)]
pub struct Fix<K> {
    /// The object to write back (keeps its resourceVersion, ClusterIP and foreign fields).
    pub object: K,
    /// The NFS target moved (failover): Endpoints address/port or the Service targetPort.
    pub target_changed: bool,
    /// Fields someone changed by hand that were put back (`type`, `selector`, `ports`).
    pub restored: Vec<&'static str>,
}

/// Adds the volume-id label and the PVC owner reference when missing; true if it changed.
fn fix_meta(meta: &mut ObjectMeta, sv: &SharedVolume, owner: &OwnerReference) -> bool {
    let mut changed = false;
    let labels = meta.labels.get_or_insert_with(Default::default);
    if labels.get(VOLUME_ID_LABEL) != Some(&sv.id) {
        labels.insert(VOLUME_ID_LABEL.into(), sv.id.clone());
        changed = true;
    }
    let owners = meta.owner_references.get_or_insert_with(Vec::new);
    if !owners.iter().any(|o| o.uid == owner.uid) {
        owners.push(owner.clone());
        changed = true;
    }
    changed
}

fn port_matches(have: &ServicePort, want: &ServicePort) -> bool {
    have.name == want.name
        && have.port == want.port
        && have.protocol.as_deref().unwrap_or(TCP) == TCP
        && have.target_port == want.target_port
        && have.node_port.is_none()
        && have.app_protocol.is_none()
}

/// What to change in an existing Service, or `None` when it is as wanted. The type is put back to
/// ClusterIP too (the Go controller never did, and so rewrote the ports on every poll): a
/// NodePort or LoadBalancer would expose the export outside the cluster, and switching among
/// these types keeps the ClusterIP. The ClusterIP itself is never touched.
pub fn service_fix(current: &Service, sv: &SharedVolume, owner: &OwnerReference) -> Option<Fix<Service>> {
    let mut svc = current.clone();
    let mut changed = fix_meta(&mut svc.metadata, sv, owner);
    let mut restored = Vec::new();
    let mut target_changed = false;
    let spec = svc.spec.get_or_insert_with(ServiceSpec::default);
    if spec.type_.as_deref().unwrap_or(CLUSTER_IP) != CLUSTER_IP {
        spec.type_ = Some(CLUSTER_IP.into());
        // Fields only valid for the other types (the apiserver drops most of them itself).
        spec.external_name = None;
        spec.external_traffic_policy = None;
        spec.health_check_node_port = None;
        spec.allocate_load_balancer_node_ports = None;
        spec.load_balancer_class = None;
        spec.load_balancer_ip = None;
        spec.load_balancer_source_ranges = None;
        restored.push("type");
    }
    if spec.selector.as_ref().is_some_and(|s| !s.is_empty()) {
        spec.selector = None;
        restored.push("selector");
    }
    let want = service_port(sv);
    let ports = spec.ports.get_or_insert_with(Vec::new);
    if !(ports.len() == 1 && port_matches(&ports[0], &want)) {
        let only_target = ports.len() == 1 && {
            let mut retargeted = ports[0].clone();
            retargeted.target_port = want.target_port.clone();
            port_matches(&retargeted, &want)
        };
        if only_target {
            target_changed = true;
        } else {
            restored.push("ports");
        }
        *ports = vec![want];
    }
    changed |= target_changed || !restored.is_empty();
    changed.then_some(Fix {
        object: svc,
        target_changed,
        restored,
    })
}

/// Treats `None` and an empty list alike, as the apiserver does.
fn subsets_equal(have: Option<&Vec<EndpointSubset>>, want: &[EndpointSubset]) -> bool {
    fn some<T: Clone>(v: &Option<Vec<T>>) -> Option<Vec<T>> {
        v.clone().filter(|v| !v.is_empty())
    }
    fn norm(s: &EndpointSubset) -> EndpointSubset {
        EndpointSubset {
            addresses: some(&s.addresses),
            not_ready_addresses: some(&s.not_ready_addresses),
            ports: some(&s.ports).map(|ports: Vec<EndpointPort>| {
                ports
                    .into_iter()
                    .map(|p| EndpointPort {
                        protocol: p.protocol.or_else(|| Some(TCP.into())),
                        ..p
                    })
                    .collect()
            }),
        }
    }
    let have: Vec<EndpointSubset> = have.map(|v| v.iter().map(norm).collect()).unwrap_or_default();
    let want: Vec<EndpointSubset> = want.iter().map(norm).collect();
    have == want
}

/// What to change in existing Endpoints, or `None` when they point at the NFS server already.
pub fn endpoints_fix(current: &Endpoints, sv: &SharedVolume, owner: &OwnerReference) -> Option<Fix<Endpoints>> {
    let mut eps = current.clone();
    let meta_changed = fix_meta(&mut eps.metadata, sv, owner);
    let want = endpoint_subsets(sv);
    let target_changed = !subsets_equal(eps.subsets.as_ref(), &want);
    if target_changed {
        eps.subsets = Some(want);
    }
    (meta_changed || target_changed).then_some(Fix {
        object: eps,
        target_changed,
        restored: Vec::new(),
    })
}

/// Whether a Service read back from the API is exactly as wanted and has its ClusterIP.
pub fn service_ready(svc: &Service, sv: &SharedVolume, owner: &OwnerReference) -> bool {
    service_fix(svc, sv, owner).is_none() && mount_endpoint(svc).is_some()
}

/// Whether Endpoints read back from the API are exactly as wanted.
pub fn endpoints_ready(eps: &Endpoints, sv: &SharedVolume, owner: &OwnerReference) -> bool {
    endpoints_fix(eps, sv, owner).is_none()
}

#[cfg(test)]
mod tests;
