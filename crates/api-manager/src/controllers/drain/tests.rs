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

mod views {
    use std::collections::BTreeSet;

    use super::*;
    use crate::crd::DrainPolicy;
    use crate::storageos::models::{LABEL_CSI_PVC_NAME, LABEL_CSI_PVC_NAMESPACE, LABEL_REPLICAS, Namespace};
    use crate::storageos_poll::VolumeList;

    /// A CSI volume of PVC `app/<pvc>` (PV `pv-<pvc>`) with `wanted` replicas.
    fn csi(pvc: &str, wanted: usize, master: &str, replicas: &[(&str, &str)]) -> Volume {
        let mut v = volume(master, Health::Online, replicas);
        v.name = format!("pv-{pvc}");
        v.namespace_id = "ns-app".into();
        v.labels = [
            (LABEL_CSI_PVC_NAMESPACE, "app".to_string()),
            (LABEL_CSI_PVC_NAME, pvc.to_string()),
            (LABEL_REPLICAS, wanted.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        v
    }

    fn list(volumes: Vec<Volume>) -> VolumeList {
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "id": "ns-app", "name": "app", "labels": {}, "version": "1",
            "createdAt": "2026-01-01T00:00:00Z", "updatedAt": "2026-01-01T00:00:00Z"
        }))
        .unwrap();
        VolumeList::of(vec![ns], volumes)
    }

    /// Every PVC is bound to its PV but `gone`.
    fn bound_but<'a>(gone: &'a [&'a str]) -> impl Fn(&str, &str, &str) -> bool + 'a {
        move |_, pvc, pv| !gone.contains(&pvc) && pv == format!("pv-{pvc}")
    }

    fn names(set: Option<&BTreeSet<String>>) -> Vec<&str> {
        set.map(|s| s.iter().map(String::as_str).collect()).unwrap_or_default()
    }

    #[test]
    fn a_volume_without_replicas_never_guards_its_node_by_default_and_is_shown_unprotected() {
        let l = list(vec![
            csi("scratch", 0, "a", &[]),
            csi("db", 1, "a", &[("b", "syncing")]),
            csi("safe", 1, "a", &[("b", "ready")]),
        ]);
        let v = view(&l, DrainPolicy::BlockIfReplicatedVolumeAtRisk, bound_but(&[]));
        assert_eq!(names(v.at_risk.get("a")), ["app/db"]);
        assert_eq!(names(v.unprotected.get("a")), ["app/scratch"]);
        assert!(v.orphaned.is_empty());
        // BlockLastCopy: the 0-replica volume blocks too (and is still shown unprotected).
        let v = view(&l, DrainPolicy::BlockLastCopy, bound_but(&[]));
        assert_eq!(names(v.at_risk.get("a")), ["app/db", "app/scratch"]);
        assert_eq!(names(v.unprotected.get("a")), ["app/scratch"]);
        // AllowAlways: the view is the default one (what Safe-To-Drain shows); no guard is placed.
        let v = view(&l, DrainPolicy::AllowAlways, bound_but(&[]));
        assert_eq!(names(v.at_risk.get("a")), ["app/db"]);
        assert!(!guards(DrainPolicy::AllowAlways));
        assert!(guards(DrainPolicy::BlockIfReplicatedVolumeAtRisk) && guards(DrainPolicy::BlockLastCopy));
    }

    #[test]
    fn a_volume_no_pvc_uses_never_blocks_under_any_policy_and_is_shown_orphaned() {
        let l = list(vec![csi("old", 1, "a", &[("b", "syncing")]), csi("old0", 0, "a", &[])]);
        for policy in DrainPolicy::ALL {
            let v = view(&l, policy, bound_but(&["old", "old0"]));
            assert!(v.at_risk.is_empty(), "{policy}: {v:?}");
            assert!(v.unprotected.is_empty(), "{policy}");
            assert_eq!(names(v.orphaned.get("a")), ["pv-old", "pv-old0"], "{policy}");
        }
    }

    #[test]
    fn a_replica_count_label_below_the_replicas_held_still_counts_them() {
        let mut v = csi("db", 0, "a", &[("b", "syncing")]);
        assert_eq!(replicas_wanted(&v), 1);
        v.replicas.clear();
        assert_eq!(replicas_wanted(&v), 0);
    }
}

mod plans {
    use std::collections::{BTreeMap, BTreeSet, HashMap};

    use std::time::Duration;

