//! Unit tests of the parent module (kept apart so the module reads on its own).

#![allow(clippy::unwrap_used)]

use super::*;
use crate::job::status::PodView;
use UpgradePhase::*;
use serde_json::json;

const IMAGE: &str = "storageos/node:v2.10.0";

fn app(name: &str, replicas: i32) -> ScaledApp {
    ScaledApp {
        kind: "Deployment".into(),
        namespace: "apps".into(),
        name: name.into(),
        replicas,
    }
}

fn live(replicas: i32, annotated: bool, pods: usize) -> Option<LiveApp> {
    Some(LiveApp {
        replicas,
        scaled_down_from: annotated.then(|| "3".to_string()),
        pods,
    })
}

fn cluster() -> ClusterView {
    ClusterView {
        namespace: "storageos".into(),
        name: "storageos".into(),
        objects_namespace: "kube-system".into(),
        node_image: Some("storageos/node:v2.9.0".into()),
        ..Default::default()
    }
}

fn nodes(template: &str, current: bool, pods: &[(&str, &str, bool)]) -> NodeView {
    NodeView {
        namespace: "kube-system".into(),
        template_image: Some(template.into()),
        current,
        desired: 2,
        pods: pods
            .iter()
            .map(|(n, i, ready)| super::super::nodes::NodePod {
                name: n.to_string(),
                node_name: n.to_string(),
                image: Some(i.to_string()),
                ready: *ready,
                terminating: false,
            })
            .collect(),
        ..Default::default()
    }
}

/// A complete StorageOS read: these nodes online, no volumes.
fn healthy(online: &[&str]) -> StorageOSRead {
    StorageOSRead::Read {
        nodes: online
            .iter()
            .map(|n| crate::storageos::models::Node {
                name: n.to_string().into(),
                health: crate::storageos::models::Health::Online,
                ..Default::default()
            })
            .collect(),
        namespaces: Vec::new(),
        volumes: Vec::new(),
    }
}

fn step(phase: UpgradePhase, recorded: &[ScaledApp], o: &Observed) -> Step {
    next("up", IMAGE, phase, recorded, o)
}

#[test]
fn pending_waits_its_turn_then_needs_a_cluster() {
    let mut o = Observed {
        blocked_by: Some("ns/first".into()),
        cluster: Some(cluster()),
        storageos: healthy(&[]),
        ..Default::default()
    };
    assert_eq!(step(Pending, &[], &o), Step::Blocked("ns/first".into()));
    o.blocked_by = None;
    assert_eq!(
        step(Pending, &[], &o),
        Step::Problem(Problem::NoNodeDaemonSet("kube-system/storageos-daemonset".into()))
    );
    o.nodes = Some(nodes("storageos/node:v2.9.0", true, &[]));
    assert_eq!(step(Pending, &[], &o), Step::Advance(PullingImage));
    o.cluster.as_mut().unwrap().deleting = true;
    assert_eq!(
        step(Pending, &[], &o),
        Step::Problem(Problem::ClusterDeleting("storageos/storageos".into()))
    );
    o.cluster = None;
    assert_eq!(step(Pending, &[], &o), Step::Problem(Problem::NoCluster));
    assert!(Problem::NoCluster.to_string().contains("create one"));
}

#[test]
fn an_unsupported_path_is_refused_before_anything_and_goes_ahead_once_forced() {
    let mut o = Observed {
        cluster: Some(cluster()),
        storageos: healthy(&[]),
        ..Default::default()
    };
    // IMAGE is v2.10.0.
    for (running, reason) in [
        ("storageos/node:v2.11.0", "Downgrade"),
        ("storageos/node:v2.8.0", "SkipsVersion"),
        ("storageos/node:custom", "UnknownVersion"),
    ] {
        o.nodes = Some(nodes(running, true, &[]));
        o.force = false;
        for phase in [Pending, Refused] {
            match step(phase, &[], &o) {
                Step::Refuse(e) => assert_eq!(e.reason().name(), reason, "{running}"),
                other => panic!("{running} at {phase:?}: {other:?}"),
            }
        }
        o.force = true;
        assert_eq!(step(Refused, &[], &o), Step::Advance(PullingImage), "{running} forced");
    }
    // A refused upgrade neither waits for nor holds up another.
    let refused = upgrade("ns", "refused", 1, Some("Refused"), false);
    let waiting = upgrade("ns", "later", 2, None, false);
    let both = [refused, waiting];
    assert_eq!(first_in_line(&both).map(|u| u.name_any()).as_deref(), Some("later"));
}

