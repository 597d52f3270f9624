//! The upgrade's state machine (pure): from the recorded phase and what was observed, the one
//! next step.
//!
//! Every action is decided afresh from the live objects, so repeating a step is harmless (an
//! application already at zero is not scaled again, pods already on the new image are not
//! deleted) and an operator killed at any point resumes from the phase recorded in status.
//! A phase is recorded before its first action ([`Step::Advance`]), and applications are
//! recorded with their replicas before they are scaled ([`Step::Record`]).

use std::fmt;
use std::time::Duration;

use kube::ResourceExt;

use super::apps::{LiveApp, describe};
use super::health::{self, NotSafe, StorageOSRead};
use super::nodes::NodeView;
use super::path::{self, PathError};
use super::pull::PullerView;
use crate::crd::{DEFAULT_UPGRADE_TIMEOUT, ScaledApp, StorageOSUpgrade, UpgradePhase};
use crate::reasons::{self, Reason};

/// The cluster being upgraded, as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    pub namespace: String,
    pub name: String,
    /// Value of the pause annotation.
    pub paused_by: Option<String>,
    /// `spec.images.nodeContainer`.
    pub node_image: Option<String>,
    /// Namespace the cluster's objects live in (the node DaemonSet's).
    pub objects_namespace: String,
    /// The cluster is being deleted.
    pub deleting: bool,
}

/// Everything a step decision needs. Each phase observes only what it uses.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// `namespace/name` of the upgrade that goes first, when it is not this one (Pending).
    pub blocked_by: Option<String>,
    /// `namespace/name` of the active cluster when it is in another namespace than the upgrade
    /// (Pending): an upgrade acts only on the cluster in its own namespace.
    pub other_namespace: Option<String>,
    /// The cluster: the active one before the upgrade starts, the recorded one afterwards.
    pub cluster: Option<ClusterView>,
    /// `namespace/name` of the cluster recorded when the upgrade started.
    pub recorded_cluster: Option<String>,
    /// The node DaemonSet (PullingImage, UpgradingNodes).
    pub nodes: Option<NodeView>,
    /// The puller (PullingImage, Pausing).
    pub puller: PullerView,
    /// `spec.force`: allow a path StorageOS does not support (Pending, Refused).
    pub force: bool,
    /// Running StorageOS-backed applications (ScalingDown).
    pub candidates: Vec<ScaledApp>,
    /// The recorded applications as they are now; None when deleted (ScalingDown, ScalingUp).
    pub apps: Vec<(ScaledApp, Option<LiveApp>)>,
    /// StorageOS nodes and volumes (Pending and Refused once the path is fine, UpgradingNodes).
    pub storageos: StorageOSRead,
    /// Cordoned nodes that a drain guard's PodDisruptionBudget protects (Pending, Refused).
    pub drain_blocked: Vec<String>,
    /// `spec.timeout` as written.
    pub timeout: Option<String>,
    /// How long the upgrade has been in its phase (unknown for a status written before
    /// `phaseSince` existed).
    pub in_phase: Option<Duration>,
    /// The image the nodes ran when the upgrade started (`status.previousImage`).
    pub previous_image: Option<String>,
    /// The upgrade decided to roll back (`status.rollback`).
    pub rolling_back: bool,
}

/// A condition the user has to resolve; the upgrade retries with backoff meanwhile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// No StorageOSCluster to upgrade.
    NoCluster,
    /// The active cluster (named) is in another namespace than the upgrade.
    WrongNamespace(String),
    /// The active cluster is being deleted.
    ClusterDeleting(String),
    /// The cluster recorded at the start no longer exists.
    ClusterGone(String),
    /// The cluster has no node DaemonSet (yet).
    NoNodeDaemonSet(String),
    /// `spec.timeout` does not parse (the parser's message).
    InvalidTimeout(String),
}

