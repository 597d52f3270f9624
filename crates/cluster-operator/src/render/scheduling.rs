//! Where StorageOS pods may run: default tolerations merged with the user's, and affinity.

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorTerm, PodAffinityTerm, PodAntiAffinity, Toleration,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;

/// Taints the node DaemonSet tolerates (all effects), so a storage node keeps running through
/// pressure, network or readiness trouble and while cordoned.
const NODE_TOLERATED: [&str; 7] = [
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/network-unavailable",
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/pid-pressure",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/unschedulable",
];

fn exists(key: &str, effect: Option<&str>, seconds: Option<i64>) -> Toleration {
    Toleration {
        key: Some(key.to_string()),
        operator: Some("Exists".to_string()),
        effect: effect.map(str::to_string),
        toleration_seconds: seconds,
        value: None,
    }
}

/// Default tolerations of the node DaemonSet.
pub fn node_tolerations() -> Vec<Toleration> {
    NODE_TOLERATED.iter().map(|k| exists(k, None, None)).collect()
}

/// Default tolerations of the CSI helper, api-manager and scheduler: move off a lost node after
/// 30 s, tolerate disk pressure.
pub fn helper_tolerations() -> Vec<Toleration> {
    vec![
        exists("node.kubernetes.io/disk-pressure", None, None),
        exists("node.kubernetes.io/not-ready", Some("NoExecute"), Some(30)),
        exists("node.kubernetes.io/unreachable", Some("NoExecute"), Some(30)),
    ]
}

/// Overlays the user's tolerations on `defaults`: a user toleration replaces every default with
/// the same key (as in the Go operator), and every user toleration is kept, even several with one
/// key (the Go operator kept only the last). Sorted by key, user order kept within a key, so the
/// result is deterministic and an unchanged spec renders unchanged.
pub fn merge_tolerations(defaults: Vec<Toleration>, user: &[Toleration]) -> Vec<Toleration> {
    let key = |t: &Toleration| t.key.clone().unwrap_or_default();
    let mut merged: Vec<Toleration> = defaults
        .into_iter()
        .filter(|d| !user.iter().any(|u| key(u) == key(d)))
        .chain(user.iter().cloned())
        .collect();
    merged.sort_by_key(key);
    merged
}

/// Required node affinity from the user's terms; None when there are none (an empty term list
/// would match no node at all).
pub fn node_affinity(terms: &[NodeSelectorTerm]) -> Option<NodeAffinity> {
    if terms.is_empty() {
        return None;
    }
    Some(NodeAffinity {
        required_during_scheduling_ignored_during_execution: Some(NodeSelector {
            node_selector_terms: terms.to_vec(),
        }),
        ..Default::default()
    })
}

/// A pod's affinity: the node affinity from `terms` merged with (never replacing) the pod's own
/// anti-affinity. The Go operator replaced the whole struct and lost the api-manager spread.
pub fn affinity(terms: &[NodeSelectorTerm], pod_anti_affinity: Option<PodAntiAffinity>) -> Option<Affinity> {
    let node_affinity = node_affinity(terms);
    if node_affinity.is_none() && pod_anti_affinity.is_none() {
        return None;
    }
    Some(Affinity {
        node_affinity,
        pod_anti_affinity,
        pod_affinity: None,
    })
}

/// Preferred spread of pods with `labels` over nodes (weight 100, by host name).
pub fn spread_over_hosts(labels: BTreeMap<String, String>) -> PodAntiAffinity {
    PodAntiAffinity {
        preferred_during_scheduling_ignored_during_execution: Some(vec![WeightedPodAffinityTerm {
            weight: 100,
            pod_affinity_term: PodAffinityTerm {
                label_selector: Some(LabelSelector {
                    match_labels: Some(labels),
                    match_expressions: None,
                }),
                topology_key: "kubernetes.io/hostname".to_string(),
                ..Default::default()
            },
        }]),
        required_during_scheduling_ignored_during_execution: None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSelectorRequirement;

    fn tol(key: &str, op: &str, value: Option<&str>, effect: Option<&str>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some(op.into()),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        }
    }

    #[test]
    fn defaults_alone_are_sorted_by_key() {
        let merged = merge_tolerations(node_tolerations(), &[]);
        let keys: Vec<_> = merged.iter().map(|t| t.key.clone().unwrap()).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        assert_eq!(merged.len(), 7);
        assert!(
            merged
                .iter()
                .all(|t| t.operator.as_deref() == Some("Exists") && t.effect.is_none())
        );
    }

    #[test]
    fn user_toleration_replaces_the_default_with_the_same_key_and_adds_new_ones() {
        let user = vec![
            tol("node.kubernetes.io/not-ready", "Exists", None, Some("NoExecute")),
            tol("dedicated", "Equal", Some("storage"), Some("NoSchedule")),
            tol("dedicated", "Equal", Some("storage"), Some("NoExecute")),
        ];
        let merged = merge_tolerations(helper_tolerations(), &user);
        assert_eq!(
            merged,
            vec![
                user[1].clone(),
                user[2].clone(),
                exists("node.kubernetes.io/disk-pressure", None, None),
                user[0].clone(),
                exists("node.kubernetes.io/unreachable", Some("NoExecute"), Some(30)),
            ]
        );
    }

    #[test]
    fn keyless_user_toleration_is_kept() {
        let all = Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        };
        let merged = merge_tolerations(helper_tolerations(), std::slice::from_ref(&all));
        assert_eq!(merged[0], all);
        assert_eq!(merged.len(), 4);
    }

    #[test]
    fn affinity_merge_keeps_the_anti_affinity() {
        let terms = vec![NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: "storage".into(),
                operator: "In".into(),
                values: Some(vec!["yes".into()]),
            }]),
            match_fields: None,
        }];
        let anti = spread_over_hosts(BTreeMap::from([("a".to_string(), "b".to_string())]));
        let a = affinity(&terms, Some(anti.clone())).unwrap();
        assert_eq!(a.pod_anti_affinity, Some(anti.clone()));
        assert_eq!(
            a.node_affinity
                .unwrap()
                .required_during_scheduling_ignored_during_execution
                .unwrap()
                .node_selector_terms,
            terms
        );
        let only_anti = affinity(&[], Some(anti.clone())).unwrap();
        assert_eq!(only_anti.node_affinity, None);
        assert_eq!(only_anti.pod_anti_affinity, Some(anti));
        assert_eq!(affinity(&[], None), None);
    }
}
