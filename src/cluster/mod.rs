//! The StorageOSCluster reconciler: observe → build (render) → apply → status.

pub mod select;
