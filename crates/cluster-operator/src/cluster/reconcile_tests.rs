//! One reconcile of a StorageOSCluster against a scripted apiserver: which requests it makes,
//! and what it writes.

use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use kube::client::Body;
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use super::tests::context;
use super::{Context, Error, FINALIZER};
use crate::crd::StorageOSCluster;

/// One pass as the runner makes it: the gate, the reconcile, the 409 policy.
async fn reconcile(cluster: Arc<StorageOSCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    crate::runtime::kube::controller::pass(cluster, ctx).await
}

/// One request the reconcile made: method, path (with query) and body.
#[derive(Clone, Debug)]
struct Request {
    method: String,
    path: String,
    body: Value,
}

/// A cluster with the finalizer (and its mark) already set, as the apiserver returns it.
fn cluster(spec: Value) -> Value {
    json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
        "metadata": {"name": "storageos", "namespace": "storageos-operator", "uid": "u1",
                     "resourceVersion": "7", "generation": 1, "finalizers": [FINALIZER],
                     "labels": {crate::render::labels::ACTED_MARK.0: crate::render::labels::ACTED_MARK.1},
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec
    })
}

fn not_found() -> (u16, Value) {
    (
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound", "message": "not found"}),
    )
}

/// What the scripted apiserver refuses.
#[derive(Clone, Copy, Default)]
struct Refuse {
    /// Applies of DaemonSets (403).
    daemonsets: bool,
    /// Status writes, as written over an older resourceVersion (409).
    status_as_stale: bool,
}

/// An apiserver that holds `cluster` and the credentials Secret, refuses what `refuse` says,
/// and echoes every other write. Returns the client and the requests.
fn apiserver(cluster: Value, refuse: Refuse) -> (kube::Client, Arc<Mutex<Vec<Request>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let service = tower::service_fn(move |req: hyper::Request<Body>| {
        let (log, cluster) = (log.clone(), cluster.clone());
        async move {
            let method = req.method().to_string();
            let path = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
            let bytes = req.into_body().collect().await?.to_bytes();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (status, answer) = match (method.as_str(), path.split('?').next().unwrap_or_default()) {
                ("GET", "/apis/storageos.com/v1/storageosclusters") => (
                    200,
                    json!({"apiVersion": "storageos.com/v1", "kind": "StorageOSClusterList",
                                 "metadata": {"resourceVersion": "7"}, "items": [cluster]}),
                ),
                ("PATCH", p) if refuse.status_as_stale && p.ends_with("/storageosclusters/storageos/status") => (
                    409,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409, "reason": "Conflict",
                           "message": "Operation cannot be fulfilled on storageosclusters.storageos.com \"storageos\": the object has been modified"}),
                ),
                ("PATCH", p) if p.ends_with("/storageosclusters/storageos/status") => {
                    let mut updated = cluster.clone();
                    updated["status"] = body["status"].clone();
                    (200, updated)
                }
                ("GET", "/api/v1/namespaces/storageos-operator/secrets/storageos-api") => (
                    200,
                    json!({"apiVersion": "v1", "kind": "Secret",
                           "metadata": {"name": "storageos-api", "namespace": "storageos-operator"},
                           "data": {"username": "c3RvcmFnZW9z", "password": "c3RvcmFnZW9z"}}),
                ),
                ("GET", _) => not_found(),
                ("PATCH", p) if refuse.daemonsets && p.contains("/daemonsets/") => (
                    403,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
                           "reason": "Forbidden", "message": "daemonsets.apps is forbidden: denied by policy"}),
                ),
                _ => (200, body.clone()),
            };
            if let Ok(mut l) = log.lock() {
                l.push(Request { method, path, body });
            }
            let response = hyper::Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(answer.to_string())))?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response)
        }
    });
    (kube::Client::new(service, "default"), seen)
}

impl Request {
    /// Whether this writes the cluster's status.
    fn is_status_write(&self) -> bool {
        self.method == "PATCH"
            && self
                .path
                .split('?')
                .next()
                .unwrap_or_default()
                .ends_with("/storageosclusters/storageos/status")
    }
}

fn requests(seen: &Mutex<Vec<Request>>) -> Vec<Request> {
    seen.lock().map(|l| l.clone()).unwrap_or_default()
}

fn spec(extra: Value) -> Value {
    let mut spec = json!({"secretRefName": "storageos-api", "secretRefNamespace": "storageos-operator"});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    spec
}

#[tokio::test]
async fn a_paused_cluster_writes_only_its_status() {
    let object = cluster(spec(json!({"pause": true})));
    let (client, seen) = apiserver(object.clone(), Refuse::default());
    let ctx = Arc::new(context(client));
    let cluster: StorageOSCluster = serde_json::from_value(object).unwrap();
    reconcile(Arc::new(cluster), ctx).await.unwrap();
    let writes: Vec<Request> = requests(&seen).into_iter().filter(|r| r.method != "GET").collect();
    assert_eq!(writes.len(), 1, "{writes:#?}");
    let status = &writes[0];
    assert!(status.is_status_write(), "{status:?}");
    assert_eq!(status.body["metadata"]["resourceVersion"], "7", "the write is guarded");
    let paused = status.body["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Paused"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (paused["status"].as_str(), paused["reason"].as_str()),
        (Some("True"), Some("SpecPause"))
    );
}

/// A status write that lost to a newer version of the cluster is not a failure: the pass is
/// made again shortly, nothing is reported on the cluster (no read-back, no second status
/// write, no event).
#[tokio::test]
async fn a_status_write_over_an_older_version_is_decided_again_not_reported() {
    let object = cluster(spec(json!({"pause": true})));
    let refuse = Refuse {
        status_as_stale: true,
        ..Refuse::default()
    };
    let (client, seen) = apiserver(object.clone(), refuse);
    let ctx = Arc::new(context(client));
    let cluster: StorageOSCluster = serde_json::from_value(object).unwrap();
    let action = reconcile(Arc::new(cluster), ctx).await.unwrap();
    assert_eq!(
        action,
        Action::requeue(crate::runtime::kube::controller::STALE_VIEW_RETRY)
    );
    let writes: Vec<Request> = requests(&seen).into_iter().filter(|r| r.method != "GET").collect();
    assert_eq!(writes.len(), 1, "one status write, no report, no event: {writes:#?}");
    assert!(writes[0].is_status_write());
}

#[tokio::test]
async fn a_refused_daemonset_makes_the_cluster_not_ready_and_prunes_nothing() {
    let object = cluster(spec(json!({})));
    let (client, seen) = apiserver(
        object.clone(),
        Refuse {
            daemonsets: true,
            ..Refuse::default()
        },
    );
    let ctx = Arc::new(context(client));
    let cluster: StorageOSCluster = serde_json::from_value(object).unwrap();
    let result = reconcile(Arc::new(cluster), ctx).await;
    assert!(
        matches!(result, Err(Error::ApplyFailed { failed: 1, .. })),
        "{result:?}"
    );
    let all = requests(&seen);
    let applied = all
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.contains("force=true"));
    assert!(applied.count() > 10, "the other objects are applied");
    let status = all.iter().rfind(|r| r.is_status_write()).expect("a status write");
    let ready = status.body["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("ApplyFailed"))
    );
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("DaemonSet") && message.contains("denied by policy"),
        "{message}"
    );
    // No prune: nothing deleted, no list of the children.
    let pruning: Vec<&Request> = all
        .iter()
        .filter(|r| r.method == "DELETE" || (r.method == "GET" && r.path.contains("labelSelector")))
        .collect();
    assert!(pruning.is_empty(), "{pruning:#?}");
}
