//! Integration tier: the install a user makes. `kubectl apply --server-side -f
//! deploy/operator.yaml` (twice, and no warning from it or from a first create of its CRDs), then the operator binary started with exactly the args and env
//! of the Deployment's container, acting as its ServiceAccount, takes the example cluster from
//! `deploy/examples/` to `3/3 Running`. A permission taken away from its ClusterRole shows on the
//! cluster as Ready=False naming it, and giving it back recovers without a restart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::json;
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::install;
use storageos_operator::sim::{self, Simulator};
use support::install::{ExampleCluster, Operator, kubectl, kubectl_ok, ready, repo};
use support::wait_for;

const SETTLE: Duration = Duration::from_secs(90);

/// The CRDs of deploy/operator.yaml under the group `warning-check.storageos.com`: objects no
/// test has created, so a dry-run create shows every warning a first install gets.
fn crds_under_another_group() -> String {
    let text = std::fs::read_to_string(repo("deploy/operator.yaml")).unwrap();
    let mut out = String::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let mut crd: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        if crd["kind"] != "CustomResourceDefinition" {
            continue;
        }
        let group = format!("warning-check.{}", crd["spec"]["group"].as_str().unwrap());
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap().to_string();
        crd["metadata"] = json!({"name": format!("{plural}.{group}")});
        crd["spec"]["group"] = json!(group);
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd).unwrap());
    }
    out
}

/// The operator started as [`run_the_example`] starts it, with the example cluster Running. The
/// cluster is deleted first when this is dropped (fields drop in order), while the operator
/// still runs to finalize it.
struct Running {
    _cluster: ExampleCluster,
    operator: Operator,
    clusters: Api<StorageOSCluster>,
    _sim: sim::SimHandle,
}

impl Running {
    /// Deletes the example cluster and waits until the operator has finished with it: what it
    /// made cluster-wide (roles, webhooks, admission policies) goes too, so no later test meets it.
    async fn delete_the_cluster(&self) {
        self.clusters
            .delete("storageos", &DeleteParams::default())
            .await
            .unwrap();
        wait_for("the operator to finish deleting the cluster", SETTLE, || async {
            self.clusters.get_opt("storageos").await.ok()?.is_none().then_some(())
        })
        .await;
    }
}

/// The operator as its ServiceAccount, with exactly the args and env of `deployment`'s
/// container; then the Secret and the StorageOSCluster of deploy/examples, as docs/install.md
/// says, until the cluster is 3/3 Running and Ready.
async fn run_the_example(admin: &kube::Client, deployment: &Deployment, dir: &std::path::Path) -> Running {
    let kubeconfig = support::identity::kubeconfig_file(dir, support::identity::OPERATOR).await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    // Detached: it follows the plane until the test process ends.
    drop(sim.sync_with_kubernetes(admin.clone()));
    let operator = Operator::start(
        deployment,
        install::NAMESPACE,
        &kubeconfig,
        &sim,
        dir.join("operator.log"),
    );
    let cluster = ExampleCluster {
        namespace: install::NAMESPACE,
    };
    kubectl_ok(&["apply", "-f", &repo("deploy/examples/storageos-secret.yaml")]);
    kubectl_ok(&["apply", "-f", &repo("deploy/examples/storageoscluster.yaml")]);
    let clusters: Api<StorageOSCluster> = Api::namespaced(admin.clone(), install::NAMESPACE);
    wait_for("the example cluster to be 3/3 Running and Ready", SETTLE, || async {
        let (phase, members, cond) = ready(&clusters.get("storageos").await.ok()?)?;
        (phase == "Running" && members == "3/3" && cond.starts_with("True")).then_some(())
    })
    .await;
    Running {
        _cluster: cluster,
        operator,
        clusters,
        _sim: sim,
    }
}

