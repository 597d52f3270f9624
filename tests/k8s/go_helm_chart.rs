//! Integration tier: the Helm-chart migration test. A Go operator installed with the public
//! StorageOS Helm chart (`storageos-operator` 0.4.6, kept in `tests/fixtures/go-helm-chart/`)
//! is replaced by this one with the commands of docs/adoption.md, in their order, and its cluster
//! is taken over without a node pod restart.
//!
//! The chart (helm v4 from `hack/tools.sh go`) makes the StorageOSCluster, its Secret and the
//! Go operator; the objects the Go operator then made for that cluster are created as in
//! `adoption` (tests/fixtures/adoption/go-default.yaml), with the defaults it wrote back into the
//! CR, and the node pods run. Then, as the page says: the cluster and its Secret are annotated
//! `helm.sh/resource-policy=keep`, `helm upgrade --reuse-values --set cluster.create=false`
//! takes them (and the post-delete cleanup hooks) out of the release, `helm uninstall
//! --no-hooks` removes the Go operator, and this operator, watching the cluster's namespace,
//! adopts the cluster: same UID, same node pods, no hook Job ever made.
//!
//! First the negative control: the annotation alone on the live object keeps nothing, because
//! Helm reads the resource policy from the release's stored manifest, where the chart's CR has
//! no annotation; `helm uninstall` of such a release deletes the StorageOSCluster.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::adoption::{self, Cleanup, SETTLE};
use crate::support;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::runtime::kube::trusted::TrustedNamespaces;
use support::dist::helm;
use support::install::{kubectl, kubectl_ok, repo};
use support::operator::{ClusterOperator, StorageOS};
use support::{TestNamespace, wait_for};

/// The release name and the chart's default cluster name (`cluster.name`).
const RELEASE: &str = "storageos";
const CLUSTER: &str = "storageos";
/// The chart's credentials Secret (`cluster.secretRefName`).
const API_SECRET: &str = "storageos-api";
/// The Go operator's Deployment the chart makes (`<release>-storageos-operator`).
const GO_OPERATOR: &str = "storageos-storageos-operator";
/// The chart's cluster-scoped names: the Go operator's RBAC and its cleanup hooks' RBAC.
const CHART_RBAC: [&str; 2] = ["storageos:operator", "storageos:cleanup"];
/// The password the chart's README had users set (it refuses fewer than 8 characters).
const PASSWORD: &str = "storageos";

fn chart() -> String {
    repo("tests/fixtures/go-helm-chart/storageos-operator")
}

/// `helm install` of the Go chart into `ns` as its README had it: the cluster made by the chart
/// (`cluster.create` is true by default), its operands in the same namespace. `--skip-crds`:
/// the chart's CRDs are `apiextensions.k8s.io/v1beta1`, gone since Kubernetes 1.22; the plane
/// has this project's, which serve the same kinds (tests/fixtures/go-helm-chart/SOURCE.md).
fn install_go_chart(ns: &str) {
    let values = format!(
        "cluster.admin.password={PASSWORD},cluster.kvBackend.address={},cluster.namespace={ns}",
        support::KV_ADDRESS
    );
    helm(&[
        "install",
        RELEASE,
        &chart(),
        "--namespace",
        ns,
        "--skip-crds",
        "--set",
        &values,
    ]);
}

/// Kinds in `helm get <what>` of the release in `ns`.
fn release_kinds(ns: &str, what: &str) -> Vec<String> {
    helm(&["get", what, RELEASE, "--namespace", ns])
        .lines()
        .filter_map(|l| l.strip_prefix("kind: "))
        .map(|k| k.trim().to_string())
        .collect()
}

/// Removes the chart's cluster-scoped objects (RBAC of the Go operator and of the cleanup hooks)
/// that a crashed earlier run may have left, so that `helm install` can make them.
fn clear_chart_rbac() {
    for name in CHART_RBAC {
        kubectl_ok(&["delete", "clusterrolebinding,clusterrole", name, "--ignore-not-found"]);
    }
}

/// Uninstalls what is left of the releases in `namespaces` when the test ends, also on failure.
struct Releases(Vec<String>);

impl Drop for Releases {
    fn drop(&mut self) {
        for ns in &self.0 {
            support::dist::helm_uninstall_quietly(RELEASE, ns, "--no-hooks");
        }
        clear_chart_rbac();
    }
}

