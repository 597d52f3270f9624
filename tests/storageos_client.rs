//! API tier: the StorageOS client against the in-process simulator, route by route, with every
//! error code and knob (stale versions, token expiry, injected failures and latency).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code may fail loudly

#[path = "support/seed.rs"]
mod seed;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use storageos_operator::sim::{self, DropPoint, Faults, SimHandle, Simulator, VolumeSeed};
use storageos_operator::storageos::{
    Client, Config, Error, FailureMode, Health, LABEL_COMPUTE_ONLY, LABEL_CSI_PV_NAME, LABEL_CSI_PVC_NAME,
    LABEL_FAILURE_MODE, LABEL_NFS_MOUNT_ENDPOINT, LABEL_REPLICAS, Labels, POOL_IDLE_TIMEOUT,
};

/// The timeout of the tests that time out on purpose (against a far longer injected latency).
const SHORT: Duration = Duration::from_millis(300);
/// Every other test's timeout: generous, so a loaded machine never turns an answer into a
/// timeout.
const GENEROUS: Duration = Duration::from_secs(15);

async fn sim() -> SimHandle {
    Simulator::start(sim::Config::default()).await.unwrap()
}

fn client(sim: &SimHandle) -> Client {
    client_with(sim, GENEROUS)
}

fn client_with(sim: &SimHandle, timeout: Duration) -> Client {
    Client::new(Config::new(sim.url(), "storageos", "storageos").with_timeouts(timeout, timeout)).unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// `method path status` of every logged request.
fn log(sim: &SimHandle) -> Vec<String> {
    sim.requests()
        .iter()
        .map(|r| format!("{} {} {}", r.method, r.path, r.status))
        .collect()
}

fn seed(ns: &str, name: &str, master: &str, replicas: u8) -> VolumeSeed {
    VolumeSeed {
        replicas,
        ..seed::volume(ns, name, &format!("claim-{name}"), master)
    }
}

#[tokio::test]
async fn first_call_logs_in_with_the_header_token() {
    let sim = sim().await;
    let c = client(&sim);
    assert!(!c.has_token());
    let cluster = c.get_cluster().await.unwrap();
    assert!(c.has_token());
    assert_eq!(cluster.log_level, "info");
    assert_eq!(cluster.log_format, "default");
    assert!(!cluster.version.is_empty());
    assert_eq!(log(&sim), ["POST /v2/auth/login 200", "GET /v2/cluster 200"]);
    let session = c.login().await.unwrap();
    assert_eq!(session.username, "storageos");
    assert!(session.is_admin);
    assert_eq!(session.session.expires_in_seconds, 300);
}

#[tokio::test]
async fn wrong_password_is_unauthorized() {
    let sim = sim().await;
    let c = Client::new(Config::new(sim.url(), "storageos", "wrong").with_timeouts(GENEROUS, GENEROUS)).unwrap();
    let err = c.list_nodes().await.unwrap_err();
    assert!(matches!(err, Error::Unauthorized { .. }), "{err:?}");
    assert_eq!(err.status(), Some(401));
    assert!(err.to_string().contains("username and password"));
    assert_eq!(log(&sim), ["POST /v2/auth/login 401"]);
}

#[tokio::test]
async fn cluster_update_carries_the_version_and_a_stale_one_gets_412_until_reread() {
    let sim = sim().await;
    let c = client(&sim);
    let before = c.get_cluster().await.unwrap();
    let mut update = before.to_update();
    update.log_level = "debug".into();
    update.disable_telemetry = true;
    let after = c.update_cluster(&update).await.unwrap();
    assert_eq!(after.log_level, "debug");
    assert!(after.disable_telemetry);
    assert_ne!(after.version, before.version);
    assert_eq!(sim.cluster().log_level, "debug");
    let put = sim.requests().into_iter().rfind(|r| r.method == "PUT").unwrap();
    assert_eq!(put.body.unwrap()["version"], before.version.as_str());

    // A concurrent writer bumps the version: the old one is stale.
    sim.bump_cluster_version();
    update.version = after.version.clone();
    let err = c.update_cluster(&update).await.unwrap_err();
    assert!(matches!(err, Error::StaleVersion { .. }), "{err:?}");
    assert_eq!(err.status(), Some(412));
    assert!(!err.is_retryable());

    let fresh = c.get_cluster().await.unwrap();
    let mut update = fresh.to_update();
    update.log_format = "json".into();
    let done = c.update_cluster(&update).await.unwrap();
    assert_eq!(done.log_format, "json");
    assert_eq!(done.log_level, "debug");
}

#[tokio::test]
async fn cluster_update_with_a_bad_enum_is_bad_request() {
    let sim = sim().await;
    let c = client(&sim);
    let mut update = c.get_cluster().await.unwrap().to_update();
    update.log_level = "loud".into();
    let err = c.update_cluster(&update).await.unwrap_err();
    assert!(matches!(err, Error::BadRequest { .. }), "{err:?}");
    assert!(err.to_string().contains("loud"));
}

#[tokio::test]
async fn namespaces_are_found_by_name_and_deleted_only_when_empty() {
    let sim = sim().await;
    sim.add_node("n1", Health::Online).unwrap();
    sim.add_volume(seed("apps", "pvc-1", "n1", 0)).unwrap();
    sim.add_namespace("empty").unwrap();
    let c = client(&sim);

    let names: Vec<_> = c.list_namespaces().await.unwrap().into_iter().map(|n| n.name).collect();
    assert_eq!(names, ["apps", "empty"]);
    let apps = c.namespace_by_name("apps").await.unwrap();
    assert_ne!(apps.id, apps.name, "IDs must differ from names");
    assert_eq!(c.get_namespace(&apps.id).await.unwrap(), apps);

    let err = c.delete_namespace(&apps.id, &apps.version).await.unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
    assert!(err.is_retryable());

    let empty = c.namespace_by_name("empty").await.unwrap();
    let err = c.delete_namespace(&empty.id, "c3RhbGU=").await.unwrap_err();
    assert!(matches!(err, Error::StaleVersion { .. }), "{err:?}");
    c.delete_namespace(&empty.id, &empty.version).await.unwrap();
    assert_eq!(sim.namespaces().len(), 1);

    let err = c.delete_namespace(&empty.id, &empty.version).await.unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(err.status(), Some(404));
    let err = c.namespace_by_name("nope").await.unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(err.status(), None, "a failed lookup is not an HTTP 404");
}

#[tokio::test]
async fn node_labels_keep_reserved_ones_and_compute_only_toggles_its_label() {
    let sim = sim().await;
    sim.add_node("n1", Health::Online).unwrap();
    let c = client(&sim);
    let nodes = c.list_nodes().await.unwrap();
    assert_eq!(nodes.len(), 1);
    let n = c.node_by_name("n1").await.unwrap();
    assert_eq!(n.health, Health::Online);
    assert!(n.io_endpoint.ends_with(":5703"));
    assert_eq!(c.get_node(&n.id).await.unwrap(), n);

    let n = c.set_compute_only(&n.id, true, &n.version).await.unwrap();
    assert_eq!(n.labels.get(LABEL_COMPUTE_ONLY).unwrap(), "true");
    assert!(n.compute_only());

    let n = c
        .set_node_unreserved_labels(&n, &labels(&[("zone", "a"), (LABEL_COMPUTE_ONLY, "false")]))
        .await
        .unwrap();
    assert_eq!(
        n.labels,
        labels(&[(LABEL_COMPUTE_ONLY, "true"), ("zone", "a")]),
        "reserved label kept, reserved key in the wish ignored"
    );

    // Changing a reserved label through the labels route is rejected.
    let err = c
        .update_node_labels(&n.id, &labels(&[(LABEL_COMPUTE_ONLY, "false")]), &n.version)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BadRequest { .. }), "{err:?}");

    // An empty label set (omitted by omitempty) clears the unreserved labels only.
    let n = c.update_node_labels(&n.id, &Labels::new(), &n.version).await.unwrap();
    assert_eq!(n.labels, labels(&[(LABEL_COMPUTE_ONLY, "true")]));

    let n = c.set_compute_only(&n.id, false, &n.version).await.unwrap();
    assert!(n.labels.is_empty());
    assert!(!n.compute_only());

    let err = c.set_compute_only(&n.id, true, "c3RhbGU=").await.unwrap_err();
    assert!(matches!(err, Error::StaleVersion { .. }), "{err:?}");
    let err = c.get_node("no-such-id").await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn node_delete_needs_offline_an_expired_lock_and_no_masters() {
    let sim = sim().await;
    sim.add_node("busy", Health::Online).unwrap();
    sim.add_node("idle", Health::Online).unwrap();
    sim.add_volume(seed("apps", "pvc-1", "busy", 0)).unwrap();
    let c = client(&sim);

    let idle = c.node_by_name("idle").await.unwrap();
    let err = c.delete_node(&idle.id, &idle.version).await.unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "online → 409: {err:?}");

    sim.set_health("idle", Health::Offline).unwrap();
    sim.set_health("busy", Health::Offline).unwrap();
    let idle = c.node_by_name("idle").await.unwrap();
    assert_eq!(idle.health, Health::Offline);
    let err = c.delete_node(&idle.id, &idle.version).await.unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "lock held → 423: {err:?}");
    assert_eq!(err.status(), Some(423));

    sim.advance_clock(Duration::from_secs(31));
    let busy = c.node_by_name("busy").await.unwrap();
    let err = c.delete_node(&busy.id, &busy.version).await.unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "hosts a master → 409: {err:?}");

    let err = c.delete_node(&idle.id, "c3RhbGU=").await.unwrap_err();
    assert!(matches!(err, Error::StaleVersion { .. }), "{err:?}");
    c.delete_node(&idle.id, &idle.version).await.unwrap();
    let names: Vec<_> = sim.nodes().into_iter().map(|n| n.name).collect();
    assert_eq!(names, ["busy"]);
    let err = c.delete_node(&idle.id, &idle.version).await.unwrap_err();
    assert!(err.is_not_found());
}

