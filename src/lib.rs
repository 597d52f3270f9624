//! storageos-operator: a Kubernetes operator for StorageOS that also carries the api-manager.
//!
//! The binaries (`src/main.rs`, `src/bin/kubectl-storageos.rs`) are thin dispatchers over this
//! crate: the command line (`cli`) and what each subcommand starts (`app`). The work is in the
//! workspace's crates (docs/architecture.md), re-exported here under the names the tests and
//! tools use: the kit (`runtime`, `telemetry`), the contract (`crd`, `rbac`, `reasons`), the
//! operator (`render`, `cluster`, …), the api-manager (`apimanager`) and the plugin.
pub mod app;
pub mod cli;
#[cfg(feature = "simulator")]
pub use storageos_sim as sim;
#[cfg(feature = "simulator")]
pub mod simulate;
#[cfg(test)]
mod storageos_tests;

pub use operator_kit::{duration, go, runtime, telemetry, text};
pub use storageos_api_manager as apimanager;
/// The StorageOS v2 REST client (crate `storageos-client`), under the name the operator uses.
pub use storageos_client as storageos;
pub use storageos_cluster_operator::{checks, cluster, install, job, operator, preview, render, upgrade};
pub use storageos_contract::{crd, rbac, reasons};
pub use storageos_plugin as plugin;
