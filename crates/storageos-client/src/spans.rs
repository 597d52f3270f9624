//! The trace spans of StorageOS requests. Their target is the operator's trace target
//! (`storageos_operator::trace`), which its OpenTelemetry layer exports.

use tracing::Span;
use tracing::field::Empty;

/// The target every exported span carries (the operator's `telemetry::spans::TARGET`).
pub const TARGET: &str = "storageos_operator::trace";

/// One StorageOS API request: `route` is the template (`/namespaces/{id}/volumes`), never the
/// path with IDs. `otel.name` follows the HTTP convention `{method} {route}`.
pub fn storageos_request(method: &str, route: &str) -> Span {
    tracing::info_span!(target: TARGET, "storageos.request",
        otel.name = format!("{method} {route}"), otel.kind = "client",
        http.request.method = method, url.template = route,
        http.response.status_code = Empty, result = Empty, otel.status_code = Empty, error.type = Empty)
}

/// Records a StorageOS answer: its status code (None when there was none), and as `error.type`
/// the status code or the kind of failure (never the path, which holds IDs, nor the message).
pub fn storageos_answer(span: &Span, status: Option<u16>, failure: Option<&str>) {
    if let Some(code) = status {
        span.record("http.response.status_code", code);
    }
    match failure {
        None => {
            span.record("result", "ok");
        }
        Some(kind) => {
            span.record("result", "error");
            span.record("otel.status_code", "ERROR");
            span.record("error.type", kind);
        }
    }
}
