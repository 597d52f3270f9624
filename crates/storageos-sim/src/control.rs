//! The `/_sim/` control API for demos and out-of-process tests (never under `/v2`, never
//! authenticated, never faulted or logged).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State as AxState};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{delete, get, post, put};
use serde::Deserialize;

use super::http::{Answer, Sh, Shared, parse};
use super::state::{ApiError, Faults, NodeSeed, VolumeSeed};
use storageos_client::models::{Health, Labels};

/// Routes under `/_sim/`.
pub fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/_sim/nodes", post(add_node).get(list_nodes))
        .route("/_sim/nodes/{name}/health", put(set_health))
        .route("/_sim/volumes", post(add_volume).get(list_volumes))
        .route("/_sim/volumes/{namespace}/{name}", delete(remove_volume))
        .route("/_sim/volumes/{namespace}/{name}/nfs", put(set_nfs_endpoint))
        .route(
            "/_sim/volumes/{namespace}/{name}/replicas/health",
            put(set_replica_health),
        )
        .route("/_sim/faults", put(set_faults).get(get_faults))
        .route("/_sim/tokens/expire", post(expire_tokens))
        .route("/_sim/requests", get(requests).delete(clear_requests))
        .route("/_sim/clock/advance", post(advance_clock))
}

/// `{"name", "health"?, "ip"?, "labels"?}`; health is checked strictly here.
#[derive(Deserialize, Default)]
#[serde(default)]
struct NodeBody {
    name: String,
    health: Option<String>,
    ip: Option<String>,
    labels: Labels,
}

fn parse_health(s: &str) -> Result<Health, ApiError> {
    s.parse::<Health>().map_err(ApiError::bad_request)
}

async fn add_node(AxState(sh): Sh, body: Bytes) -> Answer {
    let b: NodeBody = parse(&body)?;
    let health = b.health.as_deref().map(parse_health).transpose()?;
    let node = sh.lock().add_node(NodeSeed {
        name: b.name,
        health,
        ip: b.ip,
        labels: b.labels,
    })?;
    Ok((StatusCode::CREATED, axum::Json(node)).into_response())
}

async fn list_nodes(AxState(sh): Sh) -> Answer {
    Ok(axum::Json(sh.lock().nodes()).into_response())
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct HealthBody {
    health: String,
}

async fn set_health(AxState(sh): Sh, Path(name): Path<String>, body: Bytes) -> Answer {
    let b: HealthBody = parse(&body)?;
    let health = parse_health(&b.health)?;
    let node = sh.lock().set_health(&name, health)?;
    Ok(axum::Json(node).into_response())
}

async fn add_volume(AxState(sh): Sh, body: Bytes) -> Answer {
    let seed: VolumeSeed = parse(&body)?;
    let v = sh.lock().seed_volume(seed)?;
    Ok((StatusCode::CREATED, axum::Json(v)).into_response())
}

async fn remove_volume(AxState(sh): Sh, Path((namespace, name)): Path<(String, String)>) -> Answer {
    let v = sh.lock().remove_volume(&namespace, &name)?;
    Ok(axum::Json(v).into_response())
}

/// `{"serviceEndpoint": "ip:port" | null}`.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct NfsBody {
    service_endpoint: Option<String>,
}

async fn set_nfs_endpoint(AxState(sh): Sh, Path((namespace, name)): Path<(String, String)>, body: Bytes) -> Answer {
    let b: NfsBody = parse(&body)?;
    let v = sh.lock().set_nfs_endpoint(&namespace, &name, b.service_endpoint)?;
    Ok(axum::Json(v).into_response())
}

/// `{"health": "syncing"}`: the health of every replica of the volume.
async fn set_replica_health(AxState(sh): Sh, Path((namespace, name)): Path<(String, String)>, body: Bytes) -> Answer {
    let b: HealthBody = parse(&body)?;
    if b.health.is_empty() {
        return Err(ApiError::bad_request(
            "health is required, for example \"syncing\" or \"ready\"",
        ));
    }
    let v = sh.lock().set_replica_health(&namespace, &name, &b.health)?;
    Ok(axum::Json(v).into_response())
}

async fn list_volumes(AxState(sh): Sh) -> Answer {
    Ok(axum::Json(sh.lock().all_volumes()).into_response())
}

async fn set_faults(AxState(sh): Sh, body: Bytes) -> Answer {
    let f: Faults = parse(&body)?;
    if f.status != 0 && !(400..=599).contains(&f.status) {
        return Err(ApiError::bad_request(format!(
            "status {} is not an error status; use 400..599",
            f.status
        )));
    }
    sh.lock().set_faults(f.clone());
    Ok(axum::Json(f).into_response())
}

async fn get_faults(AxState(sh): Sh) -> Answer {
    Ok(axum::Json(sh.lock().faults()).into_response())
}

async fn expire_tokens(AxState(sh): Sh) -> Answer {
    let n = sh.lock().expire_tokens();
    Ok(axum::Json(serde_json::json!({ "expired": n })).into_response())
}

async fn requests(AxState(sh): Sh) -> Answer {
    Ok(axum::Json(sh.lock().requests()).into_response())
}

async fn clear_requests(AxState(sh): Sh) -> Answer {
    sh.lock().clear_requests();
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AdvanceBody {
    seconds: f64,
}

async fn advance_clock(AxState(sh): Sh, body: Bytes) -> Answer {
    let b: AdvanceBody = parse(&body)?;
    let by = Duration::try_from_secs_f64(b.seconds)
        .map_err(|e| ApiError::bad_request(format!("seconds must be a non-negative number: {e}")))?;
    let mut st = sh.lock();
    st.advance_clock(by);
    Ok(axum::Json(serde_json::json!({ "now": st.now() })).into_response())
}
