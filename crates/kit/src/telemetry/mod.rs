//! Structured logging with `tracing`, as console lines or JSON, and, for `run` and
//! `api-manager`, OpenTelemetry traces over OTLP/HTTP when the environment asks for them
//! ([`config`], docs/observability.md).

pub mod config;
mod export;
pub mod spans;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::{FilterExt, filter_fn};
use tracing_subscriber::layer::Filter;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// How log lines are written.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Console,
    /// One JSON object per line.
    Json,
}

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

/// Holds the trace pipeline (when there is one) until [`Telemetry::shutdown`] flushes it.
#[must_use = "call shutdown() at exit so that the last spans are sent"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn tracing(&self) -> bool {
        self.provider.is_some()
    }

    /// Sends the spans still queued and stops the exporter (bounded by the exporter's timeout).
    /// Runs off the async workers: the flush blocks.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else { return };
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("warning: cannot flush the last trace spans: {e}"),
            Err(e) => eprintln!("warning: cannot flush the last trace spans: {e}"),
        }
    }
}

/// Installs the global subscriber. Logs go to stderr so that `render` and `crds` output on
/// stdout stays clean. `service` (the process's default service name) is given for the
/// processes that trace; tracing then starts if the environment asks for it. A tracing
/// configuration that cannot be used is logged and leaves tracing off: it never stops the
/// process.
pub fn init(format: LogFormat, level: &str, service: Option<&str>) -> Result<Telemetry, Error> {
    let filter = EnvFilter::try_new(level).map_err(|e| Error::Filter(level.into(), e.to_string()))?;
    let decision = service.map(|s| config::from_env(|k| std::env::var(k).ok(), s));
    let built = match &decision {
        Some(Ok(config::Decision::On(settings))) => Some(export::provider(settings)),
        _ => None,
    };
    let provider = built.as_ref().and_then(|b| b.as_ref().ok()).cloned();
    // Exported spans go only to the OpenTelemetry layer, and only they do; logs are as before.
    let otel = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            // The instrumentation scope: the library that makes the spans (the service is the
            // process's, `service`).
            .with_tracer(p.tracer("operator-kit"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(filter_fn(spans::is_trace))
    });
    let logs = logs_filter(filter);
    let registry = tracing_subscriber::registry().with(otel);
    let result = match format {
        // Colour only on a terminal: escape codes in a file or `kubectl logs` are noise.
        LogFormat::Console => registry
            .with(
                fmt::layer()
                    .with_ansi(colour_stderr())
                    .with_writer(std::io::stderr)
                    .with_filter(logs),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().with_writer(std::io::stderr).with_filter(logs))
            .try_init(),
    };
    result.map_err(|e| Error::Init(e.to_string()))?;
    report(decision, built.map(|b| b.map(|_| ())));
    Ok(Telemetry { provider })
}

/// Whether console logs are coloured: stderr is a terminal and `NO_COLOR` is not set
/// (no-color.org).
fn colour_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// What the log layer writes: what `filter` enables, except the exported spans, which only the
/// OpenTelemetry layer takes (with tracing off, nothing enables them and they cost nothing).
pub fn logs_filter<S>(filter: EnvFilter) -> impl Filter<S> {
    filter.and(filter_fn(|m| !spans::is_trace(m)))
}

/// Says at start-up whether and where spans go, and why not when a variable was ignored.
fn report(
    decision: Option<Result<config::Decision, config::Error>>,
    built: Option<Result<(), opentelemetry_otlp::ExporterBuildError>>,
) {
    match (decision, built) {
        (Some(Ok(config::Decision::On(s))), Some(Ok(()))) => {
            for w in &s.warnings {
                tracing::warn!("tracing: {w}");
            }
            tracing::info!(endpoint = %s.endpoint, from = s.source, service = %s.service_name,
                sampler = ?s.sampling, "tracing: exporting spans over OTLP/HTTP");
        }
        (_, Some(Err(e))) => tracing::error!(error = %e, "tracing is off: cannot build the OTLP exporter"),
        (Some(Ok(config::Decision::Off(Some(note)))), _) => tracing::info!("tracing is off: {note}"),
        (Some(Err(e)), _) => tracing::error!("tracing is off: {e}"),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_tracing_the_exported_spans_are_disabled_and_stay_out_of_the_logs() {
        let logs = fmt::layer()
            .with_writer(std::io::sink)
            .with_filter(logs_filter(EnvFilter::new("trace")));
        tracing::subscriber::with_default(tracing_subscriber::registry().with(logs), || {
            assert!(spans::reconcile("storageoscluster", "default", "storageos").is_disabled());
            assert!(!tracing::info_span!("a log span").is_disabled());
        });
    }
}
