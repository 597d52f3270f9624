//! The simulator's state: sessions (login, tokens) and the cluster settings.

use super::*;

impl State {
    pub(super) fn session(&self, token: &str, expires_in: u64) -> UserSession {
        UserSession {
            id: self.user_id.clone(),
            username: self.cfg.username.clone(),
            is_admin: true,
            groups: None,
            created_at: self.user_created,
            updated_at: self.user_created,
            version: "MQ==".into(),
            session: models::Session {
                expires_in_seconds: expires_in,
                token: token.to_string(),
            },
        }
    }

    pub(super) fn issue_token(&mut self) -> (String, u64) {
        let token = new_token();
        let ttl = self.cfg.token_ttl;
        let expires_at = self.now() + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::zero());
        self.sessions.insert(token.clone(), SessionEntry { expires_at });
        (token, ttl.as_secs())
    }

    /// `POST /auth/login`: a new token, or 401 for wrong credentials.
    pub fn login(&mut self, username: &str, password: &str) -> Result<(String, u64, UserSession), ApiError> {
        if username != self.cfg.username || password != self.cfg.password {
            return Err(ApiError::new(401, "invalid credentials"));
        }
        let (token, ttl) = self.issue_token();
        let session = self.session(&token, ttl);
        Ok((token, ttl, session))
    }

    /// Whether `token` is valid now.
    pub fn authenticate(&self, token: Option<&str>) -> Result<(), ApiError> {
        let now = self.now();
        match token.and_then(|t| self.sessions.get(t)) {
            Some(s) if s.expires_at > now => Ok(()),
            _ => Err(ApiError::unauthenticated()),
        }
    }

    /// `POST /auth/refresh`: a new token; the old one stays valid until its own expiry.
    pub fn refresh(&mut self, token: Option<&str>) -> Result<(String, u64, UserSession), ApiError> {
        self.authenticate(token)?;
        let (token, ttl) = self.issue_token();
        let session = self.session(&token, ttl);
        Ok((token, ttl, session))
    }

    /// Expires every issued token; returns how many were still valid.
    pub fn expire_tokens(&mut self) -> usize {
        let now = self.now();
        let past = now - chrono::Duration::seconds(1);
        let mut n = 0;
        for s in self.sessions.values_mut() {
            if s.expires_at > now {
                n += 1;
            }
            s.expires_at = past;
        }
        n
    }

    /// `DELETE /users/self/sessions`: revokes all tokens of the (single) user.
    pub fn revoke_sessions(&mut self) {
        self.sessions.clear();
    }

    // ---------------------------------------------------------------- cluster

    pub fn cluster(&self) -> Cluster {
        self.cluster.clone()
    }

    /// `PUT /cluster`: full replacement of the five settings.
    pub fn update_cluster(&mut self, b: &WriteBody, ignore: bool) -> Result<Cluster, ApiError> {
        self.check_body_version(&self.cluster.version, b.version.as_deref(), ignore)?;
        let log_level = match b.log_level.as_deref().unwrap_or("") {
            "" => "info",
            l @ ("debug" | "info" | "warn" | "error") => l,
            other => {
                return Err(ApiError::bad_request(format!(
                    "logLevel {other:?} is not one of debug, info, warn, error"
                )));
            }
        };
        let log_format = match b.log_format.as_deref().unwrap_or("") {
            "" => "default",
            f @ ("default" | "json") => f,
            other => {
                return Err(ApiError::bad_request(format!(
                    "logFormat {other:?} is not one of default, json"
                )));
            }
        };
        let version = self.bump();
        let now = self.now();
        let c = &mut self.cluster;
        c.disable_telemetry = b.disable_telemetry;
        c.disable_crash_reporting = b.disable_crash_reporting;
        c.disable_version_check = b.disable_version_check;
        c.log_level = log_level.into();
        c.log_format = log_format.into();
        c.updated_at = now;
        c.version = version;
        Ok(c.clone())
    }

    /// Forces the next cluster write with the old version to fail with 412.
    pub fn bump_cluster_version(&mut self) -> String {
        let v = self.bump();
        self.cluster.version = v.clone();
        v
    }
}
