//! Integration tier: OpenTelemetry traces of `run` and `api-manager`, run as processes under
//! their ServiceAccounts, exported over OTLP/HTTP to a receiver inside the test.
//!
//! - The operator (`OTEL_EXPORTER_OTLP_ENDPOINT`, with an hour-long batch delay so that only the
//!   flush at exit can deliver): a StorageOSCluster reconcile is a `reconcile` span whose
//!   children are its server-side `apply` spans and its StorageOS requests (route templates).
//! - The api-manager (configured as for the Go api-manager: `JAEGER_DISABLED=false`,
//!   `JAEGER_ENDPOINT=.../api/traces`, mapped to OTLP's `/v1/traces`): a fencing episode is a
//!   `fencing` span over the fencer's `reconcile` of the Node and its StorageOS requests; a pod
//!   admission is an `admission` span with its verdict.
//! - No attribute of any span holds the StorageOS password or a token.
//! - An endpoint that is no URL leaves tracing off with an error naming it; the process runs on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use serde_json::json;
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::sim::{self, SimHandle, Simulator};
use storageos_operator::storageos::Health;
use support::apimanager::free_port;
use support::{ClusterObjects, TestNamespace, from_json, suffix, wait_for};

const SETTLE: Duration = Duration::from_secs(90);

/// One exported span, flattened.
#[derive(Clone, Debug)]
struct Exported {
    service: String,
    name: String,
    trace: Vec<u8>,
    id: Vec<u8>,
    parent: Vec<u8>,
    attributes: BTreeMap<String, String>,
    status_message: String,
}

impl Exported {
    fn attr(&self, key: &str) -> &str {
        self.attributes.get(key).map(String::as_str).unwrap_or("")
    }

    fn is_child_of(&self, parent: &Exported) -> bool {
        self.trace == parent.trace && self.parent == parent.id
    }
}

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn flatten(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter().map(|kv| (kv.key.clone(), text(&kv.value))).collect()
}

/// An OTLP/HTTP (protobuf) traces receiver on 127.0.0.1; stops when dropped.
struct Receiver {
    port: u16,
    spans: Arc<Mutex<Vec<Exported>>>,
    /// Paths the exporters posted to.
    paths: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

type Received = (Arc<Mutex<Vec<Exported>>>, Arc<Mutex<Vec<String>>>);

async fn receive(State((spans, paths)): State<Received>, uri: axum::http::Uri, body: Bytes) -> Vec<u8> {
    paths.lock().unwrap().push(uri.path().to_string());
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP ExportTraceServiceRequest");
    let mut got = spans.lock().unwrap();
    for rs in request.resource_spans {
        let resource = flatten(&rs.resource.map(|r| r.attributes).unwrap_or_default());
        let service = resource.get("service.name").cloned().unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                got.push(Exported {
                    service: service.clone(),
                    name: s.name,
                    trace: s.trace_id,
                    id: s.span_id,
                    parent: s.parent_span_id,
                    attributes: flatten(&s.attributes),
                    status_message: s.status.map(|st| st.message).unwrap_or_default(),
                });
            }
        }
    }
    ExportTraceServiceResponse::default().encode_to_vec()
}

