//! What tests that run `storageos-operator api-manager` as a process share: its StorageOS
//! credentials files and identity, and a webhook configuration for its CA injection.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::{TestNamespace, from_json};

/// A directory for `-api-secret-path` with `username` and `password`, holding a kubeconfig
/// acting as the api-manager's ServiceAccount (with its rules for the webhook configuration of
/// `ns`, see [`webhook_config`]) as `storageos-api-manager-sa.kubeconfig`.
pub async fn credentials(ns: &TestNamespace, username: &str, password: &str) -> tempfile::TempDir {
    let creds = tempfile::tempdir().unwrap();
    std::fs::write(creds.path().join("username"), format!("{username}\n")).unwrap();
    std::fs::write(creds.path().join("password"), format!("{password}\n")).unwrap();
    super::api_manager_kubeconfig(creds.path(), &ns.name).await;
    creds
}

/// A MutatingWebhookConfiguration named after the test namespace, for the CA injection of an
/// api-manager run with `-webhook-config-mutating=<namespace>`.
pub async fn webhook_config(ns: &TestNamespace) -> Api<MutatingWebhookConfiguration> {
    let mwcs: Api<MutatingWebhookConfiguration> = Api::all(ns.client.clone());
    let mwc: MutatingWebhookConfiguration = from_json(json!({
        "metadata": {"name": ns.name},
        "webhooks": [{
            "name": "pod-mutator.storageos.com",
            "clientConfig": {"service": {"namespace": ns.name, "name": "storageos-webhook", "path": "/mutate-pods"}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
            "failurePolicy": "Ignore", "sideEffects": "None", "admissionReviewVersions": ["v1"]
        }]
    }));
    mwcs.create(&PostParams::default(), &mwc).await.unwrap();
    mwcs
}

/// A free port on 127.0.0.1 for a child process to listen on.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until the fencer has listed the StorageOS nodes once (it then saw them online, so a
/// node set offline afterwards is a change it will act on).
pub async fn fencer_polled(sim: &storageos_operator::sim::SimHandle, timeout: std::time::Duration) {
    super::wait_for("the fencer's first poll", timeout, || async {
        sim.requests()
            .iter()
            .any(|r| r.method == "GET" && r.path == "/v2/nodes" && r.status == 200)
            .then_some(())
    })
    .await;
}
