//! Integration tier: the StorageOSUpgrade controller on the real control plane, with the
//! operator as a child process (`storageos-operator run`) and the StorageOS simulator in the
//! test, synced to the kwok node pods so the cluster becomes Running.
//!
//! Only one StorageOSCluster can be active per Kubernetes cluster, so each test holds the
//! cross-process [`support::cluster_lock`] (as tests/k8s/cluster.rs does) and clears clusters
//! and upgrades left behind by killed test runs before it creates its own.
//!
//! Killing the operator inside a phase is made deterministic with `run --upgrade-step-delay`:
//! the operator waits that long before each step, so a test that sees a phase in the status
//! and kills the process 1.5 (or 2.5) delays later knows how many of the phase's steps were
//! taken.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Event, Namespace, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use storageos_operator::cluster::PAUSED_BY_ANNOTATION;
use storageos_operator::crd::{ScaledApp, StorageOSCluster, StorageOSUpgrade, UpgradePhase};
use storageos_operator::sim::{self, SimHandle, Simulator};
use storageos_operator::upgrade::apps::REPLICAS_ANNOTATION;
use storageos_operator::upgrade::nodes::{NODE_DAEMONSET, node_image};
use storageos_operator::upgrade::pull;
use support::{ClusterLock, TestNamespace, from_json, wait_for};

const SETTLE: Duration = Duration::from_secs(90);
const OLD_IMAGE: &str = "storageos/node:v2.9.0";
const CLUSTER: &str = "storageos";
const TEST_NS_LABEL: &str = "storageos-operator-test";

/// The operator as a child process; SIGKILLed when dropped.
struct Operator {
    child: Child,
    /// Where it serves `/metrics` (its reconcile counts).
    metrics_port: u16,
}

impl Operator {
    /// Runs as the operator's ServiceAccount (`kubeconfig`), electing a leader on the install's
    /// Lease, as the Deployment does.
    fn start(kubeconfig: &Path, sim: &SimHandle, step_delay: &str, log: &PathBuf) -> Self {
        Self::start_watching(kubeconfig, sim, step_delay, log, "*")
    }

    /// [`Operator::start`] watching `namespaces` only (`--watch-namespaces`).
    fn start_watching(kubeconfig: &Path, sim: &SimHandle, step_delay: &str, log: &PathBuf, namespaces: &str) -> Self {
        let out = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
        let metrics_port = support::apimanager::free_port();
        let child =
            support::operator::run_command_watching(kubeconfig, &sim.url(), "upgrade-test", metrics_port, namespaces)
                .args(["--upgrade-step-delay", step_delay])
                .env("LOG_LEVEL", "info,storageos_operator::upgrade=debug,kube=warn")
                .stdout(Stdio::from(out.try_clone().unwrap()))
                .stderr(Stdio::from(out))
                .spawn()
                .expect("start the operator");
        Self { child, metrics_port }
    }

