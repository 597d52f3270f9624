//! The mutations themselves, independent of HTTP: pod scheduler name; PVC encryption keys and
//! StorageClass UID.
//!
//! Unlike the Go api-manager, a mutator never denies a request because one of its own lookups
//! failed: it admits the object unchanged, logs and counts (fail open). A pod whose PVC does not
//! exist yet, and a PVC whose StorageClass does not exist yet, are admitted unchanged too. Only
//! user errors in a PVC's encryption settings are denied.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use rand::TryCryptoRng;
use serde_json::{Value, json};

use super::encryption;
use super::lookups::{LookupError, Lookups};
use crate::go::parse_bool;
use crate::storageclass::{ClassRef, PvcFields, STORAGECLASS_ANNOTATION, class_ref, pick_default};
use crate::storageos::CSI_DRIVER;

/// Pod annotation that opts a pod out of the scheduler-name mutation when it is `false`.
pub const SCHEDULER_ANNOTATION: &str = "storageos.com/scheduler";

/// The StorageClass of `pvc`, resolved as Kubernetes does: the legacy annotation if present,
/// else `spec.storageClassName`; an empty name means "no class". Only an unset class falls back
/// to the default class (the newest, if several are marked default).
pub async fn storage_class_of(
    pvc: &impl PvcFields,
    lookups: &impl Lookups,
) -> Result<Option<StorageClass>, LookupError> {
    class_of(pvc, lookups, false).await
}

/// [`storage_class_of`] read from the apiserver, not from the webhook's cache: whether a PVC gets
/// encryption keys is decided on it.
pub async fn fresh_storage_class_of(
    pvc: &impl PvcFields,
    lookups: &impl Lookups,
) -> Result<Option<StorageClass>, LookupError> {
    class_of(pvc, lookups, true).await
}

async fn class_of(
    pvc: &impl PvcFields,
    lookups: &impl Lookups,
    fresh: bool,
) -> Result<Option<StorageClass>, LookupError> {
    match (class_ref(pvc), fresh) {
        (ClassRef::NoClass, _) => Ok(None),
        (ClassRef::Named(name), true) => lookups.storage_class_fresh(name).await,
        (ClassRef::Named(name), false) => lookups.storage_class(name).await,
        (ClassRef::Default, true) => Ok(pick_default(&lookups.storage_classes_fresh().await?).cloned()),
        (ClassRef::Default, false) => Ok(pick_default(&lookups.storage_classes().await?).cloned()),
    }
}

fn is_storageos(sc: &StorageClass) -> bool {
    sc.provisioner == CSI_DRIVER
}

/// The JSON patch that sets the scheduler of `pod` (in `namespace`), or None to admit it as is.
pub async fn pod_scheduler_patch(
    pod: &Pod,
    namespace: &str,
    scheduler: Option<&str>,
    lookups: &impl Lookups,
) -> Result<Option<Value>, LookupError> {
    let Some(scheduler) = scheduler else { return Ok(None) };
    let opted_out = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SCHEDULER_ANNOTATION))
        .and_then(|v| parse_bool(v))
        == Some(false);
    if opted_out {
        return Ok(None);
    }
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler) {
        return Ok(None);
    }
    let claims = spec
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| v.persistent_volume_claim.as_ref());
    for claim in claims {
        let Some(pvc) = lookups.pvc(namespace, &claim.claim_name).await? else {
            continue; // Not created yet: nothing to decide on.
        };
        if storage_class_of(&pvc, lookups)
            .await?
            .is_some_and(|sc| is_storageos(&sc))
        {
            if lookups.scheduler_unavailable().await {
                tracing::warn!(namespace, pod = ?pod.metadata.name, scheduler,
                    "the scheduler extender has no available replica: leaving the pod to the default scheduler");
                return Ok(None);
            }
            return Ok(Some(
                json!([{"op": "add", "path": "/spec/schedulerName", "value": scheduler}]),
            ));
        }
    }
    Ok(None)
}

/// The JSON patch for a StorageOS PVC created in `namespace`, or None to admit it as is: first
/// the encryption key annotations (see [`encryption`]; no side effects when `dry_run`), then the
/// StorageClass UID, in one patch. A PVC whose class cannot be found yet is admitted unchanged,
/// unless its label asks for encryption: that one is denied until the class exists.
pub async fn pvc_patch<R: TryCryptoRng>(
    pvc: &PersistentVolumeClaim,
    namespace: &str,
    dry_run: bool,
    lookups: &impl Lookups,
    rng: &mut R,
) -> Result<Option<Value>, encryption::Error> {
    pvc_patch_noting(pvc, namespace, dry_run, lookups, rng, &AtomicBool::new(false)).await
}

