//! Every reason the operator and the api-manager put on a status condition or an event, in one
//! table ([`ALL`]).
//!
//! The condition setters (`runtime::conditions`) and the event publisher
//! (`runtime::controller::ControllerKit::event`) of the kit take only a [`Reason`], and reasons
//! are made only here and in the kit's own short table, so no reason exists outside the table. docs/troubleshooting.md has one section per reason, saying what it means
//! and what to do; `tests/troubleshooting_doc.rs` fails when a reason has none (or a section
//! names a reason that does not exist), and when code builds a condition or an event around the
//! table.

pub use operator_kit::reasons::{Kind, Reason};

/// Defines each reason as a constant and [`ALL`] as the list of them, so none is left out.
/// The kit's own reasons (apply, lenient watches) are listed first.
macro_rules! reasons {
    (kit: [$($kit:ident),*]; $($id:ident = $name:literal, $kind:ident, $on:literal, $meaning:literal;)*) => {
        pub use operator_kit::reasons::{$($kit),*};
        $(
            #[doc = $meaning]
            pub const $id: Reason = Reason::new($name, Kind::$kind, $on, $meaning);
        )*
        /// Every reason (docs/troubleshooting.md has a section for each).
        pub const ALL: &[Reason] = &[$($kit,)* $($id),*];
    };
}

