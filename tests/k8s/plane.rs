//! Integration tier: the local control plane behaves like a real cluster — nodes Ready, pods
//! Running, storage binding, garbage collection, namespace deletion, admission webhooks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use axum::{Json, Router, routing::post};
use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use serde_json::json;
use storageos_operator::runtime::{process::https, process::pki};
use support::{TestNamespace, from_json, wait_for};

const MINUTE: Duration = Duration::from_secs(60);

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn running_pods(api: &Api<Pod>, selector: &str) -> Vec<Pod> {
    api.list(&ListParams::default().labels(selector))
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .collect()
}

fn pod_template(app: &str) -> serde_json::Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "main", "image": "registry.invalid/pause:1"}]}
    })
}

async fn kwok_node_count() -> usize {
    let nodes: Api<Node> = Api::all(support::client().await);
    nodes
        .list(&ListParams::default().labels("type=kwok"))
        .await
        .expect("nodes")
        .items
        .len()
}

#[tokio::test]
async fn fake_nodes_are_ready() {
    let nodes: Api<Node> = Api::all(support::client().await);
    let list = nodes
        .list(&ListParams::default().labels("type=kwok"))
        .await
        .expect("list nodes");
    assert!(
        list.items.len() >= 3,
        "expected at least 3 kwok nodes, got {}",
        list.items.len()
    );
    for node in &list.items {
        assert!(is_ready(node), "node {:?} is not Ready", node.metadata.name);
    }
}

#[tokio::test]
async fn deployment_pods_become_running() {
    let ns = TestNamespace::new("deploy").await;
    let deploy: Deployment = from_json(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": pod_template("web")}
    }));
    ns.api::<Deployment>()
        .create(&PostParams::default(), &deploy)
        .await
        .expect("create deployment");
    let pods = ns.api::<Pod>();
    let running = wait_for("2 Running pods of the Deployment", MINUTE, || async {
        let r = running_pods(&pods, "app=web").await;
        (r.len() == 2).then_some(r)
    })
    .await;
    assert!(
        running
            .iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
    );
    let deploys = ns.api::<Deployment>();
    wait_for("the Deployment to report 2 available replicas", MINUTE, || async {
        let d = deploys.get("web").await.ok()?;
        (d.status?.available_replicas == Some(2)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn daemonset_runs_one_pod_per_node() {
    let ns = TestNamespace::new("ds").await;
    let nodes = kwok_node_count().await;
    let ds: DaemonSet = from_json(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": pod_template("agent")}
    }));
    ns.api::<DaemonSet>()
        .create(&PostParams::default(), &ds)
        .await
        .expect("create daemonset");
    let pods = ns.api::<Pod>();
    let running = wait_for("one Running DaemonSet pod per node", MINUTE, || async {
        let r = running_pods(&pods, "app=agent").await;
        (r.len() >= nodes).then_some(r)
    })
    .await;
    let on_nodes: BTreeSet<_> = running
        .iter()
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .collect();
    assert_eq!(on_nodes.len(), running.len(), "two DaemonSet pods share a node");
    let daemonsets = ns.api::<DaemonSet>();
    wait_for("the DaemonSet status to count every node ready", MINUTE, || async {
        let s = daemonsets.get("agent").await.ok()?.status?;
        (s.number_ready as usize >= nodes && s.number_ready == s.desired_number_scheduled).then_some(())
    })
    .await;
}

#[tokio::test]
async fn statefulset_with_volume_claims_becomes_ready_on_static_pvs() {
    let ns = TestNamespace::new("sts").await;
    let client = ns.client.clone();
    // No CSI driver runs here: bind the claims to pre-created PVs of a no-provisioner class.
    let class = ns.name.clone();
    let sc: StorageClass = from_json(json!({
        "metadata": {"name": class},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "Immediate"
    }));
    let classes: Api<StorageClass> = Api::all(client.clone());
    classes
        .create(&PostParams::default(), &sc)
        .await
        .expect("create storage class");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for i in 0..2 {
        let pv: PersistentVolume = from_json(json!({
            "metadata": {"name": format!("{class}-pv{i}"), "labels": {"test-class": class}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": class,
                "persistentVolumeReclaimPolicy": "Delete",
                "hostPath": {"path": format!("/tmp/{class}-{i}")}
            }
        }));
        pvs.create(&PostParams::default(), &pv).await.expect("create pv");
    }
    let sts: StatefulSet = from_json(json!({
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 2,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{
                    "name": "main", "image": "registry.invalid/db:1",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]
                }]}
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": class,
                    "resources": {"requests": {"storage": "1Gi"}}
                }
            }]
        }
    }));
    ns.api::<StatefulSet>()
        .create(&PostParams::default(), &sts)
        .await
        .expect("create statefulset");
    let statefulsets = ns.api::<StatefulSet>();
    let result = tokio::time::timeout(Duration::from_secs(90), async {
        wait_for(
            "the StatefulSet to have 2 ready replicas",
            Duration::from_secs(90),
            || async {
                let s = statefulsets.get("db").await.ok()?.status?;
                (s.ready_replicas == Some(2)).then_some(())
            },
        )
        .await
    })
    .await;
    let claims = ns
        .api::<PersistentVolumeClaim>()
        .list(&ListParams::default())
        .await
        .expect("claims");
    let bound = claims
        .items
        .iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
        .count();
    // Clean the cluster-scoped objects before asserting, so a failure leaves nothing behind.
    let _ = classes.delete(&class, &DeleteParams::default()).await;
    for i in 0..2 {
        let _ = pvs.delete(&format!("{class}-pv{i}"), &DeleteParams::default()).await;
    }
    assert!(result.is_ok(), "StatefulSet did not become ready");
    assert_eq!(bound, 2, "both claims should be Bound to the static PVs");
}

