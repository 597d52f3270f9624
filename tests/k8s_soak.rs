//! The seeded chaos soak (docs/reliability.md): the operator and the api-manager, two replicas
//! each acting as their ServiceAccounts, the simulator and a live workload on a control plane of
//! the test's own, while a schedule drawn from a seed injects overlapping faults. Invariants are
//! checked from evidence the processes do not write themselves: the apiserver's audit log, the
//! simulator's request log, the objects stored in the apiserver, `/proc`, and the soak's own
//! record of what StorageOS was told (the health of each node, when).
//!
//! `SOAK_MINUTES` (default 3) and `SOAK_SEED` (default 1) choose the run; `hack/soak.sh` sets
//! them. The same seed gives the same schedule; the interleaving of its faults with the
//! processes' work depends on timing, as in any soak.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use storageos_operator::crd::{StorageOSUpgrade, UpgradePhase};
use storageos_operator::sim::{self, DropPoint, Faults, RequestRecord, SimHandle, Simulator};
use storageos_operator::storageos::Health;
use storageos_operator::upgrade::nodes::NODE_DAEMONSET;
use support::faults::{self, ApiManagerHome, Process};
use support::identity::{API_MANAGER, OPERATOR};
use support::{ClusterObjects, TestNamespace, from_json, suffix, wait_for};

const OLD_IMAGE: &str = "storageos/node:v2.9.0";
const NEW_IMAGE: &str = "storageos/node:v2.10.0";
/// StorageOS nodes of Kubernetes Nodes without a kubelet, holding the fenced workload; the
/// only nodes the soak sets offline. With the cluster's three, seven StorageOS nodes: the
/// partition guard allows up to three offline at once.
const FENCED_NODES: usize = 4;
/// The cluster's nodes (the plane's kwok nodes): StorageOS nodes the soak never sets offline.
const CLUSTER_NODES: usize = 3;
/// How far back from a pod delete a StorageOS answer may justify it: the fencer acts on its
/// last node poll (every 5 s) and a pass under injected latency takes seconds more.
const DECISION_WINDOW: Duration = Duration::from_secs(30);
/// The cluster must be Ready again this soon after the last fault ends.
const RECOVERY_BOUND: Duration = Duration::from_secs(180);
/// The idle window at the end, in which neither process may write.
const IDLE: Duration = Duration::from_secs(30);
const SETTLE: Duration = Duration::from_secs(150);

/// The api-manager's flags in the soak: fencing as in the fault matrix, leader election.
const API_MANAGER_FLAGS: &[&str] = &[
    "-enable-leader-election",
    "-node-poll-interval=5s",
    "-node-fencer-retry-interval=1s",
    "-node-fencer-timeout=5m",
    "-webhook-cert-refresh-interval=5s",
];

// ---------------------------------------------------------------------------------------------
// The schedule

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    ApiserverRestart,
    EtcdPause,
    StorageOSErrors,
    StorageOSLatency,
    NodeFlap,
    Partition,
    KillReplica,
    WebhookSecretDeleted,
    KwokNodeChurn,
    ClockJump,
}

impl Kind {
    const ALL: [(Kind, u32); 10] = [
        (Kind::ApiserverRestart, 1),
        (Kind::EtcdPause, 2),
        (Kind::StorageOSErrors, 2),
        (Kind::StorageOSLatency, 2),
        (Kind::NodeFlap, 4),
        (Kind::Partition, 1),
        (Kind::KillReplica, 3),
        (Kind::WebhookSecretDeleted, 1),
        (Kind::KwokNodeChurn, 1),
        (Kind::ClockJump, 1),
    ];

    /// Faults of one lock never overlap each other (they touch the same thing); faults of
    /// different locks do.
    fn lock(self) -> usize {
        match self {
            Kind::ApiserverRestart => 0,
            Kind::EtcdPause => 1,
            Kind::StorageOSErrors | Kind::StorageOSLatency => 2,
            Kind::NodeFlap | Kind::Partition => 3,
            Kind::KillReplica => 4,
            Kind::WebhookSecretDeleted => 5,
            Kind::KwokNodeChurn => 6,
            Kind::ClockJump => 7,
        }
    }
}

/// A fault of the schedule: when it starts (from the soak's start), how long it lasts, and a
/// number that picks its target and strength.
#[derive(Debug, Clone)]
struct Planned {
    at: Duration,
    kind: Kind,
    lasts: Duration,
    pick: u64,
}

/// The schedule of `seed` for a run of `run`: a fault every 3 to 12 s; the first ten are one
/// of each kind in a seeded order (so a short run meets every kind), the rest drawn by weight.
/// Pure: the same seed and length give the same schedule.
fn schedule(seed: u64, run: Duration) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(seed);
    let total: u32 = Kind::ALL.iter().map(|(_, w)| w).sum();
    let mut first: Vec<Kind> = Kind::ALL.iter().map(|(k, _)| *k).collect();
    for i in (1..first.len()).rev() {
        first.swap(i, rng.random_range(0..=i));
    }
    let mut at = Duration::from_secs(2);
    let mut plan = Vec::new();
    while at < run {
        let mut roll = rng.random_range(0..total);
        let drawn = Kind::ALL
            .iter()
            .find(|(_, w)| {
                if roll < *w {
                    true
                } else {
                    roll -= w;
                    false
                }
            })
            .map(|(k, _)| *k)
            .unwrap();
        let kind = first.get(plan.len()).copied().unwrap_or(drawn);
        let lasts = Duration::from_millis(match kind {
            Kind::EtcdPause => rng.random_range(1_000..5_000),
            Kind::StorageOSErrors | Kind::StorageOSLatency => rng.random_range(3_000..12_000),
            Kind::NodeFlap | Kind::Partition => rng.random_range(4_000..20_000),
            Kind::KillReplica => rng.random_range(500..5_000),
            Kind::KwokNodeChurn => rng.random_range(5_000..30_000),
            _ => 0,
        });
        plan.push(Planned {
            at,
            kind,
            lasts,
            pick: rng.random(),
        });
        at += Duration::from_millis(rng.random_range(3_000..12_000));
    }
    plan
}

// ---------------------------------------------------------------------------------------------
// What the soak records as it goes

/// A health the soak gave a StorageOS node, and when (wall clock, after the simulator took it).
#[derive(Debug, Clone)]
struct HealthChange {
    at: DateTime<Utc>,
    node: String,
    offline: bool,
}

/// A fault as injected: its kind, what it did, when it ended.
#[derive(Debug, Clone)]
struct Injected {
    kind: Kind,
    what: String,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
}

