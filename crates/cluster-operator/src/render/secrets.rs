//! The Secrets the operator copies out of the user's credentials Secret, and their redaction.
//!
//! Values are passed to the templates base64-encoded (as `data`), so no secret byte is ever
//! interpreted as template or YAML text.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::Secret;
use serde_json::{Value, json};

use super::Error;

/// What `render` prints instead of a secret value.
pub const REDACTED: &str = "<redacted>";

/// The CSI credential Secrets: (name in the operand namespace, key prefix in the source Secret,
/// name in the template values).
pub const CSI_SECRETS: [(&str, &str, &str); 4] = [
    ("csi-provisioner-secret", "csiProvision", "provision"),
    (
        "csi-controller-publish-secret",
        "csiControllerPublish",
        "controllerPublish",
    ),
    ("csi-node-publish-secret", "csiNodePublish", "nodePublish"),
    (
        "csi-controller-expand-secret",
        "csiControllerExpand",
        "controllerExpand",
    ),
];

/// A Secret's content: `data`, with `stringData` over it as the apiserver would merge them (a
/// Secret read from a file may use either).
pub fn contents(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in secret.string_data.iter().flatten() {
        out.insert(k.clone(), v.as_bytes().to_vec());
    }
    out
}

fn b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

fn secret_name(secret: &Secret) -> String {
    format!(
        "{}/{}",
        secret.metadata.namespace.as_deref().unwrap_or_default(),
        secret.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The API credentials: keys `apiUsername`/`apiPassword` of the Go operator's Secret, else
/// `username`/`password` (the layout of the newer operator and of our example). A missing key is
/// an empty value, as in the Go operator.
pub fn api_credentials(data: &BTreeMap<String, Vec<u8>>) -> (Vec<u8>, Vec<u8>) {
    let get = |primary: &str, fallback: &str| {
        data.get(primary)
            .or_else(|| data.get(fallback))
            .cloned()
            .unwrap_or_default()
    };
    (get("apiUsername", "username"), get("apiPassword", "password"))
}

/// The template values of every Secret derived from the credentials Secret: `init` (node
/// bootstrap and api-manager credentials), `csi` (one entry per CSI Secret; a CSI credential
/// missing from the source falls back to the API credentials, so a Secret with just a username
/// and password gives a working cluster; the Go operator wrote empty values, which adoption
/// replaces) and `tls` (ingress certificate, only when `tls`; a missing key fails the render with
/// the key named, where the Go operator created an empty, unusable `tls-secret`).
pub fn credential_values(secret: &Secret, tls: bool) -> Result<Value, Error> {
    let data = contents(secret);
    let (user, pass) = api_credentials(&data);
    let mut csi = serde_json::Map::new();
    for (_, prefix, name) in CSI_SECRETS {
        let u = data.get(&format!("{prefix}Username")).unwrap_or(&user);
        let p = data.get(&format!("{prefix}Password")).unwrap_or(&pass);
        csi.insert(name.to_string(), json!({"username": b64(u), "password": b64(p)}));
    }
    let tls_value = if tls {
        let get = |key: &'static str| {
            data.get(key).map(|v| b64(v)).ok_or_else(|| Error::MissingSecretKey {
                secret: secret_name(secret),
                key,
                why: "spec.ingress.tls is true",
            })
        };
        json!({"tls.crt": get("tls.crt")?, "tls.key": get("tls.key")?})
    } else {
        Value::Null
    };
    Ok(json!({
        "init": {"username": b64(&user), "password": b64(&pass)},
        "csi": Value::Object(csi),
        "tls": tls_value,
    }))
}

/// The keys of the etcd client TLS Secret the node reads (`/run/storageos/pki/<key>`, the
/// `ETCD_TLS_CLIENT_*` paths); the only ones copied.
pub const ETCD_CLIENT_KEYS: [&str; 3] = ["etcd-client-ca.crt", "etcd-client.crt", "etcd-client.key"];

/// The etcd client TLS Secret copied into the operand namespace: its type (always `Opaque`, so
/// the source's type, a ServiceAccount token's say, is never recreated elsewhere) and the
/// documented client keys ([`ETCD_CLIENT_KEYS`]), nothing else of the source.
pub fn etcd_values(secret: &Secret) -> Value {
    let data: BTreeMap<String, String> = contents(secret)
        .iter()
        .filter(|(k, _)| ETCD_CLIENT_KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), b64(v)))
        .collect();
    json!({
        "type": "Opaque",
        "data": data,
    })
}

/// A Secret (as JSON) with every value of `data` and `stringData` replaced by [`REDACTED`]; the
/// keys stay so the shape is visible, and the marker is not base64, so the output cannot be
/// applied by mistake with fake credentials.
pub fn redact(secret: &mut Value) {
    for field in ["data", "stringData"] {
        if let Some(Value::Object(map)) = secret.get_mut(field) {
            for v in map.values_mut() {
                *v = Value::String(REDACTED.to_string());
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn secret(pairs: &[(&str, &str)]) -> Secret {
        Secret {
            string_data: Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn go_keys_win_over_plain_keys_and_csi_falls_back_to_api_credentials() {
        let v = credential_values(
            &secret(&[
                ("apiUsername", "admin"),
                ("username", "other"),
                ("password", "pw"),
                ("csiProvisionUsername", "prov"),
            ]),
            false,
        )
        .unwrap();
        assert_eq!(v["init"]["username"], b64(b"admin"));
        assert_eq!(v["init"]["password"], b64(b"pw"));
        assert_eq!(v["csi"]["provision"]["username"], b64(b"prov"));
        assert_eq!(v["csi"]["provision"]["password"], b64(b"pw"));
        assert_eq!(v["csi"]["nodePublish"]["username"], b64(b"admin"));
        assert_eq!(v["tls"], Value::Null);
    }

    #[test]
    fn ingress_tls_without_a_certificate_is_a_clear_error() {
        let err = credential_values(&secret(&[("username", "u")]), true).unwrap_err();
        assert!(err.to_string().contains("tls.crt"), "{err}");
    }

    #[test]
    fn redaction_keeps_keys_and_hides_values() {
        let mut s = json!({"kind": "Secret", "data": {"x": "eQ=="}, "stringData": {"password": "hunter2"}});
        redact(&mut s);
        assert_eq!(
            s,
            json!({"kind": "Secret", "data": {"x": REDACTED}, "stringData": {"password": REDACTED}})
        );
    }

    #[test]
    fn etcd_values_copies_only_the_three_client_keys_as_opaque() {
        let mut source = secret(&[
            ("etcd-client-ca.crt", "ca"),
            ("etcd-client.crt", "crt"),
            ("etcd-client.key", "key"),
            ("token", "service-account-token"),
            ("password", "other"),
        ]);
        source.type_ = Some("kubernetes.io/service-account-token".into());
        let v = etcd_values(&source);
        assert_eq!(v["type"], "Opaque");
        let keys: Vec<&str> = v["data"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["etcd-client-ca.crt", "etcd-client.crt", "etcd-client.key"]);
    }
}
