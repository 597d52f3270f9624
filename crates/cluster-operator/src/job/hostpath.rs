//! The host directories a Job may mount. A Job's DaemonSet is created with the operator's own
//! rights and runs on every node, so whoever may create a Job could otherwise mount `/`
//! read-write on every node. The allow-list is the operator's (the `run` flag
//! `--job-host-paths`), never the Job's.
//!
//! Entries are absolute paths at or under [`ROOT`] (`/var/lib/storageos`, StorageOS's data
//! directory; admission allows nothing else, see [`crate::crd::validation::job_host_path`]). `P`
//! allows exactly `P`; `P/*` allows `P` and anything under it. The default allows exactly
//! `/var/lib/storageos`: no `/var/lib` (kubelet credentials, every pod's token, container and
//! etcd data) and no subtree. A path with an empty, `.` or `..` segment is never allowed.
//!
//! A subtree entry is an opt-in with a risk: a first Job can plant a symlink under `P`
//! (`P/x -> /`). So a path under a subtree entry is never mounted itself: the DaemonSet mounts
//! `P` and uses `subPath` for the rest ([`HostMount`]), and the kubelet refuses to start a
//! container whose `subPath` resolves outside its volume. `P` itself must not be a symlink
//! (only root on the node can make one there).

use std::fmt;
use std::str::FromStr;

/// The only directory (with what is under it) a Job may ever mount.
pub const ROOT: &str = "/var/lib/storageos";

/// The default allow-list: exactly [`ROOT`].
pub const DEFAULT: &str = "/var/lib/storageos";

/// One allowed path: exactly `path`, or `path` and everything under it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    path: String,
    subtree: bool,
}

/// The host paths Jobs may mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowList(Vec<Entry>);

/// How a Job's host path is mounted: the hostPath volume, and the part under it the container
/// sees (`subPath`), which the kubelet resolves without leaving the volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostMount {
    /// The hostPath volume's path: an entry of the allow-list.
    pub volume: String,
    /// The rest of the Job's path under `volume`, relative; None for the volume itself.
    pub sub_path: Option<String>,
}

/// Why a flag value is not an allow-list.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} is not an allowed host path: use absolute paths at or under {ROOT} without '.', '..' or empty \
     segments, optionally ending in '/*' to allow everything under it (e.g. {DEFAULT:?})"
)]
pub struct ParseError(String);

/// Whether `path` is absolute and has no empty, `.` or `..` segment (so it means what it says).
fn is_plain(path: &str) -> bool {
    path == "/"
        || path
            .strip_prefix('/')
            .is_some_and(|rest| rest.split('/').all(|s| !s.is_empty() && s != "." && s != ".."))
}

/// What is under `base` in `path` (without the separating '/'), if `path` is strictly under it.
fn under<'a>(path: &'a str, base: &str) -> Option<&'a str> {
    path.strip_prefix(base)?.strip_prefix('/')
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
                match is_plain(path) && (path == ROOT || under(path, ROOT).is_some()) {
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
        Self(vec![Entry {
            path: ROOT.into(),
            subtree: false,
        }])
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
        self.mount(path).is_some()
    }

    /// How `path` is mounted, if a Job may mount it: an exact entry is the volume itself; a path
    /// under a subtree entry is that entry's volume with the rest as `subPath`.
    pub fn mount(&self, path: &str) -> Option<HostMount> {
        if !is_plain(path) {
            return None;
        }
        if self.0.iter().any(|e| e.path == path) {
            return Some(HostMount {
                volume: path.to_string(),
                sub_path: None,
            });
        }
        self.0.iter().filter(|e| e.subtree).find_map(|e| {
            under(path, &e.path).map(|rest| HostMount {
                volume: e.path.clone(),
                sub_path: Some(rest.to_string()),
            })
        })
    }

    /// The message for a Job whose `hostPath` is not allowed.
    pub fn refusal(&self, path: &str) -> String {
        format!(
            "spec.hostPath {path:?} is not allowed: a Job may mount only {self}; \
             use one of those, or ask the operator's administrator to allow it (flag --job-host-paths, \
             paths at or under {ROOT} only)"
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_default_allow_list_is_exactly_var_lib_storageos() {
        let a = AllowList::default();
        assert_eq!(a, DEFAULT.parse().unwrap());
        assert!(a.allows("/var/lib/storageos"));
        assert_eq!(
            a.mount("/var/lib/storageos"),
            Some(HostMount {
                volume: "/var/lib/storageos".into(),
                sub_path: None
            })
        );
        for bad in [
            "/",
            "/etc",
            "/var",
            "/var/lib",
            "/var/lib/kubelet",
            "/var/lib/",
            "/var/lib/storageosx",
            "/var/lib/storageos/x",
            "/var/lib/storageos/data/x",
            "/var/lib/storageos/../../etc",
            "/var/lib/storageos/./x",
            "/var/lib//storageos",
            "var/lib",
            "",
        ] {
            assert!(!a.allows(bad), "{bad} allowed");
        }
        let m = a.refusal("/var/lib");
        assert!(
            m.contains("only /var/lib/storageos;") && m.contains("--job-host-paths"),
            "{m}"
        );
    }

    #[test]
    fn subtree_entries_mount_their_allowed_parent_with_a_sub_path() {
        let a: AllowList = "/var/lib/storageos/*".parse().unwrap();
        assert_eq!(
            a.mount("/var/lib/storageos/data/x"),
            Some(HostMount {
                volume: "/var/lib/storageos".into(),
                sub_path: Some("data/x".into())
            })
        );
        assert_eq!(
            a.mount("/var/lib/storageos"),
            Some(HostMount {
                volume: "/var/lib/storageos".into(),
                sub_path: None
            })
        );
        assert!(!a.allows("/var/lib") && !a.allows("/var/lib/storageos/../x"));
        // An exact entry under the root is its own volume.
        let exact: AllowList = "/var/lib/storageos/tasks".parse().unwrap();
        assert_eq!(exact.mount("/var/lib/storageos/tasks").unwrap().sub_path, None);
        assert!(!exact.allows("/var/lib/storageos/tasks/x"));
    }

    #[test]
    fn the_flag_cannot_allow_anything_outside_var_lib_storageos() {
        for bad in [
            "",
            "/",
            "/*",
            "/var/lib",
            "/var/lib/*",
            "/srv/tasks/*",
            "relative",
            "/var/lib/storageos/../x",
            "/a//b",
            "/var/lib/storageosx",
        ] {
            assert!(bad.parse::<AllowList>().is_err(), "{bad} parsed");
        }
    }
}