/// [`pvc_patch`] that sets `asks_encryption` as soon as it knows the PVC asks for encryption (by
/// label or StorageClass parameter), so that a caller whose deadline abandons the mutation
/// knows to deny the PVC rather than admit it without keys.
pub async fn pvc_patch_noting<R: TryCryptoRng>(
    pvc: &PersistentVolumeClaim,
    namespace: &str,
    dry_run: bool,
    lookups: &impl Lookups,
    rng: &mut R,
    asks_encryption: &AtomicBool,
) -> Result<Option<Value>, encryption::Error> {
    // A PVC whose own label asks for encryption is never admitted without keys, even when its
    // class cannot be read.
    let sc = fresh_storage_class_of(pvc, lookups)
        .await
        .map_err(|e| match encryption::asked_by_label(pvc) {
            true => encryption::Error::Lookup(e).for_encrypted(),
            false => e.into(),
        })?;
    if sc.is_none() && encryption::asked_by_label(pvc) && class_ref(pvc) != ClassRef::NoClass {
        return Err(encryption::Error::Retry(
            "its StorageClass does not exist yet: create the StorageClass first".into(),
        ));
    }
    let Some(sc) = sc.filter(is_storageos) else {
        return Ok(None);
    };
    if encryption::wanted(pvc, &sc).unwrap_or(false) {
        asks_encryption.store(true, Ordering::SeqCst);
    }
    let mut set = encryption::ensure_keys(pvc, namespace, &sc, dry_run, lookups, rng).await?;
    set.extend(sc.metadata.uid.map(|uid| (STORAGECLASS_ANNOTATION.to_string(), uid)));
    Ok(annotations_patch(pvc, set))
}

