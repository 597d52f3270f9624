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

/// Parses Go-style durations (`300s`, `5m`, `1h`, `1500ms`, `1m30s`, `30m0s`, `1.5h`, `500us`)
/// or a bare number of seconds, as the Go flags of the api-manager accept.
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
    // Go's time.ParseDuration: a sequence of decimal numbers, each with an optional fraction and
    // a unit (ns, us, µs, ms, s, m, h), such as `1.5h` or `2h45m`. Counted in nanoseconds.
    let mut total: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let whole_len = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let whole = &rest[..whole_len];
        rest = &rest[whole_len..];
        let mut fraction = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let len = after_dot.find(|c: char| !c.is_ascii_digit()).unwrap_or(after_dot.len());
            fraction = &after_dot[..len];
            rest = &after_dot[len..];
        }
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid("expected a number"));
        }
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let unit_ns: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(invalid("a unit (ns, us, ms, s, m, h) is missing")),
            _ => return Err(invalid("unknown unit; use ns, us, ms, s, m or h")),
        };
        // At most ten years fit comfortably: longer digits are refused rather than wrapped.
        if whole.len() > 20 || fraction.len() > 20 {
            return Err(too_long());
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_long())?
        };
        let mut part = whole.saturating_mul(unit_ns);
        if !fraction.is_empty() {
            let digits: u128 = fraction.parse().map_err(|_| invalid("expected a number"))?;
            part = part.saturating_add(digits.saturating_mul(unit_ns) / 10u128.pow(fraction.len() as u32));
        }
        total = total.saturating_add(part);
        if total > MAX.as_nanos() {
            return Err(too_long());
        }
    }
    let total = Duration::from_nanos(u64::try_from(total).map_err(|_| too_long())?);
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
    fn every_form_go_accepts_parses() {
        assert_eq!(parse("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("500us").unwrap(), Duration::from_micros(500));
        assert_eq!(parse("500µs").unwrap(), Duration::from_micros(500));
        assert_eq!(parse("10ns").unwrap(), Duration::from_nanos(10));
        assert_eq!(parse("2h45m").unwrap(), Duration::from_secs(2 * 3600 + 45 * 60));
        assert_eq!(parse(".5s").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("1.s").unwrap(), Duration::from_secs(1));
        assert!(parse(".s").is_err());
        assert!(parse("1.5").is_err(), "a fraction needs a unit");
        assert!(parse("5d").unwrap_err().to_string().contains("unknown unit"));
    }

    #[test]
    fn durations_are_bounded_at_parse_time() {
        let e = parse_flag("99999999h").unwrap_err();
        assert!(e.contains("longer than ten years"), "{e}");
        assert!(parse("18446744073709551615").is_err());
        assert_eq!(parse("87600h").unwrap(), MAX);
        assert!(parse_interval_flag("0s").unwrap_err().contains("more than 0s"));
        assert_eq!(parse_interval_flag("200ms").unwrap(), Duration::from_millis(200));
    }
}
