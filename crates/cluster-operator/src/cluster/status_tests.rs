//! `status::compute` over observations made here (previous statuses from YAML): every condition,
//! every reason it gives, and the events (one per change, none when nothing changed).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::runtime::events::EventType;
use serde_json::json;

use super::kv_backend::{self, Outcome};
use super::node_cache::NodePod;
use super::settings_push::ClientError;
use super::status::{
    ClusterObservation, KUBERNETES_SUPPORTED, NODES_ELIGIBLE, PAUSED, StatusEvent, compute, pod_ready_nodes,
};
use crate::crd::{ContainerImages, StorageOSClusterStatus};
use crate::reasons::{self, Reason};
use crate::storageos::models::NodeHealth;

fn pod(node: &str, ready: bool) -> NodePod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("p-{node}")},
        "spec": {"nodeName": node, "containers": []},
        "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
    }))
    .unwrap()
}

fn api(name: &str, health: &str) -> NodeHealth {
    serde_json::from_value(json!({"id": name, "name": name, "health": health, "version": "1"})).unwrap()
}

fn at(second: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap())
}

fn names(n: &[&str]) -> Vec<String> {
    n.iter().map(|s| s.to_string()).collect()
}

fn kv(reachable: bool, reason: Reason, message: &str) -> Outcome {
    Outcome {
        reachable,
        reason,
        message: message.into(),
        cert_not_after: None,
    }
}

/// Nodes a, b and c selected, each pod Ready and each StorageOS node online; nothing before.
fn observation() -> ClusterObservation {
    let all = ["a", "b", "c"];
    ClusterObservation {
        selected: names(&all),
        ineligible: BTreeMap::new(),
        pods_ready_on: pod_ready_nodes(&all.map(|n| pod(n, true))),
        api_nodes: Ok(all.iter().map(|n| api(n, "online")).collect()),
        previous: StorageOSClusterStatus::default(),
        generation: Some(1),
        images: ContainerImages::default(),
        replaced_images: None,
        kv: kv(true, reasons::ETCD_HEALTHY, "etcd answers healthy at http://etcd:2379"),
        kubernetes_version: None,
        now: at(1_000),
    }
}

fn status(yaml: &str) -> StorageOSClusterStatus {
    serde_yaml::from_str(yaml).unwrap()
}

/// The next pass: the status `obs` produced is the previous one, a minute later.
fn next(obs: &mut ClusterObservation) -> Vec<StatusEvent> {
    let (status, events) = compute(obs);
    obs.previous = status;
    obs.now = at(obs.now.0.as_second() + 60);
    events
}

fn cond<'a>(s: &'a StorageOSClusterStatus, type_: &str) -> &'a Condition {
    let found = s.conditions.iter().flatten().find(|c| c.type_ == type_);
    found.unwrap_or_else(|| panic!("no {type_} in {:?}", s.conditions))
}

