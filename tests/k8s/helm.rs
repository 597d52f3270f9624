//! Integration tier: the other two ways in. `kubectl apply --server-side -k deploy/` makes exactly
//! the objects of `deploy/operator.yaml` (a server-side diff against it is empty). The Helm chart
//! (helm v4 from `hack/tools.sh go`) installed into a namespace of its own with the example
//! cluster as a value: the operator, started with exactly the args and env of the Deployment
//! Helm made and acting as its ServiceAccount, takes the cluster to `3/3 Running`; `helm
//! upgrade` of one value changes only that; `helm uninstall` leaves no operator RBAC but keeps
//! the cluster (resource policy `keep`); installing again adopts it with its UID and node pods.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams};
use kube::{Client, ResourceExt};
use serde_json::Value;
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::install;
use storageos_operator::sim::{self, Simulator};
use support::dist::helm;
use support::identity::Identity;
use support::install::{ExampleCluster, Operator, kubectl, kubectl_ok, ready, repo};
use support::wait_for;

const SETTLE: Duration = Duration::from_secs(120);
/// The release namespace: not the one of deploy/operator.yaml, so that every namespaced object
/// and RBAC subject must follow `.Release.Namespace`.
const NS: &str = "storageos-helm";
const OPERATOR: Identity = Identity {
    namespace: NS,
    name: install::NAME,
};

fn chart() -> String {
    repo("deploy/helm/storageos-operator")
}

/// resourceVersion and the JSON (without metadata and status) of every object the chart made.
async fn chart_objects(admin: &Client) -> BTreeMap<String, (String, Value)> {
    async fn one<K>(api: Api<K>, name: &str, out: &mut BTreeMap<String, (String, Value)>)
    where
        K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    {
        if let Some(o) = api.get_opt(name).await.unwrap() {
            let rv = o.resource_version().unwrap_or_default();
            let mut v = serde_json::to_value(&o).unwrap();
            let map = v.as_object_mut().unwrap();
            map.remove("metadata");
            map.remove("status");
            out.insert(format!("{}/{name}", K::kind(&())), (rv, v));
        }
    }
    let mut out = BTreeMap::new();
    let c = admin.clone();
    one(
        Api::<ServiceAccount>::namespaced(c.clone(), NS),
        install::NAME,
        &mut out,
    )
    .await;
    one(Api::<ClusterRole>::all(c.clone()), install::NAME, &mut out).await;
    one(Api::<ClusterRoleBinding>::all(c.clone()), install::NAME, &mut out).await;
    one(
        Api::<Role>::namespaced(c.clone(), NS),
        install::LEADER_ELECTION_ROLE,
        &mut out,
    )
    .await;
    one(
        Api::<RoleBinding>::namespaced(c.clone(), NS),
        install::LEADER_ELECTION_ROLE,
        &mut out,
    )
    .await;
    one(Api::<Deployment>::namespaced(c.clone(), NS), install::NAME, &mut out).await;
    one(
        Api::<Service>::namespaced(c.clone(), NS),
        install::METRICS_SERVICE,
        &mut out,
    )
    .await;
    one(Api::<Secret>::namespaced(c.clone(), NS), "storageos-api", &mut out).await;
    out
}

/// Starts the operator as the Deployment Helm made runs it, as that Deployment's ServiceAccount.
async fn start_operator(admin: &Client, dir: &std::path::Path, sim: &sim::SimHandle, log: &str) -> Operator {
    let deployment = Api::<Deployment>::namespaced(admin.clone(), NS)
        .get(install::NAME)
        .await
        .unwrap();
    let kubeconfig = support::identity::kubeconfig_file(dir, OPERATOR).await;
    Operator::start(&deployment, NS, &kubeconfig, sim, dir.join(log))
}

async fn running(clusters: &Api<StorageOSCluster>) -> StorageOSCluster {
    wait_for("the chart's cluster to be 3/3 Running and Ready", SETTLE, || async {
        let c = clusters.get("storageos").await.ok()?;
        let (phase, members, cond) = ready(&c)?;
        (phase == "Running" && members == "3/3" && cond.starts_with("True")).then_some(c)
    })
    .await
}

