//! Redaction for the support bundle and the recovery manifests, in two passes. Structurally,
//! on every object: Secret `data`/`stringData` values, every field whose name looks like a
//! credential (password, token, secret, key, certificate material), every env var whose name
//! does, the value after a credential flag in `args`/`command`, and `last-applied-configuration`
//! annotations; `managedFields` are dropped. Then, on every file's text (logs too): each value
//! learnt from the Secrets, env vars and addresses the command read, as it is, JSON-escaped,
//! URL-encoded and base64-encoded (also as `user:password`), and credentials of a known shape
//! ([`patterns`]): URL userinfo, bearer tokens, JWTs, `name=value` with a credential name; JSON
//! log lines get the structural pass too.

mod patterns;
pub mod sources;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD as B64, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use k8s_openapi::api::core::v1::Secret;
use serde_json::Value;

pub use crate::render::secrets::REDACTED;

/// Secret values shorter than this are not scrubbed from text (they would match everywhere).
const MIN_SCRUBBED: usize = 6;

/// What the bundle must not contain.
#[derive(Debug, Default)]
pub struct Redactor {
    /// Credential values, as read.
    values: Vec<Vec<u8>>,
    /// User names that go with them, for `base64(user:password)`; not redacted themselves.
    users: Vec<String>,
    /// Every text form of every value, longest first.
    known: Vec<String>,
}

impl Redactor {
    /// Remembers every credential-looking value of `secret` (not user names, which it keeps
    /// for the `user:password` form), so that [`Redactor::text`] removes it anywhere.
    pub fn learn(&mut self, secret: &Secret) {
        for (key, value) in crate::render::secrets::contents(secret) {
            if credential(&key) {
                self.values.push(value);
            } else if key.to_ascii_lowercase().contains("username") {
                self.users
                    .extend(String::from_utf8(value).ok().map(|u| u.trim().to_string()));
            }
        }
        self.rebuild();
    }

    /// Remembers every value of `secret`, whatever its keys are called (key material such as
    /// volume keys: `key`, `iv`, `vuk`, `hmac`).
    pub fn learn_all(&mut self, secret: &Secret) {
        self.values
            .extend(crate::render::secrets::contents(secret).into_values());
        self.rebuild();
    }

    /// Remembers one credential value (an env var's, say).
    pub fn learn_value(&mut self, value: &str) {
        self.values.push(value.as_bytes().to_vec());
        self.rebuild();
    }

    /// Remembers the credentials in the userinfo of every URL of a comma-separated list (such
    /// as `kvBackend.address`): the password, and `user:password`.
    pub fn learn_address(&mut self, list: &str) {
        for url in list.split(',').filter_map(|e| reqwest::Url::parse(e.trim()).ok()) {
            let user = percent_decode(url.username());
            if let Some(password) = url.password().map(percent_decode) {
                self.values.push(format!("{user}:{password}").into_bytes());
                self.values.push(password.into_bytes());
                self.users.push(user);
            } else if !user.is_empty() {
                self.values.push(user.into_bytes());
            }
        }
        self.rebuild();
    }

    /// Every text form of every value, longest first, so a form containing another is
    /// replaced whole.
    fn rebuild(&mut self) {
        let mut known = Vec::new();
        for value in &self.values {
            let text = String::from_utf8(value.clone()).ok();
            let trimmed = text.as_deref().map(str::trim);
            let mut raw: Vec<&[u8]> = vec![value.as_slice()];
            raw.extend(trimmed.map(str::as_bytes));
            for bytes in raw {
                if bytes.len() >= MIN_SCRUBBED {
                    known.push(B64.encode(bytes));
                    known.push(STANDARD_NO_PAD.encode(bytes));
                    known.push(URL_SAFE_NO_PAD.encode(bytes));
                }
            }
            let Some(t) = trimmed.filter(|t| t.len() >= MIN_SCRUBBED) else {
                continue;
            };
            known.push(t.to_string());
            known.push(
                serde_json::to_string(t)
                    .unwrap_or_default()
                    .trim_matches('"')
                    .to_string(),
            );
            known.push(percent_encode(t, false));
            known.push(percent_encode(t, true));
            known.push(percent_encode(t, false).replace("%20", "+"));
            for user in &self.users {
                let pair = format!("{user}:{t}");
                known.push(B64.encode(&pair));
                known.push(STANDARD_NO_PAD.encode(&pair));
            }
        }
        known.retain(|k| k.len() >= MIN_SCRUBBED);
        known.sort_by_key(|k| std::cmp::Reverse(k.len()));
        known.dedup();
        self.known = known;
    }