#[derive(Default)]
struct History {
    health: Vec<HealthChange>,
    faults: Vec<Injected>,
    /// Clock jumps of the simulator: when, and its total offset from then on. The request log
    /// stamps requests with the simulated clock; these turn those stamps back into wall time.
    clock: Vec<(DateTime<Utc>, chrono::Duration)>,
    /// Samples of the cluster's readiness.
    ready: Vec<(DateTime<Utc>, bool)>,
    /// RSS samples (KiB) by process instance (`name#start`).
    rss: BTreeMap<String, Vec<(DateTime<Utc>, u64)>>,
    /// Pod name → its node, for every pod the workload made.
    pods: BTreeMap<String, String>,
    /// The simulator's request log, drained as it goes (the simulator keeps the last 10,000).
    requests: Vec<RequestRecord>,
    /// Requests lost between two drains (a gap in the sequence numbers).
    requests_lost: u64,
    /// Encryption-labelled PVC creates: admitted, refused by the apiserver, and sent while no
    /// apiserver answered (and the first refusal's reason).
    encrypted: (u32, u32, u32),
    denied_because: Option<String>,
    /// Replicas that exited on their own and were started again.
    exits: Vec<String>,
    /// Invariant checks made, by invariant.
    checks: BTreeMap<&'static str, u64>,
    /// Violations: invariant and the history slice that shows it.
    violations: Vec<(&'static str, String)>,
}

type Shared = Arc<Mutex<History>>;

fn check(h: &Shared, invariant: &'static str, ok: bool, evidence: impl FnOnce() -> String) {
    let mut h = h.lock().unwrap();
    *h.checks.entry(invariant).or_insert(0) += 1;
    if !ok {
        h.violations.push((invariant, evidence()));
    }
}

// ---------------------------------------------------------------------------------------------
// The world

/// The processes under test: two replicas of each, started again after a SIGKILL.
struct Replicas {
    kubeconfig: std::path::PathBuf,
    sim: Arc<SimHandle>,
    home: ApiManagerHome,
    ports: BTreeMap<String, u16>,
    running: Mutex<BTreeMap<String, (Process, DateTime<Utc>)>>,
}

const REPLICAS: [&str; 4] = ["operator-a", "operator-b", "api-manager-a", "api-manager-b"];

impl Replicas {
    fn start(&self, name: &str) {
        let p = if let Some(port) = self.ports.get(name) {
            self.home.replica_at(&self.sim, name, API_MANAGER_FLAGS, *port)
        } else {
            faults::operator(&self.kubeconfig, &self.sim, name, &["--upgrade-step-delay", "1s"])
        };
        self.running.lock().unwrap().insert(name.into(), (p, Utc::now()));
    }

    fn kill(&self, name: &str) {
        if let Some((p, _)) = self.running.lock().unwrap().remove(name) {
            // SIGKILL; its log is kept, the next start appends to it.
            drop(p);
        }
    }

    /// (instance, pid) of each running replica.
    fn pids(&self) -> Vec<(String, u32)> {
        self.running
            .lock()
            .unwrap()
            .iter()
            .map(|(n, (p, since))| (format!("{n}#{}", since.format("%H:%M:%S")), p.pid()))
            .collect()
    }

    /// Replicas that exited on their own (not SIGKILLed by the soak), taken out of the running
    /// set: (name, exit status, the last lines of its log).
    fn reap(&self) -> Vec<(String, String, String)> {
        let mut running = self.running.lock().unwrap();
        let exited: Vec<String> = running
            .iter_mut()
            .filter_map(|(n, (p, _))| p.exited().map(|_| n.clone()))
            .collect();
        exited
            .into_iter()
            .filter_map(|n| {
                let (mut p, _) = running.remove(&n)?;
                let status = p.exited().map(|s| s.to_string()).unwrap_or_default();
                let log = p.log();
                let tail: Vec<&str> = log.lines().rev().take(3).collect();
                Some((n, status, tail.into_iter().rev().collect::<Vec<_>>().join("\n")))
            })
            .collect()
    }
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

struct World {
    ns: TestNamespace,
    cluster_ns: TestNamespace,
    sim: Arc<SimHandle>,
    nodes: Vec<String>,
    class: String,
    id: String,
    _objects: ClusterObjects,
}

/// One slot of the workload: an opted-in pod on `node` mounting `claim`, made again (under a
/// new name) whenever it is gone and its node is online.
#[derive(Clone)]
struct Slot {
    name: String,
    node: String,
    claim: String,
}

impl World {
    async fn claim(&self, claim: &str, rwx: bool, master: &str) {
        let pv = format!("pv-{}-{claim}", self.id);
        let mode = if rwx { "ReadWriteMany" } else { "ReadWriteOnce" };
        let pv_obj: PersistentVolume = from_json(json!({
            "metadata": {"name": pv},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": [mode],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": self.class,
                     "claimRef": {"namespace": self.ns.name, "name": claim},
                     "csi": {"driver": "csi.storageos.com", "volumeHandle": format!("handle-{pv}")}}
        }));
        Api::<PersistentVolume>::all(self.ns.client.clone())
            .create(&PostParams::default(), &pv_obj)
            .await
            .unwrap();
        let pvc: PersistentVolumeClaim = from_json(json!({
            "metadata": {"name": claim},
            "spec": {"accessModes": [mode], "storageClassName": self.class, "volumeName": pv,
                     "resources": {"requests": {"storage": "1Gi"}}}
        }));
        self.ns
            .api::<PersistentVolumeClaim>()
            .create(&PostParams::default(), &pvc)
            .await
            .unwrap();
        self.sim
            .add_volume(support::seed::volume(&self.ns.name, &pv, claim, master))
            .unwrap();
    }

