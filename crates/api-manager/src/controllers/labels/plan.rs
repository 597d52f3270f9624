//! The pure decision of label sync: what each reserved `storageos.com/` key means and what to
//! write to a StorageOS node or volume so that it carries the labels Kubernetes asks for.
//!
//! Fixes of the Go api-manager (docs/api-manager.md): an invalid value is reported and
//! leaves the current setting alone (Go reset replicas to 0 and compute-only to false);
//! create-time-only keys are ignored instead of failing every sync; unknown reserved keys are
//! reported, never retried.

use std::fmt;

use crate::go::parse_bool;
use crate::storageos::models::{
    FailureMode, LABEL_COMPUTE_ONLY, LABEL_FAILURE_MODE, LABEL_REPLICAS, LabelSet, Labels, Node, RESERVED_PREFIX,
    Volume, is_reserved_node_label, is_reserved_volume_label,
};

/// Reserved keys that only matter when a volume is created; changing them later has no effect,
/// so label sync ignores them quietly (topology placement is create-time here too: the API this
/// operator speaks has no endpoint to change it).
pub const CREATE_TIME_ONLY: [&str; 6] = [
    "storageos.com/nocache",
    "storageos.com/nocompress",
    "storageos.com/encryption",
    "storageos.com/topology-aware",
    "storageos.com/topology-key",
    "storageos.com/fixed-topology",
];
/// Highest replica count StorageOS accepts.
pub const MAX_REPLICAS: u8 = 5;

fn unreserved<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>, reserved: fn(&str) -> bool) -> Labels {
    labels
        .into_iter()
        .filter(|(k, _)| !reserved(k))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The unreserved labels of `wanted` when they differ from those of `current` (nil and empty
/// count as equal).
fn changed_unreserved(wanted: &Labels, current: &LabelSet, reserved: fn(&str) -> bool) -> Option<Labels> {
    let labels = unreserved(wanted.iter().map(|(k, v)| (k.as_str(), v.as_str())), reserved);
    (labels != unreserved(current, reserved)).then_some(labels)
}

/// The reserved keys of `wanted` that `why` says are not applied.
fn other_reserved<'a>(
    wanted: &'a Labels,
    reserved: fn(&str) -> bool,
    why: impl Fn(&str) -> Option<Why> + 'a,
) -> impl Iterator<Item = NotApplied> + 'a {
    wanted
        .iter()
        .filter(move |(k, _)| reserved(k))
        .filter_map(move |(k, v)| {
            why(k).map(|why| NotApplied {
                key: k.clone(),
                value: v.clone(),
                why,
            })
        })
}

/// A wanted label that is not applied, and why; reported to the user as an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotApplied {
    pub key: String,
    pub value: String,
    pub why: Why,
}

/// Why a label is not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// The value does not parse; the current setting is kept.
    Invalid(String),
    /// A reserved key this kind of object does not take (for example replicas on a node).
    WrongObject(&'static str),
    /// A reserved key StorageOS does not define.
    Unknown,
}

impl fmt::Display for NotApplied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (k, v) = (&self.key, &self.value);
        match &self.why {
            Why::Invalid(reason) => write!(f, "{k}={v:?} is invalid ({reason}); the current setting is kept"),
            Why::WrongObject(kind) => write!(f, "{k} does not apply to a {kind}; remove the label"),
            Why::Unknown => write!(
                f,
                "{k} is not a StorageOS setting that can be changed; remove the label"
            ),
        }
    }
}

/// The events' text for `items`.
pub fn describe(items: &[NotApplied]) -> String {
    items.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// What to write to a StorageOS node so it matches its Kubernetes node's labels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePlan {
    /// New compute-only setting, when it differs.
    pub compute_only: Option<bool>,
    /// The complete new set of unreserved labels, when it differs.
    pub labels: Option<Labels>,
    pub not_applied: Vec<NotApplied>,
}

impl NodePlan {
    /// Whether anything must be written.
    pub fn has_writes(&self) -> bool {
        self.compute_only.is_some() || self.labels.is_some()
    }
}

/// Compares the Kubernetes node's labels (`wanted`) with the StorageOS node. A missing
/// compute-only label means false; an invalid one keeps the current setting.
pub fn plan_node(wanted: &Labels, node: &Node) -> NodePlan {
    let mut plan = NodePlan::default();
    let compute_only = match wanted.get(LABEL_COMPUTE_ONLY) {
        None => Some(false),
        Some(v) => parse_bool(v).or_else(|| {
            plan.not_applied.push(NotApplied {
                key: LABEL_COMPUTE_ONLY.into(),
                value: v.clone(),
                why: Why::Invalid("use true or false".into()),
            });
            None
        }),
    };
    plan.compute_only = compute_only.filter(|c| *c != node.compute_only());
    plan.not_applied
        .extend(other_reserved(wanted, is_reserved_node_label, |k| {
            if k == LABEL_COMPUTE_ONLY {
                None
            } else if k == LABEL_REPLICAS || k == LABEL_FAILURE_MODE || CREATE_TIME_ONLY.contains(&k) {
                Some(Why::WrongObject("node"))
            } else {
                Some(Why::Unknown)
            }
        }));
    plan.labels = changed_unreserved(wanted, &node.labels, is_reserved_node_label);
    plan
}

