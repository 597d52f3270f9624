//! Integration tier: `kubectl storageos` as a user runs it, against the local plane. The plugin
//! binary acts as a ServiceAccount bound to `cluster-admin` (an admin, as its user would be),
//! so the plane's audit log shows exactly what it wrote. The operator runs as a local process
//! with the installed Deployment's args and env, as its own ServiceAccount (its pods on the kwok
//! nodes are fakes), against the StorageOS simulator.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::install;
use storageos_operator::sim::{self, Simulator};
use support::identity::{self, Identity};
use support::install::Operator;
use support::wait_for;

/// The plugin's own identity: cluster-admin, like the person who runs it.
const PLUGIN_USER: Identity = Identity {
    namespace: "storageos-plugin-tests",
    name: "plugin-admin",
};

/// A kubeconfig acting as [`PLUGIN_USER`] (created with its cluster-admin binding).
async fn plugin_kubeconfig(dir: &Path) -> PathBuf {
    let admin = support::client().await;
    identity::apply_as_admin(
        &admin,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PLUGIN_USER.namespace}}),
    )
    .await;
    identity::apply_as_admin(
        &admin,
        &json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": PLUGIN_USER.name, "namespace": PLUGIN_USER.namespace}}),
    )
    .await;
    identity::apply_as_admin(
        &admin,
        &identity::binding("storageos-plugin-tests:admin", "cluster-admin", PLUGIN_USER),
    )
    .await;
    identity::kubeconfig_file(dir, PLUGIN_USER).await
}

/// Runs `kubectl-storageos ARGS` with `kubeconfig`.
fn plugin(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-storageos"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("run kubectl-storageos")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs the plugin and panics with its output unless it succeeds; returns stdout.
fn plugin_ok(kubeconfig: &Path, args: &[&str]) -> String {
    let out = plugin(kubeconfig, args);
    assert!(
        out.status.success(),
        "kubectl storageos {args:?} failed:\n{}{}",
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

/// The plane's etcd client URL, read from the etcd process `hack/k8s.sh` started.
fn plane_etcd() -> String {
    let state = support::kubeconfig_path().parent().unwrap();
    let pid = std::fs::read_to_string(state.join("etcd.pid")).expect("the plane's etcd.pid");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim())).expect("etcd's command line");
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let i = args
        .iter()
        .position(|a| a == "--listen-client-urls")
        .expect("etcd --listen-client-urls");
    args[i + 1].clone()
}

/// The CRDs, no StorageOSCluster, and a kubeconfig acting as [`PLUGIN_USER`] in `dir`; with the
/// admin's client. Take [`support::cluster_lock`] first.
async fn no_cluster_and_a_plugin_user(dir: &Path) -> (kube::Client, PathBuf) {
    let admin = support::client().await;
    support::install_crds(&admin).await;
    support::wait_no_clusters(&admin, Duration::from_secs(120)).await;
    let kubeconfig = plugin_kubeconfig(dir).await;
    (admin, kubeconfig)
}

/// Deletes namespace `name` if another test left it (`kubectl apply -f deploy/operator.yaml`
/// makes `storageos-operator`), and waits until it is gone: `install` then creates it, marked
/// as the plugin's, and `uninstall` may delete it.
async fn no_namespace(name: &str) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(support::client().await);
    let _ = namespaces.delete(name, &DeleteParams::default()).await;
    wait_for(
        &format!("namespace {name} to be gone"),
        Duration::from_secs(120),
        || async { namespaces.get_opt(name).await.ok()?.is_none().then_some(()) },
    )
    .await;
}

/// Writes the plugin (as [`PLUGIN_USER`]) made from `since` on that were not dry runs.
fn real_writes_since(since: chrono::DateTime<chrono::Utc>) -> Vec<String> {
    identity::audit_events(PLUGIN_USER, since)
        .into_iter()
        .filter(|e| e["verb"] != "get" && e["verb"] != "list" && e["verb"] != "watch")
        .filter(|e| !e["requestURI"].as_str().unwrap_or_default().contains("dryRun"))
        .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
        .collect()
}

/// `kubectl storageos plan` previews a cluster with server-side dry runs only: every object of
/// the example cluster is listed, and the audit log has no real write by the plugin's identity.
#[tokio::test]
async fn plan_previews_the_example_cluster_and_writes_nothing() {
    // Alone on the plane: the other commands write as the same identity.
    let _lock = support::cluster_lock();
    // The plan reads the live StorageOSCluster: its CRD must exist, whichever scenario ran first.
    support::install_crds(&support::client().await).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = plugin_kubeconfig(dir.path()).await;
    let example = support::repo_root().join("deploy/examples/storageoscluster.yaml");
    let since = chrono::Utc::now();
    let example = example.to_string_lossy();
    let plan = ["plan", "-f", &example, "--operator-image", "registry.invalid/op:test"];
    let out = plugin_ok(&kubeconfig, &plan);
    assert!(out.contains("DaemonSet kube-system/storageos-daemonset"), "{out}");
    assert!(
        out.contains(" to create, ") && out.contains(" untouched; restarts: "),
        "{out}"
    );
    let json = plugin_ok(&kubeconfig, &[&plan[..], &["--json"]].concat());
    let entries: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    assert!(entries.iter().any(|e| e["object"] == "StorageClass fast"), "{json}");
    assert_eq!(real_writes_since(since), Vec::<String>::new(), "plan wrote");
}

