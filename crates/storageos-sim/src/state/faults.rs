//! The simulator's state: injected faults and the request log.

use super::*;

impl State {
    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }

    pub fn set_faults(&mut self, f: Faults) {
        self.faults = f;
    }

    /// For a request about to be handled: the latency to add and, if it must fail, the
    /// status and text to fail with.
    pub fn take_fault(&mut self, method: &str, path: &str) -> (Duration, Option<ApiError>) {
        let f = &mut self.faults;
        if !f.matches(method, path) {
            return (Duration::ZERO, None);
        }
        let latency = Duration::from_millis(f.latency_ms);
        if f.fail_next == 0 {
            return (latency, None);
        }
        f.fail_next -= 1;
        let status = if f.status == 0 { 500 } else { f.status };
        let text = f
            .error
            .clone()
            .unwrap_or_else(|| format!("injected fault (status {status})"));
        (latency, Some(ApiError::new(status, text)))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &mut self,
        time: DateTime<Utc>,
        method: &str,
        path: &str,
        query: &str,
        status: u16,
        duration: Duration,
        injected: bool,
        body: Option<serde_json::Value>,
    ) {
        self.seq += 1;
        if self.log.len() >= MAX_LOG {
            self.log.remove(0);
        }
        self.log.push(RequestRecord {
            seq: self.seq,
            time,
            method: method.to_string(),
            path: path.to_string(),
            query: query.to_string(),
            status,
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            injected,
            body,
        });
    }

    pub fn requests(&self) -> Vec<RequestRecord> {
        self.log.clone()
    }

    pub fn clear_requests(&mut self) {
        self.log.clear();
    }
}
