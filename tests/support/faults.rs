//! Faults for tests/k8s_faults.rs: a control plane of the test process's own (its kube-apiserver
//! is restarted, which must not disturb the tests of other binaries), the operator and the
//! api-manager as child processes that can be SIGKILLed, and what they did, read from the
//! apiserver's audit log and the simulator's request log.
//!
//! A test of that file calls [`exclusive`] before anything else: it starts the plane (once per
//! process) so that [`super::kubeconfig_path`] is this plane's, and runs the tests one at a time.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Endpoints, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use storageos_operator::crd::{StorageOSCluster, StorageOSUpgrade};
use storageos_operator::sim::SimHandle;

use super::identity::Identity;
use super::{ClusterLock, TestNamespace, from_json, repo_root, wait_for};

/// A plane `hack/k8s.sh up` started for this process alone, in a temporary state directory on
/// free ports; `hack/k8s.sh down` stops it when the process ends (see [`OwnPlane::start`]).
pub struct OwnPlane {
    state: PathBuf,
    k8s_port: u16,
    etcd_port: u16,
    /// Started with `REAL_NODES=1` (tests/k8s_real_node.rs).
    real_node: bool,
}

static OWN: OnceLock<OwnPlane> = OnceLock::new();

/// The kubeconfig of this process's own plane, once [`own_plane`] has started it.
pub fn own_plane_kubeconfig() -> Option<PathBuf> {
    OWN.get().map(|p| p.state.join("kubeconfig"))
}

/// This process's own plane, started on first use.
pub fn own_plane() -> &'static OwnPlane {
    OWN.get_or_init(OwnPlane::start)
}

/// `n` consecutive free ports on 127.0.0.1 (the apiserver uses its port and the next three, etcd
/// its port and the next), none of them in `avoid`. They lie below the kernel's ephemeral range
/// (32768 and up), where an outgoing connection could take one between this check and the bind.
fn free_ports(n: u16, avoid: &[u16]) -> u16 {
    loop {
        let base = 21000 + rand::random::<u16>() % 11000;
        let ports = base..base + n;
        if ports.clone().any(|p| avoid.contains(&p)) {
            continue;
        }
        if ports
            .clone()
            .all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        {
            return base;
        }
    }
}

impl OwnPlane {
    fn start() -> Self {
        Self::start_with("faults", false)
    }

