//! Transport metrics of the StorageOS client, named as the Go api-manager names them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The Prometheus client default buckets, as promhttp uses them.
const BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Labels of `storageos_api_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeMethod {
    /// HTTP status code, e.g. `200`.
    pub code: String,
    /// Lower-case HTTP method, e.g. `get` (promhttp's spelling).
    pub method: String,
}

/// Labels of `storageos_api_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabel {
    /// Lower-case HTTP method.
    pub method: String,
}

fn new_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The three transport metrics. Cloning shares the same series.
#[derive(Clone, Debug)]
pub struct ApiMetrics {
    pub(crate) requests: Family<CodeMethod, Counter>,
    pub(crate) duration: Family<MethodLabel, Histogram, fn() -> Histogram>,
    pub(crate) in_flight: Gauge,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(new_histogram as fn() -> Histogram),
            in_flight: Gauge::default(),
        }
    }
}

impl ApiMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "storageos_api_requests",
            "StorageOS API requests by status code and method",
            m.requests.clone(),
        );
        registry.register(
            "storageos_api_request_duration_seconds",
            "StorageOS API request latency by method",
            m.duration.clone(),
        );
        registry.register(
            "storageos_api_in_flight_requests",
            "StorageOS API requests in flight",
            m.in_flight.clone(),
        );
        m
    }

    /// Records one answered request.
    pub(crate) fn observe(&self, method: &reqwest::Method, status: u16, seconds: f64) {
        let method = method.as_str().to_ascii_lowercase();
        self.requests
            .get_or_create(&CodeMethod {
                code: status.to_string(),
                method: method.clone(),
            })
            .inc();
        self.duration.get_or_create(&MethodLabel { method }).observe(seconds);
    }
}
