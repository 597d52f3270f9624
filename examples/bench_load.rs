//! The load and timing tool of `hack/bench.sh` (a cargo example, so it is never part of the
//! shipped binary). Each subcommand does one measured step against the bench plane and prints
//! one JSON object on stdout; progress goes to stderr.
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
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use rand::Rng;
use serde_json::{Value, json};
use storageos_operator::crd::StorageOSCluster;

/// Label on everything the tool creates.
const WORKLOAD_LABEL: &str = "bench.storageos.com/workload";
const PROVISIONER: &str = "csi.storageos.com";

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Workload {
        #[arg(long)]
        sim: String,
        #[arg(long)]
        nodes: usize,
        #[arg(long)]
        pods: usize,
        #[arg(long)]
        volumes: usize,
        #[arg(long)]
        namespaces: usize,
        #[arg(long, default_value = "fast")]
        class: String,
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
    },
    Fence {
        #[arg(long)]
        sim: String,
        #[arg(long)]
        nodes: usize,
        #[arg(long, default_value_t = 20)]
        trials: usize,
        #[arg(long, default_value_t = 5.0)]
        poll: f64,
        #[arg(long, default_value = "fast")]
        class: String,
        #[arg(long, default_value = "bench-fence")]
        namespace: String,
    },
    Webhook {
        #[arg(long)]
        kind: String,
        #[arg(long)]
        namespace: String,
        #[arg(long)]
        claim: String,
        #[arg(long, default_value = "fast")]
        class: String,
        #[arg(long, default_value_t = 200)]
        rps: u64,
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        /// The api-manager's /metrics: the webhook's own time is read from its
        /// `storageos_webhook_duration_seconds` histogram before and after.
        #[arg(long)]
        metrics: Option<String>,
    },
    Cluster {
        /// The StorageOSCluster as JSON.
        #[arg(long)]
        file: String,
        #[arg(long, default_value_t = 10)]
        trials: usize,
        /// Keep the last cluster.
        #[arg(long)]
        keep_last: bool,
    },
    Shared {
        #[arg(long)]
        sim: String,
        #[arg(long)]
        nodes: usize,
        #[arg(long, default_value_t = 1000)]
        count: usize,
        #[arg(long, default_value = "fast")]
        class: String,
        #[arg(long, default_value = "bench-shared")]
        namespace: String,
    },
}

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

async fn ensure_namespace(client: &Client, name: &str) {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {WORKLOAD_LABEL: "true"}}})).unwrap();
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("create namespace {name}: {e}"),
    }
}

/// A StorageOS PVC pre-bound to `pv` (no PV object: the api-manager reads the binding and the
/// provisioner annotation, as for a dynamically provisioned volume).
fn pvc(name: &str, pv: &str, class: &str, access: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {WORKLOAD_LABEL: "true"},
                     "annotations": {"volume.beta.kubernetes.io/storage-provisioner": PROVISIONER}},
        "spec": {"accessModes": [access], "storageClassName": class, "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap()
}

fn pod(name: &str, node: &str, claim: Option<&str>, fenced: bool) -> Pod {
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
    .unwrap()
}