    /// A plane for this process alone; `kind` names its state directory, `real_node` adds the
    /// real kubelet node (`REAL_NODES=1`, which also uses the apiserver's port + 10 to + 15).
    pub fn start_with(kind: &str, real_node: bool) -> Self {
        let state = std::env::temp_dir().join(format!("storageos-{kind}-plane-{}", std::process::id()));
        let ports = || {
            let k8s_port = free_ports(if real_node { 16 } else { 4 }, &[]);
            let etcd_port = free_ports(2, &(k8s_port..k8s_port + 16).collect::<Vec<_>>());
            (k8s_port, etcd_port)
        };
        let (k8s_port, etcd_port) = ports();
        let mut plane = Self {
            state,
            k8s_port,
            etcd_port,
            real_node,
        };
        // First the watchdog, in a process group of its own (a Ctrl-C of the test run does not
        // reach it): once this process has ended, however it ended, it stops the plane.
        use std::os::unix::process::CommandExt;
        // Never waited for: it outlives this process on purpose.
        #[allow(clippy::zombie_processes)]
        let _watchdog = plane
            .env(&mut Command::new("bash"))
            .args([
                "-c",
                r#"while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec bash "$2" down"#,
                "storageos-faults-plane-watchdog",
            ])
            .arg(std::process::id().to_string())
            .arg(repo_root().join("hack/k8s.sh"))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the plane's watchdog");
        // A component that fails to start on a loaded machine (seen once: kube-controller-manager;
        // once a port taken between the check and the bind) fails `up`, which stops what it
        // started; a second attempt starts afresh, on other ports.
        let mut out = plane.k8s_sh("up").output().expect("run hack/k8s.sh up");
        for _ in 0..2 {
            if out.status.success() {
                break;
            }
            eprintln!(
                "hack/k8s.sh up failed; trying again on other ports:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            (plane.k8s_port, plane.etcd_port) = ports();
            out = plane.k8s_sh("up").output().expect("run hack/k8s.sh up");
        }
        assert!(
            out.status.success(),
            "the tests' own control plane did not come up (hack/k8s.sh up, K8S_STATE={}):\n{}",
            plane.state.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        plane
    }

    /// `cmd` with this plane's `hack/k8s.sh` environment.
    fn env<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        cmd.env("K8S_STATE", &self.state)
            .env("K8S_PORT", self.k8s_port.to_string())
            .env("ETCD_PORT", self.etcd_port.to_string())
            .env("NODES", "3")
            .env("REAL_NODES", if self.real_node { "1" } else { "0" })
            .env_remove("KUBECONFIG")
    }

    /// The plane's state directory (`K8S_STATE`).
    pub fn state(&self) -> &Path {
        &self.state
    }

    /// `bash hack/k8s.sh <cmd>` for this plane.
    pub fn k8s_sh(&self, cmd: &str) -> Command {
        let mut c = Command::new("bash");
        self.env(&mut c).arg(repo_root().join("hack/k8s.sh")).arg(cmd);
        c
    }

    /// Stops the kube-apiserver and starts it again from its recorded command line
    /// (`hack/k8s.sh restart-apiserver`); returns once it is ready again. Blocking work runs off
    /// the test's runtime, so an in-process simulator keeps answering meanwhile.
    pub async fn restart_apiserver(&'static self) {
        let out = tokio::task::spawn_blocking(move || self.k8s_sh("restart-apiserver").output())
            .await
            .unwrap()
            .expect("run hack/k8s.sh restart-apiserver");
        assert!(
            out.status.success(),
            "hack/k8s.sh restart-apiserver failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// What every fault test starts with: this process's own plane (then every support function
/// uses it), one test at a time, the CRDs, and logs.
pub async fn exclusive() -> ClusterLock {
    own_plane();
    let lock = super::cluster_lock();
    assert_eq!(
        super::kubeconfig_path(),
        own_plane().state.join("kubeconfig"),
        "a fault test used the shared plane before starting its own (call faults::exclusive() first)"
    );
    super::install_crds(&super::client().await).await;
    super::logs();
    lock
}

/// A child process (`storageos-operator run` or `api-manager`) logging to a file; SIGKILLed
/// when dropped, and its log's end printed if the test failed.
pub struct Process {
    pub name: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    fn spawn(name: &str, mut cmd: Command, log: PathBuf) -> Self {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = cmd
            .env(
                "LOG_LEVEL",
                std::env::var("FAULTS_CHILD_LOG").unwrap_or_else(|_| "info,kube=warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        Self {
            name: name.into(),
            child,
            log,
        }
    }

    /// SIGKILL: nothing of the process's own clean-up runs (no lease release).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its process id (for sampling its memory in /proc).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, once the process has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!("--- {} log (last lines) ---", self.name);
            for line in &lines[lines.len().saturating_sub(60)..] {
                eprintln!("{line}");
            }
        }
    }
}

/// The operator (`run`) as its ServiceAccount (`kubeconfig`), electing a leader on the
/// install's Lease under `identity`, as a replica of the Deployment does.
pub fn operator(kubeconfig: &Path, sim: &SimHandle, identity: &str, extra: &[&str]) -> Process {
    let mut cmd = super::operator::run_command(kubeconfig, &sim.url(), identity);
    cmd.args(extra);
    let log = kubeconfig.with_file_name(format!("{identity}.log"));
    Process::spawn(&format!("operator {identity}"), cmd, log)
}

/// The replica holding the Lease `namespace/name`, if any.
pub async fn lease_holder(client: &Client, namespace: &str, name: &str) -> Option<String> {
    let lease = Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .ok()??;
    lease.spec?.holder_identity
}

/// Where an api-manager runs: StorageOS credentials files and a kubeconfig acting as its
/// ServiceAccount (with its rules for the webhook configuration named after the namespace),
/// and a webhook configuration and Service routed, through Endpoints on this machine's
/// address, to `webhook_port`, as in a cluster.
pub struct ApiManagerHome {
    pub dir: tempfile::TempDir,
    pub namespace: String,
    pub webhook_port: u16,
    /// The MutatingWebhookConfiguration whose caBundle the replicas keep.
    webhook_config: String,
    /// Whether this home made that configuration (and the policy refusing the rendered
    /// api-manager's pods, for a home standing in for a cluster's): removed on drop.
    owns_config: bool,
    client: Client,
    /// Whether a replica listens on `webhook_port` already (the others get ports of their own,
    /// as pods have addresses of their own).
    port_taken: std::sync::atomic::AtomicBool,
}

impl ApiManagerHome {
    /// Creates everything in the test namespace `ns`. The pod hook fails open
    /// (`failurePolicy: Ignore`, as rendered) and sees only pods of `ns`.
    pub async fn new(ns: &TestNamespace) -> Self {
        let dir = credentials_dir();
        super::api_manager_kubeconfig(dir.path(), &ns.name).await;
        let webhook_port = free_ports(1, &[]);
        let host = super::host_ip().to_string();
        let svc: Service = from_json(json!({"metadata": {"name": "storageos-webhook"},
            "spec": {"ports": [{"name": "webhook", "port": 443, "targetPort": webhook_port}]}}));
        ns.api::<Service>().create(&PostParams::default(), &svc).await.unwrap();
        let eps: Endpoints = from_json(json!({"metadata": {"name": "storageos-webhook"},
            "subsets": [{"addresses": [{"ip": host}], "ports": [{"name": "webhook", "port": webhook_port}]}]}));
        ns.api::<Endpoints>()
            .create(&PostParams::default(), &eps)
            .await
            .unwrap();
        let mwc: MutatingWebhookConfiguration = from_json(json!({
            "metadata": {"name": ns.name},
            "webhooks": [{
                "name": "pod-mutator.storageos.com",
                "clientConfig": {"service": {"namespace": ns.name, "name": "storageos-webhook", "path": "/mutate-pods", "port": 443}},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
                "failurePolicy": "Ignore", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 5
            }]
        }));
        Api::<MutatingWebhookConfiguration>::all(ns.client.clone())
            .create(&PostParams::default(), &mwc)
            .await
            .unwrap();
        Self {
            dir,
            namespace: ns.name.clone(),
            webhook_port,
            webhook_config: ns.name.clone(),
            owns_config: true,
            client: ns.client.clone(),
            port_taken: Default::default(),
        }
    }

    /// Replicas standing in for the api-manager a StorageOSCluster in `ns` renders, under its
    /// rendered webhook configuration (which fails closed for encryption-labelled PVCs): the
    /// rendered Deployment's pods are refused (kwok's would answer nothing), and the rendered
    /// webhook Service routes to the replicas here: `webhook_port` (the first replica's) and
    /// each of `other_ports`, as EndpointSlices the slice controller leaves alone.
    pub async fn for_cluster(ns: &TestNamespace, other_ports: &[u16]) -> Self {
        let dir = credentials_dir();
        let config = storageos_operator::rbac::components::API_MANAGER_WEBHOOK_CONFIG;
        super::api_manager_kubeconfig(dir.path(), config).await;
        let webhook_port = free_ports(1, other_ports);
        let policy = format!("no-api-manager-pods-{}", ns.name);
        let refuse = json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {"failurePolicy": "Fail",
                     "matchConstraints": {
                         "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
                         "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
                         "objectSelector": {"matchLabels": {"app.kubernetes.io/component": "storageos-api-manager"}}},
                     "validations": [{"expression": "false", "message": "the test runs the api-manager as local processes"}]}
        });
        let binding = json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {"policyName": policy, "validationActions": ["Deny"]}
        });
        for obj in [refuse, binding] {
            super::identity::apply_as_admin(&ns.client, &obj).await;
        }
        let host = super::host_ip().to_string();
        let slices = Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(ns.client.clone(), &ns.name);
        for (i, port) in std::iter::once(webhook_port)
            .chain(other_ports.iter().copied())
            .enumerate()
        {
            let slice = from_json(json!({
                "metadata": {"name": format!("storageos-webhook-test-{i}"),
                             "labels": {"kubernetes.io/service-name": "storageos-webhook",
                                        "endpointslice.kubernetes.io/managed-by": "tests.storageos.com"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [host], "conditions": {"ready": true}}],
                "ports": [{"name": "webhooks", "port": port, "protocol": "TCP"}]
            }));
            slices.create(&PostParams::default(), &slice).await.unwrap();
        }
        Self {
            dir,
            namespace: ns.name.clone(),
            webhook_port,
            webhook_config: config.to_string(),
            owns_config: false,
            client: ns.client.clone(),
            port_taken: Default::default(),
        }
    }

    /// An api-manager replica named `pod_name` against `sim`, with extra `flags`. The first
    /// serves the webhooks the configuration routes to.
    pub fn replica(&self, sim: &SimHandle, pod_name: &str, flags: &[&str]) -> Process {
        let port = if self.port_taken.swap(true, std::sync::atomic::Ordering::SeqCst) {
            free_ports(1, &[self.webhook_port])
        } else {
            self.webhook_port
        };
        self.replica_at(sim, pod_name, flags, port)
    }

    /// A replica listening for webhooks on `port`: a replica started again after a SIGKILL
    /// keeps its port, as a pod restarted in place keeps its address.
    pub fn replica_at(&self, sim: &SimHandle, pod_name: &str, flags: &[&str], port: u16) -> Process {
        let ns = &self.namespace;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_storageos-operator"));
        cmd.arg("api-manager")
            .arg(format!("-api-endpoint={}", sim.url()))
            .arg(format!("-api-secret-path={}", self.dir.path().display()))
            .arg("-api-retry-interval=500ms")
            .arg(format!("-namespace={ns}"))
            .arg(format!("-webhook-config-mutating={}", self.webhook_config))
            .arg("-metrics-addr=127.0.0.1:0")
            .arg(format!("--webhook-addr={}:{port}", super::host_ip()))
            .args(flags)
            .env(
                "KUBECONFIG",
                self.dir
                    .path()
                    .join(format!("{}.kubeconfig", super::identity::API_MANAGER_SA)),
            )
            .env("POD_NAME", pod_name);
        let log = self.dir.path().join(format!("{pod_name}.log"));
        Process::spawn(&format!("api-manager {pod_name}"), cmd, log)
    }

    /// Waits until the replicas' webhook certificate is in the Secret and its CA in the
    /// configuration's caBundle; the Secret's CA.
    pub async fn serving_ca(&self) -> String {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let mwcs: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        wait_for(
            "the webhook certificate and its CA in the caBundle",
            Duration::from_secs(60),
            || async {
                let secret = secrets.get_opt("storageos-webhook").await.ok()??;
                let ca = String::from_utf8(secret.data?.get("ca-cert.pem")?.0.clone()).ok()?;
                let hooks = mwcs.get(&self.webhook_config).await.ok()?.webhooks?;
                let bundle = String::from_utf8(hooks.first()?.client_config.ca_bundle.clone()?.0).ok()?;
                bundle.contains(ca.trim()).then_some(ca)
            },
        )
        .await
    }
}

