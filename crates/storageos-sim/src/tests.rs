//! Unit tests of the simulator's state rules and the pod → node sync plan.

use std::time::Duration;

use super::*;

use std::collections::BTreeSet;

use super::state::{DeleteVersion, State, WriteBody};
use storageos_client::models::{Health, LABEL_REPLICAS, Labels};

fn state() -> State {
    State::new(Config::default())
}

fn body(json: serde_json::Value) -> WriteBody {
    serde_json::from_value(json).unwrap()
}

fn pod(node: &str, uid: &str, running: bool) -> PodView {
    PodView {
        node_name: node.into(),
        uid: uid.into(),
        ip: Some(format!("192.168.0.{}", node.len())),
        running,
        image: Some("storageos/node:v1".into()),
    }
}

fn names(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn running_pods_register_nodes_and_only_pod_changes_touch_health() {
    // First sight: a running pod registers its node; a pending one does nothing yet.
    let pods = [pod("n1", "u1", true), pod("n2", "u2", false)];
    let (actions, seen) = plan_sync(&Seen::new(), &pods, &BTreeSet::new(), None);
    assert_eq!(
        actions,
        [SyncAction::Register {
            node: "n1".into(),
            ip: Some("192.168.0.2".into())
        }]
    );

    // Nothing changed: no action, so a health set through /_sim/ stays in force.
    let (actions, seen) = plan_sync(&seen, &pods, &names(&["n1"]), None);
    assert!(actions.is_empty());

    // n2 starts running; n1's pod is replaced by a new one that is not running yet.
    let pods = [pod("n1", "u1b", false), pod("n2", "u2", true)];
    let (actions, seen) = plan_sync(&seen, &pods, &names(&["n1"]), None);
    assert_eq!(
        actions,
        [
            SyncAction::SetHealth {
                node: "n1".into(),
                health: Health::Offline
            },
            SyncAction::Register {
                node: "n2".into(),
                ip: Some("192.168.0.2".into())
            },
        ]
    );

    // n1's new pod runs → online again; n2's pod disappears → offline.
    let pods = [pod("n1", "u1b", true)];
    let (actions, _) = plan_sync(&seen, &pods, &names(&["n1", "n2"]), None);
    assert_eq!(
        actions,
        [
            SyncAction::SetHealth {
                node: "n1".into(),
                health: Health::Online
            },
            SyncAction::SetHealth {
                node: "n2".into(),
                health: Health::Offline
            },
        ]
    );
}

#[test]
fn a_pod_that_stopped_and_then_vanished_sets_offline_once() {
    let (_, seen) = plan_sync(&Seen::new(), &[pod("n1", "u1", true)], &BTreeSet::new(), None);
    let (actions, seen) = plan_sync(&seen, &[pod("n1", "u1", false)], &names(&["n1"]), None);
    assert_eq!(
        actions,
        [SyncAction::SetHealth {
            node: "n1".into(),
            health: Health::Offline
        }]
    );
    let (actions, seen) = plan_sync(&seen, &[], &names(&["n1"]), None);
    assert!(actions.is_empty(), "{actions:?}");
    assert!(seen.is_empty());
}

#[test]
fn a_running_pod_wins_over_a_terminating_one_on_the_same_node() {
    let pods = [pod("n1", "new", true), pod("n1", "old", false)];
    let (actions, seen) = plan_sync(&Seen::new(), &pods, &BTreeSet::new(), None);
    assert_eq!(actions.len(), 1);
    assert_eq!(seen["n1"], ("new".to_string(), true));
}

#[test]
fn pod_view_reads_node_ip_and_running_state() {
    let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "storageos-daemonset-x", "uid": "u1"},
        "spec": {"nodeName": "n1", "containers": []},
        "status": {"phase": "Running", "hostIP": "127.0.0.1", "podIP": "10.1.2.3"}
    }))
    .unwrap();
    assert_eq!(PodView::from_pod(&p), Some(pod_with("n1", "u1", "10.1.2.3", true)));
    let unscheduled: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p"}, "spec": {"containers": []}
    }))
    .unwrap();
    assert_eq!(PodView::from_pod(&unscheduled), None);
}

fn pod_with(node: &str, uid: &str, ip: &str, running: bool) -> PodView {
    PodView {
        node_name: node.into(),
        uid: uid.into(),
        ip: Some(ip.into()),
        running,
        image: None,
    }
}

#[test]
fn a_pod_on_the_offline_image_leaves_its_node_offline_and_another_image_brings_it_back() {
    let broken = "storageos/node:v1";
    let (actions, seen) = plan_sync(&Seen::new(), &[pod("n1", "u1", true)], &BTreeSet::new(), Some(broken));
    let offline = SyncAction::SetHealth {
        node: "n1".into(),
        health: Health::Offline,
    };
    assert_eq!(
        actions,
        [
            SyncAction::Register {
                node: "n1".into(),
                ip: Some("192.168.0.2".into())
            },
            offline.clone()
        ]
    );
    let (actions, seen) = plan_sync(&seen, &[pod("n1", "u2", true)], &names(&["n1"]), Some(broken));
    assert_eq!(actions, [offline]);
    let mut fixed = pod("n1", "u3", true);
    fixed.image = Some("storageos/node:v0".into());
    let (actions, _) = plan_sync(&seen, &[fixed], &names(&["n1"]), Some(broken));
    assert_eq!(
        actions,
        [SyncAction::SetHealth {
            node: "n1".into(),
            health: Health::Online
        }]
    );
}

