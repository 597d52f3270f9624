//! The measured steps that load the plane: each does one step against it and returns one JSON
//! object for the report; progress goes to stderr.
//!
//! - `workload`: namespaces, StorageOS PVCs with their simulator volumes, and pods spread over
//!   the nodes (half of them mounting a StorageOS PVC), then waits until every pod runs.
//! - `fence`: fencing trials, node offline in the simulator → opted-in pod deleted.
//! - `webhook`: open-loop dry-run creates at a fixed rate through the apiserver, so the
//!   mutating webhooks run and nothing is stored.
//! - `cluster`: fresh StorageOSClusters one after the other (the apply times come from the
//!   audit log, read by the report).
//! - `shared`: one shared-volume pass: NFS volumes whose PVCs exist → every mount endpoint
//!   published.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use rand::Rng;
use serde_json::{Value, json};
use storageos_operator::crd::StorageOSCluster;

/// Label on everything the bench creates.
pub const WORKLOAD_LABEL: &str = "bench.storageos.com/workload";
const PROVISIONER: &str = "csi.storageos.com";
/// The StorageClass of every PVC.
const CLASS: &str = "fast";

fn node(i: usize) -> String {
    format!("kwok-node-{i}")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// p50, p99 and max of `v` (milliseconds), nearest-rank.
fn summary(mut v: Vec<f64>) -> Value {
    if v.is_empty() {
        return json!({"count": 0});
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    json!({"count": v.len(), "p50_ms": rank(0.50), "p90_ms": rank(0.90), "p99_ms": rank(0.99),
           "max_ms": v[v.len() - 1], "min_ms": v[0]})
}

async fn ensure_namespace(client: &Client, name: &str) -> Result<()> {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {WORKLOAD_LABEL: "true"}}}))?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).context(format!("create namespace {name}")),
    }
}

/// A StorageOS PVC pre-bound to `pv` (no PV object: the api-manager reads the binding and the
/// provisioner annotation, as for a dynamically provisioned volume).
fn pvc(name: &str, pv: &str, class: &str, access: &str) -> Result<PersistentVolumeClaim> {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {WORKLOAD_LABEL: "true"},
                     "annotations": {"volume.beta.kubernetes.io/storage-provisioner": PROVISIONER}},
        "spec": {"accessModes": [access], "storageClassName": class, "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .context("a PVC")
}

fn pod(name: &str, node: &str, claim: Option<&str>, fenced: bool) -> Result<Pod> {
    let mut labels = json!({WORKLOAD_LABEL: "true"});
    if fenced {
        labels["storageos.com/fenced"] = json!("true");
    }
    let volumes: Vec<Value> = claim
        .map(|c| json!({"name": "data", "persistentVolumeClaim": {"claimName": c}}))
        .into_iter()
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "app", "image": "registry.invalid/app:1"}], "volumes": volumes}
    }))
    .context("a pod")
}

async fn create<K>(api: &Api<K>, obj: &K) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let mut tries = 0;
    loop {
        match api.create(&PostParams::default(), obj).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
            Err(e) if tries < 5 => {
                tries += 1;
                eprintln!("  retrying a create: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e).context(format!("create {}", obj.name_any())),
        }
    }
}

/// Seeds a simulator volume (namespace/pv) with its master on `master`.
async fn seed_volume(
    http: &reqwest::Client,
    sim: &str,
    namespace: &str,
    pv: &str,
    pvc: &str,
    master: &str,
    nfs: Option<&str>,
) -> Result<()> {
    let body = json!({"namespace": namespace, "name": pv, "pvcName": pvc, "pvcNamespace": namespace,
                      "masterNode": master, "nfsServiceEndpoint": nfs});
    let r = http
        .post(format!("{sim}/_sim/volumes"))
        .json(&body)
        .send()
        .await
        .context("seed a simulator volume")?;
    let status = r.status();
    if !(status.is_success() || status.as_u16() == 409) {
        bail!(
            "seeding volume {namespace}/{pv}: {status} {}",
            r.text().await.unwrap_or_default()
        );
    }
    Ok(())
}

async fn set_health(http: &reqwest::Client, sim: &str, node: &str, health: &str) -> Result<()> {
    let r = http
        .put(format!("{sim}/_sim/nodes/{node}/health"))
        .json(&json!({"health": health}))
        .send()
        .await
        .context("set a node's health")?;
    if !r.status().is_success() {
        bail!("set {node} {health}: {}", r.status());
    }
    Ok(())
}