/// A directory holding the StorageOS credentials as the api-manager reads them
/// (`-api-secret-path`); its kubeconfig goes there too.
fn credentials_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("username"), "storageos\n").unwrap();
    std::fs::write(dir.path().join("password"), "storageos\n").unwrap();
    dir
}

impl Drop for ApiManagerHome {
    fn drop(&mut self) {
        let (client, name, owns) = (self.client.clone(), self.namespace.clone(), self.owns_config);
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                if owns {
                    let _ = Api::<MutatingWebhookConfiguration>::all(client)
                        .delete(&name, &DeleteParams::default())
                        .await;
                } else {
                    use k8s_openapi::api::admissionregistration::v1::{
                        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
                    };
                    let policy = format!("no-api-manager-pods-{name}");
                    let _ = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
                        .delete(&policy, &DeleteParams::default())
                        .await;
                    let _ = Api::<ValidatingAdmissionPolicy>::all(client)
                        .delete(&policy, &DeleteParams::default())
                        .await;
                }
            });
        })
        .join();
    }
}

/// How many times `who` deleted each object (`resource namespace/name`) successfully (2xx)
/// from `since` on, by the audit log. A retried delete that found the object gone (404) does
/// not count: it changed nothing.
pub fn deletes_by(who: Identity, since: chrono::DateTime<chrono::Utc>) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for e in super::identity::audit_events(who, since) {
        let ok = e["responseStatus"]["code"]
            .as_u64()
            .is_some_and(|c| (200..300).contains(&c));
        if e["verb"] == "delete" && ok {
            let o = &e["objectRef"];
            let key = format!(
                "{} {}/{}",
                o["resource"].as_str().unwrap_or_default(),
                o["namespace"].as_str().unwrap_or_default(),
                o["name"].as_str().unwrap_or_default()
            );
            *counts.entry(key).or_insert(0) += 1;
        }
    }
    counts
}

