//! What the install tests share (`k8s/install`: deploy/operator.yaml; `k8s/olm`: the OLM
//! bundle): kubectl against the plane, the operator binary started with exactly the args and env
//! of an installed Deployment's container, the example cluster cleaned up on drop, and its
//! readiness.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::sim;

use super::{client, kubeconfig_path, wait_for};

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

/// Deletes the install's ValidatingWebhookConfiguration when dropped. On this plane its Service
/// leads to kwok pods whose addresses answer nothing, so every later StorageOSCluster create
/// would wait out the webhook's timeout before `failurePolicy: Ignore` lets it through.
pub struct RemoveWebhookOnDrop;

impl Drop for RemoveWebhookOnDrop {
    fn drop(&mut self) {
        let _ = kubectl(&[
            "delete",
            "validatingwebhookconfiguration",
            storageos_operator::install::WEBHOOK_CONFIG,
            "--ignore-not-found",
        ]);
    }
}

/// Adds `name=value` to the environment of `deployment`'s first container (as a Subscription's
/// `spec.config.env` or `kubectl set env` would), for [`Operator::start`].
pub fn set_env(deployment: &mut Deployment, name: &str, value: &str) {
    let spec = deployment.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
    spec.containers[0]
        .env
        .get_or_insert_with(Vec::new)
        .push(serde_json::from_value(json!({"name": name, "value": value})).unwrap());
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
            // The webhook is reached through the apiserver only where it can route to it
            // (tests/k8s/one_cluster.rs); here it just must not take a shared port.
            .env("WEBHOOK_ADDR", "127.0.0.1:0")
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

    /// The resident memory of the process, in KiB (`VmRSS` of /proc/PID/status).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// Whether `/readyz` answers 200.
    pub async fn ready(&self) -> bool {
        reqwest::get(format!("http://127.0.0.1:{}/readyz", self.metrics_port))
            .await
            .is_ok_and(|r| r.status().is_success())
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

/// Deletes the example cluster `<namespace>/storageos` when the test ends, also on failure
/// (finalizer dropped if the operator is gone), so that later tests find no active cluster.
pub struct ExampleCluster {
    /// Where it was created: the operator's namespace, the only one it trusts by default
    /// (`deploy/examples` use `storageos-operator`).
    pub namespace: &'static str,
}

impl Drop for ExampleCluster {
    fn drop(&mut self) {
        let namespace = self.namespace;
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                let api: Api<StorageOSCluster> = Api::namespaced(client().await, namespace);
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

/// A user bound to `edit` in a namespace `tenant-…` (with `grant`, also to a Role giving every
/// verb on the three storageos.com kinds there; without, OLM's aggregation into `edit` gives
/// them) tries to create a StorageOSCluster (operands in that namespace) and a Job there: the
/// caller gate refuses both. Stored by an administrator instead, no ClusterRoleBinding names a
/// subject in the namespace, no DaemonSet is made there, and the ServiceAccount the node role
/// would be bound to cannot list Secrets. Returns the namespace, for
/// [`tenant_objects_were_never_touched`] once the operator has been seen acting later.
pub async fn tenant_cannot_escalate(admin: &kube::Client, grant: bool) -> String {
    const SETTLE: std::time::Duration = std::time::Duration::from_secs(120);
    let tenant = format!("tenant-{}", super::suffix());
    kubectl_ok(&["create", "namespace", &tenant]);
    kubectl_ok(&[
        "create",
        "rolebinding",
        "alice-edit",
        "-n",
        &tenant,
        "--clusterrole=edit",
        "--user=alice",
    ]);
    if grant {
        let kinds = "--resource=storageosclusters.storageos.com,storageosupgrades.storageos.com,jobs.storageos.com";
        kubectl_ok(&["create", "role", "storageos-kinds", "-n", &tenant, "--verb=*", kinds]);
        let role = [
            "create",
            "rolebinding",
            "alice-storageos",
            "-n",
            &tenant,
            "--role=storageos-kinds",
        ];
        kubectl_ok(&[&role[..], &["--user=alice"]].concat());
    }
    wait_for("alice to be allowed to create StorageOSClusters", SETTLE, || async {
        let out = kubectl(&[
            "auth",
            "can-i",
            "create",
            "storageosclusters.storageos.com",
            "-n",
            &tenant,
            "--as=alice",
        ]);
        String::from_utf8_lossy(&out.stdout).trim().eq("yes").then_some(())
    })
    .await;
    let cluster = json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
        "metadata": {"name": "mine", "namespace": tenant},
        "spec": {"secretRefName": "storageos-api", "secretRefNamespace": tenant, "namespace": tenant,
                 "kvBackend": {"address": super::KV_ADDRESS}}
    });
    let job = json!({
        "apiVersion": "storageos.com/v1", "kind": "Job",
        "metadata": {"name": "mine", "namespace": tenant},
        "spec": {"image": "busybox", "args": ["true"], "mountPath": "/data",
                 "hostPath": "/var/lib/storageos", "completionWord": "done"}
    });
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "storageos-api", "namespace": tenant},
        "stringData": {"username": "storageos", "password": "storageos"}});
    let dir = tempfile::tempdir().unwrap();
    for (name, obj) in [("secret", &secret), ("cluster", &cluster), ("job", &job)] {
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, obj.to_string()).unwrap();
        let path = path.display().to_string();
        if name == "secret" {
            kubectl_ok(&["create", "--as=alice", "-f", &path]);
            continue;
        }
        // The caller gate refuses her at admission: she lacks create on storageos.com/trust.
        let out = kubectl(&["create", "--as=alice", "-f", &path]);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && said.contains(storageos_operator::rbac::trust::REFUSED),
            "alice's {name} was not refused by the caller gate: {said}"
        );
        // Stored all the same (by an administrator, or before the gate was there): outside the
        // watched namespaces the operator does not even read it
        // ([`tenant_objects_were_never_touched`]).
        kubectl_ok(&["create", "-f", &path]);
    }
    let naming_tenant = super::cluster_role_bindings_naming(admin, &tenant).await;
    assert!(naming_tenant.is_empty(), "{naming_tenant:?}");
    let can = kubectl(&[
        "auth",
        "can-i",
        "list",
        "secrets",
        "-A",
        &format!("--as=system:serviceaccount:{tenant}:storageos-daemonset-sa"),
    ]);
    assert_eq!(String::from_utf8_lossy(&can.stdout).trim(), "no");
    let daemonsets = Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(admin.clone(), &tenant)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(daemonsets.items.is_empty(), "{:?}", super::names(&daemonsets.items));
    tenant
}