/// Waits for every workload pod to be Running. The bound only ends a hung run: kwok starts a
/// few pods a second on a loaded plane (5,000 took 18 minutes at 5,000 nodes), so it allows
/// half a second a pod, and never less than 15 minutes.
async fn wait_running(client: &Client, pods_made: usize) -> Result<()> {
    let pods: Api<Pod> = Api::all(client.clone());
    let lp = ListParams::default()
        .labels(WORKLOAD_LABEL)
        .fields("status.phase!=Running")
        .limit(1);
    let bound = Duration::from_secs(900.max(pods_made as u64 / 2));
    let start = Instant::now();
    loop {
        match pods.list(&lp).await {
            Ok(l) if l.items.is_empty() => return Ok(()),
            Ok(_) => {}
            Err(e) => eprintln!("  listing pods: {e}"),
        }
        if start.elapsed() > bound {
            bail!("pods are not all Running after {} s", bound.as_secs());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The size of a workload.
pub struct Workload {
    pub nodes: usize,
    pub pods: usize,
    pub volumes: usize,
    pub namespaces: usize,
}

pub async fn workload(client: Client, sim: &str, w: &Workload) -> Result<Value> {
    let (nodes, pods) = (w.nodes, w.pods);
    let concurrency = 16;
    let t0 = Instant::now();
    let http = reqwest::Client::new();
    let namespaces = w.namespaces.max(1);
    // Half of the namespaces (at least one) hold the StorageOS volumes and the pods using them.
    let with_volumes = namespaces.div_ceil(2);
    let ns = |i: usize| format!("bench-{i}");
    for i in 0..namespaces {
        ensure_namespace(&client, &ns(i)).await?;
    }
    let volumes = w.volumes.max(1);
    stream::iter(0..volumes)
        .map(Ok)
        .try_for_each_concurrent(concurrency, |j| {
            let (client, http) = (client.clone(), http.clone());
            let namespace = ns(j % with_volumes);
            async move {
                let (name, pv) = (format!("data-{j}"), format!("pv-bench-{j}"));
                let api: Api<PersistentVolumeClaim> = Api::namespaced(client, &namespace);
                create(&api, &pvc(&name, &pv, CLASS, "ReadWriteOnce")?).await?;
                seed_volume(&http, sim, &namespace, &pv, &name, &node(j % nodes), None).await?;
                if (j + 1) % 500 == 0 {
                    eprintln!("  {} volumes", j + 1);
                }
                anyhow::Ok(())
            }
        })
        .await?;
    let with_claims = pods / 2;
    stream::iter(0..pods)
        .map(Ok)
        .try_for_each_concurrent(concurrency, |k| {
            let client = client.clone();
            async move {
                let (namespace, claim) = if k < with_claims {
                    // Claims of namespace s are data-j with j ≡ s (mod with_volumes).
                    let s = k % with_volumes;
                    let per_ns = (volumes - s).div_ceil(with_volumes).max(1);
                    let j = s + with_volumes * ((k / with_volumes) % per_ns);
                    (ns(s), Some(format!("data-{j}")))
                } else if namespaces > with_volumes {
                    (ns(with_volumes + k % (namespaces - with_volumes)), None)
                } else {
                    (ns(k % namespaces), None)
                };
                let api: Api<Pod> = Api::namespaced(client, &namespace);
                create(
                    &api,
                    &pod(&format!("app-{k}"), &node(k % nodes), claim.as_deref(), false)?,
                )
                .await?;
                if (k + 1) % 1000 == 0 {
                    eprintln!("  {} pods", k + 1);
                }
                anyhow::Ok(())
            }
        })
        .await?;
    let created = t0.elapsed();
    wait_running(&client, pods).await?;
    Ok(
        json!({"namespaces": namespaces, "namespaces_with_volumes": with_volumes, "volumes": volumes, "pods": pods,
           "pods_with_claims": with_claims, "create_s": created.as_secs_f64(), "running_s": t0.elapsed().as_secs_f64()}),
    )
}

type Seen = Arc<std::sync::Mutex<HashMap<String, Instant>>>;

/// Records when each pod of `namespace` is deleted (by name), from a watch started before the
/// trials; the watch ends when the returned handle drops.
fn deletions(client: &Client, namespace: &str) -> (Seen, AbortOnDrop) {
    let seen: Seen = Arc::default();
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default());
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            if let Ok(watcher::Event::Delete(p)) = ev
                && let Ok(mut seen) = out.lock()
            {
                seen.insert(p.name_any(), Instant::now());
            }
        }
    });
    (seen, AbortOnDrop(task))
}

