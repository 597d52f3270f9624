//! The encryption key generator of the PVC webhook: a StorageOS PVC that asks for encryption
//! (`storageos.com/encryption`, PVC label first, else StorageClass parameter) gets a volume key
//! Secret in its own namespace, wrapped with the namespace's key (Secret
//! `storageos-namespace-key`, made on first use), and the annotations that name it.
//!
//! Denials are for user errors: an invalid `storageos.com/encryption` value, a secret namespace
//! other than the PVC's, a namespace key Secret without a key, a named Secret that is not a
//! volume key. Encryption never fails open: once a PVC asks for encryption, a failed read or
//! write is [`Error::Retry`], which the webhook denies with a message to retry.
//!
//! Dry-run requests have no side effects: every read happens (so the answer is the same), no
//! Secret is created, and the annotations still name the Secret a real create would make.
//!
//! Secrets are never deleted here: a key may outlive its PVC and must be removed by hand.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::ObjectMeta;
use rand::TryCryptoRng;

use super::keys::{self, KeyError};
use super::lookups::{LookupError, Lookups};
use crate::crd::contract::label_value;
use crate::go::parse_bool;

/// PVC label or StorageClass parameter that turns encryption on.
pub const ENCRYPTION: &str = "storageos.com/encryption";
/// PVC annotation naming the volume key Secret.
pub const SECRET_NAME_ANNOTATION: &str = "storageos.com/encryption-secret-name";
/// PVC annotation naming the volume key Secret's namespace (always the PVC's).
pub const SECRET_NAMESPACE_ANNOTATION: &str = "storageos.com/encryption-secret-namespace";
/// The Secret, in each namespace, holding the key that wraps its volume keys.
pub const NAMESPACE_KEY_SECRET: &str = "storageos-namespace-key";
/// Prefix of generated volume key Secret names.
pub const VOLUME_KEY_PREFIX: &str = "storageos-volume-key-";
/// Volume key Secret label naming its PVC (hashed when the name is too long for a label value).
pub const PVC_LABEL: &str = "storageos.com/pvc";
/// Volume key Secret annotation holding its PVC's full name.
pub const PVC_ANNOTATION: &str = "storageos.com/pvc";
/// The data entries of a volume key Secret.
const VOLUME_KEY_FIELDS: [&str; 4] = ["key", "iv", "vuk", "hmac"];

/// Why the key generator did not produce annotations.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The PVC, its StorageClass or the namespace's Secrets are wrong; the message says what to fix.
    #[error("{0}")]
    Denied(String),
    /// The apiserver could not answer; the request is admitted unchanged.
    #[error(transparent)]
    Lookup(#[from] LookupError),
    /// Key material could not be made; the request is admitted unchanged.
    #[error("cannot generate encryption keys: {0}")]
    Key(#[from] KeyError),
    /// The PVC asks for encryption but its keys could not be made: denied, to be retried.
    #[error("encryption keys could not be created ({0}); retry creating the PVC")]
    Retry(String),
}

impl Error {
    /// This error for a PVC that asks for encryption: anything but a denial becomes a retry, so
    /// the PVC is never admitted without its keys.
    pub fn for_encrypted(self) -> Self {
        match self {
            e @ (Error::Denied(_) | Error::Retry(_)) => e,
            e => Error::Retry(e.to_string()),
        }
    }
}

/// Whether the PVC's own label asks for encryption (known without reading its StorageClass).
pub fn asked_by_label(pvc: &PersistentVolumeClaim) -> bool {
    let label = pvc.metadata.labels.as_ref().and_then(|l| l.get(ENCRYPTION));
    label.and_then(|v| parse_bool(v)) == Some(true)
}

/// Whether `pvc` of class `sc` asks for encryption: the PVC label wins over the class parameter.
pub fn wanted(pvc: &PersistentVolumeClaim, sc: &StorageClass) -> Result<bool, Error> {
    let label = pvc.metadata.labels.as_ref().and_then(|l| l.get(ENCRYPTION));
    let (value, source) = match label {
        Some(v) => (v, "PVC label"),
        None => match sc.parameters.as_ref().and_then(|p| p.get(ENCRYPTION)) {
            Some(v) => (v, "StorageClass parameter"),
            None => return Ok(false),
        },
    };
    parse_bool(value).ok_or_else(|| {
        Error::Denied(format!(
            "invalid {source} {ENCRYPTION}={value:?}: use \"true\" or \"false\""
        ))
    })
}

/// The labels of the Secrets made here; volume keys also name their PVC.
fn labels(pvc: Option<&str>) -> BTreeMap<String, String> {
    let mut l: BTreeMap<String, String> = [
        ("app.kubernetes.io/name", "storageos"),
        ("app.kubernetes.io/component", "storageos-api-manager"),
        ("app.kubernetes.io/part-of", "storageos"),
        ("app.kubernetes.io/managed-by", "storageos-operator"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if let Some(pvc) = pvc.filter(|p| !p.is_empty()) {
        l.insert(PVC_LABEL.into(), label_value(pvc));
    }
    l
}

fn secret(name: &str, pvc: Option<&str>, data: &[(&str, &[u8])]) -> Secret {
    let annotations = pvc
        .filter(|p| !p.is_empty())
        .map(|p| BTreeMap::from([(PVC_ANNOTATION.to_string(), p.to_string())]));
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels(pvc)),
            annotations,
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

fn data<'a>(secret: &'a Secret, field: &str) -> Option<&'a [u8]> {
    secret
        .data
        .as_ref()?
        .get(field)
        .map(|b| b.0.as_slice())
        .filter(|b| !b.is_empty())
}

fn annotation<'a>(pvc: &'a PersistentVolumeClaim, key: &str) -> Option<&'a str> {
    pvc.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// A generated volume key Secret name.
