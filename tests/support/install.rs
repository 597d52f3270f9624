//! What the install tests share (`k8s_install`: deploy/operator.yaml; `k8s_olm`: the OLM
//! bundle): kubectl against the plane, the operator binary started with exactly the args and env
//! of an installed Deployment's container, the example cluster cleaned up on drop, and its
//! readiness.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::sim;

use super::{client, kubeconfig_path};

/// Runs kubectl (of the plane's version) as admin.
pub fn kubectl(args: &[&str]) -> std::process::Output {
    Command::new(super::kubectl())
        .arg("--kubeconfig")
        .arg(kubeconfig_path())
        .args(args)
        .output()
        .expect("run kubectl")
}

/// Runs kubectl and returns its stdout; panics with its output when it fails.
pub fn kubectl_ok(args: &[&str]) -> String {
    let out = kubectl(args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A path in the repository, as a string for kubectl.
pub fn repo(path: &str) -> String {
    super::repo_root().join(path).display().to_string()
}

/// The operator process; SIGKILLed when dropped, its log printed if the test failed.
pub struct Operator {
    child: Child,
    log: PathBuf,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub metrics_port: u16,
}

impl Operator {
    /// Starts the binary with the args and env of the Deployment's first container as the
    /// apiserver holds it (downward-API values resolved as the kubelet would for a pod in
    /// `namespace`), acting as whoever `kubeconfig` names. Added for this machine only: the
    /// kubeconfig (a pod gets its token mounted), the simulator's address (Services do not route
    /// here) and a free metrics port.
    pub fn start(
        deployment: &Deployment,
        namespace: &str,
        kubeconfig: &Path,
        sim: &sim::SimHandle,
        log: PathBuf,
    ) -> Self {
        let container = deployment
            .spec
            .clone()
            .unwrap()
            .template
            .spec
            .unwrap()
            .containers
            .remove(0);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_storageos-operator"));
        cmd.args(container.args.clone().unwrap_or_default());
        for e in container.env.clone().unwrap_or_default() {
            let value = match (e.value, e.value_from) {
                (Some(v), _) => v,
                (None, Some(from)) => match from.field_ref.map(|f| f.field_path).as_deref() {
                    Some("metadata.namespace") => namespace.to_string(),
                    Some("metadata.name") => "storageos-operator-install-test".to_string(),
                    other => panic!("env {} from {other:?}: not resolvable here", e.name),
                },
                (None, None) => String::new(),
            };
            cmd.env(&e.name, value);
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let out = std::fs::File::create(&log).unwrap();
        let child = cmd
            .env("KUBECONFIG", kubeconfig)
            .env("STORAGEOS_ENDPOINT", sim.url())
            .env("METRICS_ADDR", format!("127.0.0.1:{port}"))
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .expect("start the operator");
        Self {
            child,
            log,
            metrics_port: port,
        }
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("--- operator log (last lines) ---");
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// Deletes the example cluster `default/storageos` when the test ends, also on failure
/// (finalizer dropped if the operator is gone), so that later tests find no active cluster.
pub struct ExampleCluster;

impl Drop for ExampleCluster {
    fn drop(&mut self) {
        let _ = std::thread::spawn(|| {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                let api: Api<StorageOSCluster> = Api::namespaced(client().await, "default");
                let _ = api
                    .patch(
                        "storageos",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
                let _ = api.delete("storageos", &DeleteParams::background()).await;
            });
        })
        .join();
    }
}

/// (phase, ready members, "Status Reason: message" of the Ready condition).
pub fn ready(c: &StorageOSCluster) -> Option<(String, String, String)> {
    let s = c.status.clone()?;
    let cond = s.conditions?.into_iter().find(|c| c.type_ == "Ready")?;
    Some((
        s.phase.unwrap_or_default(),
        s.ready.unwrap_or_default(),
        format!("{} {}: {}", cond.status, cond.reason, cond.message),
    ))
}
