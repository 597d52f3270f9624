//! Integration tier: the StorageOSCluster reconciler on the real control plane with the
//! StorageOS simulator — install, Ready, live edits, drift repair, one active cluster, pause,
//! idle write-freedom and delete.
//!
//! One scenario, run in order: only one cluster may be active per Kubernetes cluster.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Namespace, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service,
};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use prometheus_client::registry::Registry;
use serde_json::json;
use storageos_operator::cluster::{self, Context};
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::runtime::kube::metrics::ReconcileMetrics;
use storageos_operator::runtime::kube::trusted::TrustedNamespaces;
use storageos_operator::sim::{self, Simulator};
use support::{TestNamespace, from_json, wait_for};

const SETTLE: Duration = Duration::from_secs(60);

fn cluster_json(ns: &str, name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "secretRefName": "storageos-api", "secretRefNamespace": ns,
            "namespace": ns, "kvBackend": {"address": support::KV_ADDRESS},
            "disableTelemetry": true,
            "service": {"annotations": {"example.com/note": "one"}}
        }
    })
}

/// The cluster controller's context, talking to `sim`.
fn context(client: &kube::Client, sim: &sim::SimHandle) -> Arc<Context> {
    context_with_metrics(client, sim, &mut Registry::default())
}

/// The operator's context, its reconcile metrics registered in `registry`.
fn context_with_metrics(client: &kube::Client, sim: &sim::SimHandle, registry: &mut Registry) -> Arc<Context> {
    Arc::new(Context::new(
        client.clone(),
        support::operator::operator_config(sim.url(), None),
        ReconcileMetrics::register(registry),
        None,
    ))
}

async fn secret(ns: &TestNamespace) {
    support::create_api_secret(ns, "storageos", "storageos").await;
}

fn status_of(c: &StorageOSCluster) -> (String, String, bool) {
    let s = c.status.clone().unwrap_or_default();
    let ready = s
        .conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    (s.phase.unwrap_or_default(), s.ready.unwrap_or_default(), ready)
}

fn cluster_puts(sim: &sim::SimHandle) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path.ends_with("/cluster"))
        .count()
}

