//! Integration tier: server-side apply, change detection and pruning against a real apiserver.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use storageos_operator::cluster::ownership::APPLY_OWNERSHIP;
use storageos_operator::runtime::kube::apply::{Applier, Outcome, PruneKind};
use support::TestNamespace;

const KINDS: &[PruneKind] = &[
    PruneKind {
        api_version: "v1",
        kind: "ConfigMap",
        namespaced: true,
    },
    PruneKind {
        api_version: "apps/v1",
        kind: "DaemonSet",
        namespaced: true,
    },
];

fn config_map(ns: &str, name: &str, value: &str, owner: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": ns, "labels": {"test-owner": owner}},
           "data": {"key": value}})
}

fn daemon_set(ns: &str, owner: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
           "metadata": {"name": "ds", "namespace": ns, "labels": {"test-owner": owner}},
           "spec": {"selector": {"matchLabels": {"app": "ds"}},
                    "template": {"metadata": {"labels": {"app": "ds"}},
                                 "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}}})
}

#[tokio::test]
async fn apply_writes_once_repairs_drift_and_prunes() {
    let ns = TestNamespace::new("apply").await;
    let applier = Applier::new(ns.client.clone(), APPLY_OWNERSHIP);
    let owner = ns.name.clone();
    let desired = vec![
        config_map(&ns.name, "a", "1", &owner),
        config_map(&ns.name, "b", "1", &owner),
        daemon_set(&ns.name, &owner),
    ];

    for obj in &desired {
        assert_eq!(applier.apply(obj, None).await.unwrap().1, Outcome::Applied);
    }
    let cms = ns.api::<ConfigMap>();
    let rv = cms.get("a").await.unwrap().metadata.resource_version;

    // Nothing changed: no writes, even after the DaemonSet controller updated its status.
    let dss = ns.api::<DaemonSet>();
    support::wait_for(
        "the DaemonSet status to be written",
        std::time::Duration::from_secs(30),
        || async {
            dss.get("ds")
                .await
                .ok()?
                .status
                .filter(|s| s.desired_number_scheduled > 0)
        },
    )
    .await;
    for obj in &desired {
        assert_eq!(applier.apply(obj, None).await.unwrap().1, Outcome::Unchanged, "{obj}");
    }
    assert_eq!(cms.get("a").await.unwrap().metadata.resource_version, rv);

    // Someone else edits a field we own: the next apply puts it back.
    let edit = json!({"data": {"key": "tampered"}});
    cms.patch("a", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    assert_eq!(applier.apply(&desired[0], None).await.unwrap().1, Outcome::Applied);
    assert_eq!(cms.get("a").await.unwrap().data.unwrap()["key"], "1");

    // A deleted child is recreated.
    cms.delete("b", &DeleteParams::default()).await.unwrap();
    assert_eq!(applier.apply(&desired[1], None).await.unwrap().1, Outcome::Applied);
    assert!(cms.get_opt("b").await.unwrap().is_some());

    // A changed desired state is written.
    let changed = config_map(&ns.name, "a", "2", &owner);
    assert_eq!(applier.apply(&changed, None).await.unwrap().1, Outcome::Applied);

    // Prune: "b" and the DaemonSet are no longer desired; an unlabelled object is never touched.
    cms.create(
        &Default::default(),
        &support::from_json(json!({"metadata": {"name": "foreign"}})),
    )
    .await
    .unwrap();
    let keep: BTreeSet<_> = [storageos_operator::runtime::kube::apply::ObjectKey::of(&changed).unwrap()].into();
    let deleted = applier
        .prune(KINDS, &format!("test-owner={owner}"), &keep)
        .await
        .unwrap();
    let mut names: Vec<_> = deleted.iter().map(|k| k.to_string()).collect();
    names.sort();
    assert_eq!(names, [format!("ConfigMap {owner}/b"), format!("DaemonSet {owner}/ds")]);
    assert!(cms.get_opt("a").await.unwrap().is_some());
    assert!(cms.get_opt("foreign").await.unwrap().is_some());
}

#[tokio::test]
async fn owner_reference_only_within_the_owners_namespace() {
    let ns = TestNamespace::new("owner").await;
    let applier = Applier::new(ns.client.clone(), APPLY_OWNERSHIP);
    let cms = ns.api::<ConfigMap>();
    let owner_cm = cms
        .create(
            &Default::default(),
            &support::from_json(json!({"metadata": {"name": "owner"}})),
        )
        .await
        .unwrap();
    let owner_ref = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: owner_cm.metadata.uid.unwrap(),
        ..Default::default()
    };
    applier
        .apply(&config_map(&ns.name, "same-ns", "1", "x"), Some((&owner_ref, &ns.name)))
        .await
        .unwrap();
    applier
        .apply(
            &config_map(&ns.name, "other-ns", "1", "x"),
            Some((&owner_ref, "elsewhere")),
        )
        .await
        .unwrap();
    assert_eq!(
        cms.get("same-ns")
            .await
            .unwrap()
            .metadata
            .owner_references
            .map(|o| o.len()),
        Some(1)
    );
    assert!(
        cms.get("other-ns")
            .await
            .unwrap()
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
}

#[tokio::test]
async fn immutable_storage_class_fields_are_replaced_but_workloads_are_not() {
    let ns = TestNamespace::new("immutable").await;
    let applier = Applier::new(ns.client.clone(), APPLY_OWNERSHIP);
    let name = format!("{}-sc", ns.name);
    let sc = |v: &str| {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name}, "provisioner": "csi.storageos.com", "parameters": {"fstype": v}})
    };
    applier.apply(&sc("ext4"), None).await.unwrap();
    // A fresh applier, as after a restart: it must still get the new parameters in.
    let applier = Applier::new(ns.client.clone(), APPLY_OWNERSHIP);
    assert_eq!(applier.apply(&sc("xfs"), None).await.unwrap().1, Outcome::Applied);
    let classes: kube::Api<k8s_openapi::api::storage::v1::StorageClass> = kube::Api::all(ns.client.clone());
    assert_eq!(classes.get(&name).await.unwrap().parameters.unwrap()["fstype"], "xfs");
    let _ = classes.delete(&name, &DeleteParams::default()).await;

    // A DaemonSet whose immutable selector changes is reported, never deleted.
    applier.apply(&daemon_set(&ns.name, "x"), None).await.unwrap();
    let mut changed = daemon_set(&ns.name, "x");
    changed["spec"]["selector"]["matchLabels"]["app"] = json!("other");
    changed["spec"]["template"]["metadata"]["labels"]["app"] = json!("other");
    let err = applier.apply(&changed, None).await.unwrap_err();
    assert!(err.to_string().contains("immutable"), "{err}");
    let uid_before = ns.api::<DaemonSet>().get("ds").await.unwrap().metadata.uid;
    assert!(uid_before.is_some(), "the DaemonSet must still exist");
}

