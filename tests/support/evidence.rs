//! Proof that a component ran, for the checks that something did *not* happen: a fixed sleep
//! followed by "nothing changed" also passes when the component never ran in that window, so
//! these checks first wait for evidence of its work.

use std::time::Duration;

use storageos_operator::sim::{RequestRecord, SimHandle};

/// How long [`after_polls`] waits before it fails the test.
pub const EVIDENCE_TIMEOUT: Duration = Duration::from_secs(60);

/// Waits until the simulator has answered `n` more successful requests on `route` than it had
/// when called, and returns them. `route` is `METHOD /path` where a `{id}` segment matches any
/// one segment: `GET /v2/nodes`, `GET /v2/namespaces/{id}/volumes`. A component that polls
/// StorageOS has then run at least `n` passes since the call; a negative check made after it
/// covers those passes.
pub async fn after_polls(sim: &SimHandle, route: &str, n: usize) -> Vec<RequestRecord> {
    after_polls_within(sim, route, n, EVIDENCE_TIMEOUT).await
}

/// [`after_polls`] waiting at most `timeout` (for many polls: their intervals and a margin).
pub async fn after_polls_within(sim: &SimHandle, route: &str, n: usize, timeout: Duration) -> Vec<RequestRecord> {
    let since = sim.requests().last().map_or(0, |r| r.seq);
    super::wait_for(
        &format!("{n} more successful `{route}` requests to the simulator (proof the component ran)"),
        timeout,
        || async {
            let seen: Vec<RequestRecord> = sim
                .requests()
                .into_iter()
                .filter(|r| r.seq > since && r.status < 400 && !r.dropped && on_route(r, route))
                .collect();
            (seen.len() >= n).then_some(seen)
        },
    )
    .await
}

/// Whether `r` is a request on `route` (see [`after_polls`]).
pub fn on_route(r: &RequestRecord, route: &str) -> bool {
    let (method, path) = route.split_once(' ').unwrap_or(("GET", route));
    let want: Vec<&str> = path.split('/').collect();
    let got: Vec<&str> = r.path.split('/').collect();
    r.method == method && want.len() == got.len() && want.iter().zip(&got).all(|(w, g)| *w == "{id}" || w == g)
}

/// Sum of `controller_runtime_reconcile_total` of `controller` in a Prometheus text exposition.
pub fn reconciles_in(text: &str, controller: &str) -> u64 {
    let label = format!("controller=\"{controller}\"");
    text.lines()
        .filter(|l| l.starts_with("controller_runtime_reconcile_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// Reconcile counts of an in-process controller: the registry its
/// [`ReconcileMetrics`](storageos_operator::runtime::kube::metrics::ReconcileMetrics) were registered in.
pub struct Reconciles {
    registry: prometheus_client::registry::Registry,
    controller: &'static str,
}

impl Reconciles {
    /// A registry for `controller`'s metrics, and the metrics to hand to the controller.
    pub fn new(controller: &'static str) -> (Self, storageos_operator::runtime::kube::metrics::ReconcileMetrics) {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = storageos_operator::runtime::kube::metrics::ReconcileMetrics::register(&mut registry);
        (Self { registry, controller }, metrics)
    }

    /// How many reconciles the controller has finished.
    pub fn count(&self) -> u64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("encode metrics");
        reconciles_in(&text, self.controller)
    }

    /// Waits until the controller has finished `n` more reconciles than when called.
    pub async fn after(&self, n: u64) {
        let since = self.count();
        super::wait_for(
            &format!("{n} more reconciles of {} (proof it ran)", self.controller),
            EVIDENCE_TIMEOUT,
            || async { (self.count() >= since + n).then_some(()) },
        )
        .await;
    }
}

/// Waits until the process serving `/metrics` on `port` has finished `n` more reconciles of
/// `controller` than `since` (read it first with [`reconciles_at`]).
pub async fn after_reconciles_at(port: u16, controller: &str, since: u64, n: u64) {
    super::wait_for(
        &format!("{n} more reconciles of {controller} on :{port} (proof it ran)"),
        EVIDENCE_TIMEOUT,
        || async { (reconciles_at(port, controller).await? >= since + n).then_some(()) },
    )
    .await;
}

/// The reconcile count of `controller` in the process serving `/metrics` on `port`.
pub async fn reconciles_at(port: u16, controller: &str) -> Option<u64> {
    reconciles_at_addr(&format!("127.0.0.1:{port}"), controller).await
}

/// The reconcile count of `controller` in the process serving `/metrics` at `addr` (a pod's
/// `IP:PORT`, say).
pub async fn reconciles_at_addr(addr: &str, controller: &str) -> Option<u64> {
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    Some(reconciles_in(&text, controller))
}
