//! Integration tier, for real: the operator and the api-manager as real pods from the project's
//! own image on a real kubelet node of the local plane (`hack/k8s.sh up` with `REAL_NODES=1`),
//! installed as a user installs them (`kubectl apply --server-side -f deploy/operator.yaml`).
//! The StorageOS node pods stay on kwok nodes; the StorageOS API is the simulator, a pod on the
//! real node behind the rendered `storageos` Service (hack/real-node/simulator.yaml).
//!
//! One scenario, step by step, because each step needs the previous one: install, both operator
//! replicas Ready with one Lease holder, JSON logs, the container's identity and privileges read
//! from the kernel, the example cluster Running through the in-cluster operator, the rendered
//! api-manager Ready and its webhooks answering the apiserver, then the leader deleted, Jobs'
//! host paths, and a drain of the real node held by a guard pod the kubelet runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::job::CONTROLLER as JOB_CONTROLLER;
use support::real_node::{self, apply_yaml, container_pid, kubectl, manifest};
use support::{TestNamespace, from_json, wait_for};

const OPERATOR_NS: &str = "storageos-operator";
const OPERATOR_LEASE: &str = "storageos-operator-lease";
const NODE: &str = "real-node-0";

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Ready pods of `selector` in `ns`.
async fn ready_pods(client: &Client, ns: &str, selector: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|p| ready(p) && p.metadata.deletion_timestamp.is_none())
                .collect()
        })
        .unwrap_or_default()
}

async fn lease_holder(client: &Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), OPERATOR_NS)
        .get_opt(OPERATOR_LEASE)
        .await
        .ok()??
        .spec?
        .holder_identity
}

async fn cluster_phase(client: &Client) -> Option<(String, String)> {
    let c = Api::<StorageOSCluster>::namespaced(client.clone(), OPERATOR_NS)
        .get_opt("storageos")
        .await
        .ok()??;
    let s = c.status?;
    Some((s.phase.unwrap_or_default(), s.ready.unwrap_or_default()))
}

