//! The simulator's state: injected faults and the request log.

use super::*;

impl State {
    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }

    pub fn set_faults(&mut self, f: Faults) {
        self.faults = f;
    }

    /// For a request about to be handled: the latency to add and, if it must fail, how.
    pub fn take_fault(&mut self, method: &str, path: &str) -> (Duration, Option<Injected>) {
        let f = &mut self.faults;
        if !f.matches(method, path) {
            return (Duration::ZERO, None);
        }
        let latency = Duration::from_millis(f.latency_ms);
        if f.fail_next == 0 {
            return (latency, None);
        }
        f.fail_next -= 1;
        if let Some(point) = f.drop_connection {
            return (latency, Some(Injected::Drop(point)));
        }
        let status = if f.status == 0 { 500 } else { f.status };
        let text = f
            .error
            .clone()
            .unwrap_or_else(|| format!("injected fault (status {status})"));
        (latency, Some(Injected::Fail(ApiError::new(status, text))))
    }

    /// Appends `r` to the request log under the next sequence number.
    pub fn record(&mut self, mut r: RequestRecord) {
        self.seq += 1;
        if self.log.len() >= MAX_LOG {
            self.log.remove(0);
        }
        r.seq = self.seq;
        self.log.push(r);
    }

    pub fn requests(&self) -> Vec<RequestRecord> {
        self.log.clone()
    }

    pub fn clear_requests(&mut self) {
        self.log.clear();
    }
}