#[tokio::test]
async fn volumes_are_found_by_pv_name_and_labels_keep_reserved_ones() {
    let sim = sim().await;
    sim.add_node("n1", Health::Online).unwrap();
    let mut s = seed("apps", "pvc-1", "n1", 0);
    s.labels = labels(&[("team", "blue")]);
    sim.add_volume(s).unwrap();
    let c = client(&sim);

    let v = c.volume_by_name("apps", "pvc-1").await.unwrap();
    assert_eq!(v.labels.get(LABEL_CSI_PV_NAME).unwrap(), "pvc-1");
    assert_eq!(v.labels.get(LABEL_CSI_PVC_NAME).unwrap(), "claim-pvc-1");
    assert_eq!(v.labels.get(LABEL_REPLICAS).unwrap(), "0");
    assert!(v.is_healthy());
    assert_eq!(v.nfs_endpoint(), None);
    let ns = c.namespace_by_name("apps").await.unwrap();
    assert_eq!(v.namespace_id, ns.id);
    assert_eq!(c.get_volume(&ns.id, &v.id).await.unwrap(), v);
    assert_eq!(c.list_volumes(&ns.id).await.unwrap(), vec![v.clone()]);

    let v2 = c
        .set_volume_unreserved_labels(&v, &labels(&[("team", "red"), ("tier", "gold")]))
        .await
        .unwrap();
    assert_eq!(v2.unreserved_labels(), labels(&[("team", "red"), ("tier", "gold")]));
    for key in [LABEL_CSI_PV_NAME, LABEL_CSI_PVC_NAME, LABEL_REPLICAS] {
        assert_eq!(
            v2.labels.get(key).unwrap(),
            v.labels.get(key).unwrap(),
            "{key} preserved"
        );
    }
    assert_ne!(v2.version, v.version);
    let put = sim.requests().into_iter().rfind(|r| r.method == "PUT").unwrap();
    assert_eq!(put.body.unwrap()["labels"][LABEL_CSI_PV_NAME], "pvc-1");

    let mut changed = v2.labels.clone();
    changed.insert(LABEL_REPLICAS.into(), "3".into());
    let err = c
        .update_volume(&ns.id, &v.id, &changed.to_map(), "", &v2.version)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BadRequest { .. }), "{err:?}");
    assert!(err.to_string().contains(LABEL_REPLICAS));

    let err = c.volume_by_name("apps", "pvc-nope").await.unwrap_err();
    assert!(err.is_not_found());
    let err = c.list_volumes("no-such-ns").await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    let err = c.get_volume(&ns.id, "no-such-volume").await.unwrap_err();
    assert_eq!(err.status(), Some(404));
}

