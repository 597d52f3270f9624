//! The spans exported as traces. Each has the target [`TARGET`], which only the OpenTelemetry
//! layer enables: with tracing off no layer wants them, so creating one costs a disabled-callsite
//! check, and they never show in the logs. Attributes hold names, routes and outcomes, never
//! credentials, tokens or Secret data.

use tracing::Span;
use tracing::field::Empty;

/// The target of every exported span.
pub const TARGET: &str = "storageos_operator::trace";

/// Whether `meta` is one of the exported spans.
pub fn is_trace(meta: &tracing::Metadata<'_>) -> bool {
    meta.target() == TARGET
}

/// One reconcile of `namespace/name` by `controller`; [`finish`] records its result.
pub fn reconcile(controller: &str, namespace: &str, name: &str) -> Span {
    tracing::info_span!(target: TARGET, "reconcile",
        controller, object.namespace = namespace, object.name = name,
        result = Empty, otel.status_code = Empty, error.message = Empty)
}

/// One server-side apply of `kind` `namespace/name`.
pub fn apply(kind: &str, namespace: Option<&str>, name: &str) -> Span {
    tracing::info_span!(target: TARGET, "apply",
        k8s.kind = kind, k8s.namespace = namespace.unwrap_or(""), k8s.name = name,
        result = Empty, otel.status_code = Empty, error.message = Empty)
}

/// One admission request to `webhook`; the verdict is recorded with [`verdict`].
pub fn admission(webhook: &str, operation: &str, namespace: &str, name: &str) -> Span {
    tracing::info_span!(target: TARGET, "admission",
        otel.kind = "server", webhook, operation, k8s.namespace = namespace, k8s.name = name,
        verdict = Empty, result = Empty)
}

/// Records an admission's verdict (`patched`, `allowed`, `denied`).
pub fn verdict(span: &Span, verdict: &str) {
    span.record("verdict", verdict);
    span.record("result", if verdict == "denied" { "denied" } else { "allowed" });
}

/// One fencing episode of `node`; [`fencing_done`] records what it did.
pub fn fencing(node: &str, episode: u64) -> Span {
    tracing::info_span!(target: TARGET, "fencing",
        node, episode, pods.fenced = Empty, pods.skipped = Empty, result = Empty)
}

/// Records the end of a fencing episode.
pub fn fencing_done(span: &Span, fenced: usize, skipped: usize, result: &str) {
    span.record("pods.fenced", fenced);
    span.record("pods.skipped", skipped);
    span.record("result", result);
}

/// Records the outcome of an operation: `result` = `ok`/`error`, the span status, and the
/// error's message (our errors name objects and causes, never secrets).
pub fn finish<T, E: std::fmt::Display>(span: &Span, result: &Result<T, E>) {
    match result {
        Ok(_) => {
            span.record("result", "ok");
        }
        Err(e) => {
            span.record("result", "error");
            span.record("otel.status_code", "ERROR");
            span.record("error.message", e.to_string());
        }
    }
}
