//! The out-of-service controller's decisions, free of I/O: when to taint a node, when to take
//! the taint off again, and when nothing may be tainted at all. Rook's rule throughout: a read
//! that failed is no evidence, so it never leads to a taint (and starts every count again).

use std::collections::HashMap;
use std::sync::Arc;

use super::super::node_state::NodeState as KubeNode;
use kube::ResourceExt;
use tokio::time::Instant;

use crate::controllers::fencing::episodes::too_many_offline;
use crate::controllers::fencing::select::out_of_service;
use crate::maintenance::Maintenance;
use crate::storageos::models::{Health, Node as StorageOSNode};

/// When the controller acts (from `spec.nodeOutOfService`).
pub use crate::controllers::config::OutOfServiceConfig as Rules;

/// What one poll saw; `None` for a read that failed.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    pub storageos: Option<&'a [StorageOSNode]>,
    /// The Node cache's own copies (shared, not cloned each poll).
    pub kube: Option<&'a [Arc<KubeNode>]>,
    /// Whether an upgrade holds maintenance; `None`: cannot tell.
    pub maintenance: Option<&'a Maintenance>,
}

/// One change to make to a Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Apply the taint (and the mark); `why` says what was seen, for the events.
    Taint { node: String, why: String },
    /// Remove the taint this controller applied (and the mark).
    Untaint { node: String },
    /// The taint this controller applied was removed by someone else: forget the mark.
    Unmark { node: String },
}

/// Why no node may be tainted now, although some would be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// More than half the StorageOS nodes are offline: likelier a partition or an API fault.
    Partition { offline: usize, total: usize },
    /// An upgrade holds maintenance.
    Upgrade(String),
    /// Whether an upgrade holds maintenance cannot be read.
    Unreadable,
}

impl Hold {
    /// The event note: what holds, and which nodes it holds.
    pub fn note(&self, nodes: &[String]) -> String {
        let why = match self {
            Hold::Partition { offline, total } => format!(
                "StorageOS reports {offline} of {total} nodes offline at once: more likely a network partition or an API fault than lost nodes"
            ),
            Hold::Upgrade(upgrade) => format!("upgrade {upgrade} is in progress"),
            Hold::Unreadable => "whether an upgrade is in progress cannot be read".into(),
        };
        format!(
            "{why}, so node(s) {} are not tainted out of service although StorageOS reports them offline and they are NotReady",
            nodes.join(", ")
        )
    }
}

/// What to do after one poll.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decision {
    pub actions: Vec<Action>,
    /// Set when nodes would be tainted but may not be: the hold and those nodes.
    pub held: Option<(Hold, Vec<String>)>,
    /// Nodes carrying this controller's mark as read (before `actions`).
    pub marked: usize,
}

/// What the controller remembers of each StorageOS node between polls.
#[derive(Debug, Default)]
struct Track {
    /// Consecutive polls that reported it offline.
    offline_polls: u32,
    /// Since when a tainted node has been seen online and Ready, poll after poll.
    back_since: Option<Instant>,
}

/// The controller's memory across polls.
#[derive(Debug, Default)]
pub struct Memory {
    nodes: HashMap<String, Track>,
}

/// The Node's Ready condition: `Some(true)` Ready, `Some(false)` NotReady (False or Unknown),
/// `None` when it has none (never reported: no conclusion either way).
pub fn ready(node: &KubeNode) -> Option<bool> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status == "True")
}

/// Whether this controller put the Node's taint there (its mark is on the Node).
pub fn marked(node: &KubeNode) -> bool {
    node.annotated.marked
}

fn cordoned(node: &KubeNode) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

