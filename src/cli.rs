//! Command-line interface: one binary, one subcommand per role.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// StorageOS operator for Kubernetes.
///
/// Installs and runs StorageOS from a StorageOSCluster resource, upgrades it with a
/// StorageOSUpgrade, runs node tasks with a Job, and carries the StorageOS api-manager.
#[derive(Parser, Debug)]
#[command(name = "storageos-operator", version, propagate_version = true)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Console)]
    pub log_format: LogFormat,

    /// Log filter, in `tracing` directive syntax (for example `info` or
    /// `storageos_operator=debug,kube=info`).
    #[arg(long, global = true, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,

    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Console,
    /// One JSON object per line.
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the operator: reconcile StorageOSCluster, StorageOSUpgrade and Job resources.
    ///
    /// Leader-elected; serves /metrics, /healthz and /readyz.
    Run(RunArgs),

    /// Run the StorageOS api-manager: fencing, shared volumes, label sync, node and namespace
    /// clean-up controllers, and the pod and PVC mutating webhooks.
    ///
    /// Accepts the Go api-manager's flags with one or two leading dashes.
    ApiManager(Box<ApiManagerArgs>),

    /// Print every object the operator would apply for a StorageOSCluster, without a cluster.
    Render(RenderArgs),

    /// Print the CustomResourceDefinitions (StorageOSCluster, StorageOSUpgrade, Job and the
    /// read-only api.storageos.com Node and Volume mirrors).
    Crds(CrdsArgs),

    /// Write the install manifests: `operator.yaml` (CRDs, namespace, RBAC, Deployment and
    /// metrics Service), as committed under `deploy/`, and with `--olm-dir` the OLM bundle, as
    /// under `olm/`.
    Manifests(ManifestsArgs),

    /// Run the StorageOS control-plane API simulator, for demos and tests (not in release
    /// builds: feature `simulator`).
    #[cfg(feature = "simulator")]
    Simulate(SimulateArgs),
}

impl Command {
    /// The default trace service name of the processes that can export traces (`run` and
    /// `api-manager`, named as the Go operator and api-manager named themselves); None for the
    /// one-shot commands and the simulator.
    pub fn trace_service(&self) -> Option<&'static str> {
        match self {
            Self::Run(_) => Some("storageos-operator"),
            Self::ApiManager(_) => Some("api-manager"),
            _ => None,
        }
    }
}

/// Arguments of `run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Kubeconfig to use; without it `KUBECONFIG`, `~/.kube/config`, then the pod's
    /// ServiceAccount.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// Address of the metrics and health server (`HOST:PORT`, or `:PORT` for every interface).
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: String,

    /// Override the StorageOS API address (for example `http://127.0.0.1:5705`) instead of the
    /// cluster's Service; useful where Services are not routable, such as the demo.
    #[arg(long, env = "STORAGEOS_ENDPOINT")]
    pub storageos_endpoint: Option<String>,

    /// Namespace of the leader-election Lease (the operator's own namespace in a cluster).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leader_election_namespace: String,

    /// This replica's identity in leader election.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// The operator's own image, which runs the api-manager unless a cluster sets
    /// `images.apiManagerContainer`.
    #[arg(long, env = "OPERATOR_IMAGE", default_value = crate::render::DEFAULT_OPERATOR_IMAGE)]
    pub operator_image: String,

    /// For demos and tests: wait this long (for example `2s`) before each step of a
    /// StorageOSUpgrade, so its progress can be followed, or the operator stopped inside any
    /// phase to show that it resumes. Leave unset in production.
    #[arg(long, default_value = "0s", value_parser = crate::duration::parse_flag)]
    pub upgrade_step_delay: std::time::Duration,

    /// Host paths a `jobs.storageos.com` Job may mount, comma-separated: `P` allows exactly `P`,
    /// `P/*` allows `P` and anything under it. Admission (the CRD) allows only the default;
    /// this flag can narrow it.
    #[arg(long, env = "JOB_HOST_PATHS", default_value = crate::job::hostpath::DEFAULT)]
    pub job_host_paths: crate::job::hostpath::AllowList,

    /// Namespaces whose StorageOSClusters, StorageOSUpgrades and Jobs the operator honours,
    /// comma-separated (default: its own namespace, `--leader-election-namespace`). Objects
    /// elsewhere get Ready=False with reason NamespaceNotAllowed. A cluster's Secret references
    /// and operand namespace may name only its own namespace, these (and kube-system for the
    /// operands). Creating these kinds is cluster-admin-equivalent: list only namespaces whose
    /// every editor may act as cluster-admin. `*` trusts every namespace.
    #[arg(long, env = "WATCH_NAMESPACES")]
    pub watch_namespaces: Option<crate::runtime::trusted::TrustedNamespaces>,
}

impl RunArgs {
    /// The trusted namespaces: `--watch-namespaces`, else the operator's own namespace.
    pub fn trusted_namespaces(&self) -> crate::runtime::trusted::TrustedNamespaces {
        self.watch_namespaces
            .clone()
            .unwrap_or_else(|| crate::runtime::trusted::TrustedNamespaces::only(&self.leader_election_namespace))
    }
}

pub use crate::apimanager::flags::ApiManagerArgs;

/// Arguments of `render`.
#[derive(Args, Debug)]
pub struct RenderArgs {
    /// File holding the StorageOSCluster (YAML or JSON). It may also hold the Secrets it names.
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,

