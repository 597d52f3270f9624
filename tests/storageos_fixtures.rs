//! The client's models against responses in the real StorageOS wire format
//! (`tests/fixtures/storageos/`, shapes from the public go-api spec; see its README). The
//! simulator shares the client's types, so only these files can catch a field the real API
//! names or shapes differently. Each file is read with the model types, then replayed over HTTP
//! to the real client, login header included.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code may fail loudly

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::routing::{delete, get, post};
use serde::de::DeserializeOwned;
use storageos_operator::storageos::{
    Client, Cluster, Config, Error, ErrorBody, Health, LABEL_CSI_PV_NAME, LABEL_CSI_PVC_NAME, LABEL_REPLICAS,
    Namespace, Node, UserSession, Volume,
};

const SHOP_NAMESPACE: &str = "8c7b6a59-4d3e-4f21-a0b9-c8d7e6f5a4b3";
const WORKER_1: &str = "c5666b58-b805-4215-ab4a-cb094948ccc6";
const WORKER_2: &str = "7d6a0f2e-91b4-4c3e-8f0a-52e8d7c6b1a4";

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/storageos")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn parse<T: DeserializeOwned>(name: &str) -> T {
    let text = fixture(name);
    let de = &mut serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(de).unwrap_or_else(|e| panic!("{name} does not fit the model at {e}"))
}

/// The login fixture's headers, as the server sends them.
fn login_headers() -> HeaderMap {
    let pairs: BTreeMap<String, String> = parse("login.headers.json");
    pairs
        .into_iter()
        .map(|(k, v)| (HeaderName::try_from(k).unwrap(), HeaderValue::try_from(v).unwrap()))
        .collect()
}

fn json_headers() -> HeaderMap {
    HeaderMap::from_iter([(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    )])
}

fn assert_nodes(nodes: &[Node]) {
    let health: Vec<_> = nodes.iter().map(|n| (n.name.as_str(), n.health)).collect();
    assert_eq!(
        health,
        [
            ("worker-1", Health::Online),
            ("worker-2", Health::Offline),
            ("worker-3", Health::Unknown)
        ]
    );
    assert_eq!(nodes[0].id, WORKER_1);
    assert_eq!(nodes[0].version, "Mw");
    assert_eq!(nodes[0].labels.get("iaas/failure-domain"), Some("eu-west-1a"));
    assert!(nodes[1].labels.is_empty(), "a null label map reads as empty");
    assert_eq!(nodes[0].capacity.available, 93_138_833_408);
}

fn assert_namespaces(namespaces: &[Namespace]) {
    let ids: Vec<_> = namespaces.iter().map(|n| (n.name.as_str(), n.id.as_str())).collect();
    assert_eq!(
        ids,
        [
            ("default", "3f1a9d2c-6b7e-4c58-9e0f-1a2b3c4d5e6f"),
            ("shop", SHOP_NAMESPACE)
        ]
    );
    assert!(namespaces.iter().all(|n| n.version == "MQ"));
}

fn assert_volumes(volumes: &[Volume]) {
    let [host, shared] = volumes else {
        panic!("two volumes expected, got {volumes:?}")
    };
    assert_eq!(host.namespace_id, SHOP_NAMESPACE);
    assert_eq!(host.version, "Nw");
    assert_eq!(host.master.node_id, WORKER_1);
    assert_eq!(host.master.health, Health::Online);
    assert!(host.is_healthy());
    assert_eq!(host.attached_on, WORKER_1);
    assert_eq!(host.labels.get(LABEL_CSI_PV_NAME), Some(host.name.as_str()));
    assert_eq!(host.labels.get(LABEL_CSI_PVC_NAME), Some("orders-db"));
    assert_eq!(host.labels.get(LABEL_REPLICAS), Some("2"));
    let replicas: Vec<_> = host
        .replicas
        .iter()
        .map(|r| (r.node_id.as_str(), r.health.as_str(), r.sync_progress.bytes_remaining))
        .collect();
    assert_eq!(
        replicas,
        [
            (WORKER_2, "ready", 0),
            ("e1f4b9c2-5d3a-4a6e-b7f8-0c9d2e4a6b13", "syncing", 734_003_200)
        ]
    );
    assert_eq!(host.replicas[1].sync_progress.estimated_seconds_remaining, 14);
    assert_eq!(host.nfs_endpoint(), None, "an empty serviceEndpoint is no endpoint");

    assert_eq!(shared.master.health, Health::Offline);
    assert!(!shared.is_healthy());
    assert!(shared.replicas.is_empty(), "replicas: null reads as none");
    assert_eq!(shared.nfs_endpoint(), Some("10.0.0.11:25654"));
    assert_eq!(shared.attachment_type, "nfs");
}