/// Aborts a spawned task when dropped.
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Whether the simulator has answered a node list since `since` (the fencer polled).
async fn polled_since(http: &reqwest::Client, sim: &str, since: chrono::DateTime<chrono::Utc>) -> bool {
    let Ok(r) = http.get(format!("{sim}/_sim/requests")).send().await else {
        return false;
    };
    let Ok(log) = r.json::<Vec<Value>>().await else {
        return false;
    };
    log.iter().any(|e| {
        e["method"] == "GET"
            && e["path"] == "/v2/nodes"
            && e["time"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .is_some_and(|t| t > since)
    })
}

/// Fencing trials: a PVC, its volume mastered elsewhere, an opted-in pod on the node; the node
/// set offline at a random point of the poll cycle; the latency until the pod is deleted.
pub async fn fence(
    client: Client,
    sim: &str,
    nodes: usize,
    trials: usize,
    poll: f64,
    namespace: &str,
) -> Result<Value> {
    let http = reqwest::Client::new();
    ensure_namespace(&client, namespace).await?;
    let (deleted, _watch) = deletions(&client, namespace);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    // Trials rotate over at most 20 nodes (the first ones), each node's master on the next one.
    let used = nodes.min(trials.max(1));
    let mut latencies = Vec::new();
    let mut missed = 0;
    for t in 0..trials {
        let lost = node(t % used);
        let master = node((t + 1) % nodes);
        let (claim, pv, name) = (format!("fence-{t}"), format!("pv-fence-{t}"), format!("fenced-{t}"));
        create(&pvcs, &pvc(&claim, &pv, CLASS, "ReadWriteOnce")?).await?;
        seed_volume(&http, sim, namespace, &pv, &claim, &master, None).await?;
        create(&pods, &pod(&name, &lost, Some(&claim), true)?).await?;
        // Offline at a random point of the poll cycle.
        let delay = rand::rng().random_range(0.0..poll);
        tokio::time::sleep(Duration::from_secs_f64(delay)).await;
        set_health(&http, sim, &lost, "offline").await?;
        let marked = Instant::now();
        let deadline = marked + Duration::from_secs_f64(poll * 4.0 + 10.0);
        let latency = loop {
            let at = deleted.lock().ok().and_then(|d| d.get(&name).copied());
            if let Some(at) = at {
                break Some(at.saturating_duration_since(marked));
            }
            if Instant::now() > deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let back = chrono::Utc::now();
        set_health(&http, sim, &lost, "online").await?;
        match latency {
            Some(l) => {
                eprintln!(
                    "  trial {}/{trials}: {lost} offline → pod deleted in {:.0} ms",
                    t + 1,
                    ms(l)
                );
                latencies.push(ms(l));
            }
            None => {
                eprintln!("  trial {}/{trials}: {lost}: pod not fenced in time", t + 1);
                missed += 1;
                let _ = pods.delete(&name, &DeleteParams::default().grace_period(0)).await;
            }
        }
        // The next trial starts once the fencer has seen the node online again.
        let wait = Instant::now();
        while !polled_since(&http, sim, back).await && wait.elapsed() < Duration::from_secs_f64(poll * 3.0) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let mut out = summary(latencies.clone());
    out["missed"] = json!(missed);
    out["poll_s"] = json!(poll);
    out["samples_ms"] = json!(latencies);
    Ok(out)
}

/// Which dry-run create a webhook step sends.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// A pod without a PVC: no webhook is called (the apiserver's own cost).
    PodBaseline,
    Pod,
    Pvc,
}

impl Hook {
    fn name(self) -> &'static str {
        match self {
            Hook::PodBaseline => "pod-baseline",
            Hook::Pod => "pod",
            Hook::Pvc => "pvc",
        }
    }
}

/// Open-loop dry-run creates at `rps` for `seconds` through the apiserver; with `metrics` (the
/// api-manager's /metrics) also the webhook's own time, from its histogram before and after.
pub async fn webhook(
    client: Client,
    kind: Hook,
    namespace: &str,
    claim: &str,
    rps: u64,
    seconds: u64,
    metrics: Option<&str>,
) -> Result<Value> {
    let histogram_name = if kind == Hook::Pvc { "pvc" } else { "pod" };
    let before = match metrics {
        Some(url) => Some(webhook_histogram(url, histogram_name).await?),
        None => None,
    };
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let total = rps * seconds;
    let every = Duration::from_secs_f64(1.0 / rps.max(1) as f64);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = tokio::task::JoinSet::new();
    let start = Instant::now();
    let template_pod = pod("hook", "kwok-node-0", (kind == Hook::Pod).then_some(claim), false)?;
    let mut template_pvc = pvc("hook", "", CLASS, "ReadWriteOnce")?;
    if let Some(s) = template_pvc.spec.as_mut() {
        s.volume_name = None;
    }
    for i in 0..total {
        tick.tick().await;
        let (client, namespace, dry) = (client.clone(), namespace.to_string(), dry.clone());
        let (mut p, mut c) = (template_pod.clone(), template_pvc.clone());
        tasks.spawn(async move {
            let t = Instant::now();
            let result = if kind == Hook::Pvc {
                c.metadata.name = Some(format!("hook-{i}"));
                Api::<PersistentVolumeClaim>::namespaced(client, &namespace)
                    .create(&dry, &c)
                    .await
                    .map(|c| {
                        c.annotations()
                            .get("storageos.com/storageclass")
                            .cloned()
                            .unwrap_or_default()
                    })
            } else {
                p.metadata.name = Some(format!("hook-{i}"));
                Api::<Pod>::namespaced(client, &namespace)
                    .create(&dry, &p)
                    .await
                    .map(|p| p.spec.and_then(|s| s.scheduler_name).unwrap_or_default())
            };
            (t.elapsed(), result)
        });
    }
    let sent_s = start.elapsed().as_secs_f64();
    let mut lat = Vec::new();
    let mut errors = 0;
    let mut unmutated = 0;
    let mut first_error = None;
    while let Some(r) = tasks.join_next().await {
        let (d, result) = r.context("a webhook request's task")?;
        match result {
            Ok(mark) => {
                if kind != Hook::PodBaseline && (mark.is_empty() || mark == "default-scheduler") {
                    unmutated += 1;
                }
                lat.push(ms(d));
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(e.to_string());
            }
        }
    }
    let mut out = summary(lat);
    out["kind"] = json!(kind.name());
    out["rps"] = json!(rps);
    out["achieved_rps"] = json!(total as f64 / sent_s);
    out["errors"] = json!(errors);
    out["not_mutated"] = json!(unmutated);
    out["first_error"] = json!(first_error);
    if let (Some(url), Some(before)) = (metrics, before) {
        let after = webhook_histogram(url, histogram_name).await?;
        let delta: Vec<(f64, u64)> = after
            .iter()
            .zip(&before)
            .map(|((le, a), (_, b))| (*le, a.saturating_sub(*b)))
            .collect();
        out["server_count"] = json!(delta.last().map(|d| d.1).unwrap_or(0));
        out["server_p50_ms"] = json!(histogram_quantile(&delta, 0.5) * 1000.0);
        out["server_p99_ms"] = json!(histogram_quantile(&delta, 0.99) * 1000.0);
    }
    Ok(out)
}

/// The cumulative buckets `(le, count)` of the api-manager's duration histogram of `webhook`.
async fn webhook_histogram(url: &str, webhook: &str) -> Result<Vec<(f64, u64)>> {
    let text = reqwest::get(url)
        .await
        .context("read the api-manager's metrics")?
        .text()
        .await?;
    let ours = format!("webhook=\"{webhook}\"");
    let mut buckets: Vec<(f64, u64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("storageos_webhook_duration_seconds_bucket{"))
        .filter_map(|rest| {
            let (labels, count) = rest.split_once("} ")?;
            let labels: Vec<&str> = labels.split(',').collect();
            if !labels.contains(&ours.as_str()) {
                return None;
            }
            let le = labels
                .iter()
                .find_map(|l| l.strip_prefix("le=\""))?
                .trim_end_matches('"');
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, count.trim().parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(buckets)
}

/// The `q` quantile of cumulative buckets, interpolated linearly within its bucket (as
/// Prometheus' `histogram_quantile` does); the last finite bound if it falls in `+Inf`.
fn histogram_quantile(buckets: &[(f64, u64)], q: f64) -> f64 {
    let Some(&(_, total)) = buckets.last() else {
        return f64::NAN;
    };
    if total == 0 {
        return f64::NAN;
    }
    let rank = q * total as f64;
    let (mut lower, mut below) = (0.0, 0u64);
    for &(le, count) in buckets {
        if count as f64 >= rank {
            if le.is_infinite() {
                return lower;
            }
            let within = (count - below).max(1) as f64;
            return lower + (le - lower) * ((rank - below as f64) / within);
        }
        (lower, below) = (le, count);
    }
    lower
}

/// Fresh StorageOSClusters from `file` one after the other, each deleted before the next but
/// the last (the apply times come from the audit log, read by the report).
pub async fn cluster(client: Client, file: &std::path::Path, trials: usize) -> Result<Value> {
    let text = std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?;
    let obj: StorageOSCluster = serde_yaml::from_str(&text).context("a StorageOSCluster")?;
    let namespace = obj.namespace().unwrap_or_else(|| "default".into());
    let name = obj.name_any();
    let api: Api<StorageOSCluster> = Api::namespaced(client.clone(), &namespace);
    let mut cycles = Vec::new();
    for t in 0..trials {
        let start = Instant::now();
        api.create(&PostParams::default(), &obj)
            .await
            .context("create the StorageOSCluster")?;
        // Until the operator reports the cluster (its apply pass has run), at most 2 minutes.
        let mut phase = String::new();
        while start.elapsed() < Duration::from_secs(120) {
            if let Ok(c) = api.get(&name).await {
                phase = c.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
                if phase == "Running" {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        eprintln!(
            "  cluster {}/{trials}: {phase} after {:.1} s",
            t + 1,
            start.elapsed().as_secs_f64()
        );
        cycles.push(start.elapsed().as_secs_f64());
        if t + 1 == trials {
            break;
        }
        let force = json!({"metadata": {"annotations": {"storageos.com/force-delete": "true"}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&force))
            .await
            .context("annotate the StorageOSCluster")?;
        let _ = api.delete(&name, &DeleteParams::default()).await;
        let gone = Instant::now();
        while api.get_opt(&name).await?.is_some() {
            if gone.elapsed() > Duration::from_secs(180) {
                bail!("StorageOSCluster {name} not deleted after 3 minutes");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    Ok(json!({"trials": trials, "running_after_s": cycles}))
}

/// One shared-volume pass: `count` RWX PVCs, then as many NFS-attached simulator volumes at
/// once; done when every mount endpoint is published back to StorageOS.
pub async fn shared(client: Client, sim: &str, nodes: usize, count: usize) -> Result<Value> {
    let namespace = "bench-shared";
    let http = reqwest::Client::new();
    ensure_namespace(&client, namespace).await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    stream::iter(0..count)
        .map(Ok)
        .try_for_each_concurrent(16, |i| {
            let pvcs = pvcs.clone();
            async move {
                let c = pvc(
                    &format!("shared-{i}"),
                    &format!("pv-shared-{i}"),
                    CLASS,
                    "ReadWriteMany",
                )?;
                create(&pvcs, &c).await
            }
        })
        .await?;
    eprintln!("  {count} RWX PVCs created; seeding the NFS volumes");
    let start = Instant::now();
    stream::iter(0..count)
        .map(Ok)
        .try_for_each_concurrent(16, |i| {
            let http = http.clone();
            async move {
                let ep = format!("10.1.{}.{}:2049", i / 250, 1 + i % 250);
                seed_volume(
                    &http,
                    sim,
                    namespace,
                    &format!("pv-shared-{i}"),
                    &format!("shared-{i}"),
                    &node(i % nodes),
                    Some(&ep),
                )
                .await
            }
        })
        .await?;
    let seeded = start.elapsed();
    let mut published = 0;
    while start.elapsed() < Duration::from_secs(600) {
        let vols: Vec<Value> = http.get(format!("{sim}/_sim/volumes")).send().await?.json().await?;
        published = vols
            .iter()
            .filter(|v| {
                v["namespaceName"] == namespace || v["name"].as_str().is_some_and(|n| n.starts_with("pv-shared-"))
            })
            .filter(|v| {
                v["labels"]["storageos.com/nfs/mount-endpoint"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty())
            })
            .count();
        if published >= count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(0);
    let names: BTreeSet<String> = pvcs
        .list(&ListParams::default())
        .await
        .map(|l| l.items.iter().map(|p| p.name_any()).collect())
        .unwrap_or_default();
    Ok(
        json!({"count": count, "seed_s": seeded.as_secs_f64(), "pass_s": start.elapsed().as_secs_f64(),
           "published": published, "services": services, "pvcs": names.len()}),
    )
}
