//! Credentials found by their shape rather than their value, in any text: the userinfo of a URL
//! (`http://user:pass@etcd:2379`), a bearer token, a JWT (StorageOS session tokens are JWTs),
//! and `name=value` where the name looks like a credential (`--admin-password=…`,
//! `?token=…`). The bundle's logs can hold values no Secret it read contains.

use super::{REDACTED, credential};

/// `text` with every credential of a known shape replaced by [`REDACTED`].
pub fn scrub(text: &str) -> String {
    let text = userinfo(text);
    let text = bearer(&text);
    let text = jwt(&text);
    named(&text)
}

/// Characters of a token (base64, base64url, JWT, hex).
fn token_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~' | b'+' | b'/' | b'=')
}

/// Characters of a `name` in `name=value`.
fn name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_')
}

/// Replaces, left to right, the spans `find(text, from)` returns (start, end) with [`REDACTED`].
fn replace_spans(text: &str, find: impl Fn(&[u8], usize) -> Option<(usize, usize)>) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some((start, end)) = find(bytes, at) {
        out.push_str(&text[at..start]);
        out.push_str(REDACTED);
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// The userinfo of every `scheme://userinfo@host`.
fn userinfo(text: &str) -> String {
    replace_spans(text, |b, mut from| {
        loop {
            let i = from + find(&b[from..], b"://")?;
            let start = i + 3;
            let stop = |c: &u8| {
                matches!(c, b'/' | b'?' | b'#' | b'@' | b'"' | b'\'' | b'<' | b'>' | b',' | b'`')
                    || c.is_ascii_whitespace()
            };
            let end = b[start..].iter().position(stop).map_or(b.len(), |p| start + p);
            if end > start && b.get(end) == Some(&b'@') {
                return Some((start, end));
            }
            from = start;
        }
    })
}

/// The token after `Bearer ` (any case).
fn bearer(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    replace_spans(text, |b, mut from| {
        loop {
            let start = from + lower.get(from..)?.find("bearer ")? + "bearer ".len();
            let end = start + b[start..].iter().take_while(|c| token_char(**c)).count();
            if end - start >= 8 {
                return Some((start, end));
            }
            from = start;
        }
    })
}

/// A JWT: `eyJ…` in three base64url parts.
fn jwt(text: &str) -> String {
    replace_spans(text, |b, mut from| {
        loop {
            let start = from + find(&b[from..], b"eyJ")?;
            from = start + 3;
            if start > 0 && (b[start - 1].is_ascii_alphanumeric() || matches!(b[start - 1], b'-' | b'_')) {
                continue;
            }
            let part = |at: usize| {
                b[at..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_'))
                    .count()
            };
            let first = part(start);
            let dot1 = start + first;
            if first < 10 || b.get(dot1) != Some(&b'.') {
                continue;
            }
            let second = part(dot1 + 1);
            let dot2 = dot1 + 1 + second;
            if second == 0 || b.get(dot2) != Some(&b'.') {
                continue;
            }
            return Some((start, dot2 + 1 + part(dot2 + 1)));
        }
    })
}

/// The value of `name=value` (or `name="value"`) where the name looks like a credential.
fn named(text: &str) -> String {
    replace_spans(text, |b, mut from| {
        loop {
            let eq = from + b[from..].iter().position(|c| *c == b'=')?;
            from = eq + 1;
            let name_start = b[..eq].iter().rposition(|c| !name_char(*c)).map_or(0, |p| p + 1);
            let name = std::str::from_utf8(&b[name_start..eq]).unwrap_or_default();
            if name.is_empty() || !credential(name.trim_start_matches('-')) {
                continue;
            }
            let (start, end) = if b.get(eq + 1) == Some(&b'"') {
                let start = eq + 2;
                let len = b[start..].iter().position(|c| *c == b'"').unwrap_or(b.len() - start);
                (start, start + len)
            } else {
                let start = eq + 1;
                let len = b[start..]
                    .iter()
                    .position(|c| c.is_ascii_whitespace() || matches!(c, b'&' | b',' | b';' | b'"' | b'\''))
                    .unwrap_or(b.len() - start);
                (start, start + len)
            };
            if end > start && !b[start..end].starts_with(REDACTED.as_bytes()) {
                return Some((start, end));
            }
        }
    })
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_of_any_url_is_redacted_the_rest_kept() {
        assert_eq!(
            scrub("address: http://root:s3cret@etcd:2379,https://u:p@e2:2379/x"),
            "address: http://<redacted>@etcd:2379,https://<redacted>@e2:2379/x"
        );
        let plain = "http://etcd:2379 and mail a@b.c";
        assert_eq!(scrub(plain), plain);
        assert_eq!(scrub(&scrub("http://a:b@h")), "http://<redacted>@h");
    }

    #[test]
    fn bearer_tokens_and_jwts_leave_logs() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzdG9yYWdlb3MifQ.c2lnbmF0dXJlX2hlcmU";
        let log = format!(
            "{{\"msg\":\"GET /v2/nodes\",\"authorization\":\"Bearer abcdef0123456789\"}}\nsession {jwt} issued"
        );
        let clean = scrub(&log);
        assert!(
            !clean.contains("abcdef0123456789") && !clean.contains("c2lnbmF0dXJlX2hlcmU"),
            "{clean}"
        );
        assert!(
            clean.contains("Bearer <redacted>") && clean.contains("session <redacted> issued"),
            "{clean}"
        );
    }

    #[test]
    fn credential_named_values_are_redacted_other_names_kept() {
        let line = "args: --admin-password=hunter22 --api-token=\"t o k\" --secret-name=s url=/login?token=abc123&x=1";
        let clean = scrub(line);
        assert_eq!(
            clean,
            "args: --admin-password=<redacted> --api-token=\"<redacted>\" --secret-name=s url=/login?token=<redacted>&x=1"
        );
        assert_eq!(scrub(&clean), clean);
    }
}
