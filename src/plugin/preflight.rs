//! `kubectl storageos preflight`: is this cluster ready for StorageOS? Every check reads the
//! Kubernetes API (or, for etcd, talks to the endpoints); none starts a pod. The result is a
//! table (or JSON/YAML) of PASS / WARN / FAIL, each not-PASS with a one-line fix, and the
//! command fails when any check FAILs. The thresholds and why are in docs/plugin.md.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::etcd;
use crate::crd::{StorageOSCluster, StorageOSNode};
use crate::render::MIN_KUBERNETES;
use crate::storageos::kube::{CSI_DRIVER, CSI_NODE_ANNOTATION};

/// The newest Kubernetes minor the project is tested on (hack/versions.env).
pub const TESTED_KUBERNETES: (u64, u64) = (1, 36);
/// StorageOS's stated minimum per node: one core...
pub const MIN_CPU_MILLIS: i64 = 1000;
/// ...and 2 GiB of memory.
pub const MIN_MEMORY_BYTES: i64 = 2 << 30;
/// The host ports the StorageOS node container listens on.
pub const HOST_PORTS: std::ops::RangeInclusive<i32> = 5701..=5711;
/// The Pod Security label of a namespace.
pub const POD_SECURITY_ENFORCE: &str = "pod-security.kubernetes.io/enforce";
/// The default-class annotation of a StorageClass.
const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// Checks that need a pod on each node, and so are not done.
pub const NOT_CHECKED: &str = "Not checked (they need a pod on each node): the kernel modules \
    target_core_mod, tcm_loop, target_core_user, configfs and uio; mount propagation; free space \
    under /var/lib/storageos; that nodes reach each other on ports 5701-5711.";

#[derive(Debug, clap::Args)]
#[command(
    about = "Check a cluster before (or after) installing StorageOS",
    long_about = "Check a cluster before (or after) installing StorageOS.\n\n\
    Checks: the Kubernetes version; on every Ready node, the OS, architecture (StorageOS ships \
    amd64 only), kernel version, container runtime and allocatable CPU and memory (1 core and \
    2 GiB at least); the etcd endpoints (a put, get and delete of one key under \
    /storageos-preflight/ on each); leftovers of an earlier install (the Go operator, old CRD \
    versions, nodes that ran StorageOS); the Pod Security level of the namespace StorageOS runs \
    in (privileged needed); a conflicting CSI driver or default StorageClass; pods holding host \
    ports 5701-5711.\n\n\
    Not checked (they need a pod on each node): the kernel modules target_core_mod, tcm_loop, \
    target_core_user, configfs and uio; mount propagation; free space under /var/lib/storageos; \
    that nodes reach each other on ports 5701-5711.\n\n\
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
}

/// The verdict of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Pass,
    Warn,
    Fail,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Pass => "PASS",
            Self::Warn => "WARN",
            Self::Fail => "FAIL",
        })
    }
}

/// One check's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    /// What was checked (`kubernetes-version`, `node/NAME/arch`, `etcd/URL`, ...).
    pub check: String,
    pub result: Verdict,
    /// What was found.
    pub message: String,
    /// What to do about it (empty for PASS).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fix: String,
}

fn check(name: impl Into<String>, result: Verdict, message: impl Into<String>, fix: impl Into<String>) -> Check {
    Check {
        check: name.into(),
        result,
        message: message.into(),
        fix: fix.into(),
    }
}

fn pass(name: impl Into<String>, message: impl Into<String>) -> Check {
    check(name, Verdict::Pass, message, "")
}

/// The report: every check, and what was not checked.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub checks: Vec<Check>,
    #[serde(rename = "notChecked")]
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

    let nodes = super::list_all::<Node>(client).await.map_err(read("list Nodes"))?;
    for node in &nodes {
        checks.extend(node_checks(node));
    }
    if nodes.is_empty() {
        checks.push(check("nodes", Verdict::Fail, "the cluster has no nodes", "add nodes"));
    }

    let clusters = super::list_or_none::<StorageOSCluster>(client).await;
    let endpoints = args.etcd_endpoints.clone().or_else(|| {
        clusters
            .iter()
            .find_map(|c| c.spec.kv_backend.as_ref()?.address.clone())
    });
    let tls_ref = match &args.etcd_tls_secret {
        Some(name) => Some((
            name.clone(),
            args.etcd_tls_secret_namespace
                .clone()
                .unwrap_or_else(|| namespace.to_string()),
        )),
        None if args.etcd_endpoints.is_none() => clusters
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
    checks.push(host_ports(&pods));

    Ok(Report {
        checks,
        not_checked: NOT_CHECKED,
    })
}