#[tokio::test]
async fn replicas_and_failure_mode_set_their_labels_and_validate() {
    let sim = sim().await;
    for n in ["n1", "n2"] {
        sim.add_node(n, Health::Online).unwrap();
    }
    sim.add_volume(seed("apps", "pvc-1", "n1", 0)).unwrap();
    let c = client(&sim);
    let v = c.volume_by_name("apps", "pvc-1").await.unwrap();

    c.set_replicas(&v.namespace_id, &v.id, 2, &v.version).await.unwrap();
    assert!(log(&sim).contains(&format!(
        "PUT /v2/namespaces/{}/volumes/{}/replicas 202",
        v.namespace_id, v.id
    )));
    let v = c.get_volume(&v.namespace_id, &v.id).await.unwrap();
    assert_eq!(v.labels.get(LABEL_REPLICAS).unwrap(), "2");
    assert_eq!(v.replicas.len(), 1, "only one other node can hold a replica");

    let err = c.set_replicas(&v.namespace_id, &v.id, 6, &v.version).await.unwrap_err();
    assert!(matches!(err, Error::BadRequest { .. }), "{err:?}");

    let v = c
        .set_failure_mode(&v.namespace_id, &v.id, FailureMode::Soft, &v.version)
        .await
        .unwrap();
    assert_eq!(v.labels.get(LABEL_FAILURE_MODE).unwrap(), "soft");
    let v = c
        .set_failure_mode(&v.namespace_id, &v.id, FailureMode::Threshold(1), &v.version)
        .await
        .unwrap();
    assert_eq!(v.labels.get(LABEL_FAILURE_MODE).unwrap(), "1");
    let err = c
        .set_failure_mode(&v.namespace_id, &v.id, FailureMode::Threshold(3), &v.version)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "above desired → 409: {err:?}");
    let err = c
        .set_failure_mode(&v.namespace_id, &v.id, FailureMode::Threshold(2), &v.version)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidState { .. }), "above ready → 422: {err:?}");
    assert_eq!(err.status(), Some(422));

    // Lowering the count removes replicas; threshold 0 omits the field and still works.
    c.set_replicas(&v.namespace_id, &v.id, 0, &v.version).await.unwrap();
    let v = c.get_volume(&v.namespace_id, &v.id).await.unwrap();
    assert_eq!(v.labels.get(LABEL_REPLICAS).unwrap(), "0");
    assert!(v.replicas.is_empty());
    let v = c
        .set_failure_mode(&v.namespace_id, &v.id, FailureMode::Threshold(0), &v.version)
        .await
        .unwrap();
    assert_eq!(v.labels.get(LABEL_FAILURE_MODE).unwrap(), "0");
}

