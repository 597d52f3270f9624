//! Integration tier: the api-manager's webhooks (scheduler name, PVC encryption keys and class
//! UID) through real admission. The apiserver reaches them through a Service whose Endpoints
//! point at this machine's address (aggregator routing), exactly the way it reaches the webhook
//! Service in a cluster.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Endpoints, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use prometheus_client::registry::Registry;
use serde_json::json;
use storageos_operator::apimanager::webhook::encryption::{
    ENCRYPTION, NAMESPACE_KEY_SECRET, SECRET_NAME_ANNOTATION, SECRET_NAMESPACE_ANNOTATION, VOLUME_KEY_PREFIX,
};
use storageos_operator::apimanager::webhook::{self, KubeLookups, WebhookMetrics, WebhookState, keys};
use storageos_operator::runtime::kube::webhook_certs::{CertManager, ConfigKind, NOT_AFTER_ANNOTATION};
use storageos_operator::runtime::process::https;
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

/// The webhooks of one test, reachable through real admission: a certificate, a Service whose
/// Endpoints point at this machine, and a configuration limited to the test's namespace.
struct Served {
    manager: CertManager,
    cert: storageos_operator::runtime::process::pki::ServingCert,
    slot: https::CertSlot,
    mwcs: Api<MutatingWebhookConfiguration>,
    name: String,
    server: tokio::task::JoinHandle<()>,
    addr: std::net::SocketAddr,
}

impl Served {
    async fn start(ns: &TestNamespace, lookups: KubeLookups, metrics: WebhookMetrics) -> Self {
        Self::start_for(ns, lookups, metrics, None).await
    }

