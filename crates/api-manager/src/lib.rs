//! The api-manager runtime (`storageos-operator api-manager`): webhooks and certificates on every
//! replica, controllers on the leader.

// The kit, the contract and the StorageOS client under the names the modules use
// (`crate::runtime`, `crate::crd`, `crate::storageos`, …). Nothing of the operator is here:
// the crate does not depend on it.
use operator_kit::{duration, go, runtime, telemetry, text};
use storageos_client as storageos;
use storageos_contract::{crd, rbac, reasons};

pub mod cached_pvc;
pub mod controllers;
pub mod flags;
pub mod maintenance;
pub mod metrics;
pub mod polls;
pub mod run;
pub mod storageclass;
pub mod storageos_poll;
pub mod webhook;

pub use run::run;