#[tokio::test]
async fn deleting_an_owner_garbage_collects_its_dependants() {
    let ns = TestNamespace::new("gc").await;
    let cms = ns.api::<ConfigMap>();
    let owner = cms
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": "owner"}})),
        )
        .await
        .expect("owner");
    let uid = owner.metadata.uid.clone().expect("uid");
    let dependant: ConfigMap = from_json(json!({
        "metadata": {
            "name": "dependant",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]
        }
    }));
    cms.create(&PostParams::default(), &dependant).await.expect("dependant");

    let deploy: Deployment = from_json(json!({
        "metadata": {"name": "owned"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "owned"}}, "template": pod_template("owned")}
    }));
    let deploys = ns.api::<Deployment>();
    deploys
        .create(&PostParams::default(), &deploy)
        .await
        .expect("deployment");
    let pods = ns.api::<Pod>();
    wait_for("the Deployment's pod to run", MINUTE, || async {
        (!running_pods(&pods, "app=owned").await.is_empty()).then_some(())
    })
    .await;

    cms.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    deploys
        .delete("owned", &DeleteParams::background())
        .await
        .expect("delete deployment");
    wait_for("the dependant ConfigMap to be collected", MINUTE, || async {
        cms.get_opt("dependant").await.ok()?.is_none().then_some(())
    })
    .await;
    wait_for("the Deployment's pods to be collected", MINUTE, || async {
        pods.list(&ListParams::default().labels("app=owned"))
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn deleting_a_namespace_with_running_pods_completes() {
    let ns = TestNamespace::new("nsdel").await;
    let deploy: Deployment = from_json(json!({
        "metadata": {"name": "app"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "app"}}, "template": pod_template("app")}
    }));
    ns.api::<Deployment>()
        .create(&PostParams::default(), &deploy)
        .await
        .expect("deployment");
    let pods = ns.api::<Pod>();
    wait_for("2 Running pods", MINUTE, || async {
        (running_pods(&pods, "app=app").await.len() == 2).then_some(())
    })
    .await;
    let namespaces: Api<Namespace> = Api::all(ns.client.clone());
    namespaces
        .delete(&ns.name, &DeleteParams::background())
        .await
        .expect("delete namespace");
    wait_for("the namespace to be gone", Duration::from_secs(90), || async {
        namespaces.get_opt(&ns.name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// Adds a label to every Pod it sees.
async fn mutate(Json(review): Json<AdmissionReview<DynamicObject>>) -> Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => return Json(AdmissionResponse::invalid(e.to_string()).into_review()),
    };
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/labels", "value": {"mutated-by": "test-webhook"}}
    ]))
    .expect("patch");
    let response = AdmissionResponse::from(&request)
        .with_patch(patch)
        .expect("patch serialises");
    Json(response.into_review())
}

