//! Durations written the Go way (`30m0s`, `8760h`, `1500ms`), as the api-manager's flags and the
//! simulator's `--token-ttl` take them.

use std::time::Duration;

/// A duration that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {value:?}: {reason}; use for example 300s, 5m, 1h or 1m30s")]
pub struct Error {
    /// The text given.
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The longest duration accepted: ten years. Longer values overflow clock arithmetic (a
/// deadline of now + u64::MAX seconds panics), and are never meant.
pub const MAX: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Parses Go-style durations (`300s`, `5m`, `1h`, `1500ms`, `1m30s`, `30m0s`) or a bare number
/// of seconds, as the Go flags of the api-manager accept.
pub fn parse(value: &str) -> Result<Duration, Error> {
    let invalid = |reason: &str| Error {
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let s = value.trim();
    if s.is_empty() {
        return Err(invalid("it is empty"));
    }
    let too_long = || invalid("longer than ten years (87600h)");
    if let Ok(secs) = s.parse::<u64>() {
        let d = Duration::from_secs(secs);
        return if d > MAX { Err(too_long()) } else { Ok(d) };
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(invalid("expected a number"));
        }
        let n: u64 = rest[..digits].parse().map_err(|_| invalid("number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "" => return Err(invalid("a unit (ms, s, m, h) is missing")),
            _ => return Err(invalid("unknown unit; use ms, s, m or h")),
        };
        total = total.saturating_add(part);
        if total > MAX {
            return Err(too_long());
        }
    }
    Ok(total)
}

/// [`parse`] for clap's `value_parser`.
pub fn parse_flag(value: &str) -> Result<Duration, String> {
    parse(value).map_err(|e| e.to_string())
}

/// [`parse_flag`] for an interval something is retried or polled at: zero would spin.
pub fn parse_interval_flag(value: &str) -> Result<Duration, String> {
    match parse_flag(value)? {
        d if d.is_zero() => Err(format!(
            "invalid interval {value:?}: it must be more than 0s, for example 5s"
        )),
        d => Ok(d),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn go_spellings_parse() {
        assert_eq!(parse("30m0s").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse("8760h").unwrap(), Duration::from_secs(8760 * 3600));
        assert_eq!(parse("0s").unwrap(), Duration::ZERO);
        assert!(parse("5 minutes").is_err());
        assert!(parse("-5s").is_err());
    }

    #[test]
    fn l4_durations_are_bounded_at_parse_time() {
        let e = parse_flag("99999999h").unwrap_err();
        assert!(e.contains("longer than ten years"), "{e}");
        assert!(parse("18446744073709551615").is_err());
        assert_eq!(parse("87600h").unwrap(), MAX);
        assert!(parse_interval_flag("0s").unwrap_err().contains("more than 0s"));
        assert_eq!(parse_interval_flag("200ms").unwrap(), Duration::from_millis(200));
    }
}
