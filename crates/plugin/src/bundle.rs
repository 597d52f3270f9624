//! `kubectl storageos bundle`: a support bundle, `.tar.gz`, everything redacted
//! ([`super::redact`]) before it is written.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams, LogParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::private;
use super::redact::Redactor;
use super::redact::sources::{self, Learnt};
use crate::cluster::ownership::selector;
use crate::crd::{Job, StorageOSCluster, StorageOSNode, StorageOSUpgrade, StorageOSVolume};
use crate::render::{self, DefaultImages, Inputs, labels};

#[derive(Debug, clap::Args)]
#[command(
    about = "Collect a redacted support bundle (.tar.gz)",
    long_about = "Collect a support bundle (.tar.gz) to send when asking for help. It holds: \
    versions.txt (plugin, Kubernetes, operator and StorageOS images and node versions); \
    summary.txt (what `status` prints); the StorageOSClusters, StorageOSUpgrades and Jobs; each \
    cluster's children as live objects; the objects the operator wants for each cluster (`render` \
    of the live cluster) and where the live ones differ; events of the operator's, the cluster's \
    and StorageOS's namespaces; the last --log-lines lines (newer than --since) of every container and init container of the \
    operator, api-manager and StorageOS node pods, and of the previous run of each that \
    restarted (`CONTAINER.previous.log`); the Nodes (labels, taints, nodeInfo, capacity, conditions); and the \
    nodes.api.storageos.com and volumes.api.storageos.com mirrors.\n\n\
    Redacted: every Secret value; every field, annotation and env var whose name looks like a \
    credential (password, token, secret, key, certificate material), and the value after such a \
    flag in args; last-applied-configuration annotations; and, in every file including the logs \
    and diff.txt (which compares redacted copies): every credential value of the Secrets the \
    clusters name, of their CSI copies, of the webhook keys and of the volume and namespace keys, \
    the value of every credential-named env var of the operator Deployment, and the userinfo of \
    spec.kvBackend.address, each as it is, JSON-escaped, URL-encoded and base64-encoded (also as \
    user:password); URL userinfo, bearer tokens, JWTs and name=value with a credential name \
    wherever they appear. A Secret that cannot be read is a warning, printed and written to \
    warnings.txt. The archive and its files are mode 0600, its folders 0700."
)]
pub struct BundleArgs {
    /// The archive to write (default: storageos-bundle-<UTC time>.tar.gz here).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Log lines per container.
    #[arg(long, default_value_t = 2000, value_name = "N")]
    pub log_lines: i64,
    /// Only log lines newer than this (for example 30m or 2h); default: the last --log-lines.
    #[arg(long, value_parser = crate::duration::parse_flag, value_name = "DURATION")]
    pub since: Option<std::time::Duration>,
}

/// Which log lines of each container the bundle holds.
#[derive(Clone, Copy, Debug)]
pub struct LogWindow {
    /// At most this many lines, the last ones.
    pub lines: i64,
    /// Only lines newer than this.
    pub since: Option<std::time::Duration>,
}

impl LogWindow {
    /// The log request for `container`, of its previous run when `previous`.
    fn params(&self, container: &str, previous: bool) -> LogParams {
        LogParams {
            container: Some(container.to_string()),
            tail_lines: Some(self.lines),
            since_seconds: self
                .since
                .map(|d| i64::try_from(d.as_secs().max(1)).unwrap_or(i64::MAX)),
            limit_bytes: Some(4 << 20),
            previous,
            ..Default::default()
        }
    }
}

/// The containers of `pod` whose logs the bundle holds, init containers first (where
/// `storageos-init` reports a kernel module it could not load), each with whether it has a
/// previous run (restarted: that run's log shows why).
fn log_sources(pod: &Pod) -> Vec<(String, bool)> {
    let restarted = |name: &str| {
        pod.status.as_ref().is_some_and(|s| {
            s.init_container_statuses
                .iter()
                .chain(s.container_statuses.iter())
                .flatten()
                .any(|c| c.name == name && c.restart_count > 0)
        })
    };
    pod.spec
        .as_ref()
        .map(|s| {
            s.init_containers
                .iter()
                .flatten()
                .chain(s.containers.iter())
                .map(|c| (c.name.clone(), restarted(&c.name)))
                .collect()
        })
        .unwrap_or_default()
}

/// Why the bundle could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Status(#[from] super::status::Error),
    #[error("cannot read {what}: {source}; check --kubeconfig/--context and that you may read it")]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The files of a bundle: path inside the archive → content.
pub type Files = BTreeMap<String, String>;

