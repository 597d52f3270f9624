//! Test support for the integration tier: attach to the local control plane (bringing it up
//! with `hack/k8s.sh up` once per test binary when it is not running), give each test its own
//! namespace, and clean up afterwards. Also what the api-manager tests share: controller logs,
//! events, cluster-scoped fixtures cleaned up on drop (fencer and node/namespace delete tests)
//! and the maintenance signal.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Namespace, Node, PersistentVolume, ServiceAccount};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttachment};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use serde_json::json;
use storageos_operator::crd::{StorageOSCluster, StorageOSUpgrade};

pub mod identity;
#[allow(unused_imports)]
pub use identity::{api_manager_client, api_manager_kubeconfig, operator_client, operator_kubeconfig};

/// Root of the repository.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The kubeconfig of the local plane: `$KUBECONFIG` when set (as `hack/test.sh` does), else the
/// one `hack/k8s.sh up` prints, bringing the plane up first if needed. Either way it must be a
/// plane `hack/k8s.sh` started ([`check_plane_marker`]): the tests create Nodes, PVs and webhook
/// configurations, which must never reach a real cluster.
pub fn kubeconfig_path() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = find_kubeconfig();
        check_plane_marker(&path);
        path
    })
}

/// File `hack/k8s.sh up` writes next to its kubeconfig, holding the apiserver's URL.
pub const PLANE_MARKER: &str = "storageos-test-plane";

/// The etcd address the tests' clusters name (the CRD requires one). Nothing answers there: a
/// test that needs a reachable kv backend starts one (tests/k8s/preflight.rs).
pub const KV_ADDRESS: &str = "http://etcd.storageos-etcd.svc:2379";

/// Panics unless `kubeconfig` points at the apiserver of a plane `hack/k8s.sh` started.
pub fn check_plane_marker(kubeconfig: &Path) {
    let server = Kubeconfig::read_from(kubeconfig)
        .ok()
        .and_then(|k| k.clusters.first()?.cluster.clone()?.server)
        .unwrap_or_default();
    let marker = kubeconfig.parent().map(|d| d.join(PLANE_MARKER));
    let marked = marker
        .as_ref()
        .and_then(|m| std::fs::read_to_string(m).ok())
        .is_some_and(|url| url.trim() == server);
    assert!(
        marked,
        "refusing to run the integration tests against {server:?} ({}): it is not a control plane \
         started by hack/k8s.sh (no matching {PLANE_MARKER} marker next to the kubeconfig). Start \
         one with `hack/k8s.sh up` and `eval \"$(hack/k8s.sh env)\"`, or unset KUBECONFIG and the \
         tests start it themselves",
        kubeconfig.display()
    );
}

fn find_kubeconfig() -> PathBuf {
    if let Some(own) = faults::own_plane_kubeconfig().or_else(real_node::own_plane_kubeconfig) {
        return own;
    }
    {
        if let Some(p) = std::env::var_os("KUBECONFIG").map(PathBuf::from).filter(|p| p.exists()) {
            return p;
        }
        eprintln!(
            "storageos-operator tests: KUBECONFIG is not set, so this test target starts the local \
             control plane (hack/k8s.sh up; its first run builds it, several minutes). The fast \
             tier needs none: see docs/development.md#the-fast-tier"
        );
        let out = Command::new("bash")
            .arg(repo_root().join("hack/k8s.sh"))
            .arg("up")
            .output()
            .expect("run hack/k8s.sh up");
        if !out.status.success() {
            panic!(
                "the local control plane did not come up (hack/k8s.sh up):\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("export KUBECONFIG="))
            .unwrap_or_else(|| panic!("hack/k8s.sh up printed no KUBECONFIG line: {stdout}"));
        PathBuf::from(line.trim())
    }
}

/// Path of the `kubectl` built with the plane (same version).
pub fn kubectl() -> PathBuf {
    let versions = std::fs::read_to_string(repo_root().join("hack/versions.env")).expect("versions.env");
    let version = versions
        .lines()
        .find_map(|l| l.strip_prefix("K8S_VERSION="))
        .expect("K8S_VERSION in versions.env")
        .trim()
        .to_string();
    let cache = std::env::var_os("STORAGEOS_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/storageos-operator"));
    cache.join(format!("bin/k8s-{version}/kubectl"))
}

/// The etcd binary `hack/k8s.sh` built (hack/versions.env's ETCD_VERSION).
pub fn etcd_binary() -> PathBuf {
    let versions = std::fs::read_to_string(repo_root().join("hack/versions.env")).unwrap();
    let version = versions
        .lines()
        .find_map(|l| l.strip_prefix("ETCD_VERSION="))
        .unwrap()
        .trim()
        .to_string();
    kubectl()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join(format!("etcd-{version}/etcd"))
}

/// A client for the local plane.
pub async fn client() -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig_path()).expect("read kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig is usable");
    Client::try_from(config).expect("client")
}