    /// SIGKILL: no clean-up of any kind runs in the operator.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Running cluster with two StorageOS-backed applications and an unrelated one.
struct Scene {
    ns: TestNamespace,
    sim: SimHandle,
    _sync: tokio::task::JoinHandle<()>,
    log: PathBuf,
    kubeconfig: PathBuf,
    _print_log: PrintLogOnPanic,
    _dir: tempfile::TempDir,
    _lock: ClusterLock,
}

impl Scene {
    async fn new(prefix: &str) -> (Self, Operator) {
        let lock = support::cluster_lock();
        let ns = TestNamespace::new(prefix).await;
        let client = ns.client.clone();
        support::install_crds(&client).await;
        clear_leftovers(&client).await;

        let sim = Simulator::start(sim::Config::default()).await.unwrap();
        let sync = sim.sync_with_kubernetes(client.clone());
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("operator.log");
        let kubeconfig = support::operator_kubeconfig(dir.path()).await;
        let scene = Self {
            kubeconfig,
            ns,
            sim,
            _sync: sync,
            _print_log: PrintLogOnPanic(log.clone()),
            log,
            _dir: dir,
            _lock: lock,
        };
        let operator = scene.operator("0s");

        support::create_api_secret(&scene.ns, "storageos", "storageos").await;
        let cluster: StorageOSCluster = from_json(json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": CLUSTER},
            "spec": {"secretRefName": "storageos-api", "secretRefNamespace": scene.ns.name,
                     "namespace": scene.ns.name, "images": {"nodeContainer": OLD_IMAGE},
                     "kvBackend": {"address": support::KV_ADDRESS},
                     // Only the plane's own nodes: other tests add Nodes of their own.
                     "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname",
                         "operator": "In", "values": ["kwok-node-0", "kwok-node-1", "kwok-node-2"]}]}]}
        }));
        let clusters = scene.clusters();
        clusters.create(&PostParams::default(), &cluster).await.unwrap();
        scene
            .wait("the cluster to be 3/3 Running", || async {
                let s = clusters.get(CLUSTER).await.ok()?.status?;
                (s.phase.as_deref() == Some("Running") && s.ready.as_deref() == Some("3/3")).then_some(())
            })
            .await;
        scene.create_apps().await;
        (scene, operator)
    }

    fn operator(&self, step_delay: &str) -> Operator {
        Operator::start(&self.kubeconfig, &self.sim, step_delay, &self.log)
    }

    fn clusters(&self) -> Api<StorageOSCluster> {
        self.ns.api()
    }

    fn upgrades(&self) -> Api<StorageOSUpgrade> {
        self.ns.api()
    }

    /// Waits for `check` (the operator's log is printed if the test fails).
    async fn wait<T, F, Fut>(&self, what: &str, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        wait_for(what, SETTLE, check).await
    }

    /// A Deployment `web` (3) on a claim bound to a StorageOS volume, a StatefulSet `db` (2)
    /// whose claim template uses the cluster's StorageClass, and an unrelated Deployment
    /// `other` (2) on another driver's volume; waits until all their pods are ready.
    async fn create_apps(&self) {
        let ns = &self.ns.name;
        let pvs: Api<PersistentVolume> = Api::all(self.ns.client.clone());
        let pv = |name: String, driver: &str, class: &str, claim: &str| -> PersistentVolume {
            from_json(json!({
                "metadata": {"name": name, "labels": {TEST_NS_LABEL: ns}},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                         "storageClassName": class, "persistentVolumeReclaimPolicy": "Retain",
                         "csi": {"driver": driver, "volumeHandle": name},
                         "claimRef": {"namespace": ns, "name": claim}}
            }))
        };
        for p in [
            pv(format!("{ns}-web"), "csi.storageos.com", "", "web-data"),
            pv(format!("{ns}-db-0"), "csi.storageos.com", "fast", "data-db-0"),
            pv(format!("{ns}-db-1"), "csi.storageos.com", "fast", "data-db-1"),
            pv(format!("{ns}-other"), "other.csi.example.com", "", "other-data"),
        ] {
            pvs.create(&PostParams::default(), &p).await.unwrap();
        }
        for (claim, pv) in [("web-data", "web"), ("other-data", "other")] {
            let pvc: PersistentVolumeClaim = from_json(json!({
                "metadata": {"name": claim},
                "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": format!("{ns}-{pv}"),
                         "resources": {"requests": {"storage": "1Gi"}}}
            }));
            self.ns
                .api::<PersistentVolumeClaim>()
                .create(&PostParams::default(), &pvc)
                .await
                .unwrap();
        }
        let pod = |app: &str, claim: &str| {
            json!({"metadata": {"labels": {"app": app}},
                   "spec": {"containers": [{"name": "c", "image": "registry.invalid/app:1"}],
                            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]}})
        };
        for (name, replicas, claim) in [("web", 3, "web-data"), ("other", 2, "other-data")] {
            let d: Deployment = from_json(json!({
                "metadata": {"name": name},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": pod(name, claim)}
            }));
            self.ns
                .api::<Deployment>()
                .create(&PostParams::default(), &d)
                .await
                .unwrap();
        }
        let sts: StatefulSet = from_json(json!({
            "metadata": {"name": "db"},
            "spec": {"replicas": 2, "serviceName": "db", "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": {"app": "db"}},
                     "template": {"metadata": {"labels": {"app": "db"}},
                                  "spec": {"containers": [{"name": "c", "image": "registry.invalid/db:1",
                                                           "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"},
                         "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "fast",
                                  "resources": {"requests": {"storage": "1Gi"}}}}]}
        }));
        self.ns
            .api::<StatefulSet>()
            .create(&PostParams::default(), &sts)
            .await
            .unwrap();
        self.wait("every application pod to be ready", || async {
            for (kind, name, want) in [(DEPLOY, "web", 3), (DEPLOY, "other", 2), (STS, "db", 2)] {
                let (replicas, ready, _) = self.app(kind, name).await?;
                if replicas != want || ready != want {
                    return None;
                }
            }
            Some(())
        })
        .await;
    }

    /// (spec.replicas, readyReplicas, scale-down annotation) of an application.
    async fn app(&self, kind: &str, name: &str) -> Option<(i32, i32, Option<String>)> {
        let (meta, replicas, ready) = if kind == DEPLOY {
            let d = self.ns.api::<Deployment>().get(name).await.ok()?;
            let s = d.status.clone().unwrap_or_default();
            let current = s.observed_generation == d.metadata.generation;
            (
                d.metadata,
                d.spec?.replicas?,
                if current { s.ready_replicas.unwrap_or(0) } else { -1 },
            )
        } else {
            let d = self.ns.api::<StatefulSet>().get(name).await.ok()?;
            let s = d.status.clone().unwrap_or_default();
            let current = s.observed_generation == d.metadata.generation;
            (
                d.metadata,
                d.spec?.replicas?,
                if current { s.ready_replicas.unwrap_or(0) } else { -1 },
            )
        };
        let annotation = meta.annotations.unwrap_or_default().get(REPLICAS_ANNOTATION).cloned();
        Some((replicas, ready, annotation))
    }

    /// Asserts both StorageOS-backed applications run their original replicas again.
    async fn assert_apps_restored(&self) {
        for (kind, name, want) in [(DEPLOY, "web", 3), (STS, "db", 2)] {
            let (replicas, _, annotation) = self.app(kind, name).await.unwrap();
            assert_eq!((replicas, annotation), (want, None), "{kind} {name} is not restored");
        }
    }

    async fn create_upgrade(&self, name: &str, image: &str) {
        self.create_upgrade_with(name, json!({"newImage": image})).await;
    }

    async fn create_upgrade_with(&self, name: &str, spec: serde_json::Value) {
        let u: StorageOSUpgrade = from_json(json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSUpgrade",
            "metadata": {"name": name}, "spec": spec
        }));
        self.upgrades().create(&PostParams::default(), &u).await.unwrap();
    }

    /// Names and UIDs of the live node pods.
    async fn node_pod_uids(&self) -> Vec<(String, String)> {
        let mut pods: Vec<(String, String)> = self
            .ns
            .api::<Pod>()
            .list(&ListParams::default().labels("app=storageos,kind=daemonset"))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
            .collect();
        pods.sort();
        pods
    }

    /// Asserts upgrade `name` (to `broken`) rolled back to `previous`: status, journal, nodes,
    /// cluster image, applications, events.
    async fn assert_rolled_back(&self, name: &str, previous: &str, broken: &str) {
        let status = self.upgrades().get(name).await.unwrap().status.unwrap();
        assert_eq!(status.phase, Some(UpgradePhase::RolledBack));
        assert_eq!(status.completed, Some(false));
        assert_eq!(status.previous_image.as_deref(), Some(previous));
        let ready = support::condition(&status, "Ready").unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "RolledBack"));
        let degraded = support::condition(&status, "Degraded").unwrap();
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", "RolledBack")
        );
        let rollback = status.rollback.clone().unwrap();
        assert_eq!(rollback.image, previous);
        assert!(rollback.cause.contains(broken), "{}", rollback.cause);
        let journal: Vec<UpgradePhase> = status.journal.unwrap().iter().map(|e| e.phase).collect();
        for phase in [
            UpgradePhase::UpgradingNodes,
            UpgradePhase::RollingBack,
            UpgradePhase::ScalingUp,
            UpgradePhase::RolledBack,
        ] {
            assert!(journal.contains(&phase), "{phase:?} not in the journal {journal:?}");
        }
        let cluster = self.clusters().get(CLUSTER).await.unwrap();
        assert_eq!(
            cluster.spec.images.unwrap().node_container.as_deref(),
            Some(previous),
            "the cluster records the previous image again"
        );
        let (template, pods) = self.node_images().await;
        assert_eq!(template.as_deref(), Some(previous));
        assert_eq!(pods.len(), 3);
        assert!(pods.iter().all(|(i, ready)| i == previous && *ready), "{pods:?}");
        self.assert_apps_restored().await;
        let events = self
            .wait("the RolledBack event", || async {
                let events = upgrade_events(self, name).await;
                events.iter().any(|(r, _)| r == "RolledBack").then_some(events)
            })
            .await;
        assert!(
            events.iter().any(|(r, m)| r == "RollingBack" && m.contains(previous)),
            "{events:?}"
        );
    }

    /// Whether the first step of `phase` has taken effect and the next has not (see
    /// `operator_killed_in_every_phase_resumes_and_completes`).
    async fn kill_point_reached(&self, name: &str, phase: UpgradePhase, image: &str) -> bool {
        let puller = self.ns.api::<DaemonSet>().get_opt(&pull::daemonset_name(name)).await;
        let (Some(web), Some(db)) = (self.app(DEPLOY, "web").await, self.app(STS, "db").await) else {
            return false;
        };
        match phase {
            UpgradePhase::PullingImage => matches!(puller, Ok(Some(_))),
            UpgradePhase::Pausing => matches!(puller, Ok(None)) && self.paused_by().await.is_none(),
            UpgradePhase::ScalingDown => (web.0, db.0) == (0, 2),
            UpgradePhase::UpgradingNodes => {
                let (template, pods) = self.node_images().await;
                template.as_deref() == Some(image) && pods.iter().any(|(i, _)| i != image)
            }
            UpgradePhase::ScalingUp => (web.0, db.0) == (3, 0),
            // Both images set back, the node pods still on the new one.
            UpgradePhase::RollingBack => {
                let (template, pods) = self.node_images().await;
                template.is_some_and(|t| t != image) && pods.iter().any(|(i, _)| i == image)
            }
            _ => false,
        }
    }

    async fn phase(&self, name: &str) -> Option<UpgradePhase> {
        self.upgrades().get(name).await.ok()?.status?.phase
    }

    /// Waits for upgrade `name` to reach `phase`; fails showing its status otherwise.
    async fn wait_phase(&self, name: &str, phase: UpgradePhase) {
        let deadline = tokio::time::Instant::now() + SETTLE;
        while self.phase(name).await != Some(phase) {
            if tokio::time::Instant::now() >= deadline {
                let status = self.upgrades().get(name).await.ok().and_then(|u| u.status);
                panic!("upgrade {name} did not reach {phase:?} in {SETTLE:?}; its status: {status:#?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The upgrade `name`'s image puller DaemonSet, if there is one.
    async fn puller(&self, name: &str) -> Option<DaemonSet> {
        self.ns
            .api::<DaemonSet>()
            .get_opt(&pull::daemonset_name(name))
            .await
            .unwrap()
    }

    async fn paused_by(&self) -> Option<String> {
        self.clusters()
            .get(CLUSTER)
            .await
            .unwrap()
            .annotations()
            .get(PAUSED_BY_ANNOTATION)
            .cloned()
    }

    /// The node DaemonSet's template image and its pods' images (ready or not).
    async fn node_images(&self) -> (Option<String>, Vec<(String, bool)>) {
        let ds = self.ns.api::<DaemonSet>().get(NODE_DAEMONSET).await.unwrap();
        let template = node_image(ds.spec.as_ref().and_then(|s| s.template.spec.as_ref())).map(str::to_string);
        let pods = self
            .ns
            .api::<Pod>()
            .list(&ListParams::default().labels("app=storageos,kind=daemonset"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| {
                let ready = p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                (node_image(p.spec.as_ref()).unwrap_or_default().to_string(), ready)
            })
            .collect();
        (template, pods)
    }

    /// Asserts the upgrade to `image` is complete: status, nodes, applications.
    async fn assert_completed(&self, name: &str, image: &str) {
        let up = self.upgrades().get(name).await.unwrap();
        let status = up.status.unwrap();
        assert_eq!(status.completed, Some(true));
        let ready = support::condition(&status, "Ready").unwrap();
        assert_eq!(ready.status, "True", "{ready:?}");
        let mine: Vec<ScaledApp> = status
            .scaled_apps
            .unwrap_or_default()
            .into_iter()
            .filter(|a| a.namespace == self.ns.name)
            .collect();
        let app = |kind: &str, name: &str, replicas| ScaledApp {
            kind: kind.into(),
            namespace: self.ns.name.clone(),
            name: name.into(),
            replicas,
        };
        assert_eq!(
            mine,
            [app(DEPLOY, "web", 3), app(STS, "db", 2)],
            "recorded with their original replicas"
        );
        let cluster = self.clusters().get(CLUSTER).await.unwrap();
        assert_eq!(
            cluster.spec.images.unwrap().node_container.as_deref(),
            Some(image),
            "the cluster records the new image"
        );
        let (template, pods) = self.node_images().await;
        assert_eq!(template.as_deref(), Some(image));
        assert_eq!(pods.len(), 3);
        assert!(pods.iter().all(|(i, ready)| i == image && *ready), "{pods:?}");
        self.assert_apps_restored().await;
    }

    /// Deletes upgrade `name` and waits until it is gone.
    async fn delete_upgrade(&self, name: &str) {
        self.upgrades().delete(name, &DeleteParams::default()).await.unwrap();
        self.wait(&format!("upgrade {name} to be deleted"), || async {
            self.upgrades().get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await;
    }

    /// Deletes the cluster (forced: the apps still use its volumes) while the operator runs,
    /// so the namespace is not left with a finalizer nobody removes, and the test's volumes.
    async fn teardown(self, operator: Operator) {
        let clusters = self.clusters();
        let force = json!({"metadata": {"annotations": {"storageos.com/force-delete": "true"}}});
        let _ = clusters
            .patch(CLUSTER, &PatchParams::default(), &Patch::Merge(&force))
            .await;
        let _ = clusters.delete(CLUSTER, &DeleteParams::default()).await;
        self.wait("the cluster to be deleted", || async {
            clusters.get_opt(CLUSTER).await.ok()?.is_none().then_some(())
        })
        .await;
        drop(operator);
        let pvs: Api<PersistentVolume> = Api::all(self.ns.client.clone());
        let _ = pvs
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels(&format!("{TEST_NS_LABEL}={}", self.ns.name)),
            )
            .await;
    }
}

const DEPLOY: &str = "Deployment";
const STS: &str = "StatefulSet";

/// Prints the end of the operator's log when the test fails.
struct PrintLogOnPanic(PathBuf);

impl Drop for PrintLogOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.0).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(80).collect();
            eprintln!("--- operator log (last lines) ---");
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// Makes room for this test's cluster to be the active one: removes the clusters and upgrades
/// of earlier test runs that were killed before cleaning up (their namespaces are terminating,
/// stuck on finalizers nobody runs), then waits for other tests' short-lived clusters to go.
/// A cluster outside a test namespace (the demo's) is not ours to touch: that fails the test.
async fn clear_leftovers(client: &kube::Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let unfinalize = json!({"metadata": {"finalizers": null}});
    let dead = |ns: &Namespace| {
        ns.metadata.deletion_timestamp.is_some() && ns.labels().get(TEST_NS_LABEL).is_some_and(|v| v == "true")
    };
    for u in Api::<StorageOSUpgrade>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        let ns = u.namespace().unwrap();
        if namespaces.get_opt(&ns).await.unwrap().is_some_and(|n| dead(&n)) {
            let api: Api<StorageOSUpgrade> = Api::namespaced(client.clone(), &ns);
            let _ = api
                .patch(&u.name_any(), &PatchParams::default(), &Patch::Merge(&unfinalize))
                .await;
        }
    }
    wait_for("other StorageOSClusters to be gone", SETTLE, || async {
        let clusters = Api::<StorageOSCluster>::all(client.clone())
            .list(&ListParams::default())
            .await
            .ok()?
            .items;
        for c in &clusters {
            let ns = namespaces.get_opt(&c.namespace()?).await.ok()??;
            assert!(
                ns.labels().contains_key(TEST_NS_LABEL),
                "StorageOSCluster {}/{} exists outside a test namespace; the upgrade tests need their own cluster to be the active one (stop the demo: hack/demo.sh down)",
                ns.name_any(),
                c.name_any()
            );
            if dead(&ns) {
                let api: Api<StorageOSCluster> = Api::namespaced(client.clone(), &ns.name_any());
                let _ = api.patch(&c.name_any(), &PatchParams::default(), &Patch::Merge(&unfinalize)).await;
            }
        }
        clusters.is_empty().then_some(())
    })
    .await;
}

/// The events of the upgrade `name`, oldest first, as (reason, message).
async fn upgrade_events(scene: &Scene, name: &str) -> Vec<(String, String)> {
    let mut events: Vec<Event> = scene
        .ns
        .api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("StorageOSUpgrade")
                && e.involved_object.name.as_deref() == Some(name)
        })
        .collect();
    events.sort_by_key(|e| {
        e.event_time
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
    });
    events
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn upgrade_scales_apps_down_restarts_nodes_on_the_new_image_and_restores_apps() {
    let (scene, operator) = Scene::new("upgrade").await;
    drop(operator);
    // A short delay per step, so the test sees the applications at zero.
    let operator = scene.operator("300ms");
    let new = "storageos/node:v2.10.0";
    let other_before = scene.ns.api::<Deployment>().get("other").await.unwrap().metadata;

    scene.create_upgrade("upgrade", new).await;
    scene
        .wait("both applications scaled to 0 with their replicas on them", || async {
            let web = scene.app(DEPLOY, "web").await?;
            let db = scene.app(STS, "db").await?;
            ((web.0, web.2.as_deref(), db.0, db.2.as_deref()) == (0, Some("3"), 0, Some("2"))).then_some(())
        })
        .await;
    assert_eq!(
        scene.paused_by().await.as_deref(),
        Some("upgrade"),
        "paused while scaled down"
    );
    scene
        .wait("the node DaemonSet to use the new image", || async {
            (scene.node_images().await.0.as_deref() == Some(new)).then_some(())
        })
        .await;
    scene.wait_phase("upgrade", UpgradePhase::Completed).await;
    scene.assert_completed("upgrade", new).await;

    // The unrelated application was never written to.
    let other_after = scene.ns.api::<Deployment>().get("other").await.unwrap().metadata;
    assert_eq!(
        (other_after.resource_version, other_after.generation),
        (other_before.resource_version, other_before.generation),
        "the unrelated Deployment was touched"
    );
    // The puller is gone, and the cluster stays paused until the upgrade is deleted.
    let puller = pull::daemonset_name("upgrade");
    assert!(scene.ns.api::<DaemonSet>().get_opt(&puller).await.unwrap().is_none());
    assert_eq!(scene.paused_by().await.as_deref(), Some("upgrade"));

    // The completion event is published after the Completed status: wait for it, then compare.
    let reasons = scene
        .wait("the UpgradeComplete event", || async {
            let events = upgrade_events(&scene, "upgrade").await;
            events.iter().any(|(r, _)| r == "UpgradeComplete").then_some(events)
        })
        .await;
    assert_eq!(
        reasons,
        [
            ("PullImage".to_string(), "Pulling the new container image".to_string()),
            (
                "PauseClusterCtrl".into(),
                "Pausing the cluster controller and enabling cluster maintenance mode".into()
            ),
            (
                "UpgradeInit".into(),
                format!("StorageOS upgrade of cluster {CLUSTER} started")
            ),
            (
                "UpgradeComplete".into(),
                format!("StorageOS upgraded to {new}. Delete upgrade object to disable cluster maintenance mode")
            ),
        ]
    );

    // Completed costs nothing: a change of ours (an annotation) makes the operator reconcile the
    // completed upgrade again (its reconcile count moves), and it writes nothing.
    let port = operator.metrics_port;
    let since = support::evidence::reconciles_at(port, storageos_operator::upgrade::CONTROLLER)
        .await
        .expect("the operator's /metrics");
    let touched = json!({"metadata": {"annotations": {"storageos-operator-test/touched": "yes"}}});
    let before = scene
        .upgrades()
        .patch(
            "upgrade",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&touched),
        )
        .await
        .unwrap()
        .resource_version();
    support::evidence::after_reconciles_at(port, storageos_operator::upgrade::CONTROLLER, since, 1).await;
    assert_eq!(
        scene.upgrades().get("upgrade").await.unwrap().resource_version(),
        before
    );

    // Deleting the completed upgrade un-pauses the cluster and leaves the apps alone.
    scene.delete_upgrade("upgrade").await;
    assert_eq!(scene.paused_by().await, None);
    scene.assert_apps_restored().await;
    scene.teardown(operator).await;
}

#[tokio::test]
async fn a_dry_run_previews_exactly_what_the_upgrade_then_does_and_touches_nothing() {
    let (scene, operator) = Scene::new("dryrun").await;
    let new = "storageos/node:v2.10.0";
    let pods_before = scene.node_pod_uids().await;
    // `storageos-operator plan -f upgrade.yaml`, as the operator's ServiceAccount, before the
    // upgrade exists.
    let file: StorageOSUpgrade = from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSUpgrade",
        "metadata": {"name": "upgrade"}, "spec": {"newImage": new}
    }));
    let planned = storageos_operator::upgrade::plan_command::preview(
        &support::identity::operator_client().await,
        file,
        &scene.ns.name,
        Some(scene.sim.url()),
    )
    .await
    .unwrap();
    scene
        .create_upgrade_with("upgrade", json!({"newImage": new, "dryRun": true}))
        .await;
    let preview = scene
        .wait("the dry run's preview", || async {
            let up = scene.upgrades().get("upgrade").await.ok()?;
            up.status?.preview.filter(|p| p.would_start)
        })
        .await;
    let up = scene.upgrades().get("upgrade").await.unwrap();
    let status = up.status.unwrap();
    assert_eq!(status.phase, Some(UpgradePhase::Pending));
    let ready = support::condition(&status, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "DryRun"),
        "{ready:?}"
    );
    assert_eq!(preview.image, new);
    assert_eq!(preview.from_image.as_deref(), Some(OLD_IMAGE));
    assert_eq!(preview.nodes, support::KWOK_NODES, "every StorageOS node restarts");
    let mine: Vec<ScaledApp> = preview
        .apps
        .iter()
        .filter(|a| a.namespace == scene.ns.name)
        .cloned()
        .collect();
    let app = |kind: &str, name: &str, replicas| ScaledApp {
        kind: kind.into(),
        namespace: scene.ns.name.clone(),
        name: name.into(),
        replicas,
    };
    assert_eq!(
        mine,
        [app(DEPLOY, "web", 3), app(STS, "db", 2)],
        "the apps it would scale to 0"
    );
    assert_eq!(planned, preview, "`plan` and the dry run preview the same upgrade");

    // Nothing touched: no puller, no pause, the apps and node pods as they were.
    let puller = pull::daemonset_name("upgrade");
    assert!(scene.ns.api::<DaemonSet>().get_opt(&puller).await.unwrap().is_none());
    assert_eq!(scene.paused_by().await, None);
    assert_eq!(scene.app(DEPLOY, "web").await.unwrap().0, 3);
    assert_eq!(scene.app(STS, "db").await.unwrap().0, 2);
    assert_eq!(scene.node_pod_uids().await, pods_before);

    // Run it: what it scales is what the preview said, and the preview goes.
    scene
        .upgrades()
        .patch(
            "upgrade",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"dryRun": false}})),
        )
        .await
        .unwrap();
    scene.wait_phase("upgrade", UpgradePhase::Completed).await;
    let status = scene.upgrades().get("upgrade").await.unwrap().status.unwrap();
    let scaled: Vec<ScaledApp> = status
        .scaled_apps
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a.namespace == scene.ns.name)
        .collect();
    assert_eq!(scaled, mine, "the upgrade scaled other apps than its preview named");
    assert!(status.preview.is_none(), "a preview outlived the dry run");
    scene.delete_upgrade("upgrade").await;
    scene.teardown(operator).await;
}

