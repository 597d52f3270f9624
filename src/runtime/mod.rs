//! Shared runtime pieces used by the operator, the api-manager and the tests.

pub mod addr;
pub mod apply;
pub mod cache;
pub mod conditions;
pub mod connect;
pub mod controller;
pub mod events;
pub mod finalizer;
pub mod health;
pub mod https;
pub mod identity;
pub mod leader;
pub mod live;
pub mod memory;
pub mod metrics;
pub mod object;
pub mod pki;
pub mod signal;
pub mod status;
pub mod trusted;