/// The StorageOS node pods (on the kwok nodes) by name, with their UIDs.
async fn storageos_node_pods(client: &Client) -> BTreeMap<String, String> {
    Api::<Pod>::namespaced(client.clone(), "kube-system")
        .list(&ListParams::default().labels("app=storageos,kind=daemonset"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| (p.name_any(), p.uid().unwrap()))
        .collect()
}

/// `/proc/PID/status` fields of the container `id` (from the pod's status).
fn proc_status(container_id: &str) -> BTreeMap<String, String> {
    let pid = container_pid(container_id);
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// Whether the container's root filesystem is mounted read-only (its mount table, as the
/// process sees it).
fn root_read_only(container_id: &str) -> bool {
    let pid = container_pid(container_id);
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    mounts
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .and_then(|l| l.split_whitespace().nth(5))
        .is_some_and(|opts| opts.split(',').any(|o| o == "ro"))
}

fn container_id(p: &Pod) -> String {
    let id = p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0]
        .container_id
        .clone()
        .expect("a running container has an id");
    id.strip_prefix("containerd://").unwrap_or(&id).to_string()
}

/// On failure: where every pod is, the cluster's status and the node's own logs.
struct Diagnostics;

impl Drop for Diagnostics {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for args in [
            &["get", "pods", "-A", "-o", "wide"][..],
            // DiskPressure or MemoryPressure here is the host's, not the operator's.
            &[
                "get",
                "node",
                NODE,
                "-o",
                "jsonpath={range .status.conditions[*]}{.type}={.status} {.message}{\"\\n\"}{end}",
            ][..],
            &["get", "events", "-A", "--sort-by=.lastTimestamp"][..],
            &["get", "stos", "-A", "-o", "yaml"][..],
            &["-n", OPERATOR_NS, "logs", "deploy/storageos-operator", "--tail", "40"][..],
        ] {
            let out = kubectl(args);
            eprintln!(
                "--- kubectl {} ---\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for log in ["kubelet", "containerd"] {
            eprintln!("--- {log} (last lines) ---\n{}", real_node::plane_log(log, 30));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_and_api_manager_run_as_real_pods() {
    if let Some(why) = real_node::host_cannot_run_a_real_node() {
        // The one case in which this test does not run: a documented host requirement is
        // missing (docs/real-node.md); the reasons are printed, never swallowed.
        eprintln!("NOT RUN: this host cannot run a real node (docs/real-node.md):\n{why}");
        assert!(
            std::env::var_os("STORAGEOS_REQUIRE_REAL_NODE").is_none(),
            "STORAGEOS_REQUIRE_REAL_NODE is set but this host cannot run a real node:\n{why}"
        );
        return;
    }
    real_node::plane();
    let _diagnostics = Diagnostics;
    let client = support::client().await;

    install_wait_stops_on_an_operator_image_that_cannot_be_pulled(&client).await;

    // ---- install as a user does (taking over what the failed plugin install left)
    let out = kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        support::repo_root().join("deploy/operator.yaml").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    apply_yaml(&manifest("hack/real-node/simulator.yaml"));

    // ---- both operator replicas Running and Ready (their probes answered) on the real node
    let operators = wait_for("both operator pods Ready", Duration::from_secs(180), || async {
        let pods = ready_pods(&client, OPERATOR_NS, "app.kubernetes.io/name=storageos-operator").await;
        (pods.len() == 2).then_some(pods)
    })
    .await;
    for p in &operators {
        assert_eq!(
            p.spec.as_ref().unwrap().node_name.as_deref(),
            Some(NODE),
            "{} runs on the real node",
            p.name_any()
        );
    }
    let names: Vec<String> = operators.iter().map(|p| p.name_any()).collect();
    let holder = wait_for(
        "one operator replica to hold the Lease",
        Duration::from_secs(60),
        || async { lease_holder(&client).await.filter(|h| names.contains(h)) },
    )
    .await;

    // ---- JSON logs through the kubelet
    let logs = kubectl(&["-n", OPERATOR_NS, "logs", &holder, "--tail", "20"]);
    let text = String::from_utf8_lossy(&logs.stdout);
    assert!(
        logs.status.success() && !text.trim().is_empty(),
        "kubectl logs: {}",
        String::from_utf8_lossy(&logs.stderr)
    );
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {line}"));
    }

    // ---- the container as the kernel sees it: user 65532, no capability, no privilege gain,
    // seccomp filtering, read-only root filesystem
    for p in &operators {
        let id = container_id(p);
        let st = proc_status(&id);
        assert!(st["Uid"].split_whitespace().all(|u| u == "65532"), "Uid: {}", st["Uid"]);
        assert!(st["Gid"].split_whitespace().all(|g| g == "65532"), "Gid: {}", st["Gid"]);
        for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(
                u64::from_str_radix(&st[cap], 16).unwrap(),
                0,
                "{cap} of {}",
                p.name_any()
            );
        }
        assert_eq!(st["NoNewPrivs"], "1");
        assert_eq!(st["Seccomp"], "2", "seccomp filter mode (RuntimeDefault)");
        assert!(root_read_only(&id), "{}'s root filesystem is read-only", p.name_any());
    }

    // ---- the example cluster, reconciled by the in-cluster operator
    apply_yaml(&std::fs::read_to_string(support::repo_root().join("hack/real-node/storageos-secret.yaml")).unwrap());
    apply_yaml(&std::fs::read_to_string(support::repo_root().join("hack/real-node/storageoscluster.yaml")).unwrap());
    wait_for("the cluster to be Running 3/3", Duration::from_secs(240), || async {
        (cluster_phase(&client).await? == ("Running".to_string(), "3/3".to_string())).then_some(())
    })
    .await;
    let node_pods = storageos_node_pods(&client).await;
    assert_eq!(
        node_pods.len(),
        3,
        "one StorageOS node pod per kwok node: {node_pods:?}"
    );

    // ---- the api-manager the operator rendered: Ready on the real node, from the same image
    let api_managers = wait_for("the api-manager pods Ready", Duration::from_secs(180), || async {
        let pods = ready_pods(
            &client,
            "kube-system",
            "app.kubernetes.io/component=storageos-api-manager",
        )
        .await;
        (pods.len() == 2).then_some(pods)
    })
    .await;
    for p in &api_managers {
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some(NODE));
        assert_eq!(
            spec.containers[0].image.as_deref(),
            Some(real_node::operator_image().as_str())
        );
    }

    // ---- its logs are JSON (as the Go api-manager's were), with no colour codes
    let logs = kubectl(&["-n", "kube-system", "logs", &api_managers[0].name_any(), "--tail", "20"]);
    let text = String::from_utf8_lossy(&logs.stdout);
    assert!(
        logs.status.success() && !text.trim().is_empty(),
        "kubectl logs: {}",
        String::from_utf8_lossy(&logs.stderr)
    );
    assert!(!text.contains('\u{1b}'), "no escape codes in the api-manager's logs");
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("an api-manager log line is not JSON ({e}): {line}"));
    }

    // ---- its webhooks, called by the apiserver through their Service
    let ns = TestNamespace::new("real-node").await;
    let class: StorageClass = Api::<StorageClass>::all(client.clone())
        .get("fast")
        .await
        .unwrap_or_else(|_| panic!("the rendered StorageClass `fast`"));
    let class_name = class.name_any();
    let pvcs = ns.api::<PersistentVolumeClaim>();
    let mut n = 0;
    let encrypted = wait_for("the PVC webhook to add encryption keys", Duration::from_secs(60), || {
        n += 1;
        let pvc: PersistentVolumeClaim = from_json(json!({
            "metadata": {"name": format!("data-{n}"), "labels": {"storageos.com/encryption": "true"}},
            "spec": {"storageClassName": class_name, "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        }));
        let pvcs = pvcs.clone();
        async move {
            let created = pvcs.create(&PostParams::default(), &pvc).await.ok()?;
            let a = created.metadata.annotations.clone().unwrap_or_default();
            a.contains_key("storageos.com/encryption-secret-name").then_some(created)
        }
    })
    .await;
    let a = encrypted.metadata.annotations.clone().unwrap();
    assert_eq!(a["storageos.com/encryption-secret-namespace"], ns.name);
    let key_secret = a["storageos.com/encryption-secret-name"].clone();
    ns.api::<k8s_openapi::api::core::v1::Secret>()
        .get(&key_secret)
        .await
        .expect("the volume key Secret exists");
    let pod: Pod = from_json(json!({
        "metadata": {"name": "uses-storageos"},
        "spec": {
            "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": encrypted.name_any()}}]
        }
    }));
    let created = ns.api::<Pod>().create(&PostParams::default(), &pod).await.unwrap();
    assert_eq!(
        created.spec.unwrap().scheduler_name.as_deref(),
        Some("storageos-scheduler"),
        "the pod webhook served by a real pod set the scheduler"
    );

    // ---- nobody but the apiserver is served: the webhooks require the apiserver's client
    // certificate (spec.apiManager.webhookClientCAConfigMap), so a caller on the pod network
    // without it (this host reaches the pod IPs as any pod does) is refused in the handshake
    for p in &api_managers {
        let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
        tokio::net::TcpStream::connect(format!("{ip}:9443"))
            .await
            .unwrap_or_else(|e| panic!("{}'s webhook port is not reachable: {e}", p.name_any()));
        let http = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .build()
            .unwrap();
        let answer = http
            .post(format!("https://{ip}:9443/mutate-pvcs"))
            .json(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}))
            .send()
            .await;
        assert!(
            answer.is_err(),
            "{} answered a caller without a certificate: {answer:?}",
            p.name_any()
        );
    }

    // ---- the leader goes: the other replica takes over, the Deployment replaces the pod, the
    // cluster stays Running and no StorageOS pod restarts
    Api::<Pod>::namespaced(client.clone(), OPERATOR_NS)
        .delete(&holder, &DeleteParams::default())
        .await
        .unwrap();
    // The deleted leader releases the Lease as it stops; the surviving replica, or the new one
    // the Deployment starts, whichever asks first, takes it.
    let new_holder = wait_for("another replica to take the Lease", Duration::from_secs(90), || async {
        lease_holder(&client).await.filter(|h| *h != holder)
    })
    .await;
    let who = if names.contains(&new_holder) {
        "the surviving replica"
    } else {
        "the replacement pod"
    };
    eprintln!("the Lease went from {holder} to {new_holder} ({who})");
    wait_for(
        "the Deployment back to 2 ready replicas",
        Duration::from_secs(120),
        || async {
            let d = Api::<Deployment>::namespaced(client.clone(), OPERATOR_NS)
                .get("storageos-operator")
                .await
                .ok()?;
            let pods = ready_pods(&client, OPERATOR_NS, "app.kubernetes.io/name=storageos-operator").await;
            (d.status?.ready_replicas == Some(2) && pods.iter().all(|p| p.name_any() != holder)).then_some(())
        },
    )
    .await;
    assert_eq!(
        cluster_phase(&client).await,
        Some(("Running".to_string(), "3/3".to_string())),
        "the cluster stays Running through the take-over"
    );
    let after = storageos_node_pods(&client).await;
    assert_eq!(after, node_pods, "no StorageOS node pod was restarted");

    preflight_checks_the_nodes_storageos_uses(&client).await;
    jobs_never_mount_a_symlink_out_of_the_allowed_directory(&client).await;
    a_drain_of_the_real_node_waits_on_a_running_guard(&client).await;
}