#[tokio::test]
async fn operator_killed_in_every_phase_resumes_and_completes() {
    use UpgradePhase::*;
    let started = std::time::Instant::now();
    let (scene, operator) = Scene::new("upgrade-kill").await;
    eprintln!(
        "[{:>5.1}s] cluster Running, apps ready",
        started.elapsed().as_secs_f64()
    );
    drop(operator);
    // Each step waits this long first, so once the effect of one step is seen, the next one is
    // at least this far away: the kill lands between the two, whatever the machine's load.
    const DELAY: &str = "3s";
    // The phase, and what must be seen in it before the kill.
    let plan = [
        PullingImage,   // puller applied, not yet seen complete
        Pausing,        // puller deleted, cluster not yet annotated
        ScalingDown,    // apps recorded and web scaled down, db not yet
        UpgradingNodes, // cluster and DaemonSet images set, node pods not yet restarted
        ScalingUp,      // web restored, db not yet
        RollingBack,    // images set back, node pods not yet restarted on the previous one
    ];
    let mut restarted: Option<Operator> = None;
    for (i, phase) in plan.into_iter().enumerate() {
        let name = format!("kill-{i}");
        let image = format!("storageos/node:v2.10.{i}");
        // One operator at a time: the previous one stops before the next starts.
        drop(restarted.take());
        let mut op = scene.operator(DELAY);
        if phase == RollingBack {
            // Nodes on this image stay offline: the health gate fails after its timeout.
            scene.sim.set_faults(sim::Faults {
                offline_with_image: Some(image.clone()),
                ..sim::Faults::default()
            });
            scene
                .create_upgrade_with(&name, json!({"newImage": image, "timeout": "5s"}))
                .await;
        } else {
            scene.create_upgrade(&name, &image).await;
        }
        scene.wait_phase(&name, phase).await;
        let what = format!("the kill point in {phase:?}");
        wait_for(&what, SETTLE, || async {
            (scene.phase(&name).await == Some(phase) && scene.kill_point_reached(&name, phase, &image).await)
                .then_some(())
        })
        .await;
        op.kill();
        eprintln!("[{:>5.1}s] killed in {phase:?}", started.elapsed().as_secs_f64());
        assert_eq!(scene.phase(&name).await, Some(phase), "the kill landed in {phase:?}");

        // Where the kill landed inside the phase.
        let puller = scene
            .ns
            .api::<DaemonSet>()
            .get_opt(&pull::daemonset_name(&name))
            .await
            .unwrap();
        let web = scene.app(DEPLOY, "web").await.unwrap();
        let db = scene.app(STS, "db").await.unwrap();
        match phase {
            PullingImage => assert!(puller.is_some(), "the puller was applied"),
            Pausing => {
                assert!(puller.is_none(), "the puller was deleted");
                assert_eq!(scene.paused_by().await, None, "not yet paused");
            }
            ScalingDown => assert_eq!((web.0, db.0), (0, 2), "killed between the two scale-downs"),
            UpgradingNodes => {
                let (template, pods) = scene.node_images().await;
                assert_eq!(template.as_deref(), Some(image.as_str()));
                assert!(
                    pods.iter().any(|(i, _)| *i != image),
                    "pods not yet restarted: {pods:?}"
                );
            }
            ScalingUp => assert_eq!((web.0, db.0), (3, 0), "killed between the two scale-ups"),
            RollingBack => {
                let (template, pods) = scene.node_images().await;
                assert_ne!(template.as_deref(), Some(image.as_str()));
                assert!(
                    pods.iter().any(|(i, _)| *i == image),
                    "pods not yet restarted: {pods:?}"
                );
            }
            _ => {}
        }

        // Restarted, it finishes, and every application is back.
        let op = scene.operator("0s");
        if phase == RollingBack {
            scene.wait_phase(&name, RolledBack).await;
            let previous = format!("storageos/node:v2.10.{}", i - 1);
            scene.assert_rolled_back(&name, &previous, &image).await;
            scene.sim.set_faults(sim::Faults::default());
        } else {
            scene.wait_phase(&name, Completed).await;
            scene.assert_completed(&name, &image).await;
        }
        eprintln!("[{:>5.1}s] resumed and completed", started.elapsed().as_secs_f64());
        scene.delete_upgrade(&name).await;
        assert_eq!(scene.paused_by().await, None);
        restarted = Some(op);
    }
    scene.teardown(restarted.unwrap()).await;
    eprintln!("[{:>5.1}s] torn down", started.elapsed().as_secs_f64());
}