#[test]
fn an_upgrade_in_another_namespace_touches_nothing() {
    let o = Observed {
        other_namespace: Some("storageos/storageos".into()),
        ..Default::default()
    };
    let s = step(Pending, &[], &o);
    assert_eq!(s, Step::Problem(Problem::WrongNamespace("storageos/storageos".into())));
    assert_eq!(Problem::WrongNamespace(String::new()).reason(), "WrongNamespace");
}

#[test]
fn pulling_applies_the_puller_and_advances_when_every_node_has_the_image() {
    let mut o = Observed {
        cluster: Some(cluster()),
        ..Default::default()
    };
    assert_eq!(
        step(PullingImage, &[], &o),
        Step::Problem(Problem::NoNodeDaemonSet("kube-system/storageos-daemonset".into()))
    );
    o.nodes = Some(nodes("storageos/node:v2.9.0", true, &[]));
    assert_eq!(step(PullingImage, &[], &o), Step::Act(Act::ApplyPuller));
    let pod = |finished| PodView {
        scheduled: true,
        finished,
    };
    o.puller = PullerView {
        exists: true,
        desired: Some(2),
        pods: vec![pod(true), pod(false)],
    };
    assert_eq!(
        step(PullingImage, &[], &o),
        Step::Wait(format!("pulling {IMAGE}: 1 of 2 nodes have it"))
    );
    o.puller.pods[1] = pod(true);
    assert_eq!(step(PullingImage, &[], &o), Step::Advance(Pausing));
}