/// The StorageOS requests that change state (not GET, not the login or token refresh), as
/// `METHOD path`, from the simulator's request log, answered with a success.
pub fn storageos_writes(sim: &SimHandle) -> Vec<String> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method != "GET" && !r.path.starts_with("/v2/auth/"))
        .filter(|r| (200..300).contains(&r.status))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

/// The children of the cluster the operator made so far in `ns`, by `kind/name`, with their
/// UIDs: a child deleted and made again gets another UID.
pub async fn children(ns: &TestNamespace) -> std::collections::BTreeMap<String, String> {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let selector = "app.kubernetes.io/managed-by=storageos-operator";
    let lp = ListParams::default().labels(selector);
    let mut seen = std::collections::BTreeMap::new();
    for sa in ns.api::<ServiceAccount>().list(&lp).await.unwrap() {
        seen.insert(format!("ServiceAccount/{}", sa.name_any()), sa.uid().unwrap());
    }
    for ds in ns.api::<DaemonSet>().list(&lp).await.unwrap() {
        seen.insert(format!("DaemonSet/{}", ds.name_any()), ds.uid().unwrap());
    }
    for d in ns.api::<Deployment>().list(&lp).await.unwrap() {
        seen.insert(format!("Deployment/{}", d.name_any()), d.uid().unwrap());
    }
    for s in ns.api::<Secret>().list(&lp).await.unwrap() {
        seen.insert(format!("Secret/{}", s.name_any()), s.uid().unwrap());
    }
    seen
}

