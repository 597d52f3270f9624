//! Integration tier: the OLM bundle (`olm/`) installed by OLM's own `olm` operator (built by
//! `hack/olm.sh`, run as a local process) on the local plane. OLM's CRDs, the bundle's CRDs, an
//! all-namespaces OperatorGroup and the CSV are created, with the ServiceAccount and RBAC of the
//! CSV's permissions made the way OLM's catalog operator makes them (names, owner labels and
//! references); the CSV reaches `Succeeded`. The operator binary, started with the args and env of
//! the Deployment OLM created and acting as that ServiceAccount, takes the `alm-examples`
//! StorageOSCluster to `3/3 Running` with no forbidden error. Deleting the CSV leaves no operator
//! RBAC behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use storageos_operator::crd::{StorageOSCluster, StorageOSUpgrade, UpgradePhase};
use storageos_operator::install::{self, olm};
use storageos_operator::operator::upgradeable;
use storageos_operator::sim::{self, Simulator};
use support::identity::{Identity, apply_as_admin as apply};
use support::install::{ExampleCluster, Operator, kubectl_ok, ready, repo};
use support::wait_for;

const SETTLE: Duration = Duration::from_secs(180);

fn csv_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "operators.coreos.com",
        "v1alpha1",
        "ClusterServiceVersion",
    ));
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// The directory `hack/olm.sh` built OLM's tools into (building them the first time).
fn olm_tools() -> PathBuf {
    let out = Command::new("bash")
        .arg(support::repo_root().join("hack/olm.sh"))
        .arg("bin")
        .output()
        .expect("run hack/olm.sh bin");
    assert!(
        out.status.success(),
        "hack/olm.sh bin failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The `olm` process. Dropping it deletes every CSV first (only a running olm removes their
/// `csv-cleanup` finalizer), then stops it, then deletes the test namespace.
struct Olm {
    child: Child,
    log: PathBuf,
    namespace: String,
}

impl Olm {
    fn start(tools: &Path, log: PathBuf, namespace: &str) -> Self {
        // olm v0.42.0 always listens on :8080; a second olm on this machine would fail there.
        if let Err(e) = std::net::TcpListener::bind("0.0.0.0:8080") {
            panic!("port 8080 is taken ({e}): is another olm running? Only one may run on a machine.");
        }
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(tools.join("olm"))
            .env("KUBECONFIG", support::kubeconfig_path())
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .expect("start olm");
        Self {
            child,
            log,
            namespace: namespace.to_string(),
        }
    }
}

impl Drop for Olm {
    fn drop(&mut self) {
        let kubectl = |args: &[&str]| {
            let _ = support::install::kubectl(args);
        };
        let ns = self.namespace.as_str();
        kubectl(&["delete", "csv", "--all", "-n", ns, "--wait", "--timeout=90s"]);
        kubectl(&["delete", "operatorgroups", "--all", "-n", ns, "--wait", "--timeout=30s"]);
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The OperatorGroup's aggregated admin/edit/view roles for the provided APIs.
        let og_roles = format!("olm.owner.kind=OperatorGroup,olm.owner.namespace={ns}");
        kubectl(&["delete", "clusterroles", "-l", &og_roles]);
        kubectl(&["delete", "namespace", ns, "--wait=false"]);
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("--- olm log (last lines) ---");
            for line in log.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

fn short_hash(v: &impl serde::Serialize) -> String {
    let digest = Sha256::digest(serde_json::to_vec(v).unwrap());
    digest.iter().take(10).map(|b| format!("{b:02x}")).collect()
}

/// The ServiceAccount, Roles and ClusterRoles (with bindings) OLM's catalog operator creates for
/// a CSV's `permissions` and `clusterPermissions` (olm `pkg/controller/registry/resolver/rbac.go`):
/// namespaced objects owned by the CSV, cluster-scoped ones carrying its owner labels.
fn rbac_for_csv(csv: &DynamicObject) -> Vec<Value> {
    let (name, ns, uid) = (csv.name_any(), csv.namespace().unwrap(), csv.uid().unwrap());
    let owner = json!([{"apiVersion": "operators.coreos.com/v1alpha1", "kind": "ClusterServiceVersion",
        "name": name, "uid": uid, "controller": false, "blockOwnerDeletion": false}]);
    let labels = |hash: &str| {
        json!({"olm.owner": name, "olm.owner.namespace": ns,
               "olm.owner.kind": "ClusterServiceVersion", "olm.permissions.hash": hash, "olm.managed": "true"})
    };
    let strategy = &csv.data["spec"]["install"]["spec"];
    let mut out = vec![];
    let mut accounts = std::collections::BTreeSet::new();
    for (key, cluster) in [("permissions", false), ("clusterPermissions", true)] {
        for p in strategy[key].as_array().cloned().unwrap_or_default() {
            let sa = p["serviceAccountName"].as_str().unwrap().to_string();
            if accounts.insert(sa.clone()) {
                out.push(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": sa, "namespace": ns, "ownerReferences": owner}}));
            }
            let hash = short_hash(&p);
            let subjects = json!([{"kind": "ServiceAccount", "name": sa, "namespace": ns}]);
            if cluster {
                let role = format!("{name}-{hash}");
                out.push(
                    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": role, "labels": labels(&hash)}, "rules": p["rules"]}),
                );
                out.push(
                    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": role, "labels": labels(&hash)},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                    "subjects": subjects}),
                );
            } else {
                let role = format!("{name}-{sa}-{hash}");
                let meta = json!({"name": role, "namespace": ns, "labels": labels(&hash), "ownerReferences": owner});
                out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": meta, "rules": p["rules"]}));
                out.push(
                    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": meta,
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                    "subjects": subjects}),
                );
            }
        }
    }
    out
}

fn yaml_file(path: &str) -> Value {
    serde_yaml::from_str(&std::fs::read_to_string(repo(path)).unwrap()).unwrap()
}

/// Names of the RBAC objects and ServiceAccounts still there for the CSV.
async fn leftover_rbac(admin: &Client, csv: &str, ns: &str) -> Vec<String> {
    let owned = ListParams::default().labels(&format!("olm.owner={csv}"));
    let mut left = vec![];
    for r in Api::<ClusterRole>::all(admin.clone()).list(&owned).await.unwrap() {
        left.push(format!("ClusterRole/{}", r.name_any()));
    }
    for b in Api::<ClusterRoleBinding>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        let to_us = b.subjects.iter().flatten().any(|s| s.namespace.as_deref() == Some(ns));
        if to_us || b.labels().get("olm.owner").map(String::as_str) == Some(csv) {
            left.push(format!("ClusterRoleBinding/{}", b.name_any()));
        }
    }
    for r in Api::<Role>::namespaced(admin.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        left.push(format!("Role/{}", r.name_any()));
    }
    for b in Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        left.push(format!("RoleBinding/{}", b.name_any()));
    }
    if Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .get_opt(install::NAME)
        .await
        .unwrap()
        .is_some()
    {
        left.push(format!("ServiceAccount/{}", install::NAME));
    }
    left
}

/// OLM's CRDs, copied CSVs off (they would only add noise to every namespace), a new namespace
/// `<prefix>-<suffix>`, then olm (stopped, and the namespace deleted, when it is dropped); and
/// what installing the bundle creates before its CSV: its CRDs and an all-namespaces
/// OperatorGroup in that namespace.
async fn start_olm(admin: &Client, tools: &Path, dir: &Path, prefix: &str) -> (&'static str, Olm) {
    kubectl_ok(&[
        "apply",
        "--server-side",
        "-f",
        &tools.join("crds.yaml").display().to_string(),
    ]);
    kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/clusterserviceversions.operators.coreos.com",
        "crd/operatorgroups.operators.coreos.com",
        "crd/olmconfigs.operators.coreos.com",
    ]);
    apply(
        admin,
        &json!({"apiVersion": "operators.coreos.com/v1", "kind": "OLMConfig",
        "metadata": {"name": "cluster"}, "spec": {"features": {"disableCopiedCSVs": true}}}),
    )
    .await;
    let ns: &'static str = Box::leak(format!("{prefix}-{}", support::suffix()).into_boxed_str());
    kubectl_ok(&["create", "namespace", ns]);
    let olm = Olm::start(tools, dir.join("olm.log"), ns);
    for (file, _) in storageos_operator::crd::all() {
        kubectl_ok(&["apply", "--server-side", "-f", &repo(&format!("olm/manifests/{file}"))]);
    }
    apply(
        admin,
        &json!({"apiVersion": "operators.coreos.com/v1", "kind": "OperatorGroup",
        "metadata": {"name": "storageos", "namespace": ns}, "spec": {}}),
    )
    .await;
    (ns, olm)
}