#[tokio::test]
async fn installed_from_deploy_operator_yaml_the_operator_runs_the_example_cluster_under_its_own_rbac() {
    let _lock = support::cluster_lock();
    support::logs();
    let admin = support::client().await;

    // The CRDs as new ones (a create warns of every format the apiserver does not know; an
    // update only of formats the stored CRD lacked, so the shared plane's CRDs would hide one).
    let dir = tempfile::tempdir().unwrap();
    let renamed = dir.path().join("crds-renamed.yaml");
    std::fs::write(&renamed, crds_under_another_group()).unwrap();
    let out = kubectl(&["create", "--dry-run=server", "-f", &renamed.display().to_string()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a dry-run create of the CRDs failed:\n{stderr}");
    assert!(!stderr.contains("Warning"), "creating the CRDs warns:\n{stderr}");

    // A user's install: server-side apply, and again (idempotent), without a warning.
    let _webhook = support::install::RemoveWebhookOnDrop;
    for round in ["first", "second"] {
        let out = kubectl(&["apply", "--server-side", "-f", &repo("deploy/operator.yaml")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{round} `kubectl apply --server-side -f deploy/operator.yaml` failed:\n{stderr}"
        );
        assert!(
            !stderr.contains("Warning"),
            "{round} `kubectl apply --server-side -f deploy/operator.yaml` warns:\n{stderr}"
        );
    }
    let deployment = Api::<Deployment>::namespaced(admin.clone(), install::NAMESPACE)
        .get(install::NAME)
        .await
        .unwrap();

    let running = run_the_example(&admin, &deployment, dir.path()).await;
    let (operator, clusters) = (&running.operator, &running.clusters);

    // Every child is server-side applied with the field manager `storageos-operator` (docs/features.md).
    let ds = Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(admin.clone(), "kube-system")
        .get("storageos-daemonset")
        .await
        .unwrap();
    assert!(
        ds.metadata
            .managed_fields
            .unwrap_or_default()
            .iter()
            .any(|f| f.manager.as_deref() == Some("storageos-operator") && f.operation.as_deref() == Some("Apply")),
        "the node DaemonSet is not applied by field manager storageos-operator"
    );

    // It holds the Lease `storageos-operator-lease` in its own namespace as its pod name, serves
    // its probes, and reports the cluster reconciles under controller-runtime's names (docs/features.md).
    let lease = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(admin.clone(), install::NAMESPACE)
        .get("storageos-operator-lease")
        .await
        .unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("storageos-operator-install-test")
    );
    let get = |path: &'static str| {
        let url = format!("http://127.0.0.1:{}{path}", operator.metrics_port);
        async move { reqwest::get(url).await.unwrap() }
    };
    assert_eq!(get("/healthz").await.status().as_u16(), 200);
    assert_eq!(get("/readyz").await.status().as_u16(), 200);
    let metrics = get("/metrics").await.text().await.unwrap();
    for series in [
        r#"controller_runtime_reconcile_total{controller="storageoscluster",result="requeue_after"}"#,
        r#"controller_runtime_reconcile_time_seconds_count{controller="storageoscluster"}"#,
        r#"controller_runtime_reconcile_total{controller="storageosupgrade""#,
        r#"controller_runtime_reconcile_total{controller="storageos-job""#,
    ] {
        assert!(
            metrics.contains(series),
            "{series} is missing from /metrics:\n{metrics}"
        );
    }

    // The privileged node container's ServiceAccount reads Secrets (the volume keys) but writes
    // none, and cannot delete pods or VolumeAttachments: fencing is the api-manager's.
    let node_sa = "--as=system:serviceaccount:kube-system:storageos-daemonset-sa";
    for (verb, resource, want) in [
        ("get", "secrets", "yes"),
        ("create", "secrets", "no"),
        ("update", "secrets", "no"),
        ("delete", "secrets", "no"),
        ("delete", "pods", "no"),
        ("patch", "pods", "no"),
        ("delete", "volumeattachments.storage.k8s.io", "no"),
    ] {
        let out = kubectl(&["auth", "can-i", verb, resource, "-A", node_sa]);
        let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert_eq!(said, want, "can the node ServiceAccount {verb} {resource}?");
    }

    // A namespace editor explicitly granted the storageos.com kinds in their own namespace
    // cannot turn them into cluster-wide rights: the operator trusts only its own namespace.
    let tenant = support::install::tenant_cannot_escalate(&admin, true).await;

    // Take the StorageClass permissions away, then delete the StorageClass: the operator cannot
    // put it back and says exactly why on the cluster.
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let full = install::build("x").unwrap().cluster_role.rules.unwrap();
    let lacking: Vec<_> = full
        .iter()
        .cloned()
        .filter_map(|mut r| {
            let resources: Vec<String> = r
                .resources
                .take()
                .unwrap_or_default()
                .into_iter()
                .filter(|res| res != "storageclasses")
                .collect();
            (!resources.is_empty()).then(|| {
                r.resources = Some(resources);
                r
            })
        })
        .collect();
    let set_rules = |rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule>| {
        let roles = roles.clone();
        async move {
            roles
                .patch(
                    install::NAME,
                    &PatchParams::apply("storageos-operator-tests").force(),
                    &Patch::Apply(json!({
                        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                        "metadata": {"name": install::NAME}, "rules": rules
                    })),
                )
                .await
                .unwrap();
        }
    };
    set_rules(lacking).await;
    let classes: Api<StorageClass> = Api::all(admin.clone());
    classes.delete("fast", &DeleteParams::default()).await.unwrap();
    let message = wait_for(
        "Ready=False naming the missing storageclasses permission",
        SETTLE,
        || async {
            let (_, _, cond) = ready(&clusters.get("storageos").await.ok()?)?;
            (cond.starts_with("False") && cond.contains("storageclasses") && cond.contains("forbidden")).then_some(cond)
        },
    )
    .await;
    assert!(
        message.contains("system:serviceaccount:storageos-operator:storageos-operator"),
        "the message names who was refused: {message}"
    );
    // Whichever request comes first is refused: the apply (get/patch/create) or, when the
    // applier knows the class is unchanged and skips it, the prune's list.
    assert!(
        ["get", "patch", "create", "list"]
            .iter()
            .any(|v| message.contains(&format!("cannot {v} resource \"storageclasses\""))),
        "the message names the verb: {message}"
    );

    // Give it back: the same process recovers (no restart) and the StorageClass returns.
    set_rules(full).await;
    wait_for(
        "the cluster to recover and the StorageClass to return",
        SETTLE,
        || async {
            let (phase, _, cond) = ready(&clusters.get("storageos").await.ok()?)?;
            let back = classes.get_opt("fast").await.ok()??;
            (phase == "Running" && cond.starts_with("True")).then_some(back)
        },
    )
    .await;
    // The operator acted since the tenant's objects were stored, and never read them.
    support::install::tenant_objects_were_never_touched(&admin, &tenant).await;

    // Uninstall in the order of docs/install.md: the cluster first (the operator removes its objects).
    running.delete_the_cluster().await;
}

/// The identities the tests hand to the code under test are not admin: each can do what its
/// role grants and nothing else (so the suite really runs under the shipped RBAC).
#[tokio::test]
async fn test_identities_hold_exactly_their_roles() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::core::v1::{Node, Secret};
    use kube::api::ListParams;

    let operator = support::operator_client().await;
    let api_manager = support::api_manager_client().await;
    let lp = ListParams::default().limit(1);
    // Both read Nodes.
    Api::<Node>::all(operator.clone()).list(&lp).await.unwrap();
    Api::<Node>::all(api_manager.clone()).list(&lp).await.unwrap();
    // The operator manages DaemonSets and Secrets; the api-manager may not list either.
    Api::<DaemonSet>::all(operator.clone()).list(&lp).await.unwrap();
    Api::<Secret>::all(operator.clone()).list(&lp).await.unwrap();
    for (what, err) in [
        (
            "list daemonsets",
            Api::<DaemonSet>::all(api_manager.clone()).list(&lp).await.err(),
        ),
        (
            "list secrets",
            Api::<Secret>::all(api_manager.clone()).list(&lp).await.err(),
        ),
    ] {
        match err {
            Some(kube::Error::Api(s)) if s.code == 403 => {}
            other => panic!("the api-manager may {what}: {other:?}"),
        }
    }
    // Neither may read the cluster's leases outside what its role names.
    match Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(operator, "kube-system")
        .get_opt("kube-controller-manager")
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("the operator may read other Leases: {other:?}"),
    }
}

