//! What the simulator's HTTP handlers share: the locked state, the handler types, JSON answers
//! and body parsing. Both the `/v2` API (`server`) and the `/_sim` control API (`control`) build
//! on it.

use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Bytes;
use axum::extract::State as AxState;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::state::{ApiError, State};
use storageos_client::models::ErrorBody;

/// State shared by every handler and the control handle.
pub struct Shared {
    state: Mutex<State>,
}

impl Shared {
    pub fn new(state: State) -> Self {
        Self {
            state: Mutex::new(state),
        }
    }

    /// Locks the state. Handlers never panic while holding it, but if one did the state is
    /// still consistent enough for a simulator, so poisoning is ignored.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub type Sh = AxState<Arc<Shared>>;
pub type Answer = Result<Response, ApiError>;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, axum::Json(ErrorBody { error: self.message })).into_response()
    }
}

pub fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    (status, axum::Json(value)).into_response()
}

pub fn ok<T: Serialize>(value: &T) -> Answer {
    Ok(json(StatusCode::OK, value))
}

/// Parses a JSON body; an empty body reads as all fields missing.
pub(crate) fn parse<T: DeserializeOwned + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}
