//! `kubectl storageos preflight`: is this cluster ready for StorageOS? The checks read the
//! Kubernetes API (or, for etcd, talk to the endpoints), on the nodes StorageOS will use: those
//! the installed cluster selects, or the cluster of `-f FILE`, or `--node-selector`. With
//! `--node-checks` a short-lived pod on each of those nodes checks what only the node can tell
//! (`node_checks`). The result is a table (or JSON/YAML) of PASS / SKIP / WARN / FAIL, each
//! not-PASS with a one-line fix, and the command fails when any check FAILs. The thresholds and
//! why are in docs/plugin.md.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, Toleration};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};

use super::node_checks;
use crate::checks::etcd;
pub use crate::checks::{Check, Verdict};
use crate::checks::{
    check, host_ports, kubernetes_version, leftovers, node_checks as node_api_checks, pass, pod_security,
    storage_conflicts,
};
use crate::cluster::node_cache::CachedNode;
use crate::cluster::select;
use crate::crd::{StorageOSCluster, StorageOSNode};
use crate::render::{DEFAULT_OPERATOR_IMAGE, scheduling};

/// Checks that need a pod on each node, done only with `--node-checks`.
pub const NOT_CHECKED: &str = "Not checked without --node-checks (they need a pod on each node): the kernel \
    modules target_core_mod, tcm_loop, target_core_user, configfs and uio; mount propagation; free space \
    under /var/lib/storageos; that nodes reach each other on ports 5701-5711.";

#[derive(Debug, clap::Args)]
#[command(
    about = "Check a cluster before (or after) installing StorageOS",
    long_about = "Check a cluster before (or after) installing StorageOS.\n\n\
    The nodes checked are those StorageOS will use: the installed StorageOSCluster's \
    (spec.nodeSelectorTerms and tolerations, as its node DaemonSet), or those of the cluster in -f FILE, \
    or --node-selector; every node without any of these.\n\n\
    Checks: the Kubernetes version; on each of those nodes that is Ready, the OS, architecture (StorageOS ships \
    amd64 only), kernel version, container runtime and allocatable CPU and memory (1 core and \
    2 GiB at least); the etcd endpoints (a put, get and delete of one key under \
    /storageos-preflight/ on each); leftovers of an earlier install (the Go operator, old CRD \
    versions, nodes that ran StorageOS); the Pod Security level of the namespace StorageOS runs \
    in (privileged needed); a conflicting CSI driver or default StorageClass; pods holding host \
    ports 5701-5711 on those nodes.\n\n\
    With --node-checks, also (a privileged pod from --image on each of those nodes, deleted \
    after): the kernel modules target_core_mod, tcm_loop, target_core_user, configfs and uio; \
    mount propagation of /var/lib/storageos; free space under it; that ports 5701-5711 are free \
    and nodes reach each other on them. A node that cannot run the pod is SKIP with the reason.\n\n\
    Exits non-zero when any check FAILs."
)]
pub struct PreflightArgs {
    /// etcd endpoints StorageOS will use (comma-separated http(s)://HOST:PORT), reachable from
    /// here. Default: the kvBackend of the cluster already installed, if any.
    #[arg(long, value_name = "URLS")]
    pub etcd_endpoints: Option<String>,
    /// The etcd client TLS Secret (keys etcd-client-ca.crt, etcd-client.crt, etcd-client.key) in
    /// --etcd-tls-secret-namespace, for an https etcd. Default: an installed cluster's.
    #[arg(long, value_name = "NAME")]
    pub etcd_tls_secret: Option<String>,
    /// Namespace of --etcd-tls-secret (default: -n).
    #[arg(long, value_name = "NAMESPACE")]
    pub etcd_tls_secret_namespace: Option<String>,
    /// Namespace the StorageOS node pods will run in (the cluster's spec.namespace).
    #[arg(long, default_value = "kube-system", value_name = "NAMESPACE")]
    pub storageos_namespace: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// How long each etcd request may take.
    #[arg(long, default_value = "5s", value_parser = crate::duration::parse_flag, value_name = "DURATION")]
    pub etcd_timeout: Duration,
    /// A StorageOSCluster (YAML, as for install -f): check the nodes its nodeSelectorTerms and
    /// tolerations select, and its etcd (unless --etcd-endpoints).
    #[arg(short = 'f', long, value_name = "FILE", conflicts_with = "node_selector")]
    pub filename: Option<PathBuf>,
    /// Check the nodes with these labels (KEY=VALUE, KEY!=VALUE, KEY, !KEY, KEY in (A,B),
    /// KEY notin (A,B); comma-separated, all must hold), with the node DaemonSet's default
    /// tolerations.
    #[arg(long, value_name = "SELECTOR")]
    pub node_selector: Option<String>,
    /// Also run the per-node checks: a privileged pod (host network and PID namespace) from
    /// --image on each selected node, in --storageos-namespace, deleted when done.
    #[arg(long)]
    pub node_checks: bool,
    /// The operator image the per-node check pods run (as install's --image).
    #[arg(long, default_value = DEFAULT_OPERATOR_IMAGE, value_name = "IMAGE")]
    pub image: String,
    /// How long the per-node check pods may take; a node whose pod has not finished is SKIP.
    #[arg(long, default_value = "2m", value_parser = crate::duration::parse_flag, value_name = "DURATION")]
    pub node_check_timeout: Duration,
}

