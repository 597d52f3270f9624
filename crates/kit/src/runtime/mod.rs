//! Shared runtime pieces used by the operator, the api-manager and the tests, in two kits:
//! [`kube`] (controllers against the apiserver) and [`process`] (servers, certificates,
//! signals).

pub mod kube;
pub mod process;