/// kubectl finds the plugin on the PATH, runs it as `kubectl storageos`, and it completes.
#[tokio::test]
async fn kubectl_finds_the_plugin_on_the_path() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_kubectl-storageos"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // kubectl takes no flags before a plugin's name: the plugin reads them after its own.
    let kubectl = |args: &[&str]| {
        Command::new(support::kubectl())
            .args(args)
            .arg("--kubeconfig")
            .arg(support::kubeconfig_path())
            .env("PATH", &path)
            .output()
            .unwrap()
    };
    let list = Command::new(support::kubectl())
        .args(["plugin", "list"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(
        stdout(&list).contains("kubectl-storageos"),
        "{}{}",
        stdout(&list),
        stderr(&list)
    );
    let version = kubectl(&["storageos", "version"]);
    assert!(version.status.success(), "{}", stderr(&version));
    assert!(stdout(&version).contains("kubernetes: v1."), "{}", stdout(&version));
    let help = kubectl(&["storageos", "uninstall", "--help"]);
    assert!(stdout(&help).contains("--recovery-dir") && stdout(&help).contains("--dry-run"));
    let completion = Command::new(&bin).args(["completion", "bash"]).output().unwrap();
    assert!(completion.status.success() && stdout(&completion).contains("preflight"));
}

#[tokio::test]
async fn preflight_passes_on_the_plane_and_fails_with_a_fix_on_arm64_or_an_unreachable_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = plugin_kubeconfig(dir.path()).await;
    let etcd = plane_etcd();

    // A fresh plane passes; -o json parses and holds every check. (The plane's own nodes,
    // whatever cluster another test installs meanwhile.)
    let kwok = ["--node-selector", "type=kwok"];
    let out = plugin(
        &kubeconfig,
        &[&["preflight", "--etcd-endpoints", &etcd, "-o", "json"][..], &kwok].concat(),
    );
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("preflight -o json is not JSON ({e}):\n{}{}", stdout(&out), stderr(&out)));
    let checks = report["checks"].as_array().unwrap();
    let failed: Vec<&Value> = checks.iter().filter(|c| c["result"] == "FAIL").collect();
    assert!(failed.is_empty(), "FAIL on a fresh plane: {failed:#?}");
    assert!(out.status.success(), "{}", stderr(&out));
    for name in [
        "kubernetes-version",
        "node/kwok-node-0/kernel",
        "node/kwok-node-0/arch",
        "host-ports",
    ] {
        let c = checks
            .iter()
            .find(|c| c["check"] == name)
            .unwrap_or_else(|| panic!("no {name}"));
        assert_eq!(c["result"], "PASS", "{c}");
    }
    let etcd_check = checks
        .iter()
        .find(|c| c["check"] == format!("etcd/{etcd}"))
        .expect("the etcd check");
    assert_eq!(etcd_check["result"], "PASS", "{etcd_check}");
    // The table says the same, and which checks it could not do.
    let table = plugin_ok(
        &kubeconfig,
        &[&["preflight", "--etcd-endpoints", &etcd][..], &kwok].concat(),
    );
    assert!(table.contains("CHECK") && table.contains("0 failed"), "{table}");
    assert!(table.contains("Not checked"), "{table}");

    // An etcd nobody listens on: FAIL with the fix, non-zero exit.
    let out = plugin(&kubeconfig, &["preflight", "--etcd-endpoints", "http://127.0.0.1:1"]);
    assert!(!out.status.success(), "preflight passed with an unreachable etcd");
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.starts_with("etcd/"))
        .unwrap_or_else(|| panic!("no etcd line:\n{text}"));
    assert!(line.contains("FAIL") && line.contains("make etcd reachable"), "{line}");
    assert!(stderr(&out).contains("1 check(s) failed"), "{}", stderr(&out));

    // An arm64 node (kwok makes it Ready; tainted so no pod lands there), for a cluster that
    // tolerates the taint (a node StorageOS does not use is not checked).
    let name = format!("plugin-arm64-{}", support::suffix());
    let nodes: Api<Node> = Api::all(support::client().await);
    let node: Node = support::from_json(json!({
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {"kubernetes.io/arch": "arm64", "storageos-operator-test": "true"}},
        "spec": {"taints": [support::no_kubelet_taint()]},
        "status": {"nodeInfo": {"architecture": "arm64", "operatingSystem": "linux",
            "kernelVersion": "6.1.0-28-arm64", "containerRuntimeVersion": "containerd://1.7.24",
            "osImage": "Debian GNU/Linux 12 (bookworm)", "bootID": "", "kubeProxyVersion": "",
            "kubeletVersion": "", "machineID": "", "systemUUID": ""},
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}
    }));
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let _cleanup = DeleteOnDrop(name.clone());
    let file = dir.path().join("cluster.yaml");
    std::fs::write(
        &file,
        serde_yaml::to_string(&json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": "storageos", "namespace": "storageos"},
            "spec": {"secretRefName": "storageos-api", "secretRefNamespace": "storageos",
                     "nodeSelectorTerms": [{"matchFields": [
                         {"key": "metadata.name", "operator": "In", "values": [name]}]}],
                     "tolerations": [{"operator": "Exists"}]}
        }))
        .unwrap(),
    )
    .unwrap();
    let out = wait_for("preflight to see the arm64 node Ready", Duration::from_secs(60), || {
        let kubeconfig = kubeconfig.clone();
        let etcd = etcd.clone();
        let name = name.clone();
        let file = file.to_string_lossy().into_owned();
        async move {
            let out = plugin(&kubeconfig, &["preflight", "--etcd-endpoints", &etcd, "-f", &file]);
            stdout(&out).contains(&format!("node/{name}/arch")).then_some(out)
        }
    })
    .await;
    assert!(!out.status.success(), "preflight passed with an arm64 node");
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("node/{name}/arch")))
        .unwrap();
    assert!(line.contains("FAIL") && line.contains("amd64 images only"), "{line}");
    assert!(line.contains("nodeSelectorTerms"), "the fix is in the line: {line}");
}