async fn create<K>(api: &Api<K>, obj: &K)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let mut tries = 0;
    loop {
        match api.create(&PostParams::default(), obj).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(e) if tries < 5 => {
                tries += 1;
                eprintln!("  retrying a create: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("create {}: {e}", obj.name_any()),
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
) {
    let body = json!({"namespace": namespace, "name": pv, "pvcName": pvc, "pvcNamespace": namespace,
                      "masterNode": master, "nfsServiceEndpoint": nfs});
    let r = http
        .post(format!("{sim}/_sim/volumes"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    assert!(
        status.is_success() || status.as_u16() == 409,
        "seeding volume {namespace}/{pv}: {status} {}",
        r.text().await.unwrap_or_default()
    );
}

async fn set_health(http: &reqwest::Client, sim: &str, node: &str, health: &str) {
    let r = http
        .put(format!("{sim}/_sim/nodes/{node}/health"))
        .json(&json!({"health": health}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "set {node} {health}: {}", r.status());
}

/// Waits for every workload pod to be Running. The bound only ends a hung run: kwok starts a
/// few pods a second on a loaded plane (5,000 took 18 minutes at 5,000 nodes), so it allows
/// half a second a pod, and never less than 15 minutes.
async fn wait_running(client: &Client, pods_made: usize) {
    let pods: Api<Pod> = Api::all(client.clone());
    let lp = ListParams::default()
        .labels(WORKLOAD_LABEL)
        .fields("status.phase!=Running")
        .limit(1);
    let bound = Duration::from_secs(900.max(pods_made as u64 / 2));
    let start = Instant::now();
    loop {
        match pods.list(&lp).await {
            Ok(l) if l.items.is_empty() => return,
            Ok(_) => {}
            Err(e) => eprintln!("  listing pods: {e}"),
        }
        if start.elapsed() > bound {
            panic!("pods are not all Running after {} s", bound.as_secs());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

#[allow(clippy::too_many_arguments)]
async fn workload(
    client: Client,
    sim: String,
    nodes: usize,
    pods: usize,
    volumes: usize,
    namespaces: usize,
    class: String,
    concurrency: usize,
) -> Value {
    let t0 = Instant::now();
    let http = reqwest::Client::new();
    let namespaces = namespaces.max(1);
    // Half of the namespaces (at least one) hold the StorageOS volumes and the pods using them.
    let with_volumes = namespaces.div_ceil(2);
    let ns = |i: usize| format!("bench-{i}");
    for i in 0..namespaces {
        ensure_namespace(&client, &ns(i)).await;
    }
    let volumes = volumes.max(1);
    stream::iter(0..volumes)
        .for_each_concurrent(concurrency, |j| {
            let (client, http, sim, class) = (client.clone(), http.clone(), sim.clone(), class.clone());
            let namespace = ns(j % with_volumes);
            async move {
                let (name, pv) = (format!("data-{j}"), format!("pv-bench-{j}"));
                let api: Api<PersistentVolumeClaim> = Api::namespaced(client, &namespace);
                create(&api, &pvc(&name, &pv, &class, "ReadWriteOnce")).await;
                seed_volume(&http, &sim, &namespace, &pv, &name, &node(j % nodes), None).await;
                if (j + 1) % 500 == 0 {
                    eprintln!("  {} volumes", j + 1);
                }
            }
        })
        .await;
    let with_claims = pods / 2;
    stream::iter(0..pods)
        .for_each_concurrent(concurrency, |k| {
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
                    &pod(&format!("app-{k}"), &node(k % nodes), claim.as_deref(), false),
                )
                .await;
                if (k + 1) % 1000 == 0 {
                    eprintln!("  {} pods", k + 1);
                }
            }
        })
        .await;
    let created = t0.elapsed();
    wait_running(&client, pods).await;
    json!({"namespaces": namespaces, "namespaces_with_volumes": with_volumes, "volumes": volumes, "pods": pods,
           "pods_with_claims": with_claims, "create_s": created.as_secs_f64(), "running_s": t0.elapsed().as_secs_f64()})
}

/// Records when each pod of `namespace` is deleted (by name), from a watch started before
/// the trials.
fn deletions(client: &Client, namespace: &str) -> Arc<std::sync::Mutex<HashMap<String, Instant>>> {
    let seen = Arc::new(std::sync::Mutex::new(HashMap::new()));
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let out = seen.clone();
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default());
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            if let Ok(watcher::Event::Delete(p)) = ev {
                out.lock().unwrap().insert(p.name_any(), Instant::now());
            }
        }
    });
    seen
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

async fn fence(
    client: Client,
    sim: String,
    nodes: usize,
    trials: usize,
    poll: f64,
    class: String,
    namespace: String,
) -> Value {
    let http = reqwest::Client::new();
    ensure_namespace(&client, &namespace).await;
    let deleted = deletions(&client, &namespace);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    // Trials rotate over at most 20 nodes (the first ones), each node's master on the next one.
    let used = nodes.min(trials.max(1));
    let mut latencies = Vec::new();
    let mut missed = 0;
    for t in 0..trials {
        let lost = node(t % used);
        let master = node((t + 1) % nodes);
        let (claim, pv, name) = (format!("fence-{t}"), format!("pv-fence-{t}"), format!("fenced-{t}"));
        create(&pvcs, &pvc(&claim, &pv, &class, "ReadWriteOnce")).await;
        seed_volume(&http, &sim, &namespace, &pv, &claim, &master, None).await;
        create(&pods, &pod(&name, &lost, Some(&claim), true)).await;
        // Offline at a random point of the poll cycle.
        let delay = rand::rng().random_range(0.0..poll);
        tokio::time::sleep(Duration::from_secs_f64(delay)).await;
        set_health(&http, &sim, &lost, "offline").await;
        let marked = Instant::now();
        let deadline = marked + Duration::from_secs_f64(poll * 4.0 + 10.0);
        let latency = loop {
            if let Some(at) = deleted.lock().unwrap().get(&name) {
                break Some(at.saturating_duration_since(marked));
            }
            if Instant::now() > deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let back = chrono::Utc::now();
        set_health(&http, &sim, &lost, "online").await;
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
        while !polled_since(&http, &sim, back).await && wait.elapsed() < Duration::from_secs_f64(poll * 3.0) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let mut out = summary(latencies.clone());
    out["missed"] = json!(missed);
    out["poll_s"] = json!(poll);
    out["samples_ms"] = json!(latencies);
    out
}

async fn webhook(
    client: Client,
    kind: String,
    namespace: String,
    claim: String,
    class: String,
    rps: u64,
    seconds: u64,
) -> Value {
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let total = rps * seconds;
    let every = Duration::from_secs_f64(1.0 / rps as f64);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = tokio::task::JoinSet::new();
    let start = Instant::now();
    for i in 0..total {
        tick.tick().await;
        let (client, namespace, claim, class, kind, dry) = (
            client.clone(),
            namespace.clone(),
            claim.clone(),
            class.clone(),
            kind.clone(),
            dry.clone(),
        );
        tasks.spawn(async move {
            let t = Instant::now();
            let result = if kind.starts_with("pod") {
                // `pod-baseline`: no PVC, so no webhook is called (the apiserver's own cost).
                let claim = (kind == "pod").then_some(claim.as_str());
                let p = pod(&format!("hook-{i}"), "kwok-node-0", claim, false);
                Api::<Pod>::namespaced(client, &namespace)
                    .create(&dry, &p)
                    .await
                    .map(|p| p.spec.and_then(|s| s.scheduler_name).unwrap_or_default())
            } else {
                let c = pvc(&format!("hook-{i}"), "", &class, "ReadWriteOnce");
                let mut c = c;
                if let Some(s) = c.spec.as_mut() {
                    s.volume_name = None;
                }
                Api::<PersistentVolumeClaim>::namespaced(client, &namespace)
                    .create(&dry, &c)
                    .await
                    .map(|c| {
                        c.annotations()
                            .get("storageos.com/storageclass")
                            .cloned()
                            .unwrap_or_default()
                    })
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
        let (d, result) = r.unwrap();
        match result {
            Ok(mark) => {
                if kind != "pod-baseline" && (mark.is_empty() || mark == "default-scheduler") {
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
    out["kind"] = json!(kind);
    out["rps"] = json!(rps);
    out["achieved_rps"] = json!(total as f64 / sent_s);
    out["errors"] = json!(errors);
    out["not_mutated"] = json!(unmutated);
    out["first_error"] = json!(first_error);
    out
}

/// The cumulative buckets `(le, count)` of the api-manager's duration histogram of `webhook`.
async fn webhook_histogram(url: &str, webhook: &str) -> Vec<(f64, u64)> {
    let text = reqwest::get(url).await.unwrap().text().await.unwrap();
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
    buckets
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

async fn cluster(client: Client, file: String, trials: usize, keep_last: bool) -> Value {
    let text = std::fs::read_to_string(&file).unwrap();
    let obj: StorageOSCluster = serde_yaml::from_str(&text).unwrap();
    let namespace = obj.namespace().unwrap_or_else(|| "default".into());
    let name = obj.name_any();
    let api: Api<StorageOSCluster> = Api::namespaced(client.clone(), &namespace);
    let mut cycles = Vec::new();
    for t in 0..trials {
        let start = Instant::now();
        api.create(&PostParams::default(), &obj).await.unwrap();
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
        if keep_last && t + 1 == trials {
            break;
        }
        let force = json!({"metadata": {"annotations": {"storageos.com/force-delete": "true"}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&force))
            .await
            .unwrap();
        let _ = api.delete(&name, &DeleteParams::default()).await;
        let gone = Instant::now();
        while api.get_opt(&name).await.unwrap().is_some() {
            if gone.elapsed() > Duration::from_secs(180) {
                panic!("StorageOSCluster {name} not deleted after 3 minutes");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    json!({"trials": trials, "running_after_s": cycles})
}

async fn shared(client: Client, sim: String, nodes: usize, count: usize, class: String, namespace: String) -> Value {
    let http = reqwest::Client::new();
    ensure_namespace(&client, &namespace).await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
    stream::iter(0..count)
        .for_each_concurrent(16, |i| {
            let pvcs = pvcs.clone();
            let class = class.clone();
            async move {
                create(
                    &pvcs,
                    &pvc(
                        &format!("shared-{i}"),
                        &format!("pv-shared-{i}"),
                        &class,
                        "ReadWriteMany",
                    ),
                )
                .await
            }
        })
        .await;
    eprintln!("  {count} RWX PVCs created; seeding the NFS volumes");
    let start = Instant::now();
    stream::iter(0..count)
        .for_each_concurrent(16, |i| {
            let (http, sim, namespace) = (http.clone(), sim.clone(), namespace.clone());
            async move {
                let ep = format!("10.1.{}.{}:2049", i / 250, 1 + i % 250);
                seed_volume(
                    &http,
                    &sim,
                    &namespace,
                    &format!("pv-shared-{i}"),
                    &format!("shared-{i}"),
                    &node(i % nodes),
                    Some(&ep),
                )
                .await;
            }
        })
        .await;
    let seeded = start.elapsed();
    // Done when every volume's mount endpoint is published back to StorageOS.
    let mut published = 0;
    while start.elapsed() < Duration::from_secs(600) {
        let vols: Vec<Value> = http
            .get(format!("{sim}/_sim/volumes"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        published = vols
            .iter()
            .filter(|v| {
                v["namespaceName"] == namespace.as_str()
                    || v["name"].as_str().is_some_and(|n| n.starts_with("pv-shared-"))
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
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(0);
    let names: BTreeSet<String> = pvcs
        .list(&ListParams::default())
        .await
        .map(|l| l.items.iter().map(|p| p.name_any()).collect())
        .unwrap_or_default();
    json!({"count": count, "seed_s": seeded.as_secs_f64(), "pass_s": start.elapsed().as_secs_f64(),
           "published": published, "services": services, "pvcs": names.len()})
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let client = Client::try_default().await.expect("a kubeconfig (KUBECONFIG)");
    let out = match cli.cmd {
        Cmd::Workload {
            sim,
            nodes,
            pods,
            volumes,
            namespaces,
            class,
            concurrency,
        } => workload(client, sim, nodes, pods, volumes, namespaces, class, concurrency).await,
        Cmd::Fence {
            sim,
            nodes,
            trials,
            poll,
            class,
            namespace,
        } => fence(client, sim, nodes, trials, poll, class, namespace).await,
        Cmd::Webhook {
            kind,
            namespace,
            claim,
            class,
            rps,
            seconds,
            metrics,
        } => {
            let webhook_name = if kind == "pvc" { "pvc" } else { "pod" };
            let before = match &metrics {
                Some(url) => Some(webhook_histogram(url, webhook_name).await),
                None => None,
            };
            let mut out = webhook(client, kind, namespace, claim, class, rps, seconds).await;
            if let (Some(url), Some(before)) = (&metrics, before) {
                let after = webhook_histogram(url, webhook_name).await;
                let delta: Vec<(f64, u64)> = after
                    .iter()
                    .zip(&before)
                    .map(|((le, a), (_, b))| (*le, a.saturating_sub(*b)))
                    .collect();
                out["server_count"] = json!(delta.last().map(|d| d.1).unwrap_or(0));
                out["server_p50_ms"] = json!(histogram_quantile(&delta, 0.5) * 1000.0);
                out["server_p99_ms"] = json!(histogram_quantile(&delta, 0.99) * 1000.0);
            }
            out
        }
        Cmd::Cluster {
            file,
            trials,
            keep_last,
        } => cluster(client, file, trials, keep_last).await,
        Cmd::Shared {
            sim,
            nodes,
            count,
            class,
            namespace,
        } => shared(client, sim, nodes, count, class, namespace).await,
    };
    println!("{out}");
}