/// The Kubernetes version against [`MIN_KUBERNETES`] and [`TESTED_KUBERNETES`].
pub fn kubernetes_version(git_version: &str) -> Check {
    let name = "kubernetes-version";
    let Ok(v) = crate::render::parse_k8s_version(git_version) else {
        return check(
            name,
            Verdict::Warn,
            format!("cannot read the version {git_version:?}"),
            "make sure the cluster runs Kubernetes 1.33 or newer",
        );
    };
    if v < MIN_KUBERNETES {
        return check(
            name,
            Verdict::Fail,
            format!("Kubernetes {v} is older than the oldest supported, {MIN_KUBERNETES}"),
            format!("upgrade the cluster to Kubernetes {MIN_KUBERNETES} or newer"),
        );
    }
    let (major, minor) = TESTED_KUBERNETES;
    if (v.major, v.minor) > (major, minor) {
        return check(
            name,
            Verdict::Warn,
            format!("Kubernetes {v} is newer than the newest tested, {major}.{minor}"),
            "expect it to work; report anything that does not",
        );
    }
    pass(name, format!("Kubernetes {v}"))
}

/// OS, architecture, kernel, runtime and allocatable resources of one node.
pub fn node_checks(node: &Node) -> Vec<Check> {
    let name = node.name_any();
    let status = node.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if !ready {
        return vec![check(
            format!("node/{name}"),
            Verdict::Warn,
            "not Ready: not checked",
            "make it Ready, or make sure StorageOS is not scheduled on it (spec.nodeSelectorTerms)",
        )];
    }
    let info = status.node_info.unwrap_or_default();
    let key = |what: &str| format!("node/{name}/{what}");
    let mut out = Vec::new();
    out.push(if info.operating_system == "linux" {
        pass(key("os"), format!("linux ({})", or_unknown(&info.os_image)))
    } else {
        check(
            key("os"),
            Verdict::Fail,
            format!("operating system {:?}", info.operating_system),
            "StorageOS runs on Linux nodes only: keep it off this node with spec.nodeSelectorTerms",
        )
    });
    out.push(if info.architecture == "amd64" {
        pass(key("arch"), "amd64")
    } else {
        check(
            key("arch"),
            Verdict::Fail,
            format!(
                "architecture {:?}: StorageOS ships amd64 images only",
                info.architecture
            ),
            "keep StorageOS off this node with spec.nodeSelectorTerms (kubernetes.io/arch=amd64), or use amd64 nodes",
        )
    });
    out.push(kernel(&key("kernel"), &info.kernel_version));
    out.push(if info.container_runtime_version.is_empty() {
        check(
            key("runtime"),
            Verdict::Warn,
            "the node reports no container runtime",
            "check the kubelet on this node",
        )
    } else {
        pass(key("runtime"), info.container_runtime_version.clone())
    });
    let alloc = status.allocatable.unwrap_or_default();
    let cpu = alloc.get("cpu").and_then(cpu_millis);
    let memory = alloc.get("memory").and_then(memory_bytes);
    out.push(match (cpu, memory) {
        (Some(c), Some(m)) if c >= MIN_CPU_MILLIS && m >= MIN_MEMORY_BYTES => pass(
            key("resources"),
            format!(
                "allocatable {} CPU, {} memory",
                show(&alloc, "cpu"),
                show(&alloc, "memory")
            ),
        ),
        (Some(_), Some(_)) => check(
            key("resources"),
            Verdict::Fail,
            format!(
                "allocatable {} CPU, {} memory: below StorageOS's minimum of 1 CPU and 2 GiB",
                show(&alloc, "cpu"),
                show(&alloc, "memory")
            ),
            "use a larger node, or keep StorageOS off it with spec.nodeSelectorTerms",
        ),
        _ => check(
            key("resources"),
            Verdict::Warn,
            "the node reports no allocatable CPU or memory",
            "check the kubelet on this node",
        ),
    });
    out
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "OS image unknown" } else { s }
}