/// `kubectl storageos bundle`.
pub async fn run(client: &Client, namespace: &str, args: &BundleArgs) -> Result<(), Error> {
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string();
    let path = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("storageos-bundle-{stamp}.tar.gz")));
    super::progress(format!("collecting from the cluster (operator namespace {namespace})"));
    let window = LogWindow {
        lines: args.log_lines,
        since: args.since,
    };
    let files = collect(client, namespace, window).await?;
    write(&path, &format!("storageos-bundle-{stamp}"), &files)?;
    println!("wrote {} ({} files)", path.display(), files.len());
    for name in files.keys() {
        println!("  {name}");
    }
    Ok(())
}

fn yaml(v: &impl serde::Serialize) -> String {
    serde_yaml::to_string(v).unwrap_or_else(|e| format!("# cannot serialise: {e}\n"))
}

/// Everything the bundle holds, redacted.
pub async fn collect(client: &Client, namespace: &str, logs: LogWindow) -> Result<Files, Error> {
    let mut files = Files::new();
    let clusters = super::list_or_none::<StorageOSCluster>(client).await;

    // Learn every credential before anything is written.
    let Learnt {
        redactor: r,
        secrets,
        children: live_children,
        operator,
        warnings,
    } = sources::learn(client, namespace, &clusters).await;
    files.extend(sources::warnings_file(&warnings));
    let operand_namespaces: Vec<String> = clusters.iter().map(sources::operand_namespace).collect();

    let version = client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let operator_env = operator.as_ref().map(container_env).unwrap_or_default();
    let nodes_mirror = super::list_or_none::<StorageOSNode>(client).await;
    files.insert(
        "versions.txt".into(),
        versions(&version, &operator_env, &clusters, &nodes_mirror),
    );
    files.insert("summary.txt".into(), super::status::summary(client, namespace).await?);

    // The custom resources.
    let mut put_list = |path: &str, items: Vec<Value>| {
        let items: Vec<Value> = items
            .into_iter()
            .map(|mut o| {
                r.object(&mut o);
                o
            })
            .collect();
        files.insert(path.into(), yaml(&items));
    };
    put_list("crs/storageosclusters.yaml", super::to_values(&clusters));
    let upgrades = super::list_or_none::<StorageOSUpgrade>(client).await;
    put_list("crs/storageosupgrades.yaml", super::to_values(&upgrades));
    let jobs = super::list_or_none::<Job>(client).await;
    put_list("crs/jobs.yaml", super::to_values(&jobs));
    put_list("mirrors/nodes.yaml", super::to_values(&nodes_mirror));
    let volumes = super::list_or_none::<StorageOSVolume>(client).await;
    put_list("mirrors/volumes.yaml", super::to_values(&volumes));
    put_list(
        "operator/deployment.yaml",
        super::to_values(&operator.iter().cloned().collect::<Vec<_>>()),
    );

    // Each cluster: live children, desired objects, the difference.
    for (c, live) in clusters.iter().zip(live_children) {
        let dir = format!("clusters/{}_{}", c.namespace().unwrap_or_default(), c.name_any());
        let mut inputs = operator_inputs(c, &operator_env, namespace, &version);
        inputs.secret = secrets
            .get(&(c.spec.secret_ref_namespace.clone(), c.spec.secret_ref_name.clone()))
            .cloned();
        match render::build(&inputs) {
            Ok(objects) => {
                let desired: Vec<Value> = objects.iter().filter_map(|o| o.to_value().ok()).collect();
                files.extend(cluster_files(&r, &dir, Some(desired), live));
            }
            Err(e) => {
                files.extend(cluster_files(&r, &dir, None, live));
                files.insert(format!("{dir}/desired.yaml"), format!("# render failed: {e}\n"));
            }
        }
    }

    let mut event_namespaces = vec![namespace.to_string()];
    event_namespaces.extend(clusters.iter().filter_map(|c| c.namespace()));
    event_namespaces.extend(operand_namespaces.iter().cloned());
    files.extend(event_files(client, event_namespaces).await);

    files.extend(log_files(client, namespace, &clusters, &operand_namespaces, &logs).await);

    files.insert("nodes.yaml".into(), nodes_file(client).await?);

    // The last pass: no known secret value anywhere.
    Ok(files.into_iter().map(|(k, v)| (k, r.text(&v))).collect())
}