    /// File holding the Secret that spec.secretRefName names (and, optionally, the etcd TLS
    /// Secret that spec.tlsEtcdSecretRefName names). Repeat for several files. Without it, the
    /// Secrets copied from it are not printed.
    #[arg(long)]
    pub secret: Vec<PathBuf>,

    /// Kubernetes version to render for, for example `1.34.2`.
    #[arg(long)]
    pub k8s_version: Option<String>,

    /// Print Secret values instead of redacting them.
    #[arg(long)]
    pub show_secrets: bool,

    /// Image of the operator, which runs the api-manager unless spec.images.apiManagerContainer
    /// is set.
    #[arg(long, env = "OPERATOR_IMAGE")]
    pub operator_image: Option<String>,

    /// Render as if the ServiceMonitor CRD (monitoring.coreos.com/v1) were installed.
    #[arg(long)]
    pub service_monitor: bool,
}

/// Arguments of `crds`.
#[derive(Args, Debug)]
pub struct CrdsArgs {
    /// Write one file per CRD into this directory (created if missing) instead of printing them.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
}

/// Arguments of `manifests`.
#[derive(Args, Debug)]
pub struct ManifestsArgs {
    /// Write `operator.yaml` into this directory (created if missing; for example `deploy`)
    /// instead of printing it, with the kustomize base (`kustomization.yaml`,
    /// `kustomizeconfig.yaml`) and the Helm chart (`helm/storageos-operator/`) made from the same
    /// objects. Nothing is written outside it.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,

    /// Also write the OLM bundle (`manifests/`, `metadata/`, `bundle.Dockerfile`) into this
    /// directory (created if missing). The repository's own files: `--out-dir deploy --olm-dir
    /// olm`.
    #[arg(long)]
    pub olm_dir: Option<PathBuf>,

    /// Image of the operator the Deployment runs (`REGISTRY/NAME:TAG`, `REGISTRY/NAME@DIGEST` or
    /// both): the one place that sets it for operator.yaml, the chart's values and the bundle.
    #[arg(long, default_value = crate::render::DEFAULT_OPERATOR_IMAGE)]
    pub image: String,
}

/// Arguments of `simulate`.
#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// Address to listen on.
    #[arg(long, env = "STORAGEOS_SIM_ADDR", default_value = "127.0.0.1:5705")]
    pub listen: String,

    /// Username the simulator accepts at login.
    #[arg(long, default_value = "storageos")]
    pub username: String,

    /// Password the simulator accepts at login.
    #[arg(long, default_value = "storageos")]
    pub password: String,

    /// Lifetime of issued tokens, for example `300s`, `5m` or `1h`.
    #[arg(long, default_value = "5m", value_parser = crate::duration::parse_flag)]
    pub token_ttl: std::time::Duration,

    /// Register a StorageOS node (online) for every Running pod of the StorageOS node
    /// DaemonSet in the cluster this kubeconfig points at.
    #[arg(long, conflicts_with = "in_cluster")]
    pub kubeconfig: Option<PathBuf>,

    /// The same, in the cluster the simulator runs in as a pod (its ServiceAccount needs to
    /// list and watch pods); outside a pod, the cluster of `KUBECONFIG`.
    #[arg(long)]
    pub in_cluster: bool,
}

/// Rewrites the Go flag spelling `-flag[=value]` of the api-manager into `--flag[=value]`, so
/// that existing Deployments keep working. Only arguments after the `api-manager` subcommand
/// are touched, and a lone `-` or a negative number is left alone.
pub fn normalize_go_flags<I: IntoIterator<Item = String>>(args: I) -> Vec<String> {
    let mut seen_api_manager = false;
    args.into_iter()
        .map(|arg| {
            if !seen_api_manager {
                seen_api_manager = arg == "api-manager";
                return arg;
            }
            crate::apimanager::flags::go_flag(arg)
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn go_single_dash_flags_are_accepted_after_api_manager() {
        let got = normalize_go_flags(args("bin -v api-manager -api-endpoint=x --api-endpoint y -5 -"));
        assert_eq!(got, args("bin -v api-manager --api-endpoint=x --api-endpoint y -5 -"));
        let cli = Cli::try_parse_from(normalize_go_flags(args(
            "bin api-manager -api-endpoint=http://sos:5705",
        )))
        .expect("parses");
        match cli.command {
            Command::ApiManager(a) => assert_eq!(a.api_endpoint, "http://sos:5705"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn only_the_operator_namespace_is_trusted_unless_told_otherwise() {
        let run = |extra: &str| match Cli::try_parse_from(args(&format!(
            "bin run --leader-election-namespace storageos-operator {extra}"
        )))
        .expect("parses")
        .command
        {
            Command::Run(a) => a.trusted_namespaces(),
            other => panic!("unexpected {other:?}"),
        };
        let own = run("");
        assert!(own.allows("storageos-operator") && !own.allows("default") && !own.allows("tenant"));
        let wider = run("--watch-namespaces storageos-operator,default");
        assert!(wider.allows("default") && !wider.allows("tenant"));
        assert!(Cli::try_parse_from(args("bin run --watch-namespaces Tenant")).is_err());
    }

    #[test]
    fn flags_before_the_subcommand_are_untouched() {
        assert_eq!(normalize_go_flags(args("bin -h")), args("bin -h"));
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
