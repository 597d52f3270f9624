//! The drain gate: whether a node may be drained or rebooted without taking the last ready copy
//! of a volume the cluster's drain policy protects (docs/api-manager.md, "Drain gate"). The rule
//! ([`view`]) is shown on `nodes.api.storageos.com` by the mirror (`Safe-To-Drain`, the PVCs
//! that block it, the unprotected and orphaned volumes) and enforced by the guard controller
//! ([`run`]): a guard pod and a PodDisruptionBudget that allows no eviction on each unsafe node
//! ([`guard`]), in a namespace of their own, placed, held at most the maximum hold, and removed
//! as [`plan`] decides (only a complete read removes one). While an upgrade holds maintenance
//! every StorageOS node is guarded, so a drain started during an upgrade waits for it.

pub mod guard;
pub mod plan;
pub mod rule;
mod run;

pub use guard::guard_selector;
pub use rule::{DrainView, last_copy, view};
pub use run::{CONTROLLER, Error, run};

#[cfg(test)]
mod tests;
