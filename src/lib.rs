//! storageos-operator: a Kubernetes operator for StorageOS that also carries the api-manager.
//!
//! The binary (`src/main.rs`) is a thin dispatcher over this library; every subcommand lives here.
pub mod apimanager;
pub mod app;
pub mod checks;
pub mod cli;
pub mod cluster;
pub mod crd;
pub mod duration;
pub mod go;
pub mod install;
pub mod job;
pub mod operator;
pub mod plugin;
pub mod preview;
pub mod rbac;
pub mod reasons;
pub mod render;
pub mod runtime;
#[cfg(feature = "simulator")]
pub use storageos_sim as sim;
#[cfg(feature = "simulator")]
pub mod simulate;
/// The StorageOS v2 REST client (crate `storageos-client`), under the name the operator uses.
pub use storageos_client as storageos;
#[cfg(test)]
mod storageos_tests;
pub mod telemetry;
pub mod text;
pub mod upgrade;
