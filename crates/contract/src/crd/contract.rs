//! The rules several components share about a StorageOSCluster: the annotations through which
//! the upgrade, the api-manager and the plugin talk to the cluster reconciler, which cluster is
//! the active one, the node pods' labels, and how the upgrade finds the api-manager's drain
//! guards. Named once here, so no component reads another's internals for them.

use kube::{Resource, ResourceExt};

/// Annotation that lets a cluster be deleted while pods still use StorageOS volumes.
pub const FORCE_DELETE_ANNOTATION: &str = "storageos.com/force-delete";
/// Annotation a StorageOSUpgrade sets (to its name) to pause the cluster reconciler.
pub const PAUSED_BY_ANNOTATION: &str = "storageos.com/paused-by-upgrade";

/// Labels of the StorageOS node pods (the node DaemonSet's, as the Go operator set them).
pub const NODE_POD_SELECTOR: &str = "app=storageos,kind=daemonset";

/// The `app.kubernetes.io/component` of the api-manager's drain guards (pods and budgets).
pub const DRAIN_GUARD_COMPONENT: &str = "drain-guard";
/// The label naming a drain guard's node (the node name, or a digest of it when too long for a
/// label).
pub const DRAIN_GUARD_NODE_LABEL: &str = "storageos.com/drain-guard-node";
/// The annotation with a drain guard's full node name.
pub const DRAIN_GUARD_NODE_ANNOTATION: &str = "storageos.com/drain-guard-node";

/// The label selector of every drain guard pod and budget (`kubectl get pods,pdb -l ...`).
pub fn drain_guard_selector() -> String {
    format!("app.kubernetes.io/component={DRAIN_GUARD_COMPONENT},{DRAIN_GUARD_NODE_LABEL}")
}

/// The cluster that may act: the oldest, by creation time then namespace/name. A cluster being
/// deleted stays active until its finalizer is done, so two sets of objects never fight.
/// Only metadata is read: a list of `PartialObjectMeta` decides as well, and a cluster whose
/// spec no longer decodes still counts.
pub fn active_cluster<K: Resource>(clusters: &[K]) -> Option<&K> {
    clusters.iter().min_by(|a, b| {
        let key = |c: &K| {
            (
                c.meta().creation_timestamp.clone().map(|t| t.0),
                c.namespace().unwrap_or_default(),
                c.name_any(),
            )
        };
        key(a).cmp(&key(b))
    })
}

/// Whether `a` and `b` are the same cluster (a same-named replacement is not).
pub fn same_cluster<A: Resource, B: Resource>(a: &A, b: &B) -> bool {
    a.meta().uid == b.meta().uid && a.namespace() == b.namespace() && a.name_any() == b.name_any()
}

/// Whether StorageOS can run on a node of this OS and architecture (the Node's well-known labels
/// `kubernetes.io/os` and `kubernetes.io/arch`; empty is unknown, not excluded): why not, or None.
/// The operator's eligibility condition and the api-manager's node mirror agree through it.
pub fn ineligible_os_arch(os: &str, arch: &str) -> Option<String> {
    if !os.is_empty() && os != "linux" {
        return Some(format!("operating system {os}"));
    }
    if !arch.is_empty() && arch != "amd64" {
        return Some(format!("architecture {arch}"));
    }
    None
}

/// The field manager of every write of the operator (`run`): what it wrote is its own to update
/// and prune (apply ownership), and the upgrade, the preview and the plugin read it so.
pub const OPERATOR_FIELD_MANAGER: &str = "storageos-operator";
/// The field manager of the api-manager's writes (mirrors, drain guards, PVC labels), and the
/// component its events are reported as.
pub const API_MANAGER_FIELD_MANAGER: &str = "storageos-api-manager";
/// The field manager of the plugin's writes, and the mark on the namespaces it created.
pub const PLUGIN_FIELD_MANAGER: &str = "kubectl-storageos";
/// The Go operator's field manager: objects it wrote are the operator's to adopt.
pub const GO_OPERATOR_FIELD_MANAGER: &str = "cluster-operator";