fn show(alloc: &BTreeMap<String, Quantity>, key: &str) -> String {
    alloc.get(key).map(|q| q.0.clone()).unwrap_or_else(|| "?".into())
}

/// The kernel version: 4 or newer passes; 3.x works with at most 256 volumes per node.
fn kernel(name: &str, version: &str) -> Check {
    let major = version.split(['.', '-']).next().and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m) if m >= 4 => pass(name, version),
        Some(3) => check(
            name,
            Verdict::Warn,
            format!("kernel {version}: StorageOS mounts at most 256 volumes per node on 3.x"),
            "upgrade the node's kernel to 4.x or newer for up to 4096 volumes",
        ),
        Some(_) => check(
            name,
            Verdict::Fail,
            format!("kernel {version} is too old for StorageOS"),
            "upgrade the node's kernel to 4.x or newer",
        ),
        None => check(
            name,
            Verdict::Warn,
            format!("cannot read the kernel version {version:?}"),
            "check `uname -r` on the node: StorageOS needs Linux 3.x or newer (4.x recommended)",
        ),
    }
}

/// A CPU quantity in millicores (`2`, `1500m`).
pub fn cpu_millis(q: &Quantity) -> Option<i64> {
    let s = q.0.trim();
    if let Some(m) = s.strip_suffix('m') {
        return m.parse().ok();
    }
    s.parse::<f64>().ok().map(|c| (c * 1000.0) as i64)
}

/// A memory quantity in bytes (`2Gi`, `2048Mi`, `2G`, `2147483648`).
pub fn memory_bytes(q: &Quantity) -> Option<i64> {
    let s = q.0.trim();
    let units: [(&str, i64); 10] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
    ];
    for (suffix, factor) in units {
        if let Some(n) = s.strip_suffix(suffix) {
            return n.parse::<f64>().ok().map(|n| (n * factor as f64) as i64);
        }
    }
    s.parse::<f64>().ok().map(|n| n as i64)
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

/// The Go operator, old CRD versions, and nodes that ran StorageOS without a cluster now.
pub fn leftovers(
    deployments: &[Deployment],
    crds: &[CustomResourceDefinition],
    clusters: &[StorageOSCluster],
    nodes: &[Node],
    mirrors: usize,
) -> Vec<Check> {
    let mut out = Vec::new();
    let go: Vec<String> = deployments
        .iter()
        .filter(|d| d.name_any() == "storageos-cluster-operator")
        .map(|d| format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any()))
        .collect();
    out.push(if go.is_empty() {
        pass("leftovers/go-operator", "no Go cluster-operator found")
    } else {
        check(
            "leftovers/go-operator",
            Verdict::Warn,
            format!("the Go cluster-operator runs: {}", go.join(", ")),
            "scale it to 0 before installing; this operator adopts its cluster (docs/adoption.md)",
        )
    });
    let old: Vec<String> = crds
        .iter()
        .filter(|c| c.spec.group == "storageos.com")
        .flat_map(|c| {
            let stored = c
                .status
                .as_ref()
                .and_then(|s| s.stored_versions.clone())
                .unwrap_or_default();
            stored
                .into_iter()
                .filter(|v| v != "v1")
                .map(move |v| format!("{} {v}", c.name_any()))
        })
        .collect();
    out.push(if old.is_empty() {
        pass("leftovers/crd-versions", "no old storageos.com CRD versions stored")
    } else {
        check(
            "leftovers/crd-versions",
            Verdict::Warn,
            format!("old versions still stored: {}", old.join(", ")),
            "migrate the stored objects to v1, then remove the old versions from status.storedVersions",
        )
    });
    let ran: Vec<String> = nodes
        .iter()
        .filter(|n| {
            n.annotations()
                .get(CSI_NODE_ANNOTATION)
                .is_some_and(|v| v.contains(CSI_DRIVER))
        })
        .map(ResourceExt::name_any)
        .collect();
    out.push(if clusters.is_empty() && (!ran.is_empty() || mirrors > 0) {
        check(
            "leftovers/nodes",
            Verdict::Warn,
            format!(
                "no StorageOSCluster, but {} node(s) ran StorageOS ({}) and {mirrors} StorageOS node mirror(s) remain",
                ran.len(),
                ran.join(", ")
            ),
            "/var/lib/storageos on those nodes may hold an earlier cluster's data: reuse that cluster's etcd, \
             or clean the directory (a Job CR, deploy/examples/job-cleanup.yaml)",
        )
    } else if let Some(c) = clusters.first() {
        pass(
            "leftovers/nodes",
            format!(
                "StorageOSCluster {}/{} is installed ({})",
                c.namespace().unwrap_or_default(),
                c.name_any(),
                c.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default()
            ),
        )
    } else {
        pass("leftovers/nodes", "no node ran StorageOS")
    });
    out
}

