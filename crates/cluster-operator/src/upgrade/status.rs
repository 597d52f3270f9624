//! Status of an upgrade (pure): the phase, the legacy `completed`, the applications scaled
//! down, and the conditions Ready (only once Completed), Progressing (while under way) and
//! Degraded (a problem the user must fix, with what to do).
//!
//! Every function returns the next status from the previous one; the caller writes it only when
//! it differs, so an upgrade that is not moving costs no write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::{
    JournalEntry, ScaledApp, StorageOSUpgradeStatus, UpgradeCluster, UpgradePhase, UpgradePreview, UpgradeRollback,
};
use crate::reasons::{self, Reason};
use crate::runtime::kube::conditions;

/// The condition reason of `phase`: the phase's name.
pub fn phase_reason(phase: UpgradePhase) -> Reason {
    match phase {
        UpgradePhase::Pending => reasons::PENDING,
        UpgradePhase::PullingImage => reasons::PULLING_IMAGE,
        UpgradePhase::Pausing => reasons::PAUSING,
        UpgradePhase::ScalingDown => reasons::SCALING_DOWN,
        UpgradePhase::UpgradingNodes => reasons::UPGRADING_NODES,
        UpgradePhase::RollingBack => reasons::ROLLING_BACK,
        UpgradePhase::ScalingUp => reasons::SCALING_UP,
        UpgradePhase::RolledBack => reasons::ROLLED_BACK,
        UpgradePhase::Completed => reasons::COMPLETED,
        UpgradePhase::Failed => reasons::FAILED,
        UpgradePhase::Refused => reasons::REFUSED,
    }
}

/// The message while at `phase`, before any progress is known.
fn entered_message(phase: UpgradePhase, image: &str) -> String {
    match phase {
        UpgradePhase::Pending => "waiting to start".into(),
        UpgradePhase::PullingImage => format!("pulling {image} on every StorageOS node"),
        UpgradePhase::Pausing => "pausing the cluster reconciler and entering maintenance".into(),
        UpgradePhase::ScalingDown => "scaling down the applications that use StorageOS volumes".into(),
        UpgradePhase::UpgradingNodes => format!("restarting every StorageOS node on {image}"),
        UpgradePhase::RollingBack => format!("restarting every StorageOS node on the previous image {image}"),
        UpgradePhase::ScalingUp => "restoring the applications' replicas".into(),
        UpgradePhase::RolledBack => format!(
            "rolled back to {image}: the nodes run it again and the applications are restored; see status.rollback, \
             then delete this upgrade to un-pause the cluster and leave maintenance"
        ),
        UpgradePhase::Completed => {
            format!("StorageOS upgraded to {image}; delete this upgrade to un-pause the cluster and leave maintenance")
        }
        UpgradePhase::Failed => "the upgrade failed; see the Degraded condition".into(),
        UpgradePhase::Refused => "not started: the upgrade path is not supported; see the Degraded condition".into(),
    }
}

/// Sets Ready, Progressing and Degraded for `phase` with `message`; `problem` is the reason and
/// message of Degraded=True, None for Degraded=False.
fn set_conditions(
    status: &mut StorageOSUpgradeStatus,
    phase: UpgradePhase,
    message: &str,
    problem: Option<(Reason, &str)>,
    generation: Option<i64>,
    now: &Time,
) {
    let reason = phase_reason(phase);
    let under_way = !matches!(
        phase,
        UpgradePhase::Pending
            | UpgradePhase::Completed
            | UpgradePhase::RolledBack
            | UpgradePhase::Failed
            | UpgradePhase::Refused
    );
    let mut conds = status.conditions.take().unwrap_or_default();
    let done = phase == UpgradePhase::Completed;
    conditions::set(&mut conds, "Ready", done, reason, message, generation, now);
    conditions::set(&mut conds, "Progressing", under_way, reason, message, generation, now);
    match problem {
        Some((r, m)) => conditions::set(&mut conds, "Degraded", true, r, m, generation, now),
        None => conditions::set(&mut conds, "Degraded", false, reasons::AS_EXPECTED, "", generation, now),
    }
    status.conditions = Some(conds);
}