/// A StorageClass someone else made under the name we render (a common name like `fast`)
/// is neither force-applied over nor deleted and recreated when it differs in immutable fields.
#[tokio::test]
async fn a_foreign_storage_class_is_never_taken_over_or_replaced() {
    let ns = TestNamespace::new("foreign-sc").await;
    let classes: kube::Api<k8s_openapi::api::storage::v1::StorageClass> = kube::Api::all(ns.client.clone());
    let name = format!("{}-fast", ns.name);
    let theirs: k8s_openapi::api::storage::v1::StorageClass = serde_json::from_value(
        json!({"metadata": {"name": name}, "provisioner": "example.com/other", "parameters": {"tier": "gold"}}),
    )
    .unwrap();
    let before = classes
        .create(&kube::api::PostParams::default(), &theirs)
        .await
        .unwrap();
    let ours = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "storageos-operator"}},
        "provisioner": "csi.storageos.com", "parameters": {"fstype": "ext4"}});
    let err = Applier::new(ns.client.clone(), APPLY_OWNERSHIP)
        .apply(&ours, None)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "ForeignObject", "{err}");
    assert!(
        err.to_string().contains("not created by the StorageOS operator"),
        "{err}"
    );
    let after = classes.get(&name).await.unwrap();
    assert_eq!(after.metadata.uid, before.metadata.uid, "replaced");
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "written to"
    );
    assert_eq!(after.provisioner, "example.com/other");
    let _ = classes.delete(&name, &DeleteParams::default()).await;
}

/// An object that carries our labels but that we never wrote (copied with kubectl, a
/// restored backup) is never pruned nor deleted; ours with the same labels is.
#[tokio::test]
async fn a_user_object_with_our_labels_is_never_pruned() {
    let ns = TestNamespace::new("foreign-cm").await;
    let applier = Applier::new(ns.client.clone(), APPLY_OWNERSHIP);
    let owner = ns.name.clone();
    applier
        .apply(&config_map(&ns.name, "ours", "1", &owner), None)
        .await
        .unwrap();
    let copy: ConfigMap = serde_json::from_value(config_map(&ns.name, "user-cm", "1", &owner)).unwrap();
    let cms = ns.api::<ConfigMap>();
    cms.create(&kube::api::PostParams::default(), &copy).await.unwrap();
    let selector = format!("test-owner={owner}");
    let listed = applier.list(KINDS, &selector).await.unwrap();
    assert_eq!(listed.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["ours"]);
    let pruned = applier.prune(KINDS, &selector, &BTreeSet::new()).await.unwrap();
    assert_eq!(pruned.len(), 1);
    assert!(cms.get_opt("ours").await.unwrap().is_none());
    assert!(
        cms.get_opt("user-cm").await.unwrap().is_some(),
        "a user's object was pruned"
    );
    // A user's DaemonSet under a name we use (the upgrade puller's) is not deleted either.
    let user_ds: DaemonSet = serde_json::from_value(daemon_set(&ns.name, &owner)).unwrap();
    ns.api::<DaemonSet>()
        .create(&kube::api::PostParams::default(), &user_ds)
        .await
        .unwrap();
    let key = storageos_operator::runtime::kube::apply::ObjectKey::of(&daemon_set(&ns.name, &owner)).unwrap();
    assert!(!applier.delete_ours(&key).await.unwrap());
    assert!(ns.api::<DaemonSet>().get_opt("ds").await.unwrap().is_some());
}