/// Polls `check` every 100 ms until it yields `Some`, or panics after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until no StorageOSCluster is left on the plane: a cluster an earlier test left would
/// stay the active one and the next test's cluster would only wait.
pub async fn wait_no_clusters(client: &Client, timeout: Duration) {
    wait_for("earlier StorageOSClusters to be gone", timeout, || async {
        let left = Api::<StorageOSCluster>::all(client.clone())
            .list(&ListParams::default())
            .await
            .ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
}

/// Creates the StorageOS credentials Secret `storageos-api` in `ns` (what a StorageOSCluster's
/// `secretRefName` points at in the tests).
pub async fn create_api_secret(ns: &TestNamespace, username: &str, password: &str) {
    let secret: k8s_openapi::api::core::v1::Secret = from_json(json!({
        "metadata": {"name": "storageos-api"},
        "stringData": {"username": username, "password": password}
    }));
    ns.api::<k8s_openapi::api::core::v1::Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// A namespace of one test, deleted (without waiting) when dropped, also on failure.
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
}

impl TestNamespace {
    /// Creates `t-<prefix>-<random>` and waits for its default ServiceAccount, so pods can be
    /// created in it straight away.
    pub async fn new(prefix: &str) -> Self {
        let client = client().await;
        let suffix: u32 = rand::random::<u32>() % 1_000_000;
        let name = format!("t-{prefix}-{suffix:06}");
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"storageos-operator-test": "true"}}
        }))
        .expect("namespace");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        wait_for(
            "the namespace's default ServiceAccount",
            Duration::from_secs(30),
            || async { sas.get_opt("default").await.ok().flatten() },
        )
        .await;
        Self { name, client }
    }

    /// An API for namespaced objects of this test.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // The test's runtime may be single-threaded and busy dropping us, so delete from a
        // thread with its own runtime and client.
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                let client = client().await;
                // Pods a test bound to a node it made (and removed) have no kubelet to confirm
                // their deletion: removed at once, so the namespace goes now, not after the pod
                // garbage collector's quarantine, and a later test's uninstall does not see them.
                let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &name);
                let force = DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::background()
                };
                let _ = pods.delete_collection(&force, &ListParams::default()).await;
                let api = Api::<Namespace>::all(client);
                let _ = api.delete(&name, &DeleteParams::background()).await;
            });
        })
        .join();
    }
}

/// Builds a typed object from JSON, for compact test fixtures.
pub fn from_json<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("fixture matches the type")
}

