//! StorageOS v2 REST API client: the routes the operator and the api-manager call.
//!
//! [`Client`] logs in on first use, re-logs in once on a 401, maps every error status to a
//! variant of [`Error`], and optionally records `storageos_api_*` transport metrics.

mod auth;
mod client;
mod error;
pub mod kube;
pub mod metrics;
pub mod models;

pub use auth::Credentials;
pub use client::{Client, Config, DEFAULT_LOGIN_TIMEOUT, DEFAULT_PORT, DEFAULT_REQUEST_TIMEOUT, base_url};
pub use error::Error;
pub use kube::CSI_DRIVER;
pub use metrics::ApiMetrics;
pub use models::*;

/// The User-Agent of a client whose owner sets none ([`Config::with_user_agent`]): the
/// operator's own, so audit logs name it.
pub const DEFAULT_USER_AGENT: &str = concat!("storageos-operator/", env!("CARGO_PKG_VERSION"));

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::runtime::kube::identity::{tests::answer_once, user_agent};

    #[tokio::test]
    async fn requests_name_the_component() {
        for component in [None, Some("api-manager")] {
            let (url, head) =
                answer_once("HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
            let mut config = super::Config::new(&url, "u", "p");
            if component.is_some() {
                config = config.with_user_agent(user_agent(component));
            }
            let _ = super::Client::new(config).unwrap().list_nodes().await;
            let head = head.await.unwrap();
            let want = format!("user-agent: {}", user_agent(component));
            assert!(head.contains(&want), "{head}");
        }
    }

    #[test]
    fn the_default_user_agent_is_the_operators() {
        assert_eq!(super::DEFAULT_USER_AGENT, user_agent(None));
    }
}