/// `versions.txt`: the plugin's, Kubernetes', the operator's image, each cluster's images and
/// each StorageOS node's version.
fn versions(
    version: &str,
    operator_env: &BTreeMap<String, String>,
    clusters: &[StorageOSCluster],
    nodes: &[StorageOSNode],
) -> String {
    let mut versions = format!(
        "kubectl-storageos: {}\nkubernetes: {version}\noperator image: {}\n",
        env!("CARGO_PKG_VERSION"),
        operator_env
            .get("OPERATOR_IMAGE")
            .map(String::as_str)
            .unwrap_or("(operator not found)")
    );
    for c in clusters {
        versions.push_str(&format!(
            "cluster {}/{} images:\n{}",
            c.namespace().unwrap_or_default(),
            c.name_any(),
            yaml(&c.status.as_ref().and_then(|s| s.images.clone()))
        ));
    }
    for n in nodes {
        let v = n.status.as_ref().map(|s| s.version.clone()).unwrap_or_default();
        versions.push_str(&format!("storageos node {}: {v}\n", n.name_any()));
    }
    versions
}

/// What the installed operator would render `cluster` from: its image and defaults (from its
/// Deployment's env), its namespace, the apiserver's version. The Secret is the caller's.
fn operator_inputs(
    cluster: &StorageOSCluster,
    operator_env: &BTreeMap<String, String>,
    namespace: &str,
    version: &str,
) -> Inputs {
    let mut inputs = Inputs::new(
        cluster.clone(),
        operator_env
            .get("OPERATOR_IMAGE")
            .cloned()
            .unwrap_or_else(|| render::DEFAULT_OPERATOR_IMAGE.into()),
    );
    inputs.default_images = DefaultImages::from_env_map(operator_env);
    inputs.node_env = render::node_env_from(operator_env);
    inputs.operator_namespace = namespace.to_string();
    inputs.k8s_version = render::parse_k8s_version(version).ok();
    inputs
}

/// `events/<namespace>.txt` for each namespace, one line an event.
async fn event_files(client: &Client, mut namespaces: Vec<String>) -> Files {
    namespaces.sort();
    namespaces.dedup();
    let mut files = Files::new();
    for ns in &namespaces {
        let events = Api::<Event>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let lines: String = events
            .iter()
            .map(|e| {
                format!(
                    "{} {} {} {}/{}: {}\n",
                    e.last_timestamp
                        .as_ref()
                        .and_then(|t| serde_json::to_value(t).ok())
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default(),
                    e.type_.clone().unwrap_or_default(),
                    e.reason.clone().unwrap_or_default(),
                    e.involved_object.kind.clone().unwrap_or_default(),
                    e.involved_object.name.clone().unwrap_or_default(),
                    e.message.clone().unwrap_or_default()
                )
            })
            .collect();
        files.insert(format!("events/{ns}.txt"), lines);
    }
    files
}

/// `logs/<namespace>/<pod>/<container>.log` (and `.previous.log` after a restart) of the
/// operator's pods and each cluster's api-manager and node pods.
async fn log_files(
    client: &Client,
    namespace: &str,
    clusters: &[StorageOSCluster],
    operand_namespaces: &[String],
    logs: &LogWindow,
) -> Files {
    let mut files = Files::new();
    let mut pod_sets = vec![(
        namespace.to_string(),
        selector(&storageos_cluster_operator::install::selector()),
    )];
    for (c, operands) in clusters.iter().zip(operand_namespaces) {
        let name = c.name_any();
        pod_sets.push((
            operands.clone(),
            selector(&labels::pod(&name, None, "storageos-api-manager")),
        ));
        pod_sets.push((
            operands.clone(),
            selector(&labels::pod(&name, Some("daemonset"), "storageos-daemonset")),
        ));
    }
    for (ns, sel) in pod_sets {
        let api = Api::<Pod>::namespaced(client.clone(), &ns);
        let pods = api
            .list(&ListParams::default().labels(&sel))
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for pod in pods {
            for (container, restarted) in log_sources(&pod) {
                for previous in std::iter::once(false).chain(restarted.then_some(true)) {
                    let text = api
                        .logs(&pod.name_any(), &logs.params(&container, previous))
                        .await
                        .unwrap_or_else(|e| format!("# cannot read the log: {e}\n"));
                    let file = if previous { "previous.log" } else { "log" };
                    files.insert(format!("logs/{ns}/{}/{container}.{file}", pod.name_any()), text);
                }
            }
        }
    }
    files
}