/// Hundreds of large StorageOS CRs in namespaces the operator does not watch (stored by an
/// administrator; its webhook would refuse them to anyone else) cost the operator nothing: it
/// watches only its own namespace, so it stays Ready and its resident memory stays within 20% of
/// what it was with the example cluster Running. 300 objects (100 of each kind) of ~200 KiB each
/// are 60 MiB it would otherwise cache.
#[tokio::test]
async fn hundreds_of_large_crs_outside_the_watched_namespaces_leave_the_operator_flat() {
    use storageos_operator::crd::{Job, StorageOSUpgrade};

    let _lock = support::cluster_lock();
    let admin = support::client().await;
    let _webhook = support::install::RemoveWebhookOnDrop;
    kubectl_ok(&["apply", "--server-side", "-f", &repo("deploy/operator.yaml")]);
    let deployment = Api::<Deployment>::namespaced(admin.clone(), install::NAMESPACE)
        .get(install::NAME)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let running = run_the_example(&admin, &deployment, dir.path()).await;
    let operator = &running.operator;
    assert!(operator.ready().await, "the operator is not Ready");
    let before = operator.rss_kib();

    // ~200 KiB each, in an annotation (the one place any kind takes that much).
    let blob = "x".repeat(200 * 1024);
    let mut elsewhere = Vec::new();
    let kinds = [
        (
            ApiResource::erase::<StorageOSCluster>(&()),
            json!({"secretRefName": "storageos-api", "secretRefNamespace": "storageos",
                   "kvBackend": {"address": "http://etcd.storageos-etcd.svc:2379"}}),
        ),
        (
            ApiResource::erase::<StorageOSUpgrade>(&()),
            json!({"newImage": "storageos/node:v2.4.2"}),
        ),
        (
            ApiResource::erase::<Job>(&()),
            json!({"image": "busybox", "args": ["true"], "mountPath": "/data",
                   "hostPath": "/var/lib/storageos", "completionWord": "done"}),
        ),
    ];
    for (resource, spec) in kinds {
        let ns = support::TestNamespace::new(&format!("big-{}", resource.kind.to_lowercase())).await;
        let api: Api<DynamicObject> = Api::namespaced_with(ns.client.clone(), &ns.name, &resource);
        for i in 0..100 {
            let object: DynamicObject = support::from_json(json!({
                "apiVersion": resource.api_version, "kind": resource.kind, "spec": spec,
                "metadata": {"name": format!("big-{i}"), "namespace": ns.name, "annotations": {"example.com/blob": blob}}
            }));
            api.create(&Default::default(), &object).await.unwrap();
        }
        elsewhere.push(ns);
    }

    // Evidence that the operator's watches ran past them: a Job in its own namespace, created
    // after the 300, gets its status.
    let jobs: Api<Job> = Api::namespaced(admin.clone(), install::NAMESPACE);
    let marker: Job = support::from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "Job",
        "metadata": {"name": "after-the-big-ones", "namespace": install::NAMESPACE},
        "spec": {"image": "busybox", "args": ["true"], "mountPath": "/data",
                 "hostPath": "/var/lib/storageos", "completionWord": "done"}
    }));
    jobs.create(&Default::default(), &marker).await.unwrap();
    wait_for("the operator to give the later Job a status", SETTLE, || async {
        jobs.get("after-the-big-ones")
            .await
            .ok()?
            .status?
            .conditions
            .map(|_| ())
    })
    .await;
    jobs.delete("after-the-big-ones", &DeleteParams::default())
        .await
        .unwrap();

    assert!(
        operator.ready().await,
        "the operator is not Ready after the 300 large CRs"
    );
    let after = operator.rss_kib();
    eprintln!(
        "operator RSS: {before} KiB with the example cluster Running, {after} KiB after 300 CRs of 200 KiB elsewhere"
    );
    assert!(
        after * 100 <= before * 120,
        "the operator's RSS grew from {before} KiB to {after} KiB (more than 20%) with 300 large CRs in namespaces it does not watch"
    );
    let untouched = elsewhere[0].api::<StorageOSCluster>().get("big-0").await.unwrap();
    assert!(untouched.status.is_none() && untouched.metadata.finalizers.is_none());
    drop(elsewhere);
    running.delete_the_cluster().await;
}

