//! Integration tier: the operator's validating webhook refuses a second StorageOSCluster through
//! real admission, and never blocks when it is down (`failurePolicy: Ignore`).
//!
//! The webhook is served as `run` serves it (`operator::webhook::serve`, certificates issued and
//! the CA injected as the operator's ServiceAccount), behind the install's own
//! ValidatingWebhookConfiguration, limited to the test's namespace. The install's Service selects
//! the operator's pods; here it is a Service without selector whose Endpoints point at this
//! machine, as for the api-manager's webhooks (tests/k8s/webhooks.rs).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Endpoints, Secret, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use storageos_operator::crd::{StorageOSCluster, StorageOSUpgrade};
use storageos_operator::install;
use storageos_operator::operator::webhook;
use storageos_operator::runtime::kube::trusted::TrustedNamespaces;
use support::{TestNamespace, from_json, wait_for};

fn cluster(ns: &str, name: &str) -> StorageOSCluster {
    from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"secretRefName": "storageos-api", "secretRefNamespace": ns, "pause": true,
                 "kvBackend": {"address": support::KV_ADDRESS}}
    }))
}

/// Removes the plane-wide objects of this test, also when it fails.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = support::install::kubectl(&[
            "delete",
            "validatingwebhookconfiguration",
            install::WEBHOOK_CONFIG,
            "--ignore-not-found",
        ]);
        for kind in ["service", "endpoints", "secret"] {
            let _ = support::install::kubectl(&[
                "-n",
                install::NAMESPACE,
                "delete",
                kind,
                install::WEBHOOK_SERVICE,
                "--ignore-not-found",
            ]);
        }
    }
}