/// Writes the simulator saw, apart from logging in.
fn api_writes(sim: &sim::SimHandle) -> Vec<String> {
    sim.requests()
        .iter()
        .filter(|r| r.method != "GET" && !r.path.contains("/auth/"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

/// How many StorageOSCluster reconciles have finished, by the operator's own metric.
fn reconciles(registry: &Registry) -> u64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with("controller_runtime_reconcile_total{") && l.contains(r#"controller="storageoscluster""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// What only a write by the operator changes: the generation (spec) and the operator's own
/// managedFields entry. Status writes by Kubernetes controllers (a Deployment's status, say)
/// change the resourceVersion but neither of these.
fn operator_version(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    let ours: Vec<_> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some("storageos-operator"))
        .map(|m| {
            (
                m.operation.clone(),
                m.subresource.clone(),
                m.time.as_ref().map(|t| t.0.to_string()),
                m.fields_v1.as_ref().map(|f| f.0.to_string()),
            )
        })
        .collect();
    format!("generation {:?}, operator fields {ours:?}", meta.generation)
}

/// [`operator_version`] of every object labelled for the cluster, and of the cluster itself.
async fn versions(client: &kube::Client, c: &StorageOSCluster) -> BTreeMap<String, String> {
    let selector = cluster::ownership::children_selector(c);
    let mut out = BTreeMap::new();
    for k in cluster::ownership::owned_kinds() {
        let (group, version) = k.api_version.split_once('/').unwrap_or(("", k.api_version));
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, k.kind));
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let list = match api.list_metadata(&ListParams::default().labels(&selector)).await {
            Ok(list) => list,
            // ServiceMonitor: its CRD is not installed on the plane, so it has no objects.
            Err(kube::Error::Api(e)) if e.code == 404 && k.kind == "ServiceMonitor" => continue,
            Err(e) => panic!("cannot list {} to compare versions: {e}", k.kind),
        };
        for o in list.items {
            let m = &o.metadata;
            let key = format!("{} {}/{}", k.kind, o.namespace().unwrap_or_default(), o.name_any());
            out.insert(key, operator_version(m));
        }
    }
    let api: Api<StorageOSCluster> = Api::namespaced(client.clone(), &c.metadata.namespace.clone().unwrap());
    let live = api.get(&c.metadata.name.clone().unwrap()).await.unwrap();
    out.insert("StorageOSCluster".into(), operator_version(&live.metadata));
    out
}

#[tokio::test]
async fn cluster_lifecycle_on_the_real_control_plane() {
    let _lock = support::cluster_lock();
    let ns = TestNamespace::new("cluster").await;
    let client = ns.client.clone();
    support::install_crds(&client).await;

    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let _sync = sim.sync_with_kubernetes(client.clone());
    // The operator acts as its ServiceAccount, with the RBAC of deploy/operator.yaml.
    let mut registry = Registry::default();
    let operator = tokio::spawn(cluster::run(
        context_with_metrics(&support::operator_client().await, &sim, &mut registry),
        std::future::pending(),
    ));

    // Install.
    secret(&ns).await;
    let clusters: Api<StorageOSCluster> = ns.api();
    let c: StorageOSCluster = from_json(cluster_json(&ns.name, "storageos"));
    clusters.create(&PostParams::default(), &c).await.unwrap();
    let running = wait_for("the cluster to be 3/3 Running and Ready", SETTLE, || async {
        let c = clusters.get("storageos").await.ok()?;
        let (phase, ready, cond) = status_of(&c);
        (phase == "Running" && ready == "3/3" && cond).then_some(c)
    })
    .await;
    assert_eq!(running.finalizers(), [cluster::FINALIZER]);

    // Every operand exists with the right fields.
    let ds = ns.api::<DaemonSet>().get("storageos-daemonset").await.unwrap();
    let ds_spec = ds.spec.clone().unwrap();
    assert_eq!(ds_spec.update_strategy.unwrap().type_.as_deref(), Some("OnDelete"));
    assert!(
        ds.metadata
            .owner_references
            .unwrap_or_default()
            .iter()
            .any(|o| o.kind == "StorageOSCluster")
    );
    let svc = ns.api::<Service>().get("storageos").await.unwrap();
    assert_eq!(svc.metadata.annotations.unwrap()["example.com/note"], "one");
    let am = ns.api::<Deployment>().get("storageos-api-manager").await.unwrap();
    let am_container = am.spec.unwrap().template.spec.unwrap().containers.remove(0);
    assert_eq!(am_container.image.as_deref(), Some(support::operator::OPERATOR_IMAGE));
    assert!(
        am_container
            .args
            .unwrap_or_default()
            .iter()
            .chain(am_container.command.iter().flatten())
            .any(|a| a == "api-manager")
    );
    for name in ["storageos-csi-helper", "storageos-scheduler"] {
        assert!(
            ns.api::<Deployment>().get_opt(name).await.unwrap().is_some(),
            "Deployment {name} missing"
        );
    }
    assert!(
        Api::<StorageClass>::all(client.clone())
            .get_opt("fast")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        Api::<CSIDriver>::all(client.clone())
            .get_opt("csi.storageos.com")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .get_opt("storageos-mutating-webhook")
            .await
            .unwrap()
            .is_some()
    );
    // Telemetry differs from the control plane's default: exactly one settings PUT.
    wait_for("the cluster settings PUT", Duration::from_secs(20), || async {
        (cluster_puts(&sim) == 1).then_some(())
    })
    .await;

    // Idle: once it has settled (no write by the operator for 5 s), the operator writes nothing
    // to any kind for 30 s — counted by its own identity in the apiserver's audit log — and the
    // objects it owns keep their resourceVersions.
    use support::identity::{OPERATOR, writes_by};
    wait_for("the operator to settle", SETTLE, || async {
        let since = chrono::Utc::now() - chrono::Duration::seconds(5);
        writes_by(OPERATOR, since).is_empty().then_some(())
    })
    .await;
    let idle_from = chrono::Utc::now();
    let before = versions(&client, &running).await;
    let writes_before = api_writes(&sim).len();
    // Evidence that the operator ran in the window: a whole pass, nudged by a change that asks
    // for nothing (an annotation of the test's own), not a wait that might hold no pass at all.
    let passes = reconciles(&registry);
    let nudge = json!({"metadata": {"annotations": {"example.com/nudge": "idle"}}});
    clusters
        .patch("storageos", &PatchParams::default(), &Patch::Merge(&nudge))
        .await
        .unwrap();
    wait_for("a pass over the idle cluster", SETTLE, || async {
        (reconciles(&registry) > passes).then_some(())
    })
    .await;
    support::identity::audit_flushed(OPERATOR).await;
    assert_eq!(
        writes_by(OPERATOR, idle_from),
        [] as [String; 0],
        "the operator wrote while the cluster was idle"
    );
    let after = versions(&client, &running).await;
    assert_eq!(before, after, "objects changed while the cluster was idle");
    assert_eq!(
        api_writes(&sim)[writes_before..],
        [] as [String; 0],
        "StorageOS API writes while idle"
    );

    // Edits propagate within seconds: service annotations, tolerations, debug.
    let edit = json!({"spec": {
        "service": {"annotations": {"example.com/note": "two"}},
        "debug": true,
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "storage", "effect": "NoSchedule"}]
    }});
    clusters
        .patch("storageos", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    let svcs = ns.api::<Service>();
    wait_for("the Service annotation to change", Duration::from_secs(15), || async {
        let s = svcs.get("storageos").await.ok()?;
        (s.metadata.annotations?.get("example.com/note")? == "two").then_some(())
    })
    .await;
    let dss = ns.api::<DaemonSet>();
    wait_for(
        "the toleration on the node DaemonSet",
        Duration::from_secs(15),
        || async {
            let d = dss.get("storageos-daemonset").await.ok()?;
            let tols = d.spec?.template.spec?.tolerations?;
            tols.iter().any(|t| t.key.as_deref() == Some("dedicated")).then_some(())
        },
    )
    .await;
    let cms = ns.api::<ConfigMap>();
    wait_for(
        "debug logging in the node ConfigMap",
        Duration::from_secs(15),
        || async {
            let cm = cms.get("storageos-node-config").await.ok()?;
            (cm.data?.get("LOG_LEVEL")? == "debug").then_some(())
        },
    )
    .await;
    wait_for(
        "the debug log level pushed to StorageOS",
        Duration::from_secs(20),
        || async { (cluster_puts(&sim) == 2).then_some(()) },
    )
    .await;
    assert_eq!(sim.cluster().log_level, "debug");

    // A deleted child is recreated.
    cms.delete("storageos-node-config", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the node ConfigMap to be recreated",
        Duration::from_secs(15),
        || async { cms.get_opt("storageos-node-config").await.ok()?.map(|_| ()) },
    )
    .await;

    // A second cluster waits, with the Go operator's event.
    let ns2 = TestNamespace::new("cluster2").await;
    secret(&ns2).await;
    let clusters2: Api<StorageOSCluster> = ns2.api();
    clusters2
        .create(&PostParams::default(), &from_json(cluster_json(&ns2.name, "second")))
        .await
        .unwrap();
    wait_for("the second cluster to be Pending", Duration::from_secs(20), || async {
        let c = clusters2.get("second").await.ok()?;
        (status_of(&c).0 == "Pending").then_some(())
    })
    .await;
    let events = ns2.api::<Event>();
    wait_for("the FailedCreation event", Duration::from_secs(10), || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("FailedCreation")
                    && e.message.as_deref() == Some("can't create more than one storageos cluster")
            })
            .then_some(())
    })
    .await;

    // Pause stops repairs; unpausing resumes them.
    clusters
        .patch(
            "storageos",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"pause": true}})),
        )
        .await
        .unwrap();
    let paused = wait_for("the Paused condition", Duration::from_secs(30), || async {
        let c = clusters.get("storageos").await.ok()?;
        let cond = c.status?.conditions?.into_iter().find(|c| c.type_ == "Paused")?;
        (cond.status == "True" && cond.reason == "SpecPause").then_some(cond)
    })
    .await;
    assert!(paused.message.contains("spec.pause is true"), "{}", paused.message);
    // The deletion triggers a reconcile (the operator watches its children); once that
    // reconcile has finished, the Service must still be gone.
    // A reconcile may still be in flight (the Paused write itself triggers one): start counting
    // once the count holds still.
    let before = wait_for(
        "the operator to finish its reconciles",
        Duration::from_secs(30),
        || async {
            let n = reconciles(&registry);
            tokio::time::sleep(Duration::from_secs(1)).await;
            (reconciles(&registry) == n).then_some(n)
        },
    )
    .await;
    svcs.delete("storageos", &DeleteParams::default()).await.unwrap();
    wait_for("the reconcile of the deletion", Duration::from_secs(30), || async {
        (reconciles(&registry) > before).then_some(())
    })
    .await;
    assert!(
        svcs.get_opt("storageos").await.unwrap().is_none(),
        "a paused cluster was repaired"
    );
    clusters
        .patch(
            "storageos",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"pause": false}})),
        )
        .await
        .unwrap();
    wait_for(
        "the Service to be recreated after unpausing",
        Duration::from_secs(15),
        || async { svcs.get_opt("storageos").await.ok()?.map(|_| ()) },
    )
    .await;
    wait_for("Paused=False after unpausing", Duration::from_secs(30), || async {
        let c = clusters.get("storageos").await.ok()?;
        let cond = c.status?.conditions?.into_iter().find(|c| c.type_ == "Paused")?;
        (cond.status == "False").then_some(())
    })
    .await;

    // Delete is held while a pod uses a StorageOS volume, naming it; force-delete overrides.
    let pv_name = format!("{}-pv", ns.name);
    let pv: PersistentVolume = from_json(json!({
        "metadata": {"name": pv_name},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": "csi.storageos.com", "volumeHandle": "vol-1"},
            "claimRef": {"namespace": ns.name, "name": "data"}
        }
    }));
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    pvs.create(&PostParams::default(), &pv).await.unwrap();
    let pvc: PersistentVolumeClaim = from_json(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv_name,
                 "resources": {"requests": {"storage": "1Gi"}}}
    }));
    ns.api::<PersistentVolumeClaim>()
        .create(&PostParams::default(), &pvc)
        .await
        .unwrap();
    let app: Pod = from_json(json!({
        "metadata": {"name": "app"},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/app:1"}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
    }));
    ns.api::<Pod>().create(&PostParams::default(), &app).await.unwrap();
    let selector = cluster::ownership::children_selector(&running);
    clusters.delete("storageos", &DeleteParams::default()).await.unwrap();
    let held = wait_for(
        "deletion to be held by the pod using a StorageOS volume",
        Duration::from_secs(20),
        || async {
            let c = clusters.get("storageos").await.ok()?;
            let cond = c.status?.conditions?.into_iter().find(|c| c.type_ == "Ready")?;
            (cond.reason == "DeletionBlocked").then_some(cond.message)
        },
    )
    .await;
    assert!(held.contains(&format!("{}/app", ns.name)), "{held}");
    assert!(
        ns.api::<DaemonSet>()
            .get_opt("storageos-daemonset")
            .await
            .unwrap()
            .is_some(),
        "objects deleted while held"
    );
    let force = json!({"metadata": {"annotations": {cluster::FORCE_DELETE_ANNOTATION: "true"}}});
    clusters
        .patch("storageos", &PatchParams::default(), &Patch::Merge(&force))
        .await
        .unwrap();

    // Delete: every object goes, the namespace stays, and the pending cluster takes over.
    wait_for("the cluster to be deleted", Duration::from_secs(30), || async {
        clusters.get_opt("storageos").await.ok()?.is_none().then_some(())
    })
    .await;
    wait_for(
        "every object of the cluster to be gone",
        Duration::from_secs(30),
        || async {
            let left = versions_by_selector(&client, &selector).await;
            left.is_empty().then_some(())
        },
    )
    .await;
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt(&ns.name)
            .await
            .unwrap()
            .is_some(),
        "the namespace was deleted"
    );
    wait_for("the pending cluster to take over", Duration::from_secs(20), || async {
        let c = clusters2.get("second").await.ok()?;
        (status_of(&c).0 != "Pending").then_some(())
    })
    .await;
    // The app goes, so the second cluster's delete is not held.
    let pods = ns.api::<Pod>();
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    pods.delete("app", &now).await.unwrap();
    ns.api::<PersistentVolumeClaim>()
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the app pod to be gone", Duration::from_secs(20), || async {
        pods.get_opt("app").await.ok()?.is_none().then_some(())
    })
    .await;
    clusters2
        .patch(
            "second",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"pause": true}})),
        )
        .await
        .unwrap();
    clusters2.delete("second", &DeleteParams::default()).await.unwrap();
    wait_for("the second cluster to be deleted", Duration::from_secs(30), || async {
        clusters2.get_opt("second").await.ok()?.is_none().then_some(())
    })
    .await;
    let _ = pvs.delete(&pv_name, &DeleteParams::default()).await;
    operator.abort();
}

