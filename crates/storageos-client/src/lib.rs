//! StorageOS v2 REST API client: the routes the operator and the api-manager call. A crate of
//! its own: it depends on nothing of the operator (the operator names it `storageos`).
//!
//! [`Client`] logs in on first use, re-logs in once on a 401, maps every error status to a
//! variant of [`Error`], and optionally records `storageos_api_*` transport metrics.

mod auth;
mod client;
mod error;
pub mod kube;
mod label_set;
pub mod metrics;
pub mod models;
pub mod spans;
pub mod text;

pub use auth::Credentials;
pub use client::{
    Client, Config, DEFAULT_LOGIN_TIMEOUT, DEFAULT_PORT, DEFAULT_REQUEST_TIMEOUT, ERROR_BODY_LIMIT, MAX_RESPONSE_BYTES,
    POOL_IDLE_TIMEOUT, base_url,
};
pub use error::Error;
pub use kube::CSI_DRIVER;
pub use label_set::{SHARED_KEYS_MAX, shared_key};
pub use metrics::ApiMetrics;
pub use models::*;

/// The User-Agent of a client whose owner sets none ([`Config::with_user_agent`]): the
/// operator's own, so audit logs name it.
pub const DEFAULT_USER_AGENT: &str = concat!("storageos-operator/", env!("CARGO_PKG_VERSION"));
