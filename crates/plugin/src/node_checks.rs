//! `preflight --node-checks`: one short-lived pod per selected node, from the operator's image,
//! running the hidden `storageos-operator node-check` ([`crate::checks::host`]) and reporting
//! its findings in its termination message. The pods are pinned by `nodeName`, privileged, with
//! the host's PID and network namespaces and its root filesystem read-only (docs/plugin.md says
//! why), in the StorageOS namespace (whose Pod Security level must allow privileged pods, as
//! for StorageOS itself).
//!
//! The pods are always removed: at the start (any a stopped run left, by label), at the end,
//! on Ctrl-C, and by a guard when the checks end any other way ([`Cleanup`]). A node that cannot run one (a kwok
//! fake node, not Ready, a platform StorageOS does not support, a pod that does not start or
//! finish in time) is reported SKIP with the reason.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::checks::host::{Findings, findings_checks};
use crate::checks::{Check, Verdict, check};

/// The label of every node-check pod (cleanup selects on it).
pub const POD_LABEL: (&str, &str) = ("app.kubernetes.io/name", "storageos-preflight");
/// The annotation naming the node a pod checks.
const NODE_ANNOTATION: &str = "storageos.com/preflight-node";
/// How long a pod keeps ports open and retries the other nodes.
const WINDOW: Duration = Duration::from_secs(20);

/// Where and how to run the pods.
#[derive(Clone, Debug)]
pub struct Options {
    pub image: String,
    pub namespace: String,
    pub timeout: Duration,
}

/// Why `node` cannot run a node-check pod, from what the API says of it.
pub fn cannot_run(node: &Node) -> Option<String> {
    if node
        .annotations()
        .get("kwok.x-k8s.io/node")
        .is_some_and(|v| v == "fake")
    {
        return Some("a kwok fake node: no kubelet runs pods there".into());
    }
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if !ready {
        return Some("not Ready".into());
    }
    let info = status.and_then(|s| s.node_info.as_ref());
    let os = info.map(|i| i.operating_system.as_str()).unwrap_or_default();
    let arch = info.map(|i| i.architecture.as_str()).unwrap_or_default();
    if let Some(why) = crate::checks::ineligible_os_arch(os, arch) {
        return Some(format!("StorageOS does not run on it ({why})"));
    }
    None
}

/// The node's address other nodes reach it on (InternalIP, else the first reported).
pub fn node_address(node: &Node) -> Option<String> {
    let addresses = node.status.as_ref()?.addresses.as_ref()?;
    addresses
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .or_else(|| addresses.iter().find(|a| a.type_.ends_with("IP")))
        .map(|a| a.address.clone())
}

/// The pod that checks `node`, reaching `peers`.
pub fn pod(node: &str, peers: &[String], opts: &Options) -> Pod {
    let mut args = vec!["node-check".to_string(), "--node".into(), node.into()];
    if !peers.is_empty() {
        args.extend(["--peers".into(), peers.join(",")]);
    }
    args.extend(["--window".into(), format!("{}s", WINDOW.as_secs())]);
    let deadline = opts.timeout.as_secs().max(1) + 30;
    let value = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": "storageos-preflight-",
            "namespace": opts.namespace,
            "labels": {POD_LABEL.0: POD_LABEL.1, "app.kubernetes.io/part-of": "storageos"},
            "annotations": {NODE_ANNOTATION: node},
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            // The host's ports (5701-5711 are StorageOS's host ports), and its PID namespace to
            // read its mount table (/proc/1/mountinfo).
            "hostNetwork": true,
            "hostPID": true,
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "terminationGracePeriodSeconds": 1,
            "activeDeadlineSeconds": deadline,
            // Pinned by nodeName to a node StorageOS will use, which tolerates its taints.
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "node-check",
                "image": opts.image,
                "imagePullPolicy": "IfNotPresent",
                "args": args,
                // Root, to read every file of the host's (/lib/modules, /var/lib/storageos)
                // and its init's mount table, and to open ports on its network.
                "securityContext": {"privileged": true, "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": false},
                "volumeMounts": [{"name": "host", "mountPath": "/host", "readOnly": true}],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }],
            // The host's root filesystem (read-only): the kernel's module lists and the free
            // space under /var/lib/storageos.
            "volumes": [{"name": "host", "hostPath": {"path": "/", "type": "Directory"}}],
        },
    });
    // The literal above is a valid Pod; a failure here would be a bug in it.
    serde_json::from_value(value).unwrap_or_default()
}

