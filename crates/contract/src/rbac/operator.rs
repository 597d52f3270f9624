//! Rules of `storageos-operator run`, derived from the calls the cluster, upgrade and Job
//! controllers make. Server-side apply that creates an object is authorised as `create` and
//! `patch`; the apply step reads live metadata first (`get`), the controllers watch their
//! children (`list`, `watch`) and prune them (`delete`). Nothing needs `update`,
//! `deletecollection` or `*`.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::{Rule, components, rule, union};

/// Namespace the operator is installed in (the rendered operands' RBAC and network rules name
/// it too).
pub const NAMESPACE: &str = "storageos-operator";
/// Name of the operator's ServiceAccount, ClusterRole(Binding) and Deployment.
pub const NAME: &str = "storageos-operator";

/// Labels that select the operator's pods.
pub fn selector() -> BTreeMap<String, String> {
    BTreeMap::from([("app.kubernetes.io/name".into(), NAME.into())])
}

/// The Lease the operator's replicas elect a leader on (in the operator's namespace).
pub const LEASE: &str = "storageos-operator-lease";
/// The ValidatingWebhookConfiguration of the install, whose `caBundle` the replicas keep.
pub const WEBHOOK_CONFIG: &str = "storageos-operator";

/// The MutatingWebhookConfigurations the operator renders (the api-manager's) or removes (the
/// Go operator's scheduler webhook before v2.4.0).
pub const WEBHOOK_CONFIGS: &[&str] = &[components::API_MANAGER_WEBHOOK_CONFIG, "storageos-scheduler-webhook"];

/// The ValidatingAdmissionPolicies (and bindings of the same names) the operator renders or
/// puts in place.
pub const ADMISSION_POLICIES: &[&str] = &[
    "storageos-encrypted-pvcs",
    "storageos-encryption-immutable",
    "storageos-encryption-key-namespace",
    super::trust::POLICY,
];

/// What the apply, watch and prune of a child kind need.
pub const MANAGE: &[&str] = &["get", "list", "watch", "create", "patch", "delete"];

/// Cluster-wide rules of the operator itself.
pub const OWN: &[Rule] = &[
    // Its own resources: finalizers and the upgrade's one spec write are merge patches; status
    // is patched. `/finalizers` update lets it set blockOwnerDeletion on the children it owns
    // where the OwnerReferencesPermissionEnforcement admission plugin runs (OpenShift).
    rule(
        &["storageos.com"],
        &["storageosclusters", "storageosupgrades", "jobs"],
        &["get", "list", "watch", "patch"],
    ),
    rule(
        &["storageos.com"],
        &["storageosclusters/status", "storageosupgrades/status", "jobs/status"],
        &["get", "patch"],
    ),
    rule(
        &["storageos.com"],
        &[
            "storageosclusters/finalizers",
            "storageosupgrades/finalizers",
            "jobs/finalizers",
        ],
        &["update"],
    ),
    // Every kind the cluster reconciler renders, watches and prunes; the Job and upgrade
    // controllers' DaemonSets; the upgrade scales Deployments and StatefulSets.
    rule(&[""], &["serviceaccounts", "secrets", "configmaps", "services"], MANAGE),
    rule(&["apps"], &["daemonsets", "deployments", "statefulsets"], MANAGE),
    rule(
        &["rbac.authorization.k8s.io"],
        &["clusterroles", "clusterrolebindings", "roles", "rolebindings"],
        MANAGE,
    ),
    rule(&["storage.k8s.io"], &["storageclasses", "csidrivers"], MANAGE),
    rule(&["networking.k8s.io"], &["ingresses"], MANAGE),
    // Admission objects: created and watched by kind (Kubernetes cannot limit those by name),
    // read, changed and deleted only by the names the operator renders or removes.
    rule(
        &["admissionregistration.k8s.io"],
        &[
            "mutatingwebhookconfigurations",
            "validatingadmissionpolicies",
            "validatingadmissionpolicybindings",
        ],
        &["list", "watch", "create"],
    ),
    rule(
        &["admissionregistration.k8s.io"],
        &["mutatingwebhookconfigurations"],
        &["get", "patch", "delete"],
    )
    .named(WEBHOOK_CONFIGS),
    rule(
        &["admissionregistration.k8s.io"],
        &["validatingadmissionpolicies", "validatingadmissionpolicybindings"],
        &["get", "patch", "delete"],
    )
    .named(ADMISSION_POLICIES),
    // The operator's own webhook: its caBundle, when the replicas issue their certificate.
    rule(
        &["admissionregistration.k8s.io"],
        &["validatingwebhookconfigurations"],
        &["get", "patch"],
    )
    .named(&[WEBHOOK_CONFIG]),
    rule(&["monitoring.coreos.com"], &["servicemonitors"], MANAGE),
    // The operand namespace is applied, never deleted; the drain guards' namespace is deleted
    // with the cluster.
    rule(&[""], &["namespaces"], &["get", "create", "patch"]),
    rule(&[""], &["namespaces"], &["delete"]).named(&[components::DRAIN_GUARD_NAMESPACE]),
    // Membership (Nodes), node pods (status, upgrade restarts, Job pods and their logs),
    // volumes in use (delete protection, apps to scale down during an upgrade).
    rule(&[""], &["nodes"], &["get", "list", "watch"]),
    rule(&[""], &["pods"], &["get", "list", "watch", "delete"]),
    rule(&[""], &["pods/log"], &["get"]),
    rule(
        &[""],
        &["persistentvolumes", "persistentvolumeclaims"],
        &["get", "list"],
    ),
    // An upgrade does not start while a drain guard's PodDisruptionBudget blocks a drain.
    rule(&["policy"], &["poddisruptionbudgets"], &["list"]),
    // Whether the ServiceMonitor CRD exists; the StorageOSCluster CRD owns the caller gate.
    rule(&["apiextensions.k8s.io"], &["customresourcedefinitions"], &["get"]).named(&[
        "servicemonitors.monitoring.coreos.com",
        "storageosclusters.storageos.com",
    ]),
    // The caller gate admits the operator's own writes of its kinds (finalizers, the pause
    // annotation); holding it also lets the operator create the ClusterRole that grants it.
    rule(&[super::trust::GROUP], &[super::trust::RESOURCE], &[super::trust::VERB]),
    rule(&["events.k8s.io"], &["events"], &["create", "patch"]),
];

