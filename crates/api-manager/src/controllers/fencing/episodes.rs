//! Which nodes to fence, from successive StorageOS node lists and the Kubernetes Nodes'
//! out-of-service taints.
//!
//! An *episode* starts when a node is first seen with a [`Trigger`] (also at start-up): one
//! fencing action runs for it, retrying until nothing is left to fence or the fencer timeout
//! passes. It is told to stop as soon as the node loses its trigger (`unknown` is never fenced);
//! a trigger that changes (offline, then tainted out of service) starts a new episode, which
//! fences by the new trigger's rules.
//! A node that stays offline is not fenced again until `-node-expiry-interval` after its episode
//! started (the Go fencer's cache expiry), so a busy node list does not re-fence constantly
//! (the Go cache compared whole objects, capacity included).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::storageos::models::{Health, Node};

/// Why a node is fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// StorageOS reports it offline: only pods that opted in are fenced, and not while the
    /// node is cordoned.
    Offline,
    /// Its Kubernetes Node carries the `node.kubernetes.io/out-of-service` taint (someone, or
    /// the api-manager's out-of-service controller, says it is down): every pod using StorageOS
    /// volumes is fenced, cordoned or not.
    OutOfService,
}

/// What one read says about one node: its name, StorageOS ID (empty when StorageOS does not
/// know it) and trigger, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub name: String,
    pub id: String,
    pub trigger: Option<Trigger>,
}

/// Every node's trigger, from a complete StorageOS node list and the names of the Kubernetes
/// Nodes tainted out of service. `held` (too many nodes offline) ignores StorageOS's offline
/// reports; the taint is a statement from Kubernetes and still counts.
pub fn triggers(storageos: &[Node], out_of_service: &BTreeSet<String>, held: bool) -> Vec<Observed> {
    let mut seen = Vec::with_capacity(storageos.len());
    for n in storageos {
        let trigger = if out_of_service.contains(n.name.as_str()) {
            Some(Trigger::OutOfService)
        } else {
            (n.health == Health::Offline && !held).then_some(Trigger::Offline)
        };
        seen.push(Observed {
            name: n.name.to_string(),
            id: n.id.clone(),
            trigger,
        });
    }
    for name in out_of_service {
        if !storageos.iter().any(|n| n.name == *name) {
            seen.push(Observed {
                name: name.clone(),
                id: String::new(),
                trigger: Some(Trigger::OutOfService),
            });
        }
    }
    seen
}

/// A fencing action to start for `node` (StorageOS node ID `id`, empty if unknown); `stop`
/// turns true (or closes) when it must end.
#[derive(Debug)]
pub struct Start {
    pub node: String,
    pub id: String,
    pub trigger: Trigger,
    pub episode: u64,
    pub stop: watch::Receiver<bool>,
}

#[derive(Debug, Default)]
struct Tracked {
    trigger: Option<Trigger>,
    /// The running episode: its id and stop switch.
    running: Option<(u64, watch::Sender<bool>)>,
    started: Option<Instant>,
}

/// The fencer's view of every StorageOS node.
#[derive(Debug)]
pub struct Episodes {
    expiry: Duration,
    nodes: HashMap<String, Tracked>,
    next_id: u64,
}

impl Episodes {
    /// Re-evaluates a node that stays offline every `expiry`.
    pub fn new(expiry: Duration) -> Self {
        Self {
            expiry,
            nodes: HashMap::new(),
            next_id: 0,
        }
    }

    /// Takes in every node's trigger ([`triggers`]); returns the episodes to start.
    pub fn observe(&mut self, nodes: &[Observed], now: Instant) -> Vec<Start> {
        self.nodes.retain(|name, _| nodes.iter().any(|n| n.name == *name));
        let mut starts = Vec::new();
        for n in nodes {
            let t = self.nodes.entry(n.name.clone()).or_default();
            let Some(trigger) = n.trigger else {
                t.trigger = None;
                if let Some((_, stop)) = t.running.take() {
                    let _ = stop.send(true);
                }
                continue;
            };
            let begins = t.trigger != Some(trigger);
            t.trigger = Some(trigger);
            let expired = t.running.is_none() && t.started.is_some_and(|s| now.duration_since(s) >= self.expiry);
            if begins || expired {
                if let Some((_, stop)) = t.running.take() {
                    let _ = stop.send(true);
                }
                self.next_id += 1;
                let (tx, rx) = watch::channel(false);
                t.running = Some((self.next_id, tx));
                t.started = Some(now);
                starts.push(Start {
                    node: n.name.clone(),
                    id: n.id.clone(),
                    trigger,
                    episode: self.next_id,
                    stop: rx,
                });
            }
        }
        starts
    }

