//! The api-manager's own metrics (docs/api-manager.md): one duration and one outcome per
//! StorageOS helper call, the shared volume pass duration and the mirror's sync durations (the
//! Go v1.2 `storageos_{sync,save,delete}_node_duration_seconds`, and their volume twins).
//!
//! The Go api-manager put the raw error string in the `error` label, so its cardinality was
//! unbounded; here the label is a short, fixed error kind (empty on success).

use std::future::Future;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::storageos;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FunctionLabels {
    function: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    function: String,
    error: String,
}

fn buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.005, 2.0, 14)
}

/// `storageos_api_helper_{duration_seconds,total}` and
/// `storageos_shared_volume_reconcile_duration_seconds`.
#[derive(Clone)]
pub struct ApiManagerMetrics {
    helper_duration: Family<FunctionLabels, Histogram>,
    helper_total: Family<OutcomeLabels, Counter>,
    shared_volume_pass: Histogram,
    fencing_held: Counter,
    fencer_outcomes: Family<OutcomeOnly, Counter>,
    out_of_service_nodes: Gauge,
    out_of_service_taints: Family<ActionOnly, Counter>,
    cert_expiry: Gauge,
    mirror: [Histogram; 6],
    nodes: Family<HealthLabel, Gauge>,
    volumes: Family<HealthLabel, Gauge>,
    drain_waiting: Family<NodeLabel, Gauge>,
    drain_holds_expired: Counter,
    attachments_deleted: Family<ReasonOnly, Counter>,
    volume_conditions: Family<ConditionOnly, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HealthLabel {
    health: String,
}

/// The health of a StorageOS node as its API says it (and `nodes.api.storageos.com` shows it).
pub const NODE_HEALTHS: [&str; 3] = ["online", "offline", "unknown"];
/// The health of a volume as `volumes.api.storageos.com` shows it (`mirror::build`).
pub const VOLUME_HEALTHS: [&str; 4] = ["healthy", "syncing", "degraded", "unavailable"];

/// Sets `family` to the number of each health in `healths`; every one of `known` is set, at
/// zero when none has it, so an alert sees the series go back to zero.
fn set_counts<'a>(family: &Family<HealthLabel, Gauge>, known: &[&str], healths: impl Iterator<Item = &'a str>) {
    let mut counts: std::collections::BTreeMap<&str, i64> = known.iter().map(|h| (*h, 0)).collect();
    for h in healths {
        *counts.entry(h).or_default() += 1;
    }
    for (health, n) in counts {
        family.get_or_create(&HealthLabel { health: health.into() }).set(n);
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeOnly {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonOnly {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionOnly {
    condition: &'static str,
}

/// Why attach recovery deleted a VolumeAttachment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachmentDeleted {
    /// Its node does not hold the volume in StorageOS and a pod on another node uses its PVC.
    Contradicted,
    /// Its node is offline in StorageOS and NotReady (or gone) and no pod of the PVC is left there.
    NodeLost,
}

impl AttachmentDeleted {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            AttachmentDeleted::Contradicted => "contradicted",
            AttachmentDeleted::NodeLost => "node_lost",
        }
    }
}

/// The volume conditions the volume health controller announces on PVCs.
pub const VOLUME_CONDITIONS: [&str; 3] = ["healthy", "degraded", "unavailable"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionOnly {
    action: &'static str,
}

/// What the fencer did about a pod (or, for `Suspended`, a node) on an offline node.
#[derive(Clone, Copy, Debug)]
pub enum FencerOutcome {
    /// The pod was deleted (event `Fenced`).
    Fenced,
    /// The pod was left alone: a volume was not known to be safe (event `FencingSkipped`).
    Skipped,
    /// An upgrade holds the cluster in maintenance (event `FencingSuspended`, once per episode).
    Suspended,
}

/// One timed step of the `api.storageos.com` mirror.
#[derive(Clone, Copy, Debug)]
pub enum MirrorStep {
    /// One pass over every node of a snapshot.
    SyncNode = 0,
    /// Writing one node mirror.
    SaveNode = 1,
    /// Deleting one orphaned node mirror.
    DeleteNode = 2,
    SyncVolume = 3,
    SaveVolume = 4,
    DeleteVolume = 5,
}

/// Metric names (after `storageos_`) and help of each [`MirrorStep`], in its order.
const MIRROR_METRICS: [(&str, &str); 6] = [
    (
        "sync_node_duration_seconds",
        "Duration of one mirror pass over the StorageOS nodes",
    ),
    (
        "save_node_duration_seconds",
        "Duration of writing one nodes.api.storageos.com object",
    ),
    (
        "delete_node_duration_seconds",
        "Duration of deleting one orphaned nodes.api.storageos.com object",
    ),
    (
        "sync_volume_duration_seconds",
        "Duration of one mirror pass over the StorageOS volumes",
    ),
    (
        "save_volume_duration_seconds",
        "Duration of writing one volumes.api.storageos.com object",
    ),
    (
        "delete_volume_duration_seconds",
        "Duration of deleting one orphaned volumes.api.storageos.com object",
    ),
];

/// The bounded `error` label of a failed helper call.
pub fn error_kind(error: &storageos::Error) -> &'static str {
    use storageos::Error as E;
    match error {
        E::NotFound { .. } => "not_found",
        E::Conflict { .. } => "conflict",
        E::Locked { .. } => "locked",
        E::StaleVersion { .. } => "stale_version",
        E::BadRequest { .. } => "bad_request",
        E::Unauthorized { .. } | E::NoToken => "unauthorized",
        E::Forbidden { .. } => "forbidden",
        E::InvalidState { .. } => "invalid_state",
        E::Server { .. } => "server",
        E::Timeout { .. } => "timeout",
        E::Transport { .. } => "transport",
        _ => "other",
    }
}

impl ApiManagerMetrics {
    /// Registers the metric families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            helper_duration: Family::new_with_constructor(|| Histogram::new(buckets())),
            helper_total: Family::default(),
            shared_volume_pass: Histogram::new(buckets()),
            fencing_held: Counter::default(),
            fencer_outcomes: Family::default(),
            out_of_service_nodes: Gauge::default(),
            out_of_service_taints: Family::default(),
            cert_expiry: Gauge::default(),
            mirror: std::array::from_fn(|_| Histogram::new(buckets())),
            nodes: Family::default(),
            volumes: Family::default(),
            drain_waiting: Family::default(),
            drain_holds_expired: Counter::default(),
            attachments_deleted: Family::default(),
            volume_conditions: Family::default(),
        };
        set_counts(&m.nodes, &NODE_HEALTHS, std::iter::empty());
        set_counts(&m.volumes, &VOLUME_HEALTHS, std::iter::empty());
        let stos = registry.sub_registry_with_prefix("storageos");
        stos.register(
            "nodes",
            "StorageOS nodes by health, at the leader's last complete read (0 on other replicas)",
            m.nodes.clone(),
        );
        stos.register(
            "volumes",
            "StorageOS volumes of Kubernetes PVCs by health, as volumes.api.storageos.com shows them, at the leader's last complete read (0 on other replicas)",
            m.volumes.clone(),
        );
        stos.register(
            "api_helper_duration_seconds",
            "Duration of StorageOS API helper calls, by function",
            m.helper_duration.clone(),
        );
        stos.register(
            "api_helper",
            "StorageOS API helper calls, by function and error kind (empty on success)",
            m.helper_total.clone(),
        );
        stos.register(
            "shared_volume_reconcile_duration_seconds",
            "Duration of one shared volume pass over every NFS-attached volume",
            m.shared_volume_pass.clone(),
        );
        stos.register(
            "fencer_held_passes",
            "Fencer polls that fenced nothing because more than half of the StorageOS nodes were offline",
            m.fencing_held.clone(),
        );
        // At zero from the start, so that an alert on `increase()` sees the first one.
        for outcome in ["fenced", "skipped", "suspended"] {
            let _ = m.fencer_outcomes.get_or_create(&OutcomeOnly { outcome });
        }
        stos.register(
            "fencer_outcomes",
            "What the fencer did on offline nodes: fenced and skipped pods, suspended episodes",
            m.fencer_outcomes.clone(),
        );
        stos.register(
            "out_of_service_nodes",
            "Kubernetes Nodes carrying the out-of-service taint the api-manager applied, at the leader's last read (0 on other replicas)",
            m.out_of_service_nodes.clone(),
        );
        for action in ["applied", "removed"] {
            let _ = m.out_of_service_taints.get_or_create(&ActionOnly { action });
        }
        stos.register(
            "out_of_service_taints",
            "Out-of-service taints the api-manager applied to lost nodes and removed from nodes back online",
            m.out_of_service_taints.clone(),
        );
        stos.register(
            "webhook_certificate_expiry_timestamp_seconds",
            "When the webhook serving certificate in use expires (Unix time)",
            m.cert_expiry.clone(),
        );
        stos.register(
            "drain_waiting_seconds",
            "How long a drain of the node has waited on its drain guard (the node is cordoned and holds the last ready copy of a protected volume), at the leader's last volume read; no series while none waits",
            m.drain_waiting.clone(),
        );
        stos.register(
            "drain_holds_expired",
            "Drain guards released because the drain waited the cluster's maximum hold",
            m.drain_holds_expired.clone(),
        );
        for reason in [AttachmentDeleted::Contradicted, AttachmentDeleted::NodeLost] {
            let _ = m
                .attachments_deleted
                .get_or_create(&ReasonOnly { reason: reason.label() });
        }
        stos.register(
            "attachments_deleted",
            "VolumeAttachments that StorageOS contradicted, deleted by attach recovery so a waiting pod attaches, by reason",
            m.attachments_deleted.clone(),
        );
        for condition in VOLUME_CONDITIONS {
            let _ = m.volume_conditions.get_or_create(&ConditionOnly { condition });
        }
        stos.register(
            "volume_condition_changes",
            "Changes of a volume's condition announced on its PVC (VolumeConditionAbnormal, VolumeConditionNormal), by the condition entered",
            m.volume_conditions.clone(),
        );
        for ((name, help), h) in MIRROR_METRICS.iter().zip(&m.mirror) {
            stos.register(*name, *help, h.clone());
        }
        m
    }

    /// The drains waiting on a guard now: (node, seconds waited); every other node's series goes.
    pub fn set_drain_waiting(&self, waiting: &[(String, i64)]) {
        self.drain_waiting.clear();
        for (node, seconds) in waiting {
            self.drain_waiting
                .get_or_create(&NodeLabel { node: node.clone() })
                .set(*seconds);
        }
    }

    /// How long the drain of `node` has waited, as `storageos_drain_waiting_seconds` shows it
    /// (None: no series, nothing waits).
    pub fn drain_waiting_seconds(&self, node: &str) -> Option<i64> {
        self.drain_waiting
            .get(&NodeLabel { node: node.into() })
            .map(|g| g.get())
    }

    /// Counts one hold that ended at the maximum.
    pub fn count_drain_hold_expired(&self) {
        self.drain_holds_expired.inc();
    }

    /// Counts one VolumeAttachment deleted by attach recovery.
    pub fn count_attachment_deleted(&self, why: AttachmentDeleted) {
        self.attachments_deleted
            .get_or_create(&ReasonOnly { reason: why.label() })
            .inc();
    }

    /// How many VolumeAttachments attach recovery deleted for `why`, as
    /// `storageos_attachments_deleted_total` shows it.
    pub fn attachments_deleted(&self, why: AttachmentDeleted) -> u64 {
        self.attachments_deleted
            .get_or_create(&ReasonOnly { reason: why.label() })
            .get()
    }

    /// Counts one announced change of a volume's condition (one of [`VOLUME_CONDITIONS`]).
    pub fn count_volume_condition(&self, condition: &'static str) {
        self.volume_conditions.get_or_create(&ConditionOnly { condition }).inc();
    }

    /// Counts one fencer outcome.
    pub fn count_fencer(&self, outcome: FencerOutcome) {
        let outcome = match outcome {
            FencerOutcome::Fenced => "fenced",
            FencerOutcome::Skipped => "skipped",
            FencerOutcome::Suspended => "suspended",
        };
        self.fencer_outcomes.get_or_create(&OutcomeOnly { outcome }).inc();
    }

    /// Counts one out-of-service taint applied (`true`) or removed.
    pub fn count_out_of_service(&self, applied: bool) {
        let action = if applied { "applied" } else { "removed" };
        self.out_of_service_taints.get_or_create(&ActionOnly { action }).inc();
    }

    /// Sets how many Nodes carry the out-of-service taint the api-manager applied.
    pub fn set_out_of_service_nodes(&self, n: i64) {
        self.out_of_service_nodes.set(n);
    }

    /// Records when the serving certificate in use expires.
    pub fn set_cert_expiry(&self, not_after: chrono::DateTime<chrono::Utc>) {
        self.cert_expiry.set(not_after.timestamp());
    }

    /// Sets `storageos_nodes{health}` from one complete node read.
    pub fn set_nodes<'a>(&self, healths: impl Iterator<Item = &'a str>) {
        set_counts(&self.nodes, &NODE_HEALTHS, healths);
    }

    /// Sets `storageos_volumes{health}` from one complete volume read.
    pub fn set_volumes<'a>(&self, healths: impl Iterator<Item = &'a str>) {
        set_counts(&self.volumes, &VOLUME_HEALTHS, healths);
    }

    /// Records the duration of one mirror step.
    pub fn observe_mirror(&self, step: MirrorStep, seconds: f64) {
        self.mirror[step as usize].observe(seconds);
    }

    /// Counts one outcome of `function` (`error` empty on success), for calls that are not a
    /// single future (for example `setup`, `refresh_token`).
    pub fn count(&self, function: &str, error: &str) {
        self.helper_total
            .get_or_create(&OutcomeLabels {
                function: function.into(),
                error: error.into(),
            })
            .inc();
    }

    /// Runs one helper call named `function` (the Go names: `list_nodes`, `delete_node`,
    /// `ensure_replicas`, ...), recording its duration and outcome.
    pub async fn track<T>(
        &self,
        function: &'static str,
        call: impl Future<Output = Result<T, storageos::Error>>,
    ) -> Result<T, storageos::Error> {
        let started = Instant::now();
        let result = call.await;
        self.helper_duration
            .get_or_create(&FunctionLabels {
                function: function.into(),
            })
            .observe(started.elapsed().as_secs_f64());
        self.count(function, result.as_ref().err().map(error_kind).unwrap_or(""));
        result
    }

    /// Counts one fencer poll held because too many nodes were offline at once.
    pub fn count_fencing_held(&self) {
        self.fencing_held.inc();
    }

    /// Records the duration of one shared volume pass.
    pub fn observe_shared_volume_pass(&self, seconds: f64) {
        self.shared_volume_pass.observe(seconds);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn render(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn health_counts_start_at_zero_and_go_back_to_it() {
        let mut registry = Registry::default();
        let m = ApiManagerMetrics::register(&mut registry);
        assert!(render(&registry).contains(r#"storageos_nodes{health="offline"} 0"#));
        assert!(render(&registry).contains(r#"storageos_volumes{health="degraded"} 0"#));
        m.set_nodes(["online", "offline", "offline"].into_iter());
        m.set_volumes(["healthy", "degraded"].into_iter());
        let text = render(&registry);
        assert!(text.contains(r#"storageos_nodes{health="offline"} 2"#), "{text}");
        assert!(text.contains(r#"storageos_nodes{health="online"} 1"#), "{text}");
        assert!(text.contains(r#"storageos_volumes{health="degraded"} 1"#), "{text}");
        m.set_nodes(["online"].into_iter());
        let text = render(&registry);
        assert!(text.contains(r#"storageos_nodes{health="offline"} 0"#), "{text}");
    }

    #[test]
    fn out_of_service_taints_are_counted_from_zero_and_tainted_nodes_gauged() {
        let mut registry = Registry::default();
        let m = ApiManagerMetrics::register(&mut registry);
        let text = render(&registry);
        assert!(
            text.contains(r#"storageos_out_of_service_taints_total{action="applied"} 0"#),
            "{text}"
        );
        assert!(text.contains("storageos_out_of_service_nodes 0"), "{text}");
        m.count_out_of_service(true);
        m.count_out_of_service(false);
        m.set_out_of_service_nodes(2);
        let text = render(&registry);
        for line in [
            r#"storageos_out_of_service_taints_total{action="applied"} 1"#,
            r#"storageos_out_of_service_taints_total{action="removed"} 1"#,
            "storageos_out_of_service_nodes 2",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    #[tokio::test]
    async fn helper_calls_are_counted_by_function_and_bounded_error_kind() {
        let mut registry = Registry::default();
        let m = ApiManagerMetrics::register(&mut registry);
        let ok: Result<u8, storageos::Error> = m.track("list_nodes", async { Ok(1) }).await;
        assert!(ok.is_ok());
        let err: Result<u8, storageos::Error> = m
            .track("delete_node", async {
                Err(storageos::Error::from_status(
                    423,
                    "DELETE",
                    "/v2/nodes/x",
                    "locked".into(),
                ))
            })
            .await;
        assert!(err.is_err());
        let text = render(&registry);
        assert!(
            text.contains(r#"storageos_api_helper_total{function="list_nodes",error=""} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"storageos_api_helper_total{function="delete_node",error="locked"} 1"#),
            "{text}"
        );
        assert!(text.contains("storageos_api_helper_duration_seconds_bucket"), "{text}");
        assert!(
            text.contains("storageos_shared_volume_reconcile_duration_seconds"),
            "{text}"
        );
    }
}