#[tokio::test]
async fn stale_volume_version_gets_412_then_succeeds_after_a_reread() {
    let sim = sim().await;
    sim.add_node("n1", Health::Online).unwrap();
    sim.add_volume(seed("apps", "pvc-1", "n1", 0)).unwrap();
    let c = client(&sim);
    let v = c.volume_by_name("apps", "pvc-1").await.unwrap();
    sim.bump_volume_version("apps", "pvc-1").unwrap();
    let err = c.set_replicas(&v.namespace_id, &v.id, 1, &v.version).await.unwrap_err();
    assert!(matches!(err, Error::StaleVersion { .. }), "{err:?}");
    let v = c.get_volume(&v.namespace_id, &v.id).await.unwrap();
    c.set_replicas(&v.namespace_id, &v.id, 1, &v.version).await.unwrap();
    assert_eq!(sim.volumes()[0].labels.get(LABEL_REPLICAS).unwrap(), "1");
}

#[tokio::test]
async fn nfs_mount_endpoint_is_stored_as_a_reserved_label_on_shared_volumes_only() {
    let sim = sim().await;
    sim.add_node("n1", Health::Online).unwrap();
    let mut shared = seed("apps", "pvc-rwx", "n1", 0);
    shared.nfs_service_endpoint = Some("10.0.0.1:25000".into());
    sim.add_volume(shared).unwrap();
    sim.add_volume(seed("apps", "pvc-rwo", "n1", 0)).unwrap();
    let c = client(&sim);

    let v = c.volume_by_name("apps", "pvc-rwx").await.unwrap();
    assert_eq!(v.nfs_endpoint(), Some("10.0.0.1:25000"));
    assert_eq!(v.attachment_type, "nfs");
    c.set_nfs_mount_endpoint(&v.namespace_id, &v.id, "10.96.0.7:2049", &v.version)
        .await
        .unwrap();
    let v2 = c.get_volume(&v.namespace_id, &v.id).await.unwrap();
    assert_eq!(v2.labels.get(LABEL_NFS_MOUNT_ENDPOINT).unwrap(), "10.96.0.7:2049");
    assert_ne!(v2.version, v.version);
    let err = c
        .set_nfs_mount_endpoint(&v.namespace_id, &v.id, "10.96.0.8:2049", &v.version)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::StaleVersion { .. }), "{err:?}");

    let rwo = c.volume_by_name("apps", "pvc-rwo").await.unwrap();
    let err = c
        .set_nfs_mount_endpoint(&rwo.namespace_id, &rwo.id, "10.96.0.7:2049", &rwo.version)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
}