/// Deletes the Node when dropped.
struct DeleteOnDrop(String);

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        let name = self.0.clone();
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                let _ = Api::<Node>::all(support::client().await)
                    .delete(&name, &DeleteParams::background())
                    .await;
            });
        })
        .join();
    }
}

/// Deletes the plugin-installed cluster (finalizer dropped) when the test ends, also on
/// failure, so later tests find no active cluster.
struct InstalledCluster;

impl Drop for InstalledCluster {
    fn drop(&mut self) {
        let _ = std::thread::spawn(|| {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                let api: Api<StorageOSCluster> = Api::namespaced(support::client().await, install::NAMESPACE);
                let _ = api
                    .patch(
                        "storageos",
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
                let _ = api.delete("storageos", &DeleteParams::background()).await;
            });
        })
        .join();
    }
}

#[tokio::test]
async fn install_status_bundle_upgrade_and_uninstall_as_a_user_runs_them() {
    let _lock = support::cluster_lock();
    support::logs();
    let admin = support::client().await;
    support::install_crds(&admin).await;
    support::wait_no_clusters(&admin, Duration::from_secs(120)).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = plugin_kubeconfig(dir.path()).await;
    let etcd = plane_etcd();
    let password = format!("pw-{}-{}", support::suffix(), support::suffix());
    let _cleanup = InstalledCluster;
    no_namespace(install::NAMESPACE).await;

    // A dry run first: it says what it would create and writes nothing.
    let since = chrono::Utc::now();
    let out = plugin_ok(
        &kubeconfig,
        &[
            "install",
            "--etcd-endpoints",
            &etcd,
            "--admin-password",
            &password,
            "--dry-run",
        ],
    );
    assert!(
        out.contains("storageoscluster.storageos.com/storageos created (dry run)"),
        "{out}"
    );
    assert!(out.contains("deployment.apps/storageos-operator"), "{out}");
    identity::audit_flushed(PLUGIN_USER).await;
    assert_eq!(real_writes_since(since), Vec::<String>::new(), "a dry run wrote");

    // The install, waiting for Running. The operator's pods are kwok fakes: run it here as
    // the installed Deployment says, as its ServiceAccount, once the plugin has created it.
    let install = Command::new(env!("CARGO_BIN_EXE_kubectl-storageos"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["install", "--etcd-endpoints", &etcd, "--admin-password", &password])
        .args(["--wait", "--timeout", "3m"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), install::NAMESPACE);
    let deployment = wait_for(
        "the plugin to create the operator Deployment",
        Duration::from_secs(60),
        || async { deployments.get_opt(install::NAME).await.ok().flatten() },
    )
    .await;
    let sim = Simulator::start(sim::Config {
        password: password.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let _sync = sim.sync_with_kubernetes(admin.clone());
    let operator_kubeconfig = identity::kubeconfig_file(dir.path(), identity::OPERATOR).await;
    let _operator = Operator::start(
        &deployment,
        install::NAMESPACE,
        &operator_kubeconfig,
        &sim,
        dir.path().join("operator.log"),
    );
    let out = tokio::task::spawn_blocking(move || install.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "install --wait failed:\n{}{}",
        stdout(&out),
        stderr(&out)
    );
    let progress = stderr(&out);
    assert!(
        progress.contains("waiting for StorageOSCluster storageos-operator/storageos"),
        "{progress}"
    );
    assert!(progress.contains("is Running"), "{progress}");
    assert!(!progress.contains(&password) && !stdout(&out).contains(&password));

    // Again: nothing to change, and nothing written but dry runs and reads.
    let since = chrono::Utc::now();
    let out = plugin_ok(&kubeconfig, &["install", "--etcd-endpoints", &etcd]);
    assert!(out.contains("Nothing to change"), "{out}");
    identity::audit_flushed(PLUGIN_USER).await;
    let writes: Vec<String> = real_writes_since(since)
        .into_iter()
        .filter(|w| !w.starts_with("\"patch\""))
        .collect();
    assert_eq!(writes, Vec::<String>::new(), "a second install created or deleted");

    // A dry run of another image says what it would change, and changes nothing.
    let since = chrono::Utc::now();
    let out = plugin_ok(
        &kubeconfig,
        &[
            "install",
            "--etcd-endpoints",
            &etcd,
            "--image",
            "example.com/other:v9",
            "--dry-run",
        ],
    );
    assert!(
        out.contains("deployment.apps/storageos-operator configured (dry run)"),
        "{out}"
    );
    identity::audit_flushed(PLUGIN_USER).await;
    assert_eq!(real_writes_since(since), Vec::<String>::new(), "a dry run wrote");
    let live = deployments.get(install::NAME).await.unwrap();
    assert_ne!(
        live.spec.unwrap().template.spec.unwrap().containers[0].image.as_deref(),
        Some("example.com/other:v9")
    );

    // upgrade --operator applies the operator's objects of this release: nothing to change here,
    // and another image changes only the Deployment (a dry run).
    let out = plugin_ok(&kubeconfig, &["upgrade", "--operator", "--dry-run"]);
    assert!(out.lines().all(|l| l.ends_with("unchanged (dry run)")), "{out}");
    let out = plugin_ok(
        &kubeconfig,
        &[
            "upgrade",
            "--operator",
            "--operator-image",
            "example.com/op:v2",
            "--dry-run",
        ],
    );
    let changed: Vec<&str> = out.lines().filter(|l| !l.ends_with("unchanged (dry run)")).collect();
    assert_eq!(
        changed,
        ["deployment.apps/storageos-operator configured (dry run)"],
        "{out}"
    );

    // status and version: one screen each.
    // What StorageOS reports (the api-manager's mirrors; it does not run here, so they are
    // written as it would) and a fencing: status shows them.
    let volumes_ns = support::TestNamespace::new("plugin-vol").await;
    let volumes = volumes_ns.api::<storageos_operator::crd::StorageOSVolume>();
    volumes
        .create(
            &PostParams::default(),
            &storageos_operator::crd::StorageOSVolume::new("pvc-degraded", Default::default()),
        )
        .await
        .unwrap();
    let status = storageos_operator::crd::VolumeMirrorStatus {
        health: "degraded".into(),
        pvc: "data".into(),
        master: storageos_operator::crd::VolumeMaster {
            node: "kwok-node-1".into(),
            health: "online".into(),
        },
        replicas_wanted: 2,
        replicas_ready: "1/2".into(),
        ..Default::default()
    };
    volumes
        .patch_status(
            "pvc-degraded",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    volumes_ns
        .api::<k8s_openapi::api::core::v1::Event>()
        .create(
            &PostParams::default(),
            &support::from_json(json!({
                "metadata": {"name": "app.fenced"},
                "involvedObject": {"kind": "Pod", "namespace": volumes_ns.name, "name": "app"},
                "reason": "Fenced", "type": "Warning", "message": "fenced from the offline node kwok-node-2",
                "firstTimestamp": now, "lastTimestamp": now, "count": 1
            })),
        )
        .await
        .unwrap();
    let out = plugin_ok(&kubeconfig, &["status"]);
    // PVC (namespace/claim), then the volume's own name.
    let volume_line = out
        .lines()
        .find(|l| l.contains("pvc-degraded") && l.contains(&format!("{}/", volumes_ns.name)))
        .unwrap_or_else(|| panic!("no degraded volume in:\n{out}"));
    assert!(
        volume_line.contains("degraded") && volume_line.contains("kwok-node-1 (online)") && volume_line.contains("1/2"),
        "{volume_line}"
    );
    assert!(
        out.contains(&format!(
            "{}/app: fenced from the offline node kwok-node-2",
            volumes_ns.name
        )),
        "{out}"
    );
    assert!(
        out.contains("StorageOSCluster storageos-operator/storageos: phase Running, 3/3 ready"),
        "{out}"
    );
    assert!(out.contains("leader: storageos-operator-install-test"), "{out}");
    assert!(out.contains("node pods (namespace kube-system)"), "{out}");
    let out = plugin_ok(&kubeconfig, &["version"]);
    assert!(out.contains("operator: storageos/storageos-operator:v"), "{out}");
    assert!(
        out.contains("storageos: storageos/node:v2.4.2 (StorageOSCluster storageos-operator/storageos)"),
        "{out}"
    );

    bundle_is_complete_and_redacted(&kubeconfig, dir.path(), &password).await;
    upgrade_checks_the_path_then_completes(&kubeconfig).await;
    uninstall_refuses_while_a_pod_uses_a_volume_then_removes_everything(&kubeconfig, dir.path(), &password).await;
}

/// A token planted in the cluster (an annotation) and in the operator's env, and the unique
/// password of the credentials Secret, appear in no file of the bundle.
async fn bundle_is_complete_and_redacted(kubeconfig: &Path, dir: &Path, password: &str) {
    let admin = support::client().await;
    let (token, env_token) = (
        format!("tok-{}-{}", support::suffix(), support::suffix()),
        format!("envtok-{}-{}", support::suffix(), support::suffix()),
    );
    Api::<StorageOSCluster>::namespaced(admin.clone(), install::NAMESPACE)
        .patch(
            "storageos",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {"example.com/api-token": token}}})),
        )
        .await
        .unwrap();
    Api::<Deployment>::namespaced(admin.clone(), install::NAMESPACE)
        .patch(
            install::NAME,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "operator", "env": [{"name": "SUPPORT_API_TOKEN", "value": env_token}]}
            ]}}}})),
        )
        .await
        .unwrap();
    let archive = dir.join("bundle.tar.gz");
    let out = plugin_ok(kubeconfig, &["bundle", "-o", archive.to_str().unwrap()]);
    assert!(out.contains("wrote"), "{out}");
    let archive_mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&archive).unwrap().permissions());
    assert_eq!(archive_mode & 0o777, 0o600);
    let mut files = std::collections::BTreeMap::new();
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(std::fs::File::open(&archive).unwrap()));
    for entry in tar.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().display().to_string();
        let mode = entry.header().mode().unwrap();
        let folder = entry.header().entry_type().is_dir();
        assert_eq!(mode, if folder { 0o700 } else { 0o600 }, "{path}");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
        let (_, inner) = path.split_once('/').unwrap();
        files.insert(inner.to_string(), text);
    }
    for expected in [
        "versions.txt",
        "summary.txt",
        "crs/storageosclusters.yaml",
        "crs/storageosupgrades.yaml",
        "crs/jobs.yaml",
        "clusters/storageos-operator_storageos/live.yaml",
        "clusters/storageos-operator_storageos/desired.yaml",
        "clusters/storageos-operator_storageos/diff.txt",
        "events/storageos-operator.txt",
        "events/kube-system.txt",
        "mirrors/nodes.yaml",
        "mirrors/volumes.yaml",
        "nodes.yaml",
        "operator/deployment.yaml",
    ] {
        assert!(
            files.contains_key(expected),
            "{expected} missing from {:?}",
            files.keys()
        );
    }
    assert!(
        files
            .keys()
            .any(|k| k.starts_with("logs/storageos-operator/storageos-operator-")),
        "no operator log in {:?}",
        files.keys()
    );
    // Init containers too (where storageos-init reports a kernel module it could not load).
    assert!(
        files
            .keys()
            .any(|k| k.starts_with("logs/kube-system/storageos-daemonset-") && k.ends_with("/storageos-init.log")),
        "no storageos-init log in {:?}",
        files.keys()
    );
    assert!(files["summary.txt"].contains("phase Running"));
    assert!(files["clusters/storageos-operator_storageos/live.yaml"].contains("storageos-daemonset"));
    // The planted values were collected (their keys are there) and redacted.
    assert!(files["crs/storageosclusters.yaml"].contains("example.com/api-token"));
    assert!(files["operator/deployment.yaml"].contains("SUPPORT_API_TOKEN"));
    let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, password);
    for (name, text) in &files {
        for secret in [password, b64.as_str(), token.as_str(), env_token.as_str()] {
            assert!(!text.contains(secret), "{name} holds {secret}");
        }
    }
}