#[test]
fn every_fixture_reads_with_the_client_models() {
    let session: UserSession = parse("login.json");
    assert_eq!(session.username, "storageos");
    assert!(session.is_admin);
    assert_eq!(session.session.expires_in_seconds, 300);
    assert_eq!(session.version, "MQ");

    let cluster: Cluster = parse("cluster.json");
    assert_eq!(cluster.log_level, "info");
    assert_eq!(cluster.log_format, "json");
    assert_eq!(cluster.version, "NDI0MjQyNDI0MjQyNDI0MjQy");
    assert!(!cluster.disable_telemetry);

    assert_nodes(&parse::<Vec<Node>>("nodes.json"));
    assert_namespaces(&parse::<Vec<Namespace>>("namespaces.json"));
    assert_volumes(&parse::<Vec<Volume>>("volumes.json"));

    for (file, text) in [("error-409.json", "in use"), ("error-404.json", "not found")] {
        assert_eq!(parse::<ErrorBody>(file).error, text);
    }
}

/// A server that answers the client's calls with the fixtures.
async fn replay() -> String {
    let body = |name: &'static str| move || async move { (json_headers(), fixture(name)) };
    let app = Router::new()
        .route(
            "/v2/auth/login",
            post(|| async { (login_headers(), fixture("login.json")) }),
        )
        .route("/v2/cluster", get(body("cluster.json")))
        .route("/v2/nodes", get(body("nodes.json")))
        .route(
            "/v2/nodes/{id}",
            delete(|| async { (StatusCode::CONFLICT, json_headers(), fixture("error-409.json")) }),
        )
        .route("/v2/namespaces", get(body("namespaces.json")))
        .route("/v2/namespaces/{ns}/volumes", get(body("volumes.json")))
        .route(
            "/v2/namespaces/{ns}/volumes/{id}",
            get(|| async { (StatusCode::NOT_FOUND, json_headers(), fixture("error-404.json")) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test]
async fn the_client_reads_the_recorded_responses_over_http() {
    let timeout = Duration::from_secs(15);
    let c = Client::new(Config::new(replay().await, "storageos", "storageos").with_timeouts(timeout, timeout)).unwrap();

    let session = c.login().await.unwrap();
    assert!(c.has_token(), "the token comes from the Authorization: Bearer header");
    assert_eq!(session.session.expires_in_seconds, 300);

    assert_eq!(c.get_cluster().await.unwrap().version, "NDI0MjQyNDI0MjQyNDI0MjQy");
    assert_nodes(&c.list_nodes().await.unwrap());
    assert_namespaces(&c.list_namespaces().await.unwrap());
    assert_volumes(&c.list_volumes(SHOP_NAMESPACE).await.unwrap());

    let conflict = c.delete_node(WORKER_1, "Mw").await.unwrap_err();
    assert!(matches!(conflict, Error::Conflict { .. }), "{conflict:?}");
    assert_eq!(conflict.status(), Some(409));
    assert!(conflict.is_retryable());
    assert!(conflict.to_string().contains("in use"), "{conflict}");

    let missing = c.get_volume(SHOP_NAMESPACE, "gone").await.unwrap_err();
    assert!(missing.is_not_found(), "{missing:?}");
    assert_eq!(missing.status(), Some(404));
    assert!(missing.to_string().contains("not found"), "{missing}");
}
