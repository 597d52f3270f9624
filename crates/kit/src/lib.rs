//! A kit for Kubernetes controllers and the processes that run them, knowing nothing of
//! StorageOS: server-side apply with pruning, lenient watches, conditions and events from a
//! closed table of reasons, leader election, the controller runner (`runtime`), and logs,
//! metrics and traces (`telemetry`). Go-compatible parsing (`go`, `duration`) and length-limited
//! text (`text`) are here because the kit and its users both need them.

pub mod duration;
pub mod go;
pub mod reasons;
pub mod runtime;
pub mod telemetry;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod text;