/// `kubectl storageos install --wait` with an operator image nobody can pull, on a plane with no
/// operator yet: the kubelet backs off for ever, and the plugin stops within 90 s naming the
/// image and the fix. What it installed stays for the user's next attempt; the StorageOSCluster
/// (no operator ever reconciled it, so it has no finalizer) and the Secret it generated are
/// removed here, for the files the rest of the test applies.
async fn install_wait_stops_on_an_operator_image_that_cannot_be_pulled(client: &Client) {
    let unpullable = "127.0.0.1:9/storageos/storageos-operator:unpullable";
    let cluster = support::repo_root().join("hack/real-node/storageoscluster.yaml");
    let started = std::time::Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-storageos"))
        .env("KUBECONFIG", real_node::plane().state().join("kubeconfig"))
        .args([
            "install",
            "-n",
            OPERATOR_NS,
            "--image",
            unpullable,
            "--wait",
            "--timeout",
            "5m",
        ])
        .args(["--skip-etcd-endpoints-validation", "-f"])
        .arg(&cluster)
        .output()
        .expect("run kubectl-storageos");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "install --wait succeeded with {unpullable}:\n{stderr}"
    );
    assert!(took < Duration::from_secs(90), "it took {took:?}:\n{stderr}");
    for part in [unpullable, "cannot be pulled", "hack/image.sh --push", "--image"] {
        assert!(stderr.contains(part), "{part:?} missing from:\n{stderr}");
    }
    eprintln!("install --wait stopped after {took:?} on the unpullable image");
    Api::<StorageOSCluster>::namespaced(client.clone(), OPERATOR_NS)
        .delete("storageos", &DeleteParams::default())
        .await
        .expect("delete the StorageOSCluster the plugin created");
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), OPERATOR_NS)
        .delete("storageos-api", &DeleteParams::default())
        .await
        .expect("delete the Secret the plugin generated");
}

