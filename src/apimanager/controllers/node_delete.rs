//! TODO: the node_delete controller (being built).

use std::sync::Arc;

use super::Context;

/// Runs the controller until the future is dropped.
pub async fn run(_ctx: Arc<Context>) {}