#[tokio::test]
async fn expired_token_is_replaced_by_one_transparent_relogin() {
    let sim = sim().await;
    let c = client(&sim);
    c.list_nodes().await.unwrap();
    assert_eq!(sim.expire_tokens(), 1);
    sim.clear_requests();
    let nodes = c.list_nodes().await.unwrap();
    assert!(nodes.is_empty());
    assert_eq!(
        log(&sim),
        ["GET /v2/nodes 401", "POST /v2/auth/login 200", "GET /v2/nodes 200"]
    );

    // The same happens when the token ages out on the simulated clock.
    sim.advance_clock(Duration::from_secs(301));
    sim.clear_requests();
    c.get_cluster().await.unwrap();
    assert_eq!(
        log(&sim),
        ["GET /v2/cluster 401", "POST /v2/auth/login 200", "GET /v2/cluster 200"]
    );
}

#[tokio::test]
async fn refresh_swaps_the_token_and_fails_once_it_expired() {
    let sim = sim().await;
    let c = client(&sim);
    c.login().await.unwrap();
    let s = c.refresh().await.unwrap();
    assert_eq!(s.session.expires_in_seconds, 300);
    c.list_nodes().await.unwrap();
    sim.expire_tokens();
    let err = c.refresh().await.unwrap_err();
    assert!(matches!(err, Error::Unauthorized { .. }), "{err:?}");
    c.login().await.unwrap();
    c.refresh().await.unwrap();
    assert_eq!(
        log(&sim),
        [
            "POST /v2/auth/login 200",
            "POST /v2/auth/refresh 200",
            "GET /v2/nodes 200",
            "POST /v2/auth/refresh 401",
            "POST /v2/auth/login 200",
            "POST /v2/auth/refresh 200",
        ]
    );
}