/// After the caller has seen the operator act on something later (so it had every chance to
/// read the tenant's objects): the StorageOSCluster and Job stored in `tenant` were never even
/// read by the operator, which watches only its namespaces: no status, finalizer or mark, no
/// DaemonSet. Then the tenant's namespace goes (nothing holds its objects), waited for, so no
/// operator a later test starts sees it terminating.
pub async fn tenant_objects_were_never_touched(admin: &kube::Client, tenant: &str) {
    use kube::ResourceExt;
    use storageos_operator::crd::Job;

    let cluster = Api::<StorageOSCluster>::namespaced(admin.clone(), tenant)
        .get("mine")
        .await
        .unwrap();
    let job = Api::<Job>::namespaced(admin.clone(), tenant).get("mine").await.unwrap();
    for (kind, meta, has_status) in [
        ("StorageOSCluster", &cluster.metadata, cluster.status.is_some()),
        ("Job", &job.metadata, job.status.is_some()),
    ] {
        assert!(
            !has_status && meta.finalizers.is_none() && meta.labels.is_none(),
            "the operator touched the tenant's {kind}: {meta:?}"
        );
    }
    let daemonsets = Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(admin.clone(), tenant)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(daemonsets.items.is_empty(), "{:?}", super::names(&daemonsets.items));
    assert_eq!(job.name_any(), "mine");
    kubectl_ok(&["delete", "namespace", tenant, "--wait=true", "--timeout=120s"]);
}

/// UIDs of the node pods in kube-system (not being deleted), sorted.
pub async fn node_pods(admin: &kube::Client) -> Vec<String> {
    let mut uids: Vec<String> = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(admin.clone(), "kube-system")
        .list(&kube::api::ListParams::default().labels("app=storageos,kind=daemonset"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.uid)
        .collect();
    uids.sort();
    uids
}