    /// `text` with every known secret value, and every credential of a known shape, replaced
    /// by [`REDACTED`].
    pub fn text(&self, text: &str) -> String {
        let mut out: String = text
            .split_inclusive('\n')
            .map(|line| self.json_line(line).unwrap_or_else(|| line.to_string()))
            .collect();
        for k in &self.known {
            if out.contains(k.as_str()) {
                out = out.replace(k.as_str(), REDACTED);
            }
        }
        patterns::scrub(&out)
    }

    /// A JSON log line with the structural pass applied, when it changed something.
    fn json_line(&self, line: &str) -> Option<String> {
        let body = line.trim_end();
        if !body.trim_start().starts_with('{') {
            return None;
        }
        let mut v: Value = serde_json::from_str(body).ok()?;
        let before = v.clone();
        walk(&mut v);
        (v != before).then(|| format!("{v}{}", &line[body.len()..]))
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

/// `text` percent-encoded (everything but RFC 3986's unreserved characters), with upper- or
/// lower-case hex digits.
fn percent_encode(text: &str, lower: bool) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
            _ if lower => format!("%{b:02x}"),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `text` with `%XX` escapes decoded (as URL userinfo holds it).
fn percent_decode(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(byte) if b[i] == b'%' => {
                out.push(byte);
                i += 3;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
        Value::Array(items) => {
            // `args`/`command`: the value after a credential flag (`--admin-password`, `VALUE`).
            let mut after_flag = false;
            for item in items.iter_mut() {
                match item.as_str() {
                    Some(s) if after_flag && !s.starts_with('-') => *item = Value::String(REDACTED.into()),
                    _ => walk(item),
                }
                after_flag = item
                    .as_str()
                    .is_some_and(|s| s.starts_with('-') && !s.contains('=') && credential(s.trim_start_matches('-')));
            }
        }
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

    fn learnt(data: serde_json::Value) -> Redactor {
        let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": data})).unwrap();
        let mut r = Redactor::default();
        r.learn(&secret);
        r
    }

    #[test]
    fn json_escaped_and_url_encoded_forms_leave_any_text() {
        let password = "pa\"ss\\w@rd 1/2";
        let r = learnt(json!({"password": password}));
        let json_log = serde_json::to_string(&json!({"msg": "login", "body": format!("password={password}")})).unwrap();
        assert!(
            json_log.contains("pa\\\"ss"),
            "the test needs the escaped form: {json_log}"
        );
        let url_log =
            "POST /login?user=u&pw=pa%22ss%5Cw%40rd%201%2F2 and pa%22ss%5cw%40rd%201%2f2 and pa%22ss%5Cw%40rd+1%2F2";
        for text in [json_log.as_str(), url_log] {
            let clean = r.text(text);
            assert!(!clean.contains("ss%5") && !clean.contains("ss\\\\w"), "{clean}");
        }
    }

    #[test]
    fn user_and_password_together_in_base64_leave_any_text() {
        let r = learnt(json!({"username": "storageos", "password": "hunter2-xyz"}));
        let basic = B64.encode("storageos:hunter2-xyz");
        let clean = r.text(&format!("Authorization: Basic {basic}"));
        assert_eq!(clean, format!("Authorization: Basic {REDACTED}"));
        assert_eq!(r.text("user storageos"), "user storageos", "user names stay");
    }

    #[test]
    fn webhook_and_volume_keys_leave_any_text() {
        let pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n";
        let mut r = learnt(json!({"tls.key": pem, "tls.crt": "x"}));
        let volume_key: Secret = serde_json::from_value(json!({"metadata": {"name": "storageos-volume-key-1"},
            "data": {"key": B64.encode([0xA5u8; 64]), "iv": B64.encode([7u8; 32])}}))
        .unwrap();
        r.learn_all(&volume_key);
        let log = format!(
            "{{\"level\":\"debug\",\"msg\":{}}}\nkey {} iv {}",
            serde_json::to_string(pem).unwrap(),
            B64.encode([0xA5u8; 64]),
            B64.encode([7u8; 32])
        );
        let clean = r.text(&log);
        assert!(
            !clean.contains("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC") && !clean.contains(&B64.encode([0xA5u8; 64])),
            "{clean}"
        );
        assert!(!clean.contains(&B64.encode([7u8; 32])), "{clean}");
    }

    #[test]
    fn tokens_in_json_logs_are_redacted_by_their_field() {
        let r = Redactor::default();
        let line = "{\"level\":\"info\",\"sessionToken\":\"opaque-session-1234\",\"node\":\"n1\"}\n";
        let clean = r.text(line);
        assert!(
            !clean.contains("opaque-session-1234") && clean.contains("\"node\":\"n1\""),
            "{clean}"
        );
        assert!(clean.ends_with('\n'));
        let plain = "{\"level\":\"info\",\"msg\":\"ok\"}\n";
        assert_eq!(r.text(plain), plain, "a line with nothing to redact is kept as it was");
    }

    #[test]
    fn kv_backend_userinfo_leaves_every_file_in_every_form() {
        let mut r = Redactor::default();
        let address = "http://root:etcd%40pass1@etcd-0:2379,http://etcd-1:2379";
        r.learn_address(address);
        let text = format!(
            "address: {address}\nlog: connecting as root with etcd@pass1\nbasic {}\n",
            B64.encode("root:etcd@pass1")
        );
        let clean = r.text(&text);
        for leaked in ["etcd%40pass1", "etcd@pass1", &B64.encode("root:etcd@pass1")] {
            assert!(!clean.contains(leaked), "{leaked} in {clean}");
        }
        assert!(clean.contains("http://etcd-1:2379"), "{clean}");
    }

    #[test]
    fn secret_looking_env_of_the_operator_is_redacted_everywhere() {
        let d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
            "metadata": {"name": "storageos-operator"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "operator", "env": [
                {"name": "FOO_TOKEN", "value": "tok-live-only-42"},
                {"name": "DB_PASSWORD", "value": "pw-live-only-42"},
                {"name": "LOG_LEVEL", "value": "debug-verbose"}]}]}}}
        }))
        .unwrap();
        let mut r = Redactor::default();
        sources::learn_env(&mut r, &d);
        let text = format!(
            "annotation: tok-live-only-42\nencoded: {}\nlevel: debug-verbose\narg: pw-live-only-42\n",
            B64.encode("tok-live-only-42")
        );
        let clean = r.text(&text);
        assert!(
            !clean.contains("live-only") && !clean.contains(&B64.encode("tok-live-only-42")),
            "{clean}"
        );
        assert!(clean.contains("debug-verbose"), "{clean}");
    }

    #[test]
    fn the_value_after_a_credential_flag_is_redacted() {
        let r = Redactor::default();
        let mut job = json!({"kind": "Job", "spec": {"args": ["--admin-password", "hunter2", "--v", "2"]}});
        r.object(&mut job);
        assert_eq!(job["spec"]["args"], json!(["--admin-password", REDACTED, "--v", "2"]));
    }
}
