//! Settings pushed to the StorageOS control plane once the cluster is Running: telemetry and
//! log level (`PUT /cluster`, only when they differ, with the version just read).

use kube::ResourceExt;

use super::context::Context;
use super::error::{Error, Step};
use crate::render::{Inputs, Plan, Resolved};
use crate::storageos;

/// Why no StorageOS client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The credentials Secret was not read.
    #[error("the StorageOS credentials Secret is missing")]
    NoSecret,
    /// The endpoint or client configuration is invalid.
    #[error(transparent)]
    Client(#[from] storageos::Error),
}

/// The StorageOS API client of a cluster: the configured override, else the cluster's Service.
pub fn api_client(ctx: &Context, inputs: &Inputs, plan: &Plan) -> Result<storageos::Client, ClientError> {
    let secret = inputs.secret.as_ref().ok_or(ClientError::NoSecret)?;
    let endpoint = match &ctx.config.storageos_endpoint {
        Some(e) => e.clone(),
        None => plan.resolved.api_endpoint(),
    };
    Ok(ctx.api_clients.for_secret(&endpoint, secret)?)
}

/// The cluster settings the resolved spec asks for, applied over `current`.
pub fn desired(resolved: &Resolved, current: &storageos::Cluster) -> storageos::UpdateCluster {
    let mut update = current.to_update();
    let off = resolved.disable_telemetry;
    update.disable_telemetry = off;
    update.disable_crash_reporting = off;
    update.disable_version_check = off;
    update.log_level = if resolved.debug { "debug" } else { "info" }.into();
    update
}

/// Pushes the settings when they differ from the control plane's.
pub async fn push(ctx: &Context, inputs: &Inputs, plan: &Plan) -> Result<(), Error> {
    let client = match api_client(ctx, inputs, plan) {
        Ok(c) => c,
        Err(ClientError::Client(e)) => return Err(e).step("make a StorageOS API client"),
        Err(ClientError::NoSecret) => return Ok(()),
    };
    let current = client.get_cluster().await.step("read the StorageOS cluster settings")?;
    let update = desired(&plan.resolved, &current);
    if update != current.to_update() {
        client
            .update_cluster(&update)
            .await
            .step("push telemetry and log level to StorageOS")?;
        tracing::info!(cluster = %inputs.cluster.name_any(), log_level = %update.log_level,
            disable_telemetry = update.disable_telemetry, "pushed cluster settings to StorageOS");
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::crd::StorageOSCluster;
    use serde_json::json;

    #[test]
    fn desired_maps_telemetry_and_debug_and_keeps_the_rest() {
        let cluster: StorageOSCluster = serde_json::from_value(json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster", "metadata": {"name": "c"},
            "spec": {"secretRefName": "s", "secretRefNamespace": "d", "debug": true, "disableTelemetry": true}
        }))
        .unwrap();
        let current: storageos::Cluster = serde_json::from_value(json!({
            "id": "x", "disableTelemetry": false, "disableCrashReporting": false, "disableVersionCheck": false,
            "logLevel": "info", "logFormat": "json", "version": "v7",
            "createdAt": "2026-01-01T00:00:00Z", "updatedAt": "2026-01-01T00:00:00Z"
        }))
        .unwrap();
        let d = desired(&crate::render::resolve(&cluster.spec), &current);
        assert!(d.disable_telemetry && d.disable_crash_reporting && d.disable_version_check);
        assert_eq!(
            (d.log_level.as_str(), d.log_format.as_str(), d.version.as_str()),
            ("debug", "json", "v7")
        );
    }
}
