//! Integration tier: `plan` previews what applying a StorageOSCluster would do, against the
//! objects a running cluster controller made: nothing when the CR is unchanged, a pending
//! restart of the node DaemonSet only when `spec.resources` changes, the scheduler's objects
//! pruned when it is disabled; and it writes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use storageos_operator::crd::StorageOSCluster;
use storageos_operator::preview;
use storageos_operator::preview::diff::{Action, Entry, Restart};
use storageos_operator::sim::{self, Simulator};
use support::operator::{operator_config, spawn_cluster_controller};
use support::{TestNamespace, from_json, wait_for};

const SETTLE: Duration = Duration::from_secs(90);

fn cr(ns: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({"secretRefName": "storageos-api", "secretRefNamespace": ns, "namespace": ns,
                          "disableTelemetry": true, "kvBackend": {"address": "http://127.0.0.1:2379"}});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
           "metadata": {"name": "planned", "namespace": ns}, "spec": spec})
}

/// resourceVersion of every object the cluster owns, by label.
async fn versions(client: &kube::Client, ns: &str) -> BTreeMap<String, String> {
    let selector = format!("storageos.com/cluster=planned,storageos.com/cluster-namespace={ns}");
    let out = std::process::Command::new(support::kubectl())
        .env("KUBECONFIG", support::kubeconfig_path())
        .args(["get", "all,configmaps,secrets,serviceaccounts,roles,rolebindings,clusterroles,clusterrolebindings,csidrivers,storageclasses,mutatingwebhookconfigurations",
               "-A", "-l", &selector, "-o", "jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}={.metadata.generation}{\"\\n\"}{end}"])
        .output()
        .unwrap();
    let _ = client;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (object, rest) = l.split_once('=')?;
            let (version, generation) = rest.split_once('=')?;
            // A workload's status moves with the plane's controllers and kwok after the operator
            // stopped (a Deployment's ready replicas, on a loaded machine seconds later): its
            // generation is what a write of its spec changes. Every other object: its version.
            let what = match object.split('/').next() {
                Some("Deployment" | "DaemonSet" | "ReplicaSet") if !generation.is_empty() => {
                    format!("generation {generation}")
                }
                _ => version.to_string(),
            };
            Some((object.to_string(), what))
        })
        .collect()
}

#[tokio::test]
async fn plan_previews_changes_restarts_and_prunes_and_writes_nothing() {
    let _lock = support::cluster_lock();
    let ns = TestNamespace::new("plan").await;
    let client = ns.client.clone();
    support::install_crds(&client).await;
    let sim = Simulator::start(sim::Config::default()).await.unwrap();
    // As `run` does: the version it connected to (the kube-scheduler follows its minor).
    let version = client.apiserver_version().await.unwrap().git_version;
    let config = operator_config(sim.url(), storageos_operator::render::parse_k8s_version(&version).ok());
    let operator = spawn_cluster_controller(config.clone()).await;
    support::create_api_secret(&ns, "storageos", "storageos").await;
    let clusters: Api<StorageOSCluster> = ns.api();
    clusters
        .create(&PostParams::default(), &from_json(cr(&ns.name, json!({}))))
        .await
        .unwrap();
    wait_for("the cluster's objects and status", SETTLE, || async {
        ns.api::<DaemonSet>().get_opt("storageos-daemonset").await.ok()??;
        let c = clusters.get("planned").await.ok()?;
        c.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .map(|_| ())
    })
    .await;
    // The operator is stopped, so nothing else writes while the plans run.
    operator.abort();
    let before = versions(&client, &ns.name).await;
    assert!(before.len() > 10, "{before:?}");

    // The CR as it is: nothing to do.
    let same = support::operator::plan(&client, &cr(&ns.name, json!({}))).await;
    let busy: Vec<&Entry> = same.iter().filter(|e| e.action != Action::Untouched).collect();
    assert!(busy.is_empty(), "an unchanged CR plans changes: {busy:#?}");

    // New node resources: the node DaemonSet changes, its pods restart only when deleted.
    let resources = json!({"resources": {"limits": {"memory": "3Gi"}}});
    let changed = support::operator::plan(&client, &cr(&ns.name, resources)).await;
    let restarts: Vec<(&str, Restart)> = changed
        .iter()
        .filter_map(|e| Some((e.object.as_str(), e.restart?)))
        .collect();
    assert_eq!(
        restarts,
        [(
            format!("DaemonSet {}/storageos-daemonset", ns.name).as_str(),
            Restart::Pending
        )],
        "{changed:#?}"
    );
    let name = format!("DaemonSet {}/storageos-daemonset", ns.name);
    let ds = changed.iter().find(|e| e.object == name).unwrap();
    assert!(ds.fields.iter().any(|f| f.contains("resources")), "{ds:?}");

    // The scheduler disabled: its objects are pruned.
    let off = support::operator::plan(&client, &cr(&ns.name, json!({"disableScheduler": true}))).await;
    let pruned: Vec<&str> = off
        .iter()
        .filter(|e| e.action == Action::Prune)
        .map(|e| e.object.as_str())
        .collect();
    assert!(
        pruned.contains(&format!("Deployment {}/storageos-scheduler", ns.name).as_str()),
        "{pruned:?}"
    );
    let table = preview::table(&off);
    assert!(table.contains("to prune"), "{table}");

    // Nothing was written.
    assert_eq!(versions(&client, &ns.name).await, before, "plan wrote to the cluster");

    // The controller finishes the cluster's deletion.
    let operator = spawn_cluster_controller(config).await;
    clusters.delete("planned", &DeleteParams::default()).await.unwrap();
    wait_for("the cluster to be deleted", SETTLE, || async {
        clusters.get_opt("planned").await.ok()?.is_none().then_some(())
    })
    .await;
    operator.abort();
}