#[tokio::test]
async fn injected_status_codes_map_to_typed_errors() {
    let sim = sim().await;
    let c = client(&sim);
    c.login().await.unwrap();
    type IsVariant = fn(&Error) -> bool;
    let cases: [(u16, IsVariant); 9] = [
        (400, |e| matches!(e, Error::BadRequest { .. })),
        (403, |e| matches!(e, Error::Forbidden { .. })),
        (404, |e| matches!(e, Error::NotFound { .. })),
        (409, |e| matches!(e, Error::Conflict { .. })),
        (412, |e| matches!(e, Error::StaleVersion { .. })),
        (422, |e| matches!(e, Error::InvalidState { .. })),
        (423, |e| matches!(e, Error::Locked { .. })),
        (500, |e| matches!(e, Error::Server { status: 500, .. })),
        (503, |e| matches!(e, Error::Server { status: 503, .. })),
    ];
    for (status, is_variant) in cases {
        sim.set_faults(Faults {
            fail_next: 1,
            status,
            path: Some("/v2/nodes".into()),
            error: Some(format!("boom {status}")),
            ..Faults::default()
        });
        let err = c.list_nodes().await.unwrap_err();
        assert!(is_variant(&err), "{status}: {err:?}");
        assert_eq!(err.status(), Some(status));
        assert!(err.to_string().contains(&format!("boom {status}")), "{err}");
        // The fault is used up: the next call succeeds.
        c.list_nodes().await.unwrap();
    }
    let injected = sim.requests().iter().filter(|r| r.injected).count();
    assert_eq!(injected, 9);
}

/// A connection dropped before the answer is a transport error the caller may retry. Dropped
/// before the request is handled, nothing changed; dropped after, the change was made, and a
/// retry with the old version is refused as stale rather than made twice.
#[tokio::test]
async fn a_dropped_connection_is_a_retryable_transport_error() {
    let sim = sim().await;
    sim.add_node("n1", Health::Online).unwrap();
    let c = client(&sim);
    c.login().await.unwrap();
    let n = c.node_by_name("n1").await.unwrap();
    let drop_next_write = |point| {
        sim.set_faults(Faults {
            fail_next: 1,
            method: Some("PUT".into()),
            drop_connection: Some(point),
            ..Faults::default()
        })
    };

    drop_next_write(DropPoint::BeforeHandling);
    let err = c.set_compute_only(&n.id, true, &n.version).await.unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(c.get_node(&n.id).await.unwrap(), n, "nothing changed");

    drop_next_write(DropPoint::AfterHandling);
    let err = c.set_compute_only(&n.id, true, &n.version).await.unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err:?}");
    let changed = c.get_node(&n.id).await.unwrap();
    assert!(changed.compute_only(), "the change was made");
    let again = c.set_compute_only(&n.id, true, &n.version).await.unwrap_err();
    assert!(matches!(again, Error::StaleVersion { .. }), "{again:?}");

    let dropped: Vec<(u16, bool)> = sim
        .requests()
        .iter()
        .filter(|r| r.dropped)
        .map(|r| (r.status, r.injected))
        .collect();
    assert_eq!(dropped, [(0, true), (200, true)]);
}

