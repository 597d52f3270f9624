//! Dispatch of each subcommand to the module that implements it.

use std::io::Write;

use crate::cli::{Cli, Command, CrdsArgs};
use crate::{apimanager, crd, operator, render, sim};

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
    /// `simulate` failed.
    #[error(transparent)]
    Simulate(#[from] sim::Error),
}

/// Runs the chosen subcommand to completion.
pub async fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Crds(args) => crds(&args),
        Command::Run(args) => Ok(operator::run(args).await?),
        Command::ApiManager(args) => Ok(apimanager::run(*args).await?),
        Command::Render(args) => Ok(render::run(&args)?),
        Command::Simulate(args) => Ok(sim::run(args).await?),
    }
}

fn crds(args: &CrdsArgs) -> Result<(), Error> {
    match &args.out_dir {
        None => {
            let yaml = crd::to_yaml()?;
            std::io::stdout()
                .write_all(yaml.as_bytes())
                .map_err(|source| Error::Write {
                    path: "stdout".into(),
                    source,
                })
        }
        Some(dir) => {
            for (file, crd) in crd::all() {
                let path = dir.join(file);
                let yaml = format!("---\n{}", serde_yaml::to_string(&crd)?);
                std::fs::write(&path, yaml).map_err(|source| Error::Write {
                    path: path.display().to_string(),
                    source,
                })?;
            }
            Ok(())
        }
    }
}
