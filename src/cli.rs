//! Command-line interface: one binary, one subcommand per role.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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

    /// Preview what applying a StorageOSCluster would do to a cluster (create, change, prune,
    /// restarts), with server-side dry runs: nothing is written.
    Plan(PlanArgs),

    /// Print the CustomResourceDefinitions (StorageOSCluster, StorageOSUpgrade, Job and the
    /// read-only api.storageos.com Node and Volume mirrors).
    Crds(CrdsArgs),

    /// Write the install manifests: `operator.yaml` (CRDs, namespace, RBAC, Deployment, metrics
    /// and webhook Services, ValidatingWebhookConfiguration), as committed under `deploy/`, and
    /// with `--olm-dir` the OLM bundle, as under `olm/`.
    Manifests(ManifestsArgs),

    /// Hold a node for the drain gate: do nothing until SIGTERM, then exit 0 (the api-manager's
    /// guard pods run this; a PodDisruptionBudget on the pod is what holds a drain).
    DrainGuard,

    /// Check this node for StorageOS and print the findings as JSON (`kubectl storageos
    /// preflight --node-checks` runs it in a privileged pod on each node; not for direct use).
    #[command(hide = true)]
    NodeCheck(crate::checks::host::NodeCheckArgs),

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

pub use crate::apimanager::flags::ApiManagerArgs;
pub use crate::operator::RunArgs;
pub use crate::preview::PlanArgs;
pub use crate::render::RenderArgs;
#[cfg(feature = "simulator")]
pub use crate::simulate::SimulateArgs;
pub use crate::telemetry::LogFormat;

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
    fn the_plugins_node_check_pod_arguments_parse() {
        // What the plugin's node-check pod runs (its test pins the same list).
        let args = [
            "node-check",
            "--node",
            "n1",
            "--peers",
            "10.0.0.8,10.0.0.9",
            "--window",
            "20s",
        ];
        let cli = Cli::try_parse_from(std::iter::once("storageos-operator").chain(args)).unwrap();
        assert!(matches!(cli.command, Command::NodeCheck(_)), "{cli:?}");
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
