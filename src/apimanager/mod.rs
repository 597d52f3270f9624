//! The api-manager runtime (`storageos-operator api-manager`): webhooks and certificates on every
//! replica, controllers on the leader.

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