/// How to print the results.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

/// Why preflight could not run, or what it found.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot {what}: {source}; check --kubeconfig/--context and that you may read it")]
    Read {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("{0} check(s) failed; fix them (see the FIX column) and run preflight again")]
    Failed(usize),
    #[error("cannot print the results: {0}")]
    Print(String),
    #[error("cannot read the StorageOSCluster in {path}: {message}")]
    File { path: String, message: String },
    #[error(
        "--node-selector {selector:?}: {message}; give KEY=VALUE, KEY!=VALUE, KEY, !KEY, KEY in (A,B) or KEY notin (A,B), comma-separated"
    )]
    Selector { selector: String, message: String },
}

/// The report: every check, and what was not checked.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub checks: Vec<Check>,
    #[serde(rename = "notChecked", skip_serializing_if = "str::is_empty")]
    pub not_checked: &'static str,
}

impl Report {
    pub fn failed(&self) -> usize {
        self.checks.iter().filter(|c| c.result == Verdict::Fail).count()
    }
}

/// `kubectl storageos preflight`.
pub async fn run(client: &Client, namespace: &str, args: &PreflightArgs) -> Result<(), Error> {
    let report = collect(client, namespace, args).await?;
    let text = match args.output {
        Output::Table => table(&report),
        Output::Json => serde_json::to_string_pretty(&report).map_err(|e| Error::Print(e.to_string()))? + "\n",
        Output::Yaml => serde_yaml::to_string(&report).map_err(|e| Error::Print(e.to_string()))?,
    };
    print!("{text}");
    match report.failed() {
        0 => Ok(()),
        n => Err(Error::Failed(n)),
    }
}

/// The nodes StorageOS will use: a node selection (terms, tolerations) and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    /// None: every node.
    pub terms: Option<Vec<NodeSelectorTerm>>,
    pub tolerations: Vec<Toleration>,
    /// What made it, for the report.
    pub source: String,
}

impl Selection {
    /// Of a StorageOSCluster: its nodeSelectorTerms and tolerations, as its node DaemonSet.
    pub fn of_cluster(cluster: &StorageOSCluster, what: String) -> Self {
        let resolved = crate::render::resolve(&cluster.spec);
        Self {
            terms: Some(resolved.node_selector_terms),
            tolerations: scheduling::merge_tolerations(scheduling::node_tolerations(), &resolved.tolerations),
            source: what,
        }
    }

    /// The names of `nodes` selected, sorted ([`select::selected_nodes`], the cluster
    /// controller's own rule).
    pub fn select(&self, nodes: &[Node]) -> BTreeSet<String> {
        let cached: Vec<CachedNode> = nodes
            .iter()
            .filter_map(|n| serde_json::to_value(n).ok())
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect();
        select::selected_nodes(&cached, self.terms.as_deref(), &self.tolerations)
            .into_iter()
            .collect()
    }
}

