//! Credentials and the session token the client holds.

use std::fmt;
use std::sync::RwLock;

/// API username and password. `Debug` never prints the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Body of `POST /auth/login` (both fields always sent, as in the Go client).
#[derive(serde::Serialize)]
pub(crate) struct LoginBody<'a> {
    pub username: &'a str,
    pub password: &'a str,
}

/// Takes the token out of an `Authorization` response header: `Bearer <token>` (the clients of
/// record take the second space-separated field); a bare token is accepted as well.
pub(crate) fn token_from_header(value: &str) -> Option<String> {
    let value = value.trim();
    let token = match value.split_once(' ') {
        Some((_, t)) => t.trim(),
        None if value.eq_ignore_ascii_case("bearer") => "",
        None => value,
    };
    (!token.is_empty()).then(|| token.to_string())
}

/// The current token. A poisoned lock only means another task panicked mid-write of a
/// `String`; the value is still usable, so the poison is ignored.
#[derive(Default)]
pub(crate) struct TokenCell(RwLock<Option<String>>);

impl TokenCell {
    pub fn get(&self) -> Option<String> {
        match self.0.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    pub fn set(&self, token: Option<String>) {
        match self.0.write() {
            Ok(mut g) => *g = token,
            Err(p) => *p.into_inner() = token,
        }
    }
}

impl fmt::Debug for TokenCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.get().is_some() { "<token>" } else { "<none>" };
        f.write_str(state)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn token_is_taken_from_a_bearer_header() {
        assert_eq!(token_from_header("Bearer abc").as_deref(), Some("abc"));
        assert_eq!(token_from_header("abc").as_deref(), Some("abc"));
        assert_eq!(token_from_header("  "), None);
        assert_eq!(token_from_header("Bearer "), None);
    }

    #[test]
    fn debug_never_shows_secrets() {
        let c = Credentials {
            username: "u".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
        let t = TokenCell::default();
        t.set(Some("secret-token".into()));
        assert!(!format!("{t:?}").contains("secret-token"));
    }
}
