//! How the operator names itself to the apiserver and to StorageOS: a User-Agent on every
//! request, so audit logs say which component acted (`storageos-operator/<version>` for `run`,
//! `storageos-operator/<version> api-manager` for the api-manager).

use axum::http::header::{HeaderValue, USER_AGENT};

/// The User-Agent of `component` (None for the operator itself).
pub fn user_agent(component: Option<&str>) -> String {
    let base = concat!("storageos-operator/", env!("CARGO_PKG_VERSION"));
    match component {
        Some(c) => format!("{base} {c}"),
        None => base.to_string(),
    }
}

/// `config` with our User-Agent on every request (replacing any set before).
pub fn kube_config(mut config: kube::Config, component: Option<&str>) -> kube::Config {
    config.headers.retain(|(name, _)| name != USER_AGENT);
    if let Ok(value) = HeaderValue::from_str(&user_agent(component)) {
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
        let config = kube_config(kube::Config::new(url.parse().unwrap()), Some("api-manager"));
        let client = kube::Client::try_from(config).unwrap();
        let req = axum::http::Request::get("/version").body(Vec::new()).unwrap();
        let _ = client.request_text(req).await;
        let head = head.await.unwrap();
        let want = format!(
            "user-agent: storageos-operator/{} api-manager",
            env!("CARGO_PKG_VERSION")
        );
        assert!(head.contains(&want), "{head}");
        assert_eq!(
            user_agent(None),
            concat!("storageos-operator/", env!("CARGO_PKG_VERSION"))
        );
    }
}
