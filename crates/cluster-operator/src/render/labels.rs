//! Label sets. The Go operator's labels and selectors are kept exactly, so an existing
//! installation is adopted (selectors are immutable); the pruning set is added on top so the
//! apply step can find every child of a cluster.

use std::collections::BTreeMap;

pub use crate::crd::contract::{MAX_LABEL_VALUE, label_value};

/// Labels as the templates see them.
pub type Labels = BTreeMap<String, String>;

/// Marks an object as managed by this operator.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "storageos-operator");
/// Names the StorageOSCluster an object belongs to.
pub const CLUSTER_LABEL: &str = "storageos.com/cluster";
/// Names the namespace of the StorageOSCluster an object belongs to.
pub const CLUSTER_NAMESPACE_LABEL: &str = "storageos.com/cluster-namespace";

/// On a StorageOSCluster, StorageOSUpgrade or Job once the operator has acted on it (put its
/// finalizer on it, started a Job's DaemonSet): the operator follows objects with this label even
/// in namespaces it no longer watches, so deleting one, or a Job left there, is still cleaned up.
/// Never copied onto what is rendered.
pub const ACTED_MARK: (&str, &str) = ("storageos.com/operator-acted", "true");
/// [`ACTED_MARK`] as a label selector.
pub const ACTED_MARK_SELECTOR: &str = "storageos.com/operator-acted=true";

/// Label key prefixes Kubernetes gives meaning to (`rbac.authorization.k8s.io/aggregate-to-view`
/// aggregates a ClusterRole into `view`): a CR label under one of them, or a subdomain of one, is
/// never copied onto a child.
pub const RESERVED_PREFIXES: [&str; 3] = ["kubernetes.io", "k8s.io", "rbac.authorization.k8s.io"];

/// Whether `key` is under a prefix Kubernetes reserves (see [`RESERVED_PREFIXES`]).
pub fn is_reserved(key: &str) -> bool {
    let Some((prefix, _)) = key.split_once('/') else {
        return false;
    };
    RESERVED_PREFIXES
        .iter()
        .any(|r| prefix == *r || prefix.strip_suffix(r).is_some_and(|sub| sub.ends_with('.')))
}