/// Which nodes to check: `-f FILE`'s cluster, else `--node-selector`, else the installed
/// cluster, else every node (with the node DaemonSet's default tolerations).
pub fn selection(
    file: Option<&(String, StorageOSCluster)>,
    node_selector: Option<&str>,
    installed: &[StorageOSCluster],
) -> Result<Selection, Error> {
    if let Some((path, c)) = file {
        return Ok(Selection::of_cluster(
            c,
            format!("spec.nodeSelectorTerms and tolerations of the StorageOSCluster in {path}"),
        ));
    }
    if let Some(s) = node_selector {
        let term = parse_node_selector(s).map_err(|message| Error::Selector {
            selector: s.to_string(),
            message,
        })?;
        return Ok(Selection {
            terms: Some(vec![term]),
            tolerations: scheduling::node_tolerations(),
            source: format!("--node-selector {s}"),
        });
    }
    if let Some(c) = installed.first() {
        return Ok(Selection::of_cluster(
            c,
            format!(
                "spec.nodeSelectorTerms and tolerations of StorageOSCluster {}/{}",
                c.namespace().unwrap_or_default(),
                c.name_any()
            ),
        ));
    }
    Ok(Selection {
        terms: None,
        tolerations: scheduling::node_tolerations(),
        source: "no StorageOSCluster installed, -f or --node-selector: every node whose taints StorageOS tolerates by default".into(),
    })
}

/// A label selector (`a=b,c!=d,e,!f,g in (h,i),j notin (k)`) as one node selector term.
pub fn parse_node_selector(s: &str) -> Result<NodeSelectorTerm, String> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for ch in s.chars() {
        match ch {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or("unbalanced parentheses")?,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(ch);
    }
    if depth != 0 {
        return Err("unbalanced parentheses".into());
    }
    parts.push(current);
    let req = |key: &str, operator: &str, values: Option<Vec<String>>| -> Result<NodeSelectorRequirement, String> {
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(format!("{key:?} is not a label key"));
        }
        Ok(NodeSelectorRequirement {
            key: key.to_string(),
            operator: operator.to_string(),
            values,
        })
    };
    let mut exprs = Vec::new();
    for part in parts.iter().map(|p| p.trim()) {
        if part.is_empty() {
            return Err("an empty requirement".into());
        }
        let set = |rest: &str| -> Result<Vec<String>, String> {
            let inner = rest
                .trim()
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| format!("{part:?}: the values go in parentheses"))?;
            Ok(inner
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect())
        };
        exprs.push(if let Some((k, rest)) = part.split_once(" notin ") {
            req(k, "NotIn", Some(set(rest)?))?
        } else if let Some((k, rest)) = part.split_once(" in ") {
            req(k, "In", Some(set(rest)?))?
        } else if let Some((k, v)) = part.split_once("!=") {
            req(k, "NotIn", Some(vec![v.trim().to_string()]))?
        } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
            req(k, "In", Some(vec![v.trim().to_string()]))?
        } else if let Some(k) = part.strip_prefix('!') {
            req(k, "DoesNotExist", None)?
        } else {
            req(part, "Exists", None)?
        });
    }
    Ok(NodeSelectorTerm {
        match_expressions: Some(exprs),
        match_fields: None,
    })
}

