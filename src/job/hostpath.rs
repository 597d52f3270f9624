//! The host directories a Job may mount. A Job's DaemonSet is created with the operator's own
//! rights and runs on every node, so whoever may create a Job could otherwise mount `/`
//! read-write on every node. The allow-list is the operator's (the `run` flag
//! `--job-host-paths`), never the Job's.
//!
//! Entries are absolute paths. `P` allows exactly `P`; `P/*` allows `P` and anything under it.
//! The default, `/var/lib,/var/lib/storageos/*`, allows the documented cleanup Job (which mounts
//! `/var/lib` to remove `/var/lib/storageos`) and StorageOS's own data directory. A path with an
//! empty, `.` or `..` segment is never allowed, so `/var/lib/storageos/../../etc` cannot escape.

use std::fmt;
use std::str::FromStr;

/// The default allow-list (also the CRD's admission rule, see [`crate::crd::validation`]).
pub const DEFAULT: &str = "/var/lib,/var/lib/storageos/*";

/// One allowed path: exactly `path`, or `path` and everything under it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    path: String,
    subtree: bool,
}

/// The host paths Jobs may mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowList(Vec<Entry>);

/// Why a flag value is not an allow-list.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} is not an allowed host path: use absolute paths without '.', '..' or empty segments, \
     optionally ending in '/*' to allow everything under it (e.g. {DEFAULT:?})"
)]
pub struct ParseError(String);

/// Whether `path` is absolute and has no empty, `.` or `..` segment (so it means what it says).
fn is_plain(path: &str) -> bool {
    path == "/"
        || path
            .strip_prefix('/')
            .is_some_and(|rest| rest.split('/').all(|s| !s.is_empty() && s != "." && s != ".."))
}

impl FromStr for AllowList {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let entries = s
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (path, subtree) = match e.strip_suffix("/*") {
                    Some(p) => (p, true),
                    None => (e, false),
                };
                match is_plain(path) && path != "/" {
                    true => Ok(Entry {
                        path: path.to_string(),
                        subtree,
                    }),
                    false => Err(ParseError(e.to_string())),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        match entries.is_empty() {
            true => Err(ParseError(s.to_string())),
            false => Ok(Self(entries)),
        }
    }
}

impl Default for AllowList {
    fn default() -> Self {
        Self(vec![
            Entry {
                path: "/var/lib".into(),
                subtree: false,
            },
            Entry {
                path: "/var/lib/storageos".into(),
                subtree: true,
            },
        ])
    }
}

impl fmt::Display for AllowList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: Vec<String> = self
            .0
            .iter()
            .map(|e| match e.subtree {
                true => format!("{} (and anything under it)", e.path),
                false => e.path.clone(),
            })
            .collect();
        f.write_str(&shown.join(", "))
    }
}

impl AllowList {
    /// Whether a Job may mount `path`.
    pub fn allows(&self, path: &str) -> bool {
        is_plain(path)
            && self.0.iter().any(|e| {
                path == e.path
                    || (e.subtree
                        && path
                            .strip_prefix(e.path.as_str())
                            .is_some_and(|rest| rest.starts_with('/')))
            })
    }

    /// The message for a Job whose `hostPath` is not allowed.
    pub fn refusal(&self, path: &str) -> String {
        format!(
            "spec.hostPath {path:?} is not allowed: a Job may mount only {self}; \
             use one of those, or ask the operator's administrator to allow it (flag --job-host-paths)"
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn h5_the_default_allows_the_cleanup_job_and_storageos_data_only() {
        let a = AllowList::default();
        assert_eq!(a, DEFAULT.parse().unwrap());
        for ok in ["/var/lib", "/var/lib/storageos", "/var/lib/storageos/data/x"] {
            assert!(a.allows(ok), "{ok}");
        }
        for bad in [
            "/",
            "/etc",
            "/var",
            "/var/lib/kubelet",
            "/var/lib/",
            "/var/lib/storageosx",
            "/var/lib/storageos/../../etc",
            "/var/lib/storageos/./x",
            "/var/lib//storageos",
            "var/lib",
            "",
        ] {
            assert!(!a.allows(bad), "{bad} allowed");
        }
        let m = a.refusal("/");
        assert!(
            m.contains("/var/lib/storageos (and anything under it)") && m.contains("--job-host-paths"),
            "{m}"
        );
    }

    #[test]
    fn h5_a_flag_changes_the_list_and_bad_entries_are_refused() {
        let a: AllowList = "/srv/tasks/*".parse().unwrap();
        assert!(a.allows("/srv/tasks/a") && !a.allows("/var/lib"));
        for bad in ["", "/", "/*", "relative", "/a/../b", "/a//b"] {
            assert!(bad.parse::<AllowList>().is_err(), "{bad} parsed");
        }
    }
}
