//! The plain-HTTP server every process runs: `/metrics`, `/healthz` and `/readyz`.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

/// Readiness (None when ready, else why not) and metrics registry shared with the handlers.
#[derive(Clone)]
pub struct HealthServer {
    waiting_for: Arc<Mutex<Option<String>>>,
    registry: Arc<Registry>,
}

impl HealthServer {
    /// A server state that reports not-ready ("starting") until [`HealthServer::set_ready`] is called.
    pub fn new(registry: Registry) -> Self {
        Self {
            waiting_for: Arc::new(Mutex::new(Some("starting".into()))),
            registry: Arc::new(registry),
        }
    }

    /// Marks the process ready for `/readyz`.
    pub fn set_ready(&self) {
        self.set(None);
    }

    /// Marks the process not ready for `/readyz`, which answers 503 saying it waits for `what`.
    pub fn set_waiting_for(&self, what: impl Into<String>) {
        self.set(Some(what.into()));
    }

    fn set(&self, waiting_for: Option<String>) {
        if let Ok(mut w) = self.waiting_for.lock() {
            *w = waiting_for;
        }
    }

    /// Binds `addr` and serves the three endpoints in the background, with [`limits`].
    pub async fn spawn_server(&self, addr: &str) -> std::io::Result<()> {
        let listener = crate::runtime::process::addr::bind(addr).await?;
        let router = self.router();
        tokio::spawn(async move {
            crate::runtime::process::https::serve_plain_with(listener, router, std::future::pending(), limits()).await;
            tracing::error!("metrics server stopped");
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

/// The limits of the metrics and health server: the webhook server's (headers within 10 s,
/// idle connections closed, a deadline over each request), with room for many more connections,
/// so idle ones cannot keep a probe waiting: they are closed within 10 s, and until then a probe
/// still gets a connection.
pub fn limits() -> crate::runtime::process::https::Limits {
    crate::runtime::process::https::Limits {
        connections: 16_384,
        body: 64 << 10,
        ..Default::default()
    }
}

/// 200 "ok", or 503 with what the process waits for.
async fn readyz(State(h): State<HealthServer>) -> impl IntoResponse {
    let waiting_for = match h.waiting_for.lock() {
        Ok(w) => w.clone(),
        Err(_) => Some("a poisoned readiness lock".into()),
    };
    match waiting_for {
        None => (StatusCode::OK, "ok".to_string()),
        Some(what) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: waiting for {what}\n"),
        ),
    }
}

async fn metrics(State(h): State<HealthServer>) -> impl IntoResponse {
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
    async fn readiness_follows_the_flag_and_says_why_not() {
        let h = HealthServer::new(Registry::default());
        assert_eq!(get_status(h.router(), "/healthz").await, StatusCode::OK);
        assert_eq!(get_status(h.router(), "/readyz").await, StatusCode::SERVICE_UNAVAILABLE);
        h.set_waiting_for("the webhook certificate");
        let req = axum::http::Request::get("/readyz")
            .body(axum::body::Body::empty())
            .unwrap();
        let answer = h.router().oneshot(req).await.unwrap();
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = axum::body::to_bytes(answer.into_body(), 1 << 10).await.unwrap();
        assert_eq!(&body[..], b"not ready: waiting for the webhook certificate\n");
        h.set_ready();
        assert_eq!(get_status(h.router(), "/readyz").await, StatusCode::OK);
        assert_eq!(get_status(h.router(), "/metrics").await, StatusCode::OK);
    }

    #[tokio::test]
    async fn five_thousand_idle_connections_never_keep_a_probe_waiting() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let health = HealthServer::new(Registry::default());
        let short = crate::runtime::process::https::Limits {
            headers: std::time::Duration::from_millis(500),
            ..limits()
        };
        tokio::spawn(crate::runtime::process::https::serve_plain_with(
            listener,
            health.router(),
            std::future::pending(),
            short,
        ));
        let mut idle = Vec::new();
        for _ in 0..5000 {
            idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        let started = std::time::Instant::now();
        let answer = reqwest::get(format!("http://{addr}/healthz")).await.unwrap();
        assert_eq!(answer.status().as_u16(), 200);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        // The idle ones are closed after the header deadline.
        use tokio::io::AsyncReadExt;
        let mut b = [0u8; 1];
        let read = tokio::time::timeout(std::time::Duration::from_secs(10), idle[0].read(&mut b)).await;
        assert!(matches!(read, Ok(Ok(0) | Err(_))), "{read:?}");
    }
}