/// Deletes every node-check pod in the namespace (what a run left, or this run's).
async fn delete_all(pods: &Api<Pod>) -> Result<(), kube::Error> {
    let lp = ListParams::default().labels(&format!("{}={}", POD_LABEL.0, POD_LABEL.1));
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::background()
    };
    pods.delete_collection(&dp, &lp).await.map(|_| ())
}

/// Waits (up to 30 s) until no node-check pod is left in the namespace.
async fn wait_gone(pods: &Api<Pod>) -> bool {
    let lp = ListParams::default().labels(&format!("{}={}", POD_LABEL.0, POD_LABEL.1));
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        if pods.list(&lp).await.is_ok_and(|l| l.items.is_empty()) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

/// Removes this run's pods when dropped before [`run`] removed them itself (a panic, or the
/// future dropped): the deletion is spawned on the runtime, as a drop cannot await; it runs if
/// the runtime goes on. A deletion that never runs is left to the pods' own deadline
/// (`activeDeadlineSeconds`) and to the next run's clean-up by label. (Not a thread with a
/// runtime of its own, joined here: the client's connection task lives on this runtime, which
/// the join would block.)
struct Cleanup(Option<Api<Pod>>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(pods) = self.0.take() else { return };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = delete_all(&pods).await;
            });
        }
    }
}

fn skip(node: &str, why: impl Into<String>) -> Check {
    check(
        format!("node/{node}/node-checks"),
        Verdict::Skip,
        why,
        "run the per-node checks by hand on this node (docs/plugin.md, preflight --node-checks)",
    )
}

/// The per-node checks on `nodes` (those StorageOS will use): findings of the nodes that ran
/// them, SKIP for the others.
pub async fn run(client: &Client, nodes: &[Node], opts: &Options) -> Vec<Check> {
    let mut out = Vec::new();
    let runnable: Vec<&Node> = nodes
        .iter()
        .filter(|n| match cannot_run(n) {
            Some(why) => {
                out.push(skip(&n.name_any(), why));
                false
            }
            None => true,
        })
        .collect();
    if runnable.is_empty() {
        return out;
    }
    match Api::<Namespace>::all(client.clone()).get_opt(&opts.namespace).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            for n in &runnable {
                out.push(skip(
                    &n.name_any(),
                    format!(
                        "the namespace {} does not exist yet: create it (Pod Security privileged), or give --storageos-namespace kube-system",
                        opts.namespace
                    ),
                ));
            }
            return out;
        }
        Err(e) => {
            for n in &runnable {
                out.push(skip(
                    &n.name_any(),
                    format!("cannot read the namespace {}: {e}", opts.namespace),
                ));
            }
            return out;
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &opts.namespace);
    if let Err(e) = delete_all(&pods).await {
        for n in &runnable {
            out.push(skip(
                &n.name_any(),
                format!("cannot delete earlier node-check pods in {}: {e}", opts.namespace),
            ));
        }
        return out;
    }
    let mut guard = Cleanup(Some(pods.clone()));
    let addresses: BTreeMap<String, String> = runnable
        .iter()
        .filter_map(|n| Some((n.name_any(), node_address(n)?)))
        .collect();
    // node name → pod name
    let mut started: BTreeMap<String, String> = BTreeMap::new();
    for n in &runnable {
        let name = n.name_any();
        let peers: Vec<String> = addresses
            .iter()
            .filter(|(other, _)| **other != name)
            .map(|(_, a)| a.clone())
            .collect();
        match pods.create(&PostParams::default(), &pod(&name, &peers, opts)).await {
            Ok(p) => {
                started.insert(name, p.name_any());
            }
            Err(e) => out.push(skip(
                &name,
                format!("cannot create the node-check pod in {}: {e}", opts.namespace),
            )),
        }
    }
    let results = tokio::select! {
        r = collect(&pods, &started, opts) => r,
        _ = tokio::signal::ctrl_c() => {
            let _ = delete_all(&pods).await;
            wait_gone(&pods).await;
            guard.0 = None;
            std::process::exit(130);
        }
    };
    out.extend(results);
    let _ = delete_all(&pods).await;
    if !wait_gone(&pods).await {
        out.push(check(
            "node-checks/cleanup",
            Verdict::Warn,
            format!("node-check pods are still being deleted in {}", opts.namespace),
            format!(
                "kubectl -n {} delete pod -l {}={} --grace-period=0",
                opts.namespace, POD_LABEL.0, POD_LABEL.1
            ),
        ));
    }
    guard.0 = None;
    out
}