#[test]
fn pausing_removes_the_puller_then_annotates_the_cluster() {
    let mut o = Observed {
        cluster: Some(cluster()),
        puller: PullerView {
            exists: true,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(step(Pausing, &[], &o), Step::Act(Act::DeletePuller));
    o.puller.exists = false;
    assert_eq!(step(Pausing, &[], &o), Step::Act(Act::Pause));
    // Paused by another (stale) upgrade: this one takes it over.
    o.cluster.as_mut().unwrap().paused_by = Some("old".into());
    assert_eq!(step(Pausing, &[], &o), Step::Act(Act::Pause));
    o.cluster.as_mut().unwrap().paused_by = Some("up".into());
    assert_eq!(step(Pausing, &[], &o), Step::Advance(ScalingDown));
}

#[test]
fn scaling_down_records_before_scaling_and_waits_for_pods() {
    let (web, db) = (app("web", 3), app("db", 2));
    let mut o = Observed {
        candidates: vec![web.clone(), db.clone()],
        ..Default::default()
    };
    // Nothing recorded: record both first.
    assert_eq!(step(ScalingDown, &[], &o), Step::Record(vec![web.clone(), db.clone()]));
    // Only what is new is recorded.
    assert_eq!(
        step(ScalingDown, std::slice::from_ref(&web), &o),
        Step::Record(vec![db.clone()])
    );
    let recorded = [web.clone(), db.clone()];
    o.apps = vec![(web.clone(), live(3, false, 3)), (db.clone(), live(2, false, 2))];
    assert_eq!(step(ScalingDown, &recorded, &o), Step::Act(Act::ScaleDown(web.clone())));
    // After a restart web is at zero, no longer a candidate, and stays recorded.
    o.candidates = vec![db.clone()];
    o.apps[0].1 = live(0, true, 1);
    assert_eq!(step(ScalingDown, &recorded, &o), Step::Act(Act::ScaleDown(db.clone())));
    o.candidates.clear();
    o.apps[1].1 = live(0, true, 0);
    assert_eq!(
        step(ScalingDown, &recorded, &o),
        Step::Wait("waiting for the pods of Deployment apps/web to stop".into())
    );
    o.apps[0].1 = live(0, true, 0);
    assert_eq!(step(ScalingDown, &recorded, &o), Step::Advance(UpgradingNodes));
    // A deleted application does not hold the upgrade.
    o.apps[0].1 = None;
    assert_eq!(step(ScalingDown, &recorded, &o), Step::Advance(UpgradingNodes));
}

#[test]
fn upgrading_nodes_sets_images_restarts_old_pods_and_waits_for_ready() {
    let old = "storageos/node:v2.9.0";
    let mut o = Observed {
        cluster: Some(cluster()),
        nodes: Some(nodes(old, true, &[("a", old, true), ("b", old, true)])),
        ..Default::default()
    };
    assert_eq!(
        step(UpgradingNodes, &[], &o),
        Step::Act(Act::SetClusterImage(IMAGE.into()))
    );
    o.cluster.as_mut().unwrap().node_image = Some(IMAGE.into());
    assert_eq!(
        step(UpgradingNodes, &[], &o),
        Step::Act(Act::SetNodeImage(IMAGE.into()))
    );
    o.nodes = Some(nodes(IMAGE, false, &[("a", old, true), ("b", old, true)]));
    assert!(matches!(step(UpgradingNodes, &[], &o), Step::Wait(_)));
    o.nodes = Some(nodes(IMAGE, true, &[("a", old, true), ("b", old, true)]));
    assert_eq!(
        step(UpgradingNodes, &[], &o),
        Step::Act(Act::RestartNodePods(vec!["a".into(), "b".into()]))
    );
    o.nodes = Some(nodes(IMAGE, true, &[("c", IMAGE, true), ("d", IMAGE, false)]));
    assert_eq!(
        step(UpgradingNodes, &[], &o),
        Step::Wait(format!("health gate: 1 of 2 StorageOS nodes run {IMAGE} and are ready"))
    );
    o.nodes = Some(nodes(IMAGE, true, &[("c", IMAGE, true), ("d", IMAGE, true)]));
    o.storageos = healthy(&["c", "d"]);
    assert_eq!(step(UpgradingNodes, &[], &o), Step::Advance(ScalingUp));
    o.cluster.as_mut().unwrap().deleting = true;
    assert_eq!(
        step(UpgradingNodes, &[], &o),
        Step::Problem(Problem::ClusterDeleting("storageos/storageos".into()))
    );
    o.cluster = None;
    o.recorded_cluster = Some("storageos/storageos".into());
    let gone = step(UpgradingNodes, &[], &o);
    assert_eq!(gone, Step::Problem(Problem::ClusterGone("storageos/storageos".into())));
    assert!(matches!(gone, Step::Problem(p) if p.to_string().contains("delete this upgrade")));
}

#[test]
fn scaling_up_restores_annotated_apps_then_completes() {
    let (web, db) = (app("web", 3), app("db", 2));
    let recorded = [web.clone(), db.clone()];
    let mut o = Observed {
        apps: vec![(web.clone(), live(3, false, 0)), (db.clone(), live(0, true, 0))],
        ..Default::default()
    };
    // The replicas come from the application's annotation ("3"), not from the status (2).
    assert_eq!(step(ScalingUp, &recorded, &o), Step::Act(Act::ScaleUp(app("db", 3))));
    o.apps[1].1 = live(2, false, 0);
    assert_eq!(step(ScalingUp, &recorded, &o), Step::Advance(Completed));
    assert_eq!(step(Completed, &recorded, &o), Step::Idle);
}

fn upgrade(ns: &str, name: &str, created: i64, phase: Option<&str>, deleting: bool) -> StorageOSUpgrade {
    let ts = |s: i64| k8s_openapi::jiff::Timestamp::from_second(s).unwrap().to_string();
    let mut v = json!({"apiVersion": "storageos.com/v1", "kind": "StorageOSUpgrade",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": ts(created)},
        "spec": {"newImage": IMAGE}});
    if let Some(p) = phase {
        v["status"] = json!({"phase": p});
    }
    if deleting {
        v["metadata"]["deletionTimestamp"] = json!(ts(created + 100));
    }
    serde_json::from_value(v).unwrap()
}

fn first(us: &[StorageOSUpgrade]) -> Option<String> {
    first_in_line(us).map(|u| format!("{}/{}", u.namespace().unwrap(), u.name_any()))
}

#[test]
fn one_upgrade_at_a_time_the_started_or_oldest_one() {
    let a = upgrade("ns", "a", 10, None, false);
    let b = upgrade("ns", "b", 20, None, false);
    assert_eq!(first(&[b.clone(), a.clone()]), Some("ns/a".into()));
    // One under way goes first even if a waiting one sorts before it.
    let b_running = upgrade("ns", "b", 20, Some("ScalingDown"), false);
    assert_eq!(first(&[a.clone(), b_running]), Some("ns/b".into()));
    // Same second: namespace then name break the tie.
    let c = upgrade("aa", "z", 10, None, false);
    assert_eq!(first(&[a.clone(), c]), Some("aa/z".into()));
    // Completed ones and deleted ones that never started do not compete.
    let done = upgrade("ns", "old", 1, Some("Completed"), false);
    let gone = upgrade("ns", "gone", 2, None, true);
    assert_eq!(first(&[done, gone, b.clone()]), Some("ns/b".into()));
    // A deleted one that started holds the line until its finalizer is done.
    let leaving = upgrade("ns", "leaving", 30, Some("UpgradingNodes"), true);
    assert_eq!(first(&[a, leaving]), Some("ns/leaving".into()));
    assert_eq!(first(&[]), None);
}

#[test]
fn apps_recorded_in_status_but_not_using_storageos_are_never_scaled() {
    // A status writer adds kube-system/coredns to the record: it is no candidate (it uses
    // no StorageOS volume), so it is neither scaled down nor waited for.
    let coredns = ScaledApp {
        kind: "Deployment".into(),
        namespace: "kube-system".into(),
        name: "coredns".into(),
        replicas: 2,
    };
    let web = app("web", 3);
    let recorded = [coredns.clone(), web.clone()];
    let mut o = Observed {
        candidates: vec![web.clone()],
        apps: vec![(coredns.clone(), live(2, false, 2)), (web.clone(), live(4, false, 3))],
        ..Default::default()
    };
    // The replicas written on web are its live ones (4), not the record's (3).
    assert_eq!(
        step(ScalingDown, &recorded, &o),
        Step::Act(Act::ScaleDown(app("web", 4)))
    );
    o.candidates.clear();
    o.apps[1].1 = live(0, true, 0);
    assert_eq!(step(ScalingDown, &recorded, &o), Step::Advance(UpgradingNodes));
}

#[test]
fn a_recorded_cluster_in_another_namespace_stops_every_phase() {
    let o = Observed {
        other_namespace: Some("kube-system/storageos".into()),
        cluster: Some(cluster()),
        nodes: Some(nodes("x", true, &[])),
        ..Default::default()
    };
    for phase in [PullingImage, Pausing, ScalingDown, UpgradingNodes, ScalingUp] {
        assert_eq!(
            step(phase, &[], &o),
            Step::Problem(Problem::WrongNamespace("kube-system/storageos".into())),
            "{phase:?}"
        );
    }
}

#[test]
fn pending_holds_while_volumes_are_not_in_sync_or_cannot_be_read_even_when_forced() {
    use crate::storageos::models::{Replica, Volume};
    let mut syncing = Volume {
        name: "pv".into(),
        ..Default::default()
    };
    syncing.master.health = crate::storageos::models::Health::Online;
    syncing.replicas = vec![Replica {
        health: "syncing".into(),
        ..Default::default()
    }];
    let mut o = Observed {
        cluster: Some(cluster()),
        nodes: Some(nodes("storageos/node:v2.9.0", true, &[])),
        storageos: StorageOSRead::Read {
            nodes: Vec::new(),
            namespaces: Vec::new(),
            volumes: vec![syncing],
        },
        force: true,
        ..Default::default()
    };
    let held = step(Pending, &[], &o);
    assert_eq!(
        held,
        Step::Hold(Hold::VolumesNotReady("?/pv (a replica is syncing)".into()))
    );
    let Step::Hold(h) = held else { unreachable!() };
    assert_eq!(h.reason(), "VolumesNotReady");
    o.storageos = StorageOSRead::Failed("connection refused".into());
    assert_eq!(
        step(Refused, &[], &o),
        Step::Hold(Hold::VolumesUnknown("connection refused".into()))
    );
    o.storageos = healthy(&[]);
    o.drain_blocked = vec!["node-1".into()];
    let blocked = step(Pending, &[], &o);
    assert_eq!(blocked, Step::Hold(Hold::DrainBlocked(vec!["node-1".into()])));
    assert!(blocked_text(&blocked).contains("node-1"));
    o.drain_blocked.clear();
    assert_eq!(step(Pending, &[], &o), Step::Advance(PullingImage));
    o.timeout = Some("soon".into());
    assert!(matches!(
        step(Pending, &[], &o),
        Step::Problem(Problem::InvalidTimeout(_))
    ));
}

fn blocked_text(s: &Step) -> String {
    match s {
        Step::Hold(h) => h.to_string(),
        other => format!("{other:?}"),
    }
}

#[test]
fn the_health_gate_waits_then_rolls_back_once_the_timeout_has_passed() {
    let mut o = Observed {
        cluster: Some(ClusterView {
            node_image: Some(IMAGE.into()),
            ..cluster()
        }),
        nodes: Some(nodes(IMAGE, true, &[("a", IMAGE, true), ("b", IMAGE, true)])),
        storageos: healthy(&["a"]),
        timeout: Some("5m".into()),
        in_phase: Some(Duration::from_secs(299)),
        previous_image: Some("storageos/node:v2.9.0".into()),
        ..Default::default()
    };
    assert_eq!(
        step(UpgradingNodes, &[], &o),
        Step::Wait("health gate: StorageOS nodes not online: b (not registered)".into())
    );
    o.in_phase = Some(Duration::from_secs(300));
    assert_eq!(
        step(UpgradingNodes, &[], &o),
        Step::RollBack(format!(
            "the nodes were not healthy on {IMAGE} within 300s: StorageOS nodes not online: b (not registered)"
        ))
    );
    // Healthy in time or late, it goes on.
    o.storageos = healthy(&["a", "b"]);
    assert_eq!(step(UpgradingNodes, &[], &o), Step::Advance(ScalingUp));
    // Without a recorded phase start the gate waits and never rolls back.
    o.storageos = StorageOSRead::Failed("down".into());
    o.in_phase = None;
    assert!(matches!(step(UpgradingNodes, &[], &o), Step::Wait(_)));
}

#[test]
fn rolling_back_restarts_the_nodes_on_the_previous_image_then_restores_apps() {
    let old = "storageos/node:v2.9.0";
    let mut o = Observed {
        cluster: Some(ClusterView {
            node_image: Some(IMAGE.into()),
            ..cluster()
        }),
        nodes: Some(nodes(IMAGE, true, &[("a", IMAGE, true), ("b", IMAGE, false)])),
        rolling_back: true,
        ..Default::default()
    };
    assert!(matches!(step(RollingBack, &[], &o), Step::Wait(m) if m.contains("previousImage")));
    o.previous_image = Some(old.into());
    assert_eq!(step(RollingBack, &[], &o), Step::Act(Act::SetClusterImage(old.into())));
    o.cluster.as_mut().unwrap().node_image = Some(old.into());
    assert_eq!(step(RollingBack, &[], &o), Step::Act(Act::SetNodeImage(old.into())));
    o.nodes = Some(nodes(old, true, &[("a", IMAGE, true), ("b", IMAGE, false)]));
    assert_eq!(
        step(RollingBack, &[], &o),
        Step::Act(Act::RestartNodePods(vec!["a".into(), "b".into()]))
    );
    o.nodes = Some(nodes(old, true, &[("c", old, true), ("d", old, false)]));
    assert!(matches!(step(RollingBack, &[], &o), Step::Wait(_)));
    o.nodes = Some(nodes(old, true, &[("c", old, true), ("d", old, true)]));
    assert_eq!(step(RollingBack, &[], &o), Step::Advance(ScalingUp));
    // Applications come back, and the upgrade ends RolledBack, not Completed.
    let web = app("web", 3);
    o.apps = vec![(web.clone(), live(0, true, 0))];
    assert_eq!(
        step(ScalingUp, std::slice::from_ref(&web), &o),
        Step::Act(Act::ScaleUp(web.clone()))
    );
    o.apps = vec![(web.clone(), live(3, false, 0))];
    assert_eq!(step(ScalingUp, &[web], &o), Step::Advance(RolledBack));
    assert_eq!(step(RolledBack, &[], &o), Step::Idle);
}
