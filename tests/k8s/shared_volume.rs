//! Integration tier: the api-manager's shared volume (RWX/NFS) controller on the real control
//! plane with an in-process StorageOS simulator — Service and Endpoints owned by the PVC, the
//! mount endpoint published only once they are verified, failover that keeps the ClusterIP, hand
//! edits put back, PVC deletion cleaning up through the garbage collector, idle write-freedom and
//! StorageOS faults.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, PersistentVolumeClaim, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use storageos_operator::apimanager::controllers::shared_volume;
use storageos_operator::sim::{self, Faults, NodeSeed, SimHandle, Simulator, VolumeSeed};
use storageos_operator::storageos::{LABEL_NFS_MOUNT_ENDPOINT, Volume};
use support::{TestNamespace, from_json, logs, wait_event, wait_for};

const FLAGS: &[&str] = &[
    "-volume-poll-interval",
    "1s",
    "-k8s-create-poll-interval",
    "100ms",
    "-k8s-create-wait-duration",
    "10s",
];
const SETTLE: Duration = Duration::from_secs(30);
/// What the controller polls (every second, `-volume-poll-interval`).
const VOLUME_LISTS: &str = "GET /v2/namespaces/{id}/volumes";
/// The garbage collector and the PVC protection controller take their time.
const GC: Duration = Duration::from_secs(90);

/// A simulator with one node, a test namespace and a PV name unique to it.
async fn setup(prefix: &str) -> (SimHandle, TestNamespace, String) {
    logs();
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    sim.add_node_with(NodeSeed {
        name: "sv-node-a".into(),
        ip: Some("10.0.0.5".into()),
        ..NodeSeed::default()
    })
    .unwrap();
    let ns = TestNamespace::new(prefix).await;
    let pv = format!("pvc-{}", ns.name.rsplit('-').next().unwrap());
    (sim, ns, pv)
}

/// A volume provisioned for PVC `pvc` in the test namespace, NFS-attached at `nfs` if given.
fn seed(sim: &SimHandle, ns: &TestNamespace, pv: &str, pvc: &str, nfs: Option<&str>) -> Volume {
    sim.add_volume(VolumeSeed {
        nfs_service_endpoint: nfs.map(str::to_string),
        ..support::seed::volume(&ns.name, pv, pvc, "sv-node-a")
    })
    .unwrap()
}

async fn create_pvc(ns: &TestNamespace, name: &str, pv: Option<&str>) -> PersistentVolumeClaim {
    let pvc: PersistentVolumeClaim = from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "t-shared-volume-none",
            "volumeName": pv,
            "resources": {"requests": {"storage": "1Gi"}}
        }
    }));
    ns.api::<PersistentVolumeClaim>()
        .create(&PostParams::default(), &pvc)
        .await
        .unwrap()
}

fn volume(sim: &SimHandle, pv: &str) -> Volume {
    sim.volumes().into_iter().find(|v| v.name == pv).unwrap()
}

fn mount_label(sim: &SimHandle, pv: &str) -> Option<String> {
    volume(sim, pv).labels.get(LABEL_NFS_MOUNT_ENDPOINT).map(str::to_string)
}

fn cluster_ip(svc: &Service) -> String {
    svc.spec.as_ref().unwrap().cluster_ip.clone().unwrap()
}

fn target_port(svc: &Service) -> Option<IntOrString> {
    svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0]
        .target_port
        .clone()
}

/// `(ip, port)` of single-address, single-port Endpoints.
fn endpoint_target(eps: &Endpoints) -> (String, i32) {
    let subset = &eps.subsets.as_ref().unwrap()[0];
    (
        subset.addresses.as_ref().unwrap()[0].ip.clone(),
        subset.ports.as_ref().unwrap()[0].port,
    )
}

/// Waits for the mount endpoint label to be `<ClusterIP of the Service>:2049` and returns the
/// Service.
async fn published(sim: &SimHandle, ns: &TestNamespace, pv: &str) -> Service {
    let services = ns.api::<Service>();
    wait_for(
        "the Service's ClusterIP published as the mount endpoint",
        SETTLE,
        || async {
            let svc = services.get_opt(pv).await.ok()??;
            (mount_label(sim, pv)? == format!("{}:2049", cluster_ip(&svc))).then_some(svc)
        },
    )
    .await
}

