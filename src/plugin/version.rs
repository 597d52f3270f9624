//! `kubectl storageos version`.

use kube::Client;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("not yet")]
    NotYet,
}

pub async fn run(_client: &Client, _namespace: &str) -> Result<(), Error> {
    Err(Error::NotYet)
}
