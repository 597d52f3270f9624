//! Checks of a cluster's prerequisites for StorageOS, each a pure function from what was read to
//! a [`Check`] (PASS / WARN / FAIL, with a fix). `kubectl storageos preflight` runs them; they
//! are the library the operator's own continuous checks share with it.

pub mod cluster;
pub mod etcd;
pub mod host;
pub mod kubernetes;
pub mod nodes;

use serde::Serialize;

pub use cluster::{host_ports, leftovers, pod_security, storage_conflicts};
pub use kubernetes::kubernetes_version;
#[cfg(test)]
pub use nodes::ineligible;
pub use nodes::{Platform, cpu_millis, ineligible_os_arch, ineligible_platform, memory_bytes, node_checks};

/// The newest Kubernetes minor the project is tested on (hack/versions.env).
pub const TESTED_KUBERNETES: (u64, u64) = (1, 36);
/// StorageOS's stated minimum per node: one core...
pub const MIN_CPU_MILLIS: i64 = 1000;
/// ...and 2 GiB of memory.
pub const MIN_MEMORY_BYTES: i64 = 2 << 30;
/// The host ports the StorageOS node container listens on.
pub const HOST_PORTS: std::ops::RangeInclusive<i32> = 5701..=5711;
/// The Pod Security label of a namespace.
pub const POD_SECURITY_ENFORCE: &str = "pod-security.kubernetes.io/enforce";
/// The default-class annotation of a StorageClass.
pub const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// The verdict of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Pass,
    /// Not checked, with the reason (a node that cannot run the per-node checks).
    Skip,
    Warn,
    Fail,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Pass => "PASS",
            Self::Skip => "SKIP",
            Self::Warn => "WARN",
            Self::Fail => "FAIL",
        })
    }
}

/// One check's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    /// What was checked (`kubernetes-version`, `node/NAME/arch`, `etcd/URL`, ...).
    pub check: String,
    pub result: Verdict,
    /// What was found.
    pub message: String,
    /// What to do about it (empty for PASS).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fix: String,
}

pub fn check(name: impl Into<String>, result: Verdict, message: impl Into<String>, fix: impl Into<String>) -> Check {
    Check {
        check: name.into(),
        result,
        message: message.into(),
        fix: fix.into(),
    }
}