    /// The UIDs of the data-holding objects: the workload's PVCs and PVs.
    async fn data_uids(&self) -> BTreeMap<String, String> {
        let mut uids = BTreeMap::new();
        for pvc in self
            .ns
            .api::<PersistentVolumeClaim>()
            .list(&ListParams::default())
            .await
            .unwrap()
        {
            if pvc.labels().contains_key("storageos.com/encryption") {
                continue;
            }
            uids.insert(format!("PVC/{}", pvc.name_any()), pvc.uid().unwrap());
        }
        let pvs = Api::<PersistentVolume>::all(self.ns.client.clone());
        for pv in pvs.list(&ListParams::default()).await.unwrap() {
            if pv.name_any().starts_with(&format!("pv-{}-", self.id)) {
                uids.insert(format!("PV/{}", pv.name_any()), pv.uid().unwrap());
            }
        }
        uids
    }
}

/// Sets `node`'s StorageOS health and records it.
fn set_health(sim: &SimHandle, h: &Shared, node: &str, offline: bool) {
    let health = if offline { Health::Offline } else { Health::Online };
    sim.set_health(node, health).unwrap();
    h.lock().unwrap().health.push(HealthChange {
        at: Utc::now(),
        node: node.into(),
        offline,
    });
}

/// The nodes offline now, by the soak's record.
fn offline_now(h: &Shared) -> BTreeSet<String> {
    let mut off = BTreeSet::new();
    for c in &h.lock().unwrap().health {
        if c.offline {
            off.insert(c.node.clone());
        } else {
            off.remove(&c.node);
        }
    }
    off
}

// ---------------------------------------------------------------------------------------------
// Faults

struct Injector {
    plane: &'static faults::OwnPlane,
    world: Arc<World>,
    replicas: Arc<Replicas>,
    h: Shared,
    locks: Vec<tokio::sync::Mutex<()>>,
    kwok_seq: std::sync::atomic::AtomicU32,
}

impl Injector {
    async fn inject(&self, f: &Planned) {
        let _guard = self.locks[f.kind.lock()].lock().await;
        let start = Utc::now();
        let what = self.apply(f).await;
        self.h.lock().unwrap().faults.push(Injected {
            kind: f.kind,
            what,
            start,
            end: Utc::now(),
        });
    }

    /// Injects the fault, waits its length, undoes it; what it did.
    async fn apply(&self, f: &Planned) -> String {
        let sim = &self.world.sim;
        match f.kind {
            Kind::ApiserverRestart => {
                self.plane.restart_apiserver().await;
                "kube-apiserver restarted".into()
            }
            Kind::EtcdPause => {
                let pid = std::fs::read_to_string(self.plane.state().join("etcd.pid")).unwrap();
                let pid = pid.trim().to_string();
                signal("STOP", &pid);
                tokio::time::sleep(f.lasts).await;
                signal("CONT", &pid);
                format!("etcd SIGSTOPped for {:?}", f.lasts)
            }
            Kind::StorageOSErrors => {
                let n = 5 + (f.pick >> 8) % 40;
                let mut faults = Faults {
                    fail_next: n as u32,
                    error: Some("injected by the soak".into()),
                    ..Faults::default()
                };
                let how = match f.pick % 5 {
                    3 => {
                        faults.drop_connection = Some(DropPoint::BeforeHandling);
                        "lose their connection before they are handled".to_string()
                    }
                    4 => {
                        faults.drop_connection = Some(DropPoint::AfterHandling);
                        "lose their connection after they are handled".to_string()
                    }
                    i => {
                        faults.status = [500, 502, 503][i as usize];
                        format!("fail with {}", faults.status)
                    }
                };
                sim.set_faults(faults);
                tokio::time::sleep(f.lasts).await;
                sim.set_faults(Faults::default());
                format!("StorageOS: next {n} requests {how}, for up to {:?}", f.lasts)
            }
            Kind::StorageOSLatency => {
                let ms = 300 + (f.pick % 2_700);
                sim.set_faults(Faults {
                    latency_ms: ms,
                    ..Faults::default()
                });
                tokio::time::sleep(f.lasts).await;
                sim.set_faults(Faults::default());
                format!("StorageOS: {ms} ms latency for {:?}", f.lasts)
            }
            Kind::NodeFlap | Kind::Partition => {
                let nodes = &self.world.nodes;
                let down: Vec<String> = if f.kind == Kind::Partition {
                    nodes.clone()
                } else {
                    // At most three of seven: what the partition guard allows.
                    let k = 1 + (f.pick % 3) as usize;
                    let first = ((f.pick >> 8) as usize) % nodes.len();
                    (0..k).map(|i| nodes[(first + i) % nodes.len()].clone()).collect()
                };
                for n in &down {
                    set_health(sim, &self.h, n, true);
                }
                tokio::time::sleep(f.lasts).await;
                for n in &down {
                    set_health(sim, &self.h, n, false);
                }
                format!("StorageOS nodes {down:?} offline for {:?}", f.lasts)
            }
            Kind::KillReplica => {
                let name = REPLICAS[(f.pick % 4) as usize];
                self.replicas.kill(name);
                tokio::time::sleep(f.lasts).await;
                self.replicas.start(name);
                format!("{name} SIGKILLed, started again after {:?}", f.lasts)
            }
            Kind::WebhookSecretDeleted => {
                let secrets = self.world.cluster_ns.api::<Secret>();
                let r = secrets.delete("storageos-webhook", &DeleteParams::default()).await;
                format!(
                    "webhook certificate Secret deleted ({})",
                    if r.is_ok() { "ok" } else { "absent" }
                )
            }
            Kind::KwokNodeChurn => {
                let n = self.kwok_seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let name = format!("soak-{}-kwok-{n}", self.world.id);
                let nodes = Api::<Node>::all(self.world.ns.client.clone());
                let node: Node = from_json(json!({
                    "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                                 "labels": {"storageos-operator-test": "true", "type": "kwok"}},
                    "spec": {"taints": [support::no_kubelet_taint()]}
                }));
                let made = nodes.create(&PostParams::default(), &node).await.is_ok();
                tokio::time::sleep(f.lasts).await;
                // Removed, retried through an apiserver restart.
                for _ in 0..60 {
                    match nodes.delete(&name, &DeleteParams::default()).await {
                        Ok(_) => break,
                        Err(e) if gone(&e) => break,
                        Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
                    }
                }
                format!("kwok Node {name} added ({made}), removed after {:?}", f.lasts)
            }
            Kind::ClockJump => {
                let secs = 60 + f.pick % 3_540;
                let by = Duration::from_secs(secs);
                let mut h = self.h.lock().unwrap();
                sim.advance_clock(by);
                let total =
                    h.clock.last().map_or(chrono::Duration::zero(), |c| c.1) + chrono::Duration::seconds(secs as i64);
                h.clock.push((Utc::now(), total));
                format!("simulator clock +{secs} s")
            }
        }
    }
}

/// Whether `e` says the object is not there (a retried delete that already happened).
fn gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn signal(sig: &str, pid: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), pid])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} {pid} (etcd) failed");
}

// ---------------------------------------------------------------------------------------------
// Evidence

/// Wall time of a request log entry: its stamp less the simulated clock's offset then.
fn wall_time(r: &RequestRecord, clock: &[(DateTime<Utc>, chrono::Duration)]) -> DateTime<Utc> {
    let slack = chrono::Duration::seconds(1);
    for (i, (from, offset)) in clock.iter().enumerate().rev() {
        let t = r.time - *offset;
        let until = clock.get(i + 1).map(|c| c.0);
        if t >= *from - slack && until.is_none_or(|u| t <= u + slack) {
            return t;
        }
    }
    r.time
}