/// `nodes.yaml`: each Node's labels, taints, node info, capacity and conditions.
async fn nodes_file(client: &Client) -> Result<String, Error> {
    let nodes = super::list_all::<Node>(client).await.map_err(|source| Error::Read {
        what: "the Nodes".into(),
        source,
    })?;
    let nodes: Vec<Value> = nodes
        .iter()
        .map(|n| {
            let status = n.status.clone().unwrap_or_default();
            json!({
                "name": n.name_any(),
                "labels": n.labels(),
                "taints": n.spec.as_ref().and_then(|s| s.taints.clone()),
                "nodeInfo": status.node_info,
                "capacity": status.capacity,
                "allocatable": status.allocatable,
                "conditions": status.conditions.unwrap_or_default().into_iter()
                    .map(|c| json!({"type": c.type_, "status": c.status, "reason": c.reason, "message": c.message}))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(yaml(&nodes))
}

/// A cluster's `live.yaml`, `desired.yaml` and `diff.txt` under `dir`: both sides redacted
/// before they are compared, so a live-only field (an env var, an argument) shows in the diff
/// only as redacted as everywhere else.
fn cluster_files(r: &Redactor, dir: &str, desired: Option<Vec<Value>>, mut live: Vec<Value>) -> Files {
    let mut files = Files::new();
    live.iter_mut().for_each(|o| r.object(o));
    if let Some(mut desired) = desired {
        desired.iter_mut().for_each(|o| r.object(o));
        files.insert(format!("{dir}/desired.yaml"), yaml(&desired));
        files.insert(format!("{dir}/diff.txt"), diff(&desired, &live));
    }
    files.insert(format!("{dir}/live.yaml"), yaml(&live));
    files
}

/// The container env of a Deployment's first container, values only.
fn container_env(d: &Deployment) -> BTreeMap<String, String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.env.clone())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| Some((e.name, e.value?)))
        .collect()
}

pub use super::children::children;

/// Where the live objects differ from the desired ones: missing objects, and every field the
/// operator sets whose live value is different. Secrets are compared by presence only.
pub fn diff(desired: &[Value], live: &[Value]) -> String {
    let key = |o: &Value| {
        format!(
            "{} {}/{}",
            o["kind"].as_str().unwrap_or_default(),
            o["metadata"]["namespace"].as_str().unwrap_or_default(),
            o["metadata"]["name"].as_str().unwrap_or_default()
        )
    };
    let live: BTreeMap<String, &Value> = live.iter().map(|o| (key(o), o)).collect();
    let mut out = String::new();
    for d in desired {
        let k = key(d);
        match live.get(&k) {
            // Namespaces carry no cluster labels: not among the live children.
            None if d["kind"] == "Namespace" => {}
            None => out.push_str(&format!("{k}: missing\n")),
            Some(_) if d["kind"] == "Secret" => {}
            Some(l) => {
                let mut found = Vec::new();
                differences(d, l, String::new(), &mut found);
                for f in found {
                    out.push_str(&format!("{k}: {f}\n"));
                }
            }
        }
    }
    if out.is_empty() {
        out.push_str("every desired object is live as desired\n");
    }
    out
}

fn differences(desired: &Value, live: &Value, path: String, out: &mut Vec<String>) {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => {
            for (k, dv) in d {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match l.get(k) {
                    Some(lv) => differences(dv, lv, p, out),
                    None if !dv.is_null() => out.push(format!("{p}: not set live (wanted {dv})")),
                    None => {}
                }
            }
        }
        (Value::Array(d), Value::Array(l)) if d.len() == l.len() => {
            for (i, (dv, lv)) in d.iter().zip(l).enumerate() {
                differences(dv, lv, format!("{path}[{i}]"), out);
            }
        }
        (d, l) if d != l && !same_quantity(d, l) => out.push(format!("{path}: live {l}, wanted {d}")),
        _ => {}
    }
}

/// `1` and `"1"`, as the apiserver may normalise them.
fn same_quantity(a: &Value, b: &Value) -> bool {
    a.to_string().trim_matches('"') == b.to_string().trim_matches('"')
}

