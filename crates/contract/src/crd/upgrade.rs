//! `StorageOSUpgrade`: an offline upgrade of the StorageOS node image.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::validation;

/// Upgrade every StorageOS node to a new image, with applications scaled down meanwhile.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "storageos.com",
    version = "v1",
    kind = "StorageOSUpgrade",
    plural = "storageosupgrades",
    singular = "storageosupgrade",
    namespaced,
    status = "StorageOSUpgradeStatus",
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.newImage","description":"Node image to upgrade to."}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase","description":"Step the upgrade is at."}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "An offline upgrade of the StorageOS cluster to a new node image. Delete it afterwards to leave maintenance mode."
)]
#[serde(rename_all = "camelCase")]
pub struct StorageOSUpgradeSpec {
    /// StorageOS node image to upgrade to, for example `storageos/node:v2.4.4`. It cannot change
    /// once set: the image pulled on every node must be the one the nodes restart on.
    #[schemars(extend("x-kubernetes-validations" = validation::non_empty_immutable("newImage")))]
    pub new_image: String,

    /// Upgrade even along a path StorageOS does not support in one step: a downgrade, a skipped
    /// minor or major version, or an image whose tag gives no version. Without it such an
    /// upgrade stops in phase Refused, nothing touched; setting it then lets it start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,

    /// How long the restarted nodes have to prove healthy (every node pod on the new image and
    /// Ready, every StorageOS node online, every volume master online), counted from the start
    /// of phase UpgradingNodes, before the upgrade rolls back to the previous image. A Go
    /// duration such as `10m` or `1h30m`; 10 minutes when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"))]
    pub timeout: Option<String>,

    /// Only preview the upgrade: decide as it would start, record in status.preview the
    /// applications it would scale to zero, the image every node pulls, the nodes that restart
    /// and what would keep it from starting, and touch nothing. Set it to false to run it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
}

/// The health gate's bound when `spec.timeout` is unset.
pub const DEFAULT_UPGRADE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// Steps of an upgrade, in order. Each is recorded before it is taken, so a restarted operator
/// resumes where it stopped.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub enum UpgradePhase {
    /// Waiting to start (another upgrade may be running).
    #[default]
    Pending,
    /// Pulling the new image on every node.
    PullingImage,
    /// Pausing the cluster reconciler and entering maintenance.
    Pausing,
    /// Scaling StorageOS-backed applications to zero.
    ScalingDown,
    /// Restarting every node on the new image, then waiting for them to prove healthy (the
    /// health gate, bounded by `spec.timeout`).
    UpgradingNodes,
    /// The nodes did not prove healthy in time: restarting them on the previous image.
    RollingBack,
    /// Restoring applications to their original replicas.
    ScalingUp,
    /// Finished without upgrading: the nodes run the previous image again and the applications
    /// are restored; `status.rollback` and `status.journal` say why. Delete the upgrade to leave
    /// maintenance. (Listed before Completed so that every phase from Pausing to Completed is
    /// one that holds the cluster in maintenance.)
    RolledBack,
    /// Finished; delete the upgrade to leave maintenance.
    Completed,
    /// Stopped; the message says why and what to do.
    Failed,
    /// Not started: the path from the running image is one StorageOS does not support (a
    /// downgrade, a skipped version, an unreadable version). Nothing was touched; set
    /// `spec.force` to go ahead, or delete the upgrade.
    Refused,
}

impl UpgradePhase {
    /// Whether an upgrade at this phase holds its cluster in maintenance: from pausing it until
    /// its applications are scaled up again (rolling back included). A finished upgrade
    /// (`Completed`, `RolledBack`, `Failed`) holds nothing, whether or not anyone deletes it.
    pub fn holds_cluster(self) -> bool {
        (UpgradePhase::Pausing..=UpgradePhase::ScalingUp).contains(&self)
    }
}

/// Observed state of an upgrade.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageOSUpgradeStatus {
    /// The step the upgrade is at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<UpgradePhase>,
    /// Legacy: true once the upgrade completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<bool>,
    /// Ready, Progressing and Degraded, each with a reason and message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Applications scaled down for the upgrade, with the replicas they are restored to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaled_apps: Option<Vec<ScaledApp>>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The StorageOSCluster being upgraded, chosen when the upgrade starts (the active one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<UpgradeCluster>,
    /// The node image the nodes ran when the upgrade started: what a rollback restores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_image: Option<String>,
    /// When the current phase was entered (the health gate's timeout counts from the start of
    /// UpgradingNodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_since: Option<Time>,
    /// Why the upgrade rolled back, once it decided to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<UpgradeRollback>,
    /// What happened, one entry per phase entered, oldest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal: Option<Vec<JournalEntry>>,
    /// What the upgrade would do, while spec.dryRun is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<UpgradePreview>,
}

/// What an upgrade would do if it started now (spec.dryRun, `storageos-operator plan`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradePreview {
    /// It would start now (every check before the start passes).
    pub would_start: bool,
    /// What keeps it from starting, when something does (the reason it would wait or be refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocker: Option<String>,
    /// The image the nodes run now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_image: Option<String>,
    /// The image every node would pull, then restart on.
    pub image: String,
    /// The applications it would scale to zero (and restore afterwards).
    #[serde(default)]
    pub apps: Vec<ScaledApp>,
    /// The nodes whose StorageOS pod would restart.
    #[serde(default)]
    pub nodes: Vec<String>,
}

/// Why and to what an upgrade rolled back.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeRollback {
    /// What the health gate still saw when its timeout ran out.
    pub cause: String,
    /// The image the nodes are restarted on.
    pub image: String,
}

/// One step of an upgrade's history.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JournalEntry {
    /// When it happened.
    pub time: Time,
    /// The phase entered.
    pub phase: UpgradePhase,
    /// What happened.
    pub message: String,
}

/// The StorageOSCluster an upgrade works on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeCluster {
    /// Namespace of the StorageOSCluster.
    pub namespace: String,
    /// Name of the StorageOSCluster.
    pub name: String,
}

/// A Deployment or StatefulSet scaled to zero during the upgrade.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaledApp {
    /// `Deployment` or `StatefulSet`.
    pub kind: String,
    /// Namespace of the application.
    pub namespace: String,
    /// Name of the application.
    pub name: String,
    /// Replicas before the upgrade; restored afterwards.
    pub replicas: i32,
}