/// `kubectl storageos preflight ARGS -o json` against the real-node plane: (exit ok, report).
fn preflight(args: &[&str]) -> (bool, serde_json::Value) {
    support::preflight(&real_node::plane().state().join("kubeconfig"), args)
}

/// The checks of a report whose name starts with `prefix`, as (name, result, message).
fn checks_named(report: &serde_json::Value, prefix: &str) -> Vec<(String, String, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["check"].as_str().unwrap().starts_with(prefix))
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("check"), s("result"), s("message"))
        })
        .collect()
}

/// Preflight on this plane, where the installed cluster selects the kwok nodes and the
/// simulator on the real node holds host port 5705: PASS (the real node is not StorageOS's);
/// a pod holding 5706 on a selected node: FAIL naming it; the per-node checks on the real node:
/// a privileged pod of the operator's image reports the node's modules, mount propagation,
/// free space and ports, and no pod is left.
async fn preflight_checks_the_nodes_storageos_uses(client: &Client) {
    // The plane's own etcd stands in for the cluster's (an in-cluster address the host cannot
    // reach), as the apiserver was started with it.
    let cmd = std::fs::read(real_node::plane().state().join("kube-apiserver.cmd")).unwrap();
    let args: Vec<String> = cmd
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let etcd = args[args.iter().position(|a| a == "--etcd-servers").unwrap() + 1].clone();

    let (ok, report) = preflight(&["--etcd-endpoints", &etcd]);
    println!("$ kubectl storageos preflight (the real node holds 5705, StorageOS does not use it)\n{report:#}");
    let failed: Vec<_> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["result"] == "FAIL")
        .collect();
    assert!(failed.is_empty() && ok, "FAIL on a healthy cluster: {failed:#?}");
    let ports = checks_named(&report, "host-ports");
    assert_eq!(ports[0].1, "PASS", "{ports:?}");
    let nodes = checks_named(&report, "nodes");
    assert!(nodes[0].2.contains("3 of 4") && !nodes[0].2.contains(NODE), "{nodes:?}");
    assert!(checks_named(&report, &format!("node/{NODE}")).is_empty(), "{report:#}");

    // A pod holding 5706 on a node StorageOS uses.
    let ns = TestNamespace::new("real-node-preflight").await;
    let holder: Pod = from_json(json!({
        "metadata": {"name": "holds-5706"},
        "spec": {"nodeName": "kwok-node-0", "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "c", "image": "registry.invalid/holder:1",
                                 "ports": [{"containerPort": 5706, "hostPort": 5706}]}]}
    }));
    ns.api::<Pod>().create(&PostParams::default(), &holder).await.unwrap();
    let (ok, report) = preflight(&["--etcd-endpoints", &etcd]);
    let ports = checks_named(&report, "host-ports");
    println!("$ kubectl storageos preflight (a pod holds 5706 on kwok-node-0)\n{ports:?}");
    assert!(!ok, "preflight passed with a held host port: {report:#}");
    assert_eq!(ports[0].1, "FAIL", "{ports:?}");
    assert!(
        ports[0]
            .2
            .contains(&format!("{}/holds-5706 on kwok-node-0 holds 5706", ns.name)),
        "{ports:?}"
    );
    ns.api::<Pod>()
        .delete("holds-5706", &DeleteParams::default())
        .await
        .unwrap();

    // The per-node checks, on the real node.
    let selector = "storageos-operator.dev/real-node=true";
    let image = real_node::operator_image();
    let (_, report) = preflight(&[
        "--etcd-endpoints",
        &etcd,
        "--node-selector",
        selector,
        "--node-checks",
        "--image",
        &image,
    ]);
    let found = checks_named(&report, &format!("node/{NODE}/"));
    println!("$ kubectl storageos preflight --node-selector {selector} --node-checks\n{found:#?}");
    for what in ["modules", "mount-propagation", "free-space", "ports"] {
        let (_, result, message) = found
            .iter()
            .find(|c| c.0 == format!("node/{NODE}/{what}"))
            .unwrap_or_else(|| panic!("no {what} finding for {NODE}: {report:#}"));
        assert!(
            ["PASS", "WARN", "FAIL"].contains(&result.as_str()),
            "{what}: {result} {message}"
        );
        assert!(!message.is_empty());
    }
    assert!(
        found.iter().all(|c| c.1 != "SKIP"),
        "the real node ran the checks: {found:#?}"
    );
    // The findings are the node's own: this host's kernel, and the simulator holding 5705.
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let modules = &found.iter().find(|c| c.0.ends_with("/modules")).unwrap().2;
    assert!(modules.contains(kernel.trim()), "{modules}");
    let free = &found.iter().find(|c| c.0.ends_with("/free-space")).unwrap().2;
    assert!(free.contains(" GiB free under /"), "{free}");
    let ports = &found.iter().find(|c| c.0.ends_with("/ports")).unwrap();
    assert!(ports.1 == "FAIL" && ports.2.contains("5705"), "{ports:?}");
    let left = Api::<Pod>::namespaced(client.clone(), "kube-system")
        .list(&ListParams::default().labels("app.kubernetes.io/name=storageos-preflight"))
        .await
        .unwrap();
    assert!(
        left.items.is_empty(),
        "node-check pods left behind: {:?}",
        left.items.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
}