/// The sets of offline nodes StorageOS could have answered with between `from` and `to`
/// (each a state the soak's record holds in that span; 20 ms either side for the clocks).
fn states_between(changes: &[HealthChange], from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<BTreeSet<String>> {
    let eps = chrono::Duration::milliseconds(20);
    let mut off = BTreeSet::new();
    let mut states = Vec::new();
    for c in changes {
        if c.at > to + eps {
            break;
        }
        if c.at >= from - eps && states.is_empty() {
            states.push(off.clone());
        }
        if c.offline {
            off.insert(c.node.clone());
        } else {
            off.remove(&c.node);
        }
        if c.at >= from - eps {
            states.push(off.clone());
        }
    }
    if states.is_empty() {
        states.push(off);
    }
    states
}

/// Whether `offline` nodes of seven are within the partition guard (at most half offline).
fn guard_allows(offline: usize) -> bool {
    offline * 2 <= FENCED_NODES + CLUSTER_NODES
}

/// The api-manager's pod deletes in `ns` since `since`, from the audit log: (time, pod).
fn fencer_deletes(ns: &str, since: DateTime<Utc>) -> Vec<(DateTime<Utc>, String)> {
    support::identity::audit_events(API_MANAGER, since)
        .into_iter()
        .filter(|e| e["verb"] == "delete" && e["objectRef"]["resource"] == "pods" && e["objectRef"]["namespace"] == ns)
        .filter(|e| {
            e["responseStatus"]["code"]
                .as_u64()
                .is_some_and(|c| (200..300).contains(&c))
        })
        .filter_map(|e| {
            let t = DateTime::parse_from_rfc3339(e["requestReceivedTimestamp"].as_str()?).ok()?;
            Some((t.with_timezone(&Utc), e["objectRef"]["name"].as_str()?.to_string()))
        })
        .collect()
}

/// Checks every fencing delete against what StorageOS answered before it (invariants 1 and 2)
/// and against the soak's record of the node's health (invariant 3).
/// Also returns the deletes that landed after the node was back online (a fencer acting on its
/// last answer while StorageOS failed or was slow), with how long it had been online: within
/// the window these are allowed, and reported.
fn check_fencing(h: &Shared, ns: &str, since: DateTime<Utc>) -> (usize, Duration, Vec<String>) {
    let deletes = fencer_deletes(ns, since);
    let snapshot = {
        let g = h.lock().unwrap();
        (g.health.clone(), g.clock.clone(), g.requests.clone(), g.pods.clone())
    };
    let (health, clock, requests, pods) = snapshot;
    let window = chrono::Duration::from_std(DECISION_WINDOW).unwrap();
    // Every successful node list StorageOS answered (an answer lost with its connection is
    // no evidence): (answered from, answered by).
    let reads: Vec<(DateTime<Utc>, DateTime<Utc>)> = requests
        .iter()
        .filter(|r| r.method == "GET" && r.path == "/v2/nodes" && r.status == 200 && !r.dropped)
        .map(|r| {
            let start = wall_time(r, &clock);
            (start, start + chrono::Duration::milliseconds(r.duration_ms as i64))
        })
        .collect();
    let mut max_lag = Duration::ZERO;
    let mut late = Vec::new();
    for (t, pod) in &deletes {
        let Some(node) = pods.get(pod) else {
            check(h, "fenced only pods of the workload", false, || {
                format!("{t} deleted pod {pod}, not the workload's")
            });
            continue;
        };
        let in_window: Vec<&(DateTime<Utc>, DateTime<Utc>)> = reads
            .iter()
            .filter(|(_, end)| *end <= *t && *end >= *t - window)
            .collect();
        let mut offline_seen = None;
        let mut allowed_seen = None;
        for (start, end) in &in_window {
            for s in states_between(&health, *start, *end) {
                if s.contains(node) {
                    offline_seen.get_or_insert(*end);
                    if guard_allows(s.len()) {
                        allowed_seen = Some(*end);
                    }
                }
            }
        }
        let slice = || {
            let from = *t - window - chrono::Duration::seconds(5);
            let changes: Vec<String> = health
                .iter()
                .filter(|c| c.at >= from && c.at <= *t)
                .map(|c| {
                    format!(
                        "{} {} {}",
                        c.at.format("%H:%M:%S%.3f"),
                        c.node,
                        if c.offline { "offline" } else { "online" }
                    )
                })
                .collect();
            let answers: Vec<String> = in_window
                .iter()
                .map(|(s, e)| {
                    let states: Vec<_> = states_between(&health, *s, *e);
                    format!(
                        "GET /v2/nodes {}..{} offline: {states:?}",
                        s.format("%H:%M:%S%.3f"),
                        e.format("%H:%M:%S%.3f")
                    )
                })
                .collect();
            format!(
                "api-manager deleted pod {pod} (node {node}) at {}\n  health changes: {changes:#?}\n  StorageOS answers in the {DECISION_WINDOW:?} before: {answers:#?}",
                t.format("%H:%M:%S%.3f")
            )
        };
        check(
            h,
            "fenced only when StorageOS said its node was offline",
            offline_seen.is_some(),
            slice,
        );
        check(
            h,
            "fenced only when the partition guard allowed it",
            offline_seen.is_none() || allowed_seen.is_some(),
            slice,
        );
        let truth = states_between(&health, *t - window, *t);
        check(
            h,
            "no pod on an online node deleted",
            truth.iter().any(|s| s.contains(node)),
            slice,
        );
        if let Some(end) = allowed_seen {
            max_lag = max_lag.max((*t - end).to_std().unwrap_or_default());
        }
        let online_since = health.iter().rev().find(|c| c.node == *node && c.at <= *t);
        if let Some(c) = online_since.filter(|c| !c.offline) {
            let online_for = (*t - c.at).to_std().unwrap_or_default();
            late.push(format!("{pod} on {node}, online for {online_for:?}"));
        }
    }
    (deletes.len(), max_lag, late)
}

/// StorageOS writes that are not idempotent (a POST that creates, a DELETE) made twice with
/// the same path and body, by the request log.
fn repeated_writes(requests: &[RequestRecord]) -> Vec<String> {
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    for r in requests {
        if !(200..300).contains(&r.status) || r.path.starts_with("/v2/auth/") {
            continue;
        }
        if r.method == "POST" || r.method == "DELETE" {
            let body = r.body.as_ref().map(Value::to_string).unwrap_or_default();
            *seen.entry(format!("{} {} {body}", r.method, r.path)).or_insert(0) += 1;
        }
    }
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(k, n)| format!("{n}x {k}"))
        .collect()
}

