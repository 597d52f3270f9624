//! The custom resources of group `storageos.com/v1`, the `api.storageos.com/v1` mirrors of the
//! StorageOS API, and their CRDs.
//!
//! `storageos-operator crds` prints [`all`]; `crds/` in the repository holds that output and a
//! test fails when they differ.

pub mod check;
mod cluster;
pub mod contract;
mod formats;
mod job;
mod mirror;
mod upgrade;
mod validation;

pub use cluster::*;
pub use contract::*;
pub use job::*;
pub use mirror::*;
pub use upgrade::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Every CRD the operator serves, in a stable order, with the file name it has under `crds/`;
/// only with `format`s the apiserver knows ([`formats`]).
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    let crds = vec![
        ("storageos.com_storageosclusters.yaml", StorageOSCluster::crd()),
        ("storageos.com_storageosupgrades.yaml", StorageOSUpgrade::crd()),
        ("storageos.com_jobs.yaml", Job::crd()),
        ("api.storageos.com_nodes.yaml", StorageOSNode::crd()),
        ("api.storageos.com_volumes.yaml", StorageOSVolume::crd()),
    ];
    crds.into_iter()
        .map(|(file, crd)| (file, formats::known_only(crd)))
        .collect()
}

/// The CRDs as one multi-document YAML stream, as `storageos-operator crds` prints it.
pub fn to_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for (_, crd) in all() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}