#[tokio::test]
async fn kustomize_and_helm_install_the_operator_and_helm_upgrades_and_uninstalls_it() {
    let _lock = support::cluster_lock();
    support::logs();
    let admin = support::client().await;

    // Kustomize: the base applies, and what it made is what deploy/operator.yaml describes.
    // (Forcing conflicts: earlier tests and runs on this plane applied the CRDs with other
    // field managers, possibly at other versions of them.)
    kubectl_ok(&["apply", "--server-side", "--force-conflicts", "-k", &repo("deploy")]);
    let diff = kubectl(&["diff", "--server-side", "-f", &repo("deploy/operator.yaml")]);
    assert!(
        diff.status.success(),
        "the objects of `kubectl apply -k deploy/` differ from deploy/operator.yaml:\n{}{}",
        String::from_utf8_lossy(&diff.stdout),
        String::from_utf8_lossy(&diff.stderr)
    );

    // Helm needs the cluster-scoped names for itself (a ClusterRole it did not create is not
    // adopted), so the kustomize (and any earlier test's) operator RBAC and webhook go first.
    kubectl_ok(&[
        "delete",
        "clusterrolebinding,clusterrole,validatingwebhookconfiguration",
        install::NAME,
        "--ignore-not-found",
    ]);
    // A namespace left terminating by an earlier run would refuse the release.
    let _ = kubectl(&["wait", "--for=delete", &format!("namespace/{NS}"), "--timeout=120s"]);
    let _cleanup = Cleanup;
    let _cluster = ExampleCluster { namespace: NS };
    let install_args = [
        "install",
        "storageos-operator",
        &chart(),
        "--namespace",
        NS,
        "--create-namespace",
        "--set",
        "cluster.create=true,cluster.apiSecret.password=storageos",
    ];
    helm(&install_args);

    let dir = tempfile::tempdir().unwrap();
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let _sync = sim.sync_with_kubernetes(admin.clone());
    let operator = start_operator(&admin, dir.path(), &sim, "operator.log").await;
    let clusters: Api<StorageOSCluster> = Api::namespaced(admin.clone(), NS);
    let cluster = running(&clusters).await;
    let uid = cluster.metadata.uid.clone().unwrap();
    let pods = wait_for("three node pods", SETTLE, || async {
        let p = support::install::node_pods(&admin).await;
        (p.len() == 3).then_some(p)
    })
    .await;
    let spec = serde_json::to_value(&cluster.spec).unwrap();

    // helm upgrade of one value changes that field only.
    let before = chart_objects(&admin).await;
    assert_eq!(before.len(), 8, "{:?}", before.keys());
    helm(&[
        "upgrade",
        "storageos-operator",
        &chart(),
        "--namespace",
        NS,
        "--reuse-values",
        "--set",
        "replicaCount=3",
    ]);
    let after = chart_objects(&admin).await;
    assert_eq!(before.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>());
    for (id, (rv, v)) in &before {
        let (rv2, v2) = &after[id];
        if id == "Deployment/storageos-operator" {
            assert_eq!(v2["spec"]["replicas"], 3);
            let (mut a, mut b) = (v.clone(), v2.clone());
            a["spec"].as_object_mut().unwrap().remove("replicas");
            b["spec"].as_object_mut().unwrap().remove("replicas");
            assert_eq!(a, b, "helm upgrade --set replicaCount=3 changed more of the Deployment");
        } else {
            assert_eq!(rv, rv2, "helm upgrade --set replicaCount=3 wrote {id}");
        }
    }
    let c = clusters.get("storageos").await.unwrap();
    assert_eq!(
        serde_json::to_value(&c.spec).unwrap(),
        spec,
        "the upgrade changed the cluster's spec"
    );
    assert_eq!(c.metadata.uid.as_deref(), Some(uid.as_str()));

    // helm uninstall: no operator RBAC, ServiceAccount, Deployment or Service is left; the
    // cluster, its Secret and the CRDs stay.
    drop(operator);
    helm(&["uninstall", "storageos-operator", "--namespace", NS, "--wait"]);
    assert_eq!(
        chart_objects(&admin).await.keys().collect::<Vec<_>>(),
        ["Secret/storageos-api"]
    );
    let bindings = support::cluster_role_bindings_naming(&admin, NS).await;
    assert!(bindings.is_empty(), "ClusterRoleBindings still name {NS}: {bindings:?}");
    let c = clusters.get("storageos").await.unwrap();
    assert_eq!(
        c.metadata.uid.as_deref(),
        Some(uid.as_str()),
        "the cluster was not kept"
    );
    assert_eq!(
        support::install::node_pods(&admin).await,
        pods,
        "node pods changed while the operator was away"
    );
    kubectl_ok(&["get", "crd", "storageosclusters.storageos.com"]);

    // Installing again adopts the kept cluster (same UID, same node pods) and runs it.
    helm(&install_args);
    let operator = start_operator(&admin, dir.path(), &sim, "operator-again.log").await;
    let c = running(&clusters).await;
    assert_eq!(c.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(
        support::install::node_pods(&admin).await,
        pods,
        "the reinstall restarted node pods"
    );
    let ds = Api::<DaemonSet>::namespaced(admin.clone(), "kube-system")
        .get("storageos-daemonset")
        .await
        .unwrap();
    assert!(ds.metadata.deletion_timestamp.is_none());

    // Uninstall in the documented order: the cluster first, while the operator runs.
    clusters.delete("storageos", &DeleteParams::default()).await.unwrap();
    wait_for("the operator to finish deleting the cluster", SETTLE, || async {
        clusters.get_opt("storageos").await.ok()?.is_none().then_some(())
    })
    .await;
    drop(operator);
    helm(&["uninstall", "storageos-operator", "--namespace", NS, "--wait"]);
}

/// Removes what the test leaves on failure too: the release, its namespace and kept objects.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        support::dist::helm_uninstall_quietly("storageos-operator", NS, "");
        let _ = kubectl(&["delete", "namespace", NS, "--ignore-not-found", "--wait=false"]);
        // Helm (v4: server-side apply) applied the CRDs with its field manager and never lets
        // go of them: kubectl's manager takes every field, then an apply as "helm" of nothing
        // but their names releases Helm's, so that the other tests' `kubectl apply
        // --server-side` of later versions of the CRDs meets no conflict with "helm".
        let _ = kubectl(&["apply", "--server-side", "--force-conflicts", "-f", &repo("crds")]);
        let names: String = storageos_operator::crd::all()
            .iter()
            .map(|(_, c)| {
                format!(
                    "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: {}}}\n",
                    c.metadata.name.clone().unwrap_or_default()
                )
            })
            .collect();
        if let Ok(file) = tempfile::NamedTempFile::new()
            && std::fs::write(file.path(), names).is_ok()
        {
            let _ = kubectl(&[
                "apply",
                "--server-side",
                "--field-manager=helm",
                "-f",
                &file.path().display().to_string(),
            ]);
        }
    }
}