/// An upgrade does not start while a StorageOS volume has a replica still syncing: it stays
/// Pending with reason VolumesNotReady and a Warning event, and touches nothing (no puller, no
/// application scaled, no node pod restarted, the cluster not paused). Once the replica is
/// ready it runs to the end.
#[tokio::test]
async fn an_upgrade_waits_while_a_replica_syncs_and_touches_nothing() {
    let (scene, operator) = Scene::new("upgrade-safe").await;
    let ns = scene.ns.name.clone();
    scene
        .sim
        .add_volume(sim::VolumeSeed {
            namespace: ns.clone(),
            name: "pv-syncing".into(),
            pvc_name: "data".into(),
            pvc_namespace: ns.clone(),
            master_node: "kwok-node-0".into(),
            replicas: 1,
            ..sim::VolumeSeed::default()
        })
        .unwrap();
    scene.sim.set_replica_health(&ns, "pv-syncing", "syncing").unwrap();
    let pods_before = scene.node_pod_uids().await;
    let new = "storageos/node:v2.10.0";
    scene.create_upgrade("safe", new).await;

    // The decision is in the status (evidence the controller read StorageOS and decided).
    let ready = scene
        .wait("the upgrade to wait with reason VolumesNotReady", || async {
            let status = scene.upgrades().get("safe").await.ok()?.status?;
            let ready = support::condition(&status, "Ready")?.clone();
            (ready.reason == "VolumesNotReady").then_some(ready)
        })
        .await;
    assert!(
        ready.message.contains(&format!("{ns}/data")) && ready.message.contains("syncing"),
        "{}",
        ready.message
    );
    scene
        .wait("the VolumesNotReady event", || async {
            let events = upgrade_events(&scene, "safe").await;
            events.iter().any(|(r, _)| r == "VolumesNotReady").then_some(())
        })
        .await;
    assert_eq!(scene.phase("safe").await, Some(UpgradePhase::Pending));
    let puller = scene.puller("safe").await;
    assert!(puller.is_none(), "a waiting upgrade applied the puller");
    assert_eq!(scene.paused_by().await, None, "a waiting upgrade paused the cluster");
    scene.assert_apps_restored().await;
    assert_eq!(scene.node_images().await.0.as_deref(), Some(OLD_IMAGE));
    assert_eq!(scene.node_pod_uids().await, pods_before, "a node pod was restarted");

    // In sync: it goes ahead by itself.
    scene.sim.set_replica_health(&ns, "pv-syncing", "ready").unwrap();
    scene.wait_phase("safe", UpgradePhase::Completed).await;
    scene.assert_completed("safe", new).await;
    scene.delete_upgrade("safe").await;
    scene.teardown(operator).await;
}