impl Problem {
    /// The condition reason.
    pub fn reason(&self) -> Reason {
        match self {
            Self::NoCluster => reasons::NO_CLUSTER,
            Self::WrongNamespace(_) => reasons::WRONG_NAMESPACE,
            Self::ClusterDeleting(_) => reasons::CLUSTER_DELETING,
            Self::ClusterGone(_) => reasons::CLUSTER_GONE,
            Self::NoNodeDaemonSet(_) => reasons::NO_NODE_DAEMON_SET,
            Self::InvalidTimeout(_) => reasons::INVALID_TIMEOUT,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoCluster => write!(
                f,
                "no StorageOSCluster to upgrade: create one, or wait for it to be created; the upgrade retries by itself"
            ),
            Self::WrongNamespace(c) => write!(
                f,
                "the StorageOSCluster {c} is in another namespace: an upgrade acts only on the cluster in its own namespace; \
                 delete this upgrade and create it in the cluster's namespace"
            ),
            Self::ClusterDeleting(c) => write!(
                f,
                "StorageOSCluster {c} is being deleted; delete this upgrade, or let the deletion finish and create a new cluster"
            ),
            Self::ClusterGone(c) => write!(
                f,
                "StorageOSCluster {c}, which this upgrade started on, no longer exists; delete this upgrade to restore the applications it scaled down"
            ),
            Self::NoNodeDaemonSet(d) => write!(
                f,
                "node DaemonSet {d} does not exist; wait for the StorageOSCluster to deploy it (check the cluster's status), the upgrade retries by itself"
            ),
            Self::InvalidTimeout(e) => write!(f, "spec.timeout: {e}"),
        }
    }
}

/// Why an upgrade that may otherwise start waits, touching nothing (docs/upgrading.md, "Safe
/// to start"). Unlike a [`Problem`] it clears by itself, and `spec.force` does not override it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Volumes (named, with why) are degraded or have a replica still syncing.
    VolumesNotReady(String),
    /// The StorageOS volumes could not all be read (why).
    VolumesUnknown(String),
    /// These cordoned nodes hold the last copy of a volume (a drain guard protects them).
    DrainBlocked(Vec<String>),
}

impl Hold {
    /// The condition and event reason.
    pub fn reason(&self) -> Reason {
        match self {
            Self::VolumesNotReady(_) => reasons::VOLUMES_NOT_READY,
            Self::VolumesUnknown(_) => reasons::VOLUMES_UNKNOWN,
            Self::DrainBlocked(_) => reasons::DRAIN_BLOCKED,
        }
    }
}

impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::VolumesNotReady(v) => write!(
                f,
                "not started: an offline upgrade restarts every node, so it waits until every StorageOS volume is in sync; not yet: {v}"
            ),
            Self::VolumesUnknown(why) => write!(
                f,
                "not started: whether every StorageOS volume is in sync cannot be told ({why}); the upgrade waits and reads again"
            ),
            Self::DrainBlocked(nodes) => write!(
                f,
                "not started: a drain is blocked on {} (cordoned while holding the last copy of a volume); finish or undo the drain first",
                nodes.join(", ")
            ),
        }
    }
}

/// One action on the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Act {
    /// Create or update the puller DaemonSet.
    ApplyPuller,
    /// Delete the puller DaemonSet (the image is on every node).
    DeletePuller,
    /// Annotate the cluster: pauses its reconciler and signals maintenance.
    Pause,
    /// Scale an application to zero.
    ScaleDown(ScaledApp),
    /// Record this image in the cluster's `spec.images.nodeContainer`.
    SetClusterImage(String),
    /// Set the node container's image on the node DaemonSet to this one.
    SetNodeImage(String),
    /// Delete these node pods (all at once) so they come back on the new image.
    RestartNodePods(Vec<String>),
    /// Give an application its replicas back.
    ScaleUp(ScaledApp),
}

