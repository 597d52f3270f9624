//! The drain gate's pure parts: the rule, the plan, the guard objects.
#![allow(clippy::unwrap_used)]

use super::rule::*;
use crate::storageos::models::Replica;
use crate::storageos::models::{Health, Volume};

fn volume(master: &str, health: Health, replicas: &[(&str, &str)]) -> Volume {
    let mut v = Volume {
        name: "pv1".into(),
        ..Volume::default()
    };
    v.master.node_id = master.into();
    v.master.health = health;
    v.replicas = replicas
        .iter()
        .map(|(node, health)| Replica {
            node_id: (*node).into(),
            health: (*health).into(),
            ..Replica::default()
        })
        .collect();
    v
}

#[test]
fn the_master_node_holds_the_last_copy_until_a_replica_elsewhere_is_ready() {
    assert_eq!(last_copy(&volume("a", Health::Online, &[])), Some("a"), "no replicas");
    assert_eq!(last_copy(&volume("a", Health::Online, &[("b", "syncing")])), Some("a"));
    assert_eq!(last_copy(&volume("a", Health::Online, &[("b", "ready")])), None);
    assert_eq!(
        last_copy(&volume("a", Health::Online, &[("b", "failed"), ("c", "ready")])),
        None
    );
}

#[test]
fn with_the_master_down_the_only_ready_replica_is_the_last_copy() {
    assert_eq!(last_copy(&volume("a", Health::Offline, &[("b", "ready")])), Some("b"));
    assert_eq!(
        last_copy(&volume("a", Health::Offline, &[("b", "ready"), ("c", "ready")])),
        None,
        "two copies: either node may go"
    );
    assert_eq!(
        last_copy(&volume("a", Health::Offline, &[("b", "syncing")])),
        None,
        "no online copy to lose"
    );
}

mod plans {
    use std::collections::{BTreeMap, BTreeSet, HashMap};

    use super::super::guard;
    use super::super::plan::{Inputs, Plan, Upgrade, plan};

    /// The cluster of these tests: StorageOS nodes id-a..id-c named a..c, all in Kubernetes.
    struct World {
        blocking: BTreeMap<String, BTreeSet<String>>,
        names: HashMap<String, String>,
        k8s: BTreeSet<String>,
        guarded: BTreeMap<String, Option<String>>,
        upgrade: Upgrade,
        complete: bool,
    }

    fn world() -> World {
        World {
            blocking: BTreeMap::new(),
            names: ["a", "b", "c"]
                .iter()
                .map(|n| (format!("id-{n}"), n.to_string()))
                .collect(),
            k8s: ["a", "b", "c"].iter().map(|n| n.to_string()).collect(),
            guarded: BTreeMap::new(),
            upgrade: Upgrade::Off,
            complete: true,
        }
    }

    impl World {
        fn blocks(mut self, id: &str, pvcs: &[&str]) -> Self {
            self.blocking
                .insert(id.into(), pvcs.iter().map(|p| p.to_string()).collect());
            self
        }
        fn guard(mut self, node: &str, pvcs: &[&str]) -> Self {
            let pvcs: Vec<String> = pvcs.iter().map(|p| p.to_string()).collect();
            self.guarded.insert(node.into(), Some(guard::blocked_by(&pvcs)));
            self
        }
        fn plan(&self) -> Plan {
            plan(&Inputs {
                blocking: &self.blocking,
                complete: self.complete,
                node_names: &self.names,
                k8s_nodes: &self.k8s,
                upgrade: &self.upgrade,
                guarded: &self.guarded,
            })
        }
    }

    fn nodes(p: &Plan) -> (Vec<&str>, Vec<&str>) {
        (
            p.apply.keys().map(String::as_str).collect(),
            p.remove.iter().map(String::as_str).collect(),
        )
    }

    #[test]
    fn an_unsafe_node_gets_a_guard_naming_its_pvcs_and_a_safe_one_loses_its_guard() {
        let p = world().blocks("id-a", &["app/data"]).guard("b", &["app/old"]).plan();
        assert_eq!(nodes(&p), (vec!["a"], vec!["b"]));
        assert_eq!(p.apply["a"], vec!["app/data".to_string()]);
    }

    #[test]
    fn a_guard_as_wanted_is_not_written_again_and_one_whose_pvcs_changed_is() {
        let w = world().blocks("id-a", &["app/data"]).guard("a", &["app/data"]);
        assert_eq!(w.plan(), Plan::default(), "nothing to do at idle");
        let w = world()
            .blocks("id-a", &["app/data", "app/logs"])
            .guard("a", &["app/data"]);
        assert_eq!(nodes(&w.plan()), (vec!["a"], vec![]));
        let mut half = world().blocks("id-a", &["app/data"]);
        half.guarded.insert("a".into(), None);
        assert_eq!(
            nodes(&half.plan()),
            (vec!["a"], vec![]),
            "a guard missing its pod is completed"
        );
    }