/// An upgrade does not start while a drain is blocked: a node is cordoned and a drain guard's
/// PodDisruptionBudget (in the api-manager's namespace) names it. It waits in Pending with
/// reason DrainBlocked, touching nothing; once the node is uncordoned it runs to the end.
#[tokio::test]
async fn an_upgrade_waits_while_a_drain_is_blocked() {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let (scene, operator) = Scene::new("upgrade-drain").await;
    let guarded = "kwok-node-1";
    let pdb: PodDisruptionBudget = from_json(json!({
        "metadata": {"name": "drain-guard-test", "labels": {
            "app.kubernetes.io/component": "drain-guard", "storageos.com/drain-guard-node": guarded},
            "annotations": {"storageos.com/drain-guard-node": guarded}},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "drain-guard-test"}}}
    }));
    scene
        .ns
        .api::<PodDisruptionBudget>()
        .create(&PostParams::default(), &pdb)
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(scene.ns.client.clone());
    let cordon = |on: bool| json!({"spec": {"unschedulable": on}});
    nodes
        .patch(guarded, &PatchParams::default(), &Patch::Merge(cordon(true)))
        .await
        .unwrap();
    let pods_before = scene.node_pod_uids().await;
    let new = "storageos/node:v2.10.0";
    scene.create_upgrade("drain", new).await;
    let ready = scene
        .wait("the upgrade to wait with reason DrainBlocked", || async {
            let status = scene.upgrades().get("drain").await.ok()?.status?;
            let ready = support::condition(&status, "Ready")?.clone();
            (ready.reason == "DrainBlocked").then_some(ready)
        })
        .await;
    // Checked while the upgrade still waits (it reads again only every few seconds, and the
    // node is not uncordoned yet); a failing check leaves the node cordoned on this plane.
    assert!(ready.message.contains(guarded), "{}", ready.message);
    assert_eq!(scene.phase("drain").await, Some(UpgradePhase::Pending));
    assert_eq!(scene.paused_by().await, None, "a waiting upgrade paused the cluster");
    scene.assert_apps_restored().await;
    assert_eq!(scene.node_pod_uids().await, pods_before, "a node pod was restarted");
    nodes
        .patch(guarded, &PatchParams::default(), &Patch::Merge(cordon(false)))
        .await
        .unwrap();

    // The drain is over (uncordoned): it goes ahead by itself.
    scene.wait_phase("drain", UpgradePhase::Completed).await;
    scene.assert_completed("drain", new).await;
    scene.delete_upgrade("drain").await;
    scene.teardown(operator).await;
}

