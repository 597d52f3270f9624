//! How a process names itself to the apiserver: the User-Agent it gives on every request, so
//! audit logs say which component acted. The name is the caller's.

use axum::http::header::{HeaderValue, USER_AGENT};

/// `config` with `user_agent` on every request (replacing any set before).
pub fn kube_config(mut config: kube::Config, user_agent: &str) -> kube::Config {
    config.headers.retain(|(name, _)| name != USER_AGENT);
    if let Ok(value) = HeaderValue::from_str(user_agent) {
        config.headers.push((USER_AGENT, value));
    }
    config
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::testing::answer_once;

    #[tokio::test]
    async fn s6_kube_requests_name_the_component() {
        let (url, head) = answer_once(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
        )
        .await;
        let config = kube_config(kube::Config::new(url.parse().unwrap()), "an-operator/1.2 its-component");
        let client = kube::Client::try_from(config).unwrap();
        let req = axum::http::Request::get("/version").body(Vec::new()).unwrap();
        let _ = client.request_text(req).await;
        let head = head.await.unwrap();
        assert!(head.contains("user-agent: an-operator/1.2 its-component"), "{head}");
    }
}