/// A namespace on `WATCH_NAMESPACES` that does not exist (a typo) is reported as a Warning event
/// `WatchedNamespaceMissing` on the operator's pod, naming it and the fix.
#[tokio::test]
async fn a_watched_namespace_that_does_not_exist_is_a_warning_on_the_operators_pod() {
    let _lock = support::cluster_lock();
    let admin = support::client().await;
    let _webhook = support::install::RemoveWebhookOnDrop;
    kubectl_ok(&["apply", "--server-side", "-f", &repo("deploy/operator.yaml")]);
    let mut deployment = Api::<Deployment>::namespaced(admin.clone(), install::NAMESPACE)
        .get(install::NAME)
        .await
        .unwrap();
    let typo = format!("storageos-tenants-{}", support::suffix());
    support::install::set_env(
        &mut deployment,
        "WATCH_NAMESPACES",
        &format!("{},{typo}", install::NAMESPACE),
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = support::identity::kubeconfig_file(dir.path(), support::identity::OPERATOR).await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let _operator = Operator::start(
        &deployment,
        install::NAMESPACE,
        &kubeconfig,
        &sim,
        dir.path().join("operator.log"),
    );
    let event = support::wait_event(
        &admin,
        install::NAMESPACE,
        "storageos-operator-install-test",
        "WatchedNamespaceMissing",
        &typo,
    )
    .await;
    let note = support::message(&event);
    assert!(note.contains("WATCH_NAMESPACES"), "{note}");
    assert_eq!(event.type_.as_deref(), Some("Warning"));
}
