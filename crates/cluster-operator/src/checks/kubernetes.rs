//! The Kubernetes version.

use super::{Check, TESTED_KUBERNETES, Verdict, check, pass};
use crate::render::MIN_KUBERNETES;

/// The Kubernetes version against [`MIN_KUBERNETES`] and [`TESTED_KUBERNETES`].
pub fn kubernetes_version(git_version: &str) -> Check {
    let name = "kubernetes-version";
    let Ok(v) = crate::render::parse_k8s_version(git_version) else {
        return check(
            name,
            Verdict::Warn,
            format!("cannot read the version {git_version:?}"),
            "make sure the cluster runs Kubernetes 1.33 or newer",
        );
    };
    if v < MIN_KUBERNETES {
        return check(
            name,
            Verdict::Fail,
            format!("Kubernetes {v} is older than the oldest supported, {MIN_KUBERNETES}"),
            format!("upgrade the cluster to Kubernetes {MIN_KUBERNETES} or newer"),
        );
    }
    let (major, minor) = TESTED_KUBERNETES;
    if (v.major, v.minor) > (major, minor) {
        return check(
            name,
            Verdict::Warn,
            format!("Kubernetes {v} is newer than the newest tested, {major}.{minor}"),
            "expect it to work; report anything that does not",
        );
    }
    pass(name, format!("Kubernetes {v}"))
}
