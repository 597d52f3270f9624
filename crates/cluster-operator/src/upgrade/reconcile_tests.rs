//! Unit tests of the upgrade reconciler's pure steps (report, advance, entering events).

#![allow(clippy::unwrap_used)]

use super::*;
use crate::upgrade::nodes::NodeView;
use crate::upgrade::path::PathError;
use crate::upgrade::plan::ClusterView;
use crate::upgrade::plan::{Hold, Problem};

fn shown(step: &Step, previous: &StorageOSUpgradeStatus) -> Report {
    report(step, previous, Some(1), &now()).unwrap()
}

#[test]
fn a_step_that_takes_nothing_shows_itself_and_warns_once() {
    let fresh = StorageOSUpgradeStatus::default();
    let blocked = shown(&Step::Blocked("ns/first".into()), &fresh);
    assert_eq!(blocked.then, Ok(Action::requeue(BLOCKED_RECHECK)));
    let (type_, reason, note) = blocked.event.clone().unwrap();
    assert_eq!((type_, reason), (EventType::Warning, reasons::FAILED_CREATION));
    assert!(note.contains("ns/first"), "{note}");
    // Already shown: the same status again, and no second event.
    let again = shown(&Step::Blocked("ns/first".into()), &blocked.status);
    assert_eq!((again.event, again.status), (None, blocked.status));

    let hold = shown(&Step::Hold(Hold::VolumesNotReady("v1".into())), &fresh);
    assert_eq!(hold.then, Ok(Action::requeue(HOLD_RECHECK)));
    assert!(hold.event.is_some() && hold.log.is_some());
    let again = shown(&Step::Hold(Hold::VolumesNotReady("v1".into())), &hold.status);
    assert_eq!((again.event, again.log), (None, None));

    let refusal = PathError::Downgrade {
        from: "storageos/node:v2.5.0".into(),
        to: "storageos/node:v2.4.0".into(),
    };
    let refused = shown(&Step::Refuse(refusal.clone()), &fresh);
    assert_eq!(refused.then, Ok(Action::await_change()));
    assert_eq!(refused.event.map(|e| e.1), Some(refusal.reason()));
}

#[test]
fn a_problem_is_shown_and_is_a_reconcile_error() {
    let fresh = StorageOSUpgradeStatus::default();
    let problem = shown(&Step::Problem(Problem::NoCluster), &fresh);
    assert_eq!(problem.then, Err(Problem::NoCluster));
    assert_eq!(problem.event.map(|e| e.1), Some(Problem::NoCluster.reason()));
    assert_ne!(problem.status, fresh);
}

#[test]
fn waiting_and_idle_send_no_event() {
    let fresh = StorageOSUpgradeStatus::default();
    let wait = shown(&Step::Wait("pods stopping".into()), &fresh);
    assert_eq!((wait.event, wait.then), (None, Ok(Action::requeue(POLL))));
    assert_eq!(wait.log.map(|l| l.1), Some("pods stopping".to_string()));
    let idle = shown(&Step::Idle, &fresh);
    assert_eq!((idle.status, idle.then), (fresh, Ok(Action::await_change())));
}

#[test]
fn a_step_to_take_is_not_shown_but_described() {
    let fresh = StorageOSUpgradeStatus::default();
    for (step, said) in [
        (Step::Advance(UpgradePhase::Pausing), "entering phase Pausing"),
        (
            Step::RollBack("nodes not ready".into()),
            "rolling back: nodes not ready",
        ),
        (Step::Act(Act::Pause), &Act::Pause.to_string()),
    ] {
        assert_eq!(report(&step, &fresh, Some(1), &now()), None, "{step:?}");
        assert_eq!(describe(&step), said);
    }
}

#[test]
fn starting_records_the_cluster_and_the_image_a_rollback_restores() {
    let observed = Observed {
        cluster: Some(ClusterView {
            namespace: "ns".into(),
            name: "c".into(),
            ..Default::default()
        }),
        nodes: Some(NodeView {
            template_image: Some("storageos/node:v2.5.0".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let fresh = StorageOSUpgradeStatus::default();
    let (to, image, now) = (UpgradePhase::PullingImage, "storageos/node:v2.6.0", now());
    let next = advanced(&fresh, UpgradePhase::Pending, to, &observed, image, Some(1), &now);
    assert_eq!(next.cluster.as_ref().map(|c| c.name.as_str()), Some("c"));
    assert_eq!(next.previous_image.as_deref(), Some("storageos/node:v2.5.0"));
    // Later phases keep what was recorded at the start.
    let later = advanced(
        &next,
        UpgradePhase::PullingImage,
        UpgradePhase::Pausing,
        &Observed::default(),
        image,
        Some(1),
        &now,
    );
    assert_eq!(later.previous_image.as_deref(), Some("storageos/node:v2.5.0"));
    let events = entering_events(&fresh, &next, to, image);
    assert_eq!(
        events.iter().map(|e| e.1).collect::<Vec<_>>(),
        vec![reasons::PULL_IMAGE]
    );
}

#[test]
fn entering_rolled_back_warns_with_the_cause_and_the_image_restored() {
    let previous = StorageOSUpgradeStatus {
        previous_image: Some("storageos/node:v2.5.0".into()),
        ..Default::default()
    };
    let next = StorageOSUpgradeStatus {
        rollback: Some(crate::crd::UpgradeRollback {
            cause: "2 nodes not ready".into(),
            image: "storageos/node:v2.5.0".into(),
        }),
        ..previous.clone()
    };
    let events = entering_events(&previous, &next, UpgradePhase::RolledBack, "storageos/node:v2.6.0");
    let (type_, reason, note) = events.last().cloned().unwrap();
    assert_eq!((type_, reason), (EventType::Warning, reasons::ROLLED_BACK));
    assert_eq!(
        note,
        "rolled back to storageos/node:v2.5.0: 2 nodes not ready; delete this upgrade to leave maintenance"
    );
}