    #[test]
    fn a_partial_read_adds_guards_but_never_removes_or_rewrites_one() {
        let mut w = world()
            .blocks("id-c", &["app/new"])
            .guard("a", &["app/data"])
            .guard("b", &["app/x", "app/y"]);
        w = w.blocks("id-b", &["app/x"]);
        w.complete = false;
        let p = w.plan();
        assert_eq!(nodes(&p), (vec!["c"], vec![]), "{p:?}");
        // Nothing at all in a partial read: every guard stays.
        let mut empty = world().guard("a", &["app/data"]);
        empty.complete = false;
        assert_eq!(empty.plan(), Plan::default());
    }

    #[test]
    fn while_an_upgrade_is_under_way_every_storageos_node_is_guarded() {
        let mut w = world().blocks("id-a", &["app/data"]);
        w.upgrade = Upgrade::On("up1 (StorageOSCluster storageos/c)".into());
        let p = w.plan();
        assert_eq!(nodes(&p), (vec!["a", "b", "c"], vec![]));
        assert_eq!(p.apply["a"].len(), 2, "the PVC and the upgrade: {:?}", p.apply["a"]);
        assert!(p.apply["b"][0].contains("StorageOSUpgrade up1"), "{:?}", p.apply["b"]);
    }

    #[test]
    fn an_unknown_maintenance_state_keeps_every_guard() {
        let mut w = world().guard("a", &["StorageOSUpgrade up1 (under way)"]);
        w.upgrade = Upgrade::Unknown;
        assert_eq!(w.plan(), Plan::default());
    }

    #[test]
    fn only_nodes_named_by_storageos_and_present_in_kubernetes_are_guarded() {
        let mut w = world().blocks("id-z", &["app/data"]).blocks("id-a", &["app/a"]);
        w.k8s.remove("a");
        let p = w.plan();
        assert!(p.apply.is_empty(), "{p:?}");
        assert_eq!(p.unnamed, vec!["id-z".to_string()]);
        // A guard on a node Kubernetes no longer has goes (its budget is owned by the Node).
        let mut gone = world().guard("a", &["app/a"]);
        gone.k8s.remove("a");
        assert_eq!(nodes(&gone.plan()), (vec![], vec!["a"]));
    }
}

mod guards {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::super::guard;

    fn owner(kind: &str) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: kind.into(),
            name: "n".into(),
            uid: "u".into(),
            ..OwnerReference::default()
        }
    }

    #[test]
    fn the_budget_selects_exactly_its_guard_pod_and_allows_no_eviction() {
        let pvcs = vec!["app/data".to_string()];
        let budget: PodDisruptionBudget =
            serde_json::from_value(guard::budget("storageos", "node-a", &pvcs, &owner("Node"))).unwrap();
        let pod: Pod = serde_json::from_value(guard::pod(
            "storageos",
            "node-a",
            &pvcs,
            "reg/op:v1",
            &owner("PodDisruptionBudget"),
        ))
        .unwrap();
        let spec = budget.spec.unwrap();
        assert_eq!(
            spec.min_available,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
        );
        let wanted = spec.selector.unwrap().match_labels.unwrap();
        let labels = pod.metadata.labels.clone().unwrap();
        assert!(wanted.iter().all(|(k, v)| labels.get(k) == Some(v)));
        let other = guard::labels("node-b");
        assert!(
            !wanted.iter().all(|(k, v)| other.get(k) == Some(v)),
            "not another node's guard"
        );
        let pod_spec = pod.spec.unwrap();
        assert_eq!(pod_spec.node_name.as_deref(), Some("node-a"));
        assert_eq!(pod_spec.tolerations.unwrap()[0].operator.as_deref(), Some("Exists"));
        assert_eq!(pod_spec.containers[0].image.as_deref(), Some("reg/op:v1"));
        assert_eq!(
            pod_spec.containers[0].command.as_deref().unwrap(),
            ["storageos-operator", "drain-guard"]
        );
        let owner = &pod.metadata.owner_references.unwrap()[0];
        assert_eq!(owner.kind, "PodDisruptionBudget");
        assert_eq!(
            pod.metadata.annotations.unwrap()[guard::BLOCKED_BY_ANNOTATION],
            "app/data"
        );
    }

    #[test]
    fn a_long_node_name_gets_a_short_key_and_long_lists_are_cut() {
        let long = "n".repeat(100);
        let key = guard::key(&long);
        assert!(key.len() <= 63 && key.starts_with("h-"), "{key}");
        assert_ne!(guard::key(&format!("{long}x")), key);
        assert_eq!(guard::key("node-a"), "node-a");
        let many: Vec<String> = (0..30).map(|i| format!("app/pvc-{i}")).collect();
        assert!(guard::blocked_by(&many).ends_with("(+10 more)"));
        let note = guard::blocked_note("node-a", &many, "storageos");
        assert!(note.contains("app/pvc-4 (+25 more)"), "{note}");
        assert!(guard::guard_selector().contains("app.kubernetes.io/component=drain-guard"));
    }
}
