//! What the bench reads off the running system: /proc figures of a process, the load average,
//! the simulator's request log, and when the api-manager has settled (the audit log).

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::audit;

/// VmRSS and VmHWM (KiB) and utime + stime (s) of a process.
pub struct Stats {
    pub rss_kib: u64,
    pub hwm_kib: u64,
    pub cpu_s: f64,
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

pub fn proc_stats(pid: u32) -> Result<Stats> {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("/proc/{pid}/status"))?;
    let kib = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim_start_matches(':').split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("/proc/{pid}/stat"))?;
    // The fields after the command name (which may hold spaces): state is the first.
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    Ok(Stats {
        rss_kib: kib("VmRSS"),
        hwm_kib: kib("VmHWM"),
        cpu_s: (ticks(11) + ticks(12)) / clock_ticks(),
    })
}

/// The 1, 5 and 15 minute load averages, as /proc/loadavg writes them.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

pub fn epoch_now() -> f64 {
    chrono::Utc::now().timestamp_micros() as f64 / 1e6
}

/// The simulator's request log (`/_sim/requests`).
pub async fn sim_requests(http: &reqwest::Client, sim: &str) -> Result<Vec<Value>> {
    Ok(http
        .get(format!("{sim}/_sim/requests"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}

pub async fn clear_sim_requests(http: &reqwest::Client, sim: &str) -> Result<()> {
    http.delete(format!("{sim}/_sim/requests"))
        .send()
        .await?
        .error_for_status()?;
    Ok(())
}

/// Waits until the api-manager has written nothing but Lease renewals and Events for `quiet`
/// s (its first pass over the new workload is done), at most `limit` s, reading the audit log
/// from its end on; how long that took and the writes it saw. At 5,000 nodes the first pass
/// over 10,000 new mirrors takes minutes, and an idle minute inside it would measure the pass,
/// not the steady state.
pub async fn settle(audit_log: &Path, quiet: f64, limit: f64) -> Result<Value> {
    let mut f = std::fs::File::open(audit_log).with_context(|| format!("open {}", audit_log.display()))?;
    f.seek(SeekFrom::End(0))?;
    let start = Instant::now();
    let mut last = start;
    let (mut writes, mut buf) = (0u64, Vec::new());
    loop {
        let mut chunk = Vec::new();
        f.read_to_end(&mut chunk)?;
        buf.extend_from_slice(&chunk);
        if let Some(end) = buf.iter().rposition(|b| *b == b'\n') {
            for line in buf[..end].split(|b| *b == b'\n') {
                let Ok(ev) = serde_json::from_slice::<Value>(line) else {
                    continue;
                };
                if audit::api_manager_write(&ev) && ev["objectRef"]["resource"] != "events" {
                    writes += 1;
                    last = Instant::now();
                }
            }
            buf.drain(..=end);
        }
        if last.elapsed().as_secs_f64() >= quiet || start.elapsed().as_secs_f64() >= limit {
            break;
        }
        if chunk.is_empty() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    let seconds = (start.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    Ok(json!({"seconds": seconds, "writes": writes, "timed_out": last.elapsed().as_secs_f64() < quiet}))
}
