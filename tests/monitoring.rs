//! Unit tier: the alerts (`deploy/monitoring/prometheusrule.yaml`) and the Grafana dashboard
//! (`deploy/monitoring/grafana-dashboard.json`) parse as PromQL and use only metrics that the
//! operator's and the api-manager's `/metrics` expose. The `/metrics` text comes from the very
//! registrations the two processes make; a labelled family shows in it (`# TYPE`) before any
//! work, so no work has to be driven first.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use prometheus_client::registry::Registry;
use promql_parser::parser::{self, Expr};
use promql_parser::util::{ExprVisitor, walk_expr};
use serde_json::Value;
use storageos_operator::crd::StorageOSClusterStatus;
use storageos_operator::runtime::kube::metrics::ReconcileResult;
use storageos_operator::sim::{self, Simulator};
use storageos_operator::storageos;

fn repo(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// The series names a `/metrics` text can hold, from its `# TYPE` lines.
fn exposed(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total", "_created"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    names
}

/// What both processes serve on `/metrics` once they have worked a little. Families with a
/// fixed label set (fencer outcomes, webhook failures) are at zero from the start; those whose
/// labels name what happened (controller, status code, helper function, cluster) appear with
/// their first observation, so one of each is made here: a reconcile, a cluster status, and a
/// real StorageOS request through each process's client (a login to an in-process simulator).
async fn metrics_of_both() -> BTreeSet<String> {
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let client_with = |metrics| {
        storageos::Client::with_shared_metrics(storageos::Config::new(sim.url(), "storageos", "storageos"), metrics)
            .unwrap()
    };
    let mut text = String::new();

    let mut operator = Registry::default();
    let m = storageos_operator::operator::register_metrics(&mut operator);
    m.reconcile
        .observe("storageoscluster", ReconcileResult::Error("kubernetes"), 0.1);
    let status: StorageOSClusterStatus = serde_json::from_value(serde_json::json!({})).unwrap();
    m.cluster.observe("default", "storageos", &status);
    m.cluster
        .observe_kv_backend("default", "storageos", true, Some(1_900_000_000));
    m.cluster.observe_ineligible("default", "storageos", 1);
    client_with(m.api).login().await.unwrap();
    prometheus_client::encoding::text::encode(&mut text, &operator).unwrap();

    let mut api_manager = Registry::default();
    let m = storageos_operator::apimanager::run::register_metrics(&mut api_manager);
    m.reconcile.observe("fencer", ReconcileResult::Error("kubernetes"), 0.1);
    let api = client_with(m.api);
    api.login().await.unwrap();
    m.helper.track("list_nodes", api.list_nodes()).await.unwrap();
    m.helper.count("list_nodes", "server");
    m.helper.set_drain_waiting(&[("node-a".into(), 1)]);
    prometheus_client::encoding::text::encode(&mut text, &api_manager).unwrap();
    exposed(&text)
}

/// Every metric name a PromQL expression selects.
fn selected(expr: &str) -> BTreeSet<String> {
    struct Names(BTreeSet<String>);
    impl ExprVisitor for Names {
        type Error = String;
        fn pre_visit(&mut self, e: &Expr) -> Result<bool, String> {
            let vs = match e {
                Expr::VectorSelector(vs) => vs,
                Expr::MatrixSelector(m) => &m.vs,
                _ => return Ok(true),
            };
            let name = vs
                .name
                .clone()
                .ok_or_else(|| format!("a selector without a metric name: {vs}"))?;
            self.0.insert(name);
            Ok(true)
        }
    }
    let ast = parser::parse(expr).unwrap_or_else(|e| panic!("not PromQL: {expr}: {e}"));
    let mut names = Names(BTreeSet::new());
    walk_expr(&mut names, &ast).unwrap_or_else(|e| panic!("{expr}: {e}"));
    names.0
}

fn alert_rules() -> Vec<Value> {
    let rule: Value = serde_yaml::from_str(&repo("deploy/monitoring/prometheusrule.yaml")).unwrap();
    assert_eq!(rule["kind"], "PrometheusRule");
    rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .collect()
}

fn dashboard_exprs() -> Vec<String> {
    let dashboard: Value = serde_json::from_str(&repo("deploy/monitoring/grafana-dashboard.json")).unwrap();
    fn walk(panels: &Value, out: &mut Vec<String>) {
        for p in panels.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                out.push(t["expr"].as_str().expect("every target has a PromQL expr").to_string());
            }
            walk(&p["panels"], out);
        }
    }
    let mut exprs = Vec::new();
    walk(&dashboard["panels"], &mut exprs);
    exprs
}

