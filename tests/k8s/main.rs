//! Integration tier against the local control plane (`hack/k8s.sh`): one test binary, one
//! module per scenario, so the shared support and the crate link once instead of once per
//! scenario. `tests/k8s_faults.rs` and `tests/k8s_real_node.rs` stay binaries of their own: each
//! starts a plane of its own for the whole process.
//!
//! Run one scenario with `cargo test --test k8s <module>::`, for example
//! `cargo test --test k8s fencing::`.

#[path = "../support/mod.rs"]
mod support;

mod adoption;
mod apimanager;
mod apply;
mod attach;
mod cluster;
mod crds;
mod drain;
mod fencing;
mod gc;
mod go_helm_chart;
mod go_migration;
mod helm;
mod install;
mod job;
mod label_sync;
mod leader;
mod mirror;
mod olm;
mod one_cluster;
mod out_of_service;
mod partial_apply;
mod plan;
mod plane;
mod plugin;
mod preflight;
mod shared_volume;
mod tracing;
mod upgrade;
mod webhooks;
