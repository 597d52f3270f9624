//! The Kubernetes client's HTTP stack: kube's own, with two changes: a bound on each
//! connection's read buffer, and on the idle connections kept.
//!
//! hyper grows a connection's read buffer while reads fill it, up to ~400 KiB, and never shrinks
//! it. A watch's first list pages (hundreds of objects a page) grow it to the top, and a watch
//! holds its connection for the life of the process: at 1,000 nodes the api-manager's heap held
//! ~2.5 MB of such buffers (heaptrack; docs/benchmarks.md). [`READ_BUFFER_MAX`] caps each one;
//! a large answer is then read in more, smaller reads.
//!
//! The layers are kube's (`kube::client::ClientBuilder::try_from`): base URI, retry of
//! 429/503/504, credentials, extra headers, a trace span per request, connect/read/write
//! timeouts over rustls. Two kinds of configuration keep kube's own stack unchanged, since theirs
//! needs what kube does not expose: a proxy, and credentials from an exec plugin (whose
//! certificate's expiry kube tracks). When kube is upgraded, compare this stack with its
//! `make_generic_builder`.

use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ClientBuilder, ConfigExt, retry::RetryPolicy};
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder, ServiceExt as _};
use tower_http::ServiceExt as _;
use tower_http::trace::TraceLayer;

/// The largest read buffer of one connection to the apiserver (hyper's default: 8 KiB plus
/// 100 reads of 4 KiB).
pub const READ_BUFFER_MAX: usize = 64 * 1024;

/// The most idle connections kept for reuse (hyper's default: no limit, each kept 90 s). A burst
/// of requests opens a connection for each one in flight; past this many, a connection is closed
/// when its request is done rather than kept with its TLS state and buffers.
pub const IDLE_CONNECTIONS_MAX: usize = 8;

/// A client for `config`, as `kube::Client::try_from` builds it, with each connection's read
/// buffer at most [`READ_BUFFER_MAX`] and at most [`IDLE_CONNECTIONS_MAX`] idle connections.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    if config.proxy_url.is_some() || config.auth_info.exec.is_some() {
        return kube::Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let tls = config.rustls_https_connector_with_connector(http)?;
    let mut connector = TimeoutConnector::new(tls);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .http1_max_buf_size(READ_BUFFER_MAX)
        .pool_max_idle_per_host(IDLE_CONNECTIONS_MAX)
        .build::<_, Body>(connector);

    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .layer(TraceLayer::new_for_http().on_body_chunk(()))
        .map_err(BoxError::from)
        .service(hyper);
    let service = service
        .map_response_body(|body| {
            Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<kube::client::DynBody>
        })
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace).build())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::runtime::kube::identity::kube_config;
    use crate::testing::answer_once;

    #[tokio::test]
    async fn an_answer_many_times_the_read_buffer_is_read_whole_with_the_user_agent_sent() {
        let padding = "x".repeat(16 * READ_BUFFER_MAX);
        let body = format!(r#"{{"major":"1","minor":"36","gitVersion":"v1.36.3","padding":"{padding}"}}"#);
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let (url, head) = answer_once(Box::leak(response.into_boxed_str())).await;
        let config = kube_config(kube::Config::new(url.parse().unwrap()), "an-operator/1.2 its-component");
        let info = client(config).unwrap().apiserver_version().await.unwrap();
        assert_eq!(info.git_version, "v1.36.3");
        assert!(
            head.await
                .unwrap()
                .contains("user-agent: an-operator/1.2 its-component")
        );
    }

    #[tokio::test]
    async fn a_refused_connection_is_kubes_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let c = client(kube::Config::new(url.parse().unwrap())).unwrap();
        assert!(matches!(
            c.apiserver_version().await,
            Err(kube::Error::HyperError(_) | kube::Error::Service(_))
        ));
    }

    #[test]
    fn a_proxy_keeps_kubes_own_stack() {
        let mut config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        config.proxy_url = Some("socks5://127.0.0.1:2".parse().unwrap());
        // kube's stack refuses a SOCKS proxy without its feature: proof the config went there.
        assert!(matches!(client(config), Err(kube::Error::ProxyProtocolDisabled { .. })));
    }
}
