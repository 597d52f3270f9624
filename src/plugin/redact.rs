//! Redaction for the support bundle, in two passes. Structurally, on every object: Secret
//! `data`/`stringData` values, every field whose name looks like a credential (password, token,
//! secret, key, certificate material), every env var whose name does, and
//! `last-applied-configuration` annotations; `managedFields` are dropped. Then, on every file's
//! text (logs too): each value of every Secret the bundle read, as it is and base64-encoded.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use k8s_openapi::api::core::v1::Secret;
use serde_json::Value;

pub use crate::render::secrets::REDACTED;

/// Secret values shorter than this are not scrubbed from text (they would match everywhere).
const MIN_SCRUBBED: usize = 6;

/// What the bundle must not contain.
#[derive(Debug, Default)]
pub struct Redactor {
    known: Vec<String>,
}

impl Redactor {
    /// Remembers every credential-looking value of `secret` (not user names), so that
    /// [`Redactor::text`] removes it anywhere.
    pub fn learn(&mut self, secret: &Secret) {
        for (key, value) in crate::render::secrets::contents(secret) {
            if !credential(&key) {
                continue;
            }
            if let Ok(text) = String::from_utf8(value) {
                let text = text.trim().to_string();
                if text.len() >= MIN_SCRUBBED {
                    self.known.push(B64.encode(&text));
                    self.known.push(text);
                }
            }
        }
        // Longest first, so a value containing another is replaced whole.
        self.known.sort_by_key(|k| std::cmp::Reverse(k.len()));
        self.known.dedup();
    }

    /// `text` with every known secret value replaced by [`REDACTED`].
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for k in &self.known {
            if out.contains(k.as_str()) {
                out = out.replace(k.as_str(), REDACTED);
            }
        }
        out
    }

    /// Redacts an object (any kind) in place.
    pub fn object(&self, obj: &mut Value) {
        if obj["kind"] == "Secret" {
            crate::render::secrets::redact(obj);
        }
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
            if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                for (k, v) in a.iter_mut() {
                    if k.ends_with("last-applied-configuration") || credential(k) {
                        *v = Value::String(REDACTED.into());
                    }
                }
            }
        }
        walk(obj);
    }
}

/// Whether a field or variable name looks like it holds a credential.
pub fn credential(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    // Names and references say where a credential is, not what it is.
    if n.ends_with("name") || n.ends_with("ref") || n.contains("secretref") || n.contains("keyref") {
        return false;
    }
    [
        "password",
        "passwd",
        "token",
        "secret",
        "credential",
        "private",
        "apikey",
        "api_key",
        "cabundle",
    ]
    .iter()
    .any(|w| n.contains(w))
        || n.contains("cert")
        || n.ends_with(".crt")
        || n.ends_with(".pem")
        || (n.ends_with("key") && n != "key")
}

fn walk(v: &mut Value) {
    match v {
        Value::Object(map) => {
            // An env var: {name, value}.
            let env_credential = map.get("name").and_then(Value::as_str).is_some_and(credential);
            for (k, child) in map.iter_mut() {
                let redact_here = (credential(k) || (k == "value" && env_credential)) && child.is_string();
                if redact_here {
                    *child = Value::String(REDACTED.into());
                } else {
                    walk(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(walk),
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn credential_fields_env_and_secrets_are_redacted_names_are_kept() {
        let r = Redactor::default();
        let mut d = json!({
            "kind": "Deployment",
            "metadata": {"name": "d", "managedFields": [{}], "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{\"password\":\"x\"}",
                "example.com/api-token": "tok", "other": "kept"}},
            "spec": {"template": {"spec": {"containers": [{"env": [
                {"name": "API_TOKEN", "value": "tok"},
                {"name": "LOG_LEVEL", "value": "info"},
                {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "s", "key": "password"}}}
            ]}], "tolerations": [{"key": "node-role", "operator": "Exists"}]}}},
            "tls": {"tls.key": "PRIVATE", "tls.crt": "CERT"},
            "secretRefName": "storageos-api"
        });
        r.object(&mut d);
        assert!(d["metadata"].get("managedFields").is_none());
        let a = &d["metadata"]["annotations"];
        assert_eq!(a["kubectl.kubernetes.io/last-applied-configuration"], REDACTED);
        assert_eq!(a["example.com/api-token"], REDACTED);
        assert_eq!(a["other"], "kept");
        let env = &d["spec"]["template"]["spec"]["containers"][0]["env"];
        assert_eq!(env[0]["value"], REDACTED);
        assert_eq!(env[1]["value"], "info");
        assert_eq!(env[2]["valueFrom"]["secretKeyRef"]["name"], "s");
        assert_eq!(d["spec"]["template"]["spec"]["tolerations"][0]["key"], "node-role");
        assert_eq!(d["tls"]["tls.key"], REDACTED);
        assert_eq!(d["tls"]["tls.crt"], REDACTED);
        assert_eq!(d["secretRefName"], "storageos-api");
    }

    #[test]
    fn known_secret_values_leave_any_text() {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "s"}, "stringData": {"password": "hunter2-xyz", "username": "storageos"}
        }))
        .unwrap();
        let mut r = Redactor::default();
        r.learn(&secret);
        let log = format!("login with hunter2-xyz failed; basic {}", B64.encode("hunter2-xyz"));
        let clean = r.text(&log);
        assert_eq!(r.text("user storageos"), "user storageos", "user names stay");
        assert!(
            !clean.contains("hunter2-xyz") && !clean.contains(&B64.encode("hunter2-xyz")),
            "{clean}"
        );
        let mut s = serde_json::to_value(&secret).unwrap();
        s["kind"] = json!("Secret");
        r.object(&mut s);
        assert_eq!(s["stringData"]["password"], REDACTED);
    }
}