async fn versions_by_selector(client: &kube::Client, selector: &str) -> Vec<String> {
    let mut out = Vec::new();
    for k in cluster::ownership::owned_kinds() {
        let (group, version) = k.api_version.split_once('/').unwrap_or(("", k.api_version));
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, k.kind));
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        if let Ok(list) = api.list_metadata(&ListParams::default().labels(selector)).await {
            out.extend(
                list.items
                    .into_iter()
                    .map(|o| format!("{} {}", k.kind, o.metadata.name.unwrap_or_default())),
            );
        }
    }
    out
}

/// A cluster with a 70-character name (its label values are hashed) installs; when
/// its etcd TLS source Secret goes missing, the copy the node pods mount is kept (no apply, no
/// prune) and the cluster says why; deleting the cluster finishes (the finalizer's selector is
/// valid).
#[tokio::test]
async fn missing_etcd_tls_source_never_prunes_the_copy_and_long_names_delete() {
    let _lock = support::cluster_lock();
    let ns = TestNamespace::new("etcd-tls").await;
    let client = ns.client.clone();
    support::install_crds(&client).await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let operator = tokio::spawn(cluster::run(
        context(&support::operator_client().await, &sim),
        std::future::pending(),
    ));
    secret(&ns).await;
    let etcd: Secret = from_json(json!({
        "metadata": {"name": "etcd-client-tls"}, "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": "cert", "tls.key": "key", "etcd-client-ca.crt": "ca"}
    }));
    let secrets = ns.api::<Secret>();
    secrets.create(&PostParams::default(), &etcd).await.unwrap();
    let name = format!("storageos-{}", "x".repeat(60));
    let mut c = cluster_json(&ns.name, &name);
    c["spec"]["kvBackend"] = json!({"address": "https://etcd.example:2379"});
    c["spec"]["tlsEtcdSecretRefName"] = json!("etcd-client-tls");
    c["spec"]["tlsEtcdSecretRefNamespace"] = json!(ns.name);
    let clusters: Api<StorageOSCluster> = ns.api();
    clusters.create(&PostParams::default(), &from_json(c)).await.unwrap();
    let copy = wait_for("the etcd TLS copy", SETTLE, || async {
        secrets.get_opt("storageos-tls-etcd").await.ok()?
    })
    .await;
    wait_for("the node DaemonSet", SETTLE, || async {
        ns.api::<DaemonSet>().get_opt("storageos-daemonset").await.ok()?
    })
    .await;
    let labels = copy.metadata.labels.clone().unwrap();
    assert!(labels["storageos.com/cluster"].len() <= 63, "{labels:?}");
    // Only the documented client keys are copied, and the copy is Opaque whatever the source.
    assert_eq!(copy.type_.as_deref(), Some("Opaque"));
    let keys: Vec<String> = copy.data.clone().unwrap_or_default().into_keys().collect();
    assert_eq!(keys, ["etcd-client-ca.crt"]);

    secrets
        .delete("etcd-client-tls", &DeleteParams::default())
        .await
        .unwrap();
    let reason = wait_for("the cluster to say the etcd Secret is missing", SETTLE, || async {
        let c = clusters.get(&name).await.ok()?;
        let conds = c.status?.conditions?;
        conds
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.status == "False" && c.reason == "EtcdTLSSecretNotFound")
    })
    .await;
    assert!(reason.message.contains("etcd-client-tls"), "{}", reason.message);
    let kept = secrets.get_opt("storageos-tls-etcd").await.unwrap();
    assert_eq!(
        kept.and_then(|s| s.metadata.uid),
        copy.metadata.uid,
        "the copy the node pods mount was pruned"
    );

    // Deleting the cluster completes: its finalizer finds and removes the children.
    clusters.delete(&name, &DeleteParams::default()).await.unwrap();
    wait_for("the cluster to be deleted", SETTLE, || async {
        clusters.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(
        ns.api::<DaemonSet>()
            .get_opt("storageos-daemonset")
            .await
            .unwrap()
            .is_none()
    );
    operator.abort();
}

/// The cluster lock, two fresh namespaces and the admin client, the CRDs installed.
async fn two_namespaces(a: &str, b: &str) -> (support::ClusterLock, TestNamespace, TestNamespace, kube::Client) {
    let lock = support::cluster_lock();
    let (a, b) = (TestNamespace::new(a).await, TestNamespace::new(b).await);
    let client = a.client.clone();
    support::install_crds(&client).await;
    (lock, a, b, client)
}

/// Only clusters in trusted namespaces are honoured. A cluster in another namespace (created
/// first, so it would otherwise be the active one, and without admission, which refuses it) is
/// never even read: the operator watches only the trusted namespaces, so it gets no status, no
/// event, and nothing is rendered for it: no DaemonSet, no binding naming its namespace. A
/// trusted cluster whose credentials reference moves to that namespace gets Ready=False with
/// reason SecretNamespaceNotAllowed, and nothing is applied or pruned.
#[tokio::test]
async fn clusters_outside_trusted_namespaces_and_their_secret_refs_are_refused() {
    use storageos_operator::reasons::NAMESPACE_NOT_ALLOWED;

    let (_lock, ns, tenant, client) = two_namespaces("trusted", "tenant").await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let ctx = Context::new(
        support::operator_client().await,
        support::operator::operator_config(sim.url(), None),
        ReconcileMetrics::register(&mut Registry::default()),
        None,
    )
    .with_trusted_namespaces(TrustedNamespaces::only(&ns.name));
    let operator = tokio::spawn(cluster::run(Arc::new(ctx), std::future::pending()));
    secret(&ns).await;
    secret(&tenant).await;

    let tenants: Api<StorageOSCluster> = tenant.api();
    tenants
        .create(
            &PostParams::default(),
            &from_json(cluster_json(&tenant.name, "storageos")),
        )
        .await
        .unwrap();

    // The trusted cluster becomes the active one and is rendered: the operator has run since the
    // tenant's cluster was created, and left it untouched.
    let clusters: Api<StorageOSCluster> = ns.api();
    clusters
        .create(&PostParams::default(), &from_json(cluster_json(&ns.name, "storageos")))
        .await
        .unwrap();
    let ds = wait_for("the trusted cluster's node DaemonSet", SETTLE, || async {
        ns.api::<DaemonSet>().get_opt("storageos-daemonset").await.ok()?
    })
    .await;
    let untouched = tenants.get("storageos").await.unwrap();
    assert!(
        untouched.status.is_none() && untouched.finalizers().is_empty(),
        "the operator wrote to a cluster outside its namespaces: {:?}",
        untouched.metadata
    );

    // Its credentials reference moved to the tenant's namespace: refused, nothing changes.
    clusters
        .patch(
            "storageos",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"secretRefNamespace": tenant.name}})),
        )
        .await
        .unwrap();
    let refused = wait_for("the secret reference to be refused", SETTLE, || async {
        let c = clusters.get("storageos").await.ok()?;
        c.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.status == "False" && c.reason == "SecretNamespaceNotAllowed")
    })
    .await;
    assert!(
        refused.message.contains("spec.secretRefNamespace"),
        "{}",
        refused.message
    );
    let kept = ns.api::<DaemonSet>().get_opt("storageos-daemonset").await.unwrap();
    assert_eq!(
        kept.and_then(|d| d.metadata.uid),
        ds.metadata.uid,
        "the DaemonSet was pruned or replaced"
    );

    // Nothing was ever rendered for the tenant.
    assert!(
        tenant
            .api::<DaemonSet>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let naming_tenant = support::cluster_role_bindings_naming(&client, &tenant.name).await;
    assert!(naming_tenant.is_empty(), "{naming_tenant:?}");
    let events = support::events(
        &client,
        &tenant.name,
        Some("StorageOSCluster"),
        "storageos",
        NAMESPACE_NOT_ALLOWED.name(),
    )
    .await;
    assert!(events.is_empty(), "{events:?}");

    // The operator restarted with the tenant's namespace on --secret-namespaces: the reference
    // is honoured (read there, nothing else), and the cluster is reconciled again.
    operator.abort();
    let ctx = Context::new(
        support::operator_client().await,
        support::operator::operator_config(sim.url(), None),
        ReconcileMetrics::register(&mut Registry::default()),
        None,
    )
    .with_trusted_namespaces(TrustedNamespaces::only(&ns.name))
    .with_secret_namespaces(tenant.name.parse().unwrap());
    let operator = tokio::spawn(cluster::run(Arc::new(ctx), std::future::pending()));
    wait_for(
        "the Secret in a --secret-namespaces namespace to be accepted",
        SETTLE,
        || async {
            let c = clusters.get("storageos").await.ok()?;
            let ready = c.status?.conditions?.into_iter().find(|c| c.type_ == "Ready")?;
            (ready.reason != "SecretNamespaceNotAllowed").then_some(())
        },
    )
    .await;

    clusters.delete("storageos", &DeleteParams::default()).await.unwrap();
    wait_for("the trusted cluster to be deleted", SETTLE, || async {
        clusters.get_opt("storageos").await.ok()?.is_none().then_some(())
    })
    .await;
    tenants.delete("storageos", &DeleteParams::default()).await.unwrap();
    wait_for("the tenant's cluster to be deleted", SETTLE, || async {
        tenants.get_opt("storageos").await.ok()?.is_none().then_some(())
    })
    .await;
    operator.abort();
}