/// An upgrade to an image on which the StorageOS nodes stay offline (the simulator's
/// `offline_with_image`) fails its health gate after `spec.timeout` and rolls back: the previous
/// image on the cluster and the node DaemonSet, every node pod restarted on it, the
/// applications restored; phase RolledBack with `completed: false`, reason RolledBack, the
/// journal and events. The cluster stays paused until the upgrade is deleted.
#[tokio::test]
async fn an_upgrade_whose_nodes_stay_offline_rolls_back_and_restores_apps() {
    let (scene, operator) = Scene::new("upgrade-rollback").await;
    let broken = "storageos/node:v2.10.0";
    scene.sim.set_faults(sim::Faults {
        offline_with_image: Some(broken.into()),
        ..sim::Faults::default()
    });
    scene
        .create_upgrade_with("broken", json!({"newImage": broken, "timeout": "10s"}))
        .await;
    scene.wait_phase("broken", UpgradePhase::RolledBack).await;
    scene.assert_rolled_back("broken", OLD_IMAGE, broken).await;
    let status = scene.upgrades().get("broken").await.unwrap().status.unwrap();
    let cause = status.rollback.unwrap().cause;
    assert!(cause.contains("StorageOS nodes not online"), "{cause}");
    assert_eq!(scene.paused_by().await.as_deref(), Some("broken"));
    scene.delete_upgrade("broken").await;
    assert_eq!(scene.paused_by().await, None);
    scene.assert_apps_restored().await;
    scene.teardown(operator).await;
}

