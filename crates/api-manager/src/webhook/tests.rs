//! Unit tests of the parent module (kept apart so the module reads on its own).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use tower::ServiceExt;

use super::testing::Fake;
use super::*;

#[test]
fn the_scheduler_is_unavailable_only_when_its_deployment_is_seen_with_no_available_replica() {
    let deployment = |available: Option<i32>| -> Arc<Deployment> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "storageos-scheduler"},
                "status": {"availableReplicas": available}}))
            .unwrap(),
        )
    };
    assert!(!no_available_replica(&[]), "not cached: sent as before");
    assert!(no_available_replica(&[deployment(None)]));
    assert!(no_available_replica(&[deployment(Some(0))]));
    assert!(!no_available_replica(&[deployment(Some(1))]));
}

fn class() -> StorageClass {
    serde_json::from_value(
        json!({"metadata": {"name": "fast", "uid": "u1"}, "provisioner": crate::storageos::CSI_DRIVER}),
    )
    .unwrap()
}

/// The response to a PVC CREATE of `labels` through the router, and the fail-open count.
async fn admit(lookups: Fake, labels: Value, dry_run: bool) -> (Value, u64, usize) {
    let object = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "app", "labels": labels},
        "spec": {"storageClassName": "fast"}});
    let created = lookups.created_counter();
    let (response, failed) = review(lookups, "/pvcs", object, dry_run, DEADLINE).await;
    (response, failed, created.load(std::sync::atomic::Ordering::SeqCst))
}

/// The response to a CREATE of `object` posted to `path` (`/pods` or `/pvcs`), and the
/// fail-open count of that webhook.
async fn review(lookups: Fake, path: &str, object: Value, dry_run: bool, deadline: Duration) -> (Value, u64) {
    let mut registry = Registry::default();
    let metrics = WebhookMetrics::register(&mut registry);
    let mut state = WebhookState::new(lookups, Some("sched".into()), metrics.clone());
    state.deadline = deadline;
    let (kind, resource, webhook) = match path {
        "/pods" => ("Pod", "pods", "pod"),
        _ => ("PersistentVolumeClaim", "persistentvolumeclaims", "pvc"),
    };
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "1", "kind": {"group": "", "version": "v1", "kind": kind},
        "resource": {"group": "", "version": "v1", "resource": resource},
        "name": "data", "namespace": "app", "operation": "CREATE", "userInfo": {}, "dryRun": dry_run,
        "object": object}});
    let req = axum::http::Request::post(path)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(review.to_string()))
        .unwrap();
    let res = router(state, "/pods", "/pvcs").oneshot(req).await.unwrap();
    let body = axum::body::to_bytes(res.into_body(), 1 << 20).await.unwrap();
    let failed = metrics
        .failed_open
        .get_or_create(&WebhookLabels {
            webhook: webhook.into(),
        })
        .get();
    let v: Value = serde_json::from_slice(&body).unwrap();
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(&format!(
            "storageos_webhook_duration_seconds_count{{webhook=\"{webhook}\"}} 1"
        )),
        "each answer is timed: {text}"
    );
    (v["response"].clone(), failed)
}

#[tokio::test]
async fn an_undecodable_object_is_admitted_unchanged_and_counted() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "data"}, "spec": {"containers": 5}});
    let (r, failed) = review(with_class(), "/pods", pod, false, DEADLINE).await;
    assert_eq!((r["allowed"].as_bool(), failed), (Some(true), 1), "{r}");
    assert!(r.get("patch").is_none());
}

#[tokio::test]
async fn an_undecodable_pvc_whose_label_asks_for_encryption_is_denied() {
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "labels": {encryption::ENCRYPTION: "true"}},
        "spec": {"storageClassName": 5}});
    let (r, failed) = review(with_class(), "/pvcs", pvc, false, DEADLINE).await;
    assert_eq!((r["allowed"].as_bool(), failed), (Some(false), 0), "{r}");
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .contains("not admitted without keys"),
        "{r}"
    );
    // Without the label it is admitted unchanged, as before.
    let plain = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"}, "spec": {"storageClassName": 5}});
    let (r, failed) = review(with_class(), "/pvcs", plain, false, DEADLINE).await;
    assert_eq!((r["allowed"].as_bool(), failed), (Some(true), 1), "{r}");
}

