//! Kubernetes Events (`events.k8s.io/v1`), a repeat folded into the series of the first, with a
//! bounded memory of what was published.
//!
//! kube's `Recorder` folds repeats too, but keeps every event it published, whole, until its next
//! publish six minutes later, and never gives the table back: the label sync's first pass over
//! thousands of PVCs stayed resident for good (docs/benchmarks.md). This
//! one keeps, per recent event, a hash of what makes it a repeat and where it was written; at
//! most [`REMEMBERED`] of them, for [`REPEAT_WITHIN`].

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::text::{EVENT_NOTE_LIMIT, truncated};

/// A repeat of an event within this time adds to its series instead of making a new one (as
/// kube and client-go do).
pub const REPEAT_WITHIN: Duration = Duration::from_secs(6 * 60);
/// The most events remembered at once; past it the oldest is forgotten (its next repeat is a new
/// event, which is all it costs).
pub const REMEMBERED: usize = 512;

/// Publishes the events of one controller.
pub struct Recorder {
    client: Client,
    reporter: Reporter,
    recent: Mutex<Recent>,
}

impl Recorder {
    /// A recorder publishing as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            recent: Mutex::new(Recent::default()),
        }
    }

    /// Publishes a `type_` event with `reason` and `note` about `regarding`, an object no
    /// controller reconciles (such as the operator's own pod).
    pub async fn publish_reason(
        &self,
        type_: EventType,
        reason: crate::reasons::Reason,
        action: &str,
        note: String,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        self.publish(&ev, regarding).await
    }

    /// Publishes `ev` about `regarding`: a new event, or one more of the series of the same event
    /// (same type, reason, action, note and objects) published within [`REPEAT_WITHIN`].
    pub async fn publish(&self, ev: &Event, regarding: &ObjectReference) -> Result<(), kube::Error> {
        let key = key_of(ev, regarding);
        let now = Instant::now();
        let repeat = self.recent.lock().ok().and_then(|mut r| r.repeat(key, now));
        let written = match repeat {
            Some(seen) => match self.add_to_series(&seen).await {
                Err(kube::Error::Api(s)) if s.code == 404 => self.create(ev, regarding).await?,
                other => other?,
            },
            None => self.create(ev, regarding).await?,
        };
        if let Ok(mut r) = self.recent.lock() {
            r.record(key, written);
        }
        Ok(())
    }

    async fn create(&self, ev: &Event, regarding: &ObjectReference) -> Result<RecentEvent, kube::Error> {
        let event = build(&self.reporter, ev, regarding, Timestamp::now());
        let namespace = event.namespace().unwrap_or_default();
        let created = Api::<K8sEvent>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &event)
            .await?;
        Ok(RecentEvent {
            name: created.name_any(),
            namespace,
            count: 1,
            at: Instant::now(),
        })
    }

    async fn add_to_series(&self, seen: &RecentEvent) -> Result<RecentEvent, kube::Error> {
        let count = seen.count + 1;
        let series = EventSeries {
            count,
            last_observed_time: MicroTime(Timestamp::now()),
        };
        Api::<K8sEvent>::namespaced(self.client.clone(), &seen.namespace)
            .patch(
                &seen.name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "series": series })),
            )
            .await?;
        Ok(RecentEvent {
            count,
            at: Instant::now(),
            ..seen.clone()
        })
    }
}

/// The event object of `ev` about `regarding`, in its namespace ("default" for a cluster-scoped
/// object), named after it and the time.
fn build(reporter: &Reporter, ev: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
    let named = regarding.name.as_deref().unwrap_or(&reporter.controller);
    K8sEvent {
        action: Some(ev.action.clone()),
        reason: Some(ev.reason.clone()),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding.clone()),
        related: ev.secondary.clone(),
        // The apiserver refuses a longer note, and the event would be lost.
        note: ev.note.as_deref().map(|n| truncated(n, EVENT_NOTE_LIMIT)),
        metadata: ObjectMeta {
            namespace: Some(regarding.namespace.clone().unwrap_or_else(|| "default".into())),
            name: Some(format!("{named}.{:x}", now.as_nanosecond())),
            ..ObjectMeta::default()
        },
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(reporter.instance.clone().unwrap_or_else(|| reporter.controller.clone())),
        type_: Some(
            match ev.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .into(),
        ),
        ..K8sEvent::default()
    }
}

/// What makes two events the same: everything but the time. The note counts (kube's recorder
/// leaves it out, so a new message on the same reason was folded into the old one and never
/// shown).
fn key_of(ev: &Event, regarding: &ObjectReference) -> u64 {
    let mut h = DefaultHasher::new();
    ev.type_.hash(&mut h);
    ev.reason.hash(&mut h);
    ev.action.hash(&mut h);
    ev.note.hash(&mut h);
    for r in std::iter::once(regarding).chain(ev.secondary.as_ref()) {
        (&r.api_version, &r.kind, &r.namespace, &r.name, &r.uid).hash(&mut h);
    }
    h.finish()
}

