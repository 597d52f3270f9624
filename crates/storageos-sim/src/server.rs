//! The HTTP face of the simulator: `/v2` routes, auth, injected faults and the request log.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State as AxState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};

use super::http::{Answer, Sh, Shared, json, ok, parse};
use super::state::{ApiError, DeleteVersion, DropPoint, Injected, RequestRecord, WriteBody};
use storageos_client::models::{AcceptedMessage, UserSession};

/// Request bodies larger than this are not kept in the request log.
pub const MAX_LOGGED_BODY: usize = 4096;

fn ignore_version(q: &HashMap<String, String>) -> bool {
    q.get("ignore-version").is_some_and(|v| v == "true")
}

fn delete_version(q: &HashMap<String, String>) -> DeleteVersion {
    DeleteVersion {
        version: q.get("version").cloned(),
        ignore: ignore_version(q),
    }
}

/// The token of a request: `Authorization: Bearer <t>` or the bare token (go-cli sends that).
fn request_token(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let t = v.strip_prefix("Bearer ").unwrap_or(v).trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// The `/v2` API plus `control` (the `/_sim` routes), with JSON 404/405 answers.
pub fn router(shared: Arc<Shared>, control: Router<Arc<Shared>>) -> Router {
    let v2 = Router::new()
        .route("/v2/auth/login", post(login))
        .route("/v2/auth/refresh", post(refresh))
        .route("/v2/users/self/sessions", delete(revoke_sessions))
        .route("/v2/cluster", get(get_cluster).put(put_cluster))
        .route("/v2/cluster/licence", get(licence))
        .route("/v2/namespaces", get(list_namespaces).post(create_namespace))
        .route(
            "/v2/namespaces/{ns}",
            get(get_namespace).put(put_namespace).delete(delete_namespace),
        )
        .route("/v2/nodes", get(list_nodes))
        .route("/v2/nodes/{id}", get(get_node).put(put_node).delete(delete_node))
        .route("/v2/nodes/{id}/compute-only", put(put_compute_only))
        .route("/v2/namespaces/{ns}/volumes", get(list_volumes).post(create_volume))
        .route(
            "/v2/namespaces/{ns}/volumes/{id}",
            get(get_volume).put(put_volume).delete(delete_volume),
        )
        .route("/v2/namespaces/{ns}/volumes/{id}/replicas", put(put_replicas))
        .route("/v2/namespaces/{ns}/volumes/{id}/failure-mode", put(put_failure_mode))
        .route(
            "/v2/namespaces/{ns}/volumes/{id}/nfs/mount-endpoint",
            put(put_mount_endpoint),
        )
        .route("/v2/namespaces/{ns}/volumes/{id}/attach", post(attach).delete(detach))
        .route("/v2/namespaces/{ns}/volumes/{id}/nfs/attach", post(nfs_attach));
    v2.merge(control)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(shared.clone(), api_layer))
        .with_state(shared)
}

async fn not_found() -> ApiError {
    ApiError::not_found("route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(405, "method not allowed")
}

/// Around every non-control request: injected latency and failures, the token check, and the
/// request log.
async fn api_layer(AxState(sh): Sh, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if path == "/_sim" || path.starts_with("/_sim/") {
        return next.run(req).await;
    }
    let started = Instant::now();
    let time = sh.lock().now();
    let method = req.method().as_str().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, 4 << 20).await {
        Ok(b) => b,
        Err(e) => {
            return ApiError::bad_request(format!("cannot read the body: {e}")).into_response();
        }
    };
    let (latency, fault) = sh.lock().take_fault(&method, &path);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let injected = fault.is_some();
    let (resp, dropped) = match fault {
        Some(Injected::Fail(err)) => (err.into_response(), None),
        Some(Injected::Drop(DropPoint::BeforeHandling)) => (Response::default(), Some(0)),
        Some(Injected::Drop(DropPoint::AfterHandling)) | None => {
            let needs_auth = path.starts_with("/v2/") && path != "/v2/auth/login";
            let auth = if needs_auth {
                let token = request_token(&parts.headers);
                sh.lock().authenticate(token.as_deref())
            } else {
                Ok(())
            };
            let resp = match auth {
                Err(e) => e.into_response(),
                Ok(()) => next.run(Request::from_parts(parts, Body::from(bytes.clone()))).await,
            };
            let dropped = injected.then(|| resp.status().as_u16());
            (resp, dropped)
        }
    };
    // Login and refresh bodies carry credentials: never keep them. Nor large ones: the log
    // holds up to 10,000 requests, which must not grow to gigabytes.
    let logged_body = if path.starts_with("/v2/auth/") || bytes.len() > MAX_LOGGED_BODY {
        None
    } else {
        serde_json::from_slice(&bytes).ok()
    };
    sh.lock().record(RequestRecord {
        seq: 0,
        time,
        method,
        path,
        query,
        status: dropped.unwrap_or(resp.status().as_u16()),
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        injected,
        dropped: dropped.is_some(),
        body: logged_body,
    });
    match dropped {
        Some(_) => dropped_connection(),
        None => resp,
    }
}