/// The median of each third of the samples: (first, middle, last).
fn thirds(samples: &[(DateTime<Utc>, u64)]) -> Option<(u64, u64, u64)> {
    if samples.len() < 9 {
        return None;
    }
    let median = |s: &[(DateTime<Utc>, u64)]| {
        let mut v: Vec<u64> = s.iter().map(|x| x.1).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let third = samples.len() / 3;
    Some((
        median(&samples[..third]),
        median(&samples[third..samples.len() - third]),
        median(&samples[samples.len() - third..]),
    ))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

// ---------------------------------------------------------------------------------------------
// The soak

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number; set it to e.g. {name}=3")),
        Err(_) => default,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_chaos_soak_keeps_every_invariant() {
    let minutes: f64 = env_or("SOAK_MINUTES", 3.0);
    let seed: u64 = env_or("SOAK_SEED", 1);
    let run = Duration::from_secs_f64(minutes * 60.0);
    let plan = schedule(seed, run);
    let mut by_kind: BTreeMap<Kind, usize> = BTreeMap::new();
    for p in &plan {
        *by_kind.entry(p.kind).or_insert(0) += 1;
    }
    println!(
        "soak: seed {seed}, {minutes} minutes, {} faults planned: {by_kind:?}",
        plan.len()
    );
    let wall = Instant::now();

    let _lock = faults::exclusive().await;
    let plane = faults::own_plane();
    let h: Shared = Arc::default();
    let since = Utc::now();

    // The cluster, in a namespace of its own (its webhook Service is not the soak's).
    let ns = TestNamespace::new("soak").await;
    let cluster_ns = TestNamespace::new("soak-c").await;
    faults::clear_clusters(&ns.client).await;
    // The simulator, its StorageOS nodes kept in sync with the cluster's node pods.
    let sim = Arc::new(Simulator::start(sim::Config::default()).await.unwrap());
    let sync = sim.sync_with_kubernetes(ns.client.clone());

    // The fenced workload's nodes, registered online in StorageOS.
    let objects = ClusterObjects::default();
    let id = suffix();
    let class = format!("soak-{id}");
    objects.storage_class(&ns.client, &class).await;
    let mut nodes = Vec::new();
    for i in 0..FENCED_NODES {
        let name = format!("soak-{id}-f{i}");
        objects.node(&ns.client, &name, json!({})).await;
        sim.add_node(&name, Health::Online).unwrap();
        set_health(&sim, &h, &name, false);
        nodes.push(name);
    }
    let world = Arc::new(World {
        ns,
        cluster_ns,
        sim: sim.clone(),
        nodes,
        class,
        id,
        _objects: objects,
    });

    // The processes.
    // The api-manager replicas stand in for the cluster's rendered api-manager: its webhook
    // configuration (the encrypted-PVC hook fails closed) reaches them, both of them.
    let port_b = support::apimanager::free_port();
    let home = ApiManagerHome::for_cluster(&world.cluster_ns, &[port_b]).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = support::operator_kubeconfig(dir.path()).await;
    let mut ports = BTreeMap::new();
    ports.insert("api-manager-a".to_string(), home.webhook_port);
    ports.insert("api-manager-b".to_string(), port_b);
    let replicas = Arc::new(Replicas {
        kubeconfig,
        sim: sim.clone(),
        home,
        ports,
        running: Mutex::default(),
    });
    for r in REPLICAS {
        replicas.start(r);
    }
    faults::create_cluster(&world.cluster_ns, OLD_IMAGE).await;
    faults::wait_running(&world.cluster_ns, SETTLE).await;
    // A kwok api-manager pod made before the policy refusing them took effect would get
    // webhook calls it never answers.
    let _ = world
        .cluster_ns
        .api::<Pod>()
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("app.kubernetes.io/component=storageos-api-manager"),
        )
        .await;
    // The workload's claims (once the cluster's StorageOS nodes exist): two RWO per node (masters on the cluster's nodes, which stay
    // online, so fencing is safe) and one RWX claim shared by a pod on every node.
    let mut slots = Vec::new();
    for (i, node) in world.nodes.iter().enumerate() {
        for k in 0..2 {
            let claim = format!("d-{i}-{k}");
            world
                .claim(&claim, false, support::KWOK_NODES[(i + k) % CLUSTER_NODES])
                .await;
            slots.push(Slot {
                name: format!("p-{i}-{k}"),
                node: node.clone(),
                claim,
            });
        }
        slots.push(Slot {
            name: format!("p-{i}-rwx"),
            node: node.clone(),
            claim: "shared".into(),
        });
    }
    world.claim("shared", true, support::KWOK_NODES[0]).await;

    create_job(&world.cluster_ns).await;
    replicas.home.serving_ca().await;
    support::apimanager::fencer_polled(&sim, SETTLE).await;
    // Baselines: the operator's children, the data-holding objects.
    wait_for("the Job's DaemonSet", SETTLE, || async {
        let c = faults::children(&world.cluster_ns).await;
        c.keys().any(|k| k.starts_with("DaemonSet/soak-job")).then_some(())
    })
    .await;
    let children_before = faults::children(&world.cluster_ns).await;
    let data_before = world.data_uids().await;
    println!(
        "soak: world ready after {:?}: {} operator children, {} data objects, {} workload slots",
        wall.elapsed(),
        children_before.len(),
        data_before.len(),
        slots.len()
    );

    // Background: the workload, the monitor, the request log drain.
    let stop_workload = Arc::new(AtomicBool::new(false));
    let stop_monitor = Arc::new(AtomicBool::new(false));
    let workload = tokio::spawn(run_workload(
        world.clone(),
        h.clone(),
        slots.clone(),
        stop_workload.clone(),
    ));
    let monitor = tokio::spawn(run_monitor(
        world.clone(),
        replicas.clone(),
        h.clone(),
        stop_monitor.clone(),
    ));

    // The schedule.
    let injector = Arc::new(Injector {
        plane,
        world: world.clone(),
        replicas: replicas.clone(),
        h: h.clone(),
        locks: (0..8).map(|_| tokio::sync::Mutex::new(())).collect(),
        kwok_seq: Default::default(),
    });
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for f in plan.clone() {
        let inj = injector.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(start + f.at).await;
            inj.inject(&f).await;
        }));
    }
    // An upgrade now and then, as part of the workload: one per ten minutes, the first at a
    // third of the run.
    let upgrades = {
        let world = world.clone();
        tokio::spawn(async move {
            let mut n = 0;
            let mut at = run / 3;
            while at < run {
                tokio::time::sleep_until(start + at).await;
                n += 1;
                let image = if n % 2 == 1 { NEW_IMAGE } else { OLD_IMAGE };
                upgrade(&world.cluster_ns, &format!("up-{n}"), image).await;
                at += Duration::from_secs(600);
            }
            n
        })
    };
    for t in tasks {
        t.await.unwrap();
    }
    let upgrades_done = upgrades.await.unwrap();
    let last_fault = Utc::now();
    println!("soak: schedule done after {:?}", wall.elapsed());

    // Quiescence: the cluster Ready again within the bound.
    let last_seen = std::sync::Mutex::new(None);
    let recovered = tokio::time::timeout(RECOVERY_BOUND, async {
        loop {
            let state = faults::cluster_state(&world.cluster_ns).await;
            let ready = is_ready(state.as_ref());
            *last_seen.lock().unwrap() = state;
            if ready {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await
    .is_ok();
    let final_recovery = (Utc::now() - last_fault).to_std().unwrap_or_default();
    let last_seen = last_seen.into_inner().unwrap();
    let stuck = if recovered {
        String::new()
    } else {
        not_ready_report(&world.cluster_ns).await
    };
    check(
        &h,
        "Ready again within the bound after the last fault",
        recovered,
        || {
            format!(
                "the cluster was not Ready {RECOVERY_BOUND:?} after the last fault ({last_fault}); \
                 its status then (phase, ready, Ready condition): {last_seen:?}\n{stuck}"
            )
        },
    );
    // Every slot's pod back, then the workload stops.
    wait_for("every workload pod back", SETTLE, || async {
        let pods = world.ns.api::<Pod>().list(&ListParams::default()).await.ok()?;
        (pods.items.len() >= slots.len()).then_some(())
    })
    .await;
    stop_workload.store(true, Ordering::SeqCst);
    workload.await.unwrap();
    // The webhook certificate is back.
    replicas.home.serving_ca().await;

    // Idle: neither process writes, to the apiserver (but for its leader Lease) or to StorageOS,
    // over a window in which both provably ran (node polls).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_from = Utc::now();
    let idle_seq = sim.requests().last().map_or(0, |r| r.seq);
    tokio::time::sleep(IDLE).await;
    // Proof the processes ran in the window: StorageOS node polls answered in it (the fencer
    // polls every 5 s, the operator on its own schedule).
    let polls = sim
        .requests()
        .iter()
        .filter(|r| {
            r.seq > idle_seq && r.status == 200 && !r.dropped && support::evidence::on_route(r, "GET /v2/nodes")
        })
        .count();
    check(&h, "the idle window saw the processes poll", polls >= 4, || {
        format!("only {polls} successful node polls in the idle {IDLE:?} from {idle_from}")
    });
    support::identity::audit_flushed(API_MANAGER).await;
    for who in [OPERATOR, API_MANAGER] {
        let writes: Vec<String> = support::identity::writes_by(who, idle_from)
            .into_iter()
            .filter(|w| !w.contains(" leases "))
            .collect();
        check(&h, "no apiserver writes at idle", writes.is_empty(), || {
            format!("{} wrote in the idle {IDLE:?} from {idle_from}: {writes:#?}", who.name)
        });
    }
    let idle_storageos: Vec<String> = sim
        .requests()
        .into_iter()
        .filter(|r| r.seq > idle_seq && r.method != "GET" && !r.path.starts_with("/v2/auth/"))
        .map(|r| format!("{} {} {}", r.method, r.path, r.status))
        .collect();
    check(&h, "no StorageOS writes at idle", idle_storageos.is_empty(), || {
        format!("StorageOS writes in the idle {IDLE:?} from {idle_from}: {idle_storageos:#?}")
    });
    stop_monitor.store(true, Ordering::SeqCst);
    monitor.await.unwrap();
    drain_requests(&sim, &h);

    // After quiescence: every child there, none replaced; the data-holding objects' UIDs.
    let children_after = faults::children(&world.cluster_ns).await;
    for (child, uid) in &children_before {
        check(
            &h,
            "every desired child exists, UID unchanged",
            children_after.get(child) == Some(uid),
            || format!("{child}: {uid} before the soak, {:?} after", children_after.get(child)),
        );
    }
    let data_after = world.data_uids().await;
    for (object, uid) in &data_before {
        check(
            &h,
            "no data-holding object replaced",
            data_after.get(object) == Some(uid),
            || format!("{object}: {uid} before the soak, {:?} after", data_after.get(object)),
        );
    }
    // The operator deleted only what upgrades delete: node pods and the image puller.
    for (object, times) in faults::deletes_by(OPERATOR, since) {
        let cns = &world.cluster_ns.name;
        let expected = object.starts_with(&format!("pods {cns}/{NODE_DAEMONSET}-"))
            || (object.starts_with(&format!("daemonsets {cns}/up-")) && object.ends_with("-image-puller"));
        check(
            &h,
            "the operator deletes only what an upgrade replaces",
            expected && times == 1,
            || format!("the operator deleted {object} {times} time(s)"),
        );
    }
    check_encryption(&world, &h, true).await;
    let requests = h.lock().unwrap().requests.clone();
    let repeated = repeated_writes(&requests);
    check(
        &h,
        "no non-idempotent StorageOS write repeated",
        repeated.is_empty(),
        || format!("the simulator's request log: {repeated:#?}"),
    );
    let lost = h.lock().unwrap().requests_lost;
    check(&h, "the simulator's request log is complete", lost == 0, || {
        format!("{lost} requests fell out of the simulator's log between two reads")
    });
    let (fenced, max_lag, late) = check_fencing(&h, &world.ns.name, since);
    // RSS: no upward trend over an instance that lived long enough for thirds to mean something.
    let rss = h.lock().unwrap().rss.clone();
    let mut rss_lines = Vec::new();
    for (instance, samples) in &rss {
        if let Some((first, middle, last)) = thirds(samples) {
            rss_lines.push(format!(
                "{instance}: {} samples, median {:.1} / {:.1} / {:.1} MiB by third",
                samples.len(),
                first as f64 / 1024.0,
                middle as f64 / 1024.0,
                last as f64 / 1024.0
            ));
            // A trend grows from each third to the next. One step is not one: a standby that
            // becomes the leader fills its caches once (about 50 to 65 MiB here, debug build).
            let grew = last > first + first / 4
                && last - first > 8 * 1024
                && middle > first + 2 * 1024
                && last > middle + 2 * 1024;
            check(&h, "RSS shows no upward trend", !grew, || {
                format!(
                    "{instance}: {first} KiB in the first third of its samples, {last} KiB in the last: {samples:?}"
                )
            });
        }
    }

    // The summary (the history taken out: every task that wrote to it has ended).
    let g = std::mem::take(&mut *h.lock().unwrap());
    let mut injected: BTreeMap<Kind, usize> = BTreeMap::new();
    for f in &g.faults {
        *injected.entry(f.kind).or_insert(0) += 1;
    }
    let mut recoveries: Vec<Duration> = g
        .faults
        .iter()
        .filter_map(|f| {
            let after = g.ready.iter().find(|(t, ready)| *t >= f.end && *ready)?;
            (after.0 - f.end).to_std().ok()
        })
        .collect();
    recoveries.sort();
    println!("==== soak summary (seed {seed}, {minutes} minutes) ====");
    println!("faults injected: {} of {} kinds", g.faults.len(), injected.len());
    for (k, n) in &injected {
        println!("  {k:?}: {n}");
    }
    println!(
        "workload: {} pods made, {fenced} fenced by the api-manager (max lag after a justifying StorageOS answer {max_lag:?}), \
         {} encryption-labelled PVCs admitted, {} refused ({} more sent while the apiserver was down), \
         {upgrades_done} upgrade(s)",
        g.pods.len(),
        g.encrypted.0,
        g.encrypted.1,
        g.encrypted.2
    );
    println!(
        "  fenced after the node was online again (within the {DECISION_WINDOW:?} window): {} {late:?}",
        late.len()
    );
    let dropped: Vec<&RequestRecord> = g.requests.iter().filter(|r| r.dropped).collect();
    println!(
        "  StorageOS requests whose connection was dropped: {} ({} before they were handled, {} after)",
        dropped.len(),
        dropped.iter().filter(|r| r.status == 0).count(),
        dropped.iter().filter(|r| r.status != 0).count()
    );
    if let Some(why) = &g.denied_because {
        println!("  the first encryption-labelled PVC refused: {why}");
    }
    println!(
        "replicas that exited on their own (by design: leader election ended) and were restarted: {} {:?}",
        g.exits.len(),
        g.exits
    );
    println!("invariant checks: {}", g.checks.values().sum::<u64>());
    for (inv, n) in &g.checks {
        println!("  {n:>6}  {inv}");
    }
    for l in &rss_lines {
        println!("  rss {l}");
    }
    println!(
        "recovery to Ready after each fault: p50 {:?}, max {:?} ({} faults); after the last fault {:?} (bound {RECOVERY_BOUND:?})",
        percentile(&recoveries, 0.5),
        percentile(&recoveries, 1.0),
        recoveries.len(),
        final_recovery
    );
    println!("violations: {}", g.violations.len());
    println!("wall time: {:?}", wall.elapsed());
    if !g.violations.is_empty() {
        for (inv, evidence) in &g.violations {
            println!("VIOLATION (seed {seed}): {inv}\n{evidence}");
        }
        println!("faults around them:");
        for f in &g.faults {
            println!(
                "  {} .. {} {:?}: {}",
                f.start.format("%H:%M:%S%.3f"),
                f.end.format("%H:%M:%S%.3f"),
                f.kind,
                f.what
            );
        }
        panic!(
            "the soak found {} invariant violation(s) with seed {seed}; run it again with `hack/soak.sh --minutes {minutes} --seed {seed}`",
            g.violations.len()
        );
    }
    faults::delete_cluster(&world.cluster_ns).await;
    sync.abort();
}

/// The schedule is a function of the seed: the same seed gives the same faults at the same
/// offsets; the first ten faults are of ten kinds.
#[test]
fn the_same_seed_gives_the_same_schedule() {
    let run = Duration::from_secs(120);
    let (a, b) = (schedule(7, run), schedule(7, run));
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert_ne!(format!("{a:?}"), format!("{:?}", schedule(8, run)));
    let kinds: BTreeSet<Kind> = a.iter().take(10).map(|p| p.kind).collect();
    assert_eq!(kinds.len(), Kind::ALL.len());
}

/// A storageos.com Job selecting no node: its DaemonSet is a child the operator keeps.
async fn create_job(ns: &TestNamespace) {
    let job: storageos_operator::crd::Job = from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "Job",
        "metadata": {"name": "soak-job"},
        "spec": {"image": "darkowlzz/cleanup:v0.0.2", "args": ["/var/lib/storageos"],
                 "mountPath": "/var/lib/storageos", "hostPath": "/var/lib/storageos",
                 "completionWord": "done",
                 "nodeSelectorTerms": [{"matchExpressions": [{"key": "soak-job", "operator": "In", "values": ["never"]}]}]}
    }));
    ns.api::<storageos_operator::crd::Job>()
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
}