/// Installs the CRDs with server-side apply and waits until each is Established.
pub async fn install_crds(client: &kube::Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (_, crd) in storageos_operator::crd::all() {
        let name = crd.metadata.name.clone().expect("crd name");
        api.patch(
            &name,
            &PatchParams::apply("storageos-operator-tests").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("the apiserver rejected CRD {name}: {e}"));
        wait_for(
            &format!("CRD {name} to be Established"),
            Duration::from_secs(30),
            || async {
                let c = api.get(&name).await.ok()?;
                let established = c
                    .status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                established.then_some(())
            },
        )
        .await;
    }
    // The caller gate goes with the kinds, as the operator puts it in place at start.
    storageos_operator::operator::caller_gate::ensure(client)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// This machine's primary non-loopback IPv4 address. Endpoints may not point at loopback, so a
/// test that serves something the apiserver reaches through a Service listens on this address.
pub fn host_ip() -> std::net::IpAddr {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").expect("bind a UDP socket");
    // Connecting a UDP socket sends nothing; it only picks the outgoing interface.
    socket
        .connect("10.255.255.255:9")
        .expect("a route to pick the outgoing interface");
    let ip = socket.local_addr().expect("local address").ip();
    assert!(
        !ip.is_loopback() && !ip.is_unspecified(),
        "no non-loopback IPv4 address on this machine"
    );
    ip
}

/// An api-manager controller context against `sim` (logged in), with api-manager `flags` as the
/// Go binary took them (for example `["-node-poll-interval", "5s"]`). Tests run single
/// controllers in-process with it: `tokio::spawn(fencing::run(ctx.clone()))`.
#[allow(dead_code)]
pub async fn api_manager_context(
    sim: &storageos_operator::sim::SimHandle,
    flags: &[&str],
) -> std::sync::Arc<storageos_operator::apimanager::controllers::Context> {
    api_manager_context_as(sim, flags, api_manager_client().await).await
}

/// [`api_manager_context`] acting through `kube` (for example an identity lacking a rule).
pub async fn api_manager_context_as(
    sim: &storageos_operator::sim::SimHandle,
    flags: &[&str],
    kube: Client,
) -> std::sync::Arc<storageos_operator::apimanager::controllers::Context> {
    api_manager_context_in(sim, flags, kube, "default").await
}

/// [`api_manager_context_as`] for an api-manager running in `namespace` (where it places the
/// drain gate's guards).
pub async fn api_manager_context_in(
    sim: &storageos_operator::sim::SimHandle,
    flags: &[&str],
    kube: Client,
    namespace: &str,
) -> std::sync::Arc<storageos_operator::apimanager::controllers::Context> {
    let (ctx, polls) = api_manager_wired_in(sim, flags, kube, namespace).await;
    // The process runs the StorageOS poll next to its controllers; so do the tests, both halves
    // on the test's runtime (the process runs the node half on the fencer's worker), for as long
    // as that runtime lives.
    let api = ctx.api.clone();
    tokio::spawn(async move { polls.run(api).await });
    ctx
}

/// The controllers' context and the poll, wired as `api-manager run` wires them
/// (`apimanager::polls::wire`), the poll not yet running: the caller runs it.
pub async fn api_manager_wired_in(
    sim: &storageos_operator::sim::SimHandle,
    flags: &[&str],
    kube: Client,
    namespace: &str,
) -> (
    std::sync::Arc<storageos_operator::apimanager::controllers::Context>,
    std::sync::Arc<storageos_operator::apimanager::polls::Polls>,
) {
    use storageos_operator::apimanager::flags::ApiManagerArgs;
    use storageos_operator::apimanager::metrics::ApiManagerMetrics;
    use storageos_operator::runtime::kube::metrics::ReconcileMetrics;
    use storageos_operator::storageos;

    let mut registry = prometheus_client::registry::Registry::default();
    let args = ApiManagerArgs::from_flags(flags.iter().copied()).expect("valid api-manager flags");
    let api = storageos::Client::with_metrics(
        storageos::Config::new(sim.url(), "storageos", "storageos"),
        &mut registry,
    )
    .expect("StorageOS client");
    api.login().await.expect("login to the simulator");
    storageos_operator::apimanager::polls::wire(
        kube,
        api,
        args.controllers(),
        namespace.into(),
        ReconcileMetrics::register(&mut registry),
        ApiManagerMetrics::register(&mut registry),
        storageos_operator::apimanager::controllers::pvc_cache(),
    )
}

/// The plane's three kwok nodes, as the tests that register them in the simulator name them.
#[allow(dead_code)]
pub const KWOK_NODES: [&str; 3] = ["kwok-node-0", "kwok-node-1", "kwok-node-2"];

/// A simulator with the plane's kwok nodes registered online (the CRDs installed on the plane
/// first, as the api-manager's controllers read them), and the admin client.
#[allow(dead_code)]
pub async fn sim_on_the_plane() -> (Client, storageos_operator::sim::SimHandle) {
    use storageos_operator::sim::{self, Simulator};
    use storageos_operator::storageos::models::Health;
    let client = client().await;
    install_crds(&client).await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    for n in KWOK_NODES {
        sim.add_node(n, Health::Online).unwrap();
    }
    (client, sim)
}

/// Logs in to `sim` as the CSI driver does; the `authorization` header to send (`Bearer …`).
#[allow(dead_code)]
pub async fn sim_login(http: &reqwest::Client, sim: &storageos_operator::sim::SimHandle) -> String {
    let login = http
        .post(format!("{}/v2/auth/login", sim.url()))
        .json(&serde_json::json!({"username": "storageos", "password": "storageos"}))
        .send()
        .await
        .expect("log in to the simulator");
    login.headers()["authorization"]
        .to_str()
        .expect("an ASCII authorization header")
        .to_string()
}

/// Held by a test that needs the cluster-wide "one active StorageOSCluster" to be its own
/// cluster; released when dropped. Serialises such tests across test binaries and processes.
pub struct ClusterLock(std::fs::File);

/// Waits until no other test holds the [`ClusterLock`], then takes it.
pub fn cluster_lock() -> ClusterLock {
    let dir = kubeconfig_path()
        .parent()
        .expect("the kubeconfig lives in a directory")
        .to_path_buf();
    let path = dir.join("storageoscluster-tests.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    file.lock().unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
    ClusterLock(file)
}

/// Controller logs in the test output (shown for failed tests; `RUST_LOG` overrides).
#[allow(dead_code)]
pub fn logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("storageos_operator=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// A short random suffix for cluster-scoped names.
pub fn suffix() -> String {
    format!("{:06}", rand::random::<u32>() % 1_000_000)
}

/// Cluster-scoped objects of one test, deleted when dropped (also on failure).
#[derive(Default)]
pub struct ClusterObjects {
    made: Mutex<Vec<(&'static str, String)>>,
}

impl ClusterObjects {
    fn remember(&self, kind: &'static str, name: &str) {
        self.made.lock().unwrap().push((kind, name.to_string()));
    }

    /// Creates a Node with these annotations (not managed by kwok: no kubelet, no heartbeat).
    /// It carries [`NO_KUBELET_TAINT`], so DaemonSets of tests running meanwhile (Jobs, pre-pull)
    /// never wait for pods there.
    pub async fn node(&self, client: &Client, name: &str, annotations: serde_json::Value) -> Node {
        let node: Node = from_json(json!({
            "metadata": {"name": name, "annotations": annotations, "labels": {"storageos-operator-test": "true"}},
            "spec": {"taints": [no_kubelet_taint()]}
        }));
        self.remember("Node", name);
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap()
    }

    /// Creates a StorageClass of the StorageOS provisioner.
    pub async fn storage_class(&self, client: &Client, name: &str) {
        let sc: StorageClass = from_json(json!({
            "metadata": {"name": name},
            "provisioner": "csi.storageos.com",
            "reclaimPolicy": "Retain",
            "volumeBindingMode": "Immediate"
        }));
        self.remember("StorageClass", name);
        Api::<StorageClass>::all(client.clone())
            .create(&PostParams::default(), &sc)
            .await
            .unwrap();
    }

    /// Creates a pre-provisioned PV bound to claim `ns/claim`: a StorageOS CSI volume, or a
    /// host path volume when `storageos` is false.
    pub async fn pv(&self, client: &Client, name: &str, class: &str, ns: &str, claim: &str, storageos: bool) {
        let source = if storageos {
            json!({"csi": {"driver": "csi.storageos.com", "volumeHandle": format!("handle-{name}")}})
        } else {
            json!({"hostPath": {"path": format!("/tmp/{name}")}})
        };
        let mut spec = json!({
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": class,
            "claimRef": {"namespace": ns, "name": claim}
        });
        spec.as_object_mut()
            .unwrap()
            .extend(source.as_object().unwrap().clone());
        let pv: PersistentVolume = from_json(json!({"metadata": {"name": name}, "spec": spec}));
        self.remember("PersistentVolume", name);
        Api::<PersistentVolume>::all(client.clone())
            .create(&PostParams::default(), &pv)
            .await
            .unwrap();
    }

    /// Creates a VolumeAttachment of the StorageOS attacher on `node`, for `pv` (or an inline
    /// volume when `pv` is None).
    pub async fn attachment(&self, client: &Client, name: &str, node: &str, pv: Option<&str>) {
        let source = match pv {
            Some(pv) => json!({"persistentVolumeName": pv}),
            None => json!({"inlineVolumeSpec": {
                "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": "csi.storageos.com", "volumeHandle": "inline"}
            }}),
        };
        let va: VolumeAttachment = from_json(json!({
            "metadata": {"name": name},
            "spec": {"attacher": "csi.storageos.com", "nodeName": node, "source": source}
        }));
        self.remember("VolumeAttachment", name);
        Api::<VolumeAttachment>::all(client.clone())
            .create(&PostParams::default(), &va)
            .await
            .unwrap();
    }
}

impl Drop for ClusterObjects {
    fn drop(&mut self) {
        let made = std::mem::take(&mut *self.made.lock().unwrap());
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                let client = client().await;
                let dp = DeleteParams::background();
                for (kind, name) in made {
                    let _ = match kind {
                        "Node" => Api::<Node>::all(client.clone()).delete(&name, &dp).await.map(|_| ()),
                        "StorageClass" => Api::<StorageClass>::all(client.clone())
                            .delete(&name, &dp)
                            .await
                            .map(|_| ()),
                        "PersistentVolume" => Api::<PersistentVolume>::all(client.clone())
                            .delete(&name, &dp)
                            .await
                            .map(|_| ()),
                        _ => Api::<VolumeAttachment>::all(client.clone())
                            .delete(&name, &dp)
                            .await
                            .map(|_| ()),
                    };
                }
            });
        })
        .join();
    }
}