reasons! {
    kit: [APPLY_FAILED, FOREIGN_OBJECT, UNDECODABLE];
    // The StorageOSCluster (operator).
    CLUSTER_READY = "ClusterReady", Condition, "StorageOSCluster",
        "Ready=True: every selected node runs a Ready StorageOS pod that the StorageOS API reports online.";
    NO_NODES_SELECTED = "NoNodesSelected", Condition, "StorageOSCluster",
        "Ready=False: no Node matches spec.nodeSelectorTerms with taints the cluster tolerates.";
    NODES_NOT_READY = "NodesNotReady", Condition, "StorageOSCluster",
        "Ready=False: some selected nodes have no Ready StorageOS pod or are not online in the StorageOS API.";
    STORAGEOS_API_UNAVAILABLE = "StorageOSAPIUnavailable", Condition, "StorageOSCluster",
        "Ready=False: the operator cannot read node health from the StorageOS API.";
    CREATING = "Creating", Condition, "StorageOSCluster",
        "Progressing=True: the cluster has not yet been Running; the message says how many nodes are ready.";
    STABLE = "Stable", Condition, "StorageOSCluster",
        "Progressing=False: every object is applied and the cluster has been Running.";
    NODES_LOST = "NodesLost", Condition, "StorageOSCluster",
        "Degraded=True: a cluster that was Running has lost ready nodes.";
    AS_EXPECTED = "AsExpected", Condition, "StorageOSCluster, StorageOSUpgrade",
        "Degraded=False: nothing is wrong.";
    SECRET_NOT_FOUND = "SecretNotFound", Condition, "StorageOSCluster",
        "Ready=False: the Secret with the StorageOS API credentials (spec.secretRefName) does not exist.";
    ETCD_TLS_SECRET_NOT_FOUND = "EtcdTLSSecretNotFound", Condition, "StorageOSCluster",
        "Ready=False: the Secret with the etcd TLS client certificate (spec.tlsEtcdSecretRefName) does not exist.";
    ALL_NODES_ELIGIBLE = "AllNodesEligible", Condition, "StorageOSCluster",
        "NodesEligible=True: every selected node reports an OS, architecture and kernel StorageOS runs on.";
    NODES_INELIGIBLE = "NodesIneligible", ConditionAndEvent, "StorageOSCluster",
        "NodesEligible=False: selected nodes report an OS, architecture or kernel StorageOS cannot run on; they are named and not counted.";
    KUBERNETES_TESTED = "KubernetesTested", Condition, "StorageOSCluster",
        "KubernetesSupported=True: the cluster runs a Kubernetes minor this release was tested on.";
    KUBERNETES_NEWER_THAN_TESTED = "KubernetesNewerThanTested", ConditionAndEvent, "StorageOSCluster",
        "KubernetesSupported=True, with a Warning event: the cluster runs a Kubernetes minor newer than the newest this release was tested on.";
    ETCD_HEALTHY = "EtcdHealthy", Condition, "StorageOSCluster",
        "KVBackendReachable=True: every endpoint of spec.kvBackend.address answers etcd's health check from the operator, with the configured TLS.";
    KV_BACKEND_NOT_SET = "KVBackendNotSet", ConditionAndEvent, "StorageOSCluster",
        "KVBackendReachable=False: spec.kvBackend.address is empty or not a list of http(s)://HOST:PORT endpoints.";
    ETCD_UNREACHABLE = "EtcdUnreachable", ConditionAndEvent, "StorageOSCluster",
        "KVBackendReachable=False: an etcd endpoint does not answer its health check from the operator (connection refused, no such host, timeout, unhealthy).";
    ETCD_TLS_INVALID = "EtcdTLSInvalid", ConditionAndEvent, "StorageOSCluster",
        "KVBackendReachable=False: the etcd TLS Secret is incomplete or not PEM, or the TLS handshake with etcd failed (a CA that did not sign etcd's certificate, a host name the certificate does not name, a client certificate etcd refuses).";
    ETCD_CLIENT_CERT_EXPIRED = "EtcdClientCertExpired", ConditionAndEvent, "StorageOSCluster",
        "KVBackendReachable=False: the etcd client certificate (etcd-client.crt) has expired.";
    INVALID_SPEC = "InvalidSpec", ConditionAndEvent, "StorageOSCluster, Job",
        "Ready=False: the spec passed admission but cannot be built into objects; the message says which field.";
    FORBIDDEN = "Forbidden", Condition, "StorageOSCluster",
        "Ready=False: the operator's RBAC refused a request; the message names the verb and resource.";
    KUBERNETES_ERROR = "KubernetesError", Condition, "StorageOSCluster",
        "Ready=False: a Kubernetes request of the reconcile failed; it is retried with backoff.";
    STORAGEOS_ERROR = "StorageOSError", Condition, "StorageOSCluster",
        "Ready=False: a StorageOS API request of the reconcile (pushing settings) failed; it is retried.";
    NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed", ConditionAndEvent, "StorageOSCluster, StorageOSUpgrade, Job",
        "Ready=False: the object is in a namespace the operator does not trust (--watch-namespaces); nothing is done.";
    SECRET_NAMESPACE_NOT_ALLOWED = "SecretNamespaceNotAllowed", Condition, "StorageOSCluster",
        "Ready=False: a Secret reference names a namespace that is neither the cluster's nor a trusted one.";
    OPERAND_NAMESPACE_NOT_ALLOWED = "OperandNamespaceNotAllowed", Condition, "StorageOSCluster",
        "Ready=False: spec.namespace is neither the cluster's namespace, kube-system nor a trusted one.";
    DUPLICATE_CLUSTER = "DuplicateCluster", Condition, "StorageOSCluster",
        "Ready=False: another StorageOSCluster is active; this one waits (phase Pending) until it is deleted.";
    FAILED_CREATION = "FailedCreation", Event, "StorageOSCluster, StorageOSUpgrade",
        "Warning: the cluster is not ready (the note says why), a second cluster waits, or an upgrade waits for another.";
    SPEC_PAUSE = "SpecPause", Condition, "StorageOSCluster",
        "Paused=True: spec.pause is true; nothing is applied or repaired.";
    UPGRADE_IN_PROGRESS = "UpgradeInProgress", Condition, "StorageOSCluster",
        "Paused=True: a StorageOSUpgrade holds the cluster while it upgrades it.";
    RESUMED = "Resumed", Condition, "StorageOSCluster",
        "Paused=False: the cluster was paused and is reconciled again.";
    DELETION_BLOCKED = "DeletionBlocked", Condition, "StorageOSCluster",
        "Ready=False: the cluster is being deleted but pods still use StorageOS volumes; the message names them.";
    TERMINATING = "Terminating", ConditionAndEvent, "StorageOSCluster",
        "The cluster is being deleted: its objects are removed (Warning event: deletion is held by pods).";
    GO_DEFAULTS = "GoDefaults", Condition, "StorageOSCluster",
        "GoDefaultImagesReplaced=True: image fields holding the Go operator's defaults are treated as unset.";
    GO_DEFAULT_IMAGES_REPLACED = "GoDefaultImagesReplaced", Event, "StorageOSCluster",
        "Normal: the image fields that held the Go operator's defaults now follow this operator's defaults.";
    FOREIGN_CSI_DRIVER = "ForeignCSIDriver", Event, "StorageOSCluster",
        "Warning: the CSIDriver csi.storageos.com existed, made by neither this operator nor the Go operator, and was taken over.";
    ADOPTED = "Adopted", Event, "StorageOSCluster",
        "Normal: an object only the Go operator used was removed while taking over its install.";
    WATCHED_NAMESPACE_MISSING = "WatchedNamespaceMissing", Event, "Pod",
        "Warning on the operator's pod: a namespace on --watch-namespaces does not exist (a typo?).";
    CHANGED_STATUS = "ChangedStatus", Event, "StorageOSCluster",
        "The number of functional StorageOS nodes changed (Normal when all are, Warning otherwise).";

    // Jobs (jobs.storageos.com, operator).
    RUNNING = "Running", Condition, "Job",
        "Ready=False, Progressing=True: the Job's pods run; the message counts the nodes done.";
    COMPLETED = "Completed", Condition, "Job, StorageOSUpgrade",
        "Ready=True: the Job is done on every node, or the upgrade finished.";
    HOST_PATH_NOT_ALLOWED = "HostPathNotAllowed", ConditionAndEvent, "Job",
        "Ready=False: spec.hostPath is not in the operator's --job-host-paths; nothing runs.";
    HOST_PATH_UNSAFE = "HostPathUnsafe", ConditionAndEvent, "Job",
        "Ready=False: a kubelet refused spec.hostPath because it resolves outside the allowed directory (a symlink).";
    DAEMON_SET_CONFLICT = "DaemonSetConflict", ConditionAndEvent, "Job",
        "Ready=False: a DaemonSet of the Job's name exists and is not the Job's.";
    JOB_COMPLETED = "JobCompleted", Event, "Job",
        "Normal: every node printed the completion word; the Job is safe to delete.";

    // StorageOSUpgrade (operator): the phases, as condition reasons.
    PENDING = "Pending", Condition, "StorageOSUpgrade",
        "Phase Pending: the upgrade waits to start (another upgrade may be running).";
    PULLING_IMAGE = "PullingImage", Condition, "StorageOSUpgrade",
        "Phase PullingImage: the new image is pulled on every StorageOS node.";
    PAUSING = "Pausing", Condition, "StorageOSUpgrade",
        "Phase Pausing: the cluster reconciler is paused and maintenance entered.";
    SCALING_DOWN = "ScalingDown", Condition, "StorageOSUpgrade",
        "Phase ScalingDown: applications that use StorageOS volumes are scaled to zero.";
    UPGRADING_NODES = "UpgradingNodes", Condition, "StorageOSUpgrade",
        "Phase UpgradingNodes: every StorageOS node pod restarts on the new image.";
    SCALING_UP = "ScalingUp", Condition, "StorageOSUpgrade",
        "Phase ScalingUp: the applications get their replicas back.";
    ROLLING_BACK = "RollingBack", ConditionAndEvent, "StorageOSUpgrade",
        "Phase RollingBack: the nodes did not prove healthy within spec.timeout; they restart on the previous image.";
    ROLLED_BACK = "RolledBack", ConditionAndEvent, "StorageOSUpgrade",
        "Phase RolledBack (Degraded=True): the nodes run the previous image again and the applications are restored.";
    VOLUMES_NOT_READY = "VolumesNotReady", ConditionAndEvent, "StorageOSUpgrade",
        "Phase Pending: a StorageOS volume is degraded or has a replica still syncing; the upgrade starts once every volume is healthy.";
    VOLUMES_UNKNOWN = "VolumesUnknown", ConditionAndEvent, "StorageOSUpgrade",
        "Phase Pending: the StorageOS volumes could not all be read, so whether an upgrade is safe cannot be told; the upgrade waits.";
    DRAIN_BLOCKED = "DrainBlocked", ConditionAndEvent, "StorageOSUpgrade, Node, PersistentVolumeClaim",
        "On a StorageOSUpgrade, phase Pending: a cordoned node holds the last copy of a volume (a drain guard's PodDisruptionBudget); the upgrade waits. On a Node, a Normal event: the node holds the last ready copy of volumes the drain policy protects (how many; the node mirror names them); a guard pod and PodDisruptionBudget make its evictions wait. On a PVC: its volume's last ready copy is on that node.";
    DRY_RUN = "DryRun", ConditionAndEvent, "StorageOSUpgrade",
        "Phase Pending: spec.dryRun is true; status.preview says what the upgrade would do, and nothing is touched.";
    INVALID_TIMEOUT = "InvalidTimeout", ConditionAndEvent, "StorageOSUpgrade",
        "Degraded=True: spec.timeout is not a duration.";
    FAILED = "Failed", Condition, "StorageOSUpgrade",
        "Phase Failed: the upgrade stopped; the Degraded condition says why.";
    REFUSED = "Refused", Condition, "StorageOSUpgrade",
        "Phase Refused: the upgrade path is not supported; nothing was touched (see Degraded).";
    DOWNGRADE = "Downgrade", ConditionAndEvent, "StorageOSUpgrade",
        "Degraded=True (phase Refused): newImage is older than the image the nodes run.";
    SKIPS_VERSION = "SkipsVersion", ConditionAndEvent, "StorageOSUpgrade",
        "Degraded=True (phase Refused): newImage skips a minor or major version.";
    UNKNOWN_VERSION = "UnknownVersion", ConditionAndEvent, "StorageOSUpgrade",
        "Degraded=True (phase Refused): the version of newImage or of the running image cannot be read from its tag.";
    NO_CLUSTER = "NoCluster", ConditionAndEvent, "StorageOSUpgrade",
        "Degraded=True: there is no StorageOSCluster to upgrade.";
    WRONG_NAMESPACE = "WrongNamespace", ConditionAndEvent, "StorageOSUpgrade",
        "Degraded=True: the active StorageOSCluster is in another namespace than the upgrade.";
    CLUSTER_DELETING = "ClusterDeleting", ConditionAndEvent, "StorageOSUpgrade",
        "Degraded=True: the StorageOSCluster is being deleted.";
    CLUSTER_GONE = "ClusterGone", ConditionAndEvent, "StorageOSUpgrade",
        "Degraded=True: the StorageOSCluster the upgrade started on no longer exists.";
    NO_NODE_DAEMON_SET = "NoNodeDaemonSet", ConditionAndEvent, "StorageOSUpgrade",
        "Degraded=True: the cluster's node DaemonSet does not exist (yet).";
    PULL_IMAGE = "PullImage", Event, "StorageOSUpgrade",
        "Normal: the new image is being pulled on every node.";
    PAUSE_CLUSTER_CTRL = "PauseClusterCtrl", Event, "StorageOSUpgrade",
        "Normal: the cluster reconciler is paused and maintenance is on.";
    UPGRADE_INIT = "UpgradeInit", Event, "StorageOSUpgrade",
        "Normal: the upgrade of the cluster started (applications are scaled down next).";
    UPGRADE_COMPLETE = "UpgradeComplete", Event, "StorageOSUpgrade",
        "Normal: StorageOS runs the new image; delete the upgrade to leave maintenance.";

    // OLM's OperatorCondition (the operator, under OLM only).
    STORAGEOS_UPGRADE_UNDER_WAY = "StorageOSUpgradeUnderWay", Condition, "OperatorCondition",
        "Upgradeable=False: a StorageOSUpgrade holds its cluster (pausing to scaling up, rolling back included); OLM waits before it replaces the operator.";
    STORAGEOS_CLUSTER_DEGRADED = "StorageOSClusterDegraded", Condition, "OperatorCondition",
        "Upgradeable=False: a StorageOSCluster is Degraded; OLM waits before it replaces the operator.";
    UPGRADE_SAFE = "UpgradeSafe", Condition, "OperatorCondition",
        "Upgradeable=True: no StorageOSUpgrade holds a cluster and no StorageOSCluster is Degraded.";

    // The api-manager.
    FENCED = "Fenced", Event, "Pod",
        "Warning: the pod's node is offline in StorageOS, so the pod was deleted to start elsewhere.";
    FENCING_SKIPPED = "FencingSkipped", Event, "Pod",
        "Warning: the pod's node is offline but the pod is not fenced: a volume of it may have no other copy.";
    FENCING_HELD = "FencingHeld", Event, "StorageOSCluster",
        "Warning: more than half the StorageOS nodes are offline at once; nothing is fenced.";
    FENCING_SUSPENDED = "FencingSuspended", Event, "Node",
        "Warning: the node is offline but an upgrade is in progress; nothing is fenced meanwhile.";
    FENCING_SKIPPED_CORDONED = "FencingSkippedCordoned", Event, "Node",
        "Warning: the node is offline but cordoned (being drained or serviced on purpose); nothing is fenced.";
    OUT_OF_SERVICE_TAINTED = "OutOfServiceTainted", Event, "Node, StorageOSCluster",
        "Warning: the node was offline in StorageOS and NotReady long enough; the api-manager tainted it out of service so its pods move.";
    OUT_OF_SERVICE_UNTAINTED = "OutOfServiceUntainted", Event, "Node, StorageOSCluster",
        "Normal: the node is back online and Ready; the api-manager removed the out-of-service taint it had applied.";
    OUT_OF_SERVICE_HELD = "OutOfServiceHeld", Event, "StorageOSCluster",
        "Warning: lost nodes are not tainted out of service: too many nodes offline at once, or an upgrade in progress.";
    DRAIN_WAITING = "DrainWaiting", Event, "Node",
        "Warning: the node is cordoned (a drain) but holds the last ready copy of volumes the drain policy protects; its evictions are refused until a copy elsewhere is ready, or until the cluster's maximum hold ends.";
    DRAIN_HOLD_EXPIRED = "DrainHoldExpired", Event, "Node, PersistentVolumeClaim",
        "Warning: a drain waited the cluster's spec.nodeMaintenance.maxDrainHold; the node's guard now allows the eviction and the volumes whose last ready copy it holds go offline with it (each PVC has this event).";
    DRAIN_UNBLOCKED = "DrainUnblocked", Event, "Node",
        "Normal: the node holds no last copy any more; its drain guard was removed and a drain proceeds.";
    STALE_ATTACHMENT_DELETED = "StaleAttachmentDeleted", Event, "PersistentVolumeClaim, Pod",
        "Warning: a VolumeAttachment of the PVC's volume that StorageOS contradicts (its node does not hold the volume, or is offline and NotReady) was deleted so that the pod waiting on another node attaches it.";
    VOLUME_CONDITION_ABNORMAL = "VolumeConditionAbnormal", Event, "PersistentVolumeClaim, Pod",
        "Warning: the PVC's StorageOS volume became degraded (a replica not ready or syncing) or unavailable (master offline with no promotable replica).";
    VOLUME_CONDITION_NORMAL = "VolumeConditionNormal", Event, "PersistentVolumeClaim, Pod",
        "Normal: the PVC's StorageOS volume is healthy again (master online, every replica ready).";
    DELETED = "Deleted", Event, "Node, Namespace",
        "Normal: the StorageOS node or namespace of this name was deleted with (or without) its Kubernetes object.";
    DELETE_RETRYING = "DeleteRetrying", Event, "Node, Namespace",
        "Warning: StorageOS refuses to delete the node or namespace yet (in use or locked); retried with backoff.";
    DELETE_SUSPENDED = "DeleteSuspended", Event, "Node, Namespace",
        "Warning: an upgrade is in progress; the StorageOS node or namespace is deleted after it.";
    LABELS_SYNCED = "LabelsSynced", Event, "Node, PersistentVolumeClaim",
        "Normal: labels were set on the StorageOS node or volume.";
    LABEL_NOT_SYNCED = "LabelNotSynced", Event, "Node, PersistentVolumeClaim",
        "Warning: a label value is invalid (or create-time only); the StorageOS setting is kept.";
    LABEL_SYNC_REJECTED = "LabelSyncRejected", Event, "Node, PersistentVolumeClaim",
        "Warning: StorageOS rejected the labels for good.";
    STORAGE_CLASS_MISMATCH = "StorageClassMismatch", Event, "PersistentVolumeClaim",
        "Warning: the PVC's StorageClass was re-created since the volume was made; labels are not synced.";
    STORAGE_CLASS_NEWER = "StorageClassNewer", Event, "PersistentVolumeClaim",
        "Warning: the PVC's StorageClass was created after the PVC; labels are not synced.";
    STORAGE_CLASS_NOT_FOUND = "StorageClassNotFound", Event, "PersistentVolumeClaim",
        "Warning: the PVC's StorageClass (or a default one) does not exist; labels are not synced.";
    CREATED = "Created", Event, "Service",
        "Normal: the Service of a shared (RWX) volume was created.";
    RESTORED = "Restored", Event, "Service",
        "Warning: hand edits of a shared volume's Service were put back.";
    UPDATED = "Updated", Event, "Service",
        "Warning: the NFS endpoint of a shared volume moved; the Service follows it.";
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn names_are_unique_camel_case_words() {
        let mut seen = BTreeSet::new();
        for r in ALL {
            assert!(seen.insert(r.name()), "{} twice", r.name());
            assert!(r.name().starts_with(|c: char| c.is_ascii_uppercase()), "{}", r.name());
            assert!(r.name().chars().all(|c| c.is_ascii_alphanumeric()), "{}", r.name());
            assert!(!r.meaning().is_empty() && !r.on().is_empty(), "{}", r.name());
            assert!(!r.meaning().contains('\n'), "{}", r.name());
        }
    }

    #[test]
    fn compares_with_strings() {
        let owned = format!("Fen{}", "ced");
        assert!(owned == FENCED);
        assert!("Fenced" == FENCED);
        assert_eq!(FENCED, "Fenced");
        assert_eq!(String::from(FENCED), "Fenced");
        assert_eq!(FENCED.to_string(), "Fenced");
    }
}