impl Receiver {
    async fn start() -> Self {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route("/{*path}", post(receive))
            .with_state((spans.clone(), paths.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            port,
            spans,
            paths,
            task,
        }
    }

    fn spans(&self) -> Vec<Exported> {
        self.spans.lock().unwrap().clone()
    }

    fn paths(&self) -> Vec<String> {
        self.paths.lock().unwrap().clone()
    }

    /// No attribute (nor status message) of any span holds `password`, a bearer token or a
    /// simulator token (`sim.` and 64 hex digits).
    fn assert_no_secrets(&self, password: &str) {
        let spans = self.spans();
        assert!(!spans.is_empty());
        let is_token = |v: &str| {
            v.match_indices("sim.")
                .any(|(i, _)| v[i + 4..].chars().take(64).filter(char::is_ascii_hexdigit).count() == 64)
        };
        for s in &spans {
            for (k, v) in s.attributes.iter().chain([(&"status".to_string(), &s.status_message)]) {
                assert!(
                    !v.contains(password),
                    "span {} attribute {k}={v:?} holds the password",
                    s.name
                );
                assert!(
                    !v.contains("Bearer"),
                    "span {} attribute {k}={v:?} holds a bearer token",
                    s.name
                );
                assert!(!is_token(v), "span {} attribute {k}={v:?} holds a token", s.name);
            }
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A child process, SIGKILLed when dropped (its log printed if the test failed).
struct Process {
    child: Child,
    log: std::path::PathBuf,
}

impl Process {
    fn spawn(cmd: &mut Command, log: &Path) -> Self {
        let out = std::fs::File::create(log).unwrap();
        let child = cmd
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .expect("start the binary");
        Self {
            child,
            log: log.to_path_buf(),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then waits (up to 20 s) for a clean exit.
    async fn terminate(&mut self) {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        let mut status = None;
        for _ in 0..200 {
            status = self.child.try_wait().unwrap();
            if status.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let status = status.expect("the process did not exit within 20 s of SIGTERM");
        assert!(status.success(), "exit status {status}:\n{}", self.log());
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- {} ---\n{}", self.log.display(), self.log());
        }
    }
}

fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_storageos-operator"))
}

/// `api-manager` against `sim`, with the credentials and identity in `creds` (see
/// `support::apimanager::credentials`), its webhooks on `webhook_port`.
fn api_manager_command(ns: &TestNamespace, sim: &SimHandle, creds: &Path, webhook_port: u16) -> Command {
    let mut cmd = binary();
    cmd.arg("api-manager")
        .arg(format!("-api-endpoint={}", sim.url()))
        .arg(format!("-api-secret-path={}", creds.display()))
        .arg(format!("-namespace={}", ns.name))
        .arg(format!("-webhook-config-mutating={}", ns.name))
        .arg(format!("-metrics-addr=127.0.0.1:{}", free_port()))
        .arg(format!("--webhook-addr=127.0.0.1:{webhook_port}"))
        .env("KUBECONFIG", creds.join("storageos-api-manager-sa.kubeconfig"))
        .env("POD_NAME", &ns.name);
    cmd
}

/// A simulator whose only user has a password no span may contain.
async fn simulator(password: &str) -> SimHandle {
    Simulator::start(sim::Config {
        username: "trace-admin".into(),
        password: password.into(),
        ..sim::Config::default()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_cluster_reconcile_is_a_span_over_its_applies_and_storageos_requests_flushed_at_exit() {
    let _lock = support::exclusive().await;
    let ns = TestNamespace::new("trace-op").await;
    let client = ns.client.clone();
    let clusters: Api<StorageOSCluster> = ns.api();
    support::wait_no_clusters(&client, SETTLE).await;

    let password = format!("pw-{}-trace", suffix());
    let sim = simulator(&password).await;
    let _sync = sim.sync_with_kubernetes(client.clone());
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = support::operator_kubeconfig(dir.path()).await;
    let mut operator = Process::spawn(
        support::operator::run_command(&kubeconfig, &sim.url(), "tracing-test")
            .env("LOG_LEVEL", "info,kube=warn")
            .env(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{}", receiver.port),
            )
            // Only the flush at exit delivers: the batch would otherwise wait an hour.
            .env("OTEL_BSP_SCHEDULE_DELAY", "3600000"),
        &dir.path().join("operator.log"),
    );

    // Declared after the operator, so dropped (also on failure) while the operator still runs.
    let _cluster = ClusterGuard(ns.name.clone());
    support::create_api_secret(&ns, "trace-admin", &password).await;
    let cluster: StorageOSCluster = from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
        "metadata": {"name": "traced"},
        "spec": {"secretRefName": "storageos-api", "secretRefNamespace": ns.name, "namespace": ns.name,
                 "kvBackend": {"address": support::KV_ADDRESS},
                 "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname",
                     "operator": "In", "values": ["kwok-node-0", "kwok-node-1", "kwok-node-2"]}]}]}
    }));
    clusters.create(&PostParams::default(), &cluster).await.unwrap();
    // A second reconcile asking StorageOS for its nodes means the first one has ended.
    wait_for("two reconciles that asked StorageOS for its nodes", SETTLE, || async {
        let asked = sim
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path == "/v2/nodes")
            .count();
        (asked >= 2).then_some(())
    })
    .await;
    assert!(
        operator.log().contains("tracing: exporting spans over OTLP/HTTP"),
        "{}",
        operator.log()
    );
    // The operator removes what the cluster made (cluster-scoped objects too), then stops.
    delete_cluster(&clusters).await;
    operator.terminate().await;

