//! Which nodes belong to the cluster: the nodes the node DaemonSet runs on.
//!
//! Kubernetes semantics (the Go operator got these wrong): `nodeSelectorTerms` are ORed, the
//! requirements inside a term are ANDed, every operator is supported, `matchFields` is honoured,
//! and a node is excluded only by a NoSchedule/NoExecute taint the pods do not tolerate — with
//! the tolerations the DaemonSet controller adds to every daemon pod.

use std::borrow::Borrow;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Toleration};

use super::node_cache::{CachedNode, NodeTaint};

/// Tolerations the DaemonSet controller adds to every daemon pod, so these taints never keep
/// a StorageOS pod off a node.
const DAEMONSET_AUTO_TOLERATED: [&str; 7] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/pid-pressure",
    "node.kubernetes.io/unschedulable",
    "node.kubernetes.io/network-unavailable",
];

/// The names of `nodes` selected by `terms` (none means every node) whose taints `tolerations`
/// tolerate, sorted.
pub fn selected_nodes<N: Borrow<CachedNode>>(
    nodes: &[N],
    terms: Option<&[NodeSelectorTerm]>,
    tolerations: &[Toleration],
) -> Vec<String> {
    let mut names: Vec<String> = nodes
        .iter()
        .map(Borrow::borrow)
        .filter(|n| matches_terms(n, terms) && tolerates_taints(n, tolerations))
        .filter(|n| !n.name.is_empty())
        .map(|n| n.name.to_string())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Whether `node` matches any of `terms`; no terms (or an empty list) matches every node.
pub fn matches_terms(node: &CachedNode, terms: Option<&[NodeSelectorTerm]>) -> bool {
    match terms {
        None | Some([]) => true,
        Some(terms) => terms.iter().any(|t| matches_term(node, t)),
    }
}

fn matches_term(node: &CachedNode, term: &NodeSelectorTerm) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    // A term with no requirements matches no node (Kubernetes semantics).
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let name = node.name.as_str();
    exprs.iter().all(|r| matches_requirement(node.labels.get(&r.key), r))
        && fields.iter().all(|r| {
            let value = (r.key == "metadata.name").then_some(name);
            // Only metadata.name is a supported node field; anything else cannot match.
            r.key == "metadata.name" && matches_requirement(value, r)
        })
}

fn matches_requirement(value: Option<&str>, r: &NodeSelectorRequirement) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => match (
            value.and_then(number),
            values.first().map(String::as_str).and_then(number),
        ) {
            (Some(v), Some(bound)) if values.len() == 1 => {
                if r.operator == "Gt" {
                    v > bound
                } else {
                    v < bound
                }
            }
            _ => false,
        },
        _ => false,
    }
}

fn tolerates_taints(node: &CachedNode, tolerations: &[Toleration]) -> bool {
    node.taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .filter(|t| !DAEMONSET_AUTO_TOLERATED.contains(&t.key.as_str()))
        .all(|t| tolerations.iter().any(|tol| tolerates(tol, t)))
}

/// Kubernetes' `Toleration.ToleratesTaint`.
pub fn tolerates(tol: &Toleration, taint: &NodeTaint) -> bool {
    if tol
        .effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    let key = tol.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match tol.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => tol.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default(),
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, labels: serde_json::Value, taints: serde_json::Value) -> CachedNode {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}}))
            .unwrap()
    }

    fn terms(v: serde_json::Value) -> Vec<NodeSelectorTerm> {
        serde_json::from_value(v).unwrap()
    }

    fn nodes() -> Vec<CachedNode> {
        vec![
            node("a", json!({"role": "storage", "zone": "1", "cores": "8"}), json!([])),
            node("b", json!({"role": "storage", "zone": "2", "cores": "4"}), json!([])),
            node("c", json!({"role": "compute"}), json!([])),
        ]
    }

    #[test]
    fn no_terms_select_every_node() {
        assert_eq!(selected_nodes(&nodes(), None, &[]), ["a", "b", "c"]);
        assert_eq!(selected_nodes(&nodes(), Some(&[]), &[]), ["a", "b", "c"]);
    }

    #[test]
    fn expressions_in_a_term_are_anded_and_terms_are_ored() {
        let t = terms(json!([
            {"matchExpressions": [{"key": "role", "operator": "In", "values": ["storage"]},
                                  {"key": "zone", "operator": "In", "values": ["1", "3"]}]},
            {"matchExpressions": [{"key": "role", "operator": "In", "values": ["compute"]}]}
        ]));
        assert_eq!(selected_nodes(&nodes(), Some(&t), &[]), ["a", "c"]);
    }

    #[test]
    fn every_operator_and_match_fields() {
        let sel = |v| selected_nodes(&nodes(), Some(&terms(v)), &[]);
        assert_eq!(
            sel(json!([{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}])),
            ["a", "b"]
        );
        assert_eq!(
            sel(json!([{"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}])),
            ["c"]
        );
        assert_eq!(
            sel(json!([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["1"]}]}])),
            ["b", "c"]
        );
        assert_eq!(
            sel(json!([{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]}])),
            ["a"]
        );
        assert_eq!(
            sel(json!([{"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["8"]}]}])),
            ["b"]
        );
        assert_eq!(
            sel(json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b", "c"]}]}])),
            ["b", "c"]
        );
        // Gt with a non-numeric bound, unknown operators and empty terms match nothing.
        assert!(sel(json!([{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["x"]}]}])).is_empty());
        assert!(sel(json!([{"matchExpressions": [{"key": "cores", "operator": "Near"}]}])).is_empty());
        assert!(sel(json!([{}])).is_empty());
    }

    #[test]
    fn untolerated_noschedule_taints_exclude_but_daemonset_ones_do_not() {
        let ns = vec![
            node(
                "master",
                json!({}),
                json!([{"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"}]),
            ),
            node("soft", json!({}), json!([{"key": "x", "effect": "PreferNoSchedule"}])),
            node(
                "cordoned",
                json!({}),
                json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
            ),
            node(
                "dedicated",
                json!({}),
                json!([{"key": "dedicated", "value": "storage", "effect": "NoExecute"}]),
            ),
        ];
        assert_eq!(selected_nodes(&ns, None, &[]), ["cordoned", "soft"]);
        let tols: Vec<Toleration> = serde_json::from_value(json!([
            {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "storage"}
        ]))
        .unwrap();
        assert_eq!(
            selected_nodes(&ns, None, &tols),
            ["cordoned", "dedicated", "master", "soft"]
        );
        let wrong_value: Vec<Toleration> =
            serde_json::from_value(json!([{"key": "dedicated", "operator": "Equal", "value": "other"}])).unwrap();
        assert!(!selected_nodes(&ns, None, &wrong_value).contains(&"dedicated".to_string()));
        let everything: Vec<Toleration> = serde_json::from_value(json!([{"operator": "Exists"}])).unwrap();
        assert_eq!(selected_nodes(&ns, None, &everything).len(), 4);
    }
}