fn generated_name<R: TryCryptoRng>(rng: &mut R) -> Result<String, KeyError> {
    let id = uuid::Builder::from_random_bytes(keys::random(rng)?).into_uuid();
    Ok(format!("{VOLUME_KEY_PREFIX}{id}"))
}

/// The namespace key of `namespace`, made if there is none; on dry-run a missing key is not
/// made and None is returned. An existing Secret without a key is a denial.
async fn namespace_key<R: TryCryptoRng>(
    namespace: &str,
    dry_run: bool,
    lookups: &impl Lookups,
    rng: &mut R,
) -> Result<Option<Vec<u8>>, Error> {
    let existing = |s: Secret| {
        data(&s, "key").map(<[u8]>::to_vec).ok_or_else(|| {
            Error::Denied(format!(
                "Secret {namespace}/{NAMESPACE_KEY_SECRET} has no data.key: restore the namespace key into it, \
                 or delete the Secret if no encrypted volume in {namespace} uses it so that a new key is made"
            ))
        })
    };
    if let Some(s) = lookups.secret(namespace, NAMESPACE_KEY_SECRET).await? {
        return existing(s).map(Some);
    }
    if dry_run {
        return Ok(None);
    }
    let key = keys::namespace_key(rng)?;
    let made = secret(NAMESPACE_KEY_SECRET, None, &[("key", &key)]);
    if lookups.create_secret(namespace, &made).await? {
        tracing::info!(namespace, "created the namespace encryption key");
        return Ok(Some(key.to_vec()));
    }
    // Another replica made it first: use theirs.
    match lookups.secret(namespace, NAMESPACE_KEY_SECRET).await? {
        Some(s) => existing(s).map(Some),
        None => Err(LookupError(format!(
            "{namespace}/{NAMESPACE_KEY_SECRET} already exists but could not be read back"
        ))
        .into()),
    }
}

/// The annotations that point `pvc` (created in `namespace`, of class `sc`) at its volume key,
/// creating the keys unless `dry_run`; empty when the PVC does not ask for encryption.
pub async fn ensure_keys<R: TryCryptoRng>(
    pvc: &PersistentVolumeClaim,
    namespace: &str,
    sc: &StorageClass,
    dry_run: bool,
    lookups: &impl Lookups,
    rng: &mut R,
) -> Result<Vec<(String, String)>, Error> {
    if !wanted(pvc, sc)? {
        return Ok(vec![]);
    }
    make_keys(pvc, namespace, dry_run, lookups, rng)
        .await
        .map_err(Error::for_encrypted)
}

