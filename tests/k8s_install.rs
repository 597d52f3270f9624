//! Integration tier: the install a user makes. `kubectl apply --server-side -f
//! deploy/operator.yaml` (twice), then the operator binary started with exactly the args and env
//! of the Deployment's container, acting as its ServiceAccount, takes the example cluster from
//! `deploy/examples/` to `3/3 Running`. A permission taken away from its ClusterRole shows on the
//! cluster as Ready=False naming it, and giving it back recovers without a restart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::install;
use storageos_operator::sim::{self, Simulator};
use support::wait_for;

const SETTLE: Duration = Duration::from_secs(90);

fn kubectl(args: &[&str]) -> std::process::Output {
    Command::new(support::kubectl())
        .arg("--kubeconfig")
        .arg(support::kubeconfig_path())
        .args(args)
        .output()
        .expect("run kubectl")
}

fn kubectl_ok(args: &[&str]) -> String {
    let out = kubectl(args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn repo(path: &str) -> String {
    support::repo_root().join(path).display().to_string()
}

/// The operator process; SIGKILLed when dropped, its log printed if the test failed.
struct Operator {
    child: Child,
    log: PathBuf,
}

impl Operator {
    /// Starts the binary with the args and env of the Deployment's container as the apiserver
    /// holds it (downward-API values resolved as the kubelet would), acting as its
    /// ServiceAccount. Added for this machine only: the kubeconfig (a pod gets its token
    /// mounted), the simulator's address (Services do not route here) and a free metrics port.
    fn start(deployment: &Deployment, kubeconfig: &Path, sim: &sim::SimHandle, log: PathBuf) -> Self {
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
                    Some("metadata.namespace") => install::NAMESPACE.to_string(),
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
        Self { child, log }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("--- operator log (last lines) ---");
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// Deletes the example cluster when the test ends, also on failure (finalizer dropped if the
/// operator is gone), so that later tests find no active cluster.
struct ExampleCluster;

impl Drop for ExampleCluster {
    fn drop(&mut self) {
        let _ = std::thread::spawn(|| {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                let api: Api<StorageOSCluster> = Api::namespaced(support::client().await, "default");
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

fn ready(c: &StorageOSCluster) -> Option<(String, String, String)> {
    let s = c.status.clone()?;
    let cond = s.conditions?.into_iter().find(|c| c.type_ == "Ready")?;
    Some((
        s.phase.unwrap_or_default(),
        s.ready.unwrap_or_default(),
        format!("{} {}: {}", cond.status, cond.reason, cond.message),
    ))
}

#[tokio::test]
async fn installed_from_deploy_operator_yaml_the_operator_runs_the_example_cluster_under_its_own_rbac() {
    let _lock = support::cluster_lock();
    support::logs();
    let admin = support::client().await;

    // A user's install: server-side apply, and again (idempotent).
    for round in ["first", "second"] {
        let out = kubectl(&["apply", "--server-side", "-f", &repo("deploy/operator.yaml")]);
        assert!(
            out.status.success(),
            "{round} `kubectl apply --server-side -f deploy/operator.yaml` failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let deployment = Api::<Deployment>::namespaced(admin.clone(), install::NAMESPACE)
        .get(install::NAME)
        .await
        .unwrap();

    // The operator as its ServiceAccount, with exactly the Deployment's args and env.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = support::identity::kubeconfig_file(dir.path(), support::identity::OPERATOR).await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let _sync = sim.sync_with_kubernetes(admin.clone());
    let _operator = Operator::start(&deployment, &kubeconfig, &sim, dir.path().join("operator.log"));

    // Then the Secret and the StorageOSCluster, as the README says.
    let _cluster = ExampleCluster;
    kubectl_ok(&["apply", "-f", &repo("deploy/examples/storageos-secret.yaml")]);
    kubectl_ok(&["apply", "-f", &repo("deploy/examples/storageoscluster.yaml")]);
    let clusters: Api<StorageOSCluster> = Api::namespaced(admin.clone(), "default");
    wait_for("the example cluster to be 3/3 Running and Ready", SETTLE, || async {
        let (phase, members, cond) = ready(&clusters.get("storageos").await.ok()?)?;
        (phase == "Running" && members == "3/3" && cond.starts_with("True")).then_some(())
    })
    .await;

    // Every child is server-side applied with the field manager `storageos-operator` (README).
    let ds = Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(admin.clone(), "kube-system")
        .get("storageos-daemonset")
        .await
        .unwrap();
    assert!(
        ds.metadata
            .managed_fields
            .unwrap_or_default()
            .iter()
            .any(|f| f.manager.as_deref() == Some("storageos-operator") && f.operation.as_deref() == Some("Apply")),
        "the node DaemonSet is not applied by field manager storageos-operator"
    );

    // Take the StorageClass permissions away, then delete the StorageClass: the operator cannot
    // put it back and says exactly why on the cluster.
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let full = install::build("x").unwrap().cluster_role.rules.unwrap();
    let lacking: Vec<_> = full
        .iter()
        .cloned()
        .filter_map(|mut r| {
            let resources: Vec<String> = r
                .resources
                .take()
                .unwrap_or_default()
                .into_iter()
                .filter(|res| res != "storageclasses")
                .collect();
            (!resources.is_empty()).then(|| {
                r.resources = Some(resources);
                r
            })
        })
        .collect();
    let set_rules = |rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule>| {
        let roles = roles.clone();
        async move {
            roles
                .patch(
                    install::NAME,
                    &PatchParams::apply("storageos-operator-tests").force(),
                    &Patch::Apply(json!({
                        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                        "metadata": {"name": install::NAME}, "rules": rules
                    })),
                )
                .await
                .unwrap();
        }
    };
    set_rules(lacking).await;
    let classes: Api<StorageClass> = Api::all(admin.clone());
    classes.delete("fast", &DeleteParams::default()).await.unwrap();
    let message = wait_for(
        "Ready=False naming the missing storageclasses permission",
        SETTLE,
        || async {
            let (_, _, cond) = ready(&clusters.get("storageos").await.ok()?)?;
            (cond.starts_with("False") && cond.contains("storageclasses") && cond.contains("forbidden")).then_some(cond)
        },
    )
    .await;
    assert!(
        message.contains("system:serviceaccount:storageos-operator:storageos-operator"),
        "the message names who was refused: {message}"
    );
    assert!(
        ["get", "patch", "create"]
            .iter()
            .any(|v| message.contains(&format!("cannot {v} resource \"storageclasses\""))),
        "the message names the verb: {message}"
    );

    // Give it back: the same process recovers (no restart) and the StorageClass returns.
    set_rules(full).await;
    wait_for(
        "the cluster to recover and the StorageClass to return",
        SETTLE,
        || async {
            let (phase, _, cond) = ready(&clusters.get("storageos").await.ok()?)?;
            let back = classes.get_opt("fast").await.ok()??;
            (phase == "Running" && cond.starts_with("True")).then_some(back)
        },
    )
    .await;

    // Uninstall in the README's order: the cluster first (the operator removes its objects).
    clusters.delete("storageos", &DeleteParams::default()).await.unwrap();
    wait_for("the operator to finish deleting the cluster", SETTLE, || async {
        clusters.get_opt("storageos").await.ok()?.is_none().then_some(())
    })
    .await;
}

/// The identities the tests hand to the code under test are not admin: each can do what its
/// role grants and nothing else (so the suite really runs under the shipped RBAC).
#[tokio::test]
async fn test_identities_hold_exactly_their_roles() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::core::v1::{Node, Secret};
    use kube::api::ListParams;

    let operator = support::operator_client().await;
    let api_manager = support::api_manager_client().await;
    let lp = ListParams::default().limit(1);
    // Both read Nodes.
    Api::<Node>::all(operator.clone()).list(&lp).await.unwrap();
    Api::<Node>::all(api_manager.clone()).list(&lp).await.unwrap();
    // The operator manages DaemonSets and Secrets; the api-manager may not list either.
    Api::<DaemonSet>::all(operator.clone()).list(&lp).await.unwrap();
    Api::<Secret>::all(operator.clone()).list(&lp).await.unwrap();
    for (what, err) in [
        (
            "list daemonsets",
            Api::<DaemonSet>::all(api_manager.clone()).list(&lp).await.err(),
        ),
        (
            "list secrets",
            Api::<Secret>::all(api_manager.clone()).list(&lp).await.err(),
        ),
    ] {
        match err {
            Some(kube::Error::Api(s)) if s.code == 403 => {}
            other => panic!("the api-manager may {what}: {other:?}"),
        }
    }
    // Neither may read the cluster's leases outside what its role names.
    match Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(operator, "kube-system")
        .get_opt("kube-controller-manager")
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("the operator may read other Leases: {other:?}"),
    }
}
