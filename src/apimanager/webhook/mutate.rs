//! The mutations themselves, independent of HTTP: pod scheduler name and PVC StorageClass UID.
//!
//! Unlike the Go api-manager, a mutator never denies a request because one of its own lookups
//! failed: it admits the object unchanged, logs and counts (fail open). A pod whose PVC does not
//! exist yet is admitted unchanged too.

use std::future::Future;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{Value, json};

/// The StorageOS CSI provisioner.
pub const PROVISIONER: &str = "csi.storageos.com";
/// Pod annotation that opts a pod out of the scheduler-name mutation when it is `false`.
pub const SCHEDULER_ANNOTATION: &str = "storageos.com/scheduler";
/// PVC annotation naming the UID of the StorageClass the volume was made from.
pub const STORAGECLASS_ANNOTATION: &str = "storageos.com/storageclass";
const LEGACY_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";
const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

/// A failed lookup (the apiserver could not answer).
#[derive(Debug, thiserror::Error)]
#[error("lookup failed: {0}")]
pub struct LookupError(pub String);

/// What the mutators read from the cluster.
pub trait Lookups: Sync {
    /// The PVC `namespace/name`, or None when it does not exist.
    fn pvc(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<PersistentVolumeClaim>, LookupError>> + Send;
    /// The StorageClass `name`, or None when it does not exist.
    fn storage_class(&self, name: &str) -> impl Future<Output = Result<Option<StorageClass>, LookupError>> + Send;
    /// Every StorageClass (to find the default).
    fn storage_classes(&self) -> impl Future<Output = Result<Vec<StorageClass>, LookupError>> + Send;
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// The StorageClass of `pvc`: its class name, else the legacy annotation, else the default class.
pub async fn storage_class_of(
    pvc: &PersistentVolumeClaim,
    lookups: &impl Lookups,
) -> Result<Option<StorageClass>, LookupError> {
    let named = pvc
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .filter(|n| !n.is_empty())
        .or_else(|| pvc.metadata.annotations.as_ref()?.get(LEGACY_CLASS_ANNOTATION).cloned());
    match named {
        Some(name) => lookups.storage_class(&name).await,
        None => Ok(lookups.storage_classes().await?.into_iter().find(|sc| {
            sc.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
                .map(String::as_str)
                == Some("true")
        })),
    }
}

fn is_storageos(sc: &StorageClass) -> bool {
    sc.provisioner == PROVISIONER
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
            return Ok(Some(
                json!([{"op": "add", "path": "/spec/schedulerName", "value": scheduler}]),
            ));
        }
    }
    Ok(None)
}

/// The JSON patch that records the StorageClass UID on a StorageOS PVC, or None.
pub async fn pvc_storage_class_patch(
    pvc: &PersistentVolumeClaim,
    lookups: &impl Lookups,
) -> Result<Option<Value>, LookupError> {
    let Some(sc) = storage_class_of(pvc, lookups).await? else {
        return Ok(None);
    };
    let Some(uid) = sc.metadata.uid.clone().filter(|_| is_storageos(&sc)) else {
        return Ok(None);
    };
    let annotations = pvc.metadata.annotations.as_ref();
    if annotations.and_then(|a| a.get(STORAGECLASS_ANNOTATION)) == Some(&uid) {
        return Ok(None);
    }
    Ok(Some(match annotations {
        None => json!([{"op": "add", "path": "/metadata/annotations", "value": {STORAGECLASS_ANNOTATION: uid}}]),
        Some(_) => json!([{"op": "add", "path": "/metadata/annotations/storageos.com~1storageclass", "value": uid}]),
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[derive(Default)]
    struct Fake {
        pvcs: BTreeMap<(String, String), PersistentVolumeClaim>,
        classes: Vec<StorageClass>,
        broken: bool,
    }

    impl Lookups for Fake {
        async fn pvc(&self, ns: &str, name: &str) -> Result<Option<PersistentVolumeClaim>, LookupError> {
            if self.broken {
                return Err(LookupError("apiserver unavailable".into()));
            }
            Ok(self.pvcs.get(&(ns.into(), name.into())).cloned())
        }
        async fn storage_class(&self, name: &str) -> Result<Option<StorageClass>, LookupError> {
            Ok(self
                .classes
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))
                .cloned())
        }
        async fn storage_classes(&self) -> Result<Vec<StorageClass>, LookupError> {
            Ok(self.classes.clone())
        }
    }

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
        let mut f = Fake {
            classes: vec![sc("fast", PROVISIONER, false), sc("other", "ebs.csi.aws.com", true)],
            ..Default::default()
        };
        f.pvcs.insert(("app".into(), "data".into()), pvc("data", Some("fast")));
        f.pvcs.insert(("app".into(), "logs".into()), pvc("logs", None));
        f
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
    }

    #[tokio::test]
    async fn storageos_pvcs_get_the_class_uid_annotation() {
        let f = fake();
        let p = pvc_storage_class_patch(&pvc("data", Some("fast")), &f).await.unwrap();
        assert_eq!(
            p,
            Some(
                json!([{"op": "add", "path": "/metadata/annotations", "value": {STORAGECLASS_ANNOTATION: "uid-fast"}}])
            )
        );
        assert_eq!(pvc_storage_class_patch(&pvc("logs", None), &f).await.unwrap(), None);
        assert_eq!(
            pvc_storage_class_patch(&pvc("x", Some("absent")), &f).await.unwrap(),
            None
        );
    }
}