    /// [`Served::start`] serving only callers with a client certificate of `clients`.
    async fn start_for(
        ns: &TestNamespace,
        lookups: KubeLookups,
        metrics: WebhookMetrics,
        clients: Option<https::ClientAuth>,
    ) -> Self {
        let client = ns.client.clone();
        // The certificates are managed as the api-manager's ServiceAccount, with its rules for
        // a webhook configuration named after the namespace.
        let manager = CertManager {
            client: support::identity::api_manager_client_for(&ns.name).await,
            secret_namespace: ns.name.clone(),
            secret_name: "storageos-webhook".into(),
            service_namespace: ns.name.clone(),
            service_name: "storageos-webhook".into(),
            webhook_config: ns.name.clone(),
            kind: ConfigKind::Mutating,
            component: "storageos-api-manager".into(),
            validity: chrono::Duration::days(365),
        };
        let cert = manager.ensure().await.unwrap();

        let host = support::host_ip();
        let listener = tokio::net::TcpListener::bind((host, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = WebhookState::new(lookups, Some("storageos-scheduler".into()), metrics);
        let router = webhook::router(state, "/mutate-pods", "/mutate-pvcs");
        let slot = https::CertSlot::new(&cert.cert_pem, &cert.key_pem).unwrap();
        let serving = https::serve_for(
            listener,
            slot.clone(),
            clients,
            router,
            std::future::pending(),
            https::Limits::default(),
        );
        let server = tokio::spawn(async move {
            if let Err(e) = serving.await {
                panic!("webhook server failed: {e}");
            }
        });

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
                "failurePolicy": "Fail", "sideEffects": "NoneOnDryRun", "admissionReviewVersions": ["v1"], "timeoutSeconds": 5
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
        Served {
            manager,
            cert,
            slot,
            mwcs,
            name: ns.name.clone(),
            server,
            addr: std::net::SocketAddr::new(host, port),
        }
    }

    /// Webhooks that look things up as the api-manager's ServiceAccount, with its rules.
    async fn as_api_manager(ns: &TestNamespace) -> Self {
        let metrics = WebhookMetrics::register(&mut Registry::default());
        let lookups = KubeLookups::new(support::identity::api_manager_client_for(&ns.name).await);
        Self::start(ns, lookups, metrics).await
    }

    async fn stop(self) {
        let _ = self.mwcs.delete(&self.name, &DeleteParams::default()).await;
        self.server.abort();
    }
}

/// A StorageClass named `name` with the StorageOS provisioner and `parameters`.
async fn storageos_class(client: &kube::Client, name: &str, parameters: serde_json::Value) -> StorageClass {
    Api::<StorageClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &from_json(
                json!({"metadata": {"name": name}, "provisioner": "csi.storageos.com", "parameters": parameters}),
            ),
        )
        .await
        .unwrap()
}

fn pvc(name: &str, class: &str, labels: serde_json::Value, annotations: serde_json::Value) -> PersistentVolumeClaim {
    from_json(
        json!({"metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )
}

/// Creates PVCs `<prefix>1`, `<prefix>2`, ... until `done` says one was admitted by the webhook
/// (the apiserver picks a new configuration up after a moment); that PVC.
async fn first_mutated(
    pvcs: &Api<PersistentVolumeClaim>,
    prefix: &str,
    class: &str,
    labels: serde_json::Value,
    done: impl Fn(&PersistentVolumeClaim) -> bool,
) -> PersistentVolumeClaim {
    let mut n = 0;
    wait_for("the PVC webhook to answer", Duration::from_secs(30), || {
        n += 1;
        let p = pvc(&format!("{prefix}{n}"), class, labels.clone(), json!({}));
        let done = &done;
        async move { pvcs.create(&PostParams::default(), &p).await.ok().filter(done) }
    })
    .await
}

fn annotation(p: &PersistentVolumeClaim, key: &str) -> Option<String> {
    p.metadata.annotations.as_ref()?.get(key).cloned()
}

#[tokio::test]
async fn pod_and_pvc_mutators_through_real_admission() {
    let ns = TestNamespace::new("webhooks").await;
    let client = ns.client.clone();
    let served = Served::as_api_manager(&ns).await;
    let (manager, cert, slot, mwcs) = (&served.manager, &served.cert, &served.slot, &served.mwcs);
    // Two replicas' certificate managers share one Secret.
    let replica2 = manager.clone().ensure().await.unwrap();
    assert_eq!(cert.cert_pem, replica2.cert_pem, "replicas must share one certificate");

    let class = format!("{}-sos", ns.name);
    let sc = storageos_class(&client, &class, json!({})).await;

    // PVC: the StorageClass UID is recorded.
    let pvcs = ns.api::<PersistentVolumeClaim>();
    let annotated = first_mutated(&pvcs, "data", &class, json!({}), |p| {
        annotation(p, "storageos.com/storageclass").is_some()
    })
    .await;
    assert_eq!(annotation(&annotated, "storageos.com/storageclass"), sc.metadata.uid);
    let claim = annotated.metadata.name.clone().unwrap();

    let pods = ns.api::<Pod>();
    let scheduler_of = |p: Pod| p.spec.and_then(|s| s.scheduler_name).unwrap_or_default();
    let uses = pods
        .create(
            &PostParams::default(),
            &pod("uses-storageos", Some(claim.as_str()), json!({})),
        )
        .await
        .unwrap();
    assert_eq!(scheduler_of(uses), "storageos-scheduler");
    let opted_out = pods
        .create(
            &PostParams::default(),
            &pod(
                "opted-out",
                Some(claim.as_str()),
                json!({"storageos.com/scheduler": "false"}),
            ),
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

    // A certificate inside its re-issue window is replaced: the first refresh re-issues it and
    // puts the new CA in the bundle beside the old one, still serving the old certificate; the
    // next refresh serves the new one. Admissions never fail.
    let secrets = ns.api::<Secret>();
    let soon = json!({"metadata": {"annotations": {NOT_AFTER_ANNOTATION: (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339()}}});
    secrets
        .patch("storageos-webhook", &PatchParams::default(), &Patch::Merge(&soon))
        .await
        .unwrap();
    assert!(
        manager.refresh(slot, cert).await.unwrap().is_none(),
        "the re-issued certificate was served in the refresh that injected its CA"
    );
    let renewed = manager.ensure().await.unwrap();
    assert_ne!(renewed.cert_pem, cert.cert_pem, "the certificate was not re-issued");
    let during = pods
        .create(
            &PostParams::default(),
            &pod("during-rotation", Some(claim.as_str()), json!({})),
        )
        .await
        .unwrap();
    assert_eq!(
        scheduler_of(during),
        "storageos-scheduler",
        "admission failed while the old certificate was served"
    );
    let switched = manager.refresh(slot, cert).await.unwrap();
    assert_eq!(
        switched.map(|c| c.cert_pem),
        Some(renewed.cert_pem.clone()),
        "the next refresh serves the re-issued certificate"
    );
    let after = pods
        .create(
            &PostParams::default(),
            &pod("after-rotation", Some(claim.as_str()), json!({})),
        )
        .await
        .unwrap();
    assert_eq!(
        scheduler_of(after),
        "storageos-scheduler",
        "admission failed with the new certificate"
    );
    assert!(
        manager.refresh(slot, &renewed).await.unwrap().is_none(),
        "nothing to switch once the new certificate is served"
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

    // A served certificate about to expire is not kept for another refresh: its successor is
    // served at once.
    secrets
        .patch("storageos-webhook", &PatchParams::default(), &Patch::Merge(&soon))
        .await
        .unwrap();
    let expiring = storageos_operator::runtime::process::pki::ServingCert {
        not_after: chrono::Utc::now() + chrono::Duration::minutes(30),
        ..renewed.clone()
    };
    let third = manager.refresh(slot, &expiring).await.unwrap();
    assert!(
        third.is_some_and(|c| c.cert_pem != renewed.cert_pem),
        "a certificate expiring within the grace was kept"
    );

    let _ = Api::<StorageClass>::all(client)
        .delete(&class, &DeleteParams::default())
        .await;
    served.stop().await;
}

fn bytes<'a>(secret: &'a Secret, key: &str) -> &'a [u8] {
    &secret.data.as_ref().unwrap()[key].0
}

/// The key Secrets in the namespace: the namespace key and every volume key.
async fn key_secrets(secrets: &Api<Secret>) -> Vec<String> {
    let mut names: Vec<_> = secrets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| {
            s.metadata.name.as_deref() == Some(NAMESPACE_KEY_SECRET)
                || s.data.as_ref().is_some_and(|d| d.contains_key("vuk"))
        })
        .filter_map(|s| s.metadata.name)
        .collect();
    names.sort();
    names
}

fn denial(r: Result<PersistentVolumeClaim, kube::Error>) -> String {
    match r {
        Err(kube::Error::Api(s)) => s.message.clone(),
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[tokio::test]
async fn pvc_encryption_keys_through_real_admission() {
    let ns = TestNamespace::new("encryption").await;
    let client = ns.client.clone();
    let served = Served::as_api_manager(&ns).await;
    let (class, enc_class) = (format!("{}-sos", ns.name), format!("{}-sos-enc", ns.name));
    let sc = storageos_class(&client, &class, json!({})).await;
    storageos_class(&client, &enc_class, json!({ENCRYPTION: "true"})).await;
    let (pvcs, secrets) = (ns.api::<PersistentVolumeClaim>(), ns.api::<Secret>());
    let on = json!({ENCRYPTION: "true"});

    // A StorageOS PVC labelled for encryption gets a namespace key, a volume key and the
    // annotations naming it, next to the StorageClass UID.
    let first = first_mutated(&pvcs, "enc", &class, on.clone(), |p| {
        annotation(p, "storageos.com/storageclass").is_some()
    })
    .await;
    let pvc_name = first.metadata.name.clone().unwrap();
    let name = annotation(&first, SECRET_NAME_ANNOTATION).expect("secret name annotation");
    assert!(name.starts_with(VOLUME_KEY_PREFIX), "{name}");
    assert_eq!(annotation(&first, SECRET_NAMESPACE_ANNOTATION).as_ref(), Some(&ns.name));
    assert_eq!(annotation(&first, "storageos.com/storageclass"), sc.metadata.uid);
    let ns_key = secrets.get(NAMESPACE_KEY_SECRET).await.unwrap();
    assert_eq!(bytes(&ns_key, "key").len(), 32);
    let volume = secrets.get(&name).await.unwrap();
    assert_eq!(volume.type_.as_deref(), Some("Opaque"));
    let labels = volume.metadata.labels.clone().unwrap();
    assert_eq!(labels["storageos.com/pvc"], pvc_name);
    assert_eq!(labels["app.kubernetes.io/managed-by"], "storageos-operator");
    assert!(
        volume.metadata.owner_references.is_none(),
        "keys must outlive their PVC"
    );
    let vmk = keys::open(
        bytes(&ns_key, "key"),
        bytes(&volume, "iv"),
        bytes(&volume, "vuk"),
        bytes(&volume, "hmac"),
    )
    .expect("vuk unwraps with the namespace key and the hmac verifies");
    assert_eq!(vmk.as_slice(), bytes(&volume, "key"));
    assert_eq!(bytes(&volume, "vuk").len(), 80);

    // The class parameter turns encryption on; the PVC label turns it off again; a name given
    // by the user is used.
    let by_class = pvcs
        .create(
            &PostParams::default(),
            &pvc(
                "by-class",
                &enc_class,
                json!({}),
                json!({SECRET_NAME_ANNOTATION: "my-key"}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(annotation(&by_class, SECRET_NAME_ANNOTATION).as_deref(), Some("my-key"));
    assert_eq!(bytes(&secrets.get("my-key").await.unwrap(), "vuk").len(), 80);
    let off = pvcs
        .create(
            &PostParams::default(),
            &pvc("off", &enc_class, json!({ENCRYPTION: "false"}), json!({})),
        )
        .await
        .unwrap();
    assert_eq!(annotation(&off, SECRET_NAME_ANNOTATION), None);
    assert!(annotation(&off, "storageos.com/storageclass").is_some());
    let before = key_secrets(&secrets).await;
    assert_eq!(before.len(), 3, "{before:?}");

    // Dry-run: the answer shows the annotations a real create would get, and nothing is made.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let shown = pvcs
        .create(&dry, &pvc("dry", &class, on.clone(), json!({})))
        .await
        .unwrap();
    let shown_name = annotation(&shown, SECRET_NAME_ANNOTATION).expect("dry-run shows the key name");
    assert!(shown_name.starts_with(VOLUME_KEY_PREFIX));
    assert!(
        secrets.get_opt(&shown_name).await.unwrap().is_none(),
        "dry-run created a Secret"
    );
    assert!(pvcs.get_opt("dry").await.unwrap().is_none());
    assert_eq!(key_secrets(&secrets).await, before);

    // A class that does not exist yet: a PVC asking for encryption is denied, to be retried
    // once the class exists (never admitted without keys); without encryption it is admitted.
    let later = format!("{}-later", ns.name);
    let m = denial(
        pvcs.create(&PostParams::default(), &pvc("early", &later, on.clone(), json!({})))
            .await,
    );
    assert!(
        m.contains("StorageClass does not exist yet") && m.contains("retry"),
        "{m}"
    );
    let early = pvcs
        .create(&PostParams::default(), &pvc("early", &later, json!({}), json!({})))
        .await
        .unwrap();
    assert_eq!(early.metadata.annotations, None);

    // User errors are denied with what to fix.
    let m = denial(
        pvcs.create(
            &PostParams::default(),
            &pvc(
                "cross",
                &class,
                on.clone(),
                json!({SECRET_NAMESPACE_ANNOTATION: "kube-system"}),
            ),
        )
        .await,
    );
    assert!(
        m.contains("encryption key secret namespace must match pvc namespace"),
        "{m}"
    );
    let m = denial(
        pvcs.create(
            &PostParams::default(),
            &pvc("bad", &class, json!({ENCRYPTION: "sure"}), json!({})),
        )
        .await,
    );
    assert!(m.contains("storageos.com/encryption") && m.contains("\"sure\""), "{m}");
    assert_eq!(key_secrets(&secrets).await, before);

    // A namespace key Secret without a key: denied, saying what to do; nothing else is made.
    secrets
        .patch(
            NAMESPACE_KEY_SECRET,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"key": null}})),
        )
        .await
        .unwrap();
    let m = denial(
        pvcs.create(&PostParams::default(), &pvc("no-ns-key", &class, on.clone(), json!({})))
            .await,
    );
    assert!(m.contains(NAMESPACE_KEY_SECRET) && m.contains("restore"), "{m}");
    assert_eq!(key_secrets(&secrets).await, before);

    for c in [&class, &enc_class] {
        let _ = Api::<StorageClass>::all(client.clone())
            .delete(c, &DeleteParams::default())
            .await;
    }
    served.stop().await;
}

/// The webhook's own failure: it runs without permission to read Secrets (the misconfiguration
/// a missing `storageos:key-management` binding causes). A PVC that asks for encryption is
/// denied with a message to retry (never admitted without keys), and the failure is counted;
/// one that does not is admitted with its class annotation.
#[tokio::test]
async fn pvc_webhook_fails_closed_for_encryption_when_it_cannot_read_secrets() {
    let ns = TestNamespace::new("enc-forbidden").await;
    let client = ns.client.clone();
    let user = format!("system:serviceaccount:{}:default", ns.name);
    let role = format!("{}-webhook-reader", ns.name);
    let roles: Api<ClusterRole> = Api::all(client.clone());
    roles
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": role}, "rules": [
                {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list"]},
                {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get"]}]})),
        )
        .await
        .unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    bindings
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "User", "name": user}]})),
        )
        .await
        .unwrap();
    let kubeconfig = Kubeconfig::read_from(support::kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info.impersonate = Some(user);
    let restricted = kube::Client::try_from(config).unwrap();

    let mut registry = Registry::default();
    let served = Served::start(
        &ns,
        KubeLookups::new(restricted),
        WebhookMetrics::register(&mut registry),
    )
    .await;
    let class = format!("{}-sos", ns.name);
    storageos_class(&client, &class, json!({})).await;
    let counted = |registry: &Registry, metric: &str| {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        let prefix = format!("{metric}_total{{webhook=\"pvc\"}}");
        text.lines()
            .find(|l| l.starts_with(&prefix))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let pvcs = ns.api::<PersistentVolumeClaim>();
    let mut n = 0;
    let message = wait_for("the PVC webhook to deny", Duration::from_secs(30), || {
        n += 1;
        let p = pvc(&format!("enc{n}"), &class, json!({ENCRYPTION: "true"}), json!({}));
        let pvcs = pvcs.clone();
        async move {
            match pvcs.create(&PostParams::default(), &p).await {
                Err(kube::Error::Api(s)) => Some(s.message),
                _ => None,
            }
        }
    })
    .await;
    assert!(
        message.contains("encryption keys could not be created") && message.contains("retry"),
        "{message}"
    );
    assert_eq!(counted(&registry, "storageos_webhook_failed_closed"), 1);
    assert_eq!(counted(&registry, "storageos_webhook_failed_open"), 0);
    assert!(key_secrets(&ns.api::<Secret>()).await.is_empty());
    let plain = pvcs
        .create(&PostParams::default(), &pvc("plain", &class, json!({}), json!({})))
        .await
        .unwrap();
    assert!(annotation(&plain, "storageos.com/storageclass").is_some());
    let _ = Api::<StorageClass>::all(client.clone())
        .delete(&class, &DeleteParams::default())
        .await;
    let _ = bindings.delete(&role, &DeleteParams::default()).await;
    let _ = roles.delete(&role, &DeleteParams::default()).await;
    served.stop().await;
}

/// A PVC named with 200 characters (StatefulSet claims are often longer than a label value may
/// be) asking for encryption gets its keys through real admission: the Secret's PVC label is a
/// valid (hashed) value and the full name is in its annotation.
#[tokio::test]
async fn a_200_character_encrypted_pvc_gets_its_keys_through_real_admission() {
    let ns = TestNamespace::new("enc-long").await;
    let client = ns.client.clone();
    let mut registry = Registry::default();
    let served = Served::start(
        &ns,
        KubeLookups::new(support::identity::api_manager_client_for(&ns.name).await),
        WebhookMetrics::register(&mut registry),
    )
    .await;
    let class = format!("{}-sos", ns.name);
    storageos_class(&client, &class, json!({})).await;
    let (pvcs, secrets) = (ns.api::<PersistentVolumeClaim>(), ns.api::<Secret>());
    // Wait for the webhook with short names, then create the long one.
    first_mutated(&pvcs, "warm", &class, json!({}), |p| {
        annotation(p, "storageos.com/storageclass").is_some()
    })
    .await;
    let long = format!("{}-0", "data-".repeat(40).trim_end_matches('-'));
    let long = long[long.len() - 200..]
        .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string();
    assert!(long.len() >= 195, "{}", long.len());
    let made = pvcs
        .create(
            &PostParams::default(),
            &pvc(&long, &class, json!({ENCRYPTION: "true"}), json!({})),
        )
        .await
        .expect("the long PVC is admitted");
    let name = annotation(&made, SECRET_NAME_ANNOTATION).expect("the PVC got its keys");
    let volume = secrets.get(&name).await.unwrap();
    assert_eq!(bytes(&volume, "vuk").len(), 80);
    let label = &volume.metadata.labels.as_ref().unwrap()["storageos.com/pvc"];
    assert!(label.len() <= 63, "{label}");
    assert_eq!(volume.metadata.annotations.as_ref().unwrap()["storageos.com/pvc"], long);
    let text = {
        let mut t = String::new();
        prometheus_client::encoding::text::encode(&mut t, &registry).unwrap();
        t
    };
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("storageos_webhook_failed_") && !l.ends_with(" 0") && !l.starts_with('#')),
        "{text}"
    );

