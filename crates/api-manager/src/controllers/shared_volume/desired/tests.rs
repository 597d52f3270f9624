//! Unit tests of the parent module (kept apart so the module reads on its own).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

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

fn pvc(v: serde_json::Value) -> CachedPvc {
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
    let no_uid = pvc(json!({"metadata": {"name": "data", "namespace": "apps"}, "spec": {"volumeName": "pvc-1234"}}));
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