/// Status, reason and message of condition `type_`.
fn said<'a>(s: &'a StorageOSClusterStatus, type_: &str) -> (&'a str, &'a str, &'a str) {
    let c = cond(s, type_);
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

fn phase_and_ready(s: &StorageOSClusterStatus) -> (&str, &str) {
    (
        s.phase.as_deref().unwrap_or_default(),
        s.ready.as_deref().unwrap_or_default(),
    )
}

fn has(s: &StorageOSClusterStatus, type_: &str) -> bool {
    s.conditions.iter().flatten().any(|c| c.type_ == type_)
}

fn warning(reason: Reason, message: &str) -> StatusEvent {
    StatusEvent {
        type_: EventType::Warning,
        reason,
        message: message.into(),
    }
}

fn normal(reason: Reason, message: &str) -> StatusEvent {
    StatusEvent {
        type_: EventType::Normal,
        reason,
        message: message.into(),
    }
}

#[test]
fn a_healthy_cluster_is_running_every_condition_says_so_and_one_event_tells() {
    let (s, events) = compute(&observation());
    assert_eq!(phase_and_ready(&s), ("Running", "3/3"));
    assert_eq!(s.nodes, Some(names(&["a", "b", "c"])));
    assert_eq!(s.observed_generation, Some(1));
    assert_eq!(
        said(&s, "Ready"),
        ("True", "ClusterReady", "3/3 StorageOS nodes are functional")
    );
    assert_eq!(said(&s, "Progressing"), ("False", "Stable", "every object is applied"));
    assert_eq!(said(&s, "Degraded"), ("False", "AsExpected", ""));
    assert_eq!(
        said(&s, NODES_ELIGIBLE),
        ("True", "AllNodesEligible", "StorageOS can run on every selected node")
    );
    assert_eq!(
        said(&s, kv_backend::CONDITION),
        ("True", "EtcdHealthy", "etcd answers healthy at http://etcd:2379")
    );
    for absent in [PAUSED, KUBERNETES_SUPPORTED, reasons::GO_DEFAULT_IMAGES_REPLACED.name()] {
        assert!(!has(&s, absent), "{absent}");
    }
    assert_eq!(
        events,
        [normal(
            reasons::CHANGED_STATUS,
            "3/3 StorageOS nodes are functional. Cluster healthy"
        )]
    );
}

/// Every state that calls for an event at once; the next pass over the same world repeats
/// none of them and changes nothing.
#[test]
fn a_pass_over_an_unchanged_world_says_nothing_again() {
    let mut obs = observation();
    obs.previous = status(
        "{phase: Running, ready: 3/3, conditions: [{type: Paused, status: 'True', reason: SpecPause, message: paused, lastTransitionTime: '1970-01-01T00:00:10Z'}]}",
    );
    obs.pods_ready_on.remove("c");
    obs.ineligible = BTreeMap::from([("d".to_string(), "windows/amd64".to_string())]);
    obs.replaced_images = Some("spec.images.nodeContainer held a Go default".into());
    obs.kv = kv(false, reasons::ETCD_UNREACHABLE, "connection refused");
    obs.kubernetes_version = Some(semver::Version::new(1, 99, 0));
    assert_eq!(
        next(&mut obs).len(),
        5,
        "images, ineligible, kv, Kubernetes, ChangedStatus"
    );
    let before = obs.previous.clone();
    assert_eq!(next(&mut obs), []);
    assert_eq!(obs.previous, before, "same conditions, same transition times");
}

#[test]
fn no_node_selected_is_not_running() {
    let mut obs = observation();
    obs.selected.clear();
    let (s, events) = compute(&obs);
    assert_eq!(phase_and_ready(&s), ("Creating", "0/0"));
    let message = "no node matches spec.nodeSelectorTerms with tolerated taints; check the selector and tolerations";
    assert_eq!(said(&s, "Ready"), ("False", "NoNodesSelected", message));
    assert_eq!(said(&s, "Progressing"), ("True", "Creating", message));
    assert_eq!(
        events,
        [normal(reasons::CHANGED_STATUS, "0/0 StorageOS nodes are functional")]
    );
}

#[test]
fn a_ready_pod_whose_storageos_node_is_offline_is_not_ready() {
    let mut obs = observation();
    obs.api_nodes = Ok(vec![api("a", "online"), api("b", "offline")]);
    let (s, _) = compute(&obs);
    assert_eq!(phase_and_ready(&s), ("Creating", "1/3"));
    let members = s.members.clone().unwrap_or_default();
    assert_eq!(
        (members.ready, members.unready),
        (Some(names(&["a"])), Some(names(&["b", "c"])))
    );
    let message = "1/3 StorageOS nodes are functional; not ready: b, c";
    assert_eq!(said(&s, "Ready"), ("False", "NodesNotReady", message));
    assert_eq!(said(&s, "Progressing"), ("True", "Creating", message));
    assert_eq!(said(&s, "Degraded"), ("False", "AsExpected", ""));
}

#[test]
fn past_five_nodes_not_ready_are_counted_not_named() {
    let mut obs = observation();
    obs.selected = (1..=7).map(|n| format!("n{n}")).collect();
    let (s, _) = compute(&obs);
    let message = "0/7 StorageOS nodes are functional; not ready: n1, n2, n3, n4, n5 and 2 more";
    assert_eq!(said(&s, "Ready"), ("False", "NodesNotReady", message));
}

#[test]
fn an_unreadable_storageos_api_is_named() {
    let mut obs = observation();
    obs.api_nodes = Err(ClientError::Client(crate::storageos::Error::InvalidEndpoint {
        endpoint: "sos".into(),
        reason: "connection refused".into(),
    }));
    let (s, _) = compute(&obs);
    assert_eq!(s.ready.as_deref(), Some("0/3"));
    let (status, reason, message) = said(&s, "Ready");
    assert_eq!((status, reason), ("False", "StorageOSAPIUnavailable"));
    assert!(
        message.starts_with("0/3 nodes ready; cannot read node health from the StorageOS API: ")
            && message.contains("connection refused"),
        "{message}"
    );
}

#[test]
fn losing_a_node_after_running_is_degraded_and_a_warning() {
    let mut obs = observation();
    obs.previous = status("{phase: Running, ready: 3/3}");
    obs.pods_ready_on.remove("b");
    let (s, events) = compute(&obs);
    assert_eq!(phase_and_ready(&s), ("Degraded", "2/3"));
    let message = "2/3 StorageOS nodes are functional; not ready: b";
    assert_eq!(said(&s, "Degraded"), ("True", "NodesLost", message));
    assert_eq!(said(&s, "Progressing"), ("False", "Stable", "every object is applied"));
    assert_eq!(
        events,
        [warning(reasons::CHANGED_STATUS, "2/3 StorageOS nodes are functional")]
    );
}

#[test]
fn changed_status_is_a_warning_only_when_the_functional_count_falls() {
    let cases = [
        // (before, ready nodes, selected) → event
        (
            Some("0/3"),
            1,
            3,
            Some(normal(reasons::CHANGED_STATUS, "1/3 StorageOS nodes are functional")),
        ),
        (
            Some("2/3"),
            3,
            3,
            Some(normal(
                reasons::CHANGED_STATUS,
                "3/3 StorageOS nodes are functional. Cluster healthy",
            )),
        ),
        (
            Some("3/3"),
            3,
            4,
            Some(normal(reasons::CHANGED_STATUS, "3/4 StorageOS nodes are functional")),
        ),
        (
            Some("3/3"),
            1,
            3,
            Some(warning(reasons::CHANGED_STATUS, "1/3 StorageOS nodes are functional")),
        ),
        (Some("3/3"), 3, 3, None),
    ];
    for (before, ready, selected, want) in cases {
        let mut obs = observation();
        obs.previous.ready = before.map(String::from);
        obs.selected = ["a", "b", "c", "d"][..selected].iter().map(|n| n.to_string()).collect();
        obs.pods_ready_on = ["a", "b", "c"][..ready].iter().map(|n| n.to_string()).collect();
        let (_, events) = compute(&obs);
        let changed: Vec<StatusEvent> = events
            .into_iter()
            .filter(|e| e.reason == reasons::CHANGED_STATUS)
            .collect();
        assert_eq!(changed, Vec::from_iter(want), "{before:?} -> {ready}/{selected}");
    }
}

#[test]
fn a_paused_cluster_says_it_resumed_without_an_event() {
    let mut obs = observation();
    obs.previous = status(
        "{ready: 3/3, conditions: [{type: Paused, status: 'True', reason: SpecPause, message: spec.pause is true, lastTransitionTime: '1970-01-01T00:00:10Z'}]}",
    );
    let (s, events) = compute(&obs);
    assert_eq!(
        said(&s, PAUSED),
        ("False", "Resumed", "the cluster is reconciled again")
    );
    assert_eq!(cond(&s, PAUSED).last_transition_time, at(1_000));
    assert_eq!(events, []);
}

#[test]
fn replaced_go_default_images_are_told_once_and_cleared() {
    let mut obs = observation();
    obs.previous.ready = Some("3/3".into());
    let message = "spec.images.nodeContainer held a Go default";
    obs.replaced_images = Some(message.into());
    assert_eq!(next(&mut obs), [normal(reasons::GO_DEFAULT_IMAGES_REPLACED, message)]);
    let type_ = reasons::GO_DEFAULT_IMAGES_REPLACED.name();
    assert_eq!(said(&obs.previous, type_), ("True", "GoDefaults", message));
    assert_eq!(next(&mut obs), []);
    obs.replaced_images = None;
    assert_eq!(next(&mut obs), []);
    assert!(!has(&obs.previous, type_));
}

#[test]
fn ineligible_nodes_are_named_not_counted_and_warned_once_per_change() {
    let mut obs = observation();
    obs.previous.ready = Some("3/3".into());
    obs.ineligible = BTreeMap::from([("d".to_string(), "windows/amd64".to_string())]);
    let message = "StorageOS cannot run on d (windows/amd64): they are not counted; keep StorageOS off them with spec.nodeSelectorTerms (kubernetes.io/arch In [amd64], kubernetes.io/os In [linux])";
    assert_eq!(next(&mut obs), [warning(reasons::NODES_INELIGIBLE, message)]);
    assert_eq!(
        said(&obs.previous, NODES_ELIGIBLE),
        ("False", "NodesIneligible", message)
    );
    assert_eq!(obs.previous.ready.as_deref(), Some("3/3"), "not counted");
    assert_eq!(next(&mut obs), []);
    obs.ineligible.insert("e".into(), "linux/s390x".into());
    let events = next(&mut obs);
    assert_eq!(events.len(), 1);
    assert!(
        events[0]
            .message
            .starts_with("StorageOS cannot run on d (windows/amd64), e (linux/s390x):")
    );
    obs.ineligible.clear();
    assert_eq!(next(&mut obs), []);
    assert_eq!(said(&obs.previous, NODES_ELIGIBLE).1, "AllNodesEligible");
}

#[test]
fn past_ten_ineligible_nodes_are_counted_not_named() {
    let mut obs = observation();
    obs.ineligible = (1..=12)
        .map(|n| (format!("w{n:02}"), "windows/amd64".to_string()))
        .collect();
    let (s, _) = compute(&obs);
    let (_, _, message) = said(&s, NODES_ELIGIBLE);
    assert!(
        message.contains("w10 (windows/amd64) and 2 more: they are not counted"),
        "{message}"
    );
    assert!(!message.contains("w11"), "{message}");
}

#[test]
fn each_kv_backend_failure_is_a_warning_once_per_reason() {
    let failures = [
        reasons::KV_BACKEND_NOT_SET,
        reasons::ETCD_UNREACHABLE,
        reasons::ETCD_TLS_INVALID,
        reasons::ETCD_CLIENT_CERT_EXPIRED,
    ];
    let mut obs = observation();
    obs.previous.ready = Some("3/3".into());
    for reason in failures {
        obs.kv = kv(false, reason, "what failed, and what to fix");
        assert_eq!(
            next(&mut obs),
            [warning(reason, "what failed, and what to fix")],
            "{reason}"
        );
        assert_eq!(
            said(&obs.previous, kv_backend::CONDITION),
            ("False", reason.name(), "what failed, and what to fix")
        );
        obs.kv.message = "the same reason, said differently".into();
        assert_eq!(next(&mut obs), [], "{reason}");
    }
    obs.kv = kv(true, reasons::ETCD_HEALTHY, "etcd answers healthy");
    assert_eq!(next(&mut obs), [], "reachable again is no event");
    assert_eq!(said(&obs.previous, kv_backend::CONDITION).0, "True");
}

#[test]
fn kubernetes_in_the_tested_range_is_said_without_an_event() {
    let mut obs = observation();
    obs.previous.ready = Some("3/3".into());
    obs.kubernetes_version = Some(semver::Version::new(1, 30, 2));
    assert_eq!(next(&mut obs), []);
    let message = "Kubernetes 1.30.2 is within the tested range";
    assert_eq!(
        said(&obs.previous, KUBERNETES_SUPPORTED),
        ("True", "KubernetesTested", message)
    );
}

#[test]
fn a_kubernetes_newer_than_tested_is_a_warning_once_per_version() {
    let (major, minor) = crate::checks::TESTED_KUBERNETES;
    let mut obs = observation();
    obs.previous.ready = Some("3/3".into());
    obs.kubernetes_version = Some(semver::Version::new(major, minor + 1, 0));
    let message = format!(
        "Kubernetes {major}.{}.0 is newer than the newest tested, {major}.{minor}: expect it to work, and report anything that does not",
        minor + 1
    );
    assert_eq!(
        next(&mut obs),
        [warning(reasons::KUBERNETES_NEWER_THAN_TESTED, &message)]
    );
    assert_eq!(
        said(&obs.previous, KUBERNETES_SUPPORTED),
        ("True", "KubernetesNewerThanTested", message.as_str())
    );
    assert_eq!(next(&mut obs), []);
    obs.kubernetes_version = Some(semver::Version::new(major, minor + 1, 1));
    assert_eq!(next(&mut obs).len(), 1, "a new version is told");
}