#[tokio::test]
async fn a_401_is_retried_once_after_relogin_but_not_twice() {
    let sim = sim().await;
    let c = client(&sim);
    c.login().await.unwrap();
    sim.set_faults(Faults {
        fail_next: 1,
        status: 401,
        path: Some("/v2/nodes".into()),
        ..Faults::default()
    });
    sim.clear_requests();
    c.list_nodes().await.unwrap();
    assert_eq!(
        log(&sim),
        ["GET /v2/nodes 401", "POST /v2/auth/login 200", "GET /v2/nodes 200"]
    );

    sim.set_faults(Faults {
        fail_next: 2,
        status: 401,
        path: Some("/v2/nodes".into()),
        ..Faults::default()
    });
    sim.clear_requests();
    let err = c.list_nodes().await.unwrap_err();
    assert!(matches!(err, Error::Unauthorized { .. }), "{err:?}");
    assert_eq!(
        log(&sim),
        ["GET /v2/nodes 401", "POST /v2/auth/login 200", "GET /v2/nodes 401"]
    );
}

#[tokio::test]
async fn latency_beyond_the_timeout_is_a_timeout_error() {
    let sim = sim().await;
    let c = client_with(&sim, SHORT);
    c.login().await.unwrap();
    sim.set_faults(Faults {
        latency_ms: 5000,
        path: Some("/v2/nodes".into()),
        ..Faults::default()
    });
    let started = Instant::now();
    let err = c.list_nodes().await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(err.is_retryable());
    // Timed out before the server answered (5 s); the upper bound is that, not a tight figure.
    assert!(took >= SHORT && took < Duration::from_millis(5000), "{took:?}");

    // Latency below the timeout only slows the call down.
    let patient = client(&sim);
    sim.set_faults(Faults {
        latency_ms: 100,
        ..Faults::default()
    });
    let started = Instant::now();
    patient.get_cluster().await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(100));

    // Login has its own timeout.
    sim.set_faults(Faults {
        latency_ms: 5000,
        path: Some("/v2/auth/login".into()),
        ..Faults::default()
    });
    let err = c.login().await.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
}

#[tokio::test]
async fn unreachable_endpoint_is_a_transport_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let c = Client::new(Config::new(format!("127.0.0.1:{port}"), "u", "p").with_timeouts(GENEROUS, GENEROUS)).unwrap();
    let err = c.list_nodes().await.unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert!(err.to_string().contains("check the API endpoint"));
}

#[tokio::test]
async fn node_health_reads_the_nodes_of_the_full_list() {
    let sim = sim().await;
    sim.add_node("n1", Health::Online).unwrap();
    sim.add_node("n2", Health::Offline).unwrap();
    let c = client(&sim);
    let full: Vec<(String, Health)> = c
        .list_nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| (n.name.to_string(), n.health))
        .collect();
    let narrow: Vec<(String, Health)> = c
        .list_node_health()
        .await
        .unwrap()
        .into_iter()
        .map(|n| (n.name, n.health))
        .collect();
    assert_eq!(narrow.len(), 2);
    assert_eq!(narrow, full);
}

/// A TCP proxy to `to` that counts the connections open through it.
async fn counting_proxy(
    to: std::net::SocketAddr,
) -> (std::net::SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering::SeqCst;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let open = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = open.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let open = counter.clone();
            open.fetch_add(1, SeqCst);
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
                open.fetch_sub(1, SeqCst);
            });
        }
    });
    (addr, open)
}

#[tokio::test]
async fn idle_connections_are_closed_between_polls() {
    use std::sync::atomic::Ordering::SeqCst;
    let sim = sim().await;
    for i in 0..200 {
        sim.add_node(&format!("node-{i}"), Health::Online).unwrap();
    }
    let to = sim
        .url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let (proxy, open) = counting_proxy(to).await;
    let c =
        Client::new(Config::new(format!("http://{proxy}"), "storageos", "storageos").with_timeouts(GENEROUS, GENEROUS))
            .unwrap();

    assert_eq!(c.list_nodes().await.unwrap().len(), 200);
    assert!(open.load(SeqCst) >= 1, "the answer came through the proxy");
    // Kept for the next request a moment, then closed with its read buffer: not kept for
    // reqwest's 90 s, which outlasts every poll interval.
    let started = Instant::now();
    while open.load(SeqCst) > 0 && started.elapsed() < GENEROUS {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        open.load(SeqCst),
        0,
        "idle connections still open after {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() >= POOL_IDLE_TIMEOUT / 2,
        "closed at once: not kept for the next poll"
    );

    assert_eq!(
        c.list_nodes().await.unwrap().len(),
        200,
        "the next poll opens a new connection"
    );
}

