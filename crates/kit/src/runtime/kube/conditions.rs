//! Status conditions (`Ready`, `Progressing`, `Degraded`, ...), kept the Kubernetes way: a
//! condition's `lastTransitionTime` only moves when its status flips.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::reasons::Reason;

/// The condition of `type_` among `conditions`, if there is one.
pub fn find<'a>(conditions: Option<&'a [Condition]>, type_: &str) -> Option<&'a Condition> {
    conditions?.iter().find(|c| c.type_ == type_)
}

/// The current time, as conditions and status fields record it.
pub fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// Sets condition `type_` in `conditions`, keeping its transition time if the status is unchanged.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: Reason,
    message: impl Into<String>,
    generation: Option<i64>,
    now: &Time,
) {
    let status = if status { "True" } else { "False" }.to_string();
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now.clone();
            }
            c.status = status;
            c.reason = reason.into();
            c.message = message;
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message,
            observed_generation: generation,
            last_transition_time: now.clone(),
        }),
    }
}

/// Sets `Ready=False` with `reason` and `message`. Returns true when that is news (the
/// condition did not already say exactly this), i.e. when a Warning event is due.
pub fn set_not_ready(conditions: &mut Vec<Condition>, reason: Reason, message: &str, generation: Option<i64>) -> bool {
    let news = !conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "False" && c.reason == reason && c.message == message);
    set(conditions, "Ready", false, reason, message, generation, &now());
    news
}

/// Whether condition `type_` is present and True.
pub fn is_true(conditions: Option<&[Condition]>, type_: &str) -> bool {
    conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::reasons::{APPLY_FAILED, Kind, Reason};

    // A user's reasons (a table of its own, like the operator's).
    const CREATING: Reason = Reason::new("Creating", Kind::Condition, "a test object", "Progressing.");
    const CLUSTER_READY: Reason = Reason::new("ClusterReady", Kind::Condition, "a test object", "Ready.");
    const SECRET_NOT_FOUND: Reason = Reason::new("SecretNotFound", Kind::Condition, "a test object", "No Secret.");

    fn t(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let mut cs = Vec::new();
        set(&mut cs, "Ready", false, CREATING, "0/3", Some(1), &t(10));
        set(&mut cs, "Ready", false, CREATING, "1/3", Some(1), &t(20));
        assert_eq!(cs[0].last_transition_time, t(10));
        assert_eq!(cs[0].message, "1/3");
        set(&mut cs, "Ready", true, CLUSTER_READY, "3/3", Some(2), &t(30));
        assert_eq!(cs[0].last_transition_time, t(30));
        assert!(is_true(Some(&cs), "Ready"));
        assert!(!is_true(Some(&cs), "Degraded"));
        assert_eq!(cs.len(), 1);
    }

    #[test]
    fn not_ready_is_news_only_when_it_changes() {
        let mut cs = Vec::new();
        assert!(set_not_ready(&mut cs, SECRET_NOT_FOUND, "create it", Some(1)));
        assert!(!set_not_ready(&mut cs, SECRET_NOT_FOUND, "create it", Some(1)));
        assert!(set_not_ready(&mut cs, APPLY_FAILED, "cannot apply", Some(1)));
        assert_eq!(cs.len(), 1);
    }
}
