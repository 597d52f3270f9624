//! `kubectl storageos`: the day-2 plugin (docs/plugin.md). Installs the operator and a cluster
//! from the objects this crate builds (`install::build`, `crd::all`), checks a cluster before
//! and after (`preflight`), reports (`status`), previews a change (`plan`), collects a redacted support bundle (`bundle`),
//! upgrades with path checks and uninstalls in the safe order with recovery manifests.
//!
//! `src/bin/kubectl-storageos.rs` rewrites the Go plugin's flags ([`go_flags`]), parses [`Cli`]
//! and calls [`run`]; each command is a module with its own error type.

// The crates it builds on, under the names the modules use (`crate::render`, `crate::crd`, …);
// the operator's `install` and `upgrade` by their full path (the plugin has commands of the same names).
use operator_kit::{duration, runtime, text};
use storageos_cluster_operator::{checks, cluster, preview, render};
use storageos_contract::{crd, rbac, reasons};

pub mod apply;
pub mod bundle;
pub mod children;
pub mod connect;
pub mod eval_etcd;
pub mod go_flags;
pub mod image_pull;
pub mod install;
pub mod namespace;
pub mod node_checks;
pub mod plan;
pub mod preflight;
pub mod private;
pub mod redact;
pub mod status;
pub mod uninstall;
pub mod upgrade;
pub mod version;
pub mod wait;
pub mod watched;

use std::path::PathBuf;

use clap::{Args, CommandFactory, Parser, Subcommand};

/// Field manager of every write the plugin makes.
pub use crate::crd::contract::PLUGIN_FIELD_MANAGER as FIELD_MANAGER;

/// `kubectl storageos`: install, check, report on, upgrade and uninstall StorageOS.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-storageos",
    bin_name = "kubectl storageos",
    version,
    about = "Install, check, report on, upgrade and uninstall StorageOS and its operator",
    long_about = "Install, check, report on, upgrade and uninstall StorageOS and its operator.\n\n\
                  Put this executable on your PATH as `kubectl-storageos` and run it as \
                  `kubectl storageos COMMAND`. Every command that changes the cluster takes \
                  --dry-run and then only says what it would do."
)]
pub struct Cli {
    #[command(flatten)]
    pub connection: Connection,
    #[command(subcommand)]
    pub command: Command,
}

/// How to reach the cluster: kubectl's flags.
#[derive(Clone, Debug, Args)]
pub struct Connection {
    /// Path of the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE", help_heading = "Connection")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true, value_name = "NAME", help_heading = "Connection")]
    pub context: Option<String>,
    /// Namespace of the operator, and of the StorageOSCluster and its credentials Secret that
    /// `install` creates.
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE", default_value = storageos_cluster_operator::install::NAMESPACE, help_heading = "Connection")]
    pub namespace: String,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a cluster before (or after) installing StorageOS.
    Preflight(preflight::PreflightArgs),
    /// Install the operator, the credentials Secret and a StorageOSCluster.
    Install(install::InstallArgs),
    /// One screen on the operator, the cluster, StorageOS nodes and volumes.
    Status(status::StatusArgs),
    /// Preview what applying a StorageOSCluster would do (server-side dry runs; nothing written).
    Plan(plan::PlanArgs),
    /// Collect a redacted support bundle (.tar.gz).
    Bundle(bundle::BundleArgs),
    /// Upgrade StorageOS (a StorageOSUpgrade) or the operator itself, with path checks.
    Upgrade(upgrade::UpgradeArgs),
    /// Remove the cluster, then the operator, after writing recovery manifests.
    Uninstall(uninstall::UninstallArgs),
    /// Print the plugin's version and the operator and StorageOS versions in the cluster.
    Version,
    /// Print a shell completion script (for example: `kubectl storageos completion bash`).
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// Why a command failed; each variant's message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Connect(#[from] connect::Error),
    #[error(transparent)]
    Preflight(#[from] preflight::Error),
    #[error(transparent)]
    Install(#[from] install::Error),
    #[error(transparent)]
    Status(#[from] status::Error),
    #[error(transparent)]
    Plan(#[from] plan::Error),
    #[error(transparent)]
    Bundle(#[from] bundle::Error),
    #[error(transparent)]
    Upgrade(#[from] upgrade::Error),
    #[error(transparent)]
    Uninstall(#[from] uninstall::Error),
    #[error(transparent)]
    Version(#[from] version::Error),
}

/// Runs one command.
pub async fn run(cli: Cli) -> Result<(), Error> {
    if let Command::Completion { shell } = cli.command {
        let mut cmd = Cli::command();
        clap_complete::generate(shell, &mut cmd, "kubectl-storageos", &mut std::io::stdout());
        return Ok(());
    }
    let client = connect::client(&cli.connection).await?;
    let ns = cli.connection.namespace.as_str();
    match cli.command {
        Command::Preflight(args) => preflight::run(&client, ns, &args).await?,
        Command::Install(args) => install::run(&client, ns, &args).await?,
        Command::Status(args) => status::run(&client, ns, &args).await?,
        Command::Plan(args) => plan::run(&client, ns, &args).await?,
        Command::Bundle(args) => bundle::run(&client, ns, &args).await?,
        Command::Upgrade(args) => upgrade::run(&client, ns, &args).await?,
        Command::Uninstall(args) => uninstall::run(&client, ns, &args).await?,
        Command::Version => version::run(&client, ns).await?,
        Command::Completion { .. } => {}
    }
    Ok(())
}

/// Every object of kind `K` in the cluster.
pub async fn list_all<K>(client: &kube::Client) -> Result<Vec<K>, kube::Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(kube::Api::<K>::all(client.clone())
        .list(&Default::default())
        .await?
        .items)
}

/// Every object of kind `K`, or none when they cannot be listed (a kind the cluster does not
/// serve yet, such as the mirrors before an install).
pub async fn list_or_none<K>(client: &kube::Client) -> Vec<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    list_all(client).await.unwrap_or_default()
}

/// Objects as JSON.
pub fn to_values<T: serde::Serialize>(items: &[T]) -> Vec<serde_json::Value> {
    items.iter().filter_map(|i| serde_json::to_value(i).ok()).collect()
}

/// A progress line on stderr (stdout stays for the command's output).
pub fn progress(line: impl std::fmt::Display) {
    eprintln!("{line}");
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent_and_every_command_has_help() {
        Cli::command().debug_assert();
        for sub in Cli::command().get_subcommands() {
            assert!(sub.get_about().is_some(), "{} has no help", sub.get_name());
        }
    }

    #[test]
    fn kubectl_connection_flags_are_global() {
        let cli = Cli::try_parse_from([
            "kubectl-storageos",
            "status",
            "--kubeconfig",
            "/k",
            "--context",
            "c",
            "-n",
            "ns",
        ])
        .unwrap();
        assert_eq!(cli.connection.kubeconfig.as_deref(), Some(std::path::Path::new("/k")));
        assert_eq!(cli.connection.context.as_deref(), Some("c"));
        assert_eq!(cli.connection.namespace, "ns");
    }
}
