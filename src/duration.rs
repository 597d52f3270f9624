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
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
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
    }
    Ok(total)
}

/// [`parse`] for clap's `value_parser`.
pub fn parse_flag(value: &str) -> Result<Duration, String> {
    parse(value).map_err(|e| e.to_string())
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
}