/// What every fencer and node/namespace delete test starts with: the cross-process [`cluster_lock`] (maintenance is
/// cluster-wide and the upgrade tests switch it on; they hold the same lock), the CRDs, no
/// maintenance left by a killed run, and logs.
pub async fn exclusive() -> ClusterLock {
    let lock = cluster_lock();
    // As where the api-manager runs: the StorageOSCluster CRD is installed, so maintenance is
    // read from real objects (without it, every read would mean "no upgrade").
    install_crds(&client().await).await;
    no_maintenance().await;
    logs();
    lock
}

/// Waits (up to two minutes) until no upgrade holds the cluster in maintenance.
async fn no_maintenance() {
    use storageos_operator::apimanager::maintenance::{self, Maintenance};
    let client = client().await;
    wait_for(
        "other tests' upgrades to end (maintenance is cluster-wide)",
        std::time::Duration::from_secs(120),
        || async { matches!(maintenance::current(&client, None).await, Ok(Maintenance::Off)).then_some(()) },
    )
    .await;
}

/// Puts the cluster in maintenance: a paused StorageOSCluster in `ns` annotated as paused by
/// upgrade `upgrade`, and that StorageOSUpgrade in `ns` in phase UpgradingNodes (the annotation
/// counts only while the upgrade it names is under way; no operator acts on either here).
pub async fn start_maintenance(ns: &TestNamespace, upgrade: &str) {
    let u: StorageOSUpgrade = from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSUpgrade",
        "metadata": {"name": upgrade},
        "spec": {"newImage": "storageos/node:test"}
    }));
    let upgrades = ns.api::<StorageOSUpgrade>();
    upgrades.create(&PostParams::default(), &u).await.unwrap();
    upgrades
        .patch_status(
            upgrade,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "UpgradingNodes"}})),
        )
        .await
        .unwrap();
    let c: StorageOSCluster = from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
        "metadata": {"name": "maintenance", "annotations": {"storageos.com/paused-by-upgrade": upgrade}},
        "spec": {"secretRefName": "storageos-api", "secretRefNamespace": ns.name, "pause": true,
                 "kvBackend": {"address": KV_ADDRESS}}
    }));
    ns.api::<StorageOSCluster>()
        .create(&PostParams::default(), &c)
        .await
        .unwrap();
}

