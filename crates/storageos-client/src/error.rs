//! Typed errors of the StorageOS client, one variant per status code callers act on.

use std::time::Duration;

/// Why a StorageOS API call failed. Match on the variant (or use [`Error::status`]) to decide
/// between retrying, re-reading and giving up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint could not be turned into a URL.
    #[error("invalid StorageOS API endpoint {endpoint:?}: {reason}; use host, host:port or http(s)://host:port")]
    InvalidEndpoint { endpoint: String, reason: String },
    /// The HTTP client could not be built (TLS set-up).
    #[error("cannot build the HTTP client: {0}")]
    Build(#[source] reqwest::Error),
    /// 400: the request did not pass validation.
    #[error("StorageOS rejected the request as invalid ({method} {path}): {message}")]
    BadRequest {
        method: String,
        path: String,
        message: String,
    },
    /// 401 after one re-login, or at login: the credentials are wrong or the token is not accepted.
    #[error(
        "StorageOS authentication failed ({method} {path}): {message}; check the API username and password in the secret"
    )]
    Unauthorized {
        method: String,
        path: String,
        message: String,
    },
    /// 403: the user is not allowed to do this.
    #[error("StorageOS refused the request ({method} {path}): {message}; the API user must be an admin")]
    Forbidden {
        method: String,
        path: String,
        message: String,
    },
    /// 404, or a lookup by name found nothing.
    #[error("not found in StorageOS ({method} {path}): {message}")]
    NotFound {
        method: String,
        path: String,
        message: String,
    },
    /// 409: the entity is in use or already exists; retry later.
    #[error("StorageOS conflict ({method} {path}): {message}; retry once the entity is no longer in use")]
    Conflict {
        method: String,
        path: String,
        message: String,
    },
    /// 412: the `version` sent is stale; re-read the entity and write again.
    #[error("stale version ({method} {path}): {message}; re-read the object and retry")]
    StaleVersion {
        method: String,
        path: String,
        message: String,
    },
    /// 422: the entity's state does not allow the operation now.
    #[error("invalid state for this operation ({method} {path}): {message}")]
    InvalidState {
        method: String,
        path: String,
        message: String,
    },
    /// 423: the entity is locked (a node's lock has not expired yet); retry later.
    #[error("locked ({method} {path}): {message}; retry after the node lock expires")]
    Locked {
        method: String,
        path: String,
        message: String,
    },
    /// 5xx: the server failed; retry with backoff.
    #[error("StorageOS server error {status} ({method} {path}): {message}; retry later")]
    Server {
        status: u16,
        method: String,
        path: String,
        message: String,
    },
    /// Any other unexpected status.
    #[error("unexpected status {status} from StorageOS ({method} {path}): {message}")]
    Unexpected {
        status: u16,
        method: String,
        path: String,
        message: String,
    },
    /// The answer was larger than the client reads (`limit` bytes).
    #[error("StorageOS answered {method} {path} with more than {limit} bytes; refusing to read it")]
    TooLarge { method: String, path: String, limit: usize },
    /// No answer within the timeout.
    #[error("StorageOS did not answer {method} {path} within {timeout:?}; check that the API is up and reachable")]
    Timeout {
        method: String,
        path: String,
        timeout: Duration,
    },
    /// Connection refused, reset, DNS failure, ...
    #[error(
        "cannot reach StorageOS for {method} {path}: {source}; check the API endpoint and that the storageos Service is up"
    )]
    Transport {
        method: String,
        path: String,
        #[source]
        source: reqwest::Error,
    },
    /// The response body was not what the API documents.
    #[error("cannot read the StorageOS response to {method} {path}: {message}")]
    Decode {
        method: String,
        path: String,
        message: String,
    },
    /// Login answered 200 without an `Authorization: Bearer <token>` header.
    #[error("no token found in the StorageOS login response; the server must send `Authorization: Bearer <token>`")]
    NoToken,
}

impl Error {
    /// The HTTP status the server answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::BadRequest { .. } => Some(400),
            Error::Unauthorized { .. } => Some(401),
            Error::Forbidden { .. } => Some(403),
            Error::NotFound { method, .. } if method != "LOOKUP" => Some(404),
            Error::Conflict { .. } => Some(409),
            Error::StaleVersion { .. } => Some(412),
            Error::InvalidState { .. } => Some(422),
            Error::Locked { .. } => Some(423),
            Error::Server { status, .. } | Error::Unexpected { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the entity does not exist (a 404 or a failed lookup by name); deletes treat this
    /// as success.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    /// Whether retrying the same call later may succeed without any change by the caller
    /// (409, 423, 5xx, timeouts and transport errors). A 412 needs a re-read first.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Conflict { .. }
                | Error::Locked { .. }
                | Error::Server { .. }
                | Error::Timeout { .. }
                | Error::Transport { .. }
        )
    }

    /// Maps a status code and the server's `{"error"}` text to a variant.
    pub fn from_status(status: u16, method: &str, path: &str, message: String) -> Self {
        let method = method.to_string();
        let path = path.to_string();
        match status {
            400 => Error::BadRequest { method, path, message },
            401 => Error::Unauthorized { method, path, message },
            403 => Error::Forbidden { method, path, message },
            404 => Error::NotFound { method, path, message },
            409 => Error::Conflict { method, path, message },
            412 => Error::StaleVersion { method, path, message },
            422 => Error::InvalidState { method, path, message },
            423 => Error::Locked { method, path, message },
            500..=599 => Error::Server {
                status,
                method,
                path,
                message,
            },
            _ => Error::Unexpected {
                status,
                method,
                path,
                message,
            },
        }
    }

    /// A lookup by name that matched nothing.
    pub fn lookup_not_found(what: &str, name: &str) -> Self {
        Error::NotFound {
            method: "LOOKUP".into(),
            path: what.into(),
            message: format!("no {what} named {name:?}"),
        }
    }
}
