//! The process kit: the health and metrics server, the HTTPS server and its certificates,
//! listen addresses, the shutdown signal and the allocator trim. It knows nothing of
//! Kubernetes controllers or StorageOS.

pub mod addr;
pub mod health;
pub mod https;
pub mod memory;
pub mod pki;
pub mod signal;