#[tokio::test]
async fn alerts_parse_are_documented_and_use_only_exposed_metrics() {
    let metrics = metrics_of_both().await;
    let rules = alert_rules();
    assert!(rules.len() >= 8, "{rules:#?}");
    for r in &rules {
        let name = r["alert"].as_str().expect("every rule is an alert");
        assert!(r["labels"]["severity"].is_string(), "{name}: severity");
        for a in ["summary", "description"] {
            assert!(r["annotations"][a].is_string(), "{name}: annotation {a}");
        }
        for m in selected(r["expr"].as_str().unwrap()) {
            assert!(
                metrics.contains(&m) || m == PROMETHEUS_UP,
                "alert {name} uses {m}, which no /metrics exposes"
            );
        }
    }
    // The issue's list: reconcile errors, cluster not Ready, fencing skipped and suspended,
    // webhook fail-open, certificate expiry, StorageOS API errors.
    let used: BTreeSet<String> = rules
        .iter()
        .flat_map(|r| selected(r["expr"].as_str().unwrap()))
        .collect();
    for m in [
        "storageos_nodes",
        "storageos_volumes",
        PROMETHEUS_UP,
        "controller_runtime_reconcile_errors_total",
        "storageos_cluster_ready",
        "storageos_fencer_outcomes_total",
        "storageos_webhook_failed_open_total",
        "storageos_webhook_certificate_expiry_timestamp_seconds",
        "storageos_api_requests_total",
    ] {
        assert!(used.contains(m), "no alert on {m}");
    }
    // The storage alerts and the ones for the two processes being down, by name and metric.
    let expr_of = |alert: &str| {
        rules
            .iter()
            .find(|r| r["alert"] == alert)
            .and_then(|r| r["expr"].as_str())
            .unwrap_or_else(|| panic!("no alert {alert}"))
            .to_string()
    };
    for (alert, needs) in [
        ("StorageOSNodeOffline", r#"storageos_nodes{health="offline"}"#),
        ("StorageOSVolumeDegraded", r#"storageos_volumes{health="degraded"}"#),
        (
            "StorageOSVolumeUnavailable",
            r#"storageos_volumes{health="unavailable"}"#,
        ),
        ("StorageOSOperatorDown", r#"up{job="storageos-operator-metrics"}"#),
        ("StorageOSAPIManagerDown", r#"up{job="storageos-api-manager-metrics"}"#),
    ] {
        assert!(expr_of(alert).contains(needs), "{alert}: {}", expr_of(alert));
    }
}

/// Prometheus's own per-target series, which no process exposes.
const PROMETHEUS_UP: &str = "up";

/// The operator's ServiceMonitor scrapes the Service the `up` alerts name by `job` (a
/// ServiceMonitor's job label is its Service's name), and the cluster's namespace is not in a
/// `namespace` label, which prometheus-operator would overwrite with the target's.
#[test]
fn alert_jobs_are_the_metrics_services_and_no_label_is_namespace() {
    let install = repo("deploy/operator.yaml");
    assert!(install.contains("name: storageos-operator-metrics"));
    let dashboard = repo("deploy/monitoring/grafana-dashboard.json");
    assert!(
        !dashboard.contains("{{namespace}}"),
        "the dashboard names the scrape target's namespace"
    );
    for r in alert_rules() {
        let text = serde_json::to_string(&r["annotations"]).unwrap();
        if r["expr"].as_str().unwrap().contains("storageos_cluster_ready") {
            assert!(!text.contains("$labels.namespace"), "{text}");
        }
    }
}

#[tokio::test]
async fn dashboard_queries_use_only_exposed_metrics() {
    let metrics = metrics_of_both().await;
    let exprs = dashboard_exprs();
    assert!(!exprs.is_empty());
    for e in &exprs {
        for m in selected(e) {
            assert!(
                metrics.contains(&m) || m == PROMETHEUS_UP,
                "dashboard query {e} uses {m}, which no /metrics exposes"
            );
        }
    }
}

#[tokio::test]
async fn a_missing_metric_is_caught() {
    let metrics = metrics_of_both().await;
    assert!(
        metrics.contains("storageos_api_request_duration_seconds_bucket"),
        "{metrics:#?}"
    );
    assert!(metrics.contains("controller_runtime_reconcile_total"), "{metrics:#?}");
    assert!(
        metrics.contains("storageos_sync_node_duration_seconds_bucket"),
        "{metrics:#?}"
    );
    let names = selected("sum(rate(storageos_no_such_metric_total[5m])) / on() group_left storageos_cluster_ready");
    assert!(names.iter().any(|n| !metrics.contains(n)), "{names:?}");
}