/// The first StorageOSCluster in the YAML file `path`.
fn cluster_in(path: &std::path::Path) -> Result<(String, StorageOSCluster), Error> {
    let shown = path.display().to_string();
    let fail = |message: String| Error::File {
        path: shown.clone(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let value = serde_json::Value::deserialize(doc)
            .map_err(|e| fail(format!("document {}: not valid YAML: {e}", i + 1)))?;
        if value["kind"] == "StorageOSCluster" {
            let c = serde_json::from_value(value)
                .map_err(|e| fail(format!("document {}: not a valid StorageOSCluster: {e}", i + 1)))?;
            return Ok((shown, c));
        }
    }
    Err(fail(
        "no StorageOSCluster (apiVersion storageos.com/v1) in this file; give one, or use --node-selector".into(),
    ))
}

/// Runs every check.
pub async fn collect(client: &Client, namespace: &str, args: &PreflightArgs) -> Result<Report, Error> {
    let read = |what: &'static str| move |source| Error::Read { what, source };
    let lp = ListParams::default();
    let mut checks = Vec::new();

    let version = client
        .apiserver_version()
        .await
        .map_err(read("read the Kubernetes version"))?;
    checks.push(kubernetes_version(&version.git_version));

    let file = args.filename.as_deref().map(cluster_in).transpose()?;
    let clusters = super::list_or_none::<StorageOSCluster>(client).await;
    let selection = selection(file.as_ref(), args.node_selector.as_deref(), &clusters)?;
    let nodes = super::list_all::<Node>(client).await.map_err(read("list Nodes"))?;
    let selected = selection.select(&nodes);
    let used: Vec<Node> = nodes
        .iter()
        .filter(|n| selected.contains(&n.name_any()))
        .cloned()
        .collect();
    checks.push(nodes_check(&selection, &selected, nodes.len()));
    for node in &used {
        checks.extend(node_api_checks(node));
    }

    // The cluster whose etcd to check: the one in -f, else the installed one.
    let wanted: Vec<StorageOSCluster> = match &file {
        Some((_, c)) => vec![c.clone()],
        None => clusters.clone(),
    };
    let endpoints = args
        .etcd_endpoints
        .clone()
        .or_else(|| wanted.iter().find_map(|c| c.spec.kv_backend.as_ref()?.address.clone()));
    let tls_ref = match &args.etcd_tls_secret {
        Some(name) => Some((
            name.clone(),
            args.etcd_tls_secret_namespace
                .clone()
                .unwrap_or_else(|| namespace.to_string()),
        )),
        None if args.etcd_endpoints.is_none() => wanted
            .first()
            .and_then(|c| crate::render::defaults::etcd_tls_secret_ref(&c.spec)),
        None => None,
    };
    match etcd_tls(client, tls_ref).await {
        Ok(tls) => checks.extend(etcd_checks(endpoints.as_deref(), args.etcd_timeout, tls.as_ref()).await),
        Err(c) => checks.push(c),
    }

    let deployments = super::list_all::<Deployment>(client)
        .await
        .map_err(read("list Deployments"))?;
    let crds = super::list_all::<CustomResourceDefinition>(client)
        .await
        .map_err(read("list CustomResourceDefinitions"))?;
    let mirrors = Api::<StorageOSNode>::all(client.clone())
        .list(&lp)
        .await
        .map(|l| l.items.len())
        .unwrap_or(0);
    checks.extend(leftovers(&deployments, &crds, &clusters, &nodes, mirrors));

    let ns = Api::<Namespace>::all(client.clone())
        .get_opt(&args.storageos_namespace)
        .await
        .map_err(read("read the StorageOS namespace"))?;
    checks.push(pod_security(&args.storageos_namespace, ns.as_ref()));

    let drivers = super::list_all::<CSIDriver>(client)
        .await
        .map_err(read("list CSIDrivers"))?;
    let classes = super::list_all::<StorageClass>(client)
        .await
        .map_err(read("list StorageClasses"))?;
    checks.extend(storage_conflicts(&drivers, &classes, !clusters.is_empty()));

    let pods = super::list_all::<Pod>(client).await.map_err(read("list Pods"))?;
    checks.push(host_ports(&pods, &selected));

    if args.node_checks {
        let opts = node_checks::Options {
            image: args.image.clone(),
            namespace: args.storageos_namespace.clone(),
            timeout: args.node_check_timeout,
        };
        checks.extend(node_checks::run(client, &used, &opts).await);
    }

    Ok(Report {
        checks,
        not_checked: if args.node_checks { "" } else { NOT_CHECKED },
    })
}

/// Which nodes StorageOS will use, and why: FAIL when none.
fn nodes_check(selection: &Selection, selected: &BTreeSet<String>, total: usize) -> Check {
    const SHOWN: usize = 10;
    let mut names: Vec<&str> = selected.iter().map(String::as_str).take(SHOWN).collect();
    let more = selected.len().saturating_sub(SHOWN);
    let more_text = format!("{more} more");
    if more > 0 {
        names.push(&more_text);
    }
    if total == 0 {
        return check("nodes", Verdict::Fail, "the cluster has no nodes", "add nodes");
    }
    if selected.is_empty() {
        return check(
            "nodes",
            Verdict::Fail,
            format!("none of the {total} node(s) is selected ({})", selection.source),
            "check the nodeSelectorTerms and tolerations (or --node-selector) against the nodes' labels and taints",
        );
    }
    pass(
        "nodes",
        format!(
            "StorageOS uses {} of {total} node(s): {} ({})",
            selected.len(),
            names.join(", "),
            selection.source
        ),
    )
}

/// The etcd TLS material from the Secret `(name, namespace)`, or a FAIL saying why not.
async fn etcd_tls(client: &Client, secret: Option<(String, String)>) -> Result<Option<etcd::Tls>, Check> {
    let Some((name, ns)) = secret else {
        return Ok(None);
    };
    let fail = |message: String| {
        check(
            "etcd-tls",
            Verdict::Fail,
            message,
            format!(
                "kubectl -n {ns} create secret generic {name} --from-file=etcd-client-ca.crt=CA --from-file=etcd-client.crt=CERT --from-file=etcd-client.key=KEY"
            ),
        )
    };
    match Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns)
        .get_opt(&name)
        .await
    {
        Ok(Some(s)) => etcd::Tls::from_secret(&s).map(Some).map_err(|e| fail(e.to_string())),
        Ok(None) => Err(fail(format!("the etcd TLS Secret {ns}/{name} does not exist"))),
        Err(e) => Err(fail(format!("cannot read the etcd TLS Secret {ns}/{name}: {e}"))),
    }
}