fn names<K: kube::Resource>(items: &[K]) -> Vec<String> {
    let mut n: Vec<String> = items
        .iter()
        .map(|o| o.meta().name.clone().unwrap_or_default())
        .collect();
    n.sort();
    n
}

#[tokio::test]
async fn shared_volume_service_failover_hand_edits_and_pvc_deletion() {
    let (sim, ns, pv) = setup("shared-vol").await;
    seed(&sim, &ns, &pv, "data", Some("10.0.0.5:25000"));
    // Volumes that must get nothing: no PVC, not NFS-attached, an endpoint Endpoints cannot
    // hold, and a PVC that is not bound to the volume's PV (the PVC labels on a StorageOS volume
    // can be written through the StorageOS API, so they alone never make a PVC the owner).
    seed(&sim, &ns, "pvc-orphan", "missing", Some("10.0.0.5:25001"));
    seed(&sim, &ns, "pvc-plain", "plain", None);
    seed(&sim, &ns, "pvc-loopback", "loopback", Some("127.0.0.1:2049"));
    seed(&sim, &ns, "pvc-unbound", "unbound", Some("10.0.0.5:25003"));
    let pvc = create_pvc(&ns, "data", Some(&pv)).await;
    create_pvc(&ns, "plain", Some("pvc-plain")).await;
    create_pvc(&ns, "loopback", Some("pvc-loopback")).await;
    create_pvc(&ns, "unbound", None).await;

    let ctx = support::api_manager_context(&sim, FLAGS).await;
    let controller = tokio::spawn(shared_volume::run(ctx.clone()));

    // Service and Endpoints owned by the PVC, then the mount endpoint.
    let svc = published(&sim, &ns, &pv).await;
    let ip = cluster_ip(&svc);
    let spec = svc.spec.as_ref().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(spec.selector, None);
    let ports = spec.ports.as_ref().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].name.as_deref(), Some("nfs"));
    assert_eq!(ports[0].port, 2049);
    assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));
    assert_eq!(ports[0].target_port, Some(IntOrString::Int(25000)));
    let vol_id = volume(&sim, &pv).id;
    assert_eq!(svc.labels().get("storageos.com/volume-id"), Some(&vol_id));
    let owners = svc.owner_references();
    assert_eq!(owners.len(), 1);
    assert_eq!(
        (
            owners[0].api_version.as_str(),
            owners[0].kind.as_str(),
            owners[0].name.as_str()
        ),
        ("v1", "PersistentVolumeClaim", "data")
    );
    assert_eq!(Some(&owners[0].uid), pvc.metadata.uid.as_ref());
    let eps = ns.api::<Endpoints>().get(&pv).await.unwrap();
    assert_eq!(endpoint_target(&eps), ("10.0.0.5".into(), 25000));
    assert_eq!(
        eps.subsets.as_ref().unwrap()[0].ports.as_ref().unwrap()[0]
            .name
            .as_deref(),
        Some("nfs")
    );
    assert_eq!(eps.owner_references(), owners, "the Endpoints are owned by the PVC too");
    assert_eq!(eps.labels().get("storageos.com/volume-id"), Some(&vol_id));
    let created = wait_event(&ns.client, &ns.name, &pv, "Created", "").await;
    assert_eq!(created.type_.as_deref(), Some("Normal"));
    assert_eq!(
        created.message.as_deref(),
        Some(format!("Created service for shared volume {}/{pv}", ns.name).as_str())
    );

    // Nothing for the other volumes, even after more polls.
    support::after_polls(&sim, VOLUME_LISTS, 2).await;
    let all_services = ns.api::<Service>().list(&ListParams::default()).await.unwrap().items;
    assert_eq!(names(&all_services), vec![pv.clone()]);
    let all_endpoints = ns.api::<Endpoints>().list(&ListParams::default()).await.unwrap().items;
    assert_eq!(names(&all_endpoints), vec![pv.clone()]);
    for other in ["pvc-orphan", "pvc-plain", "pvc-loopback", "pvc-unbound"] {
        assert_eq!(mount_label(&sim, other), None, "{other}");
    }

    // Idle: no Kubernetes or StorageOS writes while nothing changes.
    let svc_rv = svc.resource_version();
    let eps_rv = ns.api::<Endpoints>().get(&pv).await.unwrap().resource_version();
    let vol_version = volume(&sim, &pv).version;
    sim.clear_requests();
    support::after_polls(&sim, VOLUME_LISTS, 2).await;
    let requests = sim.requests();
    assert!(
        requests.iter().all(|r| r.method == "GET"),
        "only reads while idle: {requests:#?}"
    );
    assert_eq!(ns.api::<Service>().get(&pv).await.unwrap().resource_version(), svc_rv);
    assert_eq!(ns.api::<Endpoints>().get(&pv).await.unwrap().resource_version(), eps_rv);
    assert_eq!(volume(&sim, &pv).version, vol_version);

    // Failover while the API fails a few requests: the target follows, the ClusterIP and the
    // mount endpoint stay.
    sim.clear_requests();
    sim.set_faults(Faults {
        fail_next: 3,
        status: 500,
        ..Faults::default()
    });
    sim.set_nfs_endpoint(&ns.name, &pv, Some("10.0.0.6:25002")).unwrap();
    let eps = wait_for("the Endpoints to follow the NFS server", SETTLE, || async {
        let e = ns.api::<Endpoints>().get(&pv).await.ok()?;
        (endpoint_target(&e) == ("10.0.0.6".into(), 25002)).then_some(e)
    })
    .await;
    assert!(!eps.resource_version().unwrap().is_empty());
    let svc = wait_for("the Service targetPort to follow", SETTLE, || async {
        let s = ns.api::<Service>().get(&pv).await.ok()?;
        (target_port(&s) == Some(IntOrString::Int(25002))).then_some(s)
    })
    .await;
    assert_eq!(cluster_ip(&svc), ip, "failover never changes the ClusterIP");
    assert_eq!(mount_label(&sim, &pv), Some(format!("{ip}:2049")));
    let requests = sim.requests();
    assert_eq!(
        requests.iter().filter(|r| r.injected).count(),
        3,
        "the injected 500s were hit and retried: {requests:#?}"
    );
    assert!(
        requests.iter().all(|r| r.method == "GET"),
        "no mount endpoint write on failover: {requests:#?}"
    );
    let updated = wait_event(&ns.client, &ns.name, &pv, "Updated", "").await;
    assert_eq!(updated.type_.as_deref(), Some("Warning"));
    assert_eq!(
        updated.message.as_deref(),
        Some(format!("Shared volume service target changed {}/{pv}", ns.name).as_str())
    );

    // Hand edits (NodePort, another targetPort, a selector) are put back; the ClusterIP stays.
    ns.api::<Service>()
        .patch(
            &pv,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {
                "type": "NodePort",
                "selector": {"app": "hijack"},
                "ports": [{"name": "nfs", "port": 2049, "protocol": "TCP", "targetPort": 9999}]
            }})),
        )
        .await
        .unwrap();
    let svc = wait_for("the hand-edited Service to be put back", SETTLE, || async {
        let s = ns.api::<Service>().get(&pv).await.ok()?;
        let spec = s.spec.as_ref()?;
        (spec.type_.as_deref() == Some("ClusterIP")
            && spec.selector.is_none()
            && target_port(&s) == Some(IntOrString::Int(25002))
            && spec.ports.as_ref()?[0].node_port.is_none())
        .then_some(s)
    })
    .await;
    assert_eq!(cluster_ip(&svc), ip);
    assert_eq!(
        wait_event(&ns.client, &ns.name, &pv, "Restored", "")
            .await
            .type_
            .as_deref(),
        Some("Warning")
    );

    // The PVC goes: the garbage collector removes the Service and the Endpoints, and the
    // controller does not bring them back although the volume is still shared.
    ns.api::<PersistentVolumeClaim>()
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the Service and Endpoints to go with the PVC", GC, || async {
        let svc = ns.api::<Service>().get_opt(&pv).await.ok()?;
        let eps = ns.api::<Endpoints>().get_opt(&pv).await.ok()?;
        (svc.is_none() && eps.is_none()).then_some(())
    })
    .await;
    support::after_polls(&sim, VOLUME_LISTS, 2).await;
    assert!(ns.api::<Service>().get_opt(&pv).await.unwrap().is_none());
    assert!(ns.api::<Endpoints>().get_opt(&pv).await.unwrap().is_none());
    assert!(!controller.is_finished(), "the controller keeps running");
    controller.abort();
}

