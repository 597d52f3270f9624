//! Reconcile metrics with controller-runtime's names, so existing dashboards keep working.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

/// The `category` label values of `controller_runtime_reconcile_errors_total`: a small fixed
/// set, so a dashboard tells an apiserver outage from RBAC, StorageOS or a spec a person must fix.
pub mod category {
    /// A Kubernetes API read or write failed (unreachable, timed out, refused).
    pub const KUBERNETES: &str = "kubernetes";
    /// The apiserver refused a request for want of RBAC (403).
    pub const FORBIDDEN: &str = "forbidden";
    /// A write lost to a newer version of its object (409).
    pub const CONFLICT: &str = "conflict";
    /// A server-side apply of a child object was refused.
    pub const APPLY: &str = "apply";
    /// The StorageOS API failed or refused a request.
    pub const STORAGEOS: &str = "storageos";
    /// Something a person must change (a spec, an object in the way); retrying alone won't do.
    pub const USER: &str = "user";
    /// A written object was not read back as written in time.
    pub const UNVERIFIED: &str = "unverified";
    /// The object went away or was replaced during the reconcile.
    pub const GONE: &str = "gone";

    /// Every category: each controller's series start at zero for all of them.
    pub const ALL: &[&str] = &[
        KUBERNETES, FORBIDDEN, CONFLICT, APPLY, STORAGEOS, USER, UNVERIFIED, GONE,
    ];
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: String,
    category: String,
}

/// `controller_runtime_reconcile_{total,errors_total,time_seconds}`, labelled by controller;
/// the errors also by category (`ReconcileError::category` in `controller`).
#[derive(Clone)]
pub struct ReconcileMetrics {
    total: Family<ResultLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    time: Family<ControllerLabels, Histogram>,
}

/// How a reconcile ended, as controller-runtime labels it.
#[derive(Clone, Copy, Debug)]
pub enum ReconcileResult {
    /// Done; nothing scheduled.
    Success,
    /// Failed, for a reason of this category; retried with backoff.
    Error(&'static str),
    /// Done, but scheduled to run again after a delay.
    RequeueAfter,
}

impl ReconcileMetrics {
    /// Registers the metric families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let this = Self {
            total: Family::default(),
            errors: Family::default(),
            time: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.005, 2.0, 14))),
        };
        // prometheus-client appends `_total` to counters.
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            this.total.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller and category",
            this.errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            this.time.clone(),
        );
        this
    }

    /// Creates the series of `controller` at zero, so that `/metrics` lists every running
    /// controller (and dashboards and alerts see a 0, not a missing series) before its first
    /// reconcile; its errors at zero in every category, so the first error of a kind is an
    /// increase `rate()` sees, not the start of a series.
    pub fn declare(&self, controller: &str) {
        for result in ["success", "error", "requeue_after"] {
            let _ = self.total.get_or_create(&ResultLabels {
                controller: controller.into(),
                result: result.into(),
            });
        }
        for category in category::ALL {
            let _ = self.errors.get_or_create(&ErrorLabels {
                controller: controller.into(),
                category: (*category).into(),
            });
        }
        let _ = self.time.get_or_create(&ControllerLabels {
            controller: controller.into(),
        });
    }

    /// Records one reconcile of `controller` that took `seconds`.
    pub fn observe(&self, controller: &str, result: ReconcileResult, seconds: f64) {
        let result_label = match result {
            ReconcileResult::Success => "success",
            ReconcileResult::Error(_) => "error",
            ReconcileResult::RequeueAfter => "requeue_after",
        };
        self.total
            .get_or_create(&ResultLabels {
                controller: controller.into(),
                result: result_label.into(),
            })
            .inc();
        if let ReconcileResult::Error(category) = result {
            self.errors
                .get_or_create(&ErrorLabels {
                    controller: controller.into(),
                    category: category.into(),
                })
                .inc();
        }
        self.time
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .observe(seconds);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_declared_controller_is_listed_at_zero() {
        let mut registry = Registry::default();
        let m = ReconcileMetrics::register(&mut registry);
        m.declare("fencer");
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        for line in [
            r#"controller_runtime_reconcile_total{controller="fencer",result="success"} 0"#,
            r#"controller_runtime_reconcile_total{controller="fencer",result="error"} 0"#,
            r#"controller_runtime_reconcile_errors_total{controller="fencer",category="kubernetes"} 0"#,
            r#"controller_runtime_reconcile_errors_total{controller="fencer",category="storageos"} 0"#,
            r#"controller_runtime_reconcile_errors_total{controller="fencer",category="gone"} 0"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="fencer"} 0"#,
        ] {
            assert!(out.contains(line), "{line} missing from\n{out}");
        }
        assert!(!out.contains(r#"category="""#), "no series without a category:\n{out}");
    }

    #[test]
    fn names_match_controller_runtime() {
        let mut registry = Registry::default();
        let m = ReconcileMetrics::register(&mut registry);
        m.observe("storageoscluster", ReconcileResult::Success, 0.01);
        m.observe("storageoscluster", ReconcileResult::Error("kubernetes"), 0.02);
        m.observe("storageoscluster", ReconcileResult::Error("storageos"), 0.02);
        m.observe("storageoscluster", ReconcileResult::Error("storageos"), 0.02);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        assert!(
            out.contains(r#"controller_runtime_reconcile_total{controller="storageoscluster",result="success"} 1"#),
            "{out}"
        );
        assert!(
            out.contains(
                r#"controller_runtime_reconcile_errors_total{controller="storageoscluster",category="kubernetes"} 1"#
            ),
            "{out}"
        );
        assert!(
            out.contains(
                r#"controller_runtime_reconcile_errors_total{controller="storageoscluster",category="storageos"} 2"#
            ),
            "{out}"
        );
        assert!(
            out.contains(r#"controller_runtime_reconcile_time_seconds_count{controller="storageoscluster"} 4"#),
            "{out}"
        );
    }
}
