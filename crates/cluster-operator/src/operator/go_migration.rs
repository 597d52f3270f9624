//! The Go operator's start-up migration, done when this operator starts, before any cluster
//! exists: Go operators before v2.4.0 served a pod-scheduler webhook themselves, through the
//! MutatingWebhookConfiguration and the Service `storageos-scheduler-webhook`, and the Go
//! operator removed both when it started. An install that never ran a newer Go operator still
//! has them, and the configuration can hold every pod create on a Service nothing answers.
//! Only a configuration with no webhooks, or whose webhooks all call that Service in the
//! operator's namespace, is removed (`cluster::adopt::legacy_scheduler_webhook_at_start`);
//! one that calls anything else is someone else's, and it and the Service are left alone.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::{Client, ResourceExt};

use crate::cluster::adopt::{GO_SCHEDULER_WEBHOOK, legacy_scheduler_webhook_at_start};

/// How long to wait between attempts while the migration cannot be done.
const RETRY: Duration = Duration::from_secs(30);

/// Why the migration could not be done (it is tried again).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "cannot read MutatingWebhookConfiguration {GO_SCHEDULER_WEBHOOK}: {0}; check that the operator's ClusterRole may get mutatingwebhookconfigurations"
    )]
    Read(#[source] kube::Error),
    #[error(
        "cannot delete {what}: {source}; delete it yourself (it is the pre-v2.4.0 Go operator's scheduler webhook) or check the operator's ClusterRole"
    )]
    Delete {
        what: String,
        #[source]
        source: kube::Error,
    },
}

/// What one pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The objects removed.
    pub removed: Vec<String>,
    /// A configuration of that name that calls something else, left alone.
    pub left_foreign: bool,
}

/// One pass of the migration for an operator in `namespace`.
pub async fn migrate(client: &Client, namespace: &str) -> Result<Outcome, Error> {
    let mwcs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mut outcome = Outcome::default();
    match mwcs.get_opt(GO_SCHEDULER_WEBHOOK).await.map_err(Error::Read)? {
        Some(mwc) if !legacy_scheduler_webhook_at_start(&mwc, namespace) => {
            outcome.left_foreign = true;
            return Ok(outcome);
        }
        Some(mwc) => {
            // Only the configuration that was judged: not one replaced in the meantime.
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: mwc.uid(),
                    resource_version: mwc.resource_version(),
                }),
                ..DeleteParams::background()
            };
            let what = format!("MutatingWebhookConfiguration {GO_SCHEDULER_WEBHOOK}");
            if deleted(mwcs.delete(GO_SCHEDULER_WEBHOOK, &params).await, &what)? {
                outcome.removed.push(what);
            }
        }
        None => {}
    }
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let what = format!("Service {namespace}/{GO_SCHEDULER_WEBHOOK}");
    if deleted(
        services.delete(GO_SCHEDULER_WEBHOOK, &DeleteParams::background()).await,
        &what,
    )? {
        outcome.removed.push(what);
    }
    Ok(outcome)
}

/// Whether a delete removed something; one already gone is not an error.
fn deleted<T>(result: Result<T, kube::Error>, what: &str) -> Result<bool, Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(source) => Err(Error::Delete {
            what: what.to_string(),
            source,
        }),
    }
}

/// [`migrate`], tried again every [`RETRY`] until a pass succeeds.
pub async fn keep_trying(client: Client, namespace: String) {
    loop {
        match migrate(&client, &namespace).await {
            Ok(outcome) => {
                for what in &outcome.removed {
                    tracing::info!(object = %what, "removed the pre-v2.4.0 Go operator's scheduler webhook");
                }
                if outcome.left_foreign {
                    tracing::info!(
                        name = GO_SCHEDULER_WEBHOOK,
                        "left the MutatingWebhookConfiguration of the Go scheduler webhook's name: it calls something else"
                    );
                }
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, retry_in = ?RETRY, "the Go operator's start-up migration is not done")
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}
