//! `kubectl storageos plan -f cluster.yaml`: the operator's `plan` (module `preview`) from the
//! plugin: what applying the StorageOSCluster would create, change, replace, prune and restart,
//! with server-side dry runs only, rendered with the settings of the operator in `-n`.

use std::path::PathBuf;

use kube::Client;

use crate::preview;

/// Arguments of `plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// File holding the StorageOSCluster as it would be applied (an edited CR, or a Go
    /// operator's CR before a take-over), or a StorageOSUpgrade as it would be created.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,
    /// Render with this operator image (and this shell's RELATED_IMAGE_* variables) instead of
    /// the operator running in -n.
    #[arg(long, value_name = "IMAGE")]
    pub operator_image: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Why the plan could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read the Kubernetes version: {0}; check --kubeconfig/--context")]
    Kubernetes(#[source] kube::Error),
    #[error(transparent)]
    Preview(#[from] preview::Error),
    #[error(transparent)]
    Upgrade(#[from] storageos_cluster_operator::upgrade::plan_command::Error),
}

/// `kubectl storageos plan`.
pub async fn run(client: &Client, namespace: &str, args: &PlanArgs) -> Result<(), Error> {
    use storageos_cluster_operator::upgrade::plan_command;
    if let Some(up) = plan_command::upgrade_in(&args.file)? {
        return Ok(plan_command::print(client, up, namespace, None, args.json).await?);
    }
    let version = client.apiserver_version().await.map_err(Error::Kubernetes)?;
    let preview_args = preview::PlanArgs {
        file: args.file.clone(),
        kubeconfig: None,
        operator_image: args.operator_image.clone(),
        operator_namespace: namespace.to_string(),
        json: args.json,
        storageos_endpoint: None,
    };
    let entries = preview::plan(client, &preview_args, &version.git_version).await?;
    Ok(preview::print(&entries, args.json)?)
}