/// Host paths planted under /var/lib/storageos on the real node (this host), removed at the end.
struct Planted(Vec<std::path::PathBuf>);

impl Drop for Planted {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir(p));
        }
    }
}

/// A Job in `namespace` running the operator's image (`--version` prints the completion word)
/// with `host_path`.
fn job(namespace: &str, name: &str, host_path: &str) -> serde_json::Value {
    json!({
        "apiVersion": "storageos.com/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"image": real_node::operator_image(), "args": ["--version"], "mountPath": "/data",
                 "hostPath": host_path, "completionWord": "storageos-operator"}
    })
}

/// Reconciles of `controller` summed over the operator's pods, read from their metrics on the
/// pod network (which this host reaches): proof that the operator ran.
/// `None` unless every running pod's metrics were read.
async fn operator_reconciles(client: &Client, controller: &str) -> Option<u64> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NS);
    let selector = ListParams::default().labels("app.kubernetes.io/name=storageos-operator");
    let mut sum = 0;
    for pod in pods.list(&selector).await.ok()?.items {
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        let Some(ip) = pod.status.and_then(|s| s.pod_ip).filter(|_| running) else {
            continue;
        };
        sum += support::evidence::reconciles_at_addr(&format!("{ip}:8080"), controller).await?;
    }
    Some(sum)
}