    use chrono::{DateTime, Utc};

    use super::super::guard;
    use super::super::plan::{Inputs, Placed, Plan, Upgrade, Want, plan, waiting};

    /// The cluster of these tests: StorageOS nodes id-a..id-c named a..c, all in Kubernetes.
    struct World {
        blocking: BTreeMap<String, BTreeSet<String>>,
        names: HashMap<String, String>,
        k8s: BTreeSet<String>,
        cordoned: BTreeSet<String>,
        guarded: BTreeMap<String, Placed>,
        upgrade: Upgrade,
        complete: bool,
        max_hold: Option<Duration>,
        enforce: bool,
        now: DateTime<Utc>,
    }

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn world() -> World {
        World {
            blocking: BTreeMap::new(),
            names: ["a", "b", "c"]
                .iter()
                .map(|n| (format!("id-{n}"), n.to_string()))
                .collect(),
            k8s: ["a", "b", "c"].iter().map(|n| n.to_string()).collect(),
            cordoned: BTreeSet::new(),
            guarded: BTreeMap::new(),
            upgrade: Upgrade::Off,
            complete: true,
            max_hold: None,
            enforce: true,
            now: at("2026-11-29T10:00:00Z"),
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
            self.guarded.insert(
                node.into(),
                Placed {
                    blocked_by: Some(guard::blocked_by(&pvcs)),
                    ..Placed::default()
                },
            );
            self
        }
        fn plan(&self) -> Plan {
            plan(&Inputs {
                blocking: &self.blocking,
                complete: self.complete,
                node_names: &self.names,
                k8s_nodes: &self.k8s,
                cordoned: &self.cordoned,
                upgrade: &self.upgrade,
                guarded: &self.guarded,
                max_hold: self.max_hold,
                enforce: self.enforce,
                now: self.now,
            })
        }
        /// The guards as they stand once `p` is written (what the next read sees).
        fn written(mut self, p: &Plan) -> Self {
            for (node, w) in &p.apply {
                self.guarded.insert(
                    node.clone(),
                    Placed {
                        blocked_by: Some(guard::blocked_by(&w.blockers)),
                        waiting_since: w.waiting_since,
                        released: w.released,
                    },
                );
            }
            for node in &p.remove {
                self.guarded.remove(node);
            }
            self
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
        assert_eq!(p.apply["a"].blockers, vec!["app/data".to_string()]);
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
        half.guarded.insert("a".into(), Placed::default());
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
        assert_eq!(
            p.apply["a"].blockers.len(),
            2,
            "the PVC and the upgrade: {:?}",
            p.apply["a"]
        );
        assert!(
            p.apply["b"].blockers[0].contains("StorageOSUpgrade up1"),
            "{:?}",
            p.apply["b"]
        );
    }

    #[test]
    fn allow_always_places_no_guard_and_removes_those_in_place() {
        let mut w = world().blocks("id-a", &["app/data"]).guard("b", &["app/old"]);
        w.upgrade = Upgrade::On("up1".into());
        w.enforce = false;
        let p = w.plan();
        assert_eq!(nodes(&p), (vec![], vec!["b"]));
    }

    #[test]
    fn a_cordoned_guarded_node_waits_at_most_the_maximum_hold_then_its_guard_is_released() {
        let mut w = world().blocks("id-a", &["app/data"]);
        w.max_hold = Some(Duration::from_secs(60));
        // Placed while the node is schedulable: not waiting.
        let p = w.plan();
        assert_eq!(p.apply["a"].waiting_since, None);
        assert!(p.now_waiting.is_empty());
        let mut w = w.written(&p);
        assert_eq!(w.plan(), Plan::default(), "idle");
        // Cordoned (a drain): waiting from now, once.
        w.cordoned.insert("a".into());
        let p = w.plan();
        assert_eq!(p.apply["a"].waiting_since, Some(w.now));
        assert_eq!(p.now_waiting, BTreeSet::from(["a".to_string()]));
        assert_eq!(
            waiting(&p.apply, w.now + chrono::Duration::seconds(30)),
            vec![("a".into(), 30)]
        );
        let mut w = w.written(&p);
        let start = w.now;
        w.now = start + chrono::Duration::seconds(59);
        assert_eq!(w.plan(), Plan::default(), "still within the hold");
        // At the end of the hold: released, once; the budget then allows the eviction.
        w.now = start + chrono::Duration::seconds(60);
        let p = w.plan();
        assert_eq!(p.apply["a"].released, Some(w.now));
        assert_eq!(p.apply["a"].waiting_since, Some(start));
        assert_eq!(p.now_released, BTreeSet::from(["a".to_string()]));
        assert!(waiting(&p.apply, w.now).is_empty(), "a released hold waits no more");
        let mut w = w.written(&p);
        w.now = start + chrono::Duration::seconds(600);
        assert_eq!(w.plan(), Plan::default(), "released stays released while cordoned");
        // Uncordoned: guarded again, with no hold.
        w.cordoned.clear();
        let p = w.plan();
        assert_eq!(
            p.apply["a"],
            Want {
                blockers: vec!["app/data".into()],
                waiting_since: None,
                released: None
            }
        );
    }

    #[test]
    fn without_a_maximum_hold_a_cordoned_node_waits_until_safe() {
        let mut w = world().blocks("id-a", &["app/data"]);
        w.cordoned.insert("a".into());
        let p = w.plan();
        let mut w = w.written(&p);
        w.now += chrono::Duration::days(30);
        assert_eq!(w.plan(), Plan::default());
        // Safe again: the guard goes.
        w.blocking.clear();
        assert_eq!(nodes(&w.plan()), (vec![], vec!["a"]));
    }

    #[test]
    fn a_released_guard_whose_pod_was_evicted_is_not_placed_again() {
        let mut w = world().blocks("id-a", &["app/data"]);
        w.cordoned.insert("a".into());
        w.max_hold = Some(Duration::from_secs(60));
        let since = w.now - chrono::Duration::seconds(120);
        // Its pod gone (the drain evicted it): the budget alone shows the guard.
        w.guarded.insert(
            "a".into(),
            Placed {
                blocked_by: Some("app/data".into()),
                waiting_since: Some(since),
                released: Some(since + chrono::Duration::seconds(60)),
            },
        );
        assert_eq!(w.plan(), Plan::default());
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
    use super::super::plan::Want;

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
        let want = Want {
            blockers: pvcs.clone(),
            ..Want::default()
        };
        let budget: PodDisruptionBudget =
            serde_json::from_value(guard::budget("storageos", "node-a", &want, &owner("Node"))).unwrap();
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
        assert!(note.contains("30 volumes"), "{note}");
        assert!(guard::guard_selector().contains("app.kubernetes.io/component=drain-guard"));
    }

    #[test]
    fn node_events_count_the_pvcs_and_never_name_them() {
        let blockers = vec![
            "tenant-a/secret-project".to_string(),
            "StorageOSUpgrade up1 (under way)".to_string(),
        ];
        let since = "2026-11-29T10:00:00Z".parse().ok();
        for note in [
            guard::blocked_note("node-a", &blockers, "storageos-drain-guard"),
            guard::waiting_note("node-a", &blockers, "storageos-drain-guard", since),
            guard::waiting_note("node-a", &blockers, "storageos-drain-guard", None),
            guard::released_note("node-a", &blockers, "30m0s"),
        ] {
            assert!(!note.contains("tenant-a") && !note.contains("secret-project"), "{note}");
            assert!(note.contains("1 volume and the StorageOSUpgrade under way"), "{note}");
            assert!(note.contains("nodes.api.storageos.com node-a"), "{note}");
        }
        assert!(guard::waiting_note("node-a", &blockers, "ns", since).contains("2026-11-29T10:00:00Z"));
    }

    #[test]
    fn a_released_budget_allows_the_eviction_and_keeps_its_times() {
        let since: chrono::DateTime<chrono::Utc> = "2026-11-29T10:00:00Z".parse().unwrap();
        let want = Want {
            blockers: vec!["app/data".into()],
            waiting_since: Some(since),
            released: Some(since + chrono::Duration::minutes(1)),
        };
        let budget: PodDisruptionBudget =
            serde_json::from_value(guard::budget("ns", "node-a", &want, &owner("Node"))).unwrap();
        assert_eq!(
            budget.spec.unwrap().min_available,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0))
        );
        let a = budget.metadata.annotations.unwrap();
        assert_eq!(
            guard::annotated_time(a.get(guard::WAITING_SINCE_ANNOTATION)),
            Some(since)
        );
        assert_eq!(guard::annotated_time(a.get(guard::RELEASED_ANNOTATION)), want.released);
        assert!(guard::guard_selector().contains("app.kubernetes.io/component=drain-guard"));
    }
}
