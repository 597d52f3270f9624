//! The cluster operator (`storageos-operator run`): it renders a StorageOSCluster into objects
//! (`render`), installs itself (`install`), checks a cluster (`checks`), and runs the cluster,
//! Job and upgrade controllers (`cluster`, `job`, `upgrade`) in one process (`operator`).
//! It knows nothing of the api-manager beyond the contract crate.

pub mod checks;
pub mod cluster;
pub mod install;
pub mod job;
pub mod operator;
pub mod preview;
pub mod render;
pub mod upgrade;

// The kit, the contract and the StorageOS client under the names the modules use.
use operator_kit::{duration, runtime, telemetry, text};
use storageos_client as storageos;
use storageos_contract::{crd, rbac, reasons};