#[tokio::test]
async fn api_outage_late_pvc_publish_retries_and_deleted_service() {
    let (sim, ns, pv) = setup("shared-vol-faults").await;
    seed(&sim, &ns, &pv, "late", Some("192.0.2.10:24000"));

    // StorageOS answers 503 for a while: the controller keeps polling.
    let ctx = support::api_manager_context(&sim, FLAGS).await;
    sim.set_faults(Faults {
        fail_next: 4,
        status: 503,
        ..Faults::default()
    });
    let controller = tokio::spawn(shared_volume::run(ctx.clone()));
    wait_for("the injected outage to be consumed", SETTLE, || async {
        (sim.faults().fail_next == 0).then_some(())
    })
    .await;
    // No PVC yet: no Service, after two polls that saw the volume.
    support::after_polls(&sim, VOLUME_LISTS, 2).await;
    assert!(ns.api::<Service>().get_opt(&pv).await.unwrap().is_none());
    assert_eq!(mount_label(&sim, &pv), None);

    // The PVC appears, and the first two mount endpoint writes fail: retried next poll.
    sim.clear_requests();
    sim.set_faults(Faults {
        fail_next: 2,
        status: 500,
        path: Some("/nfs/mount-endpoint".into()),
        ..Faults::default()
    });
    create_pvc(&ns, "late", Some(&pv)).await;
    let svc = published(&sim, &ns, &pv).await;
    let puts: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.path.ends_with("/nfs/mount-endpoint"))
        .collect();
    assert_eq!(puts.len(), 3, "two failed writes, then one that worked: {puts:#?}");
    assert!(puts[..2].iter().all(|r| r.injected) && puts[2].status == 200);
    assert_eq!(
        endpoint_target(&ns.api::<Endpoints>().get(&pv).await.unwrap()),
        ("192.0.2.10".into(), 24000)
    );

    // The NFS server stops (no endpoint): the Service and Endpoints are kept as they are.
    sim.set_nfs_endpoint(&ns.name, &pv, None).unwrap();
    support::after_polls(&sim, VOLUME_LISTS, 2).await;
    let kept = ns.api::<Service>().get(&pv).await.unwrap();
    assert_eq!(kept.resource_version(), svc.resource_version());
    assert!(ns.api::<Endpoints>().get_opt(&pv).await.unwrap().is_some());

    // Back, and then someone deletes the Service: it is recreated and its (new) ClusterIP is
    // published.
    sim.set_nfs_endpoint(&ns.name, &pv, Some("192.0.2.10:24000")).unwrap();
    let old_uid = svc.uid();
    ns.api::<Service>().delete(&pv, &DeleteParams::default()).await.unwrap();
    let again = wait_for("the deleted Service to be recreated and published", SETTLE, || async {
        let s = ns.api::<Service>().get_opt(&pv).await.ok()??;
        (s.uid() != old_uid && mount_label(&sim, &pv)? == format!("{}:2049", cluster_ip(&s))).then_some(s)
    })
    .await;
    let eps = wait_for("the Endpoints to be there", SETTLE, || async {
        ns.api::<Endpoints>().get_opt(&pv).await.ok()?
    })
    .await;
    assert_eq!(endpoint_target(&eps), ("192.0.2.10".into(), 24000));
    assert_eq!(target_port(&again), Some(IntOrString::Int(24000)));
    assert!(!controller.is_finished());
    controller.abort();
}