#[tokio::test]
async fn olm_installs_the_bundle_and_the_operator_runs_the_alm_example_under_the_csv_permissions() {
    let _lock = support::cluster_lock();
    support::logs();
    let admin = support::client().await;
    let tools = olm_tools();
    let dir = tempfile::tempdir().unwrap();

    let (ns, _olm) = start_olm(&admin, &tools, dir.path(), "storageos-olm").await;

    // What installing the bundle creates (its CRDs and an all-namespaces OperatorGroup are
    // there): the CSV, the bundle's other objects, and the ServiceAccount and RBAC of the CSV's
    // permissions.
    let mut csv_obj: DynamicObject =
        serde_json::from_value(yaml_file(&format!("olm/manifests/{}", olm::CSV_FILE))).unwrap();
    csv_obj.metadata.namespace = Some(ns.to_string());
    let csvs = csv_api(&admin, ns);
    let csv = csvs.create(&PostParams::default(), &csv_obj).await.unwrap();
    let mut service = yaml_file("olm/manifests/storageos-operator-metrics_v1_service.yaml");
    service["metadata"]["namespace"] = json!(ns);
    apply(&admin, &service).await;
    for obj in rbac_for_csv(&csv) {
        apply(&admin, &obj).await;
    }

    let name = olm::csv_name();
    wait_for("OLM to take the CSV to Succeeded", SETTLE, || async {
        let c = csvs.get(&name).await.ok()?;
        (c.data["status"]["phase"] == "Succeeded").then_some(())
    })
    .await;
    // All namespaces: OLM itself widens the namespaced permissions (leader election) to a
    // ClusterRole and binding of the same name, owned by the CSV like the clusterPermissions.
    let owned = ListParams::default().labels(&format!("olm.owner={name},olm.owner.namespace={ns}"));
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    wait_for(
        "OLM's cluster-wide copy of the CSV's namespaced permissions",
        SETTLE,
        || async {
            let names: Vec<String> = roles.list(&owned).await.ok()?.iter().map(|r| r.name_any()).collect();
            (names.len() == 2).then_some(())
        },
    )
    .await;
    // The operator as the ServiceAccount OLM's permissions were granted to, with exactly the
    // args and env of the Deployment OLM created.
    let who = Identity {
        namespace: ns,
        name: install::NAME,
    };
    let kubeconfig = support::identity::kubeconfig_file(dir.path(), who).await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let _sync = sim.sync_with_kubernetes(admin.clone());
    // OLM names the operator's OperatorCondition in the Deployment's environment.
    let deployment = wait_for(
        "OLM to name the OperatorCondition in the operator's environment",
        SETTLE,
        || async {
            let d = Api::<Deployment>::namespaced(admin.clone(), ns)
                .get(install::NAME)
                .await
                .ok()?;
            let env = d.spec.as_ref()?.template.spec.as_ref()?.containers[0].env.clone()?;
            env.iter().any(|e| e.name == upgradeable::ENV).then_some(d)
        },
    )
    .await;
    let operator = Operator::start(&deployment, ns, &kubeconfig, &sim, dir.path().join("operator.log"));

    // The alm-examples as the console offers them, created in the operator's namespace (the only
    // one it trusts), with the credentials Secret there too: every one is accepted by the CRDs;
    // the StorageOSCluster runs.
    let examples: Vec<Value> = serde_json::from_str(csv.annotations()["alm-examples"].as_str()).unwrap();
    let _cluster = ExampleCluster { namespace: ns };
    let mut secret = yaml_file("deploy/examples/storageos-secret.yaml");
    secret["metadata"]["namespace"] = json!(ns);
    apply(&admin, &secret).await;
    for example in &examples {
        let mut example = example.clone();
        let path = dir.path().join(format!("{}.json", example["kind"].as_str().unwrap()));
        if example["kind"] == "StorageOSCluster" {
            example["spec"]["secretRefNamespace"] = json!(ns);
        }
        std::fs::write(&path, example.to_string()).unwrap();
        let path = path.display().to_string();
        if example["kind"] == "StorageOSCluster" {
            kubectl_ok(&["apply", "-n", ns, "-f", &path]);
        } else {
            kubectl_ok(&["apply", "-n", ns, "--dry-run=server", "-f", &path]);
        }
    }
    let clusters: Api<StorageOSCluster> = Api::namespaced(admin.clone(), ns);
    wait_for(
        "the alm-examples cluster to be 3/3 Running and Ready",
        SETTLE,
        || async {
            let (phase, members, cond) = ready(&clusters.get("storageos").await.ok()?)?;
            (phase == "Running" && members == "3/3" && cond.starts_with("True")).then_some(())
        },
    )
    .await;
    // OLM is told the operator may be replaced, then not while a StorageOSUpgrade holds the
    // cluster (its nodes stay offline on the new image: UpgradingNodes, up to its 10m timeout),
    // then again once it completed (left in place).
    wait_upgradeable(&admin, ns, &name, "True", "UpgradeSafe").await;
    let upgrades: Api<StorageOSUpgrade> = Api::namespaced(admin.clone(), ns);
    // The next minor of the example's node image (v2.4.2): a path StorageOS supports.
    let new_image = "storageos/node:v2.5.0";
    sim.set_faults(sim::Faults {
        offline_with_image: Some(new_image.into()),
        ..sim::Faults::default()
    });
    let upgrade: StorageOSUpgrade = serde_json::from_value(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSUpgrade",
        "metadata": {"name": "olm-held"}, "spec": {"newImage": new_image, "timeout": "10m"}
    }))
    .unwrap();
    upgrades.create(&PostParams::default(), &upgrade).await.unwrap();
    wait_for("the upgrade to hold the cluster", SETTLE, || async {
        let phase = upgrades.get("olm-held").await.ok()?.status?.phase?;
        (phase == UpgradePhase::UpgradingNodes).then_some(())
    })
    .await;
    let held = wait_upgradeable(&admin, ns, &name, "False", "StorageOSUpgradeUnderWay").await;
    assert!(held.contains(&format!("{ns}/olm-held")), "{held}");
    sim.set_faults(sim::Faults::default());
    wait_for("the upgrade to complete", SETTLE, || async {
        let phase = upgrades.get("olm-held").await.ok()?.status?.phase?;
        (phase == UpgradePhase::Completed).then_some(())
    })
    .await;
    wait_upgradeable(&admin, ns, &name, "True", "UpgradeSafe").await;
    upgrades.delete("olm-held", &DeleteParams::default()).await.unwrap();

    // Refusals by RBAC, not the apiserver's refusal to add content (events) to a namespace that
    // an earlier test is deleting while its objects are still listed.
    let log = operator.log();
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.to_lowercase().contains("forbidden") && !l.contains("because it is being terminated"))
        .collect();
    assert!(
        refused.is_empty(),
        "the operator was refused something under the CSV's permissions:\n{}",
        refused.join("\n")
    );

    // OLM aggregates rights on every owned CRD into the built-in `edit` role: an editor of
    // another namespace creates the kinds there, and nothing comes of it.
    let tenant = support::install::tenant_cannot_escalate(&admin, false).await;

    // Uninstall: the cluster first (the operator removes what it created), then the CSV.
    clusters.delete("storageos", &DeleteParams::default()).await.unwrap();
    wait_for("the operator to finish deleting the cluster", SETTLE, || async {
        clusters.get_opt("storageos").await.ok()?.is_none().then_some(())
    })
    .await;
    // The operator acted since the tenant's objects were stored, and never read them.
    support::install::tenant_objects_were_never_touched(&admin, &tenant).await;
    drop(operator);
    csvs.delete(&name, &DeleteParams::default()).await.unwrap();
    wait_for("the CSV to be gone", SETTLE, || async {
        csvs.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
    wait_for("no operator RBAC or ServiceAccount left behind", SETTLE, || async {
        let left = leftover_rbac(&admin, &name, ns).await;
        let deployment = Api::<Deployment>::namespaced(admin.clone(), ns)
            .get_opt(install::NAME)
            .await
            .ok()?;
        (left.is_empty() && deployment.is_none()).then_some(())
    })
    .await;
}

/// Waits until the OperatorCondition `ns/name` says `Upgradeable` is `status` with `reason`;
/// returns its message.
async fn wait_upgradeable(admin: &Client, ns: &str, name: &str, status: &str, reason: &str) -> String {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("operators.coreos.com", "v2", "OperatorCondition"),
        "operatorconditions",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &ar);
    wait_for(
        &format!("the OperatorCondition to say Upgradeable={status} ({reason})"),
        SETTLE,
        || async {
            let oc = api.get(name).await.ok()?;
            let conditions = oc.data["spec"]["conditions"].as_array()?.clone();
            let c = conditions.iter().find(|c| c["type"] == upgradeable::UPGRADEABLE)?;
            (c["status"] == status && c["reason"] == reason)
                .then(|| c["message"].as_str().unwrap_or_default().to_string())
        },
    )
    .await
}

