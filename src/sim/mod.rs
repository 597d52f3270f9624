//! StorageOS control-plane API simulator. (Stub: filled in by the simulator work.)

use crate::cli::SimulateArgs;

/// Why the simulator failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not implemented yet.
    #[error("`simulate` is not implemented in this build yet")]
    NotImplemented,
}

/// `storageos-operator simulate`: serve the simulator until interrupted.
pub async fn run(_args: SimulateArgs) -> Result<(), Error> {
    Err(Error::NotImplemented)
}