/// A downgrade is refused before anything is created; an upgrade to the next minor completes.
async fn upgrade_checks_the_path_then_completes(kubeconfig: &Path) {
    let upgrades: Api<storageos_operator::crd::StorageOSUpgrade> =
        Api::namespaced(support::client().await, install::NAMESPACE);
    let out = plugin(kubeconfig, &["upgrade", "--version", "2.3.0"]);
    assert!(!out.status.success(), "a downgrade was accepted:\n{}", stdout(&out));
    assert!(
        stderr(&out).contains("refusing to downgrade StorageOS from storageos/node:v2.4.2"),
        "{}",
        stderr(&out)
    );
    let out = plugin(kubeconfig, &["upgrade", "--version", "2.6.0"]);
    assert!(
        !out.status.success() && stderr(&out).contains("--force"),
        "{}",
        stderr(&out)
    );
    assert!(
        upgrades.list(&Default::default()).await.unwrap().items.is_empty(),
        "a refused upgrade created something"
    );

    // An application on a StorageOS volume: the plan names it, the upgrade scales it down and back.
    let (ns, _volume) = namespace_with_a_storageos_claim("plugin-app").await;
    let apps = ns.api::<Deployment>();
    apps.create(
        &PostParams::default(),
        &support::from_json(json!({
            "metadata": {"name": "app"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "plugin-app"}},
                     "template": {"metadata": {"labels": {"app": "plugin-app"}},
                                  "spec": {"containers": [{"name": "app", "image": "busybox"}],
                                           "tolerations": [{"operator": "Exists"}],
                                           "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}}
        })),
    )
    .await
    .unwrap();

    // Off the test's runtime: the operator reads StorageOS (the simulator this runtime serves)
    // before the upgrade may start.
    let path = kubeconfig.to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        plugin(&path, &["upgrade", "--version", "2.5.0", "--wait", "--timeout", "3m"])
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "upgrade failed:\n{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("from storageos/node:v2.4.2 to storageos/node:v2.5.0"),
        "{}",
        stdout(&out)
    );
    let progress = stderr(&out);
    assert!(
        progress.contains("phase") && progress.contains("completed"),
        "{progress}"
    );
    assert!(
        stdout(&out).contains(&format!("scale to 0 (and back afterwards): Deployment {}/app", ns.name)),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        apps.get("app").await.unwrap().spec.unwrap().replicas,
        Some(1),
        "the app is back"
    );
    apps.delete("app", &DeleteParams::foreground()).await.unwrap();
    let pods = ns.api::<k8s_openapi::api::core::v1::Pod>();
    wait_for("the app's pods to be gone", Duration::from_secs(60), || async {
        pods.list(&Default::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    let cluster = Api::<StorageOSCluster>::namespaced(support::client().await, install::NAMESPACE)
        .get("storageos")
        .await
        .unwrap();
    assert_eq!(
        cluster.spec.images.and_then(|i| i.node_container).as_deref(),
        Some("storageos/node:v2.5.0")
    );
}

/// A test namespace with the claim `data` bound to a StorageOS CSI volume (the PV goes with the
/// returned guard).
async fn namespace_with_a_storageos_claim(prefix: &str) -> (support::TestNamespace, support::ClusterObjects) {
    let admin = support::client().await;
    let ns = support::TestNamespace::new(prefix).await;
    let objects = support::ClusterObjects::default();
    let pv = format!("{prefix}-pv-{}", support::suffix());
    objects.pv(&admin, &pv, "fast", &ns.name, "data", true).await;
    ns.api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>()
        .create(
            &PostParams::default(),
            &support::from_json(json!({
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast", "volumeName": pv,
                         "resources": {"requests": {"storage": "1Gi"}}}
            })),
        )
        .await
        .unwrap();
    (ns, objects)
}

/// With a pod using a StorageOS volume, uninstall refuses and names it; without, it writes
/// the recovery manifests, then removes the cluster and the operator.
async fn uninstall_refuses_while_a_pod_uses_a_volume_then_removes_everything(
    kubeconfig: &Path,
    dir: &Path,
    password: &str,
) {
    let admin = support::client().await;
    let (ns, _volume) = namespace_with_a_storageos_claim("plugin").await;
    let pods = ns.api::<k8s_openapi::api::core::v1::Pod>();
    pods.create(
        &PostParams::default(),
        &support::from_json(json!({
            "metadata": {"name": "app"},
            "spec": {"nodeName": "kwok-node-0", "containers": [{"name": "app", "image": "busybox"}],
                     "tolerations": [{"operator": "Exists"}],
                     "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
        })),
    )
    .await
    .unwrap();
    let recovery = dir.join("recovery");
    let args = ["uninstall", "--keep-crds", "--recovery-dir", recovery.to_str().unwrap()];
    let out = plugin(kubeconfig, &args);
    assert!(!out.status.success(), "uninstall went ahead with a pod using a volume");
    assert!(stderr(&out).contains(&format!("{}/app", ns.name)), "{}", stderr(&out));
    assert!(!recovery.exists(), "a refused uninstall wrote recovery manifests");

    pods.delete(
        "app",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    wait_for("the app pod to be gone", Duration::from_secs(60), || async {
        pods.get_opt("app").await.ok()?.is_none().then_some(())
    })
    .await;
    // A tenant's Job in a namespace the operator does not watch, held by a finalizer of its own:
    // never the operator's, so uninstall names it, leaves it, and is not held by it.
    let jobs = ns.api::<storageos_operator::crd::Job>();
    jobs.create(
        &PostParams::default(),
        &support::from_json(json!({
            "apiVersion": "storageos.com/v1", "kind": "Job",
            "metadata": {"name": "tenant", "finalizers": ["tenant.example.com/hold"]},
            "spec": {"image": "busybox", "args": ["true"], "mountPath": "/data",
                     "hostPath": "/var/lib/storageos", "completionWord": "done"}
        })),
    )
    .await
    .unwrap();
    let out = plugin(kubeconfig, &args);
    assert!(
        out.status.success(),
        "uninstall failed:\n{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("skipping Jobs outside the namespaces the operator watches")
            && stderr(&out).contains(&format!("{}/tenant", ns.name)),
        "{}",
        stderr(&out)
    );
    let left = jobs.get_opt("tenant").await.unwrap();
    assert!(
        left.is_some_and(|j| j.metadata.deletion_timestamp.is_none()),
        "the tenant's Job was touched"
    );
    jobs.patch(
        "tenant",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    jobs.delete("tenant", &DeleteParams::default()).await.unwrap();
    let text = stdout(&out);
    assert!(
        text.contains(&format!("wrote recovery manifests to {}", recovery.display())),
        "{text}"
    );
    assert!(
        text.contains("storageoscluster.storageos.com/storageos deleted"),
        "{text}"
    );
    assert!(text.contains("deployment.apps/storageos-operator deleted"), "{text}");
    // The cluster went first (the operator removed its children), then the operator.
    let cluster_at = text.find("storageoscluster.storageos.com/storageos deleted").unwrap();
    assert!(
        cluster_at < text.find("deployment.apps/storageos-operator deleted").unwrap(),
        "{text}"
    );
    assert!(
        Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(admin.clone(), "kube-system")
            .get_opt("storageos-daemonset")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
            .get_opt(install::NAMESPACE)
            .await
            .unwrap()
            .is_none()
    );
    // The recovery manifests: the cluster as it can be applied again, the Secret by reference.
    let clusters = std::fs::read_to_string(recovery.join("storageosclusters.yaml")).unwrap();
    assert!(
        clusters.contains("name: storageos") && !clusters.contains("resourceVersion"),
        "{clusters}"
    );
    let refs = std::fs::read_to_string(recovery.join("secret-refs.yaml")).unwrap();
    assert!(refs.contains("storageos-api") && refs.contains("password"), "{refs}");
    for entry in std::fs::read_dir(&recovery).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(password), "{} holds the password", path.display());
    }
    assert!(recovery.join("children-storageos-operator_storageos.yaml").exists());
}

/// `--include-etcd`: install adds an evaluation etcd, labelled; uninstall removes only an etcd
/// it installed.
#[tokio::test]
async fn include_etcd_installs_an_evaluation_etcd_and_uninstall_removes_only_that() {
    use k8s_openapi::api::apps::v1::StatefulSet;
    let _lock = support::cluster_lock();
    let dir = tempfile::tempdir().unwrap();
    let (admin, kubeconfig) = no_cluster_and_a_plugin_user(dir.path()).await;
    no_namespace(install::NAMESPACE).await;
    no_namespace("storageos-etcd").await;

    let out = plugin(&kubeconfig, &["install", "--include-etcd", "--skip-cluster"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("statefulset.apps/storageos-etcd created"),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("NOT for production"), "{}", stderr(&out));
    let ours: Api<StatefulSet> = Api::namespaced(admin.clone(), "storageos-etcd");
    assert!(ours.get_opt("storageos-etcd").await.unwrap().is_some());

    // A StatefulSet of the same name the plugin did not install is kept.
    let other = support::TestNamespace::new("etcd").await;
    other
        .api::<StatefulSet>()
        .create(
            &PostParams::default(),
            &support::from_json(json!({
                "metadata": {"name": "storageos-etcd"},
                "spec": {"serviceName": "x", "selector": {"matchLabels": {"a": "b"}},
                         "template": {"metadata": {"labels": {"a": "b"}},
                                      "spec": {"containers": [{"name": "c", "image": "etcd"}]}}}
            })),
        )
        .await
        .unwrap();
    let recovery = dir.path().join("recovery");
    let out = plugin_ok(
        &kubeconfig,
        &[
            "uninstall",
            "--include-etcd",
            "--etcd-namespace",
            &other.name,
            "--keep-crds",
            "--recovery-dir",
            recovery.to_str().unwrap(),
        ],
    );
    assert!(out.contains("kept StatefulSet"), "{out}");
    assert!(
        other
            .api::<StatefulSet>()
            .get_opt("storageos-etcd")
            .await
            .unwrap()
            .is_some()
    );
    assert!(ours.get_opt("storageos-etcd").await.unwrap().is_some());

    let out = plugin_ok(
        &kubeconfig,
        &[
            "uninstall",
            "--include-etcd",
            "--keep-crds",
            "--recovery-dir",
            recovery.to_str().unwrap(),
        ],
    );
    assert!(out.contains("statefulset.apps/storageos-etcd deleted"), "{out}");
    assert!(out.contains("namespace/storageos-etcd deleted"), "{out}");
}

/// An etcd serving https only: preflight passes with its TLS Secret, and fails without it.
#[tokio::test]
async fn preflight_checks_an_https_etcd_with_the_tls_secret() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = plugin_kubeconfig(dir.path()).await;
    let cert = storageos_operator::runtime::process::pki::issue_serving_cert(
        "etcd",
        &["127.0.0.1".to_string()],
        chrono::Duration::hours(1),
    )
    .unwrap();
    for (file, pem) in [
        ("ca.crt", &cert.ca_pem),
        ("tls.crt", &cert.cert_pem),
        ("tls.key", &cert.key_pem),
    ] {
        std::fs::write(dir.path().join(file), pem).unwrap();
    }
    let port = |_| {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (client_port, peer_port) = (port(0), port(1));
    let url = format!("https://127.0.0.1:{client_port}");
    let d = dir.path().display();
    let _etcd = KillOnDrop(
        Command::new(support::etcd_binary())
            .args(["--data-dir", &format!("{d}/data"), "--name", "tls"])
            .args(["--listen-client-urls", &url, "--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer_port}")])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer_port}"),
            ])
            .args(["--initial-cluster", &format!("tls=http://127.0.0.1:{peer_port}")])
            .args([
                "--cert-file",
                &format!("{d}/tls.crt"),
                "--key-file",
                &format!("{d}/tls.key"),
            ])
            .args(["--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let ns = support::TestNamespace::new("etcd-tls").await;
    ns.api::<k8s_openapi::api::core::v1::Secret>()
        .create(
            &PostParams::default(),
            &support::from_json(json!({
                "metadata": {"name": "etcd-tls"},
                "stringData": {"etcd-client-ca.crt": cert.ca_pem, "etcd-client.crt": cert.cert_pem,
                               "etcd-client.key": cert.key_pem}
            })),
        )
        .await
        .unwrap();
    let with_tls = [
        "preflight",
        "--etcd-endpoints",
        &url,
        "--etcd-tls-secret",
        "etcd-tls",
        "--etcd-tls-secret-namespace",
        &ns.name,
        "--node-selector",
        "type=kwok",
        "-o",
        "json",
    ];
    let etcd_check = format!("etcd/{url}");
    let report: Value = wait_for("the https etcd to answer", Duration::from_secs(30), || {
        let (kubeconfig, etcd_check) = (kubeconfig.clone(), etcd_check.clone());
        let with_tls: Vec<String> = with_tls.iter().map(|a| a.to_string()).collect();
        async move {
            let args: Vec<&str> = with_tls.iter().map(String::as_str).collect();
            let out = plugin(&kubeconfig, &args);
            let report: Value = serde_json::from_slice(&out.stdout).ok()?;
            let passed = report["checks"]
                .as_array()?
                .iter()
                .any(|c| c["check"] == etcd_check.as_str() && c["result"] == "PASS");
            passed.then_some(report)
        }
    })
    .await;
    assert!(
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["result"] != "FAIL"),
        "{report:#}"
    );

    // Without the Secret, the https etcd's certificate is not trusted.
    let out = plugin(&kubeconfig, &["preflight", "--etcd-endpoints", &url]);
    assert!(!out.status.success());
    let text = stdout(&out);
    let line = text.lines().find(|l| l.starts_with("etcd/")).unwrap();
    assert!(line.contains("FAIL") && line.contains("--etcd-tls-secret"), "{line}");
}

/// A child process killed when dropped (also on failure).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The plugin takes only namespaces it made: `install -n` an existing namespace leaves its
/// labels (Pod Security included) as they were, `uninstall` leaves it and what is in it, and
/// the same for `--etcd-namespace`; `kube-system` is refused as the operator's namespace.
#[tokio::test]
async fn install_and_uninstall_leave_a_namespace_they_did_not_create() {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    let _lock = support::cluster_lock();
    let dir = tempfile::tempdir().unwrap();
    let (admin, kubeconfig) = no_cluster_and_a_plugin_user(dir.path()).await;
    let namespaces: Api<Namespace> = Api::all(admin.clone());

    // Two namespaces made as `kubectl create ns` makes them, each labelled and with a ConfigMap.
    let (operator_ns, etcd_ns) = (
        support::TestNamespace::new("theirs").await,
        support::TestNamespace::new("theirs-etcd").await,
    );
    for ns in [&operator_ns, &etcd_ns] {
        namespaces
            .patch(
                &ns.name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"metadata": {"labels": {
                    "team": "platform", "pod-security.kubernetes.io/enforce": "privileged"}}})),
            )
            .await
            .unwrap();
        ns.api::<ConfigMap>()
            .create(
                &PostParams::default(),
                &support::from_json(json!({"metadata": {"name": "keep-me"}, "data": {"a": "b"}})),
            )
            .await
            .unwrap();
    }
    let labels_of = |name: String| {
        let namespaces = namespaces.clone();
        async move { namespaces.get(&name).await.unwrap().metadata.labels.unwrap_or_default() }
    };
    let before = labels_of(operator_ns.name.clone()).await;

    let out = plugin(&kubeconfig, &["install", "-n", "kube-system", "--skip-cluster"]);
    assert!(!out.status.success(), "install -n kube-system went ahead");
    assert!(
        stderr(&out).contains("refusing to install the operator into namespace kube-system"),
        "{}",
        stderr(&out)
    );

    let out = plugin(
        &kubeconfig,
        &[
            "install",
            "-n",
            &operator_ns.name,
            "--skip-cluster",
            "--include-etcd",
            "--etcd-namespace",
            &etcd_ns.name,
        ],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains(&format!("namespace/{} unchanged", operator_ns.name)),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("used as it is"), "{}", stderr(&out));
    assert_eq!(
        labels_of(operator_ns.name.clone()).await,
        before,
        "install relabelled the namespace"
    );
    let etcd_labels = labels_of(etcd_ns.name.clone()).await;
    assert_eq!(etcd_labels["pod-security.kubernetes.io/enforce"], "privileged");
    assert!(!etcd_labels.contains_key("storageos.com/created-by"), "{etcd_labels:?}");
    assert!(
        Api::<Deployment>::namespaced(admin.clone(), &operator_ns.name)
            .get_opt(install::NAME)
            .await
            .unwrap()
            .is_some()
    );

    let recovery = dir.path().join("recovery");
    let out = plugin_ok(
        &kubeconfig,
        &[
            "uninstall",
            "-n",
            &operator_ns.name,
            "--include-etcd",
            "--etcd-namespace",
            &etcd_ns.name,
            "--keep-crds",
            "--recovery-dir",
            recovery.to_str().unwrap(),
        ],
    );
    for ns in [&operator_ns, &etcd_ns] {
        assert!(
            out.contains(&format!(
                "namespace/{} kept: kubectl storageos did not create it",
                ns.name
            )),
            "{out}"
        );
        let live = namespaces.get(&ns.name).await.unwrap();
        assert!(
            live.metadata.deletion_timestamp.is_none(),
            "{} is being deleted",
            ns.name
        );
        assert!(ns.api::<ConfigMap>().get_opt("keep-me").await.unwrap().is_some());
    }
    assert!(out.contains("deployment.apps/storageos-operator deleted"), "{out}");
    assert!(out.contains("statefulset.apps/storageos-etcd deleted"), "{out}");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&recovery), 0o700);
        for entry in std::fs::read_dir(&recovery).unwrap() {
            let path = entry.unwrap().path();
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    }
}