/// A cluster whose namespace stopped being watched and is then deleted leaves nothing behind:
/// its cluster-scoped children (the ClusterRoleBindings naming its operand ServiceAccounts
/// among them) go with it, as they would had it stayed watched.
#[tokio::test]
async fn a_cluster_deleted_after_its_namespace_stopped_being_watched_leaves_nothing_behind() {
    let _lock = support::cluster_lock();
    let ns = TestNamespace::new("trust-lost").await;
    let client = ns.client.clone();
    support::install_crds(&client).await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let _sync = sim.sync_with_kubernetes(client.clone());
    let operator_client = support::operator_client().await;
    let watching = |namespace: &str| {
        let ctx = Context::new(
            operator_client.clone(),
            support::operator::operator_config(sim.url(), None),
            ReconcileMetrics::register(&mut Registry::default()),
            None,
        )
        .with_trusted_namespaces(TrustedNamespaces::only(namespace));
        tokio::spawn(cluster::run(Arc::new(ctx), std::future::pending()))
    };
    let operator = watching(&ns.name);
    secret(&ns).await;
    let clusters: Api<StorageOSCluster> = ns.api();
    clusters
        .create(&PostParams::default(), &from_json(cluster_json(&ns.name, "storageos")))
        .await
        .unwrap();
    wait_for("the cluster's ClusterRoleBindings", SETTLE, || async {
        let named = support::cluster_role_bindings_naming(&client, &ns.name).await;
        (!named.is_empty()).then_some(())
    })
    .await;

    // The operator restarts watching another namespace only; then the cluster is deleted.
    operator.abort();
    let _ = operator.await;
    let operator = watching("storageos-operator");
    clusters.delete("storageos", &DeleteParams::default()).await.unwrap();
    wait_for("the cluster to be deleted", SETTLE, || async {
        clusters.get_opt("storageos").await.ok()?.is_none().then_some(())
    })
    .await;
    let named = support::cluster_role_bindings_naming(&client, &ns.name).await;
    assert!(named.is_empty(), "orphaned: {named:?}");
    assert!(
        ns.api::<DaemonSet>()
            .get_opt("storageos-daemonset")
            .await
            .unwrap()
            .is_none()
    );
    operator.abort();
}