/// [`ensure_keys`] for a PVC that asks for encryption.
async fn make_keys<R: TryCryptoRng>(
    pvc: &PersistentVolumeClaim,
    namespace: &str,
    dry_run: bool,
    lookups: &impl Lookups,
    rng: &mut R,
) -> Result<Vec<(String, String)>, Error> {
    if let Some(other) = annotation(pvc, SECRET_NAMESPACE_ANNOTATION).filter(|n| *n != namespace) {
        return Err(Error::Denied(format!(
            "encryption key secret namespace must match pvc namespace: {SECRET_NAMESPACE_ANNOTATION} is {other:?}, \
             the PVC is in {namespace:?}; remove the annotation or set it to {namespace:?}"
        )));
    }
    // Keys are made even when a PVC of that name seems to exist: the webhook's PVC cache can
    // still hold one that was deleted (a StatefulSet re-creates its claims at once), and skipping
    // the keys then admitted an encrypted PVC without them. A create that the apiserver then
    // refuses as AlreadyExists leaves an unused key Secret behind, nothing worse.
    let pvc_name = pvc.metadata.name.as_deref().filter(|n| !n.is_empty());
    let name = match annotation(pvc, SECRET_NAME_ANNOTATION) {
        Some(n) => n.to_string(),
        None => generated_name(rng)?,
    };
    match lookups.secret(namespace, &name).await? {
        Some(s) => {
            if let Some(missing) = VOLUME_KEY_FIELDS.iter().find(|f| data(&s, f).is_none()) {
                return Err(Error::Denied(format!(
                    "Secret {namespace}/{name} named by {SECRET_NAME_ANNOTATION} is not a volume key (no data.{missing}): \
                     name another Secret, or remove the annotation to have one generated"
                )));
            }
        }
        None => {
            // Read (and on dry-run only check) the namespace key; create nothing on dry-run.
            let ns_key = namespace_key(namespace, dry_run, lookups, rng).await?;
            if let Some(ns_key) = ns_key.filter(|_| !dry_run) {
                let v = keys::volume_key(&ns_key, rng)?;
                let fields: [(&str, &[u8]); 4] = [("key", &v.key), ("iv", &v.iv), ("vuk", &v.vuk), ("hmac", &v.hmac)];
                if lookups
                    .create_secret(namespace, &secret(&name, pvc_name, &fields))
                    .await?
                {
                    tracing::info!(namespace, secret = %name, pvc = ?pvc_name, "created a volume encryption key");
                }
            }
        }
    }
    Ok(vec![
        (SECRET_NAME_ANNOTATION.into(), name),
        (SECRET_NAMESPACE_ANNOTATION.into(), namespace.into()),
    ])
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::webhook::testing::Fake;

    fn sc(params: serde_json::Value) -> StorageClass {
        serde_json::from_value(
            json!({"metadata": {"name": "fast", "uid": "u"}, "provisioner": "csi.storageos.com", "parameters": params}),
        )
        .unwrap()
    }

    fn pvc(labels: serde_json::Value, annotations: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(
            json!({"metadata": {"name": "data", "labels": labels, "annotations": annotations},
            "spec": {"storageClassName": "fast"}}),
        )
        .unwrap()
    }

    fn on() -> PersistentVolumeClaim {
        pvc(json!({ENCRYPTION: "true"}), json!({}))
    }

    async fn run(f: &Fake, p: &PersistentVolumeClaim, dry_run: bool) -> Result<Vec<(String, String)>, Error> {
        ensure_keys(p, "app", &sc(json!({})), dry_run, f, &mut rand::rng()).await
    }

    fn denied(r: Result<Vec<(String, String)>, Error>) -> String {
        match r {
            Err(Error::Denied(m)) => m,
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[test]
    fn the_label_wins_over_the_class_parameter_and_bad_values_are_user_errors() {
        let none = pvc(json!({}), json!({}));
        assert!(!wanted(&none, &sc(json!({}))).unwrap());
        assert!(wanted(&none, &sc(json!({ENCRYPTION: "true"}))).unwrap());
        assert!(
            !wanted(
                &pvc(json!({ENCRYPTION: "false"}), json!({})),
                &sc(json!({ENCRYPTION: "true"}))
            )
            .unwrap()
        );
        assert!(
            wanted(
                &pvc(json!({ENCRYPTION: "1"}), json!({})),
                &sc(json!({ENCRYPTION: "junk"}))
            )
            .unwrap()
        );
        let m = match wanted(&pvc(json!({ENCRYPTION: "yes"}), json!({})), &sc(json!({}))) {
            Err(Error::Denied(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(m.contains("PVC label") && m.contains("\"yes\""), "{m}");
        assert!(wanted(&none, &sc(json!({ENCRYPTION: "on"}))).is_err());
    }

    #[tokio::test]
    async fn a_new_encrypted_pvc_gets_a_namespace_key_and_a_volume_key() {
        let f = Fake::default();
        let set = run(&f, &on(), false).await.unwrap();
        let name = &set[0].1;
        assert_eq!(set[0].0, SECRET_NAME_ANNOTATION);
        assert!(
            name.starts_with(VOLUME_KEY_PREFIX) && name.len() == VOLUME_KEY_PREFIX.len() + 36,
            "{name}"
        );
        assert_eq!(set[1], (SECRET_NAMESPACE_ANNOTATION.into(), "app".into()));

        let ns_secret = f.secret_now("app", NAMESPACE_KEY_SECRET).unwrap();
        let ns_key = data(&ns_secret, "key").unwrap();
        assert_eq!(ns_key.len(), 32);
        assert!(!ns_secret.metadata.labels.as_ref().unwrap().contains_key(PVC_LABEL));
        let v = f.secret_now("app", name).unwrap();
        assert_eq!(v.type_.as_deref(), Some("Opaque"));
        let l = v.metadata.labels.as_ref().unwrap();
        assert_eq!(l[PVC_LABEL], "data");
        assert_eq!(l["app.kubernetes.io/component"], "storageos-api-manager");
        let [key, iv, vuk, hmac] = VOLUME_KEY_FIELDS.map(|k| data(&v, k).unwrap());
        assert_eq!((key.len(), iv.len(), vuk.len(), hmac.len()), (64, 32, 80, 32));
        assert_eq!(keys::open(ns_key, iv, vuk, hmac).unwrap().as_slice(), key);

        // A second PVC reuses the namespace key.
        let mut second = on();
        second.metadata.name = Some("data2".into());
        let set2 = run(&f, &second, false).await.unwrap();
        let v2 = f.secret_now("app", &set2[0].1).unwrap();
        let [key2, iv2, vuk2, hmac2] = VOLUME_KEY_FIELDS.map(|k| data(&v2, k).unwrap());
        assert_eq!(keys::open(ns_key, iv2, vuk2, hmac2).unwrap().as_slice(), key2);
        assert_eq!(f.created(), 3);
    }

    #[tokio::test]
    async fn dry_run_reads_but_creates_nothing() {
        let f = Fake::default();
        let set = run(&f, &on(), true).await.unwrap();
        assert!(set[0].1.starts_with(VOLUME_KEY_PREFIX));
        assert_eq!(f.created(), 0);
        // Nor when the namespace key exists already.
        f.put("app", secret(NAMESPACE_KEY_SECRET, None, &[("key", &[7; 32])]));
        assert_eq!(run(&f, &on(), true).await.unwrap().len(), 2);
        assert_eq!(f.created(), 0);
        assert_eq!(f.secrets.lock().unwrap().len(), 1);
        // A broken namespace key is reported on dry-run too.
        f.put("app", secret(NAMESPACE_KEY_SECRET, None, &[]));
        assert!(denied(run(&f, &on(), true).await).contains("has no data.key"));
        assert_eq!(f.created(), 0);
    }

    #[tokio::test]
    async fn user_errors_are_denied_with_what_to_fix() {
        let f = Fake::default();
        let cross = pvc(
            json!({ENCRYPTION: "true"}),
            json!({SECRET_NAMESPACE_ANNOTATION: "other"}),
        );
        assert!(
            denied(run(&f, &cross, false).await)
                .starts_with("encryption key secret namespace must match pvc namespace")
        );
        f.put("app", secret(NAMESPACE_KEY_SECRET, None, &[("key", b"")]));
        let m = denied(run(&f, &on(), false).await);
        assert!(
            m.contains("app/storageos-namespace-key") && m.contains("restore"),
            "{m}"
        );
        f.put("app", secret("db-password", None, &[("password", b"x")]));
        let named = pvc(
            json!({ENCRYPTION: "true"}),
            json!({SECRET_NAME_ANNOTATION: "db-password"}),
        );
        assert!(denied(run(&f, &named, false).await).contains("not a volume key (no data.key)"));
        assert_eq!(f.created(), 0);
    }

    #[tokio::test]
    async fn existing_keys_are_kept_and_same_namespace_annotation_is_accepted() {
        let f = Fake::default();
        let first = run(&f, &on(), false).await.unwrap();
        let before = f.secret_now("app", &first[0].1).unwrap();
        let again = pvc(
            json!({ENCRYPTION: "true"}),
            json!({SECRET_NAME_ANNOTATION: first[0].1, SECRET_NAMESPACE_ANNOTATION: "app"}),
        );
        assert_eq!(run(&f, &again, false).await.unwrap(), first);
        assert_eq!(f.secret_now("app", &first[0].1).unwrap(), before);
        assert_eq!(f.created(), 2);
    }

    #[tokio::test]
    async fn a_pvc_with_encryption_off_makes_nothing() {
        let f = Fake::default();
        assert!(
            run(&f, &pvc(json!({ENCRYPTION: "false"}), json!({})), false)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(f.created(), 0);
    }

    #[tokio::test]
    async fn a_cached_pvc_of_the_same_name_never_yields_an_encrypted_pvc_without_keys() {
        // The cache still holds a deleted PVC "data"; the new "data" asks for encryption.
        let f = Fake::default();
        f.add_pvc("app", on());
        let set = run(&f, &on(), false).await.unwrap();
        assert_eq!(set[0].0, SECRET_NAME_ANNOTATION);
        assert_eq!(set[1], (SECRET_NAMESPACE_ANNOTATION.into(), "app".into()));
        assert!(f.secret_now("app", &set[0].1).is_some());
    }

    #[tokio::test]
    async fn a_long_pvc_name_gets_its_keys_with_a_valid_label() {
        let f = Fake::default();
        let long = "p".repeat(200);
        let mut p = on();
        p.metadata.name = Some(long.clone());
        let set = run(&f, &p, false).await.unwrap();
        let v = f.secret_now("app", &set[0].1).unwrap();
        let label = &v.metadata.labels.as_ref().unwrap()[PVC_LABEL];
        assert!(label.len() <= 63 && label.starts_with("ppp"), "{label}");
        assert_eq!(v.metadata.annotations.as_ref().unwrap()[PVC_ANNOTATION], long);
    }

    #[tokio::test]
    async fn failures_of_an_encrypted_pvc_never_fail_open() {
        let f = Fake {
            fail_create: true,
            ..Default::default()
        };
        let r = run(&f, &on(), false).await;
        assert!(matches!(&r, Err(Error::Retry(m)) if m.contains("forbidden")), "{r:?}");
        assert!(r.unwrap_err().to_string().contains("retry"));
        struct NoRandom;
        impl rand::TryRngCore for NoRandom {
            type Error = std::io::Error;
            fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
                Err(std::io::Error::other("entropy exhausted"))
            }
            fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
                Err(std::io::Error::other("entropy exhausted"))
            }
            fn try_fill_bytes(&mut self, _: &mut [u8]) -> Result<(), Self::Error> {
                Err(std::io::Error::other("entropy exhausted"))
            }
        }
        impl rand::TryCryptoRng for NoRandom {}
        let r = ensure_keys(&on(), "app", &sc(json!({})), false, &Fake::default(), &mut NoRandom).await;
        assert!(matches!(&r, Err(Error::Retry(m)) if m.contains("entropy")), "{r:?}");
    }
}