/// Namespaced rules in the operator's own namespace: its leader-election Lease.
pub const LEADER_ELECTION: &[Rule] = &[
    rule(&["coordination.k8s.io"], &["leases"], &["create"]),
    rule(&["coordination.k8s.io"], &["leases"], &["get", "update", "patch"]).named(&[LEASE]),
];

/// The operator's ClusterRole: its own rules and every rule of the ClusterRoles and Roles it
/// renders (see the module docs of [`super`] for why it holds them rather than `escalate`; a
/// Role's rules are held cluster-wide, as the operand namespace is the CR's choice).
pub fn cluster_role_rules() -> Vec<PolicyRule> {
    let mut tables: Vec<&[Rule]> = vec![OWN];
    tables.extend(
        components::ROLES
            .iter()
            .chain(components::NAMESPACED_ROLES)
            .map(|r| r.rules),
    );
    union(&tables)
}

/// The operator's Role in its own namespace.
pub fn leader_election_rules() -> Vec<PolicyRule> {
    union(&[LEADER_ELECTION])
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::rbac::{has_wildcard, missing, policy_rules};

    #[test]
    fn the_operator_holds_every_rule_it_hands_out() {
        let held = cluster_role_rules();
        for role in components::ROLES.iter().chain(components::NAMESPACED_ROLES) {
            let m = missing(&held, &policy_rules(role.rules));
            assert!(m.is_empty(), "{} would be an escalation: {m:?}", role.name);
        }
    }

    #[test]
    fn the_api_manager_creates_pods_and_budgets_in_its_own_namespace_only() {
        let cluster_wide = crate::rbac::permissions(&policy_rules(components::API_MANAGER));
        for p in &cluster_wide {
            let writes = ["create", "patch"].contains(&p.verb.as_str());
            assert!(
                !(writes && (p.resource == "pods" || p.resource == "poddisruptionbudgets")),
                "cluster-wide {p}"
            );
        }
        let guards = crate::rbac::permissions(&policy_rules(components::API_MANAGER_DRAIN_GUARD));
        for (resource, verb) in [
            ("pods", "create"),
            ("poddisruptionbudgets", "create"),
            ("pods", "delete"),
        ] {
            assert!(
                guards.iter().any(|p| p.resource == resource && p.verb == verb),
                "{verb} {resource}"
            );
        }
    }

    #[test]
    fn the_api_manager_patches_nodes_only_under_its_out_of_service_role() {
        let base = crate::rbac::permissions(&policy_rules(components::API_MANAGER));
        assert!(
            !base
                .iter()
                .any(|p| p.group.is_empty() && p.resource == "nodes" && ["patch", "update"].contains(&p.verb.as_str())),
            "storageos:api-manager writes no Node: {base:?}"
        );
        let oos = crate::rbac::permissions(&policy_rules(components::API_MANAGER_OUT_OF_SERVICE));
        assert_eq!(oos.len(), 1, "{oos:?}");
        assert!(
            oos.iter()
                .all(|p| p.group.is_empty() && p.resource == "nodes" && p.verb == "patch"),
            "{oos:?}"
        );
    }

    #[test]
    fn no_wildcard_and_no_escalation_verbs() {
        let all: Vec<_> = cluster_role_rules()
            .into_iter()
            .chain(leader_election_rules())
            .collect();
        assert!(!has_wildcard(&all));
        for r in &all {
            for v in ["escalate", "bind", "impersonate"] {
                assert!(!r.verbs.iter().any(|x| x == v), "{v} in {r:?}");
            }
        }
    }
}