/// Ends the maintenance [`start_maintenance`] began (deletes the cluster, finalizers included).
pub async fn end_maintenance(ns: &TestNamespace) {
    let api = ns.api::<StorageOSCluster>();
    let _ = api
        .patch(
            "maintenance",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": null, "annotations": {"storageos.com/paused-by-upgrade": null}}}),
            ),
        )
        .await;
    let _ = api.delete("maintenance", &DeleteParams::background()).await;
    let upgrades = ns.api::<StorageOSUpgrade>();
    for u in upgrades
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let _ = upgrades
            .patch(
                &u.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
        let _ = upgrades.delete(&u.name_any(), &DeleteParams::background()).await;
    }
}

/// Events in `namespace` about the object `name` (of `kind`, when given) with this reason
/// (cluster-scoped objects have theirs in `default`).
#[allow(dead_code)]
pub async fn events(client: &Client, namespace: &str, kind: Option<&str>, name: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| kind.is_none_or(|k| e.involved_object.kind.as_deref() == Some(k)))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// Waits (up to 30 s) for an event about `name` in `namespace` with this reason whose message
/// contains `mentions` (any message when empty).
pub async fn wait_event(client: &Client, namespace: &str, name: &str, reason: &str, mentions: &str) -> Event {
    wait_for(
        &format!("a {reason} event on {name} mentioning {mentions:?}"),
        Duration::from_secs(30),
        || async {
            events(client, namespace, None, name, reason)
                .await
                .into_iter()
                .find(|e| message(e).contains(mentions))
        },
    )
    .await
}