#[test]
fn versions_are_opaque_and_change_on_every_write() {
    let mut s = state();
    let c = s.cluster();
    let c2 = s
        .update_cluster(&body(serde_json::json!({"version": c.version})), false)
        .unwrap();
    assert_ne!(c.version, c2.version);
    assert_ne!(c2.version, "2", "versions are not bare counters");
    let err = s
        .update_cluster(&body(serde_json::json!({"version": c.version})), false)
        .unwrap_err();
    assert_eq!(err.status, 412);
    // ignore-version forces the write.
    s.update_cluster(&body(serde_json::json!({})), true).unwrap();
}

#[test]
fn missing_versions_can_be_accepted_by_a_knob() {
    let mut strict = state();
    assert_eq!(
        strict
            .update_cluster(&body(serde_json::json!({})), false)
            .unwrap_err()
            .status,
        412
    );
    let mut lax = State::new(Config {
        accept_missing_version: true,
        ..Config::default()
    });
    lax.update_cluster(&body(serde_json::json!({})), false).unwrap();
    let ns = lax.create_namespace("a", Labels::new()).unwrap();
    lax.delete_namespace(&ns.id, &DeleteVersion::default()).unwrap();
}

#[test]
fn health_flips_do_not_bump_node_versions_and_offline_starts_the_lock() {
    let mut s = state();
    let n = s
        .add_node(NodeSeed {
            name: "n1".into(),
            ..NodeSeed::default()
        })
        .unwrap();
    assert_eq!(n.health, Health::Online);
    let off = s.set_health("n1", Health::Offline).unwrap();
    assert_eq!(off.version, n.version);
    let dv = DeleteVersion {
        version: Some(n.version.to_string()),
        ignore: false,
    };
    assert_eq!(s.delete_node(&n.id, &dv).unwrap_err().status, 423);
    s.advance_clock(Duration::from_secs(29));
    assert_eq!(s.delete_node(&n.id, &dv).unwrap_err().status, 423);
    s.advance_clock(Duration::from_secs(2));
    s.delete_node(&n.id, &dv).unwrap();
    assert!(s.nodes().is_empty());
}

#[test]
fn replicas_avoid_the_master_compute_only_and_offline_nodes() {
    let mut s = state();
    for (name, health) in [("m", Health::Online), ("ok", Health::Online), ("down", Health::Offline)] {
        s.add_node(NodeSeed {
            name: name.into(),
            health: Some(health),
            ..NodeSeed::default()
        })
        .unwrap();
    }
    let co = s
        .add_node(NodeSeed {
            name: "co".into(),
            ..NodeSeed::default()
        })
        .unwrap();
    s.set_compute_only(
        &co.id,
        &body(serde_json::json!({"computeOnly": true, "version": co.version})),
        false,
    )
    .unwrap();
    let v = s
        .seed_volume(VolumeSeed {
            namespace: "apps".into(),
            name: "pvc-1".into(),
            master_node: "m".into(),
            replicas: 3,
            ..VolumeSeed::default()
        })
        .unwrap();
    assert_eq!(v.labels.get(LABEL_REPLICAS), Some("3"));
    let ok_id = s.nodes().into_iter().find(|n| n.name == "ok").unwrap().id;
    assert_eq!(v.replicas.len(), 1);
    assert_eq!(v.replicas[0].node_id, ok_id);
    assert_eq!(v.replicas[0].health, "ready");
}

#[test]
fn unknown_master_node_is_refused_with_a_hint() {
    let mut s = state();
    let err = s
        .seed_volume(VolumeSeed {
            namespace: "apps".into(),
            name: "pvc-1".into(),
            master_node: "ghost".into(),
            ..VolumeSeed::default()
        })
        .unwrap_err();
    assert_eq!(err.status, 400);
    assert!(err.message.contains("POST /_sim/nodes"));
}

#[test]
fn faults_count_down_and_match_by_path_and_method() {
    let mut s = state();
    s.set_faults(Faults {
        fail_next: 1,
        status: 0,
        latency_ms: 5,
        path: Some("/v2/nodes".into()),
        method: Some("get".into()),
        error: None,
        offline_with_image: None,
        drop_connection: None,
    });
    assert_eq!(s.take_fault("GET", "/v2/cluster"), (Duration::ZERO, None));
    assert_eq!(s.take_fault("PUT", "/v2/nodes/x").1, None);
    let (lat, err) = s.take_fault("GET", "/v2/nodes");
    assert_eq!(lat, Duration::from_millis(5));
    let Some(Injected::Fail(err)) = err else {
        panic!("an error, not {err:?}")
    };
    assert_eq!(err.status, 500);
    assert_eq!(s.take_fault("GET", "/v2/nodes").1, None);
}

#[test]
fn nfs_endpoint_moves_and_clears_with_a_new_version() {
    let mut s = state();
    s.add_node(NodeSeed {
        name: "m".into(),
        ..NodeSeed::default()
    })
    .unwrap();
    let v = s
        .seed_volume(VolumeSeed {
            namespace: "apps".into(),
            name: "pvc-1".into(),
            nfs_service_endpoint: Some("10.0.0.5:25000".into()),
            ..VolumeSeed::default()
        })
        .unwrap();
    let moved = s
        .set_nfs_endpoint("apps", "pvc-1", Some("10.0.0.6:25001".into()))
        .unwrap();
    assert_eq!(moved.nfs_endpoint(), Some("10.0.0.6:25001"));
    assert_eq!(moved.attachment_type, "nfs");
    assert_ne!(moved.version, v.version);
    let cleared = s.set_nfs_endpoint("apps", "pvc-1", None).unwrap();
    assert_eq!(cleared.nfs_endpoint(), None);
    assert_eq!(s.set_nfs_endpoint("apps", "nope", None).unwrap_err().status, 404);
}