/// StorageOS's node pods are privileged: the namespace must allow it.
pub fn pod_security(namespace: &str, ns: Option<&Namespace>) -> Check {
    let name = format!("pod-security/{namespace}");
    let level = ns.and_then(|n| n.labels().get(POD_SECURITY_ENFORCE).cloned());
    match (ns, level.as_deref()) {
        (None, _) => pass(
            name,
            "the namespace does not exist yet; the operator creates it (the cluster's default Pod Security level applies)",
        ),
        (Some(_), None | Some("privileged")) => pass(
            name,
            format!(
                "enforce level {}",
                level
                    .as_deref()
                    .unwrap_or("unset (privileged unless the cluster's default says otherwise)")
            ),
        ),
        (Some(_), Some(other)) => check(
            name,
            Verdict::Fail,
            format!("enforce level {other}: StorageOS's node pods are privileged and would be refused"),
            format!("kubectl label namespace {namespace} {POD_SECURITY_ENFORCE}=privileged --overwrite"),
        ),
    }
}

/// A CSI driver of StorageOS's name without a cluster, and more than one default StorageClass.
pub fn storage_conflicts(drivers: &[CSIDriver], classes: &[StorageClass], cluster_exists: bool) -> Vec<Check> {
    let mut out = Vec::new();
    let ours = drivers.iter().any(|d| d.name_any() == CSI_DRIVER);
    out.push(if ours && !cluster_exists {
        check(
            "csi-driver",
            Verdict::Warn,
            format!("CSIDriver {CSI_DRIVER} exists but no StorageOSCluster does (an earlier install?)"),
            format!("kubectl delete csidriver {CSI_DRIVER} (the operator creates its own)"),
        )
    } else {
        pass("csi-driver", format!("no conflicting {CSI_DRIVER} driver"))
    });
    let defaults: Vec<String> = classes
        .iter()
        .filter(|c| c.annotations().get(DEFAULT_CLASS).is_some_and(|v| v == "true"))
        .map(|c| format!("{} ({})", c.name_any(), c.provisioner))
        .collect();
    out.push(if defaults.len() > 1 {
        check(
            "default-storageclass",
            Verdict::Warn,
            format!("more than one default StorageClass: {}", defaults.join(", ")),
            format!("keep one: kubectl annotate storageclass NAME {DEFAULT_CLASS}-"),
        )
    } else {
        pass(
            "default-storageclass",
            match defaults.first() {
                Some(d) => format!("default StorageClass {d}; PVCs without a class keep using it"),
                None => "no default StorageClass".to_string(),
            },
        )
    });
    out
}

