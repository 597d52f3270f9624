//! The run's files read back: each size's JSON (as in results.json) and the counters behind
//! the report's breakdown, from OUT/n<N>/*.json, the audit logs and the simulator's request logs.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::audit::{self, events, str_of, ts};

/// Counts by key, in the order keys were first seen (ties keep it when sorted by count).
#[derive(Default, Clone)]
pub(crate) struct Counter(Vec<(String, u64)>);

impl Counter {
    pub(crate) fn add(&mut self, key: String) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v += 1,
            None => self.0.push((key, 1)),
        }
    }

    pub(crate) fn total(&self) -> u64 {
        self.0.iter().map(|(_, v)| v).sum()
    }

    pub(crate) fn sorted(&self) -> Vec<(String, u64)> {
        let mut v = self.0.clone();
        v.sort_by_key(|e| std::cmp::Reverse(e.1));
        v
    }

    pub(crate) fn to_value(&self) -> Value {
        Value::Object(self.0.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
    }

    pub(crate) fn text(&self) -> String {
        let items = self.sorted();
        if items.is_empty() {
            return "none".into();
        }
        items
            .iter()
            .map(|(k, v)| format!("`{k}` {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One size: its JSON (as in results.json) and the counters behind the breakdown.
pub(crate) struct Size {
    pub(crate) v: Value,
    pub(crate) writes: Counter,
    pub(crate) reads: Counter,
    pub(crate) sim: Counter,
    pub(crate) flap: Option<(u64, Counter)>,
    pub(crate) fresh: Option<(Counter, Counter)>,
}

pub(crate) fn load(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null)
}

/// `{}` for a missing or null file, as the report's `or {}` reads.
pub(crate) fn obj(v: Value) -> Value {
    if v.is_null() { json!({}) } else { v }
}

pub(crate) fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// Per fresh cluster: ms from its create to the last child's first apply by the operator.
fn cluster_apply(audit_path: &Path) -> Vec<Value> {
    let (mut creates, mut patches) = (Vec::new(), Vec::new());
    for ev in events(audit_path) {
        if !audit::completed(&ev) {
            continue;
        }
        let r = &ev["objectRef"];
        let sub = r["subresource"].as_str().is_some_and(|s| !s.is_empty());
        let resource = r["resource"].as_str().unwrap_or_default();
        let verb = str_of(&ev, "verb");
        if resource == "storageosclusters" && verb == "create" && !sub {
            if let Some(t) = ts(str_of(&ev, "requestReceivedTimestamp")) {
                creates.push(t);
            }
        } else if ev["user"]["username"] == audit::OPERATOR_SA
            && ["patch", "create", "update"].contains(&verb)
            && !sub
            && !["storageosclusters", "events", "leases"].contains(&resource)
            && ev["responseStatus"]["code"].as_i64().unwrap_or(0) < 300
            && let Some(t) = ts(str_of(&ev, "stageTimestamp"))
        {
            let key = (
                resource.to_string(),
                str_of(r, "namespace").to_string(),
                str_of(r, "name").to_string(),
            );
            patches.push((t, key));
        }
    }
    creates.sort_by(f64::total_cmp);
    let mut out = Vec::new();
    for (i, &c) in creates.iter().enumerate() {
        let end = creates.get(i + 1).copied().unwrap_or(f64::INFINITY);
        let mut first: Vec<(&(String, String, String), f64)> = Vec::new();
        for (t, key) in &patches {
            if c <= *t && *t < end && !first.iter().any(|(k, _)| *k == key) {
                first.push((key, *t));
            }
        }
        if let Some(last) = first.iter().map(|(_, t)| *t).max_by(f64::total_cmp) {
            out.push(json!({"ms": round((last - c) * 1000.0, 1), "children": first.len()}));
        }
    }
    out
}

/// A StorageOS API path with its names and ids replaced.
fn route(path: &str) -> String {
    let mut out = Vec::new();
    let mut parts = path.split('/').peekable();
    while let Some(p) = parts.next() {
        out.push(p.to_string());
        if let Some(placeholder) = match p {
            "namespaces" => Some("{ns}"),
            "volumes" => Some("{id}"),
            "nodes" => Some("{id}"),
            _ => None,
        } && parts.peek().is_some_and(|n| !n.is_empty())
        {
            parts.next();
            out.push(placeholder.to_string());
        }
    }
    out.join("/")
}

fn idle(d: &Path) -> (Counter, Counter, Counter) {
    let (mut writes, mut reads) = (Counter::default(), Counter::default());
    for ev in events(&d.join("idle-audit.jsonl")) {
        if !str_of(&ev, "userAgent").starts_with(audit::UA) || !audit::completed(&ev) {
            continue;
        }
        let key = format!(
            "{} {} {}",
            audit::component(&ev),
            str_of(&ev, "verb"),
            audit::resource(&ev)
        );
        if audit::is_write(&ev) {
            writes.add(key)
        } else {
            reads.add(key)
        }
    }
    let mut sim = Counter::default();
    if let Value::Array(reqs) = load(&d.join("idle-sim.json")) {
        for r in reqs {
            sim.add(format!("{} {}", str_of(&r, "method"), route(str_of(&r, "path"))));
        }
    }
    (writes, reads, sim)
}

/// The api-manager's apiserver writes (Lease renewals apart) in each `(from, to)` window of
/// epoch seconds, by verb and resource (completion time).
fn api_manager_writes(audit_path: &Path, windows: &[(f64, f64)]) -> Vec<Counter> {
    let mut out = vec![Counter::default(); windows.len()];
    if windows.is_empty() {
        return out;
    }
    for ev in events(audit_path) {
        if !audit::api_manager_write(&ev) {
            continue;
        }
        let Some(t) = ts(str_of(&ev, "stageTimestamp")) else {
            continue;
        };
        for (i, (a, b)) in windows.iter().enumerate() {
            if *a <= t && t < *b {
                out[i].add(format!("{} {}", str_of(&ev, "verb"), audit::resource(&ev)));
            }
        }
    }
    out
}

/// Writes per node flap (offline, then online) over the fencing trials' window.
fn flaps(d: &Path) -> Option<(Value, u64, Counter)> {
    let w = load(&d.join("fence-window.json"));
    let (from, to) = (w["from"].as_f64()?, w["to"].as_f64()?);
    let c = api_manager_writes(&d.join("audit.jsonl"), &[(from, to)]).pop()?;
    let trials = w["trials"].as_u64().unwrap_or(1).max(1);
    let mirror: u64 =
        c.0.iter()
            .filter(|(k, _)| {
                [" nodes", " nodes/status", " volumes", " volumes/status"]
                    .iter()
                    .any(|s| k.ends_with(s))
            })
            .map(|(_, v)| v)
            .sum();
    let v = json!({"trials": trials, "pods_per_node": w["pods_per_node"], "writes": c.to_value(),
        "per_flap": round(c.total() as f64 / trials as f64, 1), "mirror_per_flap": round(mirror as f64 / trials as f64, 1)});
    Some((v, trials, c))
}

/// A fresh api-manager's writes from its first poll on: the first pass, then an idle minute.
fn fresh(d: &Path) -> Option<(Value, Counter, Counter)> {
    let f = load(&d.join("fresh.json"));
    let t0 = ts(f["first_poll"].as_str()?)?;
    let a = f["first_pass_s"].as_f64().unwrap_or(35.0);
    let b = f["idle_s"].as_f64().unwrap_or(60.0);
    let mut w = api_manager_writes(&d.join("audit.jsonl"), &[(t0, t0 + a), (t0 + a, t0 + a + b)]);
    let idle_w = w.pop()?;
    let first = w.pop()?;
    let mirrors = f["node_mirrors"].as_u64().unwrap_or(0) + f["volume_mirrors"].as_u64().unwrap_or(0);
    let per_mirror = (mirrors > 0).then(|| round(first.total() as f64 / mirrors as f64, 2));
    let v = json!({"first_pass_s": f["first_pass_s"], "idle_s": f["idle_s"], "node_mirrors": f["node_mirrors"],
        "volume_mirrors": f["volume_mirrors"], "first_pass": first.to_value(), "first_pass_total": first.total(),
        "per_mirror": per_mirror, "idle": idle_w.to_value(), "idle_total": idle_w.total()});
    Some((v, first, idle_w))
}

/// Nearest-rank percentile.
fn pct(values: &[f64], p: f64) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return None;
    }
    let k = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[k - 1])
}