#[tokio::test]
async fn metrics_count_requests_by_code_and_method() {
    let sim = sim().await;
    let mut registry = prometheus_client::registry::Registry::default();
    let c = Client::with_metrics(
        Config::new(sim.url(), "storageos", "storageos").with_timeouts(GENEROUS, GENEROUS),
        &mut registry,
    )
    .unwrap();
    c.list_nodes().await.unwrap();
    c.list_nodes().await.unwrap();
    sim.set_faults(Faults {
        fail_next: 1,
        status: 503,
        ..Faults::default()
    });
    let _ = c.get_cluster().await.unwrap_err();
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for want in [
        r#"storageos_api_requests_total{code="200",method="get"} 2"#,
        r#"storageos_api_requests_total{code="200",method="post"} 1"#,
        r#"storageos_api_requests_total{code="503",method="get"} 1"#,
        r#"storageos_api_request_duration_seconds_count{method="get"} 3"#,
        "storageos_api_in_flight_requests 0",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
}

#[tokio::test]
async fn failover_moves_the_master_and_the_nfs_endpoint() {
    let sim = sim().await;
    sim.add_node("a", Health::Online).unwrap();
    let b = sim.add_node("b", Health::Online).unwrap();
    let mut s = seed("apps", "pvc-1", "a", 1);
    s.nfs_service_endpoint = Some("10.0.0.2:25001".into());
    sim.add_volume(s).unwrap();
    sim.add_volume(seed("apps", "pvc-lonely", "a", 0)).unwrap();
    let c = client(&sim);
    let before = c.volume_by_name("apps", "pvc-1").await.unwrap();
    assert_eq!(before.replicas.len(), 1);
    assert_eq!(before.replicas[0].node_id, b.id);

    sim.set_health("a", Health::Offline).unwrap();
    let after = c.volume_by_name("apps", "pvc-1").await.unwrap();
    assert_eq!(after.master.node_id, b.id);
    assert!(after.is_healthy());
    assert!(after.replicas.is_empty());
    assert_eq!(after.attached_on, b.id);
    let b_ip = b.io_endpoint.trim_end_matches(":5703");
    assert_eq!(after.nfs_endpoint(), Some(format!("{b_ip}:25001").as_str()));
    assert_ne!(after.version, before.version);

    let lonely = c.volume_by_name("apps", "pvc-lonely").await.unwrap();
    assert_eq!(lonely.master.health, Health::Offline);
    assert!(!lonely.is_healthy());

    sim.set_health("a", Health::Online).unwrap();
    let lonely = c.volume_by_name("apps", "pvc-lonely").await.unwrap();
    assert!(lonely.is_healthy());
    let _: BTreeMap<String, String> = lonely.unreserved_labels();
}

/// A response larger than the client's cap is refused, not buffered; a small one is read.
#[tokio::test]
async fn responses_over_the_size_cap_are_refused() {
    let sim = sim().await;
    for i in 0..50 {
        sim.add_node(&format!("node-with-a-long-name-{i:03}"), Health::Online)
            .unwrap();
    }
    let capped = |limit: usize| {
        let mut config = Config::new(sim.url(), "storageos", "storageos").with_timeouts(GENEROUS, GENEROUS);
        config.max_response_bytes = limit;
        Client::new(config).unwrap()
    };
    match capped(4096).list_nodes().await {
        Err(e @ Error::TooLarge { .. }) => assert!(e.to_string().contains("more than 4096 bytes"), "{e}"),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(capped(1 << 20).list_nodes().await.unwrap().len(), 50);
}