#[tokio::test]
async fn a_hung_lookup_is_answered_within_the_deadline() {
    let slow = || Fake {
        slow: Some(Duration::from_secs(600)),
        ..with_class()
    };
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [], "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}});
    let deadline = Duration::from_millis(200);
    let (r, failed) = review(slow(), "/pods", pod, false, deadline).await;
    assert_eq!((r["allowed"].as_bool(), failed), (Some(true), 1), "{r}");
    assert!(r.get("patch").is_none());
    // A PVC asking for encryption is denied to be retried instead.
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "labels": {encryption::ENCRYPTION: "true"}}, "spec": {"storageClassName": "fast"}});
    let (r, failed) = review(slow(), "/pvcs", pvc, false, deadline).await;
    assert_eq!((r["allowed"].as_bool(), failed), (Some(false), 0), "{r}");
    assert!(r["status"]["message"].as_str().unwrap().contains("retry"), "{r}");
}

#[tokio::test]
async fn a_class_encrypted_pvc_is_denied_on_timeout() {
    // The class (read in time) asks for encryption; the Secret reads then hang.
    let mut encrypting = class();
    encrypting.parameters = Some([(encryption::ENCRYPTION.to_string(), "true".to_string())].into());
    let lookups = Fake {
        classes: vec![encrypting],
        slow_secrets: Some(Duration::from_secs(600)),
        ..Default::default()
    };
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"}, "spec": {"storageClassName": "fast"}});
    let (r, failed) = review(lookups, "/pvcs", pvc, false, Duration::from_millis(200)).await;
    assert_eq!((r["allowed"].as_bool(), failed), (Some(false), 0), "{r}");
    assert!(r["status"]["message"].as_str().unwrap().contains("retry"), "{r}");
}

fn patch(response: &Value) -> Value {
    let raw: Vec<u8> = serde_json::from_value(response["patch"].clone()).expect("a patch");
    serde_json::from_slice(&raw).unwrap()
}

fn with_class() -> Fake {
    Fake {
        classes: vec![class()],
        ..Default::default()
    }
}

#[tokio::test]
async fn encrypted_pvcs_get_keys_and_one_patch() {
    let (r, failed, created) = admit(with_class(), json!({encryption::ENCRYPTION: "true"}), false).await;
    assert_eq!((r["allowed"].as_bool(), failed, created), (Some(true), 0, 2));
    let p = patch(&r);
    assert_eq!(p[0]["value"][crate::storageclass::STORAGECLASS_ANNOTATION], "u1");
    assert_eq!(p[0]["value"][encryption::SECRET_NAMESPACE_ANNOTATION], "app");
}

#[tokio::test]
async fn dry_run_answers_the_same_patch_without_creating_secrets() {
    let (r, failed, created) = admit(with_class(), json!({encryption::ENCRYPTION: "true"}), true).await;
    assert_eq!((r["allowed"].as_bool(), failed, created), (Some(true), 0, 0));
    let name = patch(&r)[0]["value"][encryption::SECRET_NAME_ANNOTATION].clone();
    assert!(name.as_str().unwrap().starts_with(encryption::VOLUME_KEY_PREFIX));
}

fn broken_plain() -> Fake {
    Fake {
        broken: true,
        ..with_class()
    }
}

#[tokio::test]
async fn an_encrypted_pvc_is_denied_to_retry_never_admitted_without_keys() {
    for lookups in [
        broken_plain(),
        Fake {
            fail_create: true,
            ..with_class()
        },
    ] {
        let (r, failed, created) = admit(lookups, json!({encryption::ENCRYPTION: "true"}), false).await;
        assert_eq!((r["allowed"].as_bool(), failed, created), (Some(false), 0, 0), "{r}");
        let m = r["status"]["message"].as_str().unwrap();
        assert!(
            m.contains("encryption keys could not be created") && m.contains("retry"),
            "{m}"
        );
    }
}

#[tokio::test]
async fn user_errors_are_denied_and_own_failures_admit_unchanged() {
    let (r, failed, _) = admit(with_class(), json!({encryption::ENCRYPTION: "maybe"}), false).await;
    assert_eq!((r["allowed"].as_bool(), failed), (Some(false), 0));
    assert!(r["status"]["message"].as_str().unwrap().contains("\"maybe\""), "{r}");

    let (r, failed, _) = admit(broken_plain(), json!({}), false).await;
    assert_eq!((r["allowed"].as_bool(), failed), (Some(true), 1));
    assert!(r.get("patch").is_none());
}

#[tokio::test(start_paused = true)]
async fn lookups_past_the_bound_wait_for_a_turn_and_all_complete() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let limit = InFlight::new(3);
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let reads = (0..20).map(|i| {
        let (limit, running, most) = (limit.clone(), running.clone(), most.clone());
        async move {
            limit
                .run(async {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    i
                })
                .await
        }
    });
    let done = futures::future::join_all(reads).await;
    assert_eq!(done, (0..20).collect::<Vec<_>>(), "every read completes");
    assert_eq!(most.load(Ordering::SeqCst), 3, "never more than the bound at once");
}
