//! Integration tier: the api-manager's webhooks through real admission. The apiserver reaches
//! them through a Service whose Endpoints point at this machine's address (aggregator routing),
//! exactly the way it reaches the webhook Service in a cluster.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Endpoints, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use prometheus_client::registry::Registry;
use serde_json::json;
use storageos_operator::apimanager::certs::{CertManager, NOT_AFTER_ANNOTATION};
use storageos_operator::apimanager::webhook::{self, KubeLookups, WebhookMetrics, WebhookState};
use storageos_operator::runtime::https;
use support::{TestNamespace, from_json, wait_for};

fn pod(name: &str, claim: Option<&str>, annotations: serde_json::Value) -> Pod {
    let volumes: Vec<_> = claim
        .map(|c| json!({"name": "d", "persistentVolumeClaim": {"claimName": c}}))
        .into_iter()
        .collect();
    from_json(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/app:1"}], "volumes": volumes}
    }))
}

#[tokio::test]
async fn pod_and_pvc_mutators_through_real_admission() {
    let ns = TestNamespace::new("webhooks").await;
    let client = ns.client.clone();

    // Two replicas' certificate managers share one Secret.
    let manager = CertManager {
        client: client.clone(),
        secret_namespace: ns.name.clone(),
        secret_name: "storageos-webhook".into(),
        service_namespace: ns.name.clone(),
        service_name: "storageos-webhook".into(),
        webhook_config: ns.name.clone(),
        validity: chrono::Duration::days(365),
    };
    let cert = manager.ensure().await.unwrap();
    let replica2 = manager.clone().ensure().await.unwrap();
    assert_eq!(cert.cert_pem, replica2.cert_pem, "replicas must share one certificate");

    // Serve the webhooks on loopback with that certificate.
    let host = support::host_ip();
    let listener = tokio::net::TcpListener::bind((host, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let state = WebhookState {
        lookups: KubeLookups(client.clone()),
        scheduler: Some("storageos-scheduler".into()),
        metrics: WebhookMetrics::register(&mut Registry::default()),
    };
    let router = webhook::router(state, "/mutate-pods", "/mutate-pvcs");
    let slot = https::CertSlot::new(&cert.cert_pem, &cert.key_pem).unwrap();
    let server = tokio::spawn(https::serve(listener, slot.clone(), router, std::future::pending()));

    let svc: Service = from_json(json!({"metadata": {"name": "storageos-webhook"},
        "spec": {"ports": [{"name": "webhook", "port": 443, "targetPort": port}]}}));
    ns.api::<Service>().create(&PostParams::default(), &svc).await.unwrap();
    let eps: Endpoints = from_json(json!({"metadata": {"name": "storageos-webhook"},
        "subsets": [{"addresses": [{"ip": host.to_string()}], "ports": [{"name": "webhook", "port": port}]}]}));
    ns.api::<Endpoints>()
        .create(&PostParams::default(), &eps)
        .await
        .unwrap();

    // The configuration is created without a caBundle, as the operator renders it.
    let hook = |name: &str, resource: &str, path: &str| {
        json!({
            "name": name,
            "clientConfig": {"service": {"namespace": ns.name, "name": "storageos-webhook", "path": path, "port": 443}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": [resource]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 5
        })
    };
    let mwc: MutatingWebhookConfiguration = from_json(json!({
        "metadata": {"name": ns.name},
        "webhooks": [hook("pod-mutator.storageos.com", "pods", "/mutate-pods"), hook("pvc-mutator.storageos.com", "persistentvolumeclaims", "/mutate-pvcs")]
    }));
    let mwcs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    mwcs.create(&PostParams::default(), &mwc).await.unwrap();
    manager.inject_ca(&cert.ca_pem).await.unwrap();
    let injected = mwcs.get(&ns.name).await.unwrap();
    for hook in injected.webhooks.unwrap() {
        let bundle = String::from_utf8(hook.client_config.ca_bundle.unwrap().0).unwrap();
        assert!(bundle.contains(cert.ca_pem.trim()), "caBundle lacks the CA");
    }

    let class = format!("{}-sos", ns.name);
    let classes: Api<StorageClass> = Api::all(client.clone());
    let sc = classes
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": class}, "provisioner": "csi.storageos.com"})),
        )
        .await
        .unwrap();

    // PVC: the StorageClass UID is recorded (retry until the apiserver has the webhook config).
    let pvcs = ns.api::<PersistentVolumeClaim>();
    let mut n = 0;
    let annotated = wait_for("the PVC mutator to annotate a StorageOS PVC", Duration::from_secs(30), || {
        n += 1;
        let (pvcs, class) = (pvcs.clone(), class.clone());
        async move {
            let pvc: PersistentVolumeClaim = from_json(json!({"metadata": {"name": format!("data{n}")},
                "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}));
            let created = pvcs.create(&PostParams::default(), &pvc).await.ok()?;
            created.metadata.annotations?.get("storageos.com/storageclass").cloned()
        }
    })
    .await;
    assert_eq!(Some(annotated), sc.metadata.uid);

    let pods = ns.api::<Pod>();
    let scheduler_of = |p: Pod| p.spec.and_then(|s| s.scheduler_name).unwrap_or_default();
    let uses = pods
        .create(&PostParams::default(), &pod("uses-storageos", Some("data1"), json!({})))
        .await
        .unwrap();
    assert_eq!(scheduler_of(uses), "storageos-scheduler");
    let opted_out = pods
        .create(
            &PostParams::default(),
            &pod("opted-out", Some("data1"), json!({"storageos.com/scheduler": "false"})),
        )
        .await
        .unwrap();
    assert_eq!(scheduler_of(opted_out), "default-scheduler");
    let plain = pods
        .create(&PostParams::default(), &pod("plain", None, json!({})))
        .await
        .unwrap();
    assert_eq!(scheduler_of(plain), "default-scheduler");
    // A pod whose PVC does not exist yet is admitted, unchanged.
    let early = pods
        .create(&PostParams::default(), &pod("early", Some("not-yet"), json!({})))
        .await
        .unwrap();
    assert_eq!(scheduler_of(early), "default-scheduler");

    // A certificate inside its re-issue window is replaced; the bundle keeps the old CA while the
    // server switches, so admissions never fail.
    let secrets = ns.api::<Secret>();
    let soon = json!({"metadata": {"annotations": {NOT_AFTER_ANNOTATION: (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339()}}});
    secrets
        .patch("storageos-webhook", &PatchParams::default(), &Patch::Merge(&soon))
        .await
        .unwrap();
    let renewed = manager.ensure().await.unwrap();
    assert_ne!(renewed.cert_pem, cert.cert_pem, "the certificate was not re-issued");
    manager.inject_ca(&renewed.ca_pem).await.unwrap();
    let during = pods
        .create(
            &PostParams::default(),
            &pod("during-rotation", Some("data1"), json!({})),
        )
        .await
        .unwrap();
    assert_eq!(
        scheduler_of(during),
        "storageos-scheduler",
        "admission failed while the old certificate was served"
    );
    slot.replace(&renewed.cert_pem, &renewed.key_pem).unwrap();
    let after = pods
        .create(&PostParams::default(), &pod("after-rotation", Some("data1"), json!({})))
        .await
        .unwrap();
    assert_eq!(
        scheduler_of(after),
        "storageos-scheduler",
        "admission failed with the new certificate"
    );
    let bundle = String::from_utf8(
        mwcs.get(&ns.name).await.unwrap().webhooks.unwrap()[0]
            .client_config
            .ca_bundle
            .clone()
            .unwrap()
            .0,
    )
    .unwrap();
    assert!(
        bundle.starts_with(renewed.ca_pem.trim()) && bundle.contains(cert.ca_pem.trim()),
        "bundle must hold new then old CA"
    );

    let _ = mwcs.delete(&ns.name, &DeleteParams::default()).await;
    let _ = classes.delete(&class, &DeleteParams::default()).await;
    server.abort();
}
