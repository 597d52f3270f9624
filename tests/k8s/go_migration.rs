//! Integration tier: the Go operator's start-up migration, as the Go operator's own e2e suite
//! checks it. An empty `storageos-scheduler-webhook` MutatingWebhookConfiguration and the Service
//! of that name in the operator's namespace, created before the operator starts, are gone 20 s
//! after it is ready, with no StorageOSCluster present; a configuration of that name that calls
//! another Service is left alone, and so is the Service. The operator runs with the installed
//! Deployment's args and env, as its ServiceAccount.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use storageos_operator::install;
use storageos_operator::sim::{self, Simulator};
use support::install::Operator;
use support::{from_json, wait_for};

const NAME: &str = "storageos-scheduler-webhook";
const SETTLE: Duration = Duration::from_secs(90);

/// The operator as installed (the Deployment's args and env) and as its ServiceAccount, ready.
async fn start_operator(kubeconfig: &std::path::Path, sim: &sim::SimHandle, log: std::path::PathBuf) -> Operator {
    let deployment = install::build("registry.invalid/storageos-operator:test")
        .unwrap()
        .deployment;
    let operator = Operator::start(&deployment, install::NAMESPACE, kubeconfig, sim, log);
    let url = format!("http://127.0.0.1:{}/readyz", operator.metrics_port);
    wait_for("the operator to be ready", SETTLE, || async {
        reqwest::get(&url).await.ok()?.status().is_success().then_some(())
    })
    .await;
    operator
}

/// Deletes what the test created of that name, also when it fails.
struct Cleanup {
    mwcs: Api<MutatingWebhookConfiguration>,
    services: Api<Service>,
}

impl Cleanup {
    /// Whether neither the configuration nor the Service exists.
    async fn gone(&self) -> Option<()> {
        let gone = self.mwcs.get_opt(NAME).await.ok()?.is_none() && self.services.get_opt(NAME).await.ok()?.is_none();
        gone.then_some(())
    }

    async fn now(&self) {
        let _ = self.mwcs.delete(NAME, &DeleteParams::default()).await;
        let _ = self.services.delete(NAME, &DeleteParams::default()).await;
        wait_for("the test's objects to be gone", SETTLE, || self.gone()).await;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = support::install::kubectl(&["delete", "mutatingwebhookconfiguration", NAME, "--ignore-not-found"]);
        let _ = support::install::kubectl(&[
            "delete",
            "service",
            NAME,
            "-n",
            install::NAMESPACE,
            "--ignore-not-found",
        ]);
    }
}

fn service() -> Service {
    from_json(json!({"metadata": {"name": NAME}, "spec": {"ports": [{"port": 5720, "targetPort": 5720}]}}))
}

#[tokio::test]
async fn the_go_scheduler_webhook_is_removed_at_start_and_a_foreign_one_of_its_name_is_left() {
    let _lock = support::exclusive().await;
    let admin = support::client().await;
    support::wait_no_clusters(&admin, SETTLE).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = support::operator_kubeconfig(dir.path()).await;
    // No cluster exists, so StorageOS is never called; the operator is started as installed.
    let storageos = Simulator::start(sim::Config::default()).await.unwrap();
    let cleanup = Cleanup {
        mwcs: Api::all(admin.clone()),
        services: Api::namespaced(admin.clone(), install::NAMESPACE),
    };
    cleanup.now().await;

    // As the Go operator's e2e suite creates it: a configuration with no webhooks, and the
    // Service in the operator's namespace.
    let empty: MutatingWebhookConfiguration = from_json(json!({"metadata": {"name": NAME}}));
    cleanup.mwcs.create(&PostParams::default(), &empty).await.unwrap();
    cleanup
        .services
        .create(&PostParams::default(), &service())
        .await
        .unwrap();
    let operator = start_operator(&kubeconfig, &storageos, dir.path().join("operator.log")).await;
    wait_for(
        "the empty configuration and its Service to be gone",
        Duration::from_secs(20),
        || cleanup.gone(),
    )
    .await;
    // The line is written after the delete the test just saw.
    wait_for("the operator to log the removal", Duration::from_secs(10), || async {
        operator
            .log()
            .contains("removed the pre-v2.4.0 Go operator's scheduler webhook")
            .then_some(())
    })
    .await;
    drop(operator);

    // A configuration of that name calling another Service is someone else's: it stays, and so
    // does the Service of that name.
    let foreign: MutatingWebhookConfiguration = from_json(json!({
        "metadata": {"name": NAME},
        "webhooks": [{
            "name": "pods.example.com",
            "clientConfig": {"service": {"namespace": install::NAMESPACE, "name": "someone-else", "path": "/mutate", "port": 443}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"storageos-operator-test/never": "true"}},
            "failurePolicy": "Ignore", "sideEffects": "None", "admissionReviewVersions": ["v1"]
        }]
    }));
    let created = cleanup.mwcs.create(&PostParams::default(), &foreign).await.unwrap();
    cleanup
        .services
        .create(&PostParams::default(), &service())
        .await
        .unwrap();
    let operator = start_operator(&kubeconfig, &storageos, dir.path().join("operator-2.log")).await;
    wait_for(
        "the migration to pass over the foreign configuration",
        SETTLE,
        || async {
            operator
                .log()
                .contains("left the MutatingWebhookConfiguration of the Go scheduler webhook's name")
                .then_some(())
        },
    )
    .await;
    let kept = cleanup.mwcs.get(NAME).await.unwrap();
    assert_eq!(kept.metadata.uid, created.metadata.uid);
    assert!(cleanup.services.get_opt(NAME).await.unwrap().is_some());
    drop(operator);
    cleanup.now().await;
}