/// Writes the files as `root/<path>` into a gzip'd tar at `path`: the archive and every file
/// in it [`private::FILE_MODE`], every folder in it [`private::DIR_MODE`], so unpacking it
/// does not hand the cluster's details to other users of the machine.
pub fn write(path: &std::path::Path, root: &str, files: &Files) -> Result<(), Error> {
    let fail = |source: std::io::Error| Error::Write {
        path: path.display().to_string(),
        source,
    };
    let file = private::create(path).map_err(fail)?;
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(file, flate2::Compression::default()));
    let mtime = u64::try_from(chrono::Utc::now().timestamp()).unwrap_or(0);
    let mut entry = |name: String, mode: u32, content: &[u8]| {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(if mode == private::DIR_MODE {
            tar::EntryType::Directory
        } else {
            tar::EntryType::Regular
        });
        header.set_size(content.len() as u64);
        header.set_mode(mode);
        header.set_mtime(mtime);
        header.set_cksum();
        tar.append_data(&mut header, name, content)
    };
    let mut folders: Vec<String> = files
        .keys()
        .flat_map(|name| {
            let parts: Vec<&str> = name.split('/').collect();
            (1..parts.len()).map(move |n| parts[..n].join("/"))
        })
        .collect();
    folders.sort();
    folders.dedup();
    entry(format!("{root}/"), private::DIR_MODE, b"").map_err(fail)?;
    for folder in folders {
        entry(format!("{root}/{folder}/"), private::DIR_MODE, b"").map_err(fail)?;
    }
    for (name, content) in files {
        entry(format!("{root}/{name}"), private::FILE_MODE, content.as_bytes()).map_err(fail)?;
    }
    tar.into_inner().map_err(fail)?.finish().map_err(fail)?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn logs_are_read_from_init_containers_first_and_from_the_previous_run_of_a_restarted_one() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "storageos-daemonset-x"},
            "spec": {
                "initContainers": [{"name": "storageos-init"}],
                "containers": [{"name": "storageos"}, {"name": "csi-driver-registrar"}]
            },
            "status": {
                "initContainerStatuses": [{"name": "storageos-init", "restartCount": 2, "ready": false, "image": "i", "imageID": ""}],
                "containerStatuses": [{"name": "storageos", "restartCount": 0, "ready": true, "image": "i", "imageID": ""}]
            }
        }))
        .unwrap();
        assert_eq!(
            log_sources(&pod),
            [
                ("storageos-init".to_string(), true),
                ("storageos".to_string(), false),
                ("csi-driver-registrar".to_string(), false)
            ]
        );
        let window = LogWindow {
            lines: 10,
            since: Some(std::time::Duration::from_secs(1800)),
        };
        let params = window.params("storageos-init", true);
        assert_eq!(
            (params.previous, params.since_seconds, params.tail_lines),
            (true, Some(1800), Some(10))
        );
        let params = LogWindow { lines: 10, since: None }.params("storageos", false);
        assert_eq!((params.previous, params.since_seconds), (false, None));
    }

    #[test]
    fn diff_names_missing_objects_and_changed_fields_only() {
        let desired = vec![
            json!({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}, "data": {"x": "1", "y": "2"}}),
            json!({"kind": "Service", "metadata": {"name": "b", "namespace": "n"}}),
        ];
        let live = vec![
            json!({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n", "uid": "u"},
            "data": {"x": "1", "y": "3", "z": "extra"}}),
        ];
        let d = diff(&desired, &live);
        assert!(d.contains("Service n/b: missing"), "{d}");
        assert!(d.contains("ConfigMap n/a: data.y: live \"3\", wanted \"2\""), "{d}");
        assert!(
            !d.contains("data.x") && !d.contains("uid") && !d.contains("data.z"),
            "{d}"
        );
    }

    #[test]
    fn a_live_only_credential_env_appears_in_no_file() {
        let desired = vec![json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "n"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "env": [
                {"name": "LOG_LEVEL", "value": "info"}], "args": ["--v=1"]}]}}}})];
        let mut live = desired.clone();
        live[0]["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "LOG_LEVEL", "value": "info"}, {"name": "X_TOKEN", "value": "live-only-token-1"}]);
        live[0]["spec"]["template"]["spec"]["containers"][0]["args"] = json!([
            "--v=1",
            "--admin-password",
            "live-only-pass-2",
            "--api-key=live-only-key-3"
        ]);
        let r = Redactor::default();
        let files = cluster_files(&r, "clusters/n_s", Some(desired), live);
        assert_eq!(files.len(), 3);
        for (name, text) in &files {
            let text = r.text(text);
            for leaked in ["live-only-token-1", "live-only-pass-2", "live-only-key-3"] {
                assert!(!text.contains(leaked), "{name} holds {leaked}: {text}");
            }
        }
        assert!(
            files["clusters/n_s/diff.txt"].contains("env"),
            "{}",
            files["clusters/n_s/diff.txt"]
        );
    }

    #[test]
    fn the_archive_holds_the_files_under_one_root() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.tar.gz");
        let files = Files::from([
            ("a.txt".to_string(), "A".to_string()),
            ("d/b.txt".to_string(), "B".to_string()),
        ]);
        write(&path, "root", &files).unwrap();
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()));
        let entries: Vec<(String, u32)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.path().unwrap().display().to_string(), e.header().mode().unwrap())
            })
            .collect();
        assert_eq!(
            entries,
            [
                ("root/".to_string(), 0o700),
                ("root/d/".to_string(), 0o700),
                ("root/a.txt".to_string(), 0o600),
                ("root/d/b.txt".to_string(), 0o600)
            ]
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "the archive itself");
        }
    }
}