/// Writes back what the Go operator v2.4 wrote into the spec of the chart's cluster on its first
/// reconcile (docs/adoption.md, "The CR"), as its field manager.
async fn go_write_back(clusters: &Api<StorageOSCluster>, scheduler_image: &str) {
    let patch = json!({"spec": {
        "images": adoption::go_written_images(scheduler_image),
        "service": {"name": "storageos", "type": "ClusterIP", "externalPort": 5705, "internalPort": 5705},
        "csi": {
            "enable": true,
            "enableProvisionCreds": true,
            "enableControllerPublishCreds": true,
            "enableNodePublishCreds": true,
            "enableControllerExpandCreds": true,
            "deploymentStrategy": "deployment",
        },
    }});
    clusters
        .patch(
            CLUSTER,
            &PatchParams {
                field_manager: Some("cluster-operator".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

/// The Go objects for the chart's cluster in `ns`: tests/fixtures/adoption/go-default.yaml
/// (rendered by the Go operator for the same spec), with the CSI Secrets holding what the Go
/// operator copied from the chart's Secret (its `csi*Username`/`csi*Password` keys).
fn go_objects(ns: &str) -> Vec<Value> {
    let mut go = adoption::go_objects("go-default.yaml", ns);
    for d in go
        .iter_mut()
        .filter(|d| d["kind"] == "Secret" && d["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("csi-")))
    {
        d["data"] = json!({"username": adoption::b64(PASSWORD), "password": adoption::b64(PASSWORD)});
    }
    go
}

/// What the chart's cleanup hooks leave when they run: any Job in `ns` (each hook is one), their
/// ServiceAccount, ClusterRole and ClusterRoleBinding.
fn hook_traces(ns: &str) -> Vec<String> {
    [
        kubectl_ok(&["-n", ns, "get", "jobs", "-o", "name"]),
        kubectl_ok(&[
            "-n",
            ns,
            "get",
            "serviceaccount",
            "storageos-cleanup",
            "--ignore-not-found",
            "-o",
            "name",
        ]),
        kubectl_ok(&[
            "get",
            "clusterrole,clusterrolebinding",
            "storageos:cleanup",
            "--ignore-not-found",
            "-o",
            "name",
        ]),
    ]
    .iter()
    .flat_map(|out| out.lines().map(String::from).collect::<Vec<_>>())
    .collect()
}

#[tokio::test]
async fn a_go_operator_installed_with_the_storageos_helm_chart_is_replaced_and_its_cluster_adopted() {
    let _lock = support::cluster_lock();
    support::logs();
    let control = TestNamespace::new("gohelm-control").await;
    let ns = TestNamespace::new("gohelm").await;
    let client = ns.client.clone();
    support::install_crds(&client).await;
    let nodes = adoption::kwok_nodes(&client).await;
    assert_eq!(nodes.len(), 3, "the plane's kwok nodes: {nodes:?}");
    clear_chart_rbac();
    let _releases = Releases(vec![control.name.clone(), ns.name.clone()]);

    // Negative control: the annotation on the live object alone does not keep the cluster.
    // Helm reads `helm.sh/resource-policy` from the release's stored manifest, and there the
    // chart's StorageOSCluster has none.
    install_go_chart(&control.name);
    assert!(
        release_kinds(&control.name, "manifest").contains(&"StorageOSCluster".to_string()),
        "the chart's StorageOSCluster is part of the release"
    );
    let control_clusters = control.api::<StorageOSCluster>();
    kubectl_ok(&[
        "-n",
        &control.name,
        "annotate",
        "storageoscluster",
        CLUSTER,
        "helm.sh/resource-policy=keep",
    ]);
    helm(&["uninstall", RELEASE, "--namespace", &control.name, "--no-hooks"]);
    assert!(
        control_clusters.get_opt(CLUSTER).await.unwrap().is_none(),
        "`kubectl annotate … keep` then `helm uninstall` kept the cluster: the page's warning is wrong"
    );

    // The Go operator as the chart installed it, and its cluster as it left it: defaults written
    // back into the spec, its objects made, the node pods running.
    install_go_chart(&ns.name);
    assert_eq!(
        release_kinds(&ns.name, "hooks").iter().filter(|k| *k == "Job").count(),
        14,
        "the chart's post-delete cleanup Jobs (one per kind of operand, and the finalizer's)"
    );
    let clusters = ns.api::<StorageOSCluster>();
    let uid = clusters.get(CLUSTER).await.unwrap().uid().unwrap();
    let mut cleanup = Cleanup {
        namespace: ns.name.clone(),
        cluster: Some(CLUSTER.into()),
        unlabel: false,
    };
    let go = go_objects(&ns.name);
    go_write_back(&clusters, &adoption::scheduler_image(&go)).await;
    adoption::clear_cluster_scoped(&client, &go).await;
    adoption::kubectl_create(&go);
    let dss = ns.api::<DaemonSet>();
    wait_for("the Go node pods to run on every node", SETTLE, || async {
        let s = dss.get("storageos-daemonset").await.ok()?.status?;
        (s.desired_number_scheduled == 3 && s.number_ready == 3).then_some(())
    })
    .await;
    let pods_before = adoption::node_pods(&ns).await;
    assert_eq!(pods_before.len(), 3, "{pods_before:?}");
    let ds_generation = dss.get("storageos-daemonset").await.unwrap().metadata.generation;
    let before = adoption::live(&client, &go).await;
    assert!(before.values().all(Option::is_some), "{before:?}");

    // 1. Keep the cluster and its Secret: annotate them, then take them (and with them the
    //    cleanup hooks) out of the release. Helm skips deleting an object that an upgrade drops
    //    when the live object carries the annotation.
    kubectl_ok(&[
        "-n",
        &ns.name,
        "annotate",
        &format!("storageoscluster/{CLUSTER}"),
        &format!("secret/{API_SECRET}"),
        "helm.sh/resource-policy=keep",
    ]);
    helm(&[
        "upgrade",
        RELEASE,
        &chart(),
        "--namespace",
        &ns.name,
        "--reuse-values",
        "--set",
        "cluster.create=false",
    ]);
    let kinds = release_kinds(&ns.name, "manifest");
    assert!(
        !kinds.contains(&"StorageOSCluster".to_string()) && !kinds.contains(&"Secret".to_string()),
        "the upgrade left the cluster or its Secret in the release: {kinds:?}"
    );
    assert_eq!(
        release_kinds(&ns.name, "hooks"),
        Vec::<String>::new(),
        "the release still has hooks"
    );
    let kept = clusters.get_opt(CLUSTER).await.unwrap();
    assert_eq!(
        kept.and_then(|c| c.uid()).as_deref(),
        Some(uid.as_str()),
        "the upgrade deleted the cluster (is it annotated?)"
    );

    // 2. Uninstall the Go operator's release.
    helm(&["uninstall", RELEASE, "--namespace", &ns.name, "--no-hooks"]);
    let kept = clusters.get_opt(CLUSTER).await.unwrap();
    assert!(
        kept.as_ref().is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
        "the uninstall deleted the cluster"
    );
    assert_eq!(kept.and_then(|c| c.uid()).as_deref(), Some(uid.as_str()));
    assert!(ns.api::<Secret>().get_opt(API_SECRET).await.unwrap().is_some());
    assert!(
        ns.api::<Deployment>().get_opt(GO_OPERATOR).await.unwrap().is_none(),
        "the Go operator is still there"
    );
    for name in CHART_RBAC {
        assert!(
            Api::<ClusterRole>::all(client.clone())
                .get_opt(name)
                .await
                .unwrap()
                .is_none(),
            "ClusterRole {name} is still there"
        );
    }
    assert_eq!(
        adoption::node_pods(&ns).await,
        pods_before,
        "the uninstall touched node pods"
    );

    // 3. This operator, watching the cluster's namespace, adopts the cluster.
    let storageos = StorageOS::start(&client).await;
    let operator = ClusterOperator::start_watching(
        &support::operator_client().await,
        &storageos,
        TrustedNamespaces::only(ns.name.clone()),
    );
    wait_for("the adopted cluster to be 3/3 Running and Ready", SETTLE, || async {
        let c = clusters.get(CLUSTER).await.ok()?;
        let s = c.status?;
        let ready = support::condition(&s, "Ready")?.status == "True";
        (s.phase.as_deref() == Some("Running") && s.ready.as_deref() == Some("3/3") && ready).then_some(())
    })
    .await;

    // 4. What to verify: the same cluster, the same node pods (none restarted, the template
    //    unchanged), every Go object the same object but the Go-only leftovers, no apply error,
    //    and no cleanup hook ever ran.
    assert_eq!(
        clusters.get(CLUSTER).await.unwrap().uid().as_deref(),
        Some(uid.as_str())
    );
    adoption::assert_node_pods_untouched(&ns, &pods_before, ds_generation).await;
    let after = adoption::live(&client, &go).await;
    for d in go
        .iter()
        .filter(|d| d["metadata"]["name"] != "storageos:nfs-provisioner")
    {
        let key = adoption::describe(d);
        let now = after[&key].as_ref().unwrap_or_else(|| panic!("{key} was deleted"));
        assert_eq!(before[&key].as_ref().unwrap().0, now.0, "{key} was recreated");
    }
    let failures = support::events(&client, &ns.name, Some("StorageOSCluster"), CLUSTER, "FailedCreation").await;
    assert!(
        failures.is_empty(),
        "apply errors: {:?}",
        failures.iter().map(support::message).collect::<Vec<_>>()
    );
    assert_eq!(hook_traces(&ns.name), Vec::<String>::new(), "a cleanup hook ran");
    let releases = kubectl(&["-n", &ns.name, "get", "secret", "-l", "owner=helm", "-o", "name"]);
    assert_eq!(
        String::from_utf8_lossy(&releases.stdout).trim(),
        "",
        "Helm kept a release record"
    );

    // Clean up: deleting the cluster removes everything, Go-made objects included.
    clusters.delete(CLUSTER, &DeleteParams::default()).await.unwrap();
    wait_for("the cluster to be deleted", SETTLE, || async {
        clusters.get_opt(CLUSTER).await.ok()?.is_none().then_some(())
    })
    .await;
    cleanup.cluster = None;
    operator.stop().await;
}
