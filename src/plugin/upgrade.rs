//! `kubectl storageos upgrade`.

use kube::Client;

#[derive(Debug, clap::Args)]
pub struct UpgradeArgs {}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("not yet")]
    NotYet,
}

pub async fn run(_client: &Client, _namespace: &str, _args: &UpgradeArgs) -> Result<(), Error> {
    Err(Error::NotYet)
}
