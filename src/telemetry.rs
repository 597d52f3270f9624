//! Structured logging with `tracing`, as console lines or JSON.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::cli::LogFormat;

/// Why logging could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `--log-level` directive does not parse.
    #[error("invalid --log-level {0:?}: {1}; use a level such as info or debug")]
    Filter(String, String),
    /// A global subscriber was already installed.
    #[error("logging was already initialised: {0}")]
    Init(String),
}

/// Installs the global subscriber. Logs go to stderr so that `render` and `crds` output on
/// stdout stays clean.
pub fn init(format: LogFormat, level: &str) -> Result<(), Error> {
    let filter = EnvFilter::try_new(level).map_err(|e| Error::Filter(level.into(), e.to_string()))?;
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Console => registry.with(fmt::layer().with_writer(std::io::stderr)).try_init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .try_init(),
    };
    result.map_err(|e| Error::Init(e.to_string()))
}