/// The Go operator's CSV as package `storageos2` published it (storageosoperator.v2.4.1: its
/// names, owned CRDs, install modes and deployment; rules and image reduced to what OLM checks).
/// Its CRDs stand in the bundle's: the Go bundle's are `apiextensions.k8s.io/v1beta1`, which no
/// supported Kubernetes serves, and `storageos.com/v1` keeps the same group, kinds and version.
fn go_csv(ns: &str) -> Value {
    let owned = |kind: &str, plural: &str| {
        json!({"kind": kind, "name": format!("{plural}.storageos.com"), "version": "v1",
               "displayName": kind, "description": kind})
    };
    let mode = |t: &str, supported: bool| json!({"type": t, "supported": supported});
    let sa = "storageoscluster-operator-sa";
    json!({
        "apiVersion": "operators.coreos.com/v1alpha1", "kind": "ClusterServiceVersion",
        "metadata": {"name": GO_CSV, "namespace": ns},
        "spec": {
            "displayName": "StorageOS", "version": "2.4.1",
            "installModes": [mode("OwnNamespace", true), mode("SingleNamespace", true),
                             mode("MultiNamespace", false), mode("AllNamespaces", true)],
            "customresourcedefinitions": {"owned": [
                owned("Job", "jobs"), owned("NFSServer", "nfsservers"),
                owned("StorageOSCluster", "storageosclusters"), owned("StorageOSUpgrade", "storageosupgrades")
            ]},
            "install": {"strategy": "deployment", "spec": {
                "clusterPermissions": [{"serviceAccountName": sa, "rules": [
                    {"apiGroups": ["storageos.com"], "resources": ["storageosclusters"], "verbs": ["get", "list", "watch"]}
                ]}],
                "deployments": [{"name": "storageos-cluster-operator", "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"name": "storageos-cluster-operator"}},
                    "template": {
                        "metadata": {"labels": {"name": "storageos-cluster-operator"}},
                        "spec": {"serviceAccountName": sa, "containers": [{"name": "storageos-operator",
                            "image": "registry.connect.redhat.com/storageos/cluster-operator2:v2.4.1"}]}
                    }
                }}]
            }}
        }
    })
}

