//! What the operator, the api-manager and the plugin agree on: the custom resources (`crd`,
//! with the cross-process rules in `crd::contract`), the RBAC every component holds (`rbac`)
//! and every condition and event reason (`reasons`). Each is named once, here.

pub mod crd;
pub mod rbac;
pub mod reasons;