fn base(previous: &StorageOSUpgradeStatus, generation: Option<i64>) -> (StorageOSUpgradeStatus, UpgradePhase) {
    let mut s = previous.clone();
    let phase = s.phase.unwrap_or_default();
    s.phase = Some(phase);
    s.completed = Some(phase == UpgradePhase::Completed);
    s.observed_generation = generation;
    // A preview describes only a dry run ([`dry_run`] sets it again).
    s.preview = None;
    (s, phase)
}

/// `previous` moved to `phase`, with the fields every status carries.
fn moved_to(previous: &StorageOSUpgradeStatus, phase: UpgradePhase, generation: Option<i64>) -> StorageOSUpgradeStatus {
    let mut s = previous.clone();
    s.phase = Some(phase);
    base(&s, generation).0
}

/// The status on entering `to`; `cluster` is recorded when the upgrade starts. The entry is
/// journaled, and the phase's start time kept (the health gate's timeout counts from it).
pub fn advanced(
    previous: &StorageOSUpgradeStatus,
    to: UpgradePhase,
    cluster: Option<UpgradeCluster>,
    image: &str,
    generation: Option<i64>,
    now: &Time,
) -> StorageOSUpgradeStatus {
    let mut s = moved_to(previous, to, generation);
    if cluster.is_some() {
        s.cluster = cluster;
    }
    // While rolling back, the image the nodes go to is the previous one.
    let rollback = s.rollback.clone();
    let shown = match (&rollback, to) {
        (Some(r), UpgradePhase::RollingBack | UpgradePhase::RolledBack) => r.image.as_str(),
        _ => image,
    };
    let message = entered_message(to, shown);
    let problem = match (&rollback, to) {
        (Some(r), UpgradePhase::RolledBack) => Some(r.cause.as_str()),
        _ => None,
    };
    set_conditions(
        &mut s,
        to,
        &message,
        problem.map(|cause| (reasons::ROLLED_BACK, cause)),
        generation,
        now,
    );
    journal(&mut s, to, message, now);
    s.phase_since = Some(now.clone());
    s
}

/// The status of an upgrade whose health gate failed (`cause`): phase RollingBack, back to
/// `image` (the previous one), recorded before any rollback action.
pub fn rolling_back(
    previous: &StorageOSUpgradeStatus,
    cause: &str,
    image: &str,
    generation: Option<i64>,
    now: &Time,
) -> StorageOSUpgradeStatus {
    let mut s = previous.clone();
    s.rollback = Some(UpgradeRollback {
        cause: cause.into(),
        image: image.into(),
    });
    let mut s = advanced(&s, UpgradePhase::RollingBack, None, image, generation, now);
    journal(&mut s, UpgradePhase::RollingBack, cause.into(), now);
    s
}

fn journal(s: &mut StorageOSUpgradeStatus, phase: UpgradePhase, message: String, now: &Time) {
    s.journal.get_or_insert_with(Vec::new).push(JournalEntry {
        time: now.clone(),
        phase,
        message,
    });
}