impl fmt::Display for Act {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ApplyPuller => write!(f, "apply the image puller"),
            Self::DeletePuller => write!(f, "delete the image puller"),
            Self::Pause => write!(f, "pause the cluster"),
            Self::ScaleDown(a) => write!(f, "scale {} to 0", describe(a)),
            Self::SetClusterImage(i) => write!(f, "set the cluster's node image to {i}"),
            Self::SetNodeImage(i) => write!(f, "set the node DaemonSet's image to {i}"),
            Self::RestartNodePods(p) => write!(f, "delete node pods {}", p.join(", ")),
            Self::ScaleUp(a) => write!(f, "scale {} back to {}", describe(a), a.replicas),
        }
    }
}

/// What to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Another upgrade goes first (`namespace/name`).
    Blocked(String),
    /// Waiting for something to happen; the message says what.
    Wait(String),
    /// Something the user must fix.
    Problem(Problem),
    /// Not started: the path from the running image is not supported (phase Refused).
    Refuse(PathError),
    /// Not started yet, nothing touched: it is not safe to (phase Pending).
    Hold(Hold),
    /// The restarted nodes did not prove healthy in time (why): record the rollback and
    /// enter RollingBack.
    RollBack(String),
    /// Record the move to this phase, before any of its actions.
    Advance(UpgradePhase),
    /// Record these applications with their replicas, before scaling them.
    Record(Vec<ScaledApp>),
    /// Take this action.
    Act(Act),
    /// Completed: nothing to do.
    Idle,
}

fn same_app(a: &ScaledApp, b: &ScaledApp) -> bool {
    a.kind == b.kind && a.namespace == b.namespace && a.name == b.name
}