    /// Records that episode `episode` of `node` ended.
    pub fn ended(&mut self, node: &str, episode: u64) {
        if let Some(t) = self.nodes.get_mut(node)
            && t.running.as_ref().is_some_and(|(id, _)| *id == episode)
        {
            t.running = None;
        }
    }
}

/// `(offline, total)` when more than half of the StorageOS nodes are offline at once: a network
/// partition or an API fault is likelier than half the cluster dying, so nothing is fenced.
pub fn too_many_offline(nodes: &[Node]) -> Option<(usize, usize)> {
    let offline = nodes.iter().filter(|n| n.health == Health::Offline).count();
    (offline * 2 > nodes.len()).then_some((offline, nodes.len()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn nodes(list: &[(&str, Health)]) -> Vec<Node> {
        list.iter()
            .map(|(name, health)| Node {
                name: (*name).into(),
                health: *health,
                ..Node::default()
            })
            .collect()
    }

    /// The triggers of these StorageOS nodes, none tainted, not held.
    fn seen(list: &[(&str, Health)]) -> Vec<Observed> {
        triggers(&nodes(list), &BTreeSet::new(), false)
    }

    fn names(starts: &[Start]) -> Vec<&str> {
        starts.iter().map(|s| s.node.as_str()).collect()
    }

    #[test]
    fn more_than_half_offline_holds_fencing_and_resumes_afterwards() {
        use Health::*;
        assert_eq!(
            too_many_offline(&nodes(&[
                ("a", Offline),
                ("b", Offline),
                ("c", Offline),
                ("d", Online),
                ("e", Online)
            ])),
            Some((3, 5))
        );
        assert_eq!(
            too_many_offline(&nodes(&[("a", Offline), ("b", Offline), ("c", Online), ("d", Online)])),
            None
        );
        assert_eq!(too_many_offline(&nodes(&[("a", Offline), ("b", Online)])), None);
        let t0 = Instant::now();
        let mut e = Episodes::new(Duration::from_secs(3600));
        let mut running = e.observe(&seen(&[("a", Offline), ("b", Online), ("c", Online)]), t0);
        assert_eq!(names(&running), ["a"]);
        let list = nodes(&[("a", Offline), ("b", Online), ("c", Online)]);
        assert!(e.observe(&triggers(&list, &BTreeSet::new(), true), t0).is_empty());
        assert!(*running[0].stop.borrow_and_update(), "the running episode is stopped");
        // Once fencing may act again, a node still offline starts a new episode.
        let again = e.observe(&seen(&[("a", Offline), ("b", Online), ("c", Online)]), t0);
        assert_eq!(names(&again), ["a"]);
        running.clear();
    }

    #[test]
    fn an_episode_starts_when_a_node_goes_offline_and_never_for_unknown() {
        let t0 = Instant::now();
        let mut e = Episodes::new(Duration::from_secs(3600));
        let first = e.observe(
            &seen(&[("a", Health::Offline), ("b", Health::Online), ("c", Health::Unknown)]),
            t0,
        );
        assert_eq!(names(&first), ["a"], "already offline at start-up counts");
        // Still offline, still running: nothing new (however often the list is read).
        assert!(
            e.observe(&seen(&[("a", Health::Offline), ("b", Health::Offline)]), t0)
                .len()
                == 1
        );
        assert!(
            e.observe(&seen(&[("a", Health::Offline), ("b", Health::Offline)]), t0)
                .is_empty()
        );
        // unknown → offline starts one; offline → unknown stops it.
        assert_eq!(names(&e.observe(&seen(&[("c", Health::Offline)]), t0)), ["c"]);
    }

    #[test]
    fn leaving_offline_stops_the_episode_and_a_new_offline_starts_another() {
        let t0 = Instant::now();
        let mut e = Episodes::new(Duration::from_secs(3600));
        let mut first = e.observe(&seen(&[("a", Health::Offline)]), t0);
        let s = first.pop().unwrap();
        assert!(!*s.stop.borrow());
        assert!(e.observe(&seen(&[("a", Health::Unknown)]), t0).is_empty());
        assert!(*s.stop.borrow(), "the running episode is told to stop");
        let again = e.observe(&seen(&[("a", Health::Offline)]), t0);
        assert_eq!(names(&again), ["a"]);
        assert_ne!(again[0].episode, s.episode);
        // The old episode ending does not clear the new one.
        e.ended("a", s.episode);
        assert!(
            e.observe(&seen(&[("a", Health::Offline)]), t0 + Duration::from_secs(7200))
                .is_empty()
        );
    }

    #[test]
    fn a_node_that_stays_offline_is_re_evaluated_after_the_expiry() {
        let t0 = Instant::now();
        let hour = Duration::from_secs(3600);
        let mut e = Episodes::new(hour);
        let s = e.observe(&seen(&[("a", Health::Offline)]), t0).pop().unwrap();
        e.ended("a", s.episode);
        assert!(e.observe(&seen(&[("a", Health::Offline)]), t0 + hour / 2).is_empty());
        assert_eq!(names(&e.observe(&seen(&[("a", Health::Offline)]), t0 + hour)), ["a"]);
    }

    #[test]
    fn a_node_leaving_the_list_stops_its_episode() {
        let t0 = Instant::now();
        let mut e = Episodes::new(Duration::from_secs(3600));
        let s = e.observe(&seen(&[("a", Health::Offline)]), t0).pop().unwrap();
        assert!(e.observe(&[], t0).is_empty());
        assert!(s.stop.has_changed().is_err(), "the stop switch is closed");
    }

    #[test]
    fn the_out_of_service_taint_triggers_every_node_it_is_on_even_when_held() {
        use Health::*;
        let t0 = Instant::now();
        let tainted: BTreeSet<String> = ["b".to_string(), "k8s-only".to_string()].into();
        let list = nodes(&[("a", Offline), ("b", Online), ("c", Unknown)]);
        let observed = triggers(&list, &tainted, false);
        let trigger_of = |seen: &[Observed], name: &str| seen.iter().find(|o| o.name == name).and_then(|o| o.trigger);
        assert_eq!(trigger_of(&observed, "a"), Some(Trigger::Offline));
        assert_eq!(
            trigger_of(&observed, "b"),
            Some(Trigger::OutOfService),
            "online in StorageOS or not"
        );
        assert_eq!(trigger_of(&observed, "c"), None);
        assert_eq!(
            trigger_of(&observed, "k8s-only"),
            Some(Trigger::OutOfService),
            "a Node StorageOS does not know"
        );
        let held = triggers(&list, &tainted, true);
        assert_eq!(
            trigger_of(&held, "a"),
            None,
            "the hold ignores StorageOS's offline reports"
        );
        assert_eq!(trigger_of(&held, "b"), Some(Trigger::OutOfService), "not the taint");

        // Offline, then tainted: the opt-in episode stops and an out-of-service one starts.
        let mut e = Episodes::new(Duration::from_secs(3600));
        let first = e.observe(&seen(&[("a", Offline)]), t0);
        assert_eq!(first[0].trigger, Trigger::Offline);
        let a: BTreeSet<String> = ["a".to_string()].into();
        let second = e.observe(&triggers(&nodes(&[("a", Offline)]), &a, false), t0);
        assert_eq!(names(&second), ["a"]);
        assert_eq!(second[0].trigger, Trigger::OutOfService);
        assert!(*first[0].stop.borrow(), "the offline episode was told to stop");
        assert!(
            e.observe(&triggers(&nodes(&[("a", Offline)]), &a, false), t0)
                .is_empty()
        );
    }
}
