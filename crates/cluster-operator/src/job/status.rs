//! Completion and status of a Job (pure).
//!
//! A Job is complete only when every pod its DaemonSet wants exists, is scheduled and has
//! printed the completion word. The Go operator counted only the pods that happened to exist,
//! so a Job could complete before the DaemonSet had created all of them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::JobStatus;
use crate::reasons;
use crate::runtime::kube::conditions;

/// One of the Job's pods as the completion check sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    /// The pod is bound to a node.
    pub scheduled: bool,
    /// The pod's log contains the completion word.
    pub finished: bool,
}

/// What a status computation needs.
#[derive(Clone, Debug)]
pub struct JobObservation<'a> {
    /// `desiredNumberScheduled` of the DaemonSet, when its status is current (its
    /// `observedGeneration` caught up with its spec); None otherwise.
    pub desired: Option<i32>,
    /// The Job's live (not terminating) pods.
    pub pods: &'a [PodView],
    pub previous: Option<&'a JobStatus>,
    pub generation: Option<i64>,
    pub now: &'a Time,
}

/// Whether the Job is complete: the DaemonSet wants at least one pod, exactly that many exist,
/// each is scheduled, and each has printed the word.
pub fn is_complete(desired: Option<i32>, pods: &[PodView]) -> bool {
    match desired {
        Some(d) if d > 0 => {
            usize::try_from(d).is_ok_and(|d| d == pods.len()) && pods.iter().all(|p| p.scheduled && p.finished)
        }
        _ => false,
    }
}

/// The status to write. Completion is final: a completed Job stays completed.
pub fn compute(o: &JobObservation) -> JobStatus {
    let previous = o.previous.cloned().unwrap_or_default();
    if previous.completed == Some(true) {
        return previous;
    }
    let finished = o.pods.iter().filter(|p| p.scheduled && p.finished).count();
    let finished = i32::try_from(finished).unwrap_or(i32::MAX);
    let total = o.desired.unwrap_or(0).max(0);
    let complete = is_complete(o.desired, o.pods);
    let progress = format!("{finished}/{total}");
    let mut conds = previous.conditions.clone().unwrap_or_default();
    let (reason, msg) = if complete {
        let msg = format!("every selected node ({total}) printed the completion word; safe to delete");
        (reasons::COMPLETED, msg)
    } else if total == 0 {
        (
            reasons::RUNNING,
            "waiting for the DaemonSet to select nodes".to_string(),
        )
    } else {
        let msg = format!("{finished} of {total} nodes printed the completion word");
        (reasons::RUNNING, msg)
    };
    let (generation, now) = (o.generation, o.now);
    conditions::set(&mut conds, "Ready", complete, reason, msg.clone(), generation, now);
    conditions::set(&mut conds, "Progressing", !complete, reason, msg, generation, now);
    JobStatus {
        completed: Some(complete),
        nodes_completed: Some(finished),
        nodes_total: Some(total),
        progress: Some(progress),
        conditions: Some(conds),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn t(s: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap())
    }

    fn pod(scheduled: bool, finished: bool) -> PodView {
        PodView { scheduled, finished }
    }

    fn obs<'a>(desired: Option<i32>, pods: &'a [PodView], previous: Option<&'a JobStatus>, now: &'a Time) -> JobStatus {
        compute(&JobObservation {
            desired,
            pods,
            previous,
            generation: Some(1),
            now,
        })
    }

    #[test]
    fn complete_only_when_every_desired_pod_exists_and_finished() {
        let done = pod(true, true);
        assert!(is_complete(Some(2), &[done.clone(), done.clone()]));
        // A pod the DaemonSet wants is missing: the Go operator would have completed here.
        assert!(!is_complete(Some(3), &[done.clone(), done.clone()]));
        assert!(!is_complete(Some(2), &[done.clone(), pod(true, false)]));
        assert!(!is_complete(Some(1), &[pod(false, true)]));
        // Nothing selected, or the DaemonSet status is stale: never complete.
        assert!(!is_complete(Some(0), &[]));
        assert!(!is_complete(None, std::slice::from_ref(&done)));
        assert!(!is_complete(Some(-1), &[]));
    }

    #[test]
    fn progress_counts_finished_nodes_out_of_desired() {
        let now = t(10);
        let s = obs(Some(3), &[pod(true, true), pod(true, false)], None, &now);
        assert_eq!(s.completed, Some(false));
        assert_eq!((s.nodes_completed, s.nodes_total), (Some(1), Some(3)));
        assert_eq!(s.progress.as_deref(), Some("1/3"));
        assert!(!conditions::is_true(s.conditions.as_deref(), "Ready"));
        assert!(conditions::is_true(s.conditions.as_deref(), "Progressing"));

        let s = obs(None, &[], None, &now);
        assert_eq!(s.progress.as_deref(), Some("0/0"));
        assert_eq!(
            s.conditions.unwrap()[0].message,
            "waiting for the DaemonSet to select nodes"
        );
    }

    #[test]
    fn completion_sets_ready_and_is_final() {
        let pods = [pod(true, true), pod(true, true)];
        let s = obs(Some(2), &pods, None, &t(10));
        assert_eq!(s.completed, Some(true));
        assert_eq!(s.progress.as_deref(), Some("2/2"));
        assert!(conditions::is_true(s.conditions.as_deref(), "Ready"));
        assert!(!conditions::is_true(s.conditions.as_deref(), "Progressing"));
        // Pods going away afterwards (Job being cleaned up) do not undo completion.
        let later = obs(Some(2), &[], Some(&s), &t(20));
        assert_eq!(later, s);
    }

    #[test]
    fn an_unchanged_observation_gives_an_identical_status() {
        let pods = [pod(true, false)];
        let a = obs(Some(1), &pods, None, &t(10));
        let b = obs(Some(1), &pods, Some(&a), &t(20));
        assert_eq!(a, b, "no write at idle");
    }
}