pub fn pass(name: impl Into<String>, message: impl Into<String>) -> Check {
    check(name, Verdict::Pass, message, "")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::json;

    use super::*;

    fn node(arch: &str, kernel: &str, cpu: &str, memory: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "allocatable": {"cpu": cpu, "memory": memory},
                "nodeInfo": {"architecture": arch, "operatingSystem": "linux", "kernelVersion": kernel,
                    "containerRuntimeVersion": "containerd://1.7.24", "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "bootID": "", "kubeProxyVersion": "", "kubeletVersion": "", "machineID": "", "systemUUID": ""}
            }
        }))
        .unwrap()
    }

    #[test]
    fn the_tested_minor_is_the_newest_kube_scheduler_the_render_knows() {
        assert_eq!(TESTED_KUBERNETES, crate::render::images::NEWEST_KNOWN_MINOR);
    }

    #[test]
    fn only_what_a_node_reports_makes_it_ineligible() {
        assert_eq!(ineligible(&node("amd64", "6.1.0", "4", "8Gi")), None);
        assert_eq!(
            ineligible(&node("arm64", "6.1.0", "4", "8Gi")).as_deref(),
            Some("architecture arm64")
        );
        assert_eq!(
            ineligible(&node("amd64", "2.6.32", "4", "8Gi")).as_deref(),
            Some("kernel 2.6.32")
        );
        // kwok's and other unreadable kernel versions, and a node reporting nothing, are not excluded.
        assert_eq!(ineligible(&node("amd64", "kwok-0.8.0", "4", "8Gi")), None);
        assert_eq!(ineligible(&node("", "", "4", "8Gi")), None);
        assert_eq!(ineligible(&Node::default()), None);
    }

    fn verdicts(checks: &[Check]) -> Vec<(String, Verdict)> {
        checks.iter().map(|c| (c.check.clone(), c.result)).collect()
    }

    #[test]
    fn a_realistic_amd64_node_passes() {
        let checks = node_checks(&node("amd64", "6.1.0-28-amd64", "4", "16Gi"));
        assert!(checks.iter().all(|c| c.result == Verdict::Pass), "{checks:#?}");
    }

    #[test]
    fn arm64_fails_with_a_fix() {
        let checks = node_checks(&node("arm64", "6.1.0", "4", "16Gi"));
        let arch = checks.iter().find(|c| c.check == "node/n1/arch").unwrap();
        assert_eq!(arch.result, Verdict::Fail);
        assert!(arch.fix.contains("nodeSelectorTerms"), "{}", arch.fix);
    }

    #[test]
    fn small_nodes_and_old_kernels() {
        let checks = node_checks(&node("amd64", "3.10.0-1160.el7.x86_64", "500m", "1Gi"));
        let v = verdicts(&checks);
        assert!(v.contains(&("node/n1/kernel".into(), Verdict::Warn)), "{v:?}");
        assert!(v.contains(&("node/n1/resources".into(), Verdict::Fail)), "{v:?}");
        let fake = node_checks(&node("amd64", "kwok-0.8.0", "4", "16Gi"));
        assert!(verdicts(&fake).contains(&("node/n1/kernel".into(), Verdict::Warn)));
    }

    #[test]
    fn not_ready_nodes_are_a_warning_only() {
        let mut n = node("arm64", "", "", "");
        n.status.as_mut().unwrap().conditions = None;
        assert_eq!(verdicts(&node_checks(&n)), [("node/n1".into(), Verdict::Warn)]);
    }

    #[test]
    fn quantities() {
        assert_eq!(cpu_millis(&Quantity("1500m".into())), Some(1500));
        assert_eq!(cpu_millis(&Quantity("32".into())), Some(32_000));
        assert_eq!(memory_bytes(&Quantity("2Gi".into())), Some(2 << 30));
        assert_eq!(memory_bytes(&Quantity("2048Mi".into())), Some(2 << 30));
        assert_eq!(memory_bytes(&Quantity("3G".into())), Some(3_000_000_000));
        assert_eq!(memory_bytes(&Quantity("1024".into())), Some(1024));
    }

    #[test]
    fn kubernetes_versions() {
        assert_eq!(kubernetes_version("v1.36.3").result, Verdict::Pass);
        assert_eq!(kubernetes_version("v1.32.0").result, Verdict::Fail);
        assert_eq!(kubernetes_version("v1.40.0").result, Verdict::Warn);
    }

    #[test]
    fn pod_security_levels() {
        let ns = |level: Option<&str>| -> Namespace {
            let labels = level.map(|l| json!({POD_SECURITY_ENFORCE: l})).unwrap_or(json!({}));
            serde_json::from_value(json!({"metadata": {"name": "x", "labels": labels}})).unwrap()
        };
        assert_eq!(pod_security("x", Some(&ns(None))).result, Verdict::Pass);
        assert_eq!(pod_security("x", Some(&ns(Some("privileged")))).result, Verdict::Pass);
        let c = pod_security("x", Some(&ns(Some("baseline"))));
        assert_eq!(c.result, Verdict::Fail);
        assert!(c.fix.contains("enforce=privileged"));
    }

    #[test]
    fn host_ports_held_by_others_fail() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "a"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": [{"containerPort": 5705, "hostPort": 5705}]}]}
        }))
        .unwrap();
        let on = |nodes: &[&str]| nodes.iter().map(|n| n.to_string()).collect();
        let c = host_ports(std::slice::from_ref(&pod), &on(&["n1", "n2"]));
        assert_eq!(c.result, Verdict::Fail);
        assert!(c.message.contains("a/p on n1 holds 5705"));
        // A node StorageOS does not select may hold the port.
        let c = host_ports(&[pod], &on(&["n2"]));
        assert_eq!(c.result, Verdict::Pass, "{c:?}");
        assert!(c.message.contains("1 node(s)"), "{}", c.message);
    }
}