/// Ready's reason, once the Job has one matching `want`.
async fn job_reason(jobs: &Api<storageos_operator::crd::Job>, name: &str, want: &str) -> String {
    wait_for(
        &format!("Job {name} to be {want}"),
        Duration::from_secs(120),
        || async {
            let j = jobs.get(name).await.ok()?;
            let ready = j.status?.conditions?.into_iter().find(|c| c.type_ == "Ready")?;
            (ready.reason == want).then_some(ready.message)
        },
    )
    .await
}

/// On the real node, a symlink under /var/lib/storageos that points at `/`: with the default
/// allow-list a Job naming it is refused before any DaemonSet exists; with a subtree entry
/// (`/var/lib/storageos/*`, the opt-in) the kubelet refuses the subPath, the Job says why and its
/// DaemonSet is removed, while a plain directory under the entry is mounted and the Job completes.
async fn jobs_never_mount_a_symlink_out_of_the_allowed_directory(client: &Client) {
    use storageos_operator::crd::Job;
    use storageos_operator::job::daemonset::daemonset_name;
    use storageos_operator::reasons::{HOST_PATH_NOT_ALLOWED, HOST_PATH_UNSAFE};
    let sfx = support::suffix();
    let root = std::path::Path::new("/var/lib/storageos");
    std::fs::create_dir_all(root).unwrap();
    let (link, dir) = (root.join(format!("escape-{sfx}")), root.join(format!("plain-{sfx}")));
    // The link, the directory, then /var/lib/storageos itself if the test made it (and it is empty).
    let _planted = Planted(vec![link.clone(), dir.clone(), root.to_path_buf()]);
    std::os::unix::fs::symlink("/", &link).unwrap();
    std::fs::create_dir(&dir).unwrap();
    let (link, dir) = (link.display().to_string(), dir.display().to_string());
    let jobs: Api<Job> = Api::namespaced(client.clone(), OPERATOR_NS);
    let daemonsets: Api<k8s_openapi::api::apps::v1::DaemonSet> = Api::namespaced(client.clone(), OPERATOR_NS);

    // The default allow-list: exactly /var/lib/storageos. Refused before anything is made (so
    // even in the operator's own namespace, whose Pod Security level forbids host paths).
    apply_yaml(&job(OPERATOR_NS, "escape", &link).to_string());
    let message = job_reason(&jobs, "escape", HOST_PATH_NOT_ALLOWED.name()).await;
    assert!(message.contains(&link), "{message}");
    assert!(daemonsets.get_opt(&daemonset_name("escape")).await.unwrap().is_none());
    let _ = jobs.delete("escape", &DeleteParams::default()).await;

    // The subtree opt-in, for Jobs in a namespace of their own that the operator trusts and
    // whose Pod Security level allows host paths.
    let ns = TestNamespace::new("real-node-jobs").await;
    let set = kubectl(&[
        "-n",
        OPERATOR_NS,
        "set",
        "env",
        "deployment/storageos-operator",
        "JOB_HOST_PATHS=/var/lib/storageos/*",
        &format!("WATCH_NAMESPACES={OPERATOR_NS},{}", ns.name),
    ]);
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    let rolled = kubectl(&[
        "-n",
        OPERATOR_NS,
        "rollout",
        "status",
        "deployment/storageos-operator",
        "--timeout=180s",
    ]);
    assert!(rolled.status.success(), "{}", String::from_utf8_lossy(&rolled.stderr));
    let (jobs, daemonsets): (Api<Job>, Api<k8s_openapi::api::apps::v1::DaemonSet>) = (ns.api(), ns.api());
    apply_yaml(&job(&ns.name, "plain", &dir).to_string());
    job_reason(&jobs, "plain", "Completed").await;
    apply_yaml(&job(&ns.name, "escape-opt-in", &link).to_string());
    let message = job_reason(&jobs, "escape-opt-in", HOST_PATH_UNSAFE.name()).await;
    assert!(message.contains(NODE) && message.contains(&link), "{message}");
    wait_for("the unsafe Job's DaemonSet to go", Duration::from_secs(60), || async {
        daemonsets
            .get_opt(&daemonset_name("escape-opt-in"))
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    // A pass over the refused Job at the same generation (nudged by an annotation of the
    // test's own) must not bring its DaemonSet back.
    let passes = wait_for("the operator's reconcile count", Duration::from_secs(60), || {
        operator_reconciles(client, JOB_CONTROLLER)
    })
    .await;
    let nudge = json!({"metadata": {"annotations": {"example.com/nudge": "refused"}}});
    jobs.patch("escape-opt-in", &PatchParams::default(), &Patch::Merge(&nudge))
        .await
        .unwrap();
    wait_for(
        "a pass of the Job controller after the nudge",
        Duration::from_secs(60),
        || async { (operator_reconciles(client, JOB_CONTROLLER).await? > passes).then_some(()) },
    )
    .await;
    assert!(
        daemonsets
            .get_opt(&daemonset_name("escape-opt-in"))
            .await
            .unwrap()
            .is_none(),
        "the DaemonSet of a refused Job came back"
    );
    for name in ["plain", "escape-opt-in"] {
        let _ = jobs.delete(name, &DeleteParams::default()).await;
    }
    let unset = kubectl(&[
        "-n",
        OPERATOR_NS,
        "set",
        "env",
        "deployment/storageos-operator",
        "JOB_HOST_PATHS-",
    ]);
    assert!(unset.status.success(), "{}", String::from_utf8_lossy(&unset.stderr));
}

/// `/_sim/` of the simulator pod (host network, on the real node's address), for seeding.
async fn sim_control(client: &Client, method: reqwest::Method, path: &str, body: serde_json::Value) {
    let sim = Api::<Pod>::namespaced(client.clone(), "storageos-simulator")
        .list(&ListParams::default().labels("app=storageos-simulator"))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(ready)
        .expect("the simulator pod is Ready");
    let ip = sim.status.and_then(|s| s.pod_ip).unwrap();
    let answer = reqwest::Client::new()
        .request(method, format!("http://{ip}:5705{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = answer.status();
    assert!(
        status.is_success(),
        "{path}: {status} {}",
        answer.text().await.unwrap_or_default()
    );
}

/// The drain gate on the real node: a volume's master placed there with its replica syncing
/// makes the api-manager start a guard pod from the operator's image, which the kubelet runs
/// (unprivileged, as the operator's own containers); `kubectl drain` of the node waits on its
/// budget and the events name the PVC; once the replica is ready the guard is stopped (it exits
/// on SIGTERM) and the drain completes.
async fn a_drain_of_the_real_node_waits_on_a_running_guard(client: &Client) {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use storageos_operator::apimanager::controllers::drain::guard;
    let ns = TestNamespace::new("real-node-drain").await;
    let pv = format!("pvc-{}", support::suffix());
    sim_control(client, reqwest::Method::POST, "/_sim/nodes", json!({"name": NODE})).await;
    sim_control(
        client,
        reqwest::Method::POST,
        "/_sim/volumes",
        json!({"namespace": ns.name, "name": pv, "pvcName": "data", "pvcNamespace": ns.name,
               "masterNode": NODE, "replicas": 1}),
    )
    .await;
    let health = format!("/_sim/volumes/{}/{pv}/replicas/health", ns.name);
    sim_control(client, reqwest::Method::PUT, &health, json!({"health": "syncing"})).await;
    // The volume is in use (a PVC bound to its PV): an orphan would never hold a drain.
    let objects = support::ClusterObjects::default();
    objects
        .pv(client, &pv, "storageos-drain-test", &ns.name, "data", true)
        .await;
    let claim: k8s_openapi::api::core::v1::PersistentVolumeClaim = support::from_json(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "storageos-drain-test", "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}}
    }));
    ns.api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>()
        .create(&kube::api::PostParams::default(), &claim)
        .await
        .unwrap();

    // The guard runs: a real container of the operator's image, Ready, unprivileged.
    let name = guard::name(NODE);
    // Guards live in their own namespace (Pod Security restricted), not the operand one.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "storageos-drain-guard");
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "storageos-drain-guard");
    let pod = wait_for(
        "the guard pod Ready on the real node",
        Duration::from_secs(120),
        || async { pods.get_opt(&name).await.ok()?.filter(ready) },
    )
    .await;
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.node_name.as_deref(), Some(NODE));
    assert_eq!(
        spec.containers[0].image.as_deref(),
        Some(real_node::operator_image().as_str())
    );
    let st = proc_status(&container_id(&pod));
    assert!(
        st["Uid"].split_whitespace().all(|u| u == "65532"),
        "guard Uid: {}",
        st["Uid"]
    );
    assert_eq!(u64::from_str_radix(&st["CapEff"], 16).unwrap(), 0, "guard CapEff");
    assert_eq!(st["NoNewPrivs"], "1");
    wait_for(
        "the guard's budget to allow no disruption",
        Duration::from_secs(60),
        || async {
            let s = budgets.get_opt(&name).await.ok()??.status?;
            (s.current_healthy == 1 && s.disruptions_allowed == 0).then_some(())
        },
    )
    .await;
    // The Node's event (in `default`) counts the volumes; only the PVC's own names the node.
    support::wait_event(client, "default", NODE, "DrainBlocked", "1 volume").await;
    support::wait_event(client, &ns.name, "data", "DrainBlocked", NODE).await;

    // `kubectl drain` (of the guard alone: the operator's own pods on this one real node have
    // nowhere else to go) waits on the budget; the node is cordoned meanwhile.
    struct Uncordon;
    impl Drop for Uncordon {
        fn drop(&mut self) {
            let _ = kubectl(&["uncordon", NODE]);
        }
    }
    let _uncordon = Uncordon;
    let selector = format!("--pod-selector=app.kubernetes.io/component={}", guard::COMPONENT);
    let drain = |timeout: &str| kubectl(&["drain", NODE, &selector, &format!("--timeout={timeout}")]);
    let out = drain("10s");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("$ kubectl drain {NODE} (blocked)\n{text}");
    assert!(
        !out.status.success(),
        "the drain finished while the node held the last copy: {text}"
    );
    assert!(text.contains("disruption budget"), "{text}");
    support::wait_event(client, "default", NODE, "DrainWaiting", "1 volume").await;
    assert_eq!(
        pods.get_opt(&name).await.unwrap().map(|p| p.uid()),
        Some(pod.uid()),
        "the guard stays, the same pod"
    );

    // The replica is ready: the kubelet stops the guard (it exits on SIGTERM within its 2 s
    // grace), its budget goes, and the drain completes.
    sim_control(client, reqwest::Method::PUT, &health, json!({"health": "ready"})).await;
    wait_for("the guard and its budget to go", Duration::from_secs(90), || async {
        (pods.get_opt(&name).await.ok()?.is_none() && budgets.get_opt(&name).await.ok()?.is_none()).then_some(())
    })
    .await;
    support::wait_event(client, "default", NODE, "DrainUnblocked", NODE).await;
    let out = drain("60s");
    assert!(
        out.status.success(),
        "the drain did not proceed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = format!("/_sim/volumes/{}/{pv}", ns.name);
    sim_control(client, reqwest::Method::DELETE, &path, json!({})).await;
}