/// What to write to a StorageOS volume so it matches its PVC (and StorageClass).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumePlan {
    /// New replica count, when it differs.
    pub replicas: Option<u8>,
    /// New failure mode, when it differs.
    pub failure_mode: Option<FailureMode>,
    /// The complete new set of unreserved labels, when it differs.
    pub labels: Option<Labels>,
    pub not_applied: Vec<NotApplied>,
}

impl VolumePlan {
    /// Whether anything must be written.
    pub fn has_writes(&self) -> bool {
        self.replicas.is_some() || self.failure_mode.is_some() || self.labels.is_some()
    }

    /// Whether the failure mode must change before the replicas: when replicas go down, so a
    /// threshold never exceeds the replica count in between.
    pub fn failure_mode_first(&self, volume: &Volume) -> bool {
        self.replicas.is_some_and(|r| r < current_replicas(volume))
    }
}

fn current_replicas(volume: &Volume) -> u8 {
    volume
        .labels
        .get(LABEL_REPLICAS)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn parse_replicas(v: &str) -> Result<u8, String> {
    v.trim()
        .parse::<u8>()
        .ok()
        .filter(|n| *n <= MAX_REPLICAS)
        .ok_or_else(|| format!("use a number from 0 to {MAX_REPLICAS}"))
}

fn parse_failure_mode(v: &str) -> Result<FailureMode, String> {
    match v.trim() {
        "" => Ok(FailureMode::Hard),
        v => match v.parse::<FailureMode>() {
            Ok(FailureMode::Threshold(n)) if n > MAX_REPLICAS => {
                Err(format!("a threshold must be from 0 to {MAX_REPLICAS}"))
            }
            Ok(m) => Ok(m),
            Err(_) => Err(format!(
                "use hard, soft, alwayson or a number of replicas from 0 to {MAX_REPLICAS}"
            )),
        },
    }
}

/// Compares the desired settings (the StorageClass's `storageos.com/` parameters overlaid by the
/// PVC's labels) with the volume. Missing replicas mean 0 and a missing failure mode means hard,
/// as at provisioning. Unknown reserved keys are reported only when the PVC carries them: the
/// class's parameters were checked by StorageOS when the volume was created.
pub fn plan_volume(class_parameters: &Labels, pvc_labels: &Labels, volume: &Volume) -> VolumePlan {
    let mut plan = VolumePlan::default();
    let mut desired: Labels = class_parameters
        .iter()
        .filter(|(k, _)| k.starts_with(RESERVED_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    desired.extend(pvc_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut invalid = |key: &str, value: &str, reason: String| {
        plan.not_applied.push(NotApplied {
            key: key.into(),
            value: value.into(),
            why: Why::Invalid(reason),
        })
    };

    let replicas = match desired.get(LABEL_REPLICAS) {
        None => Some(0),
        Some(v) => parse_replicas(v).map_err(|r| invalid(LABEL_REPLICAS, v, r)).ok(),
    };
    let failure_mode = match desired.get(LABEL_FAILURE_MODE) {
        None => Some(FailureMode::Hard),
        Some(v) => parse_failure_mode(v)
            .map_err(|r| invalid(LABEL_FAILURE_MODE, v, r))
            .ok(),
    };
    plan.replicas = replicas.filter(|r| *r != current_replicas(volume));
    let current_mode = volume
        .labels
        .get(LABEL_FAILURE_MODE)
        .map_or(Ok(FailureMode::Hard), parse_failure_mode);
    plan.failure_mode = failure_mode.filter(|m| current_mode.as_ref() != Ok(m));

    plan.not_applied
        .extend(other_reserved(pvc_labels, is_reserved_volume_label, |k| {
            if k == LABEL_REPLICAS || k == LABEL_FAILURE_MODE || CREATE_TIME_ONLY.contains(&k) {
                None
            } else if k == LABEL_COMPUTE_ONLY {
                Some(Why::WrongObject("volume"))
            } else {
                Some(Why::Unknown)
            }
        }));
    plan.labels = changed_unreserved(pvc_labels, &volume.labels, is_reserved_volume_label);
    plan
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn node(yaml: &str) -> Node {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn volume(yaml: &str) -> Volume {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn node_plan_keeps_reserved_labels_and_reports_what_it_cannot_apply() {
        let sos = node("name: n\nversion: v1\nlabels: {storageos.com/computeonly: 'true', old: x}\n");
        // Unchanged: nothing to write (the computeonly label matches).
        let same = plan_node(&labels(&[("storageos.com/computeonly", "true"), ("old", "x")]), &sos);
        assert!(!same.has_writes() && same.not_applied.is_empty(), "{same:?}");

        // Removing computeonly means false; unreserved labels become exactly the wanted ones.
        let plan = plan_node(&labels(&[("new", "y")]), &sos);
        assert_eq!(plan.compute_only, Some(false));
        assert_eq!(plan.labels, Some(labels(&[("new", "y")])));

        // An invalid value keeps the setting (Go reset it to false) and is reported.
        let plan = plan_node(
            &labels(&[
                ("storageos.com/computeonly", "maybe"),
                ("storageos.com/replicas", "2"),
                ("storageos.com/whatever", "1"),
                ("old", "x"),
            ]),
            &sos,
        );
        assert_eq!(plan.compute_only, None);
        assert_eq!(plan.labels, None);
        let whys: Vec<_> = plan
            .not_applied
            .iter()
            .map(|n| (n.key.as_str(), n.why.clone()))
            .collect();
        assert_eq!(
            whys,
            vec![
                ("storageos.com/computeonly", Why::Invalid("use true or false".into())),
                ("storageos.com/replicas", Why::WrongObject("node")),
                ("storageos.com/whatever", Why::Unknown),
            ]
        );
        assert!(describe(&plan.not_applied).contains("current setting is kept"));

        // Nil and empty label maps are equal.
        let bare = node("name: n\nlabels: null\n");
        assert!(!plan_node(&Labels::new(), &bare).has_writes());
    }

    #[test]
    fn volume_plan_overlays_pvc_labels_on_class_parameters() {
        let vol = volume("name: pv\nlabels: {storageos.com/replicas: '1', csi.storage.k8s.io/pv/name: pv, app: a}\n");
        let class = labels(&[
            ("storageos.com/replicas", "1"),
            ("storageos.com/nocache", "true"),
            ("storageos.com/encryption", "true"),
            ("csi.storage.k8s.io/fstype", "ext4"),
        ]);
        // Class defaults and create-time keys: nothing to do, nothing to report (Go errored).
        let idle = plan_volume(&class, &labels(&[("app", "a")]), &vol);
        assert_eq!(idle, VolumePlan::default());

        // The PVC wins over the class.
        let plan = plan_volume(
            &class,
            &labels(&[
                ("app", "b"),
                ("storageos.com/replicas", "2"),
                ("storageos.com/failure-mode", "soft"),
            ]),
            &vol,
        );
        assert_eq!(plan.replicas, Some(2));
        assert_eq!(plan.failure_mode, Some(FailureMode::Soft));
        assert_eq!(plan.labels, Some(labels(&[("app", "b")])));
        assert!(!plan.failure_mode_first(&vol));

        // Removed labels fall back to the class, then to 0 replicas and hard.
        let vol2 = volume("name: pv\nlabels: {storageos.com/replicas: '2', storageos.com/failure-mode: '2'}\n");
        let plan = plan_volume(&Labels::new(), &Labels::new(), &vol2);
        assert_eq!(plan.replicas, Some(0));
        assert_eq!(plan.failure_mode, Some(FailureMode::Hard));
        assert!(plan.failure_mode_first(&vol2));
        let plan = plan_volume(&class, &Labels::new(), &vol2);
        assert_eq!(plan.replicas, Some(1));
    }

    #[test]
    fn invalid_volume_values_keep_the_current_setting() {
        let vol = volume("name: pv\nlabels: {storageos.com/replicas: '2', storageos.com/failure-mode: soft}\n");
        for (key, value) in [
            ("storageos.com/replicas", "lots"),
            ("storageos.com/replicas", "9"),
            ("storageos.com/failure-mode", "sometimes"),
            ("storageos.com/failure-mode", "7"),
        ] {
            let mut wanted = labels(&[("storageos.com/replicas", "2"), ("storageos.com/failure-mode", "soft")]);
            wanted.insert(key.into(), value.into());
            let plan = plan_volume(&Labels::new(), &wanted, &vol);
            assert!(!plan.has_writes(), "{key}={value}: {plan:?}");
            assert_eq!(plan.not_applied.len(), 1, "{key}={value}");
            assert!(matches!(plan.not_applied[0].why, Why::Invalid(_)));
        }
        // A threshold and an empty mode parse; an absent current mode means hard.
        let plan = plan_volume(
            &Labels::new(),
            &labels(&[("storageos.com/failure-mode", "")]),
            &volume("name: v\n"),
        );
        assert!(!plan.has_writes(), "{plan:?}");
        let plan = plan_volume(
            &Labels::new(),
            &labels(&[
                ("storageos.com/failure-mode", "1"),
                ("storageos.com/computeonly", "true"),
                ("storageos.com/x", "1"),
            ]),
            &volume("name: v\n"),
        );
        assert_eq!(plan.failure_mode, Some(FailureMode::Threshold(1)));
        let whys: Vec<_> = plan.not_applied.iter().map(|n| n.why.clone()).collect();
        assert_eq!(whys, vec![Why::WrongObject("volume"), Why::Unknown]);
        // Unknown keys from the class are not the PVC's to fix: not reported.
        let plan = plan_volume(
            &labels(&[("storageos.com/x", "1")]),
            &Labels::new(),
            &volume("name: v\n"),
        );
        assert!(plan.not_applied.is_empty());
    }
}