    let spans = receiver.spans();
    assert!(
        receiver.paths().iter().all(|p| p == "/v1/traces"),
        "{:?}",
        receiver.paths()
    );
    let reconciles: Vec<&Exported> = spans
        .iter()
        .filter(|s| {
            s.name == "reconcile"
                && s.attr("controller") == "storageoscluster"
                && s.attr("object.namespace") == ns.name
                && s.attr("object.name") == "traced"
        })
        .collect();
    assert!(!reconciles.is_empty(), "no reconcile span of the cluster in {spans:#?}");
    for r in &reconciles {
        assert_eq!(r.service, "storageos-operator");
        assert!(r.parent.is_empty(), "a reconcile is a root span: {r:?}");
        assert!(matches!(r.attr("result"), "ok" | "error"), "{r:?}");
    }
    let traced = reconciles
        .iter()
        .find(|r| {
            let children: Vec<&Exported> = spans.iter().filter(|s| s.is_child_of(r)).collect();
            children.iter().any(|c| {
                c.name == "apply" && c.attr("k8s.kind") == "DaemonSet" && c.attr("k8s.name") == "storageos-daemonset"
            }) && children.iter().any(|c| {
                c.name == "GET /nodes"
                    && c.attr("http.request.method") == "GET"
                    && c.attr("url.template") == "/nodes"
                    && c.attr("http.response.status_code") == "200"
            })
        })
        .unwrap_or_else(|| {
            panic!("no reconcile with an apply of the node DaemonSet and GET /nodes below it: {spans:#?}")
        });
    assert_eq!(traced.attr("result"), "ok", "{traced:?}");
    let applies = spans
        .iter()
        .filter(|s| s.name == "apply" && s.is_child_of(traced))
        .count();
    assert!(applies > 10, "every object of the pass is applied in it: {applies}");
    // The login is a request like the others, by route.
    assert!(
        spans
            .iter()
            .any(|s| s.attr("url.template") == "/auth/login" && s.attr("http.request.method") == "POST"),
        "no login span"
    );
    receiver.assert_no_secrets(&password);
}

/// Deletes the cluster `traced` (force: no StorageOS volume is in use here) and waits until its
/// finalizer, run by the operator, has removed everything it made.
async fn delete_cluster(clusters: &Api<StorageOSCluster>) {
    let force = json!({"metadata": {"annotations": {"storageos.com/force-delete": "true"}}});
    let _ = clusters
        .patch("traced", &PatchParams::default(), &Patch::Merge(&force))
        .await;
    let _ = clusters.delete("traced", &DeleteParams::default()).await;
    wait_for("the cluster to be deleted", SETTLE, || async {
        clusters.get_opt("traced").await.ok()?.is_none().then_some(())
    })
    .await;
}

/// Deletes the cluster of a failed test while its operator still runs (its cluster-scoped
/// objects, such as the webhook configuration, would otherwise stay behind).
struct ClusterGuard(String);

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        let namespace = self.0.clone();
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                let clusters: Api<StorageOSCluster> = Api::namespaced(support::client().await, &namespace);
                if clusters.get_opt("traced").await.ok().flatten().is_some() {
                    delete_cluster(&clusters).await;
                }
            });
        })
        .join();
    }
}