/// Waits for each started pod to finish, and reads its findings.
async fn collect(pods: &Api<Pod>, started: &BTreeMap<String, String>, opts: &Options) -> Vec<Check> {
    let until = Instant::now() + opts.timeout;
    let mut done: BTreeMap<String, Vec<Check>> = BTreeMap::new();
    while done.len() < started.len() {
        for (node, name) in started {
            if done.contains_key(node) {
                continue;
            }
            let Ok(Some(p)) = pods.get_opt(name).await else {
                continue;
            };
            if let Some(result) = outcome(pods, node, &p, opts).await {
                done.insert(node.clone(), result);
            }
        }
        if done.len() == started.len() {
            break;
        }
        if Instant::now() >= until {
            for node in started
                .keys()
                .filter(|n| !done.contains_key(*n))
                .cloned()
                .collect::<Vec<_>>()
            {
                let why = format!(
                    "the node-check pod did not finish within {}s (the node may not run pods, or cannot pull {})",
                    opts.timeout.as_secs(),
                    opts.image
                );
                done.insert(node.clone(), vec![skip(&node, why)]);
            }
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    done.into_values().flatten().collect()
}

/// The checks of a finished pod; a SKIP for one that cannot start; None while it runs.
async fn outcome(pods: &Api<Pod>, node: &str, p: &Pod, opts: &Options) -> Option<Vec<Check>> {
    let status = p.status.as_ref()?;
    let container = status.container_statuses.as_ref().and_then(|c| c.first());
    let state = container.and_then(|c| c.state.as_ref());
    if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
        let reason = w.reason.as_deref().unwrap_or_default();
        if matches!(
            reason,
            "ErrImagePull"
                | "ImagePullBackOff"
                | "InvalidImageName"
                | "CreateContainerError"
                | "CreateContainerConfigError"
        ) {
            let fix = if reason.contains("Image") {
                format!(
                    ": the node cannot pull {}; give --image, or push it (hack/image.sh)",
                    opts.image
                )
            } else {
                String::new()
            };
            return Some(vec![skip(
                node,
                format!("{reason}: {}{fix}", w.message.as_deref().unwrap_or_default()),
            )]);
        }
    }
    let phase = status.phase.as_deref().unwrap_or_default();
    if phase != "Succeeded" && phase != "Failed" {
        return None;
    }
    let terminated = state.and_then(|s| s.terminated.as_ref());
    let mut text = terminated.and_then(|t| t.message.clone()).unwrap_or_default();
    if text.trim().is_empty() {
        text = pods
            .logs(&p.name_any(), &LogParams::default())
            .await
            .unwrap_or_default();
    }
    Some(match parse_findings(&text) {
        Some(f) => findings_checks(node, &f),
        None => vec![check(
            format!("node/{node}/node-checks"),
            Verdict::Warn,
            format!(
                "the node-check pod ended ({phase}{}) without findings: {}",
                terminated
                    .map(|t| format!(", exit code {}", t.exit_code))
                    .unwrap_or_default(),
                text.trim().chars().take(300).collect::<String>()
            ),
            format!(
                "check that {} is this plugin's operator image (it has the node-check command)",
                opts.image
            ),
        )],
    })
}

/// The findings in a pod's output: the last line that parses as them.
pub fn parse_findings(text: &str) -> Option<Findings> {
    text.lines()
        .rev()
        .map(str::trim)
        .filter(|l| l.starts_with('{'))
        .find_map(|l| serde_json::from_str(l).ok())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    fn ready(extra: serde_json::Value) -> Node {
        let mut v = json!({
            "metadata": {"name": "n1"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.7"}],
                       "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kernelVersion": "6.1.0",
                           "containerRuntimeVersion": "", "osImage": "", "bootID": "", "kubeProxyVersion": "",
                           "kubeletVersion": "", "machineID": "", "systemUUID": ""}}
        });
        if let (Some(base), Some(more)) = (v.as_object_mut(), extra.as_object()) {
            for (k, x) in more {
                base.insert(k.clone(), x.clone());
            }
        }
        node(v)
    }

    #[test]
    fn which_nodes_can_run_the_pod() {
        assert_eq!(cannot_run(&ready(json!({}))), None);
        let kwok = ready(json!({"metadata": {"name": "k", "annotations": {"kwok.x-k8s.io/node": "fake"}}}));
        assert!(cannot_run(&kwok).unwrap().contains("kwok"));
        let not_ready = node(json!({"metadata": {"name": "x"}}));
        assert_eq!(cannot_run(&not_ready).as_deref(), Some("not Ready"));
        let mut arm = ready(json!({}));
        arm.status.as_mut().unwrap().node_info.as_mut().unwrap().architecture = "arm64".into();
        assert!(cannot_run(&arm).unwrap().contains("arm64"));
        assert_eq!(node_address(&ready(json!({}))).as_deref(), Some("10.0.0.7"));
        assert_eq!(node_address(&not_ready), None);
    }

    #[test]
    fn the_pod_is_pinned_privileged_and_labelled() {
        let opts = Options {
            image: "img:1".into(),
            namespace: "kube-system".into(),
            timeout: Duration::from_secs(60),
        };
        let p = pod("n1", &["10.0.0.8".into(), "10.0.0.9".into()], &opts);
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["spec"]["nodeName"], "n1");
        assert_eq!(v["spec"]["hostNetwork"], true);
        assert_eq!(v["spec"]["hostPID"], true);
        assert_eq!(v["spec"]["restartPolicy"], "Never");
        assert_eq!(v["metadata"]["labels"][POD_LABEL.0], POD_LABEL.1);
        let c = &v["spec"]["containers"][0];
        assert_eq!(c["image"], "img:1");
        assert_eq!(c["securityContext"]["privileged"], true);
        assert_eq!(c["volumeMounts"][0]["readOnly"], true);
        assert_eq!(v["spec"]["volumes"][0]["hostPath"]["path"], "/");
        let args: Vec<&str> = c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(
            args,
            [
                "node-check",
                "--node",
                "n1",
                "--peers",
                "10.0.0.8,10.0.0.9",
                "--window",
                "20s"
            ]
        );
        // The binary parses exactly these arguments: a test in `cli` (the binary's crate).
    }

    #[test]
    fn findings_are_the_last_json_line() {
        let f = Findings {
            node: "n1".into(),
            kernel: "6.1.0".into(),
            ..Findings::default()
        };
        let text = format!("some warning\n{}\n", serde_json::to_string(&f).unwrap());
        assert_eq!(parse_findings(&text), Some(f));
        assert_eq!(parse_findings("exec format error"), None);
        assert_eq!(parse_findings(""), None);
    }
}
