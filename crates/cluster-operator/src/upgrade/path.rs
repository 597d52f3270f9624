//! Which node image upgrades StorageOS supports in one step (pure), for the StorageOSUpgrade
//! controller and `kubectl storageos upgrade` alike: no downgrade, no skipped minor or major
//! version, and only images whose tag says their version; `force` allows any of them. An
//! offline upgrade restarts every node, so a path StorageOS does not support is refused before
//! anything is touched.

use std::fmt;

use crate::reasons::{self, Reason};

/// Why the path from the running image to the requested one is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathError {
    /// The version of one of the images cannot be read from its tag.
    Unknown { from: String, to: String },
    /// The requested image is older than the running one.
    Downgrade { from: String, to: String },
    /// The requested image skips a minor or major version.
    Skip { from: String, to: String },
}

impl PathError {
    /// The condition and event reason.
    pub fn reason(&self) -> Reason {
        match self {
            Self::Unknown { .. } => reasons::UNKNOWN_VERSION,
            Self::Downgrade { .. } => reasons::DOWNGRADE,
            Self::Skip { .. } => reasons::SKIPS_VERSION,
        }
    }
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown { from, to } => write!(
                f,
                "cannot compare the versions of {from} and {to} (a tag like v2.4.2 says the version): use a versioned image, or force the upgrade"
            ),
            Self::Downgrade { from, to } => write!(
                f,
                "refusing to downgrade StorageOS from {from} to {to}: StorageOS does not support downgrades; force it only if you know the data format allows it"
            ),
            Self::Skip { from, to } => write!(
                f,
                "{from} to {to} skips a minor or major version, which StorageOS does not support in one step: upgrade through each minor version, or force it"
            ),
        }
    }
}

impl std::error::Error for PathError {}

/// The version in an image's tag (`storageos/node:v2.4.2` → 2.4.2).
pub fn image_version(image: &str) -> Option<semver::Version> {
    let tag = image.rsplit_once(':')?.1;
    if tag.contains('/') {
        return None;
    }
    crate::render::parse_k8s_version(tag).ok()
}

/// `image` with its tag replaced by `v<version>`.
pub fn with_version(image: &str, version: &str) -> String {
    let repo = match image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => image,
    };
    format!("{repo}:v{}", version.trim_start_matches('v'))
}

/// Whether StorageOS can go from image `from` to image `to` in one offline upgrade; `force`
/// allows every path. The same version is allowed (it restarts the nodes on it).
pub fn check(from: &str, to: &str, force: bool) -> Result<(), PathError> {
    if force {
        return Ok(());
    }
    let pair = || (from.to_string(), to.to_string());
    let (Some(f), Some(t)) = (image_version(from), image_version(to)) else {
        let (from, to) = pair();
        return Err(PathError::Unknown { from, to });
    };
    if t < f {
        let (from, to) = pair();
        return Err(PathError::Downgrade { from, to });
    }
    if t.major != f.major || t.minor > f.minor + 1 {
        let (from, to) = pair();
        return Err(PathError::Skip { from, to });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_downgrade_a_skipped_version_and_an_unreadable_tag_are_refused_unless_forced() {
        let from = "storageos/node:v2.4.2";
        for ok in [
            "storageos/node:v2.4.2",
            "storageos/node:v2.4.4",
            "storageos/node:v2.5.0",
        ] {
            assert_eq!(check(from, ok, false), Ok(()), "{ok}");
        }
        let refused = [
            ("storageos/node:v2.3.0", "Downgrade"),
            ("storageos/node:v2.4.1", "Downgrade"),
            ("storageos/node:v2.6.0", "SkipsVersion"),
            ("storageos/node:v3.0.0", "SkipsVersion"),
            ("storageos/node:latest", "UnknownVersion"),
            ("storageos/node@sha256:0123", "UnknownVersion"),
        ];
        for (to, reason) in refused {
            let e = check(from, to, false).unwrap_err();
            assert_eq!(e.reason().name(), reason, "{to}");
            assert!(e.to_string().contains(to), "{e}");
            assert_eq!(check(from, to, true), Ok(()), "forced {to}");
        }
        assert_eq!(
            check("storageos/node:custom", "storageos/node:v2.5.0", false)
                .unwrap_err()
                .reason(),
            "UnknownVersion"
        );
    }

    #[test]
    fn versions_become_tags_of_the_same_repository() {
        assert_eq!(with_version("storageos/node:v2.4.2", "2.5.0"), "storageos/node:v2.5.0");
        assert_eq!(
            with_version("reg:5000/storageos/node:v2.4.2", "v2.5.0"),
            "reg:5000/storageos/node:v2.5.0"
        );
        assert_eq!(
            with_version("reg:5000/storageos/node", "2.5.0"),
            "reg:5000/storageos/node:v2.5.0"
        );
    }
}
