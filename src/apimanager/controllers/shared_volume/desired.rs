//! The pure half of the shared volume controller: which StorageOS volumes are shared, the
//! Service and Endpoints each one needs, and what to change in the ones that exist. Nothing here
//! talks to an API, so every decision is unit-tested from fixtures.

use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, PersistentVolumeClaim, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

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
pub fn owner(pvc: &PersistentVolumeClaim, sv: &SharedVolume) -> Result<OwnerReference, String> {
    if pvc.metadata.deletion_timestamp.is_some() {
        return Err("the PVC is being deleted".into());
    }
    // Only the PVC bound to the volume's PV: the PVC labels on a StorageOS volume are writable
    // through the StorageOS API, and an unbound PVC of the named name may be anyone's.
    match super::super::bound_pv(pvc) {
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
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use serde_json::json;

    use super::*;

    fn volume(v: serde_json::Value) -> Volume {
        serde_json::from_value(v).unwrap()
    }

    /// A volume as the StorageOS API lists it after a shared attach.
    fn shared_json() -> serde_json::Value {
        json!({
            "id": "6c1f4e0b-2b1e-4a47-9d9b-0c2a8a0b9f11",
            "name": "pvc-1234",
            "namespaceID": "ns-id-1",
            "attachmentType": "nfs",
            "nfs": {"serviceEndpoint": "10.0.0.5:25000", "exports": null},
            "labels": {
                "csi.storage.k8s.io/pv/name": "pvc-1234",
                "csi.storage.k8s.io/pvc/name": "data",
                "csi.storage.k8s.io/pvc/namespace": "apps",
                "storageos.com/replicas": "1"
            },
            "version": "v1"
        })
    }

    fn shared() -> SharedVolume {
        match classify(&volume(shared_json())) {
            Candidate::Shared(sv) => sv,
            other => panic!("expected a shared volume, got {other:?}"),
        }
    }

    fn pvc(v: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(v).unwrap()
    }

    fn owner_ref() -> OwnerReference {
        let claim = pvc(
            json!({"metadata": {"name": "data", "namespace": "apps", "uid": "uid-1"}, "spec": {"volumeName": "pvc-1234"}}),
        );
        owner(&claim, &shared()).unwrap()
    }

    /// The Service as the apiserver returns it after creating [`desired_service`].
    fn served_service() -> Service {
        let mut s = desired_service(&shared(), &owner_ref());
        s.metadata.resource_version = Some("100".into());
        let spec = s.spec.as_mut().unwrap();
        spec.cluster_ip = Some("10.96.12.34".into());
        spec.cluster_ips = Some(vec!["10.96.12.34".into()]);
        spec.session_affinity = Some("None".into());
        spec.internal_traffic_policy = Some("Cluster".into());
        spec.ip_families = Some(vec!["IPv4".into()]);
        spec.ip_family_policy = Some("SingleStack".into());
        s
    }

    #[test]
    fn a_shared_volume_is_recognised_with_its_pvc_and_nfs_target() {
        let sv = shared();
        assert_eq!(sv.service_name, "pvc-1234");
        assert_eq!(sv.pvc_name, "data");
        assert_eq!(sv.namespace, "apps");
        assert_eq!(sv.namespace_id, "ns-id-1");
        assert_eq!(sv.nfs, "10.0.0.5:25000".parse().unwrap());
        assert_eq!(sv.mount_endpoint, None);
        assert_eq!(sv.service_ref(), "apps/pvc-1234");

        let mut published = shared_json();
        published["labels"]["storageos.com/nfs/mount-endpoint"] = json!("10.96.12.34:2049");
        let Candidate::Shared(sv) = classify(&volume(published)) else {
            panic!("still shared")
        };
        assert_eq!(sv.mount_endpoint.as_deref(), Some("10.96.12.34:2049"));
    }

    #[test]
    fn volumes_without_csi_labels_or_nfs_endpoint_are_not_shared() {
        for key in [LABEL_CSI_PV_NAME, LABEL_CSI_PVC_NAME, LABEL_CSI_PVC_NAMESPACE] {
            let mut v = shared_json();
            v["labels"].as_object_mut().unwrap().remove(key);
            assert_eq!(classify(&volume(v)), Candidate::NotShared, "without {key}");
            let mut v = shared_json();
            v["labels"][key] = json!(" ");
            assert_eq!(classify(&volume(v)), Candidate::NotShared, "with an empty {key}");
        }
        for nfs in [
            json!({}),
            json!({"serviceEndpoint": null}),
            json!({"serviceEndpoint": ""}),
        ] {
            let mut v = shared_json();
            v["nfs"] = nfs.clone();
            assert_eq!(classify(&volume(v)), Candidate::NotShared, "nfs {nfs}");
        }
    }

    #[test]
    fn unusable_endpoints_and_names_are_invalid_with_a_reason() {
        for (endpoint, why) in [
            ("10.0.0.5", "not ip:port"),
            ("nfs.example:2049", "not ip:port"),
            ("10.0.0.5:http", "not ip:port"),
            ("10.0.0.5:70000", "not ip:port"),
            ("::1:2049", "not ip:port"),
            ("10.0.0.5:0", "port 0"),
            ("127.0.0.1:2049", "loopback"),
            ("169.254.1.1:2049", "link-local"),
            ("[fe80::1]:2049", "link-local"),
            ("0.0.0.0:2049", "unspecified"),
        ] {
            let mut v = shared_json();
            v["nfs"]["serviceEndpoint"] = json!(endpoint);
            match classify(&volume(v)) {
                Candidate::Invalid { reason } => assert!(reason.contains(why), "{endpoint}: {reason}"),
                other => panic!("{endpoint} must be invalid, got {other:?}"),
            }
        }
        let mut v = shared_json();
        v["labels"]["csi.storage.k8s.io/pv/name"] = json!("static.pv.1");
        assert!(matches!(classify(&volume(v)), Candidate::Invalid { reason } if reason.contains("DNS-1035")));
        let mut v = shared_json();
        v["id"] = json!("not a label value");
        assert!(matches!(classify(&volume(v)), Candidate::Invalid { reason } if reason.contains("label value")));
    }

    #[test]
    fn ipv6_endpoints_are_accepted_and_mount_endpoints_bracketed() {
        let mut v = shared_json();
        v["nfs"]["serviceEndpoint"] = json!("[fd00::5]:25000");
        let Candidate::Shared(sv) = classify(&volume(v)) else {
            panic!("IPv6 is fine")
        };
        assert_eq!(
            desired_endpoints(&sv, &owner_ref()).subsets.unwrap()[0]
                .addresses
                .as_ref()
                .unwrap()[0]
                .ip,
            "fd00::5"
        );
        let mut svc = served_service();
        svc.spec.as_mut().unwrap().cluster_ip = Some("fd00:96::12".into());
        assert_eq!(mount_endpoint(&svc).as_deref(), Some("[fd00:96::12]:2049"));
    }

    #[test]
    fn mount_endpoint_needs_a_real_cluster_ip() {
        assert_eq!(mount_endpoint(&served_service()).as_deref(), Some("10.96.12.34:2049"));
        for ip in [None, Some(""), Some("None")] {
            let mut svc = served_service();
            svc.spec.as_mut().unwrap().cluster_ip = ip.map(str::to_string);
            assert_eq!(mount_endpoint(&svc), None, "{ip:?}");
        }
    }

    #[test]
    fn desired_objects_match_the_go_controller() {
        let sv = shared();
        let o = owner_ref();
        let svc = serde_json::to_value(desired_service(&sv, &o)).unwrap();
        assert_eq!(
            svc,
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {
                    "name": "pvc-1234", "namespace": "apps",
                    "labels": {"storageos.com/volume-id": sv.id},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": "data", "uid": "uid-1"}]
                },
                "spec": {"type": "ClusterIP", "ports": [{"name": "nfs", "port": 2049, "protocol": "TCP", "targetPort": 25000}]}
            })
        );
        let eps = serde_json::to_value(desired_endpoints(&sv, &o)).unwrap();
        assert_eq!(eps["kind"], "Endpoints");
        assert_eq!(eps["metadata"], svc["metadata"]);
        assert_eq!(
            eps["subsets"],
            json!([{"addresses": [{"ip": "10.0.0.5"}], "ports": [{"name": "nfs", "port": 25000, "protocol": "TCP"}]}])
        );
    }

    #[test]
    fn pvc_ownership_rules() {
        let sv = shared();
        let ok = pvc(json!({"metadata": {"name": "data", "namespace": "apps", "uid": "u"},
            "spec": {"volumeName": "pvc-1234"}}));
        assert_eq!(owner(&ok, &sv).unwrap().uid, "u");
        let pending = pvc(json!({"metadata": {"name": "data", "namespace": "apps", "uid": "u"}, "spec": {}}));
        assert!(
            owner(&pending, &sv).unwrap_err().contains("not bound"),
            "an unbound PVC owns nothing"
        );
        let elsewhere = pvc(json!({"metadata": {"name": "data", "namespace": "apps", "uid": "u"},
            "spec": {"volumeName": "pvc-other"}}));
        assert!(owner(&elsewhere, &sv).unwrap_err().contains("pvc-other"));
        let deleting = pvc(json!({"metadata": {"name": "data", "namespace": "apps", "uid": "u",
            "deletionTimestamp": "2024-01-01T00:00:00Z"}}));
        assert!(owner(&deleting, &sv).unwrap_err().contains("deleted"));
        let no_uid =
            pvc(json!({"metadata": {"name": "data", "namespace": "apps"}, "spec": {"volumeName": "pvc-1234"}}));
        assert!(owner(&no_uid, &sv).is_err());
    }

    #[test]
    fn a_served_service_needs_nothing() {
        let svc = served_service();
        assert_eq!(service_fix(&svc, &shared(), &owner_ref()), None);
        assert!(service_ready(&svc, &shared(), &owner_ref()));
        // The apiserver's defaults and foreign labels/owners do not count as differences.
        let mut extra = svc.clone();
        extra
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("team".into(), "a".into());
        extra.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].protocol = None;
        assert_eq!(service_fix(&extra, &shared(), &owner_ref()), None);
    }

    #[test]
    fn failover_retargets_the_service_port_only() {
        let mut sv = shared();
        sv.nfs = "10.0.0.6:25001".parse().unwrap();
        let fix = service_fix(&served_service(), &sv, &owner_ref()).unwrap();
        assert!(fix.target_changed);
        assert!(fix.restored.is_empty());
        let spec = fix.object.spec.as_ref().unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.12.34"), "the ClusterIP is kept");
        assert_eq!(
            spec.ports.as_ref().unwrap()[0].target_port,
            Some(IntOrString::Int(25001))
        );
        assert_eq!(fix.object.metadata.resource_version.as_deref(), Some("100"));
        assert!(service_ready(&fix.object, &sv, &owner_ref()));
    }

    #[test]
    fn hand_edits_to_type_selector_and_ports_are_put_back() {
        let mut svc = served_service();
        let spec = svc.spec.as_mut().unwrap();
        spec.type_ = Some("NodePort".into());
        spec.external_traffic_policy = Some("Cluster".into());
        spec.selector = Some([("app".to_string(), "x".to_string())].into());
        spec.ports = Some(vec![
            ServicePort {
                name: Some("nfs".into()),
                port: 2049,
                node_port: Some(30123),
                target_port: Some(IntOrString::Int(9999)),
                ..ServicePort::default()
            },
            ServicePort {
                name: Some("extra".into()),
                port: 111,
                ..ServicePort::default()
            },
        ]);
        let fix = service_fix(&svc, &shared(), &owner_ref()).unwrap();
        assert_eq!(fix.restored, ["type", "selector", "ports"]);
        assert!(!fix.target_changed);
        let spec = fix.object.spec.as_ref().unwrap();
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(spec.external_traffic_policy, None);
        assert_eq!(spec.selector, None);
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.12.34"));
        assert_eq!(spec.ports.as_ref().unwrap(), &vec![service_port(&shared())]);

        // A renamed port is a restore, not a failover.
        let mut svc = served_service();
        svc.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].name = Some("x".into());
        assert_eq!(service_fix(&svc, &shared(), &owner_ref()).unwrap().restored, ["ports"]);
    }

    #[test]
    fn missing_label_or_owner_is_added_keeping_foreign_owners() {
        let mut svc = served_service();
        svc.metadata.labels = None;
        let foreign = OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "x".into(),
            uid: "other".into(),
            ..OwnerReference::default()
        };
        svc.metadata.owner_references = Some(vec![foreign.clone()]);
        let fix = service_fix(&svc, &shared(), &owner_ref()).unwrap();
        assert!(!fix.target_changed && fix.restored.is_empty());
        assert_eq!(
            fix.object.metadata.labels.as_ref().unwrap()[VOLUME_ID_LABEL],
            shared().id
        );
        assert_eq!(
            fix.object.metadata.owner_references.unwrap(),
            vec![foreign, owner_ref()]
        );
    }

    #[test]
    fn endpoints_follow_the_nfs_server() {
        let sv = shared();
        let o = owner_ref();
        let mut eps = desired_endpoints(&sv, &o);
        eps.metadata.resource_version = Some("7".into());
        assert_eq!(endpoints_fix(&eps, &sv, &o), None);
        // The apiserver may omit the defaulted protocol and empty lists.
        let mut served = eps.clone();
        let subset = &mut served.subsets.as_mut().unwrap()[0];
        subset.ports.as_mut().unwrap()[0].protocol = None;
        subset.not_ready_addresses = Some(vec![]);
        assert!(endpoints_ready(&served, &sv, &o));

        let mut moved = sv.clone();
        moved.nfs = "10.0.0.6:25001".parse().unwrap();
        let fix = endpoints_fix(&eps, &moved, &o).unwrap();
        assert!(fix.target_changed);
        assert_eq!(fix.object.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(fix.object.subsets, Some(endpoint_subsets(&moved)));

        let mut emptied = eps.clone();
        emptied.subsets = None;
        assert!(endpoints_fix(&emptied, &sv, &o).unwrap().target_changed);

        let mut unowned = eps.clone();
        unowned.metadata.owner_references = None;
        let fix = endpoints_fix(&unowned, &sv, &o).unwrap();
        assert!(!fix.target_changed);
        assert_eq!(fix.object.metadata.owner_references, Some(vec![o]));
    }

    #[test]
    fn a_volume_whose_labels_name_another_namespace_is_invalid() {
        let v = volume(shared_json());
        let Candidate::Shared(sv) = classify(&v) else {
            panic!("shared")
        };
        assert!(matches!(classify_in(&v, Some(&sv.namespace)), Candidate::Shared(_)));
        for other in [Some("kube-system"), None] {
            let Candidate::Invalid { reason } = classify_in(&v, other) else {
                panic!("{other:?} accepted")
            };
            assert!(reason.contains("but StorageOS keeps it in"), "{reason}");
        }
    }
}
