//! Pod admission requests straight to the api-manager's webhook, at a fixed rate, until
//! stopped: the load of "fencing while busy". It must keep the api-manager busy, not the
//! apiserver (dry-run creates through a 2-core plane at 200/s for minutes starve every other
//! client of the apiserver, the fencer and the bench included, which would measure the
//! apiserver).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{Value, json};
use tokio::sync::Mutex;

/// Four workers, each on one keep-alive connection.
const WORKERS: usize = 4;

fn review(namespace: &str, claim: &str) -> Value {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "busy", "namespace": namespace, "labels": {"bench.storageos.com/workload": "true"}},
        "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]},
    });
    let uid = format!("bench-{:016x}", rand::random::<u64>());
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "busy", "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": "bench"}, "object": pod, "dryRun": true,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    })
}

/// The running load; `stop` ends it and summarises it.
pub struct Load {
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    stats: Arc<Mutex<(u64, u64, Vec<f64>)>>,
    rps: f64,
}

/// Starts sending to `url` (e.g. `https://10.0.0.5:17456/mutate-pods`).
pub fn start(url: &str, rps: f64, namespace: &str, claim: &str) -> Result<Load> {
    let body = serde_json::to_vec(&review(namespace, claim))?;
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(Mutex::new((0u64, 0u64, Vec::new())));
    let mut workers = Vec::new();
    for i in 0..WORKERS {
        // The webhook's own self-signed serving certificate.
        let http = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .pool_max_idle_per_host(1)
            .timeout(Duration::from_secs(10))
            .build()?;
        let (url, body, stop, stats) = (url.to_string(), body.clone(), stop.clone(), stats.clone());
        workers.push(tokio::spawn(async move {
            let interval = Duration::from_secs_f64(WORKERS as f64 / rps);
            let mut next = Instant::now() + interval.mul_f64(i as f64 / WORKERS as f64);
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep_until(next.into()).await;
                next += interval;
                let t0 = Instant::now();
                let ok = match http
                    .post(&url)
                    .header("Content-Type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                {
                    Ok(r) => r.status().as_u16() == 200 && r.bytes().await.is_ok(),
                    Err(_) => false,
                };
                let mut s = stats.lock().await;
                s.0 += 1;
                s.1 += u64::from(!ok);
                s.2.push(t0.elapsed().as_secs_f64() * 1000.0);
            }
        }));
    }
    Ok(Load {
        stop,
        workers,
        stats,
        rps,
    })
}

impl Load {
    /// `{"rps", "sent", "errors", "p50_ms", "p99_ms"}`.
    pub async fn stop(self) -> Value {
        self.stop.store(true, Ordering::Relaxed);
        for w in &self.workers {
            w.abort();
        }
        let s = self.stats.lock().await;
        let mut ms = s.2.clone();
        ms.sort_by(|a, b| a.total_cmp(b));
        let pick = |p: f64| {
            ms.get(((p * ms.len() as f64) as usize).min(ms.len().saturating_sub(1)))
                .map(|v| (v * 10.0).round() / 10.0)
        };
        json!({"rps": self.rps, "sent": s.0, "errors": s.1, "p50_ms": pick(0.5), "p99_ms": pick(0.99)})
    }
}
