//! What node and PVC label sync share: the pure plan of what to write ([`plan`]), the watch
//! filter that turns label changes into reconciles ([`watch`]) and the controller that runs a
//! sync with failure sorting ([`run`]).

pub mod plan;
pub mod run;
pub mod watch;

pub use plan::*;
pub use run::{Failures, LabelSync, Syncing, run};
pub use watch::{LabelFingerprints, changes, fingerprint};