/// The fencing world: a Node to lose and a healthy one (in Kubernetes and StorageOS), a
/// StorageOS PVC whose master is on the healthy node, and an opted-in pod using it on the node
/// to lose.
struct FencingWorld {
    lost: String,
    objects: ClusterObjects,
}

async fn fencing_world(ns: &TestNamespace, sim: &SimHandle) -> FencingWorld {
    let id = suffix();
    let objects = ClusterObjects::default();
    let class = format!("t-trace-{id}");
    objects.storage_class(&ns.client, &class).await;
    let lost = format!("trace-{id}-lost");
    let healthy = format!("trace-{id}-healthy");
    for node in [&lost, &healthy] {
        objects.node(&ns.client, node, json!({})).await;
        sim.add_node(node, Health::Online).unwrap();
    }
    let pv = format!("pv-{id}-data");
    objects.pv(&ns.client, &pv, &class, &ns.name, "data", true).await;
    let pvc: PersistentVolumeClaim = from_json(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class, "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}}
    }));
    ns.api::<PersistentVolumeClaim>()
        .create(&PostParams::default(), &pvc)
        .await
        .unwrap();
    sim.add_volume(support::seed::volume(&ns.name, &pv, "data", &healthy))
        .unwrap();
    let pod: Pod = from_json(json!({
        "metadata": {"name": "app", "labels": {"storageos.com/fenced": "true"}},
        "spec": {"nodeName": lost, "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                 "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]}
    }));
    ns.api::<Pod>().create(&PostParams::default(), &pod).await.unwrap();
    FencingWorld { lost, objects }
}

/// An AdmissionReview of a pod CREATE in `ns` mounting PVC `data`, posted to the api-manager's
/// pod webhook; the response.
async fn admit_pod(port: u16, ns: &str) -> serde_json::Value {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "trace-1", "operation": "CREATE", "namespace": ns, "name": "web",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "userInfo": {"username": "test"},
            "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": ns},
                       "spec": {"containers": [{"name": "web", "image": "registry.invalid/web:1"}],
                                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]}}
        }
    });
    // The serving certificate names the webhook Service, not 127.0.0.1.
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let url = format!("https://127.0.0.1:{port}/mutate-pods");
    wait_for("the pod webhook to answer", Duration::from_secs(30), || async {
        let r = http.post(&url).json(&review).send().await.ok()?;
        r.status().is_success().then_some(())?;
        r.json::<serde_json::Value>().await.ok()
    })
    .await
}

