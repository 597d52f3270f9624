//! Shared runtime pieces used by the operator, the api-manager and the tests.

pub mod apply;
pub mod https;
pub mod pki;