    let _ = Api::<StorageClass>::all(client)
        .delete(&class, &DeleteParams::default())
        .await;
    served.stop().await;
}

/// With no api-manager answering, a PVC that asks for encryption only through its StorageClass's
/// parameter is refused by the rendered ValidatingAdmissionPolicy (the pvc-mutator fails open),
/// not admitted without keys. With the key annotations it is admitted, and so is a PVC of a
/// class without encryption and a PVC whose own label decides. Once created, the encryption
/// label and key annotations of a PVC cannot change (the second policy).
#[tokio::test]
async fn class_encrypted_pvc_without_api_manager_is_denied() {
    use storageos_operator::crd::StorageOSCluster;
    use storageos_operator::render::{self, Inputs};

    let _lock = support::cluster_lock();
    let ns = TestNamespace::new("vap").await;
    let admin = ns.client.clone();
    let cluster: StorageOSCluster = from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
        "metadata": {"name": "storageos", "namespace": ns.name},
        "spec": {"secretRefName": "storageos-api", "secretRefNamespace": ns.name,
                 "kvBackend": {"address": support::KV_ADDRESS}}
    }));
    let mut inputs = Inputs::new(cluster, "registry.invalid/storageos-operator:test");
    inputs.secret = Some(from_json(
        json!({"metadata": {"name": "storageos-api", "namespace": ns.name},
        "stringData": {"username": "u", "password": "p"}}),
    ));
    let policy: Vec<serde_json::Value> = render::build(&inputs)
        .unwrap()
        .iter()
        .filter(|o| o.kind().starts_with("ValidatingAdmissionPolicy"))
        .map(|o| o.to_value().unwrap())
        .collect();
    assert_eq!(policy.len(), 6, "the three policies and their bindings are rendered");
    for obj in &policy {
        support::identity::apply_as_admin(&admin, obj).await;
    }
    let classes: Api<StorageClass> = Api::all(admin.clone());
    let (secure, plain) = (format!("secure-{}", ns.name), format!("plain-{}", ns.name));
    for (name, params) in [(&secure, json!({ENCRYPTION: "true"})), (&plain, json!({}))] {
        let sc: StorageClass = from_json(json!({"metadata": {"name": name},
            "provisioner": "csi.storageos.com", "parameters": params}));
        classes.create(&PostParams::default(), &sc).await.unwrap();
    }
    let pvcs: Api<PersistentVolumeClaim> = ns.api();
    let pvc =
        |name: &str, class: &str, labels: serde_json::Value, annotations: serde_json::Value| -> PersistentVolumeClaim {
            from_json(
                json!({"metadata": {"name": name, "labels": labels, "annotations": annotations},
            "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}}),
            )
        };
    // The apiserver picks the new policy and its parameters up within a few seconds.
    let refused = wait_for(
        "the policy to refuse a PVC without keys",
        Duration::from_secs(30),
        || async {
            match pvcs
                .create(&PostParams::default(), &pvc("data", &secure, json!({}), json!({})))
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 422 || s.code == 403 => Some(s.message),
                Ok(_) => {
                    let _ = pvcs.delete("data", &DeleteParams::default()).await;
                    None
                }
                Err(_) => None,
            }
        },
    )
    .await;
    assert!(
        refused.contains(&format!("StorageClass {secure} asks for encryption")) && refused.contains("retry"),
        "{refused}"
    );
    // Keys named in another namespace (another tenant's Secret) are refused, whatever the class.
    let foreign = json!({SECRET_NAME_ANNOTATION: "storageos-volume-key-x", SECRET_NAMESPACE_ANNOTATION: "kube-system"});
    let refused = wait_for(
        "the policy to refuse a key Secret in another namespace",
        Duration::from_secs(30),
        || async {
            match pvcs
                .create(
                    &PostParams::default(),
                    &pvc("foreign", &plain, json!({}), foreign.clone()),
                )
                .await
            {
                Err(kube::Error::Api(s)) => Some(s.message),
                Ok(_) => {
                    let _ = pvcs.delete("foreign", &DeleteParams::default()).await;
                    None
                }
                Err(_) => None,
            }
        },
    )
    .await;
    assert!(refused.contains("must be the namespace of the PVC"), "{refused}");
    // A label value the pvc-mutator cannot read is refused, never read as "no", whatever the
    // class.
    for class in [&secure, &plain] {
        let labelled_no = pvc("label-no", class, json!({ENCRYPTION: "no"}), json!({}));
        match pvcs.create(&PostParams::default(), &labelled_no).await {
            Err(kube::Error::Api(s)) => assert!(
                s.message.contains("must be true or false") || s.message.contains("asks for encryption"),
                "{s:?}"
            ),
            other => panic!("a PVC of {class} labelled \"no\" was admitted: {other:?}"),
        }
    }
    let keys = json!({SECRET_NAME_ANNOTATION: "storageos-volume-key-x", SECRET_NAMESPACE_ANNOTATION: ns.name});
    for (name, class, labels, annotations) in [
        ("with-keys", &secure, json!({}), keys.clone()),
        ("plain", &plain, json!({}), json!({})),
        ("label-off", &secure, json!({ENCRYPTION: "false"}), json!({})),
    ] {
        pvcs.create(&PostParams::default(), &pvc(name, class, labels, annotations))
            .await
            .unwrap_or_else(|e| panic!("{name} was refused: {e}"));
    }
    // Once created, neither the label nor the key annotations change.
    let patched = |name: &'static str, patch: serde_json::Value| {
        let pvcs = pvcs.clone();
        async move { pvcs.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await }
    };
    // The second policy becomes active on its own time too: until it refuses a key change.
    wait_for(
        "the immutability policy to refuse a key change",
        Duration::from_secs(30),
        || async {
            let name = format!("storageos-volume-key-{}", support::suffix());
            let change = json!({"metadata": {"annotations": {SECRET_NAME_ANNOTATION: name}}});
            matches!(patched("with-keys", change).await, Err(kube::Error::Api(_))).then_some(())
        },
    )
    .await;
    for (name, change) in [
        (
            "with-keys",
            json!({"metadata": {"annotations": {SECRET_NAME_ANNOTATION: "storageos-volume-key-y"}}}),
        ),
        (
            "with-keys",
            json!({"metadata": {"annotations": {SECRET_NAMESPACE_ANNOTATION: "elsewhere"}}}),
        ),
        ("label-off", json!({"metadata": {"labels": {ENCRYPTION: "true"}}})),
        ("plain", json!({"metadata": {"labels": {ENCRYPTION: "true"}}})),
    ] {
        match patched(name, change.clone()).await {
            // A key namespace changed to another namespace is refused by either policy.
            Err(kube::Error::Api(s)) => assert!(
                s.message.contains("cannot change once a PVC exists")
                    || s.message.contains("must be the namespace of the PVC"),
                "{s:?}"
            ),
            other => panic!("{name}: {change} was not refused: {other:?}"),
        }
    }
    patched("plain", json!({"metadata": {"labels": {"team": "a"}}}))
        .await
        .expect("other labels still change");
    for obj in policy.iter().rev() {
        let kind = obj["kind"].as_str().unwrap();
        let name = obj["metadata"]["name"].as_str().unwrap();
        support::install::kubectl_ok(&["delete", kind, name, "--ignore-not-found"]);
    }
    for name in [&secure, &plain] {
        let _ = classes.delete(name, &DeleteParams::default()).await;
    }
}

