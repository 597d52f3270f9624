//! Build step of the cluster reconciler: render `templates/*.yaml.hbs` into typed objects.
//! (Stub: filled in by the render work.)

use crate::cli::RenderArgs;

/// Why rendering failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not implemented yet.
    #[error("`render` is not implemented in this build yet")]
    NotImplemented,
}

/// `storageos-operator render`: print every object the operator would apply.
pub fn run(_args: &RenderArgs) -> Result<(), Error> {
    Err(Error::NotImplemented)
}
