//! Label sets. The Go operator's labels and selectors are kept exactly, so an existing
//! installation is adopted (selectors are immutable); the pruning set is added on top so the
//! apply step can find every child of a cluster.

use std::collections::BTreeMap;

/// Labels as the templates see them.
pub type Labels = BTreeMap<String, String>;

/// Marks an object as managed by this operator.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "storageos-operator");
/// Names the StorageOSCluster an object belongs to.
pub const CLUSTER_LABEL: &str = "storageos.com/cluster";
/// Names the namespace of the StorageOSCluster an object belongs to.
pub const CLUSTER_NAMESPACE_LABEL: &str = "storageos.com/cluster-namespace";

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
        (CLUSTER_LABEL, cluster),
        (CLUSTER_NAMESPACE_LABEL, cluster_namespace),
    ])
}

/// The Go operator's default app labels with `component`.
fn app(cluster: &str, component: &str) -> Labels {
    set(&[
        ("app.kubernetes.io/name", "storageos"),
        ("app.kubernetes.io/instance", cluster),
        ("app.kubernetes.io/component", component),
        ("app.kubernetes.io/part-of", "storageos"),
        MANAGED_BY,
    ])
}

/// The Go operator's common labels: the CR's own labels, `app=storageos` and the app labels with
/// component `cluster`, plus the pruning set (which wins over a CR label with the same key).
/// Unlike the Go operator, a CR label does not override the `app.kubernetes.io/*` labels: they say
/// what manages the object, which a user label should not change (metadata only, no selector).
pub fn common(cluster: &str, cluster_namespace: &str, cr_labels: &Labels) -> Labels {
    let mut labels = cr_labels.clone();
    labels.insert("app".into(), "storageos".into());
    labels.extend(app(cluster, "cluster"));
    labels.extend(pruning(cluster, cluster_namespace));
    labels
}

/// Pod labels, which are also the (immutable) selectors, of a workload: `kind` is None for the
/// api-manager, as in the Go operator.
pub fn pod(cluster: &str, kind: Option<&str>, component: &str) -> Labels {
    let mut labels = app(cluster, component);
    labels.insert("app".into(), "storageos".into());
    labels.insert("storageos_cr".into(), cluster.into());
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
        let cr = set(&[("team", "storage"), (CLUSTER_LABEL, "spoofed")]);
        let l = common("c", "ns", &cr);
        assert_eq!(l["team"], "storage");
        assert_eq!(l[CLUSTER_LABEL], "c");
        assert_eq!(l[CLUSTER_NAMESPACE_LABEL], "ns");
        assert_eq!(l["app.kubernetes.io/component"], "cluster");
        assert_eq!(l["app.kubernetes.io/managed-by"], "storageos-operator");
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