/// The status of an upgrade that may not start yet (`reason`, `message`): phase Pending (a
/// forced, once refused upgrade too), Ready and Progressing False with the reason; the bool says
/// whether that is news (the event is sent once).
pub fn held(
    previous: &StorageOSUpgradeStatus,
    reason: Reason,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> (StorageOSUpgradeStatus, bool) {
    let mut s = moved_to(previous, UpgradePhase::Pending, generation);
    let news = !conditions_say(previous, "Ready", message);
    let mut conds = s.conditions.take().unwrap_or_default();
    conditions::set(&mut conds, "Ready", false, reason, message, generation, now);
    conditions::set(&mut conds, "Progressing", false, reason, message, generation, now);
    conditions::set(&mut conds, "Degraded", false, reasons::AS_EXPECTED, "", generation, now);
    s.conditions = Some(conds);
    (s, news)
}

/// The status of a dry run (spec.dryRun): phase Pending with reason DryRun and `preview`; the
/// bool says whether that is news (the event is sent when the preview says something new).
pub fn dry_run(
    previous: &StorageOSUpgradeStatus,
    preview: UpgradePreview,
    generation: Option<i64>,
    now: &Time,
) -> (StorageOSUpgradeStatus, bool) {
    let message = super::preview::summary(&preview);
    let (mut s, news) = held(previous, reasons::DRY_RUN, &message, generation, now);
    s.preview = Some(preview);
    (s, news)
}

/// The status while waiting at the current phase for what `message` says.
pub fn waiting(
    previous: &StorageOSUpgradeStatus,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> StorageOSUpgradeStatus {
    let (mut s, phase) = base(previous, generation);
    set_conditions(&mut s, phase, message, None, generation, now);
    s
}

/// The status of an upgrade waiting for `first` (`namespace/name`) and the message of its
/// Warning event; the bool says whether that is news (the event is sent once, not per retry).
pub fn blocked(
    previous: &StorageOSUpgradeStatus,
    first: &str,
    generation: Option<i64>,
    now: &Time,
) -> (StorageOSUpgradeStatus, String, bool) {
    let message =
        format!("can't create more than one storageos upgrade: waiting for StorageOSUpgrade {first} to finish");
    let (mut s, phase) = base(previous, generation);
    let news = !conditions_say(previous, "Ready", &message);
    set_conditions(&mut s, phase, &message, None, generation, now);
    (s, message, news)
}

/// The status with a problem the user must fix; the bool says whether it is news.
pub fn degraded(
    previous: &StorageOSUpgradeStatus,
    reason: Reason,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> (StorageOSUpgradeStatus, bool) {
    let (mut s, phase) = base(previous, generation);
    let news = !conditions_say(previous, "Degraded", message);
    let progress = conditions::find(previous.conditions.as_deref(), "Progressing")
        .map_or_else(|| message.to_string(), |c| c.message.clone());
    set_conditions(&mut s, phase, &progress, Some((reason, message)), generation, now);
    (s, news)
}

/// The status of an upgrade refused before it started (phase Refused, Degraded with `reason`);
/// the bool says whether that is news.
pub fn refused(
    previous: &StorageOSUpgradeStatus,
    reason: Reason,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> (StorageOSUpgradeStatus, bool) {
    let mut s = moved_to(previous, UpgradePhase::Refused, generation);
    let news = !conditions_say(previous, "Degraded", message);
    let progress = entered_message(UpgradePhase::Refused, "");
    set_conditions(
        &mut s,
        UpgradePhase::Refused,
        &progress,
        Some((reason, message)),
        generation,
        now,
    );
    (s, news)
}

fn conditions_say(status: &StorageOSUpgradeStatus, type_: &str, message: &str) -> bool {
    conditions::find(status.conditions.as_deref(), type_).is_some_and(|c| c.message == message)
}

/// The status with `apps` added to the applications scaled down (each recorded once, with the
/// replicas it had when first recorded).
pub fn recorded(previous: &StorageOSUpgradeStatus, apps: &[ScaledApp]) -> StorageOSUpgradeStatus {
    let mut s = previous.clone();
    let mut all = s.scaled_apps.take().unwrap_or_default();
    for app in apps {
        if !all
            .iter()
            .any(|a| a.kind == app.kind && a.namespace == app.namespace && a.name == app.name)
        {
            all.push(app.clone());
        }
    }
    s.scaled_apps = Some(all);
    s
}

/// Normal events sent on entering `to`, with the Go operator's reasons and messages.
pub fn events_on_entering(to: UpgradePhase, cluster: &str, image: &str) -> Vec<(Reason, String)> {
    match to {
        UpgradePhase::PullingImage => vec![(reasons::PULL_IMAGE, "Pulling the new container image".into())],
        UpgradePhase::ScalingDown => vec![
            (
                reasons::PAUSE_CLUSTER_CTRL,
                "Pausing the cluster controller and enabling cluster maintenance mode".into(),
            ),
            (
                reasons::UPGRADE_INIT,
                format!("StorageOS upgrade of cluster {cluster} started"),
            ),
        ],
        UpgradePhase::Completed => vec![(
            reasons::UPGRADE_COMPLETE,
            format!("StorageOS upgraded to {image}. Delete upgrade object to disable cluster maintenance mode"),
        )],
        _ => Vec::new(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn t(s: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap())
    }

    fn cond(s: &StorageOSUpgradeStatus, type_: &str) -> (String, String, String) {
        let c = s
            .conditions
            .as_deref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    #[test]
    fn phases_set_progressing_while_under_way_and_ready_once_completed() {
        let image = "storageos/node:v2.10.0";
        let cluster = UpgradeCluster {
            namespace: "storageos".into(),
            name: "c".into(),
        };
        let s = advanced(
            &Default::default(),
            UpgradePhase::PullingImage,
            Some(cluster.clone()),
            image,
            Some(1),
            &t(1),
        );
        assert_eq!(s.phase, Some(UpgradePhase::PullingImage));
        assert_eq!(s.completed, Some(false));
        assert_eq!(s.cluster, Some(cluster.clone()));
        assert_eq!(cond(&s, "Ready").0, "False");
        assert_eq!(cond(&s, "Progressing").0, "True");
        assert_eq!(cond(&s, "Progressing").1, "PullingImage");
        assert_eq!(cond(&s, "Degraded").0, "False");

        // The cluster stays recorded through later phases.
        let s = advanced(&s, UpgradePhase::ScalingDown, None, image, Some(1), &t(2));
        assert_eq!(s.cluster, Some(cluster));
        let done = advanced(&s, UpgradePhase::Completed, None, image, Some(1), &t(3));
        assert_eq!(done.completed, Some(true));
        assert_eq!(cond(&done, "Ready").0, "True");
        assert!(cond(&done, "Ready").2.contains("delete this upgrade"));
        assert_eq!(cond(&done, "Progressing").0, "False");
    }

    #[test]
    fn waiting_with_the_same_message_changes_nothing() {
        let s = advanced(
            &Default::default(),
            UpgradePhase::UpgradingNodes,
            None,
            "i",
            Some(1),
            &t(1),
        );
        let a = waiting(&s, "1 of 3 nodes ready", Some(1), &t(2));
        let b = waiting(&a, "1 of 3 nodes ready", Some(1), &t(3));
        assert_eq!(a, b, "no write when nothing moved");
        assert_eq!(cond(&a, "Progressing").2, "1 of 3 nodes ready");
    }

    #[test]
    fn blocked_and_degraded_are_news_once() {
        let (s, message, news) = blocked(&Default::default(), "ns/first", Some(1), &t(1));
        assert!(news);
        assert_eq!(s.phase, Some(UpgradePhase::Pending));
        assert!(message.starts_with("can't create more than one storageos upgrade"));
        assert!(message.contains("ns/first"));
        let (again, _, news) = blocked(&s, "ns/first", Some(1), &t(2));
        assert!(!news);
        assert_eq!(again, s);

        let (d, news) = degraded(&s, reasons::NO_CLUSTER, "create one", Some(1), &t(3));
        assert!(news);
        assert_eq!(
            cond(&d, "Degraded"),
            ("True".into(), "NoCluster".into(), "create one".into())
        );
        let (d2, news) = degraded(&d, reasons::NO_CLUSTER, "create one", Some(1), &t(4));
        assert!(!news);
        assert_eq!(d, d2);
        // Progress clears it.
        let w = waiting(&d2, "moving", Some(1), &t(5));
        assert_eq!(cond(&w, "Degraded").0, "False");
    }

    #[test]
    fn apps_are_recorded_once_with_their_first_replicas() {
        let app = |name: &str, replicas| ScaledApp {
            kind: "Deployment".into(),
            namespace: "a".into(),
            name: name.into(),
            replicas,
        };
        let s = recorded(&Default::default(), &[app("web", 3)]);
        let s = recorded(&s, &[app("web", 0), app("db", 2)]);
        assert_eq!(s.scaled_apps.unwrap(), [app("web", 3), app("db", 2)]);
    }

    #[test]
    fn events_keep_the_go_operators_reasons_in_order() {
        let all: Vec<&str> = PHASES
            .into_iter()
            .flat_map(|p| events_on_entering(p, "c", "i"))
            .map(|(r, _)| r.name())
            .collect();
        assert_eq!(all, ["PullImage", "PauseClusterCtrl", "UpgradeInit", "UpgradeComplete"]);
        assert_eq!(
            events_on_entering(UpgradePhase::Completed, "c", "node:v2")[0].1,
            "StorageOS upgraded to node:v2. Delete upgrade object to disable cluster maintenance mode"
        );
    }

    /// Every phase, in order.
    const PHASES: [UpgradePhase; 10] = [
        UpgradePhase::Pending,
        UpgradePhase::PullingImage,
        UpgradePhase::Pausing,
        UpgradePhase::ScalingDown,
        UpgradePhase::UpgradingNodes,
        UpgradePhase::RollingBack,
        UpgradePhase::ScalingUp,
        UpgradePhase::RolledBack,
        UpgradePhase::Completed,
        UpgradePhase::Failed,
    ];

    #[test]
    fn a_rollback_is_recorded_journaled_and_ends_degraded_not_completed() {
        let s = advanced(
            &Default::default(),
            UpgradePhase::UpgradingNodes,
            None,
            "new",
            Some(1),
            &t(1),
        );
        assert_eq!(s.phase_since, Some(t(1)));
        let s = rolling_back(&s, "node b offline", "old", Some(1), &t(2));
        assert_eq!(s.phase, Some(UpgradePhase::RollingBack));
        assert_eq!(s.phase_since, Some(t(2)));
        assert_eq!(
            s.rollback,
            Some(UpgradeRollback {
                cause: "node b offline".into(),
                image: "old".into()
            })
        );
        assert_eq!(cond(&s, "Progressing").1, "RollingBack");
        assert!(cond(&s, "Progressing").2.contains("old"));
        let s = advanced(&s, UpgradePhase::ScalingUp, None, "new", Some(1), &t(3));
        let done = advanced(&s, UpgradePhase::RolledBack, None, "new", Some(1), &t(4));
        assert_eq!(done.completed, Some(false));
        assert_eq!(cond(&done, "Ready").0, "False");
        assert_eq!(cond(&done, "Progressing").0, "False");
        assert_eq!(
            cond(&done, "Degraded"),
            ("True".into(), "RolledBack".into(), "node b offline".into())
        );
        let journal: Vec<(UpgradePhase, String)> = done
            .journal
            .unwrap()
            .into_iter()
            .map(|e| (e.phase, e.message))
            .collect();
        let phases: Vec<UpgradePhase> = journal.iter().map(|(p, _)| *p).collect();
        use UpgradePhase::*;
        assert_eq!(
            phases,
            [UpgradingNodes, RollingBack, RollingBack, ScalingUp, RolledBack]
        );
        assert_eq!(journal[2].1, "node b offline");
        assert!(journal[4].1.starts_with("rolled back to old"), "{}", journal[4].1);
    }

    #[test]
    fn a_hold_keeps_the_upgrade_pending_with_its_reason_and_is_news_once() {
        let refused = refused(&Default::default(), reasons::DOWNGRADE, "older", Some(1), &t(1)).0;
        let (s, news) = held(&refused, reasons::VOLUMES_NOT_READY, "a syncs", Some(2), &t(2));
        assert!(news);
        assert_eq!(s.phase, Some(UpgradePhase::Pending));
        assert_eq!(
            cond(&s, "Ready"),
            ("False".into(), "VolumesNotReady".into(), "a syncs".into())
        );
        assert_eq!(cond(&s, "Degraded").0, "False");
        let (again, news) = held(&s, reasons::VOLUMES_NOT_READY, "a syncs", Some(2), &t(3));
        assert!(!news);
        assert_eq!(again, s);
    }

    #[test]
    fn a_phase_reason_is_the_phase_name() {
        for phase in PHASES {
            assert_eq!(phase_reason(phase).name(), format!("{phase:?}"));
        }
    }
}
