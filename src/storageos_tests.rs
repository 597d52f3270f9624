//! The StorageOS client (crate `storageos-client`) against servers the operator's own kits
//! make: a bare HTTP answer, a redirect, the HTTPS server with a certificate of its own CA.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tracing_subscriber::prelude::*;

use crate::crd::contract::user_agent;
use crate::storageos::{Client, Config, ERROR_BODY_LIMIT, Error};
use operator_kit::testing::answer_once;

#[tokio::test]
async fn requests_name_the_component() {
    for component in [None, Some("api-manager")] {
        let (url, head) =
            answer_once("HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
        let mut config = Config::new(&url, "u", "p");
        if component.is_some() {
            config = config.with_user_agent(user_agent(component));
        }
        let _ = Client::new(config).unwrap().list_nodes().await;
        let head = head.await.unwrap();
        let want = format!("user-agent: {}", user_agent(component));
        assert!(head.contains(&want), "{head}");
    }
}

#[test]
fn the_default_user_agent_is_the_operators() {
    assert_eq!(crate::storageos::DEFAULT_USER_AGENT, user_agent(None));
}

#[tokio::test]
async fn error_bodies_are_truncated() {
    let body = "e".repeat(64 * 1024);
    let (url, _) = answer_once(Box::leak(
            format!(
                "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .into_boxed_str(),
        ))
        .await;
    let c = Client::new(Config::new(&url, "u", "p")).unwrap();
    let err = c.login().await.unwrap_err().to_string();
    assert!(err.len() < 2 * ERROR_BODY_LIMIT, "{} bytes", err.len());
    assert!(err.contains("(truncated)"), "{err}");
}

#[tokio::test]
async fn login_does_not_follow_redirects() {
    let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = format!("http://{}/v2/auth/login", elsewhere.local_addr().unwrap());
    let (url, head) = answer_once(Box::leak(
        format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {target}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
        .into_boxed_str(),
    ))
    .await;
    let c = Client::new(Config::new(&url, "u", "secret-password")).unwrap();
    assert!(c.login().await.is_err());
    assert!(head.await.unwrap().contains("/v2/auth/login"));
    let followed = tokio::time::timeout(std::time::Duration::from_millis(300), elsewhere.accept()).await;
    assert!(followed.is_err(), "the login was re-sent to the redirect target");
}

#[tokio::test]
async fn an_https_endpoint_is_verified_against_the_configured_ca() {
    let cert =
        crate::runtime::process::pki::issue_serving_cert("sos", &["127.0.0.1".into()], chrono::Duration::hours(1))
            .unwrap();
    let slot = crate::runtime::process::https::CertSlot::new(&cert.cert_pem, &cert.key_pem).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(crate::runtime::process::https::serve(
        listener,
        slot,
        axum::Router::new(),
        std::future::pending(),
    ));
    let url = format!("https://{addr}");
    // Not trusted: a transport error, no request sent.
    let untrusted = Client::new(Config::new(&url, "u", "p")).unwrap();
    assert!(matches!(untrusted.login().await, Err(Error::Transport { .. })));
    // With the CA: the TLS connection is made and the server answers (404 here).
    let trusted = Client::new(Config::new(&url, "u", "p").with_ca_pem(cert.ca_pem.into_bytes())).unwrap();
    let err = trusted.login().await.unwrap_err();
    assert!(!matches!(err, Error::Transport { .. }), "{err:?}");
}

/// A client with connections of its own (the api-manager's fencer, on a runtime of its own)
/// shares the token: a login by one is the other's, so it never logs in again by itself.
#[tokio::test]
async fn a_client_with_connections_of_its_own_shares_the_token() {
    let (url, _) = answer_once(
        "HTTP/1.1 200 OK\r\nauthorization: Bearer t1\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
    )
    .await;
    let first = Client::new(Config::new(&url, "u", "p")).unwrap();
    let own = first.with_own_connections().unwrap();
    assert!(!own.has_token());
    first.login().await.unwrap();
    assert!(own.has_token(), "the login of one is the other's");
    assert_eq!(own.base_url(), first.base_url());
}

/// The client's spans carry the kit's trace target, so they are exported with the rest, and stay
/// out of the logs like the rest.
#[test]
fn the_clients_spans_are_exported_with_the_kits() {
    assert_eq!(
        crate::storageos::spans::TARGET,
        crate::telemetry::spans::TARGET,
        "one trace target"
    );
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::sink)
        .with_filter(crate::telemetry::logs_filter(tracing_subscriber::EnvFilter::new(
            "trace",
        )));
    tracing::subscriber::with_default(tracing_subscriber::registry().with(logs), || {
        assert!(crate::storageos::spans::storageos_request("GET", "/nodes").is_disabled());
    });
}