/// An upgrade to `image`: created, waited for (bounded), then deleted, which ends maintenance.
async fn upgrade(ns: &TestNamespace, name: &str, image: &str) {
    let up: StorageOSUpgrade = from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSUpgrade",
        "metadata": {"name": name}, "spec": {"newImage": image}
    }));
    let api = ns.api::<StorageOSUpgrade>();
    for _ in 0..60 {
        if api.create(&PostParams::default(), &up).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let deadline = Instant::now() + SETTLE;
    while Instant::now() < deadline {
        let phase = api.get(name).await.ok().and_then(|u| u.status?.phase);
        if matches!(phase, Some(UpgradePhase::Completed | UpgradePhase::Failed)) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for _ in 0..60 {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => break,
            Err(e) if gone(&e) => break,
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

async fn cluster_ready(ns: &TestNamespace) -> bool {
    is_ready(faults::cluster_state(ns).await.as_ref())
}

/// What a cluster that did not come back looks like: its whole status and the readiness of
/// every workload in its namespace, so a violation can be read without the plane.
async fn not_ready_report(ns: &TestNamespace) -> String {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    use storageos_operator::crd::StorageOSCluster;
    let mut out = String::new();
    if let Ok(list) = ns.api::<StorageOSCluster>().list(&ListParams::default()).await {
        for c in list {
            let status = serde_json::to_string(&c.status).unwrap_or_default();
            out.push_str(&format!("  StorageOSCluster {} status: {status}\n", c.name_any()));
        }
    }
    out.push_str(&statuses(ns.api::<DaemonSet>()).await);
    out.push_str(&statuses(ns.api::<Deployment>()).await);
    if let Ok(list) = ns.api::<Pod>().list(&ListParams::default()).await {
        for p in list {
            let phase = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            out.push_str(&format!("  Pod {} on {node}: {phase}\n", p.name_any()));
        }
    }
    out
}

/// `Kind name: {status}` for every object `api` lists, a line each.
async fn statuses<K>(api: Api<K>) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let Ok(list) = api.list(&ListParams::default()).await else {
        return String::new();
    };
    list.items
        .iter()
        .map(|o| {
            let v = serde_json::to_value(o).unwrap_or_default();
            format!(
                "  {} {}: {}\n",
                v["kind"].as_str().unwrap_or("?"),
                o.name_any(),
                v["status"]
            )
        })
        .collect()
}

fn is_ready(state: Option<&(String, String, String)>) -> bool {
    state.is_some_and(|(phase, ready, cond)| phase == "Running" && ready == "3/3" && cond.starts_with("True "))
}

/// The workload: every slot's pod made again (next generation) when gone and its node online;
/// an encryption-labelled PVC every few seconds.
async fn run_workload(world: Arc<World>, h: Shared, slots: Vec<Slot>, stop: Arc<AtomicBool>) {
    let pods = world.ns.api::<Pod>();
    let mut generation: BTreeMap<String, u32> = BTreeMap::new();
    let mut tick = 0u32;
    while !stop.load(Ordering::SeqCst) {
        tick += 1;
        if let Ok(list) = pods.list(&ListParams::default()).await {
            let live: BTreeSet<String> = list.items.iter().map(|p| p.name_any()).collect();
            let offline = offline_now(&h);
            for s in &slots {
                let g = generation.entry(s.name.clone()).or_insert(0);
                let current = format!("{}-g{g}", s.name);
                if live.contains(&current) || offline.contains(&s.node) {
                    continue;
                }
                // Gone (or never made): the next generation, as a StatefulSet would.
                let next = format!("{}-g{}", s.name, *g + 1);
                let pod: Pod = from_json(json!({
                    "metadata": {"name": next, "labels": {"storageos.com/fenced": "true", "app": "soak"}},
                    "spec": {"nodeName": s.node, "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                             "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": s.claim}}]}
                }));
                h.lock().unwrap().pods.insert(next.clone(), s.node.clone());
                if pods.create(&PostParams::default(), &pod).await.is_ok() {
                    *g += 1;
                }
            }
        }
        if tick.is_multiple_of(5) {
            let name = format!("enc-{tick}");
            let pvc: PersistentVolumeClaim = from_json(json!({
                "metadata": {"name": name, "labels": {"storageos.com/encryption": "true"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": world.class,
                         "resources": {"requests": {"storage": "1Gi"}}}
            }));
            let created = world
                .ns
                .api::<PersistentVolumeClaim>()
                .create(&PostParams::default(), &pvc)
                .await;
            let mut g = h.lock().unwrap();
            match created {
                Ok(_) => g.encrypted.0 += 1,
                Err(e @ kube::Error::Api(_)) => {
                    g.encrypted.1 += 1;
                    g.denied_because.get_or_insert(e.to_string());
                }
                Err(_) => g.encrypted.2 += 1,
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Every encryption-labelled PVC stored in the apiserver names a volume key Secret that
/// exists with a key (invariant: none admitted without keys).
async fn check_encryption(world: &World, h: &Shared, final_check: bool) {
    use storageos_operator::apimanager::webhook::encryption::{SECRET_NAME_ANNOTATION, SECRET_NAMESPACE_ANNOTATION};
    let lp = ListParams::default().labels("storageos.com/encryption=true");
    let Ok(pvcs) = world.ns.api::<PersistentVolumeClaim>().list(&lp).await else {
        assert!(!final_check, "list the encryption-labelled PVCs");
        return;
    };
    let secrets = world.ns.api::<Secret>();
    for pvc in pvcs {
        let a = pvc.annotations();
        let secret = match (a.get(SECRET_NAME_ANNOTATION), a.get(SECRET_NAMESPACE_ANNOTATION)) {
            (Some(name), Some(ns)) if *ns == world.ns.name => secrets.get_opt(name).await,
            _ => Ok(None),
        };
        let Ok(secret) = secret else { continue };
        let keyed = secret.is_some_and(|s| s.data.is_some_and(|d| !d.is_empty()));
        check(h, "no encryption-labelled PVC admitted without keys", keyed, || {
            format!(
                "PVC {} stored with annotations {a:?} and no volume key Secret",
                pvc.name_any()
            )
        });
    }
}

/// Copies the simulator's new requests into the history, noting any that fell out of its log.
fn drain_requests(sim: &SimHandle, h: &Shared) {
    let mut g = h.lock().unwrap();
    let last = g.requests.last().map_or(0, |r| r.seq);
    let new: Vec<RequestRecord> = sim.requests().into_iter().filter(|r| r.seq > last).collect();
    if let Some(first) = new.first()
        && first.seq > last + 1
    {
        g.requests_lost += first.seq - last - 1;
    }
    g.requests.extend(new);
}

/// Every second: the cluster's readiness, each replica's RSS, the request log; every ten, the
/// encryption check.
async fn run_monitor(world: Arc<World>, replicas: Arc<Replicas>, h: Shared, stop: Arc<AtomicBool>) {
    let mut tick = 0u64;
    while !stop.load(Ordering::SeqCst) {
        tick += 1;
        let ready = cluster_ready(&world.cluster_ns).await;
        let now = Utc::now();
        {
            let mut g = h.lock().unwrap();
            g.ready.push((now, ready));
            if tick.is_multiple_of(5) {
                for (instance, pid) in replicas.pids() {
                    if let Some(kib) = rss_kib(pid) {
                        g.rss.entry(instance).or_default().push((now, kib));
                    }
                }
            }
        }
        // A replica that exited is started again, as the kubelet restarts a container. Exiting
        // is by design only when its leader election ended (it restarts clean rather than act
        // on stale state); any other exit is a crash. (A replica started while a restarted
        // kube-apiserver still answers 403, its RBAC cache filling, retries its first request
        // rather than exit: `connect_patiently`.)
        for (name, status, tail) in replicas.reap() {
            let designed = tail.contains("leader election on Lease");
            h.lock()
                .unwrap()
                .exits
                .push(format!("{} {name} {status}", Utc::now().format("%H:%M:%S")));
            check(
                &h,
                "no replica crashes (exits other than ended leader election)",
                designed,
                || format!("{name} exited ({status}); its log ends:\n{tail}"),
            );
            replicas.start(&name);
        }
        drain_requests(&world.sim, &h);
        if tick.is_multiple_of(10) {
            check_encryption(&world, &h, false).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