/// A downgrade (the nodes run v2.9.0) stops in phase Refused with reason Downgrade and one
/// Warning event, nothing touched: no puller, no application scaled, the cluster not paused, the
/// node image unchanged. Setting `spec.force` lets it run to the end.
#[tokio::test]
async fn a_downgrade_is_refused_with_nothing_touched_until_forced() {
    let (scene, operator) = Scene::new("upgrade-refused").await;
    let old = "storageos/node:v2.8.0";
    scene.create_upgrade("down", old).await;
    scene.wait_phase("down", UpgradePhase::Refused).await;
    let status = scene.upgrades().get("down").await.unwrap().status.unwrap();
    let degraded = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "Downgrade")
    );
    assert!(
        degraded.message.contains(OLD_IMAGE) && degraded.message.contains(old),
        "{}",
        degraded.message
    );
    let events = scene
        .wait("the Downgrade event", || async {
            let events = upgrade_events(&scene, "down").await;
            events.iter().any(|(r, _)| r == "Downgrade").then_some(events)
        })
        .await;
    // The refusal was decided (phase and event seen) before any action could be: every later
    // pass decides the same until the spec changes.
    let puller = scene.puller("down").await;
    assert!(puller.is_none(), "a refused upgrade applied the puller");
    assert_eq!(scene.paused_by().await, None, "a refused upgrade paused the cluster");
    scene.assert_apps_restored().await;
    assert_eq!(scene.node_images().await.0.as_deref(), Some(OLD_IMAGE));
    assert_eq!(scene.phase("down").await, Some(UpgradePhase::Refused));
    assert_eq!(
        upgrade_events(&scene, "down")
            .await
            .iter()
            .filter(|(r, _)| r == "Downgrade")
            .count(),
        1,
        "one Warning event: {events:?}"
    );

    // Forced: it runs.
    scene
        .upgrades()
        .patch(
            "down",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"force": true}})),
        )
        .await
        .unwrap();
    scene.wait_phase("down", UpgradePhase::Completed).await;
    scene.assert_completed("down", old).await;
    scene.delete_upgrade("down").await;
    scene.teardown(operator).await;
}

#[tokio::test]
async fn a_second_upgrade_waits_and_deleting_one_mid_way_restores_apps_and_unpauses() {
    let (scene, operator) = Scene::new("upgrade-queue").await;
    drop(operator);
    let operator = scene.operator("1s");
    scene.create_upgrade("first", "storageos/node:v2.10.0").await;
    scene.wait_phase("first", UpgradePhase::PullingImage).await;
    // First deleted before its nodes restart: the second goes from v2.9.0 as well.
    scene.create_upgrade("second", "storageos/node:v2.10.1").await;

    // The second one waits, saying for which, with one Warning event.
    let waiting = format!(
        "can't create more than one storageos upgrade: waiting for StorageOSUpgrade {}/first to finish",
        scene.ns.name
    );
    scene
        .wait("the second upgrade's Warning event", || async {
            let events = upgrade_events(&scene, "second").await;
            events
                .contains(&("FailedCreation".to_string(), waiting.clone()))
                .then_some(())
        })
        .await;
    let second = scene.upgrades().get("second").await.unwrap().status.unwrap();
    assert_eq!(second.phase, Some(UpgradePhase::Pending));
    let ready = second
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.message, waiting);

    // Delete the first one while web is down and db not yet.
    scene
        .wait("the first upgrade to scale web down", || async {
            (scene.app(DEPLOY, "web").await?.0 == 0).then_some(())
        })
        .await;
    assert_eq!(scene.paused_by().await.as_deref(), Some("first"));
    scene.delete_upgrade("first").await;
    assert_eq!(
        scene.paused_by().await,
        None,
        "deleting the upgrade un-pauses the cluster"
    );
    scene.assert_apps_restored().await;
    let events = upgrade_events(&scene, "second").await;
    assert_eq!(
        events.iter().filter(|(r, _)| r == "FailedCreation").count(),
        1,
        "the waiting upgrade warned once: {events:?}"
    );

    // Now it is the second one's turn.
    scene.wait_phase("second", UpgradePhase::Completed).await;
    scene.assert_completed("second", "storageos/node:v2.10.1").await;
    scene.delete_upgrade("second").await;
    scene.teardown(operator).await;
}

