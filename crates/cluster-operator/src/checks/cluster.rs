//! What else in the cluster stands in the way: leftovers of an earlier install, Pod Security,
//! a foreign CSI driver or several default StorageClasses, host ports held by other pods.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;

use super::{Check, DEFAULT_CLASS, HOST_PORTS, POD_SECURITY_ENFORCE, Verdict, check, pass};
use crate::crd::StorageOSCluster;
use crate::storageos::kube::{CSI_DRIVER, CSI_NODE_ANNOTATION};

/// The Go operator, old CRD versions, and nodes that ran StorageOS without a cluster now.
pub fn leftovers(
    deployments: &[Deployment],
    crds: &[CustomResourceDefinition],
    clusters: &[StorageOSCluster],
    nodes: &[Node],
    mirrors: usize,
) -> Vec<Check> {
    let mut out = Vec::new();
    let go: Vec<String> = deployments
        .iter()
        .filter(|d| d.name_any() == "storageos-cluster-operator")
        .map(|d| format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any()))
        .collect();
    out.push(if go.is_empty() {
        pass("leftovers/go-operator", "no Go cluster-operator found")
    } else {
        check(
            "leftovers/go-operator",
            Verdict::Warn,
            format!("the Go cluster-operator runs: {}", go.join(", ")),
            "scale it to 0 before installing; this operator adopts its cluster (docs/adoption.md)",
        )
    });
    let old: Vec<String> = crds
        .iter()
        .filter(|c| c.spec.group == "storageos.com")
        .flat_map(|c| {
            let stored = c
                .status
                .as_ref()
                .and_then(|s| s.stored_versions.clone())
                .unwrap_or_default();
            stored
                .into_iter()
                .filter(|v| v != "v1")
                .map(move |v| format!("{} {v}", c.name_any()))
        })
        .collect();
    out.push(if old.is_empty() {
        pass("leftovers/crd-versions", "no old storageos.com CRD versions stored")
    } else {
        check(
            "leftovers/crd-versions",
            Verdict::Warn,
            format!("old versions still stored: {}", old.join(", ")),
            "migrate the stored objects to v1, then remove the old versions from status.storedVersions",
        )
    });
    let ran: Vec<String> = nodes
        .iter()
        .filter(|n| {
            n.annotations()
                .get(CSI_NODE_ANNOTATION)
                .is_some_and(|v| v.contains(CSI_DRIVER))
        })
        .map(ResourceExt::name_any)
        .collect();
    out.push(if clusters.is_empty() && (!ran.is_empty() || mirrors > 0) {
        check(
            "leftovers/nodes",
            Verdict::Warn,
            format!(
                "no StorageOSCluster, but {} node(s) ran StorageOS ({}) and {mirrors} StorageOS node mirror(s) remain",
                ran.len(),
                ran.join(", ")
            ),
            "/var/lib/storageos on those nodes may hold an earlier cluster's data: reuse that cluster's etcd, \
             or clean the directory (a Job CR, deploy/examples/job-cleanup.yaml)",
        )
    } else if let Some(c) = clusters.first() {
        pass(
            "leftovers/nodes",
            format!(
                "StorageOSCluster {}/{} is installed ({})",
                c.namespace().unwrap_or_default(),
                c.name_any(),
                c.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default()
            ),
        )
    } else {
        pass("leftovers/nodes", "no node ran StorageOS")
    });
    out
}

/// StorageOS's node pods are privileged: the namespace must allow it.
pub fn pod_security(namespace: &str, ns: Option<&Namespace>) -> Check {
    let name = format!("pod-security/{namespace}");
    let level = ns.and_then(|n| n.labels().get(POD_SECURITY_ENFORCE).cloned());
    match (ns, level.as_deref()) {
        (None, _) => pass(
            name,
            "the namespace does not exist yet; the operator creates it (the cluster's default Pod Security level applies)",
        ),
        (Some(_), None | Some("privileged")) => pass(
            name,
            format!(
                "enforce level {}",
                level
                    .as_deref()
                    .unwrap_or("unset (privileged unless the cluster's default says otherwise)")
            ),
        ),
        (Some(_), Some(other)) => check(
            name,
            Verdict::Fail,
            format!("enforce level {other}: StorageOS's node pods are privileged and would be refused"),
            format!("kubectl label namespace {namespace} {POD_SECURITY_ENFORCE}=privileged --overwrite"),
        ),
    }
}

/// A CSI driver of StorageOS's name without a cluster, and more than one default StorageClass.
pub fn storage_conflicts(drivers: &[CSIDriver], classes: &[StorageClass], cluster_exists: bool) -> Vec<Check> {
    let mut out = Vec::new();
    let ours = drivers.iter().any(|d| d.name_any() == CSI_DRIVER);
    out.push(if ours && !cluster_exists {
        check(
            "csi-driver",
            Verdict::Warn,
            format!("CSIDriver {CSI_DRIVER} exists but no StorageOSCluster does (an earlier install?)"),
            format!("kubectl delete csidriver {CSI_DRIVER} (the operator creates its own)"),
        )
    } else {
        pass("csi-driver", format!("no conflicting {CSI_DRIVER} driver"))
    });
    let defaults: Vec<String> = classes
        .iter()
        .filter(|c| c.annotations().get(DEFAULT_CLASS).is_some_and(|v| v == "true"))
        .map(|c| format!("{} ({})", c.name_any(), c.provisioner))
        .collect();
    out.push(if defaults.len() > 1 {
        check(
            "default-storageclass",
            Verdict::Warn,
            format!("more than one default StorageClass: {}", defaults.join(", ")),
            format!("keep one: kubectl annotate storageclass NAME {DEFAULT_CLASS}-"),
        )
    } else {
        pass(
            "default-storageclass",
            match defaults.first() {
                Some(d) => format!("default StorageClass {d}; PVCs without a class keep using it"),
                None => "no default StorageClass".to_string(),
            },
        )
    });
    out
}

/// Pods other than StorageOS's holding host ports 5701-5711 on the nodes StorageOS uses
/// (`selected`); a pod elsewhere, or not yet on a node, holds nothing StorageOS needs.
pub fn host_ports(pods: &[Pod], selected: &std::collections::BTreeSet<String>) -> Check {
    let mut taken = Vec::new();
    for pod in pods {
        if pod.labels().get("app").is_some_and(|a| a == "storageos") {
            continue;
        }
        let Some(spec) = &pod.spec else { continue };
        let Some(node) = spec.node_name.as_deref().filter(|n| selected.contains(*n)) else {
            continue;
        };
        for c in &spec.containers {
            for p in c.ports.as_deref().unwrap_or_default() {
                if let Some(hp) = p.host_port.filter(|hp| HOST_PORTS.contains(hp)) {
                    taken.push(format!(
                        "{}/{} on {node} holds {hp}",
                        pod.namespace().unwrap_or_default(),
                        pod.name_any(),
                    ));
                }
            }
        }
    }
    if taken.is_empty() {
        pass(
            "host-ports",
            format!(
                "no other pod holds host ports 5701-5711 on the {} node(s) StorageOS uses",
                selected.len()
            ),
        )
    } else {
        check(
            "host-ports",
            Verdict::Fail,
            taken.join("; "),
            "move those pods off StorageOS's nodes (or keep StorageOS off theirs with spec.nodeSelectorTerms), or change their hostPort",
        )
    }
}