#[tokio::test]
async fn a_second_storageoscluster_is_refused_at_admission_and_a_down_webhook_blocks_nothing() {
    let _lock = support::cluster_lock();
    support::logs();
    let ns = TestNamespace::new("one-cluster").await;
    // A tenant's namespace, which the operator does not watch.
    let tenant = TestNamespace::new("one-cluster-tenant").await;
    let admin = ns.client.clone();
    support::install_crds(&admin).await;
    let operator = support::identity::operator_client().await;
    let _cleanup = Cleanup;

    // The install's configuration, as deploy/operator.yaml has it, plus a namespace selector so
    // that only this test's creates are sent to it.
    let mut config = serde_json::to_value(install::build("x").unwrap().webhook).unwrap();
    assert_eq!(config["webhooks"][0]["failurePolicy"], "Ignore");
    config["webhooks"][0]["namespaceSelector"] = json!({"matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "In", "values": [ns.name, tenant.name]}]});
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(admin.clone());
    configs
        .patch(
            install::WEBHOOK_CONFIG,
            &PatchParams::apply("one-cluster-test").force(),
            &Patch::Apply(&config),
        )
        .await
        .unwrap();

    // Serve it here, as `run` does, and route the Service to this machine.
    let host = support::host_ip();
    let listener = webhook::bind(&format!("{host}:0")).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let services: Api<Service> = Api::namespaced(admin.clone(), install::NAMESPACE);
    let svc: Service = from_json(json!({"metadata": {"name": install::WEBHOOK_SERVICE},
        "spec": {"ports": [{"name": "webhook", "port": 443, "targetPort": port}]}}));
    let _ = services
        .delete(install::WEBHOOK_SERVICE, &DeleteParams::default())
        .await;
    wait_for("the old webhook Service to go", Duration::from_secs(30), || async {
        services
            .get_opt(install::WEBHOOK_SERVICE)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    services.create(&PostParams::default(), &svc).await.unwrap();
    let eps: Endpoints = from_json(
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": install::WEBHOOK_SERVICE},
        "subsets": [{"addresses": [{"ip": host.to_string()}], "ports": [{"name": "webhook", "port": port}]}]}),
    );
    Api::<Endpoints>::namespaced(admin.clone(), install::NAMESPACE)
        .patch(
            install::WEBHOOK_SERVICE,
            &PatchParams::apply("one-cluster-test").force(),
            &Patch::Apply(&eps),
        )
        .await
        .unwrap();
    let settings = webhook::Settings {
        addr: format!("{host}:{port}"),
        cert_dir: std::path::PathBuf::from("/nonexistent/storageos-operator-webhook-certs"),
        namespace: install::NAMESPACE.into(),
        trusted: TrustedNamespaces::only(&ns.name),
    };
    let server = tokio::spawn(webhook::serve(operator, listener, settings));

    // The replicas' certificate is issued into the Secret and its CA injected.
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), install::NAMESPACE);
    wait_for("the webhook CA in the caBundle", Duration::from_secs(60), || async {
        let c = configs.get(install::WEBHOOK_CONFIG).await.unwrap();
        let injected = c.webhooks.unwrap_or_default()[0].client_config.ca_bundle.is_some();
        let issued = secrets.get_opt(install::WEBHOOK_SECRET).await.unwrap().is_some();
        (injected && issued).then_some(())
    })
    .await;

    // Outside the watched namespaces nothing is admitted: not a cluster, not an upgrade.
    let refused = wait_for(
        "the webhook to refuse a cluster in a namespace it does not watch",
        Duration::from_secs(60),
        || async {
            match tenant
                .api::<StorageOSCluster>()
                .create(&PostParams::default(), &cluster(&tenant.name, "early"))
                .await
            {
                Err(kube::Error::Api(s)) => Some(s),
                Ok(_) => {
                    let _ = tenant
                        .api::<StorageOSCluster>()
                        .delete("early", &DeleteParams::default())
                        .await;
                    None
                }
                Err(e) => panic!("{e}"),
            }
        },
    )
    .await;
    assert!(refused.message.contains("NamespaceNotAllowed"), "{refused:?}");
    assert!(refused.message.contains(&tenant.name), "{refused:?}");
    let upgrade: StorageOSUpgrade = from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSUpgrade",
        "metadata": {"name": "u"}, "spec": {"newImage": "attacker/node:v1"}
    }));
    let err = tenant
        .api::<StorageOSUpgrade>()
        .create(&PostParams::default(), &upgrade)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NamespaceNotAllowed"), "{err}");

    // Clusters outside the watched namespaces (other scenarios') do not count against this one.
    // The first cluster is created; a second is refused, naming the first and what to do.
    let clusters = ns.api::<StorageOSCluster>();
    clusters
        .create(&PostParams::default(), &cluster(&ns.name, "first"))
        .await
        .unwrap();
    // The apiserver trusts the new caBundle a moment after it is written.
    let refused = wait_for(
        "the webhook to refuse a second cluster",
        Duration::from_secs(60),
        || async {
            match clusters
                .create(&PostParams::default(), &cluster(&ns.name, "second"))
                .await
            {
                Err(kube::Error::Api(s)) => Some(s),
                Ok(_) => {
                    clusters.delete("second", &DeleteParams::default()).await.unwrap();
                    None
                }
                Err(e) => panic!("{e}"),
            }
        },
    )
    .await;
    assert!(
        refused
            .message
            .contains(&format!("StorageOSCluster {}/first already exists", ns.name)),
        "{refused:?}"
    );
    assert!(refused.message.contains("edit storageoscluster first"), "{refused:?}");
    assert!(
        clusters.get_opt("second").await.unwrap().is_none(),
        "nothing was stored"
    );

    // An update of the first is not a create: the webhook is not asked.
    clusters
        .patch(
            "first",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"debug": true}})),
        )
        .await
        .unwrap();

    // The webhook down (its server stopped, which closes the connections the apiserver keeps
    // open): creates go through, and the operator's fallback (Pending, FailedCreation;
    // tests/k8s/cluster.rs) handles the second cluster.
    server.abort();
    let _ = server.await;
    // A request already on a closing connection may still be answered by the old server.
    wait_for(
        "a create while the webhook is down",
        Duration::from_secs(60),
        || async {
            match clusters
                .create(&PostParams::default(), &cluster(&ns.name, "third"))
                .await
            {
                Ok(_) => Some(()),
                Err(kube::Error::Api(s)) if s.message.contains("already exists, and") => None,
                Err(e) => panic!("a down webhook must not block a create (failurePolicy Ignore): {e}"),
            }
        },
    )
    .await;
}
