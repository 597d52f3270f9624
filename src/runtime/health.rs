//! The plain-HTTP server every process runs: `/metrics`, `/healthz` and `/readyz`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

/// Readiness flag and metrics registry shared with the handlers.
#[derive(Clone)]
pub struct Health {
    ready: Arc<AtomicBool>,
    registry: Arc<Registry>,
}

impl Health {
    /// A server state that reports not-ready until [`Health::set_ready`] is called.
    pub fn new(registry: Registry) -> Self {
        Self {
            ready: Arc::new(AtomicBool::new(false)),
            registry: Arc::new(registry),
        }
    }

    /// Marks the process ready (or not) for `/readyz`.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Binds `addr` and serves the three endpoints in the background.
    pub async fn spawn_server(&self, addr: &str) -> std::io::Result<()> {
        let listener = crate::runtime::addr::bind(addr).await?;
        let router = self.router();
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::error!(error = %e, "metrics server stopped");
            }
        });
        Ok(())
    }

    /// The router serving the three endpoints.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .with_state(self.clone())
    }
}

async fn readyz(State(h): State<Health>) -> impl IntoResponse {
    if h.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics(State(h): State<Health>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &h.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            e.to_string(),
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    async fn get_status(router: Router, path: &str) -> StatusCode {
        let req = axum::http::Request::get(path).body(axum::body::Body::empty()).unwrap();
        router.oneshot(req).await.unwrap().status()
    }

    #[tokio::test]
    async fn readiness_follows_the_flag() {
        let h = Health::new(Registry::default());
        assert_eq!(get_status(h.router(), "/healthz").await, StatusCode::OK);
        assert_eq!(get_status(h.router(), "/readyz").await, StatusCode::SERVICE_UNAVAILABLE);
        h.set_ready(true);
        assert_eq!(get_status(h.router(), "/readyz").await, StatusCode::OK);
        assert_eq!(get_status(h.router(), "/metrics").await, StatusCode::OK);
    }
}