pub(crate) fn collect(out: &Path) -> Result<Vec<Size>> {
    let mut dirs: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(out)
        .with_context(|| format!("read {}", out.display()))?
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            Some((name.strip_prefix('n')?.parse().ok()?, e.path()))
        })
        .collect();
    dirs.sort_by_key(|(n, _)| *n);
    let mut sizes = Vec::new();
    for (n, d) in dirs {
        let (writes, reads, sim) = idle(&d);
        let applies = cluster_apply(&d.join("audit.jsonl"));
        let apply_ms: Vec<f64> = applies.iter().filter_map(|a| a["ms"].as_f64()).collect();
        let flap = flaps(&d);
        let fresh = fresh(&d);
        let v = json!({
            "nodes": n,
            "workload": obj(load(&d.join("workload.json"))),
            "idle": obj(load(&d.join("idle.json"))),
            "settle": obj(load(&d.join("settle.json"))),
            "end": obj(load(&d.join("end.json"))),
            "writes_per_min": writes.to_value(),
            "reads_per_min": reads.to_value(),
            "storageos_requests_per_min": sim.to_value(),
            "cluster_apply": {"trials": applies, "p50_ms": pct(&apply_ms, 0.5),
                              "max_ms": apply_ms.iter().copied().max_by(f64::total_cmp)},
            "fencing": obj(load(&d.join("fence.json"))),
            "fencing_busy": obj(load(&d.join("fence-busy.json"))),
            "fencing_busy_window": obj(load(&d.join("fence-busy-window.json"))),
            "fencing_busy_webhook": obj(load(&d.join("fence-busy-webhook.json"))),
            "webhook_baseline": obj(load(&d.join("webhook-baseline.json"))),
            "webhook_pod": obj(load(&d.join("webhook-pod.json"))),
            "webhook_pvc": obj(load(&d.join("webhook-pvc.json"))),
            "shared": load(&d.join("shared.json")),
            "flap_writes": flap.as_ref().map(|f| f.0.clone()),
            "fresh_api_manager": fresh.as_ref().map(|f| f.0.clone()),
        });
        sizes.push(Size {
            v,
            writes,
            reads,
            sim,
            flap: flap.map(|(_, t, c)| (t, c)),
            fresh: fresh.map(|(_, a, b)| (a, b)),
        });
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn routes_hide_names() {
        assert_eq!(
            super::route("/v2/namespaces/abc/volumes/x1"),
            "/v2/namespaces/{ns}/volumes/{id}"
        );
        assert_eq!(
            super::route("/v2/namespaces/abc/volumes"),
            "/v2/namespaces/{ns}/volumes"
        );
        assert_eq!(super::route("/v2/nodes"), "/v2/nodes");
        assert_eq!(super::route("/v2/nodes/n1/health"), "/v2/nodes/{id}/health");
    }
}
