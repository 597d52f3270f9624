//! What each controller is told. Built from the command line in one place
//! (`ApiManagerArgs::controllers`), so a controller never reads a raw flag and a flag's
//! meaning (floors, "0s means off") is decided once.

use std::time::Duration;

use crate::crd::DrainPolicy;
use crate::storageos_poll::PollConfig;

/// Every controller's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// How often StorageOS is polled for nodes and volumes.
    pub poll: PollConfig,
    /// The fencer; `None` when fencing is off (`spec.disableFencing`).
    pub fencer: Option<FencerConfig>,
    /// Node label sync; `None` when off.
    pub node_label: Option<LabelSyncConfig>,
    /// PVC label sync; `None` when off.
    pub pvc_label: Option<LabelSyncConfig>,
    /// Node delete sync.
    pub node_delete: DeleteSyncConfig,
    /// Namespace delete sync.
    pub namespace_delete: DeleteSyncConfig,
    /// The shared volume controller.
    pub shared_volume: SharedVolumeConfig,
    /// The StorageOSCluster (namespace, name) whose pause annotation means maintenance; `None`:
    /// any cluster's.
    pub maintenance_of: Option<(String, String)>,
    /// The drain gate's rule (shown on the mirrors, enforced by the guards).
    pub drain: DrainConfig,
    /// The drain gate's guards; `None` when no guard image is given (the gate is then only
    /// shown, not enforced).
    pub drain_guard: Option<DrainGuardConfig>,
    /// Whether VolumeAttachments StorageOS contradicts are deleted (`--enable-attach-recovery`).
    pub attach_recovery: bool,
    /// The out-of-service controller; `None` when off (the default).
    pub out_of_service: Option<OutOfServiceConfig>,
}

/// When the out-of-service controller taints and untaints nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfServiceConfig {
    /// Consecutive node polls reporting a node offline before it is tainted (at least 1).
    pub offline_polls: u16,
    /// How long a tainted node must be back (online and Ready) before the taint goes.
    pub cool_down: Duration,
}

/// The drain gate's guard pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainGuardConfig {
    /// The image the guard pods run (`storageos-operator drain-guard`).
    pub image: String,
    /// The namespace they and their budgets live in.
    pub namespace: String,
}

/// The drain gate's rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainConfig {
    /// Which volumes make a drain wait.
    pub policy: DrainPolicy,
    /// The longest a drain waits; `None`: until it is safe.
    pub max_hold: Option<Duration>,
}

/// The fencer's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FencerConfig {
    /// How long an episode waits between passes while pods are left.
    pub retry: Duration,
    /// How long an episode may last.
    pub timeout: Duration,
    /// Nodes worked on at once.
    pub workers: u16,
    /// How long a node must have been online before a new offline report starts a new episode.
    pub expiry: Duration,
}

/// A label sync's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LabelSyncConfig {
    /// Reconciles at once.
    pub workers: u16,
    /// The resync loop.
    pub resync: Loop,
}

/// A delete sync's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeleteSyncConfig {
    /// Deletes at once (at least 1).
    pub workers: u16,
    /// The garbage collection loop.
    pub gc: Loop,
}

/// The shared volume controller's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedVolumeConfig {
    /// How often a written Service or Endpoints is read back.
    pub read_back_every: Duration,
    /// How long it may take to read back as written.
    pub read_back_for: Duration,
}

/// A resync or garbage-collection loop: how long before its first run and how often after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loop {
    /// Delay before the first run (a 0s flag means 10s, as in the Go api-manager).
    pub delay: Duration,
    /// Period between runs; `None` when the interval flag is 0s (the loop is off).
    pub every: Option<Duration>,
}

impl Loop {
    /// The loop two Go-style flags describe.
    pub fn new(delay: Duration, interval: Duration) -> Self {
        Self {
            delay: if delay.is_zero() {
                Duration::from_secs(10)
            } else {
                delay
            },
            every: (!interval.is_zero()).then_some(interval),
        }
    }
}
