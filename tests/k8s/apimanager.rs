//! Integration tier: `storageos-operator api-manager` as a process — it issues its certificate,
//! injects the CA, serves the webhooks and becomes ready while the StorageOS API is down (no
//! crash loop), and logs in once it answers; SIGTERM stops it cleanly. With leader election, every replica serves webhooks
//! and only the Lease holder runs the controllers; another replica takes over when it stops.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::DeleteParams;
use storageos_operator::sim::{self, Simulator};
use support::apimanager::{free_port, webhook_config};
use support::{TestNamespace, wait_for};

/// The `/metrics` text of a replica.
async fn metrics_text(port: u16) -> String {
    reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Failed StorageOS logins, as the replica's `/metrics` count them.
fn failed_logins(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("storageos_api_helper_total{") && l.contains("function=\"setup\""))
        .filter(|l| !l.contains("error=\"\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

async fn readyz(port: u16) -> Option<u16> {
    let r = reqwest::get(format!("http://127.0.0.1:{port}/readyz")).await.ok()?;
    Some(r.status().as_u16())
}

/// A running api-manager process and its ports.
struct Replica {
    child: std::process::Child,
    metrics_port: u16,
    webhook_port: u16,
}

impl Replica {
    /// Runs `api-manager` as its ServiceAccount (`creds` holds its kubeconfig, see [`credentials`]).
    fn spawn(ns: &str, api_port: u16, creds: &std::path::Path, extra: &[&str], pod_name: &str) -> Self {
        let (metrics_port, webhook_port) = (free_port(), free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_storageos-operator"))
            .arg("api-manager")
            .arg(format!("-api-endpoint=http://127.0.0.1:{api_port}"))
            .arg(format!("-api-secret-path={}", creds.display()))
            .arg("-api-retry-interval=200ms")
            .arg(format!("-namespace={ns}"))
            .arg(format!("-webhook-config-mutating={ns}"))
            .arg(format!("-metrics-addr=127.0.0.1:{metrics_port}"))
            .arg(format!("--webhook-addr=127.0.0.1:{webhook_port}"))
            .args(extra)
            .env(
                "KUBECONFIG",
                creds.join(format!("{}.kubeconfig", support::identity::API_MANAGER_SA)),
            )
            .env("POD_NAME", pod_name)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Self {
            child,
            metrics_port,
            webhook_port,
        }
    }

    /// SIGTERM, then the exit status.
    async fn stop(&mut self) -> std::process::ExitStatus {
        Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        let child = &mut self.child;
        let mut status = None;
        for _ in 0..100 {
            status = child.try_wait().unwrap();
            if status.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        status.expect("the api-manager did not exit within 10 s of SIGTERM")
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The StorageOS credentials files, and a kubeconfig acting as the api-manager's ServiceAccount
/// (with its rules for the webhook configuration of `ns`).
async fn credentials(ns: &TestNamespace) -> tempfile::TempDir {
    support::apimanager::credentials(ns, "storageos", "storageos").await
}

/// The webhooks need no StorageOS: while its API is down the api-manager issues its
/// certificate, injects the CA, serves the webhooks and is ready (the webhook Service routes to
/// ready pods), without crash-looping; it logs in once the API answers. SIGTERM stops it cleanly.
#[tokio::test]
async fn webhooks_serve_while_storageos_is_down() {
    let ns = TestNamespace::new("apimgr").await;
    let mwcs = webhook_config(&ns).await;
    let creds = credentials(&ns).await;
    let api_port = free_port();
    let mut replica = Replica::spawn(&ns.name, api_port, creds.path(), &[], "apimgr-solo");
    let (metrics_port, webhook_port) = (replica.metrics_port, replica.webhook_port);

    // The API is down: the webhooks serve and the process is ready.
    wait_for("the api-manager to become ready", Duration::from_secs(20), || async {
        (readyz(metrics_port).await == Some(200)).then_some(())
    })
    .await;
    let secret = ns.api::<Secret>().get("storageos-webhook").await.unwrap();
    let ca = String::from_utf8(secret.data.unwrap()["ca-cert.pem"].0.clone()).unwrap();
    let hooks = mwcs.get(&ns.name).await.unwrap().webhooks.unwrap();
    let bundle = String::from_utf8(hooks[0].client_config.ca_bundle.clone().unwrap().0).unwrap();
    assert!(bundle.contains(ca.trim()), "the caBundle does not hold the Secret's CA");
    let tls = tokio::net::TcpStream::connect(("127.0.0.1", webhook_port)).await;
    assert!(tls.is_ok(), "the webhook server is not listening");
    // Still up after more failed logins: it kept trying, it did not crash (evidence, not a wait).
    let failed = failed_logins(&metrics_text(replica.metrics_port).await);
    wait_for("five more failed logins", Duration::from_secs(20), || async {
        (failed_logins(&metrics_text(replica.metrics_port).await) >= failed + 5).then_some(())
    })
    .await;
    assert!(
        replica.child.try_wait().unwrap().is_none(),
        "the api-manager exited while the StorageOS API was down"
    );

    // The API comes up: it logs in.
    let sim = Simulator::start(sim::Config {
        listen: format!("127.0.0.1:{api_port}"),
        ..Default::default()
    })
    .await
    .unwrap();
    wait_for("a successful login", Duration::from_secs(20), || async {
        sim.requests()
            .iter()
            .any(|r| r.path.ends_with("/auth/login") && r.status == 200)
            .then_some(())
    })
    .await;
    assert_eq!(readyz(metrics_port).await, Some(200));

    // SIGTERM stops it cleanly.
    let status = replica.stop().await;
    assert!(status.success(), "exit status {status}");
    let _ = mwcs.delete(&ns.name, &DeleteParams::default()).await;
}

/// The caBundle of the first webhook of `ns`'s configuration, if set.
async fn ca_bundle(
    mwcs: &kube::Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>,
    ns: &str,
) -> Option<String> {
    let hooks = mwcs.get(ns).await.ok()?.webhooks?;
    String::from_utf8(hooks.first()?.client_config.ca_bundle.clone()?.0).ok()
}

/// A stored certificate whose key does not load (a restore, a manual edit) is replaced, not a
/// crash loop: the api-manager becomes ready with a new certificate. A webhook configuration
/// deleted and re-created without a caBundle gets the CA within 10 s (it is watched), not at
/// the next 30-minute refresh.
#[tokio::test]
async fn a_corrupt_certificate_is_reissued_and_a_recreated_configuration_gets_its_ca_within_10s() {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    use kube::api::PostParams;

    let ns = TestNamespace::new("apimgr-ca").await;
    let mwcs = webhook_config(&ns).await;
    let creds = credentials(&ns).await;
    let corrupt: Secret = support::from_json(serde_json::json!({
        "metadata": {"name": "storageos-webhook",
                     "annotations": {"storageos.com/not-after": "2099-01-01T00:00:00+00:00"}},
        "stringData": {"ca-cert.pem": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                       "cert.pem": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                       "key.pem": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}
    }));
    ns.api::<Secret>()
        .create(&PostParams::default(), &corrupt)
        .await
        .unwrap();
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let api_port = sim.addr().port();
    let mut replica = Replica::spawn(&ns.name, api_port, creds.path(), &[], "apimgr-ca");
    let metrics_port = replica.metrics_port;
    wait_for("the api-manager to become ready", Duration::from_secs(30), || async {
        (readyz(metrics_port).await == Some(200)).then_some(())
    })
    .await;
    let secret = ns.api::<Secret>().get("storageos-webhook").await.unwrap();
    let key = String::from_utf8(secret.data.clone().unwrap()["key.pem"].0.clone()).unwrap();
    assert!(!key.contains("AAAA"), "the corrupt key was kept");
    let ca = String::from_utf8(secret.data.unwrap()["ca-cert.pem"].0.clone()).unwrap();
    assert!(ca_bundle(&mwcs, &ns.name).await.unwrap().contains(ca.trim()));

    // Re-created without a caBundle: injected again within 10 s.
    let mut fresh: MutatingWebhookConfiguration = mwcs.get(&ns.name).await.unwrap();
    mwcs.delete(&ns.name, &DeleteParams::default()).await.unwrap();
    fresh.metadata = kube::api::ObjectMeta {
        name: Some(ns.name.clone()),
        ..Default::default()
    };
    for hook in fresh.webhooks.iter_mut().flatten() {
        hook.client_config.ca_bundle = None;
    }
    mwcs.create(&PostParams::default(), &fresh).await.unwrap();
    wait_for(
        "the CA in the re-created configuration",
        Duration::from_secs(10),
        || async {
            ca_bundle(&mwcs, &ns.name)
                .await
                .filter(|b| b.contains(ca.trim()))
                .map(|_| ())
        },
    )
    .await;
    assert!(replica.child.try_wait().unwrap().is_none(), "the api-manager exited");
    let status = replica.stop().await;
    assert!(status.success(), "exit status {status}");
    let _ = mwcs.delete(&ns.name, &DeleteParams::default()).await;
}

/// How many times the fencer's node poll (`GET /v2/nodes`) reached `sim`.
fn node_polls(sim: &sim::SimHandle) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/nodes"))
        .count()
}

#[tokio::test]
async fn only_the_lease_holder_runs_controllers_and_another_replica_takes_over() {
    let ns = TestNamespace::new("apimgr-le").await;
    let mwcs = webhook_config(&ns).await;
    let creds = credentials(&ns).await;
    // One simulator per replica, so each one's StorageOS traffic can be told apart.
    let (sim_a, sim_b) = (
        Simulator::start(sim::Config::default()).await.unwrap(),
        Simulator::start(sim::Config::default()).await.unwrap(),
    );
    let port = |s: &sim::SimHandle| s.addr().port();
    let flags = ["-enable-leader-election", "-node-poll-interval=5s"];
    let mut a = Replica::spawn(&ns.name, port(&sim_a), creds.path(), &flags, "replica-a");
    wait_for("replica a to hold the lease", Duration::from_secs(30), || async {
        let lease = ns.api::<Lease>().get_opt("storageos-api-manager-lease").await.ok()??;
        (lease.spec?.holder_identity? == "replica-a").then_some(())
    })
    .await;
    let mut b = Replica::spawn(&ns.name, port(&sim_b), creds.path(), &flags, "replica-b");

    // Both replicas serve webhooks; only the leader polls StorageOS for the fencer.
    for (name, r) in [("a", &a), ("b", &b)] {
        wait_for(
            &format!("replica {name} to become ready"),
            Duration::from_secs(30),
            || async { (readyz(r.metrics_port).await == Some(200)).then_some(()) },
        )
        .await;
        assert!(
            tokio::net::TcpStream::connect(("127.0.0.1", r.webhook_port))
                .await
                .is_ok()
        );
    }
    wait_for("the leader's fencer to poll", Duration::from_secs(20), || async {
        (node_polls(&sim_a) > 0).then_some(())
    })
    .await;
    // Over two more of the leader's polls, the follower (alive and ready) polls nothing.
    support::after_polls(&sim_a, "GET /v2/nodes", 2).await;
    assert_eq!(node_polls(&sim_b), 0, "the follower ran a controller");
    assert_eq!(readyz(b.metrics_port).await, Some(200), "the follower is still serving");

    // The leader stops: it releases the lease and the follower takes over the controllers.
    assert!(a.stop().await.success());
    wait_for("replica b to take over", Duration::from_secs(40), || async {
        (node_polls(&sim_b) > 0).then_some(())
    })
    .await;
    let lease = ns.api::<Lease>().get("storageos-api-manager-lease").await.unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("replica-b"));
    assert!(b.stop().await.success());
    let _ = mwcs.delete(&ns.name, &DeleteParams::default()).await;
}

/// Without `-enable-leader-election` every replica runs the controllers (docs/features.md) and no Lease
/// is taken.
#[tokio::test]
async fn without_leader_election_every_replica_runs_the_controllers() {
    let ns = TestNamespace::new("apimgr-nole").await;
    let mwcs = webhook_config(&ns).await;
    let creds = credentials(&ns).await;
    let (sim_a, sim_b) = (
        Simulator::start(sim::Config::default()).await.unwrap(),
        Simulator::start(sim::Config::default()).await.unwrap(),
    );
    let port = |s: &sim::SimHandle| s.addr().port();
    let flags = ["-node-poll-interval=5s"];
    let mut a = Replica::spawn(&ns.name, port(&sim_a), creds.path(), &flags, "solo-a");
    let mut b = Replica::spawn(&ns.name, port(&sim_b), creds.path(), &flags, "solo-b");
    for (name, sim) in [("a", &sim_a), ("b", &sim_b)] {
        wait_for(
            &format!("replica {name}'s fencer to poll"),
            Duration::from_secs(40),
            || async { (node_polls(sim) > 0).then_some(()) },
        )
        .await;
    }
    assert!(
        ns.api::<Lease>()
            .get_opt("storageos-api-manager-lease")
            .await
            .unwrap()
            .is_none(),
        "no Lease is taken without leader election"
    );
    // Each controller reports its reconciles under its own name, as controller-runtime does.
    let metrics = metrics_text(a.metrics_port).await;
    for controller in [
        "fencer",
        "shared-volume",
        "node-delete",
        "namespace-delete",
        "node-label",
        "pvc-label",
    ] {
        for family in [
            "controller_runtime_reconcile_total{",
            "controller_runtime_reconcile_errors_total{",
            "controller_runtime_reconcile_time_seconds_count{",
        ] {
            let series = format!(r#"{family}controller="{controller}""#);
            assert!(
                metrics.contains(&series),
                "{series} is missing from /metrics:\n{metrics}"
            );
        }
    }

    assert!(a.stop().await.success());
    assert!(b.stop().await.success());
    let _ = mwcs.delete(&ns.name, &DeleteParams::default()).await;
}

/// Events under the api-manager's own RBAC: a repeat is one more of a series, a new message a new
/// event, and a repeat whose event is gone (deleted, or expired by the apiserver) a new one.
#[tokio::test]
async fn a_repeated_event_is_a_series_and_a_repeat_of_a_deleted_one_a_new_event() {
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use kube::api::ListParams;
    use kube::runtime::events::{Event, EventType, Reporter};
    use storageos_operator::runtime::kube::events::Recorder;

    let ns = TestNamespace::new("events").await;
    let recorder = Recorder::new(
        support::identity::api_manager_client().await,
        Reporter {
            controller: "storageos-api-manager".into(),
            instance: None,
        },
    );
    let pod = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(ns.name.clone()),
        name: Some("app".into()),
        uid: Some("3db9d69b-8485-42cf-8007-c8faa0a98328".into()),
        ..ObjectReference::default()
    };
    let fenced = |note: &str| Event {
        type_: EventType::Warning,
        reason: "Fenced".into(),
        note: Some(note.into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let events: kube::Api<K8sEvent> = kube::Api::namespaced(ns.client.clone(), &ns.name);
    let listed = || async { events.list(&ListParams::default()).await.unwrap().items };

    for _ in 0..3 {
        recorder.publish(&fenced("node n1 offline"), &pod).await.unwrap();
    }
    let once = listed().await;
    assert_eq!(once.len(), 1, "three repeats are one event: {once:?}");
    assert_eq!(once[0].series.as_ref().map(|s| s.count), Some(3));
    assert_eq!(once[0].reporting_controller.as_deref(), Some("storageos-api-manager"));

    recorder.publish(&fenced("node n2 offline"), &pod).await.unwrap();
    let notes: Vec<_> = listed().await.into_iter().filter_map(|e| e.note).collect();
    assert!(
        notes.contains(&"node n2 offline".to_string()),
        "a new message is shown: {notes:?}"
    );

    events
        .delete(&once[0].metadata.name.clone().unwrap(), &DeleteParams::default())
        .await
        .unwrap();
    recorder.publish(&fenced("node n1 offline"), &pod).await.unwrap();
    let again = listed().await;
    let n1: Vec<_> = again
        .iter()
        .filter(|e| e.note.as_deref() == Some("node n1 offline"))
        .collect();
    assert_eq!(
        n1.len(),
        1,
        "the repeat of a deleted event is published anew: {again:?}"
    );
    assert!(n1[0].series.is_none());
}
