//! One size of the bench: a fresh plane with `n` kwok nodes, the install, the simulator, the
//! operator and the api-manager as local processes, then the measured steps in order:
//!
//! - RSS (VmRSS, VmHWM) of both after a steady idle minute, and their CPU seconds in it (the
//!   minute starts once the api-manager has written nothing for 15 s after the workload, at
//!   most --settle-max s later; how long that took is reported);
//! - writes to the apiserver in that minute by verb and resource (audit log, by the
//!   `storageos-operator/...` user agent) and StorageOS API requests by route (simulator log);
//! - StorageOSCluster created → every child applied (audit log), over fresh clusters;
//! - fencing latency: node offline in the simulator → fenced pod deleted, at a random point of
//!   the poll cycle, and the api-manager's apiserver writes per node flap (audit log), then
//!   again while the api-manager is busy;
//! - pod and PVC mutating webhook latency at a fixed rate through the real apiserver (dry-run
//!   creates: the webhooks run, nothing is stored);
//! - one shared-volume pass (NFS volumes → Services, Endpoints, mount endpoints published);
//! - a fresh api-manager on the full cluster with its mirrors deleted: its apiserver writes
//!   from its first StorageOS poll on, in its first 35 s and in the minute after (idle:
//!   nothing may be written), so a backlog or a loop cannot hide behind a warm-up.
//!
//! Each step writes `OUT/n<N>/<step>.json`; the report reads them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};
use tokio::process::Command;

use crate::load::{self, Hook, Workload};
use crate::measure::{self, epoch_now, loadavg, proc_stats};
use crate::mirrors;
use crate::plane::{self, Plane, wait_until};
use crate::processes::Procs;
use crate::{Args, step, webhook_direct};

/// The api-manager's StorageOS poll interval, s (the default and the floor).
const POLL: u64 = 5;
/// Before the idle minute: the api-manager quiet this long, s.
const SETTLE_QUIET: f64 = 15.0;
/// The fresh api-manager's first pass and the idle minute after it, from its first poll, s.
const FRESH_FIRST_PASS: u64 = 35;
const FRESH_IDLE: u64 = 60;
/// Fresh clusters at larger sizes cost minutes of DaemonSet pod churn each (controller-manager
/// at its default 20 requests/s): above this size one cluster is measured.
const CLUSTER_TRIALS_MAX_NODES: usize = 100;