/// An answer whose body fails at once: hyper aborts the connection, so the client sees it
/// closed (or the message cut short), as when a connection drops.
fn dropped_connection() -> Response {
    let cut = futures::stream::once(async {
        Err::<Bytes, _>(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "connection dropped by the simulator (an injected fault)",
        ))
    });
    Response::new(Body::from_stream(cut))
}

// ------------------------------------------------------------------ auth

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct LoginBody {
    username: Option<String>,
    password: Option<String>,
}

fn session_response(token: &str, ttl: u64, session: &UserSession, expires_header: &'static str) -> Answer {
    let mut resp = json(StatusCode::OK, session);
    let auth = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|e| ApiError::new(500, format!("cannot encode the token header: {e}")))?;
    resp.headers_mut().insert(header::AUTHORIZATION, auth);
    resp.headers_mut().insert(expires_header, HeaderValue::from(ttl));
    Ok(resp)
}

async fn login(AxState(sh): Sh, body: Bytes) -> Answer {
    let b: LoginBody = parse(&body)?;
    let (Some(user), Some(pass)) = (b.username, b.password) else {
        return Err(ApiError::bad_request("username and password are required"));
    };
    let (token, ttl, session) = sh.lock().login(&user, &pass)?;
    session_response(&token, ttl, &session, "authorization-expires-seconds")
}

async fn refresh(AxState(sh): Sh, headers: HeaderMap) -> Answer {
    let token = request_token(&headers);
    let (token, ttl, session) = sh.lock().refresh(token.as_deref())?;
    session_response(&token, ttl, &session, "authorization-expires-in")
}

async fn revoke_sessions(AxState(sh): Sh) -> Answer {
    sh.lock().revoke_sessions();
    Ok(StatusCode::OK.into_response())
}

// ------------------------------------------------------------------ cluster

async fn get_cluster(AxState(sh): Sh) -> Answer {
    ok(&sh.lock().cluster())
}

async fn put_cluster(AxState(sh): Sh, Query(q): Query<HashMap<String, String>>, body: Bytes) -> Answer {
    let b: WriteBody = parse(&body)?;
    ok(&sh.lock().update_cluster(&b, ignore_version(&q))?)
}

async fn licence(AxState(sh): Sh) -> Answer {
    let cluster_id = sh.lock().cluster().id;
    ok(&serde_json::json!({
        "clusterID": cluster_id,
        "expiresAt": "2099-01-01T00:00:00Z",
        "clusterCapacityBytes": 5_u64 << 40,
        "usedBytes": 0,
        "kind": "professional",
        "customerName": "storageos-operator simulator",
        "features": ["nfs"],
        "version": "MQ=="
    }))
}

// ------------------------------------------------------------------ namespaces

async fn list_namespaces(AxState(sh): Sh) -> Answer {
    ok(&sh.lock().namespaces())
}

async fn create_namespace(AxState(sh): Sh, body: Bytes) -> Answer {
    let b: WriteBody = parse(&body)?;
    let name = b.name.clone().unwrap_or_default();
    let ns = sh.lock().create_namespace(&name, b.labels)?;
    Ok(json(StatusCode::CREATED, &ns))
}

async fn get_namespace(AxState(sh): Sh, Path(ns): Path<String>) -> Answer {
    ok(&sh.lock().namespace(&ns)?)
}