impl Memory {
    /// Takes in one poll; returns what to do.
    pub fn decide(&mut self, rules: Rules, seen: Seen<'_>, now: Instant) -> Decision {
        let (Some(storageos), Some(kube)) = (seen.storageos, seen.kube) else {
            // No evidence: nothing is done, and every streak starts again.
            self.nodes.clear();
            return Decision::default();
        };
        self.nodes.retain(|name, _| storageos.iter().any(|n| n.name == *name));
        for n in storageos {
            let t = self.nodes.entry(n.name.to_string()).or_default();
            t.offline_polls = if n.health == Health::Offline {
                t.offline_polls.saturating_add(1)
            } else {
                0
            };
        }
        let mut decision = Decision::default();
        let mut candidates = Vec::new();
        let by_name: HashMap<&str, &StorageOSNode> = storageos.iter().map(|n| (n.name.as_str(), n)).collect();
        for node in kube {
            let name = node.name_any();
            let ready = ready(node);
            if marked(node) && out_of_service(node) {
                decision.marked += 1;
            }
            let Some(sos) = by_name.get(name.as_str()).copied() else {
                if marked(node) && !out_of_service(node) {
                    decision.actions.push(Action::Unmark { node: name });
                }
                continue;
            };
            let Some(t) = self.nodes.get_mut(&name) else { continue };
            if marked(node) {
                if !out_of_service(node) {
                    t.back_since = None;
                    decision.actions.push(Action::Unmark { node: name });
                } else if sos.health == Health::Online && ready == Some(true) {
                    let since = *t.back_since.get_or_insert(now);
                    if now.duration_since(since) >= rules.cool_down {
                        t.back_since = None;
                        decision.actions.push(Action::Untaint { node: name });
                    }
                } else {
                    t.back_since = None;
                }
                continue;
            }
            // Tainted by someone else: theirs to remove.
            if out_of_service(node) {
                continue;
            }
            // Cordoned: being drained or serviced on purpose, and coming back.
            let lost = sos.health == Health::Offline
                && t.offline_polls >= u32::from(rules.offline_polls)
                && ready == Some(false)
                && !cordoned(node);
            if lost {
                candidates.push((
                    name,
                    format!(
                        "StorageOS has reported the node offline for {} consecutive polls and the Kubernetes Node is NotReady",
                        t.offline_polls
                    ),
                ));
            }
        }
        if candidates.is_empty() {
            return decision;
        }
        let hold = match (too_many_offline(storageos), seen.maintenance) {
            (Some((offline, total)), _) => Some(Hold::Partition { offline, total }),
            (None, Some(Maintenance::On { upgrade })) => Some(Hold::Upgrade(upgrade.clone())),
            (None, None) => Some(Hold::Unreadable),
            (None, Some(Maintenance::Off)) => None,
        };
        match hold {
            Some(hold) => decision.held = Some((hold, candidates.into_iter().map(|(n, _)| n).collect())),
            None => decision
                .actions
                .extend(candidates.into_iter().map(|(node, why)| Action::Taint { node, why })),
        }
        decision
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::controllers::node_state::MARK;

    const RULES: Rules = Rules {
        offline_polls: 3,
        cool_down: Duration::from_secs(60),
    };

    fn sos(list: &[(&str, Health)]) -> Vec<StorageOSNode> {
        list.iter()
            .map(|(name, health)| StorageOSNode {
                name: (*name).into(),
                id: format!("id-{name}"),
                health: *health,
                ..StorageOSNode::default()
            })
            .collect()
    }

    /// A Kubernetes Node; `ready` None: no Ready condition.
    fn kube(name: &str, ready: Option<bool>, tainted: bool, ours: bool) -> Arc<KubeNode> {
        let taints = if tainted {
            json!([{"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}])
        } else {
            json!([])
        };
        let annotations = if ours {
            json!({MARK: "2026-11-26T00:00:00Z"})
        } else {
            json!({})
        };
        let conditions = match ready {
            Some(r) => json!([{"type": "Ready", "status": if r { "True" } else { "Unknown" }}]),
            None => json!([]),
        };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "annotations": annotations},
                "spec": {"taints": taints},
                "status": {"conditions": conditions}
            }))
            .unwrap(),
        )
    }

    /// Runs `polls` identical polls; the last decision.
    fn polls(m: &mut Memory, n: usize, seen: Seen<'_>, now: Instant) -> Decision {
        let mut last = Decision::default();
        for _ in 0..n {
            last = m.decide(RULES, seen, now);
        }
        last
    }

    fn tainted(d: &Decision) -> Vec<&str> {
        d.actions
            .iter()
            .filter_map(|a| match a {
                Action::Taint { node, .. } => Some(node.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_node_offline_for_n_polls_and_not_ready_is_tainted_and_nothing_less() {
        let now = Instant::now();
        let s = sos(&[("a", Health::Offline), ("b", Health::Online), ("c", Health::Online)]);
        let k = [
            kube("a", Some(false), false, false),
            kube("b", Some(true), false, false),
        ];
        let seen = Seen {
            storageos: Some(&s),
            kube: Some(&k),
            maintenance: Some(&Maintenance::Off),
        };
        let mut m = Memory::default();
        assert!(
            tainted(&polls(&mut m, 2, seen, now)).is_empty(),
            "two polls are not three"
        );
        let d = m.decide(RULES, seen, now);
        assert_eq!(tainted(&d), ["a"]);
        let Action::Taint { why, .. } = &d.actions[0] else {
            panic!()
        };
        assert!(why.contains("3 consecutive polls"), "{why}");

        // Ready, no Ready condition at all, or cordoned: never.
        for node in [
            kube("a", Some(true), false, false),
            kube("a", None, false, false),
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "a"}, "spec": {"unschedulable": true},
                    "status": {"conditions": [{"type": "Ready", "status": "False"}]}}))
                .unwrap(),
            ),
        ] {
            let k = [node];
            let mut m = Memory::default();
            let d = polls(&mut m, 5, Seen { kube: Some(&k), ..seen }, now);
            assert!(tainted(&d).is_empty(), "{:?}", k[0]);
        }
        // Unknown in StorageOS, or a Node StorageOS does not know: never.
        let s2 = sos(&[("a", Health::Unknown), ("b", Health::Online), ("c", Health::Online)]);
        let d = polls(
            &mut Memory::default(),
            5,
            Seen {
                storageos: Some(&s2),
                ..seen
            },
            now,
        );
        assert!(tainted(&d).is_empty());
        let k2 = [kube("z", Some(false), false, false)];
        let d = polls(
            &mut Memory::default(),
            5,
            Seen {
                kube: Some(&k2),
                ..seen
            },
            now,
        );
        assert!(tainted(&d).is_empty());
    }

    #[test]
    fn a_failed_read_taints_nothing_and_starts_the_count_again() {
        let now = Instant::now();
        let s = sos(&[("a", Health::Offline), ("b", Health::Online), ("c", Health::Online)]);
        let k = [kube("a", Some(false), false, false)];
        let seen = Seen {
            storageos: Some(&s),
            kube: Some(&k),
            maintenance: Some(&Maintenance::Off),
        };
        let mut m = Memory::default();
        polls(&mut m, 2, seen, now);
        for failed in [
            Seen {
                storageos: None,
                ..seen
            },
            Seen { kube: None, ..seen },
        ] {
            assert_eq!(m.decide(RULES, failed, now), Decision::default());
        }
        assert!(
            tainted(&polls(&mut m, 2, seen, now)).is_empty(),
            "counted from zero again"
        );
        assert_eq!(tainted(&m.decide(RULES, seen, now)), ["a"]);
    }

    #[test]
    fn more_than_half_offline_an_upgrade_or_an_unreadable_maintenance_taint_none() {
        let now = Instant::now();
        let s = sos(&[("a", Health::Offline), ("b", Health::Offline), ("c", Health::Online)]);
        let k = [
            kube("a", Some(false), false, false),
            kube("b", Some(false), false, false),
        ];
        let seen = Seen {
            storageos: Some(&s),
            kube: Some(&k),
            maintenance: Some(&Maintenance::Off),
        };
        let d = polls(&mut Memory::default(), 5, seen, now);
        assert!(d.actions.is_empty());
        let (hold, nodes) = d.held.unwrap();
        assert_eq!(hold, Hold::Partition { offline: 2, total: 3 });
        assert_eq!(nodes, ["a", "b"]);
        assert!(hold.note(&nodes).contains("2 of 3 nodes offline"));

        let s = sos(&[("a", Health::Offline), ("b", Health::Online), ("c", Health::Online)]);
        let upgrade = Maintenance::On { upgrade: "up".into() };
        for (maintenance, hold) in [(Some(&upgrade), Hold::Upgrade("up".into())), (None, Hold::Unreadable)] {
            let seen = Seen {
                storageos: Some(&s),
                kube: Some(&k),
                maintenance,
            };
            let d = polls(&mut Memory::default(), 5, seen, now);
            assert!(d.actions.is_empty());
            assert_eq!(d.held.unwrap().0, hold);
        }
        // Nothing to hold back: no hold reported.
        let calm = sos(&[("a", Health::Online), ("b", Health::Offline), ("c", Health::Offline)]);
        let ready = [kube("b", Some(true), false, false)];
        let d = polls(
            &mut Memory::default(),
            5,
            Seen {
                storageos: Some(&calm),
                kube: Some(&ready),
                maintenance: Some(&Maintenance::Off),
            },
            now,
        );
        assert_eq!(d, Decision::default());
    }

    #[test]
    fn only_our_taint_is_removed_once_the_node_is_back_for_the_cool_down() {
        let t0 = Instant::now();
        let back = sos(&[("a", Health::Online), ("b", Health::Online), ("c", Health::Online)]);
        let ours = [kube("a", Some(true), true, true)];
        let seen = Seen {
            storageos: Some(&back),
            kube: Some(&ours),
            maintenance: None,
        };
        let mut m = Memory::default();
        let d = m.decide(RULES, seen, t0);
        assert!(d.actions.is_empty(), "the cool-down starts");
        assert_eq!(d.marked, 1);
        assert!(m.decide(RULES, seen, t0 + Duration::from_secs(30)).actions.is_empty());
        // NotReady again meanwhile: the cool-down starts over.
        let flapping = [kube("a", Some(false), true, true)];
        m.decide(
            RULES,
            Seen {
                kube: Some(&flapping),
                ..seen
            },
            t0 + Duration::from_secs(40),
        );
        assert!(m.decide(RULES, seen, t0 + Duration::from_secs(61)).actions.is_empty());
        assert_eq!(
            m.decide(RULES, seen, t0 + Duration::from_secs(121)).actions,
            [Action::Untaint { node: "a".into() }],
            "during an upgrade too: removing is not destructive"
        );
        // Someone else's taint stays; a mark whose taint is gone is forgotten.
        let theirs = [kube("a", Some(true), true, false)];
        let d = polls(
            &mut m,
            3,
            Seen {
                kube: Some(&theirs),
                ..seen
            },
            t0 + Duration::from_secs(999),
        );
        assert!(d.actions.is_empty());
        let gone = [kube("a", Some(true), false, true)];
        assert_eq!(
            m.decide(
                RULES,
                Seen {
                    kube: Some(&gone),
                    ..seen
                },
                t0
            )
            .actions,
            [Action::Unmark { node: "a".into() }]
        );
        // Still offline in StorageOS: the taint stays.
        let offline = sos(&[("a", Health::Offline), ("b", Health::Online), ("c", Health::Online)]);
        let d = polls(
            &mut Memory::default(),
            3,
            Seen {
                storageos: Some(&offline),
                ..seen
            },
            t0 + Duration::from_secs(999),
        );
        assert!(d.actions.is_empty());
    }
}
