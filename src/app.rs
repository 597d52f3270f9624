//! Dispatch of each subcommand to the module that implements it.

use std::io::Write;

use std::path::PathBuf;

use crate::cli::{Cli, Command, CrdsArgs, ManifestsArgs};
use crate::runtime::process::memory::trimming;
#[cfg(feature = "simulator")]
use crate::simulate;
use crate::{apimanager, crd, install, operator, preview, render};

/// Why a subcommand failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Writing output failed.
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A CRD could not be serialised (a bug: please report it).
    #[error("cannot serialise the CRDs: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// `render` failed.
    #[error(transparent)]
    Render(#[from] render::Error),
    /// `api-manager` failed.
    #[error(transparent)]
    ApiManager(#[from] apimanager::run::Error),
    /// `run` failed.
    #[error(transparent)]
    Operator(#[from] operator::Error),
    /// `plan` failed.
    #[error(transparent)]
    Plan(#[from] preview::Error),
    /// `node-check` failed.
    #[error("node-check: {0}")]
    NodeCheck(String),
    /// `plan` of a StorageOSUpgrade failed.
    #[error(transparent)]
    UpgradePlan(#[from] crate::upgrade::plan_command::Error),
    /// `manifests` failed.
    #[error(transparent)]
    Manifests(#[from] install::Error),
    /// `simulate` failed.
    #[cfg(feature = "simulator")]
    #[error(transparent)]
    Simulate(#[from] simulate::Error),
}

/// The async runtime a subcommand runs on. The operator and the api-manager wait on the network
/// nearly all the time: one thread serves them, and each worker thread more would bring its own
/// malloc arena, several MiB resident (more on a node with more cores; docs/benchmarks.md). The
/// simulator stands in for a whole StorageOS cluster under load tests: it gets every core.
///
/// The api-manager gets two worker threads: parsing admission requests is CPU work, and on one
/// thread a burst of it would delay its Lease renewals and the other webhooks. The fencer and
/// its node poll run on a thread of their own besides
/// ([`crate::apimanager::controllers::fencing::worker`]).
///
/// The long-running commands keep every thread in one malloc arena and large blocks out of it
/// ([`crate::runtime::process::memory::set_up_allocator`]), set here before any thread starts.
pub fn runtime(command: &Command) -> std::io::Result<tokio::runtime::Runtime> {
    if matches!(command, Command::Run(_) | Command::ApiManager(_)) {
        crate::runtime::process::memory::set_up_allocator();
    }
    let mut builder = match command {
        #[cfg(feature = "simulator")]
        Command::Simulate(_) => tokio::runtime::Builder::new_multi_thread(),
        Command::ApiManager(_) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(2);
            b
        }
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    builder.enable_all().build()
}

/// Runs the chosen subcommand to completion.
pub async fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Crds(args) => crds(&args),
        Command::Run(args) => Ok(trimming(operator::run(args)).await?),
        Command::ApiManager(args) => Ok(trimming(apimanager::run(*args)).await?),
        Command::Render(args) => Ok(render::run(&args)?),
        Command::Plan(args) => plan(&args).await,
        #[cfg(feature = "simulator")]
        Command::Simulate(args) => Ok(simulate::run(args).await?),
        Command::Manifests(args) => manifests(&args),
        Command::DrainGuard => {
            crate::runtime::process::signal::shutdown().await;
            Ok(())
        }
        Command::NodeCheck(args) => tokio::task::spawn_blocking(move || crate::checks::host::node_check(&args))
            .await
            .map_err(|e| Error::NodeCheck(e.to_string()))?
            .map_err(Error::NodeCheck),
    }
}

/// `plan`: of the StorageOSUpgrade in the file if it holds one, else of its StorageOSCluster.
async fn plan(args: &preview::PlanArgs) -> Result<(), Error> {
    use crate::upgrade::plan_command;
    let Some(up) = plan_command::upgrade_in(&args.file)? else {
        return Ok(preview::run(args).await?);
    };
    let connection = crate::runtime::kube::connect::connect(
        args.kubeconfig.as_deref(),
        &crate::crd::contract::user_agent(Some("plan")),
    )
    .await
    .map_err(preview::Error::from)?;
    let (ns, endpoint) = (&args.operator_namespace, args.storageos_endpoint.clone());
    Ok(plan_command::print(&connection.client, up, ns, endpoint, args.json).await?)
}

/// Writes `text` to `path` (creating its directory), or to stdout when there is none. A closed
/// pipe (`storageos-operator crds | head`) is not an error: the reader has what it wanted.
fn emit(path: Option<PathBuf>, text: &str) -> Result<(), Error> {
    match path {
        None => match std::io::stdout().write_all(text.as_bytes()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            result => result.map_err(|source| Error::Write {
                path: "stdout".into(),
                source,
            }),
        },
        Some(path) => {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|source| Error::Write {
                    path: parent.display().to_string(),
                    source,
                })?;
            }
            std::fs::write(&path, text).map_err(|source| Error::Write {
                path: path.display().to_string(),
                source,
            })
        }
    }
}

fn crds(args: &CrdsArgs) -> Result<(), Error> {
    match &args.out_dir {
        None => emit(None, &crd::to_yaml()?),
        Some(dir) => {
            for (file, crd) in crd::all() {
                emit(Some(dir.join(file)), &format!("---\n{}", serde_yaml::to_string(&crd)?))?;
            }
            Ok(())
        }
    }
}

fn manifests(args: &ManifestsArgs) -> Result<(), Error> {
    let yaml = install::operator_yaml(&args.image)?;
    emit(args.out_dir.as_ref().map(|d| d.join(install::OPERATOR_YAML)), &yaml)?;
    // Beside operator.yaml: the kustomize base and the Helm chart, from the same objects.
    if let Some(dir) = &args.out_dir {
        emit(
            Some(dir.join("kustomization.yaml")),
            &install::helm::kustomization_yaml(),
        )?;
        emit(
            Some(dir.join(install::helm::KUSTOMIZE_CONFIG)),
            &install::helm::kustomize_config(),
        )?;
        let chart = dir.join(install::helm::CHART_DIR);
        for (file, text) in install::helm::chart_files(&args.image)? {
            emit(Some(chart.join(file)), &text)?;
        }
    }
    if let Some(dir) = &args.olm_dir {
        for (file, text) in install::olm::bundle_files(&args.image)? {
            emit(Some(dir.join(file)), &text)?;
        }
    }
    Ok(())
}