#[tokio::test]
async fn admission_webhook_on_loopback_mutates_pod_create() {
    let ns = TestNamespace::new("webhook").await;
    let cert =
        pki::issue_serving_cert("test-webhook", &["127.0.0.1".into()], chrono::Duration::hours(1)).expect("cert");
    let slot = https::CertSlot::new(&cert.cert_pem, &cert.key_pem).expect("cert slot");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let router = Router::new().route("/mutate", post(mutate));
    let server = tokio::spawn(https::serve(listener, slot, router, std::future::pending()));

    let name = ns.name.clone();
    let config: MutatingWebhookConfiguration = from_json(json!({
        "metadata": {"name": name},
        "webhooks": [{
            "name": "mutate.test.storageos.com",
            "clientConfig": {
                "url": format!("https://127.0.0.1:{port}/mutate"),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(&cert.ca_pem)
            },
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "failurePolicy": "Fail",
            "timeoutSeconds": 5
        }]
    }));
    let configs: Api<MutatingWebhookConfiguration> = Api::all(ns.client.clone());
    configs
        .create(&PostParams::default(), &config)
        .await
        .expect("create webhook configuration");

    // The apiserver picks the configuration up from a watch; retry until the webhook is called.
    let pods = ns.api::<Pod>();
    let mut attempt = 0;
    let labels = wait_for(
        "a Pod CREATE to be mutated by the webhook",
        Duration::from_secs(30),
        || {
            attempt += 1;
            let pods = pods.clone();
            let pod_name = format!("p{attempt}");
            async move {
                let pod: Pod = from_json(json!({
                    "metadata": {"name": pod_name, "labels": {"original": "yes"}},
                    "spec": {"containers": [{"name": "main", "image": "registry.invalid/pause:1"}]}
                }));
                let created = pods.create(&PostParams::default(), &pod).await.ok()?;
                let labels = created.metadata.labels.unwrap_or_default();
                labels.contains_key("mutated-by").then_some(labels)
            }
        },
    )
    .await;
    let _ = configs.delete(&name, &DeleteParams::default()).await;
    server.abort();
    assert_eq!(labels.get("mutated-by").map(String::as_str), Some("test-webhook"));
    assert!(
        !labels.contains_key("original"),
        "the patch replaced the labels object as sent"
    );
}

/// The tests refuse a cluster that hack/k8s.sh did not start: a kubeconfig without the marker
/// (here a copy of the plane's own, elsewhere) is rejected with a message saying what to do.
#[test]
fn tests_refuse_a_cluster_without_the_plane_marker() {
    support::check_plane_marker(support::kubeconfig_path());
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("kubeconfig");
    std::fs::copy(support::kubeconfig_path(), &copy).unwrap();
    let refused = std::panic::catch_unwind(|| support::check_plane_marker(&copy)).unwrap_err();
    let message = refused.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("refusing to run the integration tests"), "{message}");
    assert!(message.contains("hack/k8s.sh up"), "{message}");
    // A marker naming another apiserver does not count either.
    std::fs::write(dir.path().join(support::PLANE_MARKER), "https://10.1.2.3:6443\n").unwrap();
    assert!(std::panic::catch_unwind(|| support::check_plane_marker(&copy)).is_err());
}