#[tokio::test]
async fn a_fencing_episode_and_an_admission_are_spans_of_the_api_manager_configured_as_for_jaeger() {
    let _lock = support::exclusive().await;
    let ns = TestNamespace::new("trace-am").await;
    let password = format!("pw-{}-trace", suffix());
    let sim = simulator(&password).await;
    let world = fencing_world(&ns, &sim).await;
    let receiver = Receiver::start().await;

    // Credentials files and the api-manager's identity, with a webhook configuration of its own.
    let dir = support::apimanager::credentials(&ns, "trace-admin", &password).await;
    let mwcs = support::apimanager::webhook_config(&ns).await;

    let webhook_port = free_port();
    let mut api_manager = Process::spawn(
        api_manager_command(&ns, &sim, dir.path(), webhook_port)
            .args(["-node-poll-interval=5s", "-node-fencer-retry-interval=1s"])
            // The Go api-manager's configuration; Jaeger takes OTLP at /v1/traces.
            .env("JAEGER_DISABLED", "false")
            .env(
                "JAEGER_ENDPOINT",
                format!("http://127.0.0.1:{}/api/traces", receiver.port),
            )
            .env("OTEL_BSP_SCHEDULE_DELAY", "200"),
        &dir.path().join("api-manager.log"),
    );

    let answer = admit_pod(webhook_port, &ns.name).await;
    assert!(
        !answer["response"]["patch"].is_null(),
        "the pod gets the scheduler: {answer}"
    );

    wait_for("the fencer's first poll", Duration::from_secs(30), || async {
        sim.requests()
            .iter()
            .any(|r| r.method == "GET" && r.path == "/v2/nodes" && r.status == 200)
            .then_some(())
    })
    .await;
    sim.set_health(&world.lost, Health::Offline).unwrap();
    let fencing = wait_for("the fencing span of the lost node", SETTLE, || async {
        receiver
            .spans()
            .into_iter()
            .find(|s| s.name == "fencing" && s.attr("node") == world.lost)
    })
    .await;
    assert!(
        ns.api::<Pod>().get_opt("app").await.unwrap().is_none(),
        "the pod is fenced"
    );
    let fenced = support::events(&ns.client, &ns.name, Some("Pod"), "app", "Fenced").await;
    assert_eq!(fenced.len(), 1, "{fenced:?}");
    assert_eq!(fencing.service, "api-manager");
    assert_eq!(fencing.attr("pods.fenced"), "1", "{fencing:?}");
    assert_eq!(fencing.attr("pods.skipped"), "0", "{fencing:?}");
    assert_eq!(fencing.attr("result"), "done", "{fencing:?}");
    assert!(fencing.parent.is_empty(), "an episode is a root span: {fencing:?}");

    let spans = receiver.spans();
    let pass = spans
        .iter()
        .find(|s| {
            s.name == "reconcile"
                && s.is_child_of(&fencing)
                && s.attr("controller") == "fencer"
                && s.attr("object.name") == world.lost
        })
        .unwrap_or_else(|| panic!("no fencer reconcile of the node below the episode: {spans:#?}"));
    assert_eq!(pass.attr("result"), "ok");
    let volumes = spans
        .iter()
        .find(|s| s.is_child_of(pass) && s.attr("url.template") == "/namespaces/{id}/volumes")
        .unwrap_or_else(|| panic!("no StorageOS volume list below the fencing pass: {spans:#?}"));
    assert_eq!(volumes.name, "GET /namespaces/{id}/volumes");
    assert_eq!(volumes.attr("http.response.status_code"), "200");

    let admission = spans
        .iter()
        .find(|s| s.name == "admission")
        .unwrap_or_else(|| panic!("no admission span: {spans:#?}"));
    assert_eq!(admission.attr("webhook"), "pod");
    assert_eq!(admission.attr("operation"), "CREATE");
    assert_eq!(admission.attr("verdict"), "patched");
    assert_eq!(admission.attr("k8s.namespace"), ns.name);
    assert!(
        receiver.paths().iter().all(|p| p == "/v1/traces"),
        "JAEGER_ENDPOINT .../api/traces maps to /v1/traces: {:?}",
        receiver.paths()
    );
    let log = api_manager.log();
    assert!(
        log.contains("tracing: exporting spans over OTLP/HTTP") && log.contains("JAEGER_ENDPOINT"),
        "{log}"
    );
    receiver.assert_no_secrets(&password);

    api_manager.terminate().await;
    let _ = mwcs.delete(&ns.name, &DeleteParams::default()).await;
    drop(world.objects);
}

#[tokio::test]
async fn an_unusable_endpoint_leaves_tracing_off_with_an_error_naming_it_and_the_process_runs_on() {
    let ns = TestNamespace::new("trace-bad").await;
    let sim = simulator("storageos").await;
    let dir = support::apimanager::credentials(&ns, "trace-admin", "storageos").await;
    let mut api_manager = Process::spawn(
        api_manager_command(&ns, &sim, dir.path(), free_port())
            // No scheme: not a URL.
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "otel-collector:4318"),
        &dir.path().join("api-manager.log"),
    );
    wait_for("the api-manager to log in to StorageOS", SETTLE, || async {
        sim.requests()
            .iter()
            .any(|r| r.path == "/v2/auth/login" && r.status == 200)
            .then_some(())
    })
    .await;
    let log = api_manager.log();
    assert!(
        log.contains("tracing is off: OTEL_EXPORTER_OTLP_ENDPOINT=\"otel-collector:4318\" is not a usable endpoint"),
        "{log}"
    );
    assert!(!log.contains("exporting spans"), "{log}");
    api_manager.terminate().await;
}