/// The next step of upgrade `name` to `image`, at `phase`, with `recorded` applications.
pub fn next(name: &str, image: &str, phase: UpgradePhase, recorded: &[ScaledApp], o: &Observed) -> Step {
    use UpgradePhase::*;
    // In every phase, not only before the start: the recorded cluster comes from the status,
    // which whoever may write `storageosupgrades/status` can change.
    if let Some(cluster) = &o.other_namespace {
        return Step::Problem(Problem::WrongNamespace(cluster.clone()));
    }
    match phase {
        // Refused is decided again each time: `spec.force` may have been set since.
        Pending | Refused => {
            if let Some(first) = &o.blocked_by {
                return Step::Blocked(first.clone());
            }
            // The path is checked against the image the nodes run (the node DaemonSet's),
            // before anything is touched.
            let (_, nodes) = match cluster_and_nodes(o) {
                Ok(n) => n,
                Err(p) => return Step::Problem(p),
            };
            let running = nodes.template_image.as_deref().unwrap_or_default();
            if let Err(e) = path::check(running, image, o.force) {
                return Step::Refuse(e);
            }
            if let Err(p) = timeout(o) {
                return Step::Problem(p);
            }
            if !o.drain_blocked.is_empty() {
                return Step::Hold(Hold::DrainBlocked(o.drain_blocked.clone()));
            }
            match health::safe_to_start(&o.storageos) {
                Ok(()) => Step::Advance(PullingImage),
                Err(NotSafe::NotReady(v)) => Step::Hold(Hold::VolumesNotReady(v)),
                Err(NotSafe::Unknown(why)) => Step::Hold(Hold::VolumesUnknown(why)),
            }
        }
        PullingImage => {
            // The puller is placed like the node pods: both must exist.
            if let Err(p) = cluster_and_nodes(o) {
                return Step::Problem(p);
            }
            if !o.puller.exists {
                Step::Act(Act::ApplyPuller)
            } else if o.puller.complete() {
                Step::Advance(Pausing)
            } else {
                Step::Wait(format!("pulling {image}: {} have it", o.puller.progress()))
            }
        }
        Pausing => match target(o) {
            Err(p) => Step::Problem(p),
            Ok(_) if o.puller.exists => Step::Act(Act::DeletePuller),
            Ok(c) if c.paused_by.as_deref() != Some(name) => Step::Act(Act::Pause),
            Ok(_) => Step::Advance(ScalingDown),
        },
        ScalingDown => {
            let new: Vec<ScaledApp> = o
                .candidates
                .iter()
                .filter(|c| !recorded.iter().any(|r| same_app(r, c)))
                .cloned()
                .collect();
            if !new.is_empty() {
                return Step::Record(new);
            }
            // Scale down anything recorded that runs (again); the user may have scaled it up.
            // Only what uses StorageOS volumes now (a candidate): the record is in the status,
            // which is not proof enough to scale anything else to zero.
            // The replicas written on it are those it runs with now, not the status's.
            if let Some((app, Some(live))) = o.apps.iter().find(|(app, live)| {
                live.as_ref().is_some_and(|l| l.replicas != 0) && o.candidates.iter().any(|c| same_app(c, app))
            }) {
                return Step::Act(Act::ScaleDown(ScaledApp {
                    replicas: live.replicas,
                    ..app.clone()
                }));
            }
            // Only what this step scaled down (it carries the annotation) is waited for.
            let running: Vec<String> = o
                .apps
                .iter()
                .filter(|(_, live)| needs_restore(live.as_ref()) && live.as_ref().is_some_and(|l| l.pods > 0))
                .map(|(a, _)| describe(a))
                .collect();
            if running.is_empty() {
                Step::Advance(UpgradingNodes)
            } else {
                Step::Wait(format!("waiting for the pods of {} to stop", running.join(", ")))
            }
        }
        UpgradingNodes => {
            let (cluster, nodes) = match cluster_and_nodes(o) {
                Ok(n) => n,
                Err(p) => return Step::Problem(p),
            };
            if let Some(step) = restart_on(image, cluster, nodes) {
                return step;
            }
            let limit = match timeout(o) {
                Ok(t) => t,
                Err(p) => return Step::Problem(p),
            };
            let healthy = if nodes.upgraded(image) {
                health::gate(&o.storageos, &nodes.pods)
            } else {
                Err(format!(
                    "{} of {} StorageOS nodes run {image} and are ready",
                    nodes.ready_on(image),
                    nodes.desired
                ))
            };
            match healthy {
                Ok(()) => Step::Advance(ScalingUp),
                // Only an upgrade that recorded the image it started from can go back to it.
                Err(why) if o.in_phase.is_some_and(|t| t >= limit) && o.previous_image.is_some() => {
                    Step::RollBack(format!(
                        "the nodes were not healthy on {image} within {}s: {why}",
                        limit.as_secs()
                    ))
                }
                Err(why) => Step::Wait(format!("health gate: {why}")),
            }
        }
        RollingBack => {
            let (cluster, nodes) = match cluster_and_nodes(o) {
                Ok(n) => n,
                Err(p) => return Step::Problem(p),
            };
            // Recorded when the upgrade started, with the rollback; a status without it was
            // not written by an upgrade that decided to roll back.
            let Some(previous) = o.previous_image.as_deref() else {
                return Step::Wait("no previous image is recorded in status.previousImage to roll back to".into());
            };
            if let Some(step) = restart_on(previous, cluster, nodes) {
                return step;
            }
            if nodes.upgraded(previous) {
                Step::Advance(ScalingUp)
            } else {
                Step::Wait(format!(
                    "rolling back: {} of {} StorageOS nodes run {previous} and are ready",
                    nodes.ready_on(previous),
                    nodes.desired
                ))
            }
        }
        ScalingUp => match o.apps.iter().find(|(_, live)| needs_restore(live.as_ref())) {
            Some((app, live)) => Step::Act(Act::ScaleUp(restored(app, live.as_ref()))),
            None if o.rolling_back => Step::Advance(RolledBack),
            None => Step::Advance(Completed),
        },
        Completed | Failed | RolledBack => Step::Idle,
    }
}

