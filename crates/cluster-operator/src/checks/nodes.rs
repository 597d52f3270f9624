//! Each node: OS, architecture, kernel, runtime and allocatable resources.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use serde::Deserialize;
use smol_str::SmolStr;

pub use crate::crd::contract::ineligible_os_arch;

use super::{Check, MIN_CPU_MILLIS, MIN_MEMORY_BYTES, Verdict, check, pass};

/// A node's operating system, architecture and kernel, as its kubelet reports them
/// (`status.nodeInfo`, whose other fields are skipped when parsing).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Platform {
    pub operating_system: SmolStr,
    pub architecture: SmolStr,
    pub kernel_version: SmolStr,
}

/// Why StorageOS cannot run on a node at all, from what its kubelet reports (`nodeInfo`): an
/// operating system other than Linux, an architecture other than amd64 (StorageOS ships amd64
/// images only), or a kernel older than 3.x. None when it can (an empty value is unknown, not
/// excluded). The cluster controller reads it from its Node cache
/// (`cluster::node_cache::CachedNode::ineligible`; a node that reports nothing is not excluded).
pub fn ineligible_platform(info: &Platform) -> Option<String> {
    if let Some(why) = ineligible_os_arch(&info.operating_system, &info.architecture) {
        return Some(why);
    }
    let major = info
        .kernel_version
        .split(['.', '-'])
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m) if m < 3 => Some(format!("kernel {}", info.kernel_version)),
        _ => None,
    }
}

/// [`ineligible_platform`] of a full `Node` (tests compare the cache's view with it).
#[cfg(test)]
pub fn ineligible(node: &Node) -> Option<String> {
    let info = node.status.as_ref()?.node_info.as_ref()?;
    ineligible_platform(&Platform {
        operating_system: info.operating_system.as_str().into(),
        architecture: info.architecture.as_str().into(),
        kernel_version: info.kernel_version.as_str().into(),
    })
}

/// OS, architecture, kernel, runtime and allocatable resources of one node.
pub fn node_checks(node: &Node) -> Vec<Check> {
    let name = node.name_any();
    let status = node.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if !ready {
        return vec![check(
            format!("node/{name}"),
            Verdict::Warn,
            "not Ready: not checked",
            "make it Ready, or make sure StorageOS is not scheduled on it (spec.nodeSelectorTerms)",
        )];
    }
    let info = status.node_info.unwrap_or_default();
    let key = |what: &str| format!("node/{name}/{what}");
    let mut out = Vec::new();
    out.push(if info.operating_system == "linux" {
        pass(key("os"), format!("linux ({})", or_unknown(&info.os_image)))
    } else {
        check(
            key("os"),
            Verdict::Fail,
            format!("operating system {:?}", info.operating_system),
            "StorageOS runs on Linux nodes only: keep it off this node with spec.nodeSelectorTerms",
        )
    });
    out.push(if info.architecture == "amd64" {
        pass(key("arch"), "amd64")
    } else {
        check(
            key("arch"),
            Verdict::Fail,
            format!(
                "architecture {:?}: StorageOS ships amd64 images only",
                info.architecture
            ),
            "keep StorageOS off this node with spec.nodeSelectorTerms (kubernetes.io/arch=amd64), or use amd64 nodes",
        )
    });
    out.push(kernel(&key("kernel"), &info.kernel_version));
    out.push(if info.container_runtime_version.is_empty() {
        check(
            key("runtime"),
            Verdict::Warn,
            "the node reports no container runtime",
            "check the kubelet on this node",
        )
    } else {
        pass(key("runtime"), info.container_runtime_version.clone())
    });
    let alloc = status.allocatable.unwrap_or_default();
    let cpu = alloc.get("cpu").and_then(cpu_millis);
    let memory = alloc.get("memory").and_then(memory_bytes);
    out.push(match (cpu, memory) {
        (Some(c), Some(m)) if c >= MIN_CPU_MILLIS && m >= MIN_MEMORY_BYTES => pass(
            key("resources"),
            format!(
                "allocatable {} CPU, {} memory",
                show(&alloc, "cpu"),
                show(&alloc, "memory")
            ),
        ),
        (Some(_), Some(_)) => check(
            key("resources"),
            Verdict::Fail,
            format!(
                "allocatable {} CPU, {} memory: below StorageOS's minimum of 1 CPU and 2 GiB",
                show(&alloc, "cpu"),
                show(&alloc, "memory")
            ),
            "use a larger node, or keep StorageOS off it with spec.nodeSelectorTerms",
        ),
        _ => check(
            key("resources"),
            Verdict::Warn,
            "the node reports no allocatable CPU or memory",
            "check the kubelet on this node",
        ),
    });
    out
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "OS image unknown" } else { s }
}

fn show(alloc: &BTreeMap<String, Quantity>, key: &str) -> String {
    alloc.get(key).map(|q| q.0.clone()).unwrap_or_else(|| "?".into())
}

/// The kernel version: 4 or newer passes; 3.x works with at most 256 volumes per node.
fn kernel(name: &str, version: &str) -> Check {
    let major = version.split(['.', '-']).next().and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m) if m >= 4 => pass(name, version),
        Some(3) => check(
            name,
            Verdict::Warn,
            format!("kernel {version}: StorageOS mounts at most 256 volumes per node on 3.x"),
            "upgrade the node's kernel to 4.x or newer for up to 4096 volumes",
        ),
        Some(_) => check(
            name,
            Verdict::Fail,
            format!("kernel {version} is too old for StorageOS"),
            "upgrade the node's kernel to 4.x or newer",
        ),
        None => check(
            name,
            Verdict::Warn,
            format!("cannot read the kernel version {version:?}"),
            "check `uname -r` on the node: StorageOS needs Linux 3.x or newer (4.x recommended)",
        ),
    }
}

/// A CPU quantity in millicores (`2`, `1500m`).
pub fn cpu_millis(q: &Quantity) -> Option<i64> {
    let s = q.0.trim();
    if let Some(m) = s.strip_suffix('m') {
        return m.parse().ok();
    }
    s.parse::<f64>().ok().map(|c| (c * 1000.0) as i64)
}

/// A memory quantity in bytes (`2Gi`, `2048Mi`, `2G`, `2147483648`).
pub fn memory_bytes(q: &Quantity) -> Option<i64> {
    let s = q.0.trim();
    let units: [(&str, i64); 10] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
    ];
    for (suffix, factor) in units {
        if let Some(n) = s.strip_suffix(suffix) {
            return n.parse::<f64>().ok().map(|n| (n * factor as f64) as i64);
        }
    }
    s.parse::<f64>().ok().map(|n| n as i64)
}
