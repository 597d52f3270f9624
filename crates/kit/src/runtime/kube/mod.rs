//! The Kubernetes controller kit: apply and prune, the live index, watch caches, events,
//! backoff and reconcile metrics, finalizers, conditions and status writes, leader election,
//! connecting to the apiserver. It knows nothing of StorageOS.

pub mod apply;
pub mod cache;
pub mod conditions;
pub mod connect;
pub mod controller;
pub mod events;
pub mod finalizer;
pub mod http;
pub mod identity;
pub mod leader;
pub mod lenient;
pub mod live;
pub mod metrics;
pub mod namespaced;
pub mod object;
pub mod status;
pub mod trusted;
pub mod view;
pub mod view_store;
pub mod webhook_certs;