/// The next step of putting every node pod on `image`: the cluster's image, the DaemonSet's,
/// then deleting the pods on another image; None once every live pod runs it.
fn restart_on(image: &str, cluster: &ClusterView, nodes: &NodeView) -> Option<Step> {
    if cluster.node_image.as_deref() != Some(image) {
        return Some(Step::Act(Act::SetClusterImage(image.into())));
    }
    if nodes.template_image.as_deref() != Some(image) {
        return Some(Step::Act(Act::SetNodeImage(image.into())));
    }
    if !nodes.current {
        return Some(Step::Wait(format!(
            "waiting for the DaemonSet controller to see the image {image}"
        )));
    }
    let outdated = nodes.outdated(image);
    (!outdated.is_empty()).then_some(Step::Act(Act::RestartNodePods(outdated)))
}

/// The health gate's bound: `spec.timeout`, else the default.
fn timeout(o: &Observed) -> Result<Duration, Problem> {
    match &o.timeout {
        None => Ok(DEFAULT_UPGRADE_TIMEOUT),
        Some(t) => crate::duration::parse(t).map_err(|e| Problem::InvalidTimeout(e.to_string())),
    }
}

/// Whether an application still carries the scale-down annotation, i.e. was scaled down by an
/// upgrade and not yet restored. Also the rule the finalizer uses.
pub fn needs_restore(live: Option<&LiveApp>) -> bool {
    live.is_some_and(|l| l.scaled_down_from.is_some())
}

/// `app` with the replicas it had before it was scaled down: those written on the application
/// itself when it was scaled (the annotation), not those in the upgrade's status, which its
/// status writers could change; the status's only when the annotation does not parse.
pub fn restored(app: &ScaledApp, live: Option<&LiveApp>) -> ScaledApp {
    let replicas = live
        .and_then(|l| l.scaled_down_from.as_deref())
        .and_then(|r| r.parse::<i32>().ok())
        .filter(|r| *r >= 0)
        .unwrap_or(app.replicas);
    ScaledApp {
        replicas,
        ..app.clone()
    }
}

/// The cluster to work on, if it can be worked on.
fn target(o: &Observed) -> Result<&ClusterView, Problem> {
    match (&o.cluster, &o.recorded_cluster) {
        (Some(c), _) if c.deleting => Err(Problem::ClusterDeleting(format!("{}/{}", c.namespace, c.name))),
        (Some(c), _) => Ok(c),
        (None, Some(recorded)) => Err(Problem::ClusterGone(recorded.clone())),
        (None, None) => Err(Problem::NoCluster),
    }
}

fn cluster_and_nodes(o: &Observed) -> Result<(&ClusterView, &NodeView), Problem> {
    let cluster = target(o)?;
    let nodes = o.nodes.as_ref().ok_or_else(|| {
        Problem::NoNodeDaemonSet(format!(
            "{}/{}",
            cluster.objects_namespace,
            super::nodes::NODE_DAEMONSET
        ))
    })?;
    Ok((cluster, nodes))
}

/// The phase an upgrade is at (Pending when it has no status yet).
pub fn phase_of(u: &StorageOSUpgrade) -> UpgradePhase {
    u.status.as_ref().and_then(|s| s.phase).unwrap_or_default()
}

/// The upgrade whose turn it is: one already under way, else the oldest waiting one (by
/// creation time, then namespace and name). Completed upgrades and deleted ones that never
/// started do not compete.
pub fn first_in_line(upgrades: &[StorageOSUpgrade]) -> Option<&StorageOSUpgrade> {
    upgrades
        .iter()
        .filter(|u| {
            let phase = phase_of(u);
            let deleting = u.metadata.deletion_timestamp.is_some();
            // A refused upgrade waits for nobody and holds nobody up until it is forced.
            let done = matches!(
                phase,
                UpgradePhase::Completed | UpgradePhase::RolledBack | UpgradePhase::Refused
            );
            !(done || deleting && phase == UpgradePhase::Pending)
        })
        .min_by_key(|u| {
            (
                phase_of(u) == UpgradePhase::Pending,
                u.metadata.creation_timestamp.clone().map(|t| t.0),
                u.namespace().unwrap_or_default(),
                u.name_any(),
            )
        })
}

#[cfg(test)]
mod tests;