/// kwok's api-manager pods would receive the webhook calls (their IPs are not on this
/// machine): refuse them, so the webhook Service routes only to the local api-manager.
const NO_API_MANAGER_PODS: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: bench-no-api-manager-pods}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules: [{apiGroups: [\"\"], apiVersions: [\"v1\"], operations: [\"CREATE\"], resources: [\"pods\"]}]
    objectSelector: {matchLabels: {app.kubernetes.io/component: storageos-api-manager}}
  validations:
    - expression: \"false\"
      message: \"the bench runs the api-manager as a local process\"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: bench-no-api-manager-pods}
spec:
  policyName: bench-no-api-manager-pods
  validationActions: [Deny]
";

/// What the steps of one size share.
struct Ctx<'a> {
    args: &'a Args,
    t0: Instant,
    plane: &'a Plane,
    bin: &'a Path,
    dir: PathBuf,
    n: usize,
    sim: String,
    am_metrics: String,
    webhook_addr: String,
    api_manager_namespace: String,
    http: reqwest::Client,
}

impl Ctx<'_> {
    fn step(&self, msg: &str) {
        step(self.t0, &format!("n={}: {msg}", self.n));
    }

    fn write(&self, file: &str, v: &Value) -> Result<()> {
        std::fs::write(self.dir.join(file), serde_json::to_string(v)?).with_context(|| format!("write {file}"))
    }

    /// The api-manager as a process of its own ServiceAccount.
    fn api_manager(&self) -> Command {
        let mut c = Command::new(self.bin);
        let dir = self.dir.to_string_lossy();
        c.args(["api-manager", "-kubeconfig", &format!("{dir}/api-manager.kubeconfig")])
            .args([
                "-api-endpoint",
                &self.sim,
                "-api-secret-path",
                &format!("{dir}/api-secret"),
            ])
            .args(["-namespace", &self.api_manager_namespace, "-enable-leader-election"])
            .args(["-metrics-addr", &self.am_metrics, "--webhook-addr", &self.webhook_addr])
            .args(["-node-poll-interval", &format!("{POLL}s")]);
        c
    }

    async fn sim_ok(&self, path: &str) -> bool {
        self.http
            .get(format!("{}{path}", self.sim))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    }
}

pub async fn run(
    args: &Args,
    t0: Instant,
    plane: &mut Plane,
    policy: &Path,
    bin: &Path,
    out: &Path,
    n: usize,
) -> Result<()> {
    let dir = out.join(format!("n{n}"));
    std::fs::create_dir_all(&dir)?;
    let pods = args.pods_at(n);
    let volumes = args.volumes_at(n, pods);
    let namespaces = args.namespaces_at(n, pods);
    step(t0, &format!("n={n}: control plane with {n} kwok nodes"));
    let _plane_up = plane.up(n, policy).await?;
    let plane: &Plane = plane;
    let port = plane.port;
    let host = plane::host_ip()?;
    let mut procs = Procs::default();
    let mut cx = Ctx {
        args,
        t0,
        plane,
        bin,
        dir,
        n,
        sim: format!("http://127.0.0.1:{}", port + 10),
        am_metrics: format!("127.0.0.1:{}", port + 12),
        webhook_addr: format!("{host}:{}", port + 13),
        api_manager_namespace: String::new(),
        http: reqwest::Client::new(),
    };
    let result = steps(
        &mut cx,
        &mut procs,
        &host,
        Workload {
            nodes: n,
            pods,
            volumes,
            namespaces,
        },
    )
    .await;
    cx.step("done; stopping");
    procs.stop_all().await;
    result
}

async fn steps(cx: &mut Ctx<'_>, procs: &mut Procs, host: &str, w: Workload) -> Result<()> {
    let (plane, n, dir) = (cx.plane, cx.n, cx.dir.clone());
    let port = plane.port;
    let root = &plane.root;
    let admin = plane.client().await?;
    cx.step("install (deploy/operator.yaml), simulator, operator");
    let manifest = root.join("deploy/operator.yaml");
    plane
        .kc(&["apply", "--server-side", "-f", &manifest.to_string_lossy()])
        .await?;
    plane
        .kc(&[
            "wait",
            "--for",
            "condition=Established",
            "crd",
            "--all",
            "--timeout=60s",
        ])
        .await?;
    plane
        .kc(&[
            "-n",
            "storageos-operator",
            "scale",
            "deployment",
            "storageos-operator",
            "--replicas=0",
        ])
        .await?;
    plane.apply(NO_API_MANAGER_PODS).await?;
    let mut sim = Command::new(cx.bin);
    sim.args([
        "simulate",
        "--listen",
        &format!("127.0.0.1:{}", port + 10),
        "--kubeconfig",
    ])
    .arg(&plane.kubeconfig);
    procs.start(&dir, "simulator", sim)?;
    plane
        .kubeconfig_for(
            "storageos-operator",
            "storageos-operator",
            &dir.join("operator.kubeconfig"),
        )
        .await?;
    let op_metrics = format!("127.0.0.1:{}", port + 11);
    let mut op = Command::new(cx.bin);
    op.env("KUBECONFIG", dir.join("operator.kubeconfig"))
        .env("POD_NAMESPACE", "storageos-operator")
        .env("POD_NAME", "bench")
        .args(["run", "--storageos-endpoint", &cx.sim, "--metrics-addr", &op_metrics]);
    procs.start(&dir, "operator", op)?;
    wait_until("simulator", 30, || cx.sim_ok("/_sim/nodes")).await?;
    let healthz = format!("http://{op_metrics}/healthz");
    wait_until("operator /healthz", 60, || http_ok(&cx.http, &healthz)).await?;
    plane
        .kc(&[
            "apply",
            "-f",
            &root.join("deploy/examples/storageos-secret.yaml").to_string_lossy(),
        ])
        .await?;

    let trials = if n <= CLUSTER_TRIALS_MAX_NODES {
        cx.args.cluster_trials
    } else {
        1
    };
    cx.step(&format!(
        "StorageOSCluster applied → children applied, {trials} fresh cluster(s)"
    ));
    let cluster = load::cluster(
        admin.clone(),
        &root.join("deploy/examples/storageoscluster.yaml"),
        trials,
    )
    .await?;
    cx.write("cluster.json", &cluster)?;
    cx.step(&format!("waiting for {n} StorageOS nodes online in the simulator"));
    let nodes_url = format!("{}/_sim/nodes", cx.sim);
    wait_until("simulator nodes", 600, || async {
        let Ok(r) = cx.http.get(&nodes_url).send().await else {
            return false;
        };
        let Ok(nodes) = r.json::<Vec<Value>>().await else {
            return false;
        };
        nodes.iter().filter(|v| v["health"] == "online").count() >= n
    })
    .await?;

    cx.step("api-manager");
    let cns = plane
        .kc(&[
            "get",
            "stos",
            "storageos",
            "-n",
            "storageos-operator",
            "-o",
            "jsonpath={.spec.namespace}",
        ])
        .await
        .unwrap_or_default();
    cx.api_manager_namespace = if cns.trim().is_empty() {
        "kube-system".into()
    } else {
        cns.trim().into()
    };
    let cns = cx.api_manager_namespace.clone();
    std::fs::create_dir_all(dir.join("api-secret"))?;
    std::fs::write(dir.join("api-secret/username"), "storageos")?;
    std::fs::write(dir.join("api-secret/password"), "storageos")?;
    plane
        .kubeconfig_for(&cns, "storageos-api-manager-sa", &dir.join("api-manager.kubeconfig"))
        .await?;
    procs.start(&dir, "api-manager", cx.api_manager())?;
    // The rendered webhook Service's endpoints: this process (an EndpointSlice the slice
    // controller leaves alone).
    plane
        .apply(&format!(
            "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: storageos-webhook-bench
  namespace: {cns}
  labels: {{kubernetes.io/service-name: storageos-webhook, endpointslice.kubernetes.io/managed-by: bench.storageos.com}}
addressType: IPv4
endpoints: [{{addresses: [\"{host}\"], conditions: {{ready: true}}}}]
ports: [{{name: webhooks, port: {}, protocol: TCP}}]
",
            port + 13
        ))
        .await?;
    let readyz = format!("http://{}/readyz", cx.am_metrics);
    wait_until("api-manager /readyz", 120, || http_ok(&cx.http, &readyz)).await?;
    wait_until("webhook caBundle", 60, || async {
        plane
            .kc(&[
                "get",
                "mutatingwebhookconfiguration",
                "storageos-mutating-webhook",
                "-o",
                "jsonpath={.webhooks[0].clientConfig.caBundle}",
            ])
            .await
            .is_ok_and(|s| !s.trim().is_empty())
    })
    .await?;

    cx.step(&format!(
        "workload: {} pods ({} on StorageOS PVCs), {} volumes, {} namespaces",
        w.pods,
        w.pods / 2,
        w.volumes,
        w.namespaces
    ));
    let workload = load::workload(admin.clone(), &cx.sim, &w).await?;
    cx.write("workload.json", &workload)?;

    idle_minute(cx, procs).await?;

    cx.step(&format!("fencing, {} trials (poll {POLL}s)", cx.args.fence_trials));
    let f0 = epoch_now();
    let fence = load::fence(
        admin.clone(),
        &cx.sim,
        n,
        cx.args.fence_trials,
        POLL as f64,
        "bench-fence",
    )
    .await?;
    cx.write("fence.json", &fence)?;
    // The flaps' window, for the writes per flap (audit log): the last trial's node is back
    // online and polled; one more poll of each kind lets its writes land.
    tokio::time::sleep(Duration::from_secs(POLL * 2)).await;
    cx.write(
        "fence-window.json",
        &json!({"from": f0, "to": epoch_now(), "trials": cx.args.fence_trials, "pods_per_node": w.pods / n}),
    )?;

    if !cx.args.no_fence_busy {
        fence_busy(cx, &admin).await?;
    }

    let (rps, secs) = (cx.args.rps, cx.args.webhook_seconds);
    let metrics = format!("http://{}/metrics", cx.am_metrics);
    for (hook, file, what, metrics) in [
        (
            Hook::PodBaseline,
            "webhook-baseline.json",
            "baseline: pods without a PVC (no webhook)",
            None,
        ),
        (Hook::Pod, "webhook-pod.json", "pod webhook", Some(metrics.as_str())),
        (Hook::Pvc, "webhook-pvc.json", "PVC webhook", Some(metrics.as_str())),
    ] {
        cx.step(&format!(
            "{what}, {rps} rps for {secs}s (dry-run creates through the apiserver)"
        ));
        let r = load::webhook(admin.clone(), hook, "bench-0", "data-0", rps, secs, metrics).await?;
        cx.write(file, &r)?;
    }

    if n == cx.args.max_nodes() && cx.args.shared > 0 {
        cx.step(&format!("shared-volume pass with {} shared volumes", cx.args.shared));
        let shared = load::shared(admin.clone(), &cx.sim, n, cx.args.shared).await?;
        cx.write("shared.json", &shared)?;
    }

    let op_end = proc_stats(procs.pid("operator")?)?;
    let am_end = proc_stats(procs.pid("api-manager")?)?;
    fresh_api_manager(cx, procs).await?;
    cx.write(
        "end.json",
        &json!({"operator_vmhwm_kib": op_end.hwm_kib, "api_manager_vmhwm_kib": am_end.hwm_kib, "load": loadavg()}),
    )?;
    std::fs::copy(plane.audit_log(), dir.join("audit.jsonl")).context("copy the audit log")?;
    Ok(())
}

async fn http_ok(http: &reqwest::Client, url: &str) -> bool {
    http.get(url).send().await.is_ok_and(|r| r.status().is_success())
}

/// Settling, then the idle minute: RSS, CPU, writes and reads (the audit log's tail), StorageOS
/// requests.
async fn idle_minute(cx: &Ctx<'_>, procs: &Procs) -> Result<()> {
    cx.step(&format!(
        "settling (15 s without an api-manager write, at most {} s), then the idle minute (RSS, CPU, writes, StorageOS requests)",
        cx.args.settle_max
    ));
    let audit = cx.plane.audit_log();
    let settle = measure::settle(&audit, SETTLE_QUIET, cx.args.settle_max as f64).await?;
    cx.write("settle.json", &settle)?;
    let (op_pid, am_pid) = (procs.pid("operator")?, procs.pid("api-manager")?);
    let a0 = std::fs::metadata(&audit)?.len();
    let (op0, am0) = (proc_stats(op_pid)?, proc_stats(am_pid)?);
    measure::clear_sim_requests(&cx.http, &cx.sim).await?;
    let load0 = loadavg();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let (op1, am1) = (proc_stats(op_pid)?, proc_stats(am_pid)?);
    // Where the memory is (anonymous heap, each malloc arena, code), for notes.
    let _ = std::fs::copy(format!("/proc/{op_pid}/smaps"), cx.dir.join("operator.smaps"));
    let _ = std::fs::copy(format!("/proc/{am_pid}/smaps"), cx.dir.join("api-manager.smaps"));
    let all = std::fs::read(&audit)?;
    let tail = all.get(a0 as usize..).unwrap_or_default();
    std::fs::write(cx.dir.join("idle-audit.jsonl"), tail)?;
    let sim = measure::sim_requests(&cx.http, &cx.sim).await?;
    cx.write("idle-sim.json", &Value::Array(sim))?;
    let cpu = |a: f64, b: f64| ((b - a) * 100.0).round() / 100.0;
    cx.write(
        "idle.json",
        &json!({"seconds": 60, "load_before": load0, "load_after": loadavg(),
            "operator": {"vmrss_kib": op1.rss_kib, "vmhwm_kib": op1.hwm_kib, "cpu_s": cpu(op0.cpu_s, op1.cpu_s)},
            "api_manager": {"vmrss_kib": am1.rss_kib, "vmhwm_kib": am1.hwm_kib, "cpu_s": cpu(am0.cpu_s, am1.cpu_s)}}),
    )
}

/// Fencing while the same api-manager is busy: the trials again while (a) its pod webhook
/// takes --rps admissions a second straight (through the apiserver, minutes of dry-run creates
/// at this rate saturate a 2-core plane, and the trials would measure the apiserver), (b)
/// every volume mirror is deleted over and over, so the mirror rewrites them all, and (c) every
/// PVC's labels change over and over, so the PVC label sync writes every volume's labels to
/// StorageOS. The busy work runs from the trials' start to their end; its rounds are counted.
async fn fence_busy(cx: &Ctx<'_>, admin: &kube::Client) -> Result<()> {
    let trials = cx.args.fence_trials;
    cx.step(&format!(
        "fencing while busy, {trials} trials: pod webhook at {} rps, mirror passes, label-sync passes",
        cx.args.rps
    ));
    let url = format!("https://{}/mutate-pods", cx.webhook_addr);
    let hook = webhook_direct::start(&url, cx.args.rps as f64, "bench-0", "data-0")?;
    let (mirror_log, label_log) = (
        cx.dir.join("fence-busy-mirror.log"),
        cx.dir.join("fence-busy-labels.log"),
    );
    let mirror = load::AbortOnDrop(tokio::spawn({
        let (plane, log) = (cx.plane.clone(), mirror_log.clone());
        async move {
            let _ = mirrors::mirror_rounds(plane, &log).await;
        }
    }));
    let labels = load::AbortOnDrop(tokio::spawn({
        let (plane, log) = (cx.plane.clone(), label_log.clone());
        async move {
            let _ = mirrors::label_rounds(plane, &log).await;
        }
    }));
    let load0 = loadavg();
    let f0 = epoch_now();
    let fence = load::fence(admin.clone(), &cx.sim, cx.n, trials, POLL as f64, "bench-fence-busy").await;
    drop((mirror, labels));
    let webhook = hook.stop().await;
    cx.write("fence-busy-webhook.json", &webhook)?;
    cx.write("fence-busy.json", &fence?)?;
    let rounds = |p: &Path| std::fs::read_to_string(p).map(|s| s.lines().count()).unwrap_or(0);
    cx.write(
        "fence-busy-window.json",
        &json!({"from": f0, "to": epoch_now(), "load_before": load0, "load_after": loadavg(),
                "mirror_rounds": rounds(&mirror_log), "label_rounds": rounds(&label_log)}),
    )?;
    // Every mirror back before the next step.
    tokio::time::sleep(Duration::from_secs(POLL * 3)).await;
    Ok(())
}

/// A fresh api-manager on the full cluster whose mirrors are deleted, as on a first install:
/// its apiserver writes are counted (by the report, from the audit log) from its first
/// StorageOS poll on (the first node list the simulator answers after it starts), in the first
/// 35 s and in the 60 s after.
async fn fresh_api_manager(cx: &Ctx<'_>, procs: &mut Procs) -> Result<()> {
    cx.step(&format!(
        "fresh api-manager, mirrors deleted: writes from its first poll on ({FRESH_FIRST_PASS} s + {FRESH_IDLE} s)"
    ));
    procs.stop("api-manager").await;
    let plane = cx.plane;
    let volume_mirrors = mirrors::count(plane, "volumes.api.storageos.com").await;
    let node_mirrors = mirrors::count(plane, "nodes.api.storageos.com").await;
    mirrors::delete_all(plane).await;
    wait_until("mirrors deleted", 600, || async {
        plane
            .kc(&[
                "get",
                "volumes.api.storageos.com,nodes.api.storageos.com",
                "-A",
                "-o",
                "name",
            ])
            .await
            .is_ok_and(|s| s.trim().is_empty())
    })
    .await?;
    measure::clear_sim_requests(&cx.http, &cx.sim).await?;
    let started = epoch_now();
    procs.start(&cx.dir, "api-manager-fresh", cx.api_manager())?;
    let first_poll = |log: &[Value]| {
        log.iter()
            .filter(|e| e["method"] == "GET" && e["path"] == "/v2/nodes")
            .filter_map(|e| e["time"].as_str())
            .filter_map(|t| Some((crate::audit::ts(t)?, t.to_string())))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, t)| t)
    };
    wait_until("the fresh api-manager's first node list", 120, || async {
        measure::sim_requests(&cx.http, &cx.sim)
            .await
            .is_ok_and(|log| first_poll(&log).is_some())
    })
    .await?;
    let first = first_poll(&measure::sim_requests(&cx.http, &cx.sim).await?);
    tokio::time::sleep(Duration::from_secs(FRESH_FIRST_PASS + FRESH_IDLE + 2)).await;
    cx.write(
        "fresh.json",
        &json!({"started": started, "first_poll": first, "first_pass_s": FRESH_FIRST_PASS, "idle_s": FRESH_IDLE,
                "node_mirrors": node_mirrors, "volume_mirrors": volume_mirrors}),
    )
}
