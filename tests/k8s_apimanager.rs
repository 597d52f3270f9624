//! Integration tier: `storageos-operator api-manager` as a process — it waits (no crash loop)
//! while the StorageOS API is down, then connects, issues its certificate, injects the CA and
//! becomes ready; SIGTERM stops it cleanly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use storageos_operator::sim::{self, Simulator};
use support::{TestNamespace, from_json, wait_for};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn readyz(port: u16) -> Option<u16> {
    let r = reqwest::get(format!("http://127.0.0.1:{port}/readyz")).await.ok()?;
    Some(r.status().as_u16())
}

#[tokio::test]
async fn waits_for_the_storageos_api_then_serves_webhooks() {
    let ns = TestNamespace::new("apimgr").await;
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

    let creds = tempfile::tempdir().unwrap();
    std::fs::write(creds.path().join("username"), "storageos\n").unwrap();
    std::fs::write(creds.path().join("password"), "storageos\n").unwrap();
    let (api_port, metrics_port, webhook_port) = (free_port(), free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_storageos-operator"))
        .arg("api-manager")
        .arg(format!("-api-endpoint=http://127.0.0.1:{api_port}"))
        .arg(format!("-api-secret-path={}", creds.path().display()))
        .arg("-api-retry-interval=200ms")
        .arg(format!("-namespace={}", ns.name))
        .arg(format!("-webhook-config-mutating={}", ns.name))
        .arg(format!("-metrics-addr=127.0.0.1:{metrics_port}"))
        .arg(format!("--webhook-addr=127.0.0.1:{webhook_port}"))
        .env("KUBECONFIG", support::kubeconfig_path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    // The API is down: the process keeps running and is not ready.
    wait_for("the metrics server", Duration::from_secs(20), || readyz(metrics_port)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "the api-manager exited while the StorageOS API was down"
    );
    assert_eq!(readyz(metrics_port).await, Some(503));

    // The API comes up: it connects, issues the certificate, injects the CA and is ready.
    let sim = Simulator::start(sim::Config {
        listen: format!("127.0.0.1:{api_port}"),
        ..Default::default()
    })
    .await
    .unwrap();
    wait_for("the api-manager to become ready", Duration::from_secs(20), || async {
        (readyz(metrics_port).await == Some(200)).then_some(())
    })
    .await;
    assert!(
        sim.requests()
            .iter()
            .any(|r| r.path.ends_with("/auth/login") && r.status == 200),
        "no successful login"
    );
    let secret = ns.api::<Secret>().get("storageos-webhook").await.unwrap();
    let ca = String::from_utf8(secret.data.unwrap()["ca-cert.pem"].0.clone()).unwrap();
    let hooks = mwcs.get(&ns.name).await.unwrap().webhooks.unwrap();
    let bundle = String::from_utf8(hooks[0].client_config.ca_bundle.clone().unwrap().0).unwrap();
    assert!(bundle.contains(ca.trim()), "the caBundle does not hold the Secret's CA");
    // The webhook server answers TLS on its port.
    let tls = tokio::net::TcpStream::connect(("127.0.0.1", webhook_port)).await;
    assert!(tls.is_ok(), "the webhook server is not listening");

    // SIGTERM stops it cleanly.
    Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let status = wait_for("the api-manager to exit", Duration::from_secs(10), || {
        let exited = child.try_wait().unwrap();
        async move { exited }
    })
    .await;
    assert!(status.success(), "exit status {status}");
    let _ = mwcs.delete(&ns.name, &DeleteParams::default()).await;
}