/// The User-Agent of the project's processes on every request, so audit logs say which acted:
/// `storageos-operator/<version>` for `run`, followed by the component for the others
/// (`… api-manager`, `… plan`). The StorageOS client's default is the same.
pub fn user_agent(component: Option<&str>) -> String {
    let base = concat!("storageos-operator/", env!("CARGO_PKG_VERSION"));
    match component {
        Some(c) => format!("{base} {c}"),
        None => base.to_string(),
    }
}

/// The oldest Kubernetes the rendered objects are valid for (GA APIs of 1.33).
pub const MIN_KUBERNETES: semver::Version = semver::Version::new(1, 33, 0);

/// `spec.nodeOutOfService.offlinePolls` unset (the api-manager flag's default too).
pub const DEFAULT_OFFLINE_POLLS: u16 = 3;
/// `spec.nodeOutOfService.coolDown` unset (the api-manager flag's default too).
pub const DEFAULT_COOL_DOWN: &str = "5m";

/// The longest label value Kubernetes accepts.
pub const MAX_LABEL_VALUE: usize = 63;

/// FNV-1a: a hash that never changes between builds, since it ends up in immutable selectors.
fn stable_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A valid label value naming `name` (an object name, up to 253 characters): the name itself, or,
/// for names longer than a label value may be, a prefix of it and a stable hash of the whole name.
/// Where the full name matters, it is kept in an annotation next to the label.
pub fn label_value(name: &str) -> String {
    if name.len() <= MAX_LABEL_VALUE {
        return name.to_string();
    }
    let hash = format!("{:016x}", stable_hash(name));
    // Object names are ASCII (DNS subdomains), so byte slicing is on character boundaries.
    let keep = MAX_LABEL_VALUE - hash.len() - 1;
    let prefix = name.get(..keep).unwrap_or_default();
    let prefix = prefix.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    match prefix.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        true => format!("{prefix}-{hash}"),
        false => hash,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::crd::StorageOSCluster;

    fn cluster(ns: &str, name: &str, created: i64) -> StorageOSCluster {
        serde_json::from_value(json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}"),
                         "creationTimestamp": k8s_openapi::jiff::Timestamp::from_second(created).unwrap().to_string()},
            "spec": {"secretRefName": "s", "secretRefNamespace": "default"}
        }))
        .unwrap()
    }

    #[test]
    fn the_oldest_cluster_is_active_with_a_stable_tie_break() {
        let cs = vec![cluster("b", "x", 20), cluster("a", "y", 10), cluster("a", "z", 10)];
        let a = active_cluster(&cs).unwrap();
        assert_eq!(
            (a.namespace().unwrap(), a.name_any()),
            ("a".to_string(), "y".to_string())
        );
        assert!(active_cluster::<StorageOSCluster>(&[]).is_none());
    }

    #[test]
    fn same_name_in_another_namespace_is_not_the_same_cluster() {
        assert!(!same_cluster(&cluster("a", "x", 1), &cluster("b", "x", 1)));
        assert!(same_cluster(&cluster("a", "x", 1), &cluster("a", "x", 1)));
    }

    #[test]
    fn long_names_get_a_valid_stable_label_value() {
        let long = format!("{}.x", "a".repeat(80));
        let v = label_value(&long);
        assert!(v.len() <= MAX_LABEL_VALUE, "{v}");
        assert!(v.starts_with("aaaa") && v.chars().last().unwrap().is_ascii_alphanumeric());
        assert_eq!(v, label_value(&long));
        assert_ne!(v, label_value(&format!("{}.y", "a".repeat(80))));
        assert_eq!(label_value("short"), "short");
        assert_eq!(label_value(&"b".repeat(63)), "b".repeat(63));
        // Pinned: the value is part of immutable selectors and must never change.
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