fn set(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

/// The labels on every rendered object (except the Namespace, which is never pruned): select
/// with them to find, prune or delete a cluster's children.
pub fn pruning(cluster: &str, cluster_namespace: &str) -> Labels {
    set(&[
        MANAGED_BY,
        (CLUSTER_LABEL, &label_value(cluster)),
        (CLUSTER_NAMESPACE_LABEL, cluster_namespace),
    ])
}

/// Pod Security `restricted`, enforced, warned and audited: the drain guards' namespace, where
/// nothing privileged ever runs.
pub fn restricted_namespace() -> Labels {
    set(&[
        ("pod-security.kubernetes.io/enforce", "restricted"),
        ("pod-security.kubernetes.io/enforce-version", "latest"),
        ("pod-security.kubernetes.io/warn", "restricted"),
        ("pod-security.kubernetes.io/audit", "restricted"),
    ])
}

/// The Go operator's default app labels with `component`.
fn app(cluster: &str, component: &str) -> Labels {
    set(&[
        ("app.kubernetes.io/name", "storageos"),
        ("app.kubernetes.io/instance", &label_value(cluster)),
        ("app.kubernetes.io/component", component),
        ("app.kubernetes.io/part-of", "storageos"),
        MANAGED_BY,
    ])
}

/// The Go operator's common labels: the CR's own labels except reserved ones, `app=storageos`
/// and the app labels with component `cluster`, plus the pruning set (which wins over a CR label
/// with the same key). Unlike the Go operator, a CR label does not override the
/// `app.kubernetes.io/*` labels: they say what manages the object, which a user label should not
/// change (metadata only, no selector).
pub fn common(cluster: &str, cluster_namespace: &str, cr_labels: &Labels) -> Labels {
    let mut labels: Labels = cr_labels
        .iter()
        .filter(|(k, _)| !is_reserved(k) && k.as_str() != ACTED_MARK.0)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert("app".into(), "storageos".into());
    labels.extend(app(cluster, "cluster"));
    labels.extend(pruning(cluster, cluster_namespace));
    labels
}

/// Whether `key` is one of the labels the operator itself sets on what it renders (so a CR label
/// of the same key is the operator's value, not the CR's).
pub fn is_own_key(key: &str) -> bool {
    key == "app"
        || key == "storageos_cr"
        || key == "kind"
        || app("", "").contains_key(key)
        || pruning("", "").contains_key(key)
}

/// Pod labels, which are also the (immutable) selectors, of a workload: `kind` is None for the
/// api-manager, as in the Go operator.
pub fn pod(cluster: &str, kind: Option<&str>, component: &str) -> Labels {
    let mut labels = app(cluster, component);
    labels.insert("app".into(), "storageos".into());
    labels.insert("storageos_cr".into(), label_value(cluster));
    if let Some(kind) = kind {
        labels.insert("kind".into(), kind.into());
    }
    labels
}

/// `base` with `extra` on top.
pub fn merged(base: &Labels, extra: &Labels) -> Labels {
    let mut labels = base.clone();
    labels.extend(extra.clone());
    labels
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn common_labels_carry_cr_labels_but_pruning_labels_win() {
        let cr = set(&[("team", "storage"), (CLUSTER_LABEL, "spoofed"), ACTED_MARK]);
        let l = common("c", "ns", &cr);
        assert_eq!(l["team"], "storage");
        assert!(
            !l.contains_key(ACTED_MARK.0),
            "the operator's mark on the CR stays there"
        );
        assert_eq!(l[CLUSTER_LABEL], "c");
        assert_eq!(l[CLUSTER_NAMESPACE_LABEL], "ns");
        assert_eq!(l["app.kubernetes.io/component"], "cluster");
        assert_eq!(l["app.kubernetes.io/managed-by"], "storageos-operator");
    }

    #[test]
    fn reserved_cr_labels_never_reach_children() {
        let cr = set(&[
            ("rbac.authorization.k8s.io/aggregate-to-view", "true"),
            ("kubernetes.io/role", "x"),
            ("node-role.kubernetes.io/worker", "x"),
            ("k8s.io/x", "x"),
            ("sub.k8s.io/x", "x"),
            ("team", "storage"),
            ("example.com/tier", "gold"),
            ("notkubernetes.io/ok", "kept"),
        ]);
        let l = common("c", "ns", &cr);
        for (k, _) in cr.iter().filter(|(k, _)| is_reserved(k)) {
            assert!(!l.contains_key(k), "{k} copied: {l:?}");
        }
        for kept in ["team", "example.com/tier", "notkubernetes.io/ok"] {
            assert!(l.contains_key(kept), "{kept} dropped: {l:?}");
        }
        assert!(!l.contains_key("node-role.kubernetes.io/worker"));
    }

    #[test]
    fn long_names_get_a_valid_stable_label_value() {
        // Every label value derived from a 253-character cluster name is valid.
        let name = "c".repeat(253);
        for l in [
            pruning(&name, "ns"),
            common(&name, "ns", &Labels::new()),
            pod(&name, Some("daemonset"), "x"),
        ] {
            assert!(l.values().all(|v| v.len() <= MAX_LABEL_VALUE), "{l:?}");
        }
    }

    #[test]
    fn daemonset_pod_labels_match_the_go_selector() {
        let l = pod("c", Some("daemonset"), "storageos-daemonset");
        assert_eq!(
            l,
            set(&[
                ("app", "storageos"),
                ("storageos_cr", "c"),
                ("kind", "daemonset"),
                ("app.kubernetes.io/name", "storageos"),
                ("app.kubernetes.io/instance", "c"),
                ("app.kubernetes.io/component", "storageos-daemonset"),
                ("app.kubernetes.io/part-of", "storageos"),
                ("app.kubernetes.io/managed-by", "storageos-operator"),
            ])
        );
    }
}