/// An upgrade deleted mid-way after its namespace stopped being watched (the operator
/// restarted with `--watch-namespaces` naming another) still un-pauses its cluster and leaves
/// no image puller: outside its namespaces the operator still follows the upgrades it once
/// finalized. The applications its status lists are not restored from that status.
#[tokio::test]
async fn an_upgrade_deleted_after_its_namespace_stopped_being_watched_unpauses_its_cluster() {
    let (scene, operator) = Scene::new("upgrade-unwatched").await;
    drop(operator);
    let operator = scene.operator("1s");
    scene.create_upgrade("upgrade", "storageos/node:v2.10.0").await;
    scene
        .wait("the upgrade to scale web down", || async {
            (scene.app(DEPLOY, "web").await?.0 == 0).then_some(())
        })
        .await;
    assert_eq!(scene.paused_by().await.as_deref(), Some("upgrade"));

    // The operator restarts watching another namespace only; then the upgrade is deleted.
    drop(operator);
    let operator = Operator::start_watching(
        &scene.kubeconfig,
        &scene.sim,
        "1s",
        &scene.log,
        storageos_operator::install::NAMESPACE,
    );
    scene.delete_upgrade("upgrade").await;
    assert_eq!(
        scene.paused_by().await,
        None,
        "the deleted upgrade left its cluster paused"
    );
    let puller = scene.puller("upgrade").await;
    assert!(puller.is_none(), "the deleted upgrade left its image puller");
    // What its status says it scaled is not evidence once its namespace is not trusted: web is
    // left as it is (docs/security.md).
    assert_eq!(scene.app(DEPLOY, "web").await.map(|a| a.0), Some(0));

    // Watching the cluster's namespace again, to delete the cluster.
    drop(operator);
    let operator = scene.operator("0s");
    scene.teardown(operator).await;
}

/// An upgrade created in another namespace than the cluster's (a tenant's) touches nothing: it
/// is Degraded with reason WrongNamespace, the cluster is not paused, no application is scaled,
/// the node image is unchanged and no puller is made, also once its status is forged to a later
/// phase naming the cluster; it does not block the cluster's own.
#[tokio::test]
async fn upgrade_in_another_namespace_is_refused() {
    let (scene, operator) = Scene::new("upgrade-ns").await;
    let tenant = TestNamespace::new("tenant").await;
    let tenant_upgrades: Api<StorageOSUpgrade> = tenant.api();
    let u: StorageOSUpgrade = from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSUpgrade",
        "metadata": {"name": "takeover"}, "spec": {"newImage": "registry.invalid/evil:1"}
    }));
    tenant_upgrades.create(&PostParams::default(), &u).await.unwrap();
    let message = scene
        .wait("the tenant's upgrade to be refused", || async {
            let status = tenant_upgrades.get("takeover").await.ok()?.status?;
            let c = status
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == "WrongNamespace")?;
            Some(c.message)
        })
        .await;
    assert!(message.contains(&format!("{}/{CLUSTER}", scene.ns.name)), "{message}");
    let status = tenant_upgrades.get("takeover").await.unwrap().status.unwrap();
    assert_eq!(status.phase, Some(UpgradePhase::Pending));
    assert_eq!(status.cluster, None);
    assert_eq!(support::condition(&status, "Ready").unwrap().status, "False");
    assert_eq!(scene.paused_by().await, None);
    assert_eq!(scene.node_images().await.0.as_deref(), Some(OLD_IMAGE));
    scene.assert_apps_restored().await;
    assert!(
        tenant
            .api::<DaemonSet>()
            .get_opt(&pull::daemonset_name("takeover"))
            .await
            .unwrap()
            .is_none()
    );

    // A writer of the tenant upgrade's status forges a later phase naming the cluster: every
    // phase re-checks the namespace, so nothing is touched.
    let port = operator.metrics_port;
    let since = support::evidence::reconciles_at(port, storageos_operator::upgrade::CONTROLLER)
        .await
        .expect("the operator's /metrics");
    tenant_upgrades
        .patch_status(
            "takeover",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"phase": "UpgradingNodes",
                "cluster": {"namespace": scene.ns.name, "name": CLUSTER}}})),
        )
        .await
        .unwrap();
    support::evidence::after_reconciles_at(port, storageos_operator::upgrade::CONTROLLER, since, 1).await;
    let status = tenant_upgrades.get("takeover").await.unwrap().status.unwrap();
    let degraded = support::condition(&status, "Degraded").unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "WrongNamespace")
    );
    assert_eq!(
        scene.node_images().await.0.as_deref(),
        Some(OLD_IMAGE),
        "the node image was changed"
    );
    assert_eq!(scene.paused_by().await, None);
    scene.assert_apps_restored().await;

    // The cluster's own upgrade is not blocked by the refused one.
    let new = "storageos/node:v2.10.0";
    scene.create_upgrade("upgrade", new).await;
    scene.wait_phase("upgrade", UpgradePhase::Completed).await;
    scene.assert_completed("upgrade", new).await;
    tenant_upgrades
        .delete("takeover", &DeleteParams::default())
        .await
        .unwrap();
    scene
        .wait("the refused upgrade to be deleted", || async {
            tenant_upgrades.get_opt("takeover").await.ok()?.is_none().then_some(())
        })
        .await;
    scene.delete_upgrade("upgrade").await;
    scene.teardown(operator).await;
}