/// The CA of the client certificate the local plane's apiserver presents to admission webhooks
/// (hack/k8s.sh), next to its kubeconfig.
fn plane_webhook_client_ca() -> Vec<u8> {
    let dir = support::kubeconfig_path().parent().unwrap();
    std::fs::read(dir.join("pki/webhook-client-ca.crt")).expect("the plane's webhook client CA (hack/k8s.sh up)")
}

/// A forged AdmissionReview for an encrypted PVC of class `class` in `namespace`, naming the key
/// Secret `secret`.
fn forged_review(namespace: &str, class: &str, secret: &str) -> serde_json::Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
            "resource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
            "name": "forged", "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:default:default"},
            "object": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "forged", "namespace": namespace,
                    "labels": {ENCRYPTION: "true"}, "annotations": {SECRET_NAME_ANNOTATION: secret}},
                "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}}
        }
    })
}

/// With the apiserver's client CA required, real admission still makes the keys, and a caller
/// without the apiserver's certificate (any pod, whatever its ServiceAccount), or with a
/// certificate of another CA, is refused in the TLS handshake: it cannot make the webhook
/// create a Secret.
#[tokio::test]
async fn a_caller_without_the_apiservers_certificate_cannot_make_the_webhook_create_a_secret() {
    let ns = TestNamespace::new("enc-clientauth").await;
    let client = ns.client.clone();
    let metrics = WebhookMetrics::register(&mut Registry::default());
    let lookups = KubeLookups::new(support::identity::api_manager_client_for(&ns.name).await);
    let clients = https::ClientAuth::from_pem(&plane_webhook_client_ca()).unwrap();
    let served = Served::start_for(&ns, lookups, metrics, Some(clients)).await;
    let class = format!("{}-sos", ns.name);
    storageos_class(&client, &class, json!({})).await;
    let (pvcs, secrets) = (ns.api::<PersistentVolumeClaim>(), ns.api::<Secret>());

    // Through the apiserver: keys made as without client authentication.
    let real = first_mutated(&pvcs, "enc", &class, json!({ENCRYPTION: "true"}), |p| {
        annotation(p, SECRET_NAME_ANNOTATION).is_some()
    })
    .await;
    let name = annotation(&real, SECRET_NAME_ANNOTATION).unwrap();
    assert_eq!(bytes(&secrets.get(&name).await.unwrap(), "vuk").len(), 80);
    let before = key_secrets(&secrets).await;

    // Straight to the webhook, trusting its CA: no client certificate, then the plane's admin
    // certificate (another CA). Both are refused; no Secret is made.
    let ca = reqwest::Certificate::from_pem(served.cert.ca_pem.as_bytes()).unwrap();
    let dir = support::kubeconfig_path().parent().unwrap();
    let admin_pem = [
        std::fs::read(dir.join("pki/admin.crt")).unwrap(),
        std::fs::read(dir.join("pki/admin.key")).unwrap(),
    ]
    .concat();
    let host = format!("storageos-webhook.{}.svc", ns.name);
    let callers = [
        ("forged-no-cert", None),
        (
            "forged-other-ca",
            Some(reqwest::Identity::from_pem(&admin_pem).unwrap()),
        ),
    ];
    for (secret, identity) in callers {
        let mut builder = reqwest::Client::builder()
            .add_root_certificate(ca.clone())
            .resolve(&host, served.addr);
        if let Some(identity) = identity {
            builder = builder.identity(identity);
        }
        let answer = builder
            .build()
            .unwrap()
            .post(format!("https://{host}:{}/mutate-pvcs", served.addr.port()))
            .json(&forged_review(&ns.name, &class, secret))
            .send()
            .await;
        assert!(answer.is_err(), "{secret}: the webhook answered: {answer:?}");
        assert!(secrets.get_opt(secret).await.unwrap().is_none(), "{secret} was made");
    }
    assert_eq!(key_secrets(&secrets).await, before, "a forged request made a Secret");

    // The control: the same request with the apiserver's own certificate is answered (and
    // makes its key), so the refusals above are the client authentication, not the request.
    let apiserver_pem = [
        std::fs::read(dir.join("pki/webhook-client.crt")).unwrap(),
        std::fs::read(dir.join("pki/webhook-client.key")).unwrap(),
    ]
    .concat();
    let answer: serde_json::Value = reqwest::Client::builder()
        .add_root_certificate(ca)
        .resolve(&host, served.addr)
        .identity(reqwest::Identity::from_pem(&apiserver_pem).unwrap())
        .build()
        .unwrap()
        .post(format!("https://{host}:{}/mutate-pvcs", served.addr.port()))
        .json(&forged_review(&ns.name, &class, "with-apiserver-cert"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(secrets.get_opt("with-apiserver-cert").await.unwrap().is_some());

    let _ = Api::<StorageClass>::all(client)
        .delete(&class, &DeleteParams::default())
        .await;
    served.stop().await;
}