/// Removes every StorageOSCluster and StorageOSUpgrade of this process's plane (finalizers
/// included), left by an earlier test that failed, so the next test's cluster is the active one.
pub async fn clear_clusters(client: &Client) {
    let unfinalize = json!({"metadata": {"finalizers": null}});
    for u in Api::<StorageOSUpgrade>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        let api: Api<StorageOSUpgrade> = Api::namespaced(client.clone(), &u.namespace().unwrap());
        let _ = api
            .patch(&u.name_any(), &PatchParams::default(), &Patch::Merge(&unfinalize))
            .await;
        let _ = api.delete(&u.name_any(), &DeleteParams::default()).await;
    }
    for c in Api::<StorageOSCluster>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        let api: Api<StorageOSCluster> = Api::namespaced(client.clone(), &c.namespace().unwrap());
        let _ = api
            .patch(&c.name_any(), &PatchParams::default(), &Patch::Merge(&unfinalize))
            .await;
        let _ = api.delete(&c.name_any(), &DeleteParams::default()).await;
    }
    super::wait_no_clusters(client, Duration::from_secs(60)).await;
}

/// Name of the clusters the fault tests create.
pub const CLUSTER: &str = "storageos";

/// Creates the StorageOS credentials Secret and a StorageOSCluster `storageos` in `ns`, on the
/// plane's three kwok nodes, with the node image `node_image`.
pub async fn create_cluster(ns: &TestNamespace, node_image: &str) {
    super::create_api_secret(ns, "storageos", "storageos").await;
    let cluster: StorageOSCluster = from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
        "metadata": {"name": CLUSTER},
        "spec": {"secretRefName": "storageos-api", "secretRefNamespace": ns.name,
                 "namespace": ns.name, "images": {"nodeContainer": node_image},
                 "kvBackend": {"address": super::KV_ADDRESS},
                 "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname",
                     "operator": "In", "values": ["kwok-node-0", "kwok-node-1", "kwok-node-2"]}]}]}
    }));
    ns.api::<StorageOSCluster>()
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
}

/// The cluster's (phase, ready, Ready condition status), once it has a status.
pub async fn cluster_state(ns: &TestNamespace) -> Option<(String, String, String)> {
    let c = ns.api::<StorageOSCluster>().get(CLUSTER).await.ok()?;
    super::install::ready(&c)
}

/// Waits (up to `timeout`) until the cluster is 3/3 Running with `Ready=True`.
pub async fn wait_running(ns: &TestNamespace, timeout: Duration) {
    wait_for("the cluster to be 3/3 Running and Ready", timeout, || async {
        let (phase, ready, condition) = cluster_state(ns).await?;
        (phase == "Running" && ready == "3/3" && condition.starts_with("True ")).then_some(())
    })
    .await;
}

/// Deletes the cluster (forced: volumes may still be in use) and waits until the operator
/// removed it.
pub async fn delete_cluster(ns: &TestNamespace) {
    let clusters = ns.api::<StorageOSCluster>();
    let force = json!({"metadata": {"annotations": {"storageos.com/force-delete": "true"}}});
    let _ = clusters
        .patch(CLUSTER, &PatchParams::default(), &Patch::Merge(&force))
        .await;
    let _ = clusters.delete(CLUSTER, &DeleteParams::default()).await;
    wait_for("the cluster to be deleted", Duration::from_secs(90), || async {
        clusters.get_opt(CLUSTER).await.ok()?.is_none().then_some(())
    })
    .await;
}