/// Pods other than StorageOS's holding host ports 5701-5711.
pub fn host_ports(pods: &[Pod]) -> Check {
    let mut taken = Vec::new();
    for pod in pods {
        if pod.labels().get("app").is_some_and(|a| a == "storageos") {
            continue;
        }
        let Some(spec) = &pod.spec else { continue };
        for c in &spec.containers {
            for p in c.ports.as_deref().unwrap_or_default() {
                if let Some(hp) = p.host_port.filter(|hp| HOST_PORTS.contains(hp)) {
                    taken.push(format!(
                        "{}/{} on {} holds {hp}",
                        pod.namespace().unwrap_or_default(),
                        pod.name_any(),
                        spec.node_name.as_deref().unwrap_or("(unscheduled)")
                    ));
                }
            }
        }
    }
    if taken.is_empty() {
        pass("host-ports", "no other pod holds host ports 5701-5711")
    } else {
        check(
            "host-ports",
            Verdict::Fail,
            taken.join("; "),
            "move those pods off StorageOS's nodes, or change their hostPort",
        )
    }
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
        "\n{} passed, {} warnings, {} failed.\n{}\n",
        counts(Verdict::Pass),
        counts(Verdict::Warn),
        counts(Verdict::Fail),
        report.not_checked
    ));
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(arch: &str, kernel: &str, cpu: &str, memory: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "allocatable": {"cpu": cpu, "memory": memory},
                "nodeInfo": {"architecture": arch, "operatingSystem": "linux", "kernelVersion": kernel,
                    "containerRuntimeVersion": "containerd://1.7.24", "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "bootID": "", "kubeProxyVersion": "", "kubeletVersion": "", "machineID": "", "systemUUID": ""}
            }
        }))
        .unwrap()
    }

    fn verdicts(checks: &[Check]) -> Vec<(String, Verdict)> {
        checks.iter().map(|c| (c.check.clone(), c.result)).collect()
    }

    #[test]
    fn a_realistic_amd64_node_passes() {
        let checks = node_checks(&node("amd64", "6.1.0-28-amd64", "4", "16Gi"));
        assert!(checks.iter().all(|c| c.result == Verdict::Pass), "{checks:#?}");
    }

    #[test]
    fn arm64_fails_with_a_fix() {
        let checks = node_checks(&node("arm64", "6.1.0", "4", "16Gi"));
        let arch = checks.iter().find(|c| c.check == "node/n1/arch").unwrap();
        assert_eq!(arch.result, Verdict::Fail);
        assert!(arch.fix.contains("nodeSelectorTerms"), "{}", arch.fix);
    }

    #[test]
    fn small_nodes_and_old_kernels() {
        let checks = node_checks(&node("amd64", "3.10.0-1160.el7.x86_64", "500m", "1Gi"));
        let v = verdicts(&checks);
        assert!(v.contains(&("node/n1/kernel".into(), Verdict::Warn)), "{v:?}");
        assert!(v.contains(&("node/n1/resources".into(), Verdict::Fail)), "{v:?}");
        let fake = node_checks(&node("amd64", "kwok-0.8.0", "4", "16Gi"));
        assert!(verdicts(&fake).contains(&("node/n1/kernel".into(), Verdict::Warn)));
    }

    #[test]
    fn not_ready_nodes_are_a_warning_only() {
        let mut n = node("arm64", "", "", "");
        n.status.as_mut().unwrap().conditions = None;
        assert_eq!(verdicts(&node_checks(&n)), [("node/n1".into(), Verdict::Warn)]);
    }

    #[test]
    fn quantities() {
        assert_eq!(cpu_millis(&Quantity("1500m".into())), Some(1500));
        assert_eq!(cpu_millis(&Quantity("32".into())), Some(32_000));
        assert_eq!(memory_bytes(&Quantity("2Gi".into())), Some(2 << 30));
        assert_eq!(memory_bytes(&Quantity("2048Mi".into())), Some(2 << 30));
        assert_eq!(memory_bytes(&Quantity("3G".into())), Some(3_000_000_000));
        assert_eq!(memory_bytes(&Quantity("1024".into())), Some(1024));
    }

    #[test]
    fn kubernetes_versions() {
        assert_eq!(kubernetes_version("v1.36.3").result, Verdict::Pass);
        assert_eq!(kubernetes_version("v1.32.0").result, Verdict::Fail);
        assert_eq!(kubernetes_version("v1.40.0").result, Verdict::Warn);
    }

    #[test]
    fn pod_security_levels() {
        let ns = |level: Option<&str>| -> Namespace {
            let labels = level.map(|l| json!({POD_SECURITY_ENFORCE: l})).unwrap_or(json!({}));
            serde_json::from_value(json!({"metadata": {"name": "x", "labels": labels}})).unwrap()
        };
        assert_eq!(pod_security("x", Some(&ns(None))).result, Verdict::Pass);
        assert_eq!(pod_security("x", Some(&ns(Some("privileged")))).result, Verdict::Pass);
        let c = pod_security("x", Some(&ns(Some("baseline"))));
        assert_eq!(c.result, Verdict::Fail);
        assert!(c.fix.contains("enforce=privileged"));
    }

    #[test]
    fn host_ports_held_by_others_fail() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "a"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": [{"containerPort": 5705, "hostPort": 5705}]}]}
        }))
        .unwrap();
        let c = host_ports(&[pod]);
        assert_eq!(c.result, Verdict::Fail);
        assert!(c.message.contains("a/p on n1 holds 5705"));
    }
}