const GO_CSV: &str = "storageosoperator.v2.4.1";

/// docs/olm.md, "From the Go operator's `storageos2` package": OLM refuses this bundle's CSV
/// while the Go CSV owns the same CRDs (`OwnerConflict`: no upgrade edge can cross packages);
/// deleting the Go CSV keeps the CRDs and the StorageOSCluster; this bundle then installs, and
/// the operator, trusting the cluster's namespace (the Subscription's `spec.config.env`), runs
/// that same cluster (same UID) and takes the Go operator's node DaemonSet over without
/// restarting its pods (the full set of Go objects is `tests/k8s/adoption.rs`).
#[tokio::test]
async fn the_go_operators_csv_gives_way_to_this_bundle_and_the_cluster_stays() {
    let _lock = support::cluster_lock();
    support::logs();
    let admin = support::client().await;
    let tools = olm_tools();
    let dir = tempfile::tempdir().unwrap();
    let (ns, _olm) = start_olm(&admin, &tools, dir.path(), "storageos-olm-switch").await;

    // The Go era: its CRDs (NFSServer is Go-only; the others are there), its CSV.
    apply(
        &admin,
        &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "nfsservers.storageos.com"},
        "spec": {"group": "storageos.com", "scope": "Namespaced",
            "names": {"kind": "NFSServer", "listKind": "NFSServerList", "plural": "nfsservers", "singular": "nfsserver"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}),
    )
    .await;
    kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/nfsservers.storageos.com",
    ]);
    let csvs = csv_api(&admin, ns);
    let go: DynamicObject = serde_json::from_value(go_csv(ns)).unwrap();
    let go = csvs.create(&PostParams::default(), &go).await.unwrap();
    for obj in rbac_for_csv(&go) {
        apply(&admin, &obj).await;
    }
    let phase = |name: String| {
        let csvs = csvs.clone();
        async move {
            let c = csvs.get(&name).await.ok()?;
            Some((
                c.data["status"]["phase"].as_str()?.to_string(),
                c.data["status"]["reason"].as_str().unwrap_or_default().to_string(),
            ))
        }
    };
    wait_for("OLM to take the Go CSV to Succeeded", SETTLE, || async {
        (phase(GO_CSV.into()).await?.0 == "Succeeded").then_some(())
    })
    .await;

    // The Go operator's cluster, in a namespace of its own (`default` in the field).
    let cluster_ns: &'static str = Box::leak(format!("go-cluster-{}", support::suffix()).into_boxed_str());
    kubectl_ok(&["create", "namespace", cluster_ns]);
    let _cleanup_ns = DeleteNamespace(cluster_ns);
    let _cluster = ExampleCluster { namespace: cluster_ns };
    let mut secret = yaml_file("deploy/examples/storageos-secret.yaml");
    secret["metadata"]["namespace"] = json!(cluster_ns);
    apply(&admin, &secret).await;
    let mut cr = yaml_file("deploy/examples/storageoscluster.yaml");
    cr["metadata"]["namespace"] = json!(cluster_ns);
    cr["spec"]["secretRefNamespace"] = json!(cluster_ns);
    apply(&admin, &cr).await;
    let clusters: Api<StorageOSCluster> = Api::namespaced(admin.clone(), cluster_ns);
    let uid = clusters.get("storageos").await.unwrap().metadata.uid.unwrap();
    // Its node pods, as the Go operator made them (tests/fixtures/adoption: the DaemonSet and its
    // ServiceAccount in kube-system, written by the Go operator's field manager).
    let fixture = std::fs::read_to_string(repo("tests/fixtures/adoption/go-default.yaml")).unwrap();
    let go_objects: Vec<Value> = serde_yaml::Deserializer::from_str(&fixture)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|d: &Value| {
            d["kind"] == "DaemonSet"
                || (d["kind"] == "ServiceAccount" && d["metadata"]["name"] == "storageos-daemonset-sa")
        })
        .collect();
    assert_eq!(go_objects.len(), 2);
    kubectl_ok(&[
        "delete",
        "daemonset",
        "storageos-daemonset",
        "-n",
        "kube-system",
        "--ignore-not-found",
        "--wait",
    ]);
    let go_file = dir.path().join("go-node.json");
    std::fs::write(
        &go_file,
        json!({"apiVersion": "v1", "kind": "List", "items": go_objects}).to_string(),
    )
    .unwrap();
    kubectl_ok(&[
        "apply",
        "--server-side",
        "--field-manager=cluster-operator",
        "-f",
        go_file.to_str().unwrap(),
    ]);
    let daemonsets = Api::<DaemonSet>::namespaced(admin.clone(), "kube-system");
    wait_for("the Go node pods to run on every node", SETTLE, || async {
        let s = daemonsets.get("storageos-daemonset").await.ok()?.status?;
        (s.desired_number_scheduled == 3 && s.number_ready == 3).then_some(())
    })
    .await;
    let pods_before = support::install::node_pods(&admin).await;
    assert_eq!(pods_before.len(), 3);

    // This bundle's CSV beside the Go one: OLM refuses it, whatever its permissions.
    let name = olm::csv_name();
    let mut ours: DynamicObject =
        serde_json::from_value(yaml_file(&format!("olm/manifests/{}", olm::CSV_FILE))).unwrap();
    ours.metadata.namespace = Some(ns.to_string());
    let created = csvs.create(&PostParams::default(), &ours).await.unwrap();
    for obj in rbac_for_csv(&created) {
        apply(&admin, &obj).await;
    }
    wait_for("OLM to fail this bundle's CSV with OwnerConflict", SETTLE, || async {
        let (p, reason) = phase(name.clone()).await?;
        (p == "Failed" && reason == "OwnerConflict").then_some(())
    })
    .await;
    csvs.delete(&name, &DeleteParams::default()).await.unwrap();
    wait_for("the refused CSV to be gone", SETTLE, || async {
        csvs.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;

    // The switch: the Go CSV goes; the CRDs and the cluster stay.
    csvs.delete(GO_CSV, &DeleteParams::default()).await.unwrap();
    wait_for("the Go CSV to be gone", SETTLE, || async {
        csvs.get_opt(GO_CSV).await.ok()?.is_none().then_some(())
    })
    .await;
    for crd in ["storageosclusters", "storageosupgrades", "jobs", "nfsservers"] {
        kubectl_ok(&["get", "crd", &format!("{crd}.storageos.com")]);
    }
    assert_eq!(
        clusters.get("storageos").await.unwrap().metadata.uid.as_deref(),
        Some(uid.as_str())
    );

    // This bundle again: it installs now, and its operator runs the same cluster.
    let created = csvs.create(&PostParams::default(), &ours).await.unwrap();
    for obj in rbac_for_csv(&created) {
        apply(&admin, &obj).await;
    }
    let mut service = yaml_file("olm/manifests/storageos-operator-metrics_v1_service.yaml");
    service["metadata"]["namespace"] = json!(ns);
    apply(&admin, &service).await;
    wait_for("OLM to take this bundle's CSV to Succeeded", SETTLE, || async {
        (phase(name.clone()).await?.0 == "Succeeded").then_some(())
    })
    .await;
    let mut deployment = Api::<Deployment>::namespaced(admin.clone(), ns)
        .get(install::NAME)
        .await
        .unwrap();
    // WATCH_NAMESPACES as the Subscription's spec.config.env puts it into the Deployment.
    support::install::set_env(&mut deployment, "WATCH_NAMESPACES", &format!("{ns},{cluster_ns}"));
    let who = Identity {
        namespace: ns,
        name: install::NAME,
    };
    let kubeconfig = support::identity::kubeconfig_file(dir.path(), who).await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    let _sync = sim.sync_with_kubernetes(admin.clone());
    let operator = Operator::start(&deployment, ns, &kubeconfig, &sim, dir.path().join("operator.log"));
    let running = wait_for(
        "the Go-era cluster to be 3/3 Running under this bundle",
        SETTLE,
        || async {
            let c = clusters.get("storageos").await.ok()?;
            let (p, members, cond) = ready(&c)?;
            (p == "Running" && members == "3/3" && cond.starts_with("True")).then_some(c)
        },
    )
    .await;
    assert_eq!(running.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(
        support::install::node_pods(&admin).await,
        pods_before,
        "the switch restarted node pods"
    );
    let ds = daemonsets.get("storageos-daemonset").await.unwrap();
    assert!(
        ds.metadata
            .managed_fields
            .unwrap_or_default()
            .iter()
            .any(|f| f.manager.as_deref() == Some("storageos-operator")),
        "this operator did not take the Go DaemonSet over"
    );

    // Cleanup in the documented order.
    clusters.delete("storageos", &DeleteParams::default()).await.unwrap();
    wait_for("the operator to finish deleting the cluster", SETTLE, || async {
        clusters.get_opt("storageos").await.ok()?.is_none().then_some(())
    })
    .await;
    drop(operator);
    kubectl_ok(&["delete", "crd", "nfsservers.storageos.com", "--ignore-not-found"]);
}

/// Deletes a namespace when dropped.
struct DeleteNamespace(&'static str);

impl Drop for DeleteNamespace {
    fn drop(&mut self) {
        let _ = support::install::kubectl(&["delete", "namespace", self.0, "--wait=false"]);
    }
}
