//! Black-box HTTP tests of the simulator: plain reqwest, no client code, the wire as it is.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code may fail loudly

use reqwest::{Response, StatusCode};
use serde_json::{Value, json};
use storageos_operator::sim::{self, SimHandle, Simulator};

struct Api {
    sim: SimHandle,
    http: reqwest::Client,
}

impl Api {
    async fn start() -> Self {
        Self {
            sim: Simulator::start(sim::Config::default()).await.unwrap(),
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(5))
                .build()
                .unwrap(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.sim.url())
    }

    async fn login(&self) -> String {
        let resp = self
            .http
            .post(self.url("/v2/auth/login"))
            .json(&json!({"username": "storageos", "password": "storageos"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let header = resp.headers()["authorization"].to_str().unwrap().to_string();
        header.strip_prefix("Bearer ").unwrap().to_string()
    }

    async fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> Response {
        let mut req = self.http.request(method.parse().unwrap(), self.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        req.send().await.unwrap()
    }
}

/// Asserts a JSON error answer and returns its text.
async fn error_body(resp: Response, status: u16) -> String {
    assert_eq!(resp.status().as_u16(), status);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let body: Value = resp.json().await.unwrap();
    body["error"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn login_returns_a_bearer_header_and_a_user_session() {
    let api = Api::start().await;
    let resp = api
        .http
        .post(api.url("/v2/auth/login"))
        .json(&json!({"username": "storageos", "password": "storageos"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let auth = resp.headers()["authorization"].to_str().unwrap().to_string();
    let (scheme, token) = auth.split_once(' ').unwrap();
    assert_eq!(scheme, "Bearer");
    assert!(!token.is_empty() && !token.contains(' '));
    assert_eq!(resp.headers()["authorization-expires-seconds"], "300");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["username"], "storageos");
    assert_eq!(body["isAdmin"], true);
    assert_eq!(body["session"]["token"], token);
    assert_eq!(body["session"]["expiresInSeconds"], 300);

    let bad = api
        .call(
            "POST",
            "/v2/auth/login",
            None,
            Some(json!({"username": "storageos", "password": "nope"})),
        )
        .await;
    assert!(!bad.headers().contains_key("authorization"));
    error_body(bad, 401).await;
    let malformed = api
        .call("POST", "/v2/auth/login", None, Some(json!({"username": "x"})))
        .await;
    error_body(malformed, 400).await;
}

#[tokio::test]
async fn requests_without_a_valid_token_get_401_json() {
    let api = Api::start().await;
    let msg = error_body(api.call("GET", "/v2/nodes", None, None).await, 401).await;
    assert_eq!(msg, "authentication required");
    error_body(api.call("GET", "/v2/cluster", Some("forged"), None).await, 401).await;

    let token = api.login().await;
    let ok = api.call("GET", "/v2/nodes", Some(&token), None).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(ok.headers()["content-type"], "application/json");
    assert_eq!(ok.text().await.unwrap(), "[]", "empty lists are [] not null");

    // The bare token (go-cli's spelling) is accepted too.
    let bare = api
        .http
        .get(api.url("/v2/nodes"))
        .header("authorization", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), StatusCode::OK);

    // Expired through the control API → 401 again; refresh with it fails as well.
    let expired: Value = api
        .http
        .post(api.url("/_sim/tokens/expire"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(expired["expired"], 1);
    error_body(api.call("GET", "/v2/nodes", Some(&token), None).await, 401).await;
    error_body(api.call("POST", "/v2/auth/refresh", Some(&token), None).await, 401).await;
}

#[tokio::test]
async fn refresh_issues_a_new_token_and_keeps_the_old_one_valid() {
    let api = Api::start().await;
    let token = api.login().await;
    let resp = api.call("POST", "/v2/auth/refresh", Some(&token), None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["authorization-expires-in"], "300");
    let new = resp.headers()["authorization"]
        .to_str()
        .unwrap()
        .strip_prefix("Bearer ")
        .unwrap()
        .to_string();
    assert_ne!(new, token);
    for t in [&token, &new] {
        assert_eq!(
            api.call("GET", "/v2/cluster", Some(t), None).await.status(),
            StatusCode::OK
        );
    }
    let revoke = api.call("DELETE", "/v2/users/self/sessions", Some(&new), None).await;
    assert_eq!(revoke.status(), StatusCode::OK);
    error_body(api.call("GET", "/v2/cluster", Some(&token), None).await, 401).await;
}

#[tokio::test]
async fn unknown_routes_are_404_json_and_wrong_methods_405_json() {
    let api = Api::start().await;
    let token = api.login().await;
    let msg = error_body(api.call("GET", "/v2/no-such-thing", Some(&token), None).await, 404).await;
    assert!(msg.contains("not found"), "{msg}");
    error_body(api.call("GET", "/elsewhere", None, None).await, 404).await;
    error_body(api.call("GET", "/_sim/nothing-here", None, None).await, 404).await;
    error_body(api.call("POST", "/v2/nodes", Some(&token), Some(json!({}))).await, 405).await;
}

#[tokio::test]
async fn node_delete_while_online_is_409_and_the_control_api_drives_health() {
    let api = Api::start().await;
    let token = api.login().await;
    let created = api
        .call(
            "POST",
            "/_sim/nodes",
            None,
            Some(json!({"name": "node-a", "health": "online"})),
        )
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let nodes: Value = api
        .call("GET", "/v2/nodes", Some(&token), None)
        .await
        .json()
        .await
        .unwrap();
    let node = &nodes[0];
    assert_eq!(node["name"], "node-a");
    assert_eq!(node["health"], "online");
    for key in [
        "id",
        "ioEndpoint",
        "supervisorEndpoint",
        "gossipEndpoint",
        "clusteringEndpoint",
        "createdAt",
        "updatedAt",
        "version",
    ] {
        assert!(node[key].is_string(), "{key} missing in {node}");
    }
    assert!(node["capacity"]["total"].is_u64());
    let id = node["id"].as_str().unwrap();
    let version = node["version"].as_str().unwrap();

    let path = format!("/v2/nodes/{id}?version={version}");
    let msg = error_body(api.call("DELETE", &path, Some(&token), None).await, 409).await;
    assert_eq!(msg, "node still in use");

    // Missing version on a DELETE → 400; a PUT without a version → 412.
    error_body(
        api.call("DELETE", &format!("/v2/nodes/{id}"), Some(&token), None).await,
        400,
    )
    .await;
    let msg = error_body(
        api.call(
            "PUT",
            &format!("/v2/nodes/{id}"),
            Some(&token),
            Some(json!({"labels": {"a": "b"}})),
        )
        .await,
        412,
    )
    .await;
    assert_eq!(msg, "attempting to write stale object");

    let off = api
        .call(
            "PUT",
            "/_sim/nodes/node-a/health",
            None,
            Some(json!({"health": "offline"})),
        )
        .await;
    assert_eq!(off.status(), StatusCode::OK);
    error_body(api.call("DELETE", &path, Some(&token), None).await, 423).await;
    let bad = api
        .call(
            "PUT",
            "/_sim/nodes/node-a/health",
            None,
            Some(json!({"health": "sleepy"})),
        )
        .await;
    error_body(bad, 400).await;
    let advanced = api
        .call("POST", "/_sim/clock/advance", None, Some(json!({"seconds": 31})))
        .await;
    assert_eq!(advanced.status(), StatusCode::OK);
    let gone = api.call("DELETE", &path, Some(&token), None).await;
    assert_eq!(gone.status(), StatusCode::OK);
    assert_eq!(gone.text().await.unwrap(), "");
    error_body(api.call("DELETE", &path, Some(&token), None).await, 404).await;
}

#[tokio::test]
async fn namespace_delete_with_volumes_is_409() {
    let api = Api::start().await;
    let token = api.login().await;
    api.call(
        "POST",
        "/_sim/nodes",
        None,
        Some(json!({"name": "n1", "health": "online"})),
    )
    .await;
    let seeded = api
        .call(
            "POST",
            "/_sim/volumes",
            None,
            Some(json!({
                "namespace": "apps", "name": "pvc-1", "pvcName": "data", "pvcNamespace": "apps",
                "masterNode": "n1", "replicas": 0, "nfsServiceEndpoint": "10.0.0.1:25000"
            })),
        )
        .await;
    assert_eq!(seeded.status(), StatusCode::CREATED);
    let namespaces: Value = api
        .call("GET", "/v2/namespaces", Some(&token), None)
        .await
        .json()
        .await
        .unwrap();
    let ns = &namespaces[0];
    assert_eq!(ns["name"], "apps");
    assert_ne!(ns["id"], ns["name"]);
    let ns_id = ns["id"].as_str().unwrap();
    let volumes: Value = api
        .call("GET", &format!("/v2/namespaces/{ns_id}/volumes"), Some(&token), None)
        .await
        .json()
        .await
        .unwrap();
    let v = &volumes[0];
    assert_eq!(v["name"], "pvc-1");
    assert_eq!(v["namespaceID"], ns_id);
    assert_eq!(v["nfs"]["serviceEndpoint"], "10.0.0.1:25000");
    assert_eq!(v["attachmentType"], "nfs");
    assert_eq!(v["master"]["health"], "online");
    assert_eq!(v["labels"]["csi.storage.k8s.io/pvc/name"], "data");
    assert_eq!(v["replicas"], json!([]));

    let path = format!("/v2/namespaces/{ns_id}?version={}", ns["version"].as_str().unwrap());
    let msg = error_body(api.call("DELETE", &path, Some(&token), None).await, 409).await;
    assert!(msg.contains("in use"), "{msg}");

    // Replicas always answer 202 with a message.
    let vid = v["id"].as_str().unwrap();
    let r = api
        .call(
            "PUT",
            &format!("/v2/namespaces/{ns_id}/volumes/{vid}/replicas"),
            Some(&token),
            Some(json!({"version": v["version"]})),
        )
        .await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let body: Value = r.json().await.unwrap();
    assert!(body["msg"].is_string());
}

#[tokio::test]
async fn the_control_api_removes_a_volume_even_attached() {
    let api = Api::start().await;
    let token = api.login().await;
    api.call("POST", "/_sim/nodes", None, Some(json!({"name": "n1"}))).await;
    let seed = json!({"namespace": "apps", "name": "pvc-1", "pvcName": "data", "masterNode": "n1",
                      "nfsServiceEndpoint": "10.0.0.1:25000"});
    api.call("POST", "/_sim/volumes", None, Some(seed)).await;
    let removed = api.call("DELETE", "/_sim/volumes/apps/pvc-1", None, None).await;
    assert_eq!(removed.status(), StatusCode::OK);
    let namespaces: Value = api
        .call("GET", "/v2/namespaces", Some(&token), None)
        .await
        .json()
        .await
        .unwrap();
    let ns_id = namespaces[0]["id"].as_str().unwrap();
    let volumes: Value = api
        .call("GET", &format!("/v2/namespaces/{ns_id}/volumes"), Some(&token), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(volumes, json!([]));
    let msg = error_body(api.call("DELETE", "/_sim/volumes/apps/pvc-1", None, None).await, 404).await;
    assert!(msg.contains("apps/pvc-1"), "{msg}");
}

/// The control API sets a volume's replicas syncing (and back), and keeps the image whose
/// node pods stay offline with the other faults.
#[tokio::test]
async fn the_control_api_sets_replica_health_and_the_offline_image() {
    let api = Api::start().await;
    for n in ["n1", "n2"] {
        api.call("POST", "/_sim/nodes", None, Some(json!({"name": n}))).await;
    }
    let seed = json!({"namespace": "apps", "name": "pv-1", "masterNode": "n1", "replicas": 1});
    api.call("POST", "/_sim/volumes", None, Some(seed)).await;
    let path = "/_sim/volumes/apps/pv-1/replicas/health";
    let v: Value = api
        .call("PUT", path, None, Some(json!({"health": "syncing"})))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["replicas"][0]["health"], "syncing");
    error_body(api.call("PUT", path, None, Some(json!({}))).await, 400).await;
    let missing = "/_sim/volumes/apps/nothing/replicas/health";
    error_body(
        api.call("PUT", missing, None, Some(json!({"health": "ready"}))).await,
        404,
    )
    .await;

    let faults = json!({"offlineWithImage": "storageos/node:v9.9.9"});
    assert_eq!(
        api.call("PUT", "/_sim/faults", None, Some(faults)).await.status(),
        StatusCode::OK
    );
    let now: Value = api.call("GET", "/_sim/faults", None, None).await.json().await.unwrap();
    assert_eq!(now["offlineWithImage"], "storageos/node:v9.9.9");
}

#[tokio::test]
async fn faults_and_the_request_log_over_http() {
    let api = Api::start().await;
    let token = api.login().await;
    let set = api
        .call(
            "PUT",
            "/_sim/faults",
            None,
            Some(json!({"failNext": 2, "status": 503, "latencyMs": 0})),
        )
        .await;
    assert_eq!(set.status(), StatusCode::OK);
    for _ in 0..2 {
        let msg = error_body(api.call("GET", "/v2/nodes", Some(&token), None).await, 503).await;
        assert!(msg.contains("injected"), "{msg}");
    }
    assert_eq!(
        api.call("GET", "/v2/nodes", Some(&token), None).await.status(),
        StatusCode::OK
    );
    let bad = api
        .call("PUT", "/_sim/faults", None, Some(json!({"failNext": 1, "status": 200})))
        .await;
    error_body(bad, 400).await;

    let log: Value = api
        .call("GET", "/_sim/requests", None, None)
        .await
        .json()
        .await
        .unwrap();
    let entries: Vec<(String, String, u64, bool)> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["method"].as_str().unwrap().to_string(),
                r["path"].as_str().unwrap().to_string(),
                r["status"].as_u64().unwrap(),
                r["injected"].as_bool().unwrap(),
            )
        })
        .collect();
    let want = [
        ("POST", "/v2/auth/login", 200, false),
        ("GET", "/v2/nodes", 503, true),
        ("GET", "/v2/nodes", 503, true),
        ("GET", "/v2/nodes", 200, false),
    ]
    .map(|(m, p, s, i)| (m.to_string(), p.to_string(), s, i));
    assert_eq!(entries, want, "control requests are not logged");
    assert!(log[0]["body"].is_null(), "login bodies (passwords) are never kept");

    let cleared = api.call("DELETE", "/_sim/requests", None, None).await;
    assert_eq!(cleared.status(), StatusCode::NO_CONTENT);
    let log: Value = api
        .call("GET", "/_sim/requests", None, None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(log, json!([]));
}

/// The request log keeps small bodies, never large ones (it holds up to 10,000 requests).
#[tokio::test]
async fn large_request_bodies_are_not_kept_in_the_log() {
    let api = Api::start().await;
    let token = api.login().await;
    let small = json!({"name": "small"});
    let large = json!({"name": "large", "labels": {"pad": "x".repeat(64 * 1024)}});
    api.call("POST", "/v2/namespaces", Some(&token), Some(small.clone()))
        .await;
    api.call("POST", "/v2/namespaces", Some(&token), Some(large)).await;
    let posts: Vec<_> = api
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == "/v2/namespaces")
        .collect();
    assert_eq!(posts.len(), 2);
    assert_eq!(posts[0].body.as_ref(), Some(&small));
    assert_eq!(posts[1].body, None, "a 64 KiB body was kept");
}