/// A put/get/delete on every endpoint (over TLS with `tls`).
pub async fn etcd_checks(endpoints: Option<&str>, timeout: Duration, tls: Option<&etcd::Tls>) -> Vec<Check> {
    let Some(list) = endpoints else {
        return vec![check(
            "etcd",
            Verdict::Warn,
            "no etcd endpoints given: not checked",
            "run preflight with --etcd-endpoints http://HOST:PORT (reachable from here)",
        )];
    };
    let endpoints = match etcd::parse_endpoints(list) {
        Ok(e) => e,
        Err(e) => {
            return vec![check(
                "etcd",
                Verdict::Fail,
                e.to_string(),
                "give --etcd-endpoints as http(s)://HOST:PORT[,http(s)://HOST:PORT...]",
            )];
        }
    };
    let mut out = Vec::new();
    for endpoint in endpoints {
        let name = format!("etcd/{endpoint}");
        out.push(match etcd::check(&endpoint, timeout, tls).await {
            Ok(took) => pass(
                name,
                format!("put, get and delete under {} in {} ms", etcd::PREFIX, took.as_millis()),
            ),
            Err(e) => check(
                name,
                Verdict::Fail,
                e.to_string(),
                "make etcd reachable at this address from here (kubectl port-forward for an in-cluster etcd), \
                 fix the address, check that etcd is healthy, or for https give --etcd-tls-secret",
            ),
        });
    }
    out
}