/// Names of the ClusterRoleBindings with a subject in `namespace` (a ServiceAccount there given
/// cluster-wide rights).
#[allow(dead_code)]
pub async fn cluster_role_bindings_naming(client: &Client, namespace: &str) -> Vec<String> {
    Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|b| {
            b.subjects
                .iter()
                .flatten()
                .any(|s| s.namespace.as_deref() == Some(namespace))
        })
        .map(|b| b.name_any())
        .collect()
}

/// A status with Kubernetes conditions (the StorageOSCluster's, Job's and StorageOSUpgrade's).
pub trait Conditions {
    fn conditions(&self) -> &[Condition];
}

macro_rules! conditions_of {
    ($($status:ty),*) => {$(
        impl Conditions for $status {
            fn conditions(&self) -> &[Condition] {
                self.conditions.as_deref().unwrap_or_default()
            }
        }
    )*};
}
conditions_of!(
    storageos_operator::crd::StorageOSClusterStatus,
    storageos_operator::crd::JobStatus,
    storageos_operator::crd::StorageOSUpgradeStatus
);

/// The condition of type `type_` in `status`, if it has one.
pub fn condition<'a>(status: &'a impl Conditions, type_: &str) -> Option<&'a Condition> {
    status.conditions().iter().find(|c| c.type_ == type_)
}

/// The message of an event.
pub fn message(e: &Event) -> String {
    e.message.clone().unwrap_or_default()
}

/// Names of the objects in a list.
pub fn names<K: ResourceExt>(items: &[K]) -> Vec<String> {
    items.iter().map(ResourceExt::name_any).collect()
}

/// The annotations of a Node whose StorageOS CSI node plugin registered it as `node_id`, built
/// from the product's own names (and checked against `storageos::kube::runs_storageos`).
pub fn storageos_node_annotations(node_id: &str) -> serde_json::Value {
    use storageos_operator::storageos::kube::{CSI_DRIVER, CSI_NODE_ANNOTATION, runs_storageos};
    let value = json!({ CSI_DRIVER: node_id }).to_string();
    let annotations = std::collections::BTreeMap::from([(CSI_NODE_ANNOTATION.to_string(), value)]);
    assert!(
        runs_storageos(&annotations),
        "{annotations:?} names the StorageOS CSI driver"
    );
    json!(annotations)
}

/// The taint key of Nodes that tests create without a kubelet.
#[allow(dead_code)]
pub const NO_KUBELET_TAINT: &str = "storageos-operator-test/no-kubelet";

/// `NoSchedule` taint for test-created Nodes: pods bound with `nodeName` still land there, but
/// no DaemonSet (a Job's, an upgrade's pre-pull) counts them.
#[allow(dead_code)]
pub fn no_kubelet_taint() -> serde_json::Value {
    serde_json::json!({"key": NO_KUBELET_TAINT, "effect": "NoSchedule"})
}
pub mod apimanager;
pub mod dist;
pub mod evidence;
#[allow(unused_imports)]
pub use evidence::after_polls;
pub mod faults;
pub mod install;
pub mod operator;
pub mod real_node;
pub mod seed;

/// `kubectl storageos preflight ARGS -o json` as the admin of `kubeconfig`: (exit ok, report).
pub fn preflight(kubeconfig: &std::path::Path, args: &[&str]) -> (bool, serde_json::Value) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-storageos"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("preflight")
        .args(args)
        .args(["-o", "json"])
        .output()
        .expect("run kubectl-storageos");
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "preflight {args:?} -o json is not JSON ({e}):\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), report)
}
