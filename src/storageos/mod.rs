//! StorageOS v2 REST API client: the routes the operator and the api-manager call.
//!
//! [`Client`] logs in on first use, re-logs in once on a 401, maps every error status to a
//! variant of [`Error`], and optionally records `storageos_api_*` transport metrics.

mod auth;
mod client;
mod error;
pub mod kube;
pub mod metrics;
pub mod models;

pub use auth::Credentials;
pub use client::{Client, Config, DEFAULT_LOGIN_TIMEOUT, DEFAULT_PORT, DEFAULT_REQUEST_TIMEOUT, base_url};
pub use error::Error;
pub use kube::CSI_DRIVER;
pub use metrics::ApiMetrics;
pub use models::*;
