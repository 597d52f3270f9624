//! `kubectl storageos bundle`.

use kube::Client;

#[derive(Debug, clap::Args)]
pub struct BundleArgs {}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("not yet")]
    NotYet,
}

pub async fn run(_client: &Client, _namespace: &str, _args: &BundleArgs) -> Result<(), Error> {
    Err(Error::NotYet)
}