/// Where a recent event was written, how many times it happened, and when last.
#[derive(Clone, Debug, PartialEq)]
struct RecentEvent {
    name: String,
    namespace: String,
    count: i32,
    at: Instant,
}

/// The recent events by key: bounded in number and age, and given back when emptied.
#[derive(Default)]
struct Recent {
    by_key: HashMap<u64, RecentEvent>,
}

impl Recent {
    /// The event `key` repeats, if it was published within [`REPEAT_WITHIN`] of `now`. Forgets
    /// the older ones.
    fn repeat(&mut self, key: u64, now: Instant) -> Option<RecentEvent> {
        self.by_key.retain(|_, s| now.duration_since(s.at) < REPEAT_WITHIN);
        if self.by_key.len() < self.by_key.capacity() / 4 {
            self.by_key.shrink_to_fit();
        }
        self.by_key.get(&key).cloned()
    }

    /// Remembers `key` as published, forgetting the oldest past [`REMEMBERED`].
    fn record(&mut self, key: u64, seen: RecentEvent) {
        self.by_key.insert(key, seen);
        if self.by_key.len() > REMEMBERED
            && let Some(oldest) = self.by_key.iter().min_by_key(|(_, s)| s.at).map(|(k, _)| *k)
        {
            self.by_key.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(name: &str, at: Instant) -> RecentEvent {
        RecentEvent {
            name: name.into(),
            namespace: "ns".into(),
            count: 1,
            at,
        }
    }

    fn event(reason: &str, note: &str) -> Event {
        Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note.into()),
            action: "Reconcile".into(),
            secondary: None,
        }
    }

    fn pod(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    #[test]
    fn the_same_event_on_the_same_object_is_a_repeat_and_any_difference_is_not() {
        let base = key_of(&event("Fenced", "node n1 offline"), &pod("a"));
        assert_eq!(base, key_of(&event("Fenced", "node n1 offline"), &pod("a")));
        assert_ne!(base, key_of(&event("Fenced", "node n2 offline"), &pod("a")));
        assert_ne!(base, key_of(&event("FencingSkipped", "node n1 offline"), &pod("a")));
        assert_ne!(base, key_of(&event("Fenced", "node n1 offline"), &pod("b")));
        let mut normal = event("Fenced", "node n1 offline");
        normal.type_ = EventType::Normal;
        assert_ne!(base, key_of(&normal, &pod("a")));
    }

    #[test]
    fn a_repeat_within_six_minutes_adds_to_the_series_and_a_later_one_starts_anew() {
        let t0 = Instant::now();
        let mut recent = Recent::default();
        assert_eq!(recent.repeat(1, t0), None);
        recent.record(1, seen("a.1", t0));
        let again = recent.repeat(1, t0 + Duration::from_secs(60));
        assert_eq!(again.map(|s| s.name), Some("a.1".to_string()));
        assert_eq!(recent.repeat(1, t0 + REPEAT_WITHIN), None);
        assert!(recent.by_key.is_empty(), "expired events are forgotten");
    }

    #[test]
    fn a_burst_of_events_is_bounded_and_its_memory_given_back_once_expired() {
        let t0 = Instant::now();
        let mut recent = Recent::default();
        for k in 0..5_000u64 {
            let at = t0 + Duration::from_millis(k);
            recent.record(k, seen(&format!("pvc-{k}"), at));
        }
        assert_eq!(recent.by_key.len(), REMEMBERED);
        assert!(
            recent.by_key.contains_key(&4_999) && !recent.by_key.contains_key(&0),
            "the oldest go first"
        );
        assert_eq!(recent.repeat(9_999, t0 + REPEAT_WITHIN + Duration::from_secs(10)), None);
        assert_eq!(recent.by_key.capacity(), 0, "the table is given back");
    }

    #[test]
    fn a_cluster_scoped_object_gets_its_events_in_default_named_after_it() {
        let reporter = Reporter {
            controller: "storageos-api-manager".into(),
            instance: None,
        };
        let node = ObjectReference {
            kind: Some("Node".into()),
            name: Some("n1".into()),
            ..ObjectReference::default()
        };
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let e = build(&reporter, &event("FencingSuspended", "why"), &node, now);
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert!(e.metadata.name.as_deref().is_some_and(|n| n.starts_with("n1.")));
        assert_eq!(e.reporting_instance.as_deref(), Some("storageos-api-manager"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.note.as_deref(), Some("why"));
    }

    #[test]
    fn a_5kib_note_is_published_truncated() {
        let reporter = Reporter {
            controller: "storageos-operator".into(),
            instance: None,
        };
        let long = "x".repeat(5 * 1024);
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let e = build(&reporter, &event("ApplyFailed", &long), &pod("a"), now);
        let note = e.note.unwrap();
        assert!(note.len() <= crate::text::EVENT_NOTE_LIMIT, "{}", note.len());
        assert!(note.starts_with("xxx") && note.ends_with("(truncated)"));
    }
}
