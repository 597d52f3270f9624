//! Rules of the ClusterRoles the operator renders for a StorageOSCluster. The templates place
//! them by role name (`{{json (lookup rbac "storageos:api-manager")}}`); the operator's own
//! ClusterRole holds their union so that it may create them.

use super::{Rule, rule};

/// A ClusterRole the operator renders: its name and rules.
#[derive(Clone, Copy, Debug)]
pub struct ComponentRole {
    pub name: &'static str,
    pub rules: &'static [Rule],
}

/// The Lease the api-manager replicas elect a leader on.
pub const API_MANAGER_LEASE: &str = "storageos-api-manager-lease";
/// The Secret holding the api-manager's webhook CA and serving certificate.
pub const API_MANAGER_WEBHOOK_SECRET: &str = "storageos-webhook";
/// The MutatingWebhookConfiguration whose `caBundle` the api-manager injects.
pub const API_MANAGER_WEBHOOK_CONFIG: &str = "storageos-mutating-webhook";

/// `storageos:api-manager`: what `storageos-operator api-manager` calls, and nothing else
/// (every rule is exercised by the integration tests, which run it under exactly this role).
pub const API_MANAGER: &[Rule] = &[
    // Node delete and node-label sync watch Nodes; the fencer reads them.
    rule(&[""], &["nodes"], &["get", "list", "watch"]),
    // Namespace delete watches Namespaces.
    rule(&[""], &["namespaces"], &["list", "watch"]),
    // The fencer lists the pods on a lost node and deletes them.
    rule(&[""], &["pods"], &["list", "delete"]),
    // PVC-label sync, the fencer's volume lookup and the shared-volume owner reference read
    // PVCs; the PVC webhook's StorageClass annotation is written by patch.
    rule(&[""], &["persistentvolumeclaims"], &["get", "list", "watch", "patch"]),
    rule(&[""], &["persistentvolumes"], &["get"]),
    // Shared volumes: a Service and Endpoints per NFS-attached volume.
    rule(
        &[""],
        &["services", "endpoints"],
        &["get", "list", "watch", "create", "update"],
    ),
    // Encryption keys: the PVC webhook reads and creates key Secrets in the PVC's namespace;
    // certificates: the webhook Secret is created, read and rotated.
    rule(&[""], &["secrets"], &["get", "create"]),
    rule(&[""], &["secrets"], &["update"]).named(&[API_MANAGER_WEBHOOK_SECRET]),
    rule(&["storage.k8s.io"], &["storageclasses"], &["get", "list", "watch"]),
    // The fencer deletes the StorageOS VolumeAttachments of fenced pods; attach recovery
    // watches them and deletes those StorageOS contradicts.
    rule(
        &["storage.k8s.io"],
        &["volumeattachments"],
        &["list", "watch", "delete"],
    ),
    // CA injection into the webhook configuration the operator renders.
    // Watched by name, so a re-created configuration gets its CA at once.
    rule(
        &["admissionregistration.k8s.io"],
        &["mutatingwebhookconfigurations"],
        &["get", "list", "watch", "patch"],
    )
    .named(&[API_MANAGER_WEBHOOK_CONFIG]),
    // Maintenance: a StorageOSCluster paused by an upgrade suspends fencing and node delete.
    rule(&["storageos.com"], &["storageosclusters"], &["get", "list", "watch"]),
    // ... only while the StorageOSUpgrade its annotation names is under way.
    rule(&["storageos.com"], &["storageosupgrades"], &["get"]),
    rule(&["events.k8s.io"], &["events"], &["create", "patch"]),
    // The StorageOS state mirror: nodes.api.storageos.com and volumes.api.storageos.com are
    // written by server-side apply (create when new; status through its subresource), orphans
    // deleted.
    rule(
        &["api.storageos.com"],
        &["nodes", "volumes"],
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    rule(&["api.storageos.com"], &["nodes/status", "volumes/status"], &["patch"]),
    // The pod mutator sends pods to the scheduler extender only while it has an available
    // replica: its Deployment, watched by name.
    rule(&["apps"], &["deployments"], &["get", "list", "watch"]).named(&["storageos-scheduler"]),
    // Leader election: creating a Lease cannot be limited by name; using it can.
    rule(&["coordination.k8s.io"], &["leases"], &["create"]),
    rule(&["coordination.k8s.io"], &["leases"], &["get", "update", "patch"]).named(&[API_MANAGER_LEASE]),
];

/// The namespace of the drain gate's guard pods and budgets: the operator makes it (Pod
/// Security `restricted`) and grants the api-manager pods and budgets there and nowhere else, so
/// the api-manager never writes pods in the operand namespace (often `kube-system`, where the
/// privileged StorageOS node pods run).
pub const DRAIN_GUARD_NAMESPACE: &str = "storageos-drain-guard";

/// The Role `storageos:api-manager-drain-guard`, bound in [`DRAIN_GUARD_NAMESPACE`] only:
/// the drain gate's guard pods and their PodDisruptionBudgets (docs/api-manager.md, "Drain
/// gate"). Written by server-side apply (`patch`, and `create` for a new one), watched, deleted
/// when the node is safe. Namespaced on purpose: pod create anywhere would let the api-manager
/// run any pod in any namespace, and in the operand namespace patch the privileged node pods.
pub const API_MANAGER_DRAIN_GUARD: &[Rule] = &[
    rule(&[""], &["pods"], &["get", "list", "watch", "create", "patch", "delete"]),
    rule(
        &["policy"],
        &["poddisruptionbudgets"],
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
];

/// `storageos:api-manager-out-of-service` (only with `spec.nodeOutOfService.automatic`): the
/// api-manager taints lost Nodes and takes its taint off again (a patch that carries the Node's
/// resourceVersion).
pub const API_MANAGER_OUT_OF_SERVICE: &[Rule] = &[rule(&[""], &["nodes"], &["patch"])];

/// `storageos:scheduler-extender-vol-checker`: the node answers the scheduler extender.
pub const VOL_CHECKER: &[Rule] = &[
    rule(&[""], &["persistentvolumes", "persistentvolumeclaims"], &["get"]),
    rule(&["storage.k8s.io"], &["storageclasses"], &["get"]),
];

/// `storageos:key-management`: the StorageOS node reads the volume encryption keys of the
/// volumes it serves, which live in the PVCs' namespaces (so cluster-wide). Read only: the
/// api-manager makes the keys (since api-manager v1.1; the Go operator still granted every
/// verb, from when the node made them). docs/security.md says why reading must stay.
pub const KEY_MANAGEMENT: &[Rule] = &[rule(&[""], &["secrets"], &["get", "list", "watch"])];

/// `storageos:init`: the init container looks up the node DaemonSet.
pub const INIT: &[Rule] = &[rule(&["apps"], &["daemonsets"], &["get"])];

/// `storageos:driver-registrar`: the CSI node driver registrar.
pub const DRIVER_REGISTRAR: &[Rule] = &[
    rule(&[""], &["nodes"], &["get", "update"]),
    rule(&[""], &["events"], &["list", "watch", "create", "update", "patch"]),
];

/// Events as the upstream CSI sidecars record them.
const SIDECAR_EVENTS: Rule = rule(&[""], &["events"], &["list", "watch", "create", "update", "patch"]);

/// `storageos:csi-provisioner`: the upstream external-provisioner's rules.
pub const CSI_PROVISIONER: &[Rule] = &[
    rule(
        &[""],
        &["persistentvolumes"],
        &["get", "list", "watch", "create", "delete"],
    ),
    rule(&[""], &["persistentvolumeclaims"], &["get", "list", "watch", "update"]),
    rule(
        &["storage.k8s.io"],
        &["storageclasses", "csinodes"],
        &["get", "list", "watch"],
    ),
    rule(&[""], &["secrets"], &["get"]),
    SIDECAR_EVENTS,
    rule(&[""], &["nodes"], &["get", "list", "watch"]),
];

/// `storageos:csi-attacher`: the upstream external-attacher's rules.
pub const CSI_ATTACHER: &[Rule] = &[
    rule(
        &[""],
        &["persistentvolumes"],
        &["get", "list", "watch", "update", "patch"],
    ),
    rule(&[""], &["nodes"], &["get", "list", "watch"]),
    rule(
        &["storage.k8s.io"],
        &["storageclasses", "csinodes"],
        &["get", "list", "watch"],
    ),
    rule(
        &["storage.k8s.io"],
        &["volumeattachments"],
        &["get", "list", "watch", "update", "patch"],
    ),
    rule(
        &["storage.k8s.io"],
        &["volumeattachments/status"],
        &["get", "update", "patch"],
    ),
    SIDECAR_EVENTS,
];

/// `storageos:csi-resizer`: the upstream external-resizer's rules.
pub const CSI_RESIZER: &[Rule] = &[
    rule(
        &[""],
        &["persistentvolumes"],
        &["get", "list", "watch", "update", "patch"],
    ),
    rule(&[""], &["persistentvolumeclaims"], &["get", "list", "watch"]),
    rule(&[""], &["persistentvolumeclaims/status"], &["update", "patch"]),
    rule(&[""], &["pods"], &["get", "list", "watch"]),
    SIDECAR_EVENTS,
];

/// `storageos:pod-fencer` (unless `spec.disableFencing`): bound to the node's ServiceAccount as
/// in the Go operator, but read only. Fencing (deleting pods and VolumeAttachments of a failed
/// node) is the api-manager's since api-manager v1.1, under its own role; the Go operator still
/// gave the privileged node container pod, pod-update and VolumeAttachment delete rights on the
/// whole cluster from StorageOS v1, when the node fenced.
pub const POD_FENCER: &[Rule] = &[
    rule(
        &[""],
        &["persistentvolumeclaims", "nodes", "pods"],
        &["get", "list", "watch"],
    ),
    rule(
        &["storage.k8s.io"],
        &["storageclasses", "volumeattachments"],
        &["get", "list", "watch"],
    ),
    SIDECAR_EVENTS,
];

/// `storageos:scheduler-extender`: the rules of `system:kube-scheduler` that a second
/// kube-scheduler needs, with its Lease limited by name.
pub const SCHEDULER_EXTENDER: &[Rule] = &[
    rule(&["", "events.k8s.io"], &["events"], &["create", "patch", "update"]),
    rule(&["coordination.k8s.io"], &["leases"], &["create"]),
    rule(&["coordination.k8s.io"], &["leases"], &["get", "update"]).named(&["storageos-scheduler"]),
    rule(
        &[""],
        &[
            "nodes",
            "namespaces",
            "services",
            "replicationcontrollers",
            "configmaps",
        ],
        &["get", "list", "watch"],
    ),
    rule(&[""], &["pods"], &["get", "list", "watch", "delete"]),
    rule(&[""], &["bindings", "pods/binding"], &["create"]),
    rule(&[""], &["pods/status"], &["patch", "update"]),
    rule(
        &[""],
        &["persistentvolumes", "persistentvolumeclaims"],
        &["get", "list", "watch", "patch", "update"],
    ),
    rule(&["apps"], &["replicasets", "statefulsets"], &["get", "list", "watch"]),
    rule(&["policy"], &["poddisruptionbudgets"], &["get", "list", "watch"]),
    rule(
        &["storage.k8s.io"],
        &[
            "storageclasses",
            "csinodes",
            "csidrivers",
            "csistoragecapacities",
            "volumeattachments",
        ],
        &["get", "list", "watch"],
    ),
    rule(
        &["resource.k8s.io"],
        &["resourceclaims", "resourceslices", "deviceclasses"],
        &["get", "list", "watch"],
    ),
    rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
    rule(&["authorization.k8s.io"], &["subjectaccessreviews"], &["create"]),
];

/// `storageos:openshift-scc` (OpenShift only): the privileged SecurityContextConstraints.
pub const OPENSHIFT_SCC: &[Rule] =
    &[rule(&["security.openshift.io"], &["securitycontextconstraints"], &["use"]).named(&["privileged"])];

/// Every ClusterRole the operator may render, by name.
pub const ROLES: &[ComponentRole] = &[
    ComponentRole {
        name: "storageos:api-manager",
        rules: API_MANAGER,
    },
    ComponentRole {
        name: "storageos:scheduler-extender-vol-checker",
        rules: VOL_CHECKER,
    },
    ComponentRole {
        name: "storageos:key-management",
        rules: KEY_MANAGEMENT,
    },
    ComponentRole {
        name: "storageos:init",
        rules: INIT,
    },
    ComponentRole {
        name: "storageos:driver-registrar",
        rules: DRIVER_REGISTRAR,
    },
    ComponentRole {
        name: "storageos:csi-provisioner",
        rules: CSI_PROVISIONER,
    },
    ComponentRole {
        name: "storageos:csi-attacher",
        rules: CSI_ATTACHER,
    },
    ComponentRole {
        name: "storageos:csi-resizer",
        rules: CSI_RESIZER,
    },
    ComponentRole {
        name: "storageos:api-manager-out-of-service",
        rules: API_MANAGER_OUT_OF_SERVICE,
    },
    ComponentRole {
        name: "storageos:pod-fencer",
        rules: POD_FENCER,
    },
    ComponentRole {
        name: "storageos:scheduler-extender",
        rules: SCHEDULER_EXTENDER,
    },
    ComponentRole {
        name: "storageos:openshift-scc",
        rules: OPENSHIFT_SCC,
    },
];

/// Every Role (namespaced, in the operand namespace) the operator may render, by name. The
/// operator holds their rules cluster-wide ([`super::operator::cluster_role_rules`]): it cannot
/// know the operand namespace in advance.
pub const NAMESPACED_ROLES: &[ComponentRole] = &[ComponentRole {
    name: "storageos:api-manager-drain-guard",
    rules: API_MANAGER_DRAIN_GUARD,
}];

/// `storageos:api-manager` for an api-manager whose `-webhook-config-mutating` names
/// `webhook_config` (the operator renders it with [`API_MANAGER_WEBHOOK_CONFIG`]).
pub fn api_manager_rules(webhook_config: &str) -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    let mut rules = super::policy_rules(API_MANAGER);
    for name in rules.iter_mut().flat_map(|r| r.resource_names.iter_mut().flatten()) {
        if name == API_MANAGER_WEBHOOK_CONFIG {
            *name = webhook_config.to_string();
        }
    }
    rules
}

/// The template values: role name (ClusterRole or Role) → rules in the Kubernetes form.
pub fn template_values() -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = ROLES
        .iter()
        .chain(NAMESPACED_ROLES)
        .map(|r| {
            (
                r.name.to_string(),
                serde_json::to_value(super::policy_rules(r.rules)).unwrap_or_default(),
            )
        })
        .collect();
    serde_json::Value::Object(map)
}