/// One StorageOSCluster whose stored form no longer fits the schema (a field of the wrong type,
/// stored while the CRD was looser) beside a valid one: the watch does not stall on it. The
/// valid cluster is reconciled and rendered; the other gets one `Undecodable` Warning naming the
/// field's complaint and is left alone (no finalizer, no status).
#[tokio::test]
async fn a_cluster_that_does_not_decode_does_not_stall_the_others() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use storageos_operator::reasons::UNDECODABLE;

    let (_lock, ns, odd, client) = two_namespaces("decodes", "undecodable").await;
    support::wait_no_clusters(&client, SETTLE).await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    secret(&ns).await;

    // The valid cluster first (so it is the active one), then the odd one, written while
    // `spec.debug` accepted anything.
    let clusters: Api<StorageOSCluster> = ns.api();
    clusters
        .create(&PostParams::default(), &from_json(cluster_json(&ns.name, "storageos")))
        .await
        .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = "storageosclusters.storageos.com";
    let path = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/debug";
    let live = serde_json::to_value(crds.get(crd).await.unwrap()).unwrap();
    let debug_schema = live.pointer(path).cloned().expect("spec.debug in the CRD's schema");
    let set_debug = |schema: serde_json::Value| {
        let patch: json_patch::Patch =
            serde_json::from_value(json!([{"op": "replace", "path": path, "value": schema}])).unwrap();
        let crds = crds.clone();
        async move {
            crds.patch(crd, &PatchParams::default(), &Patch::<()>::Json(patch))
                .await
                .unwrap();
        }
    };
    set_debug(json!({"x-kubernetes-preserve-unknown-fields": true})).await;
    let odd_api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), &odd.name, &ApiResource::erase::<StorageOSCluster>(&()));
    let mut odd_obj = cluster_json(&odd.name, "odd");
    odd_obj["spec"]["debug"] = json!("yes");
    let odd_obj: kube::api::DynamicObject = serde_json::from_value(odd_obj).unwrap();
    wait_for("the looser schema to admit the odd cluster", SETTLE, || async {
        odd_api.create(&PostParams::default(), &odd_obj).await.ok()
    })
    .await;
    set_debug(debug_schema).await;

    // The operator starts with both in its first list.
    let operator = tokio::spawn(cluster::run(
        context(&support::operator_client().await, &sim),
        std::future::pending(),
    ));
    wait_for("the valid cluster's node DaemonSet", SETTLE, || async {
        ns.api::<DaemonSet>().get_opt("storageos-daemonset").await.ok()?
    })
    .await;
    let said = wait_for("an Undecodable event on the odd cluster", SETTLE, || async {
        support::events(&client, &odd.name, Some("StorageOSCluster"), "odd", UNDECODABLE.name())
            .await
            .into_iter()
            .next()
    })
    .await;
    assert!(
        support::message(&said).contains("spec.debug: invalid type"),
        "{}",
        support::message(&said)
    );
    let left = odd_api.get("odd").await.unwrap();
    assert!(
        left.metadata.finalizers.unwrap_or_default().is_empty() && left.data.get("status").is_none(),
        "the operator wrote to the cluster it cannot decode"
    );

    odd_api.delete("odd", &DeleteParams::default()).await.unwrap();
    clusters.delete("storageos", &DeleteParams::default()).await.unwrap();
    wait_for("the valid cluster to be deleted", SETTLE, || async {
        clusters.get_opt("storageos").await.ok()?.is_none().then_some(())
    })
    .await;
    operator.abort();
}