/// The JSON patch that sets each of `set` in the PVC's annotations, skipping values already there.
fn annotations_patch(pvc: &PersistentVolumeClaim, set: Vec<(String, String)>) -> Option<Value> {
    let current = pvc.metadata.annotations.as_ref();
    let set: Vec<_> = set
        .into_iter()
        .filter(|(k, v)| current.and_then(|a| a.get(k)) != Some(v))
        .collect();
    if set.is_empty() {
        return None;
    }
    Some(match current {
        None => {
            json!([{"op": "add", "path": "/metadata/annotations", "value": set.into_iter().collect::<BTreeMap<_, _>>()}])
        }
        Some(_) => Value::Array(
            set.into_iter()
                .map(|(k, v)| {
                    let key = k.replace('~', "~0").replace('/', "~1");
                    json!({"op": "add", "path": format!("/metadata/annotations/{key}"), "value": v})
                })
                .collect(),
        ),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::cached_pvc::CachedPvc;
    use crate::storageclass::{BETA_DEFAULT_CLASS_ANNOTATION, DEFAULT_CLASS_ANNOTATION, LEGACY_CLASS_ANNOTATION};
    use crate::webhook::encryption::{ENCRYPTION, SECRET_NAME_ANNOTATION};
    use crate::webhook::testing::Fake;
    use k8s_openapi::api::core::v1::Secret;

    fn sc(name: &str, provisioner: &str, default: bool) -> StorageClass {
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": format!("uid-{name}"),
                         "annotations": {DEFAULT_CLASS_ANNOTATION: default.to_string()}},
            "provisioner": provisioner
        }))
        .unwrap()
    }

    fn pvc(name: &str, class: Option<&str>) -> PersistentVolumeClaim {
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "app"}, "spec": {"storageClassName": class}}),
        )
        .unwrap()
    }

    fn pod(claims: &[&str], annotations: serde_json::Value) -> Pod {
        let vols: Vec<_> = claims
            .iter()
            .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        serde_json::from_value(json!({"metadata": {"name": "p", "annotations": annotations},
            "spec": {"containers": [], "volumes": vols}}))
        .unwrap()
    }

    fn fake() -> Fake {
        let f = Fake {
            classes: vec![sc("fast", CSI_DRIVER, false), sc("other", "ebs.csi.aws.com", true)],
            ..Default::default()
        };
        f.add_pvc("app", pvc("data", Some("fast")));
        f.add_pvc("app", pvc("logs", None));
        f
    }

    async fn patch_of(p: &PersistentVolumeClaim, f: &Fake) -> Option<Value> {
        pvc_patch(p, "app", false, f, &mut StdRng::seed_from_u64(3))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn pods_with_a_storageos_claim_get_the_scheduler() {
        let patch = pod_scheduler_patch(
            &pod(&["logs", "data"], json!({})),
            "app",
            Some("storageos-scheduler"),
            &fake(),
        )
        .await
        .unwrap();
        assert_eq!(
            patch,
            Some(json!([{"op": "add", "path": "/spec/schedulerName", "value": "storageos-scheduler"}]))
        );
    }

    #[tokio::test]
    async fn a_pod_is_left_to_the_default_scheduler_while_the_extender_has_no_available_replica() {
        let mut f = fake();
        f.scheduler_down = true;
        let pod = pod(&["data"], json!({}));
        assert_eq!(
            pod_scheduler_patch(&pod, "app", Some("storageos-scheduler"), &f)
                .await
                .unwrap(),
            None
        );
        f.scheduler_down = false;
        assert!(
            pod_scheduler_patch(&pod, "app", Some("storageos-scheduler"), &f)
                .await
                .unwrap()
                .is_some()
        );
    }

    #[tokio::test]
    async fn other_pods_opt_outs_missing_claims_and_disabled_mutator_are_untouched() {
        let f = fake();
        let s = Some("storageos-scheduler");
        assert_eq!(
            pod_scheduler_patch(&pod(&["logs"], json!({})), "app", s, &f)
                .await
                .unwrap(),
            None,
            "default class is not StorageOS"
        );
        assert_eq!(
            pod_scheduler_patch(&pod(&["data"], json!({SCHEDULER_ANNOTATION: "false"})), "app", s, &f)
                .await
                .unwrap(),
            None
        );
        assert_eq!(
            pod_scheduler_patch(&pod(&["missing"], json!({})), "app", s, &f)
                .await
                .unwrap(),
            None
        );
        assert_eq!(
            pod_scheduler_patch(&pod(&["data"], json!({})), "app", None, &f)
                .await
                .unwrap(),
            None
        );
        // An unparsable opt-out value does not opt out (Go semantics).
        assert!(
            pod_scheduler_patch(&pod(&["data"], json!({SCHEDULER_ANNOTATION: "nope"})), "app", s, &f)
                .await
                .unwrap()
                .is_some()
        );
    }

    #[tokio::test]
    async fn lookup_failures_are_reported_not_guessed() {
        let f = Fake { broken: true, ..fake() };
        assert!(
            pod_scheduler_patch(&pod(&["data"], json!({})), "app", Some("s"), &f)
                .await
                .is_err()
        );
        let r = pvc_patch(
            &pvc("new", Some("fast")),
            "app",
            false,
            &f,
            &mut StdRng::seed_from_u64(3),
        )
        .await;
        assert!(matches!(r, Err(encryption::Error::Lookup(_))));
        // A PVC that asks for encryption by its label is denied to be retried instead.
        let mut asks = pvc("new", Some("fast"));
        asks.metadata.labels = Some([(encryption::ENCRYPTION.to_string(), "true".to_string())].into());
        let r = pvc_patch(&asks, "app", false, &f, &mut StdRng::seed_from_u64(3)).await;
        assert!(matches!(r, Err(encryption::Error::Retry(_))), "{r:?}");
    }

    #[tokio::test]
    async fn storage_classes_resolve_as_kubernetes_does() {
        let f = Fake {
            classes: vec![
                sc("fast", CSI_DRIVER, false),
                serde_json::from_value(
                    json!({"metadata": {"name": "old-default", "creationTimestamp": "2020-01-01T00:00:00Z",
                    "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}}, "provisioner": "x"}),
                )
                .unwrap(),
                serde_json::from_value(
                    json!({"metadata": {"name": "new-default", "creationTimestamp": "2024-01-01T00:00:00Z",
                    "annotations": {BETA_DEFAULT_CLASS_ANNOTATION: "true"}}, "provisioner": "x"}),
                )
                .unwrap(),
            ],
            ..Default::default()
        };
        let name = |sc: Option<StorageClass>| sc.and_then(|s| s.metadata.name);
        let f = &f;
        let of = |p: PersistentVolumeClaim| async move { name(storage_class_of(&p, f).await.unwrap()) };
        assert_eq!(of(pvc("a", Some("fast"))).await.as_deref(), Some("fast"));
        assert_eq!(of(pvc("a", Some(""))).await, None, "an empty class means no class");
        assert_eq!(of(pvc("a", None)).await.as_deref(), Some("new-default"));
        let mut legacy = pvc("a", Some("new-default"));
        legacy.metadata.annotations = Some([(LEGACY_CLASS_ANNOTATION.to_string(), "fast".to_string())].into());
        assert_eq!(of(legacy).await.as_deref(), Some("fast"), "the legacy annotation wins");
    }

    #[tokio::test]
    async fn storageos_pvcs_get_the_class_uid_annotation() {
        let f = fake();
        assert_eq!(
            patch_of(&pvc("new", Some("fast")), &f).await,
            Some(
                json!([{"op": "add", "path": "/metadata/annotations", "value": {STORAGECLASS_ANNOTATION: "uid-fast"}}])
            )
        );
        assert_eq!(
            patch_of(&pvc("logs2", None), &f).await,
            None,
            "the default class is not StorageOS"
        );
        assert_eq!(
            patch_of(&pvc("x", Some("absent")), &f).await,
            None,
            "class not created yet"
        );
        let mut done = pvc("x", Some("fast"));
        done.metadata.annotations = Some([(STORAGECLASS_ANNOTATION.to_string(), "uid-fast".to_string())].into());
        assert_eq!(patch_of(&done, &f).await, None);
    }

    #[tokio::test]
    async fn keygen_and_class_uid_come_in_one_patch_in_that_order() {
        let f = fake();
        let mut p = pvc("enc", Some("fast"));
        p.metadata.labels = Some([(ENCRYPTION.to_string(), "true".to_string())].into());
        let patch = patch_of(&p, &f).await.unwrap();
        let value = &patch[0]["value"];
        assert_eq!(patch.as_array().unwrap().len(), 1);
        let keys: Vec<_> = value.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys.len(), 3, "{value}");
        assert_eq!(value[STORAGECLASS_ANNOTATION], "uid-fast");
        assert!(
            f.secret_now("app", value[SECRET_NAME_ANNOTATION].as_str().unwrap())
                .is_some()
        );

        // With annotations present, each key is its own operation, escaped, in order.
        p.metadata.annotations = Some([("team".to_string(), "a".to_string())].into());
        let patch = patch_of(&p, &f).await.unwrap();
        let paths: Vec<_> = patch
            .as_array()
            .unwrap()
            .iter()
            .map(|op| op["path"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            paths,
            [
                "/metadata/annotations/storageos.com~1encryption-secret-name",
                "/metadata/annotations/storageos.com~1encryption-secret-namespace",
                "/metadata/annotations/storageos.com~1storageclass"
            ]
        );
        let mut applied = serde_json::to_value(&p).unwrap();
        json_patch::patch(
            &mut applied,
            &serde_json::from_value::<json_patch::Patch>(patch).unwrap(),
        )
        .unwrap();
        assert_eq!(applied["metadata"]["annotations"]["team"], "a");
    }

    /// A webhook cache that still holds a class as it was before it was deleted and re-created
    /// with the StorageOS provisioner and encryption on.
    struct StaleClassCache(Fake);

    impl Lookups for StaleClassCache {
        async fn pvc(&self, ns: &str, name: &str) -> Result<Option<CachedPvc>, LookupError> {
            self.0.pvc(ns, name).await
        }
        async fn storage_class(&self, name: &str) -> Result<Option<StorageClass>, LookupError> {
            Ok(Some(sc(name, "kubernetes.io/no-provisioner", false)))
        }
        async fn storage_classes(&self) -> Result<Vec<StorageClass>, LookupError> {
            Ok(vec![])
        }
        async fn storage_class_fresh(&self, name: &str) -> Result<Option<StorageClass>, LookupError> {
            self.0.storage_class(name).await
        }
        async fn storage_classes_fresh(&self) -> Result<Vec<StorageClass>, LookupError> {
            self.0.storage_classes().await
        }
        async fn secret(&self, ns: &str, name: &str) -> Result<Option<Secret>, LookupError> {
            self.0.secret(ns, name).await
        }
        async fn create_secret(&self, ns: &str, secret: &Secret) -> Result<bool, LookupError> {
            self.0.create_secret(ns, secret).await
        }
    }

    #[tokio::test]
    async fn a_stale_cached_class_never_decides_that_a_pvc_needs_no_keys() {
        let mut encrypting = sc("secure", CSI_DRIVER, false);
        encrypting.parameters = Some([(ENCRYPTION.to_string(), "true".to_string())].into());
        let f = StaleClassCache(Fake {
            classes: vec![encrypting],
            ..Default::default()
        });
        let patch = pvc_patch(
            &pvc("data", Some("secure")),
            "app",
            false,
            &f,
            &mut StdRng::seed_from_u64(3),
        )
        .await
        .unwrap()
        .unwrap();
        let set = &patch[0]["value"];
        assert!(set[SECRET_NAME_ANNOTATION].is_string(), "{patch}");
        assert_eq!(set[encryption::SECRET_NAMESPACE_ANNOTATION], "app");
        assert_eq!(set[STORAGECLASS_ANNOTATION], "uid-secure");
    }
}