async fn put_namespace(
    AxState(sh): Sh,
    Path(ns): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Answer {
    let b: WriteBody = parse(&body)?;
    ok(&sh.lock().update_namespace(&ns, &b, ignore_version(&q))?)
}

async fn delete_namespace(AxState(sh): Sh, Path(ns): Path<String>, Query(q): Query<HashMap<String, String>>) -> Answer {
    sh.lock().delete_namespace(&ns, &delete_version(&q))?;
    Ok(StatusCode::OK.into_response())
}

// ------------------------------------------------------------------ nodes

async fn list_nodes(AxState(sh): Sh) -> Answer {
    ok(&sh.lock().nodes())
}

async fn get_node(AxState(sh): Sh, Path(id): Path<String>) -> Answer {
    ok(&sh.lock().node(&id)?)
}

async fn put_node(
    AxState(sh): Sh,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Answer {
    let b: WriteBody = parse(&body)?;
    ok(&sh.lock().update_node(&id, &b, ignore_version(&q))?)
}

async fn put_compute_only(
    AxState(sh): Sh,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Answer {
    let b: WriteBody = parse(&body)?;
    ok(&sh.lock().set_compute_only(&id, &b, ignore_version(&q))?)
}

async fn delete_node(AxState(sh): Sh, Path(id): Path<String>, Query(q): Query<HashMap<String, String>>) -> Answer {
    sh.lock().delete_node(&id, &delete_version(&q))?;
    Ok(StatusCode::OK.into_response())
}

// ------------------------------------------------------------------ volumes

async fn list_volumes(AxState(sh): Sh, Path(ns): Path<String>) -> Answer {
    ok(&sh.lock().volumes(&ns)?)
}

async fn create_volume(AxState(sh): Sh, Path(ns): Path<String>, body: Bytes) -> Answer {
    let b: WriteBody = parse(&body)?;
    let v = sh.lock().create_volume(&ns, &b)?;
    Ok(json(StatusCode::CREATED, &v))
}

async fn get_volume(AxState(sh): Sh, Path((ns, id)): Path<(String, String)>) -> Answer {
    ok(&sh.lock().volume(&ns, &id)?)
}

async fn put_volume(
    AxState(sh): Sh,
    Path((ns, id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Answer {
    let b: WriteBody = parse(&body)?;
    ok(&sh.lock().update_volume(&ns, &id, &b, ignore_version(&q))?)
}

async fn delete_volume(
    AxState(sh): Sh,
    Path((ns, id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Answer {
    sh.lock().delete_volume(&ns, &id, &delete_version(&q))?;
    Ok(StatusCode::OK.into_response())
}

async fn put_replicas(
    AxState(sh): Sh,
    Path((ns, id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Answer {
    let b: WriteBody = parse(&body)?;
    sh.lock().set_replicas(&ns, &id, &b, ignore_version(&q))?;
    Ok(json(
        StatusCode::ACCEPTED,
        &AcceptedMessage {
            msg: "asynchronous request accepted".into(),
        },
    ))
}

async fn put_failure_mode(
    AxState(sh): Sh,
    Path((ns, id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Answer {
    let b: WriteBody = parse(&body)?;
    ok(&sh.lock().set_failure_mode(&ns, &id, &b, ignore_version(&q))?)
}

async fn put_mount_endpoint(
    AxState(sh): Sh,
    Path((ns, id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Answer {
    let b: WriteBody = parse(&body)?;
    sh.lock().set_mount_endpoint(&ns, &id, &b, ignore_version(&q))?;
    Ok(StatusCode::OK.into_response())
}

async fn attach(AxState(sh): Sh, Path((ns, id)): Path<(String, String)>, body: Bytes) -> Answer {
    let b: WriteBody = parse(&body)?;
    ok(&sh.lock().attach(&ns, &id, &b)?)
}

async fn detach(
    AxState(sh): Sh,
    Path((ns, id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Answer {
    sh.lock().detach(&ns, &id, &delete_version(&q))?;
    Ok(StatusCode::OK.into_response())
}

async fn nfs_attach(
    AxState(sh): Sh,
    Path((ns, id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Answer {
    let b: WriteBody = parse(&body)?;
    ok(&sh.lock().nfs_attach(&ns, &id, &b, ignore_version(&q))?)
}