/// The report as a table: CHECK, RESULT, MESSAGE, FIX.
pub fn table(report: &Report) -> String {
    let head = ["CHECK", "RESULT", "MESSAGE", "FIX"];
    let rows: Vec<[String; 4]> = report
        .checks
        .iter()
        .map(|c| [c.check.clone(), c.result.to_string(), c.message.clone(), c.fix.clone()])
        .collect();
    let mut out = super::status::columns(&head, &rows);
    let counts = |v| report.checks.iter().filter(|c| c.result == v).count();
    out.push_str(&format!(
        "\n{} passed, {} skipped, {} warnings, {} failed.\n",
        counts(Verdict::Pass),
        counts(Verdict::Skip),
        counts(Verdict::Warn),
        counts(Verdict::Fail),
    ));
    if !report.not_checked.is_empty() {
        out.push_str(report.not_checked);
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(name: &str, labels: serde_json::Value, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}}))
            .unwrap()
    }

    fn nodes() -> Vec<Node> {
        vec![
            node("a", json!({"role": "storage", "zone": "1"}), json!([])),
            node("b", json!({"role": "storage", "zone": "2"}), json!([])),
            node("c", json!({"role": "compute"}), json!([])),
            node(
                "cp",
                json!({"role": "storage"}),
                json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
            ),
        ]
    }

    fn names(s: &BTreeSet<String>) -> Vec<&str> {
        s.iter().map(String::as_str).collect()
    }

    fn cluster(mut spec: serde_json::Value) -> StorageOSCluster {
        spec["secretRefName"] = json!("s");
        spec["secretRefNamespace"] = json!("storageos");
        serde_json::from_value(json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": "storageos", "namespace": "storageos"},
            "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn node_selectors_parse_as_kubectl_reads_them() {
        let exprs = |s| {
            parse_node_selector(s)
                .unwrap()
                .match_expressions
                .unwrap()
                .into_iter()
                .map(|r| (r.key, r.operator, r.values.unwrap_or_default()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            exprs("role=storage"),
            [("role".into(), "In".into(), vec!["storage".to_string()])]
        );
        assert_eq!(
            exprs("a==1, b!=2,c,!d"),
            [
                ("a".into(), "In".into(), vec!["1".to_string()]),
                ("b".into(), "NotIn".into(), vec!["2".to_string()]),
                ("c".into(), "Exists".into(), vec![]),
                ("d".into(), "DoesNotExist".into(), vec![]),
            ]
        );
        assert_eq!(
            exprs("zone in (1, 2),role notin (compute)"),
            [
                ("zone".into(), "In".into(), vec!["1".to_string(), "2".to_string()]),
                ("role".into(), "NotIn".into(), vec!["compute".to_string()]),
            ]
        );
        for bad in ["", "a=1,", "zone in 1", "zone in (1", "a b=c"] {
            assert!(parse_node_selector(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn the_selection_is_the_clusters_then_the_selector_then_every_tolerated_node() {
        let installed = cluster(json!({"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "role", "operator": "In", "values": ["storage"]}]}]}));
        let sel = selection(None, None, std::slice::from_ref(&installed)).unwrap();
        assert_eq!(names(&sel.select(&nodes())), ["a", "b"]);
        assert!(
            sel.source.contains("StorageOSCluster storageos/storageos"),
            "{}",
            sel.source
        );
        // The cluster's tolerations count, as for its DaemonSet.
        let tolerant = cluster(json!({
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "role", "operator": "In", "values": ["storage"]}]}],
            "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}));
        let file = ("c.yaml".to_string(), tolerant);
        let sel = selection(Some(&file), None, std::slice::from_ref(&installed)).unwrap();
        assert_eq!(names(&sel.select(&nodes())), ["a", "b", "cp"]);
        assert!(sel.source.contains("c.yaml"));
        let sel = selection(None, Some("zone=2"), std::slice::from_ref(&installed)).unwrap();
        assert_eq!(names(&sel.select(&nodes())), ["b"]);
        assert!(matches!(
            selection(None, Some("zone in 2"), &[]),
            Err(Error::Selector { .. })
        ));
        let sel = selection(None, None, &[]).unwrap();
        assert_eq!(names(&sel.select(&nodes())), ["a", "b", "c"]);
    }

    #[test]
    fn the_nodes_line_names_the_selection_and_fails_on_none() {
        let sel = selection(None, Some("zone=9"), &[]).unwrap();
        let none = nodes_check(&sel, &sel.select(&nodes()), 4);
        assert_eq!(none.result, Verdict::Fail);
        assert!(none.message.contains("--node-selector zone=9"), "{}", none.message);
        let sel = selection(None, Some("role=storage"), &[]).unwrap();
        let some = nodes_check(&sel, &sel.select(&nodes()), 4);
        assert_eq!(some.result, Verdict::Pass);
        assert!(
            some.message.starts_with("StorageOS uses 2 of 4 node(s): a, b"),
            "{}",
            some.message
        );
    }

    #[test]
    fn a_cluster_file_is_read_and_its_absence_said() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\napiVersion: storageos.com/v1\nkind: StorageOSCluster\nmetadata: {name: x}\nspec: {secretRefName: s, secretRefNamespace: x}\n",
        )
        .unwrap();
        assert_eq!(cluster_in(&path).unwrap().1.metadata.name.as_deref(), Some("x"));
        std::fs::write(&path, "kind: Secret\n").unwrap();
        let e = cluster_in(&path).unwrap_err().to_string();
        assert!(
            e.contains("no StorageOSCluster") && e.contains("--node-selector"),
            "{e}"
        );
    }
}
