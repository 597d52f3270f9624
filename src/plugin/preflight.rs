//! `kubectl storageos preflight`: is this cluster ready for StorageOS? Every check reads the
//! Kubernetes API (or, for etcd, talks to the endpoints); none starts a pod. The result is a
//! table (or JSON/YAML) of PASS / WARN / FAIL, each not-PASS with a one-line fix, and the
//! command fails when any check FAILs. The thresholds and why are in docs/plugin.md.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ListParams};
use serde::Serialize;

use crate::checks::etcd;
pub use crate::checks::{Check, Verdict};
use crate::checks::{
    check, host_ports, kubernetes_version, leftovers, node_checks, pass, pod_security, storage_conflicts,
};
use crate::crd::{StorageOSCluster, StorageOSNode};

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
        "\n{} passed, {} warnings, {} failed.\n{}\n",
        counts(Verdict::Pass),
        counts(Verdict::Warn),
        counts(Verdict::Fail),
        report.not_checked
    ));
    out
}
