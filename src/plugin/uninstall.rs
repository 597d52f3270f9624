//! `kubectl storageos uninstall`.

use kube::Client;

#[derive(Debug, clap::Args)]
pub struct UninstallArgs {}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("not yet")]
    NotYet,
}

pub async fn run(_client: &Client, _namespace: &str, _args: &UninstallArgs) -> Result<(), Error> {
    Err(Error::NotYet)
}
