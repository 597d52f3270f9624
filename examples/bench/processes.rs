//! The processes the bench starts (simulator, operator, api-manager): each is a child that is
//! killed when its handle drops, so an error, a panic or Ctrl-C leaves nothing running.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::process::{Child, Command};

/// One started process; its output goes to `<dir>/<name>.log`.
pub struct Proc {
    child: Child,
    pid: u32,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// SIGTERM, then SIGKILL after 10 s: a graceful stop releases the leader-election Lease, so a
    /// successor does not wait out its lease.
    pub async fn stop(mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-TERM", &self.pid.to_string()])
                .status()
                .await;
            if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
                .await
                .is_err()
            {
                let _ = self.child.kill().await;
            }
        }
    }
}

/// The running processes by name.
#[derive(Default)]
pub struct Procs {
    running: HashMap<String, Proc>,
}

impl Procs {
    /// Starts `cmd` as `name`, its stdout and stderr in `<dir>/<name>.log`, its pid in
    /// `<dir>/<name>.pid` (for a look at /proc while it runs).
    pub fn start(&mut self, dir: &Path, name: &str, mut cmd: Command) -> Result<u32> {
        let log =
            std::fs::File::create(dir.join(format!("{name}.log"))).with_context(|| format!("create {name}.log"))?;
        let err = log.try_clone()?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {name}"))?;
        let pid = child.id().context("a pid")?;
        std::fs::write(dir.join(format!("{name}.pid")), pid.to_string())?;
        self.running.insert(name.to_string(), Proc { child, pid });
        Ok(pid)
    }

    pub fn pid(&self, name: &str) -> Result<u32> {
        self.running
            .get(name)
            .map(Proc::pid)
            .with_context(|| format!("{name} is not running"))
    }

    pub async fn stop(&mut self, name: &str) {
        if let Some(p) = self.running.remove(name) {
            p.stop().await;
        }
    }

    pub async fn stop_all(&mut self) {
        for (_, p) in self.running.drain() {
            p.stop().await;
        }
    }
}
