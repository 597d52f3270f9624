//! The bench's control plane: `hack/k8s.sh` starts and stops it (with the bench's own state
//! directory and ports, apart from the test plane), `kubectl` is used where one command says it
//! all, and an admin client talks to it from this process.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// `hack/versions.env`: the pinned Kubernetes, etcd and kwok versions.
pub fn versions(root: &Path) -> Result<HashMap<String, String>> {
    let text = std::fs::read_to_string(root.join("hack/versions.env")).context("read hack/versions.env")?;
    Ok(text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()))
        .collect())
}

/// Where the plane lives; the environment of `hack/k8s.sh`.
#[derive(Clone)]
pub struct Plane {
    pub root: PathBuf,
    pub state: PathBuf,
    pub port: u16,
    pub etcd_port: u16,
    pub kubectl: PathBuf,
    /// The admin kubeconfig, once the plane is up.
    pub kubeconfig: PathBuf,
}

impl Plane {
    /// From K8S_STATE, K8S_PORT, ETCD_PORT (bench defaults: `<cache>/bench-plane`, 17443, 25790).
    pub fn from_env(root: &Path, k8s_version: &str) -> Result<Self> {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
        let cache = std::env::var("STORAGEOS_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|_| Path::new(&home).join(".cache/storageos-operator"));
        let port = |name: &str, default: u16| -> Result<u16> {
            match std::env::var(name) {
                Ok(v) => v.parse().with_context(|| format!("{name}={v}")),
                Err(_) => Ok(default),
            }
        };
        Ok(Plane {
            root: root.to_path_buf(),
            state: std::env::var("K8S_STATE")
                .map(PathBuf::from)
                .unwrap_or_else(|_| cache.join("bench-plane")),
            port: port("K8S_PORT", 17443)?,
            etcd_port: port("ETCD_PORT", 25790)?,
            kubectl: cache.join(format!("bin/k8s-{k8s_version}/kubectl")),
            kubeconfig: PathBuf::new(),
        })
    }

    pub fn audit_log(&self) -> PathBuf {
        self.state.join("logs/audit.log")
    }

    fn k8s_sh(&self) -> Command {
        let mut c = Command::new(self.root.join("hack/k8s.sh"));
        c.current_dir(&self.root)
            .env("K8S_STATE", &self.state)
            .env("K8S_PORT", self.port.to_string())
            .env("ETCD_PORT", self.etcd_port.to_string())
            .kill_on_drop(true);
        c
    }

    /// A fresh plane with `nodes` kwok nodes and this audit policy; it is stopped when the guard
    /// drops.
    pub async fn up(&mut self, nodes: usize, audit_policy: &Path) -> Result<PlaneGuard> {
        self.down().await;
        let guard = PlaneGuard(self.clone());
        let status = self
            .k8s_sh()
            .arg("up")
            .env("NODES", nodes.to_string())
            .env("K8S_AUDIT_POLICY", audit_policy)
            .stdout(Stdio::null())
            .status()
            .await
            .context("hack/k8s.sh up")?;
        if !status.success() {
            bail!("hack/k8s.sh up failed ({status})");
        }
        let env = self.k8s_sh().arg("env").output().await.context("hack/k8s.sh env")?;
        let env = String::from_utf8_lossy(&env.stdout);
        let path = env
            .lines()
            .find_map(|l| l.strip_prefix("export KUBECONFIG="))
            .context("no KUBECONFIG in hack/k8s.sh env")?;
        self.kubeconfig = PathBuf::from(path.trim());
        Ok(guard)
    }

    pub async fn down(&self) {
        let _ = self
            .k8s_sh()
            .arg("down")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
    }

    /// A client acting as the plane's admin.
    pub async fn client(&self) -> Result<Client> {
        client_from(&self.kubeconfig).await
    }

    /// A `kubectl` command as the plane's admin.
    pub fn kubectl(&self) -> Command {
        let mut c = Command::new(&self.kubectl);
        c.env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        c
    }

    /// Runs kubectl; its stdout, or an error with its stderr.
    pub async fn kc(&self, args: &[&str]) -> Result<String> {
        let out = self.kubectl().args(args).output().await.context("run kubectl")?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl apply -f -` of `manifest`.
    pub async fn apply(&self, manifest: &str) -> Result<()> {
        let mut child = self
            .kubectl()
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("run kubectl apply")?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(manifest.as_bytes()).await?;
        }
        let out = child.wait_with_output().await?;
        if !out.status.success() {
            bail!("kubectl apply: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(())
    }

    /// A kubeconfig acting as a ServiceAccount (a 24 h TokenRequest token), so a local process
    /// works under exactly the RBAC a real install grants.
    pub async fn kubeconfig_for(&self, namespace: &str, account: &str, out: &Path) -> Result<()> {
        let token = self
            .kc(&["-n", namespace, "create", "token", account, "--duration", "24h"])
            .await?;
        let server = self
            .kc(&[
                "config",
                "view",
                "--minify",
                "-o",
                "jsonpath={.clusters[0].cluster.server}",
            ])
            .await?;
        let ca = self
            .kc(&[
                "config",
                "view",
                "--raw",
                "--minify",
                "-o",
                "jsonpath={.clusters[0].cluster.certificate-authority-data}",
            ])
            .await?;
        let (token, server, ca) = (token.trim(), server.trim(), ca.trim());
        let text = format!(
            "apiVersion: v1\nkind: Config\n\
             clusters: [{{name: local, cluster: {{server: \"{server}\", certificate-authority-data: \"{ca}\"}}}}]\n\
             users: [{{name: \"{account}\", user: {{token: \"{token}\"}}}}]\n\
             contexts: [{{name: \"{account}\", context: {{cluster: local, user: \"{account}\", namespace: \"{namespace}\"}}}}]\n\
             current-context: \"{account}\"\n"
        );
        std::fs::write(out, text).with_context(|| format!("write {}", out.display()))
    }
}

/// Stops the plane when dropped (end of a size, an error, Ctrl-C).
pub struct PlaneGuard(Plane);

impl Drop for PlaneGuard {
    fn drop(&mut self) {
        let p = &self.0;
        let _ = std::process::Command::new(p.root.join("hack/k8s.sh"))
            .arg("down")
            .current_dir(&p.root)
            .env("K8S_STATE", &p.state)
            .env("K8S_PORT", p.port.to_string())
            .env("ETCD_PORT", p.etcd_port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

pub async fn client_from(kubeconfig: &Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig).with_context(|| format!("read {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Polls `check` every 250 ms until it is true, at most `secs`.
pub async fn wait_until<F, Fut>(what: &str, secs: u64, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if check().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("{what}: not within {secs}s")
}

/// This machine's primary non-loopback IPv4 address (the webhook listens there: Endpoints may
/// not point at loopback). Connecting a UDP socket sends nothing.
pub fn host_ip() -> Result<String> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
    s.connect("10.255.255.255:9")?;
    let ip = s.local_addr()?.ip();
    if ip.is_loopback() || ip.is_unspecified() {
        bail!("no non-loopback IPv4 address for the webhook listener");
    }
    Ok(ip.to_string())
}
