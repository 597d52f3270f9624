//! The watch filter that turns label changes into reconciles: a fingerprint of what a
//! controller reacts to, remembered per object.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use futures::{Stream, StreamExt, future};
use kube::ResourceExt;
use kube::runtime::watcher;

/// A hash of what a controller reacts to, for objects it handles (None for other objects).
pub fn fingerprint(parts: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

/// Remembers the fingerprint of every watched object, to tell which events are changes.
///
/// Objects of the first (initial) list are only recorded: the resync loop compares them with
/// StorageOS in one batch. After that, an object is passed on when its fingerprint is new or
/// differs from the one recorded: labels changed, the object became StorageOS's, or it was
/// created. Objects of a later re-list (after a watch error) are compared too, so changes made
/// while the watch was down are not lost.
#[derive(Debug, Default)]
pub struct LabelFingerprints {
    fingerprints: HashMap<(String, String), u64>,
    initialised: bool,
    listing: Option<HashSet<(String, String)>>,
}

impl LabelFingerprints {
    /// Takes one watch event; returns the object if it must be reconciled.
    pub fn observe<K: ResourceExt>(
        &mut self,
        event: watcher::Event<K>,
        fingerprint: impl Fn(&K) -> Option<u64>,
    ) -> Option<K> {
        let key = |o: &K| (o.namespace().unwrap_or_default(), o.name_any());
        match event {
            watcher::Event::Init => {
                self.listing = Some(HashSet::new());
                None
            }
            watcher::Event::InitApply(obj) => {
                if let Some(listing) = &mut self.listing {
                    listing.insert(key(&obj));
                }
                let changed = self.record(key(&obj), fingerprint(&obj));
                (self.initialised && changed).then_some(obj)
            }
            watcher::Event::InitDone => {
                if let Some(listing) = self.listing.take() {
                    self.fingerprints.retain(|k, _| listing.contains(k));
                }
                self.initialised = true;
                None
            }
            watcher::Event::Apply(obj) => self.record(key(&obj), fingerprint(&obj)).then_some(obj),
            watcher::Event::Delete(obj) => {
                self.fingerprints.remove(&key(&obj));
                None
            }
        }
    }

    /// Records `fp` for `key`; true when it is a fingerprint (not None) that differs from before.
    fn record(&mut self, key: (String, String), fp: Option<u64>) -> bool {
        match fp {
            None => {
                self.fingerprints.remove(&key);
                false
            }
            Some(fp) => self.fingerprints.insert(key, fp) != Some(fp),
        }
    }
}

/// The objects of `events` that must be reconciled (see [`LabelFingerprints`]); watch errors pass through.
pub fn changes<K, S, F>(events: S, fingerprint: F) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: ResourceExt + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    F: Fn(&K) -> Option<u64> + Send + 'static,
{
    let mut seen = LabelFingerprints::default();
    events.filter_map(move |event| {
        future::ready(match event {
            Ok(e) => seen.observe(e, &fingerprint).map(Ok),
            Err(e) => Some(Err(e)),
        })
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str, label: &str) -> ConfigMap {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": name, "namespace": "ns", "labels": {"l": label}}}),
        )
        .unwrap()
    }

    fn fp(c: &ConfigMap) -> Option<u64> {
        let l = c.labels().get("l")?;
        (l != "ignored").then(|| fingerprint(l))
    }

    #[test]
    fn only_changes_after_the_first_list_are_passed_on() {
        use watcher::Event as E;
        let mut seen = LabelFingerprints::default();
        let names =
            |v: Vec<Option<ConfigMap>>| -> Vec<String> { v.into_iter().flatten().map(|c| c.name_any()).collect() };
        let first = vec![
            seen.observe(E::Init, fp),
            seen.observe(E::InitApply(cm("a", "1")), fp),
            seen.observe(E::InitApply(cm("b", "1")), fp),
            seen.observe(E::InitDone, fp),
        ];
        assert!(names(first).is_empty(), "the first list is left to the resync");
        let later = vec![
            seen.observe(E::Apply(cm("a", "1")), fp),       // unchanged
            seen.observe(E::Apply(cm("a", "2")), fp),       // changed
            seen.observe(E::Apply(cm("c", "1")), fp),       // created
            seen.observe(E::Apply(cm("b", "ignored")), fp), // no longer ours
            seen.observe(E::Apply(cm("b", "1")), fp),       // ours again
        ];
        assert_eq!(names(later), vec!["a", "c", "b"]);
        // A re-list after a watch error compares, and forgets objects that are gone.
        let relist = vec![
            seen.observe(E::Init, fp),
            seen.observe(E::InitApply(cm("a", "2")), fp),
            seen.observe(E::InitApply(cm("c", "9")), fp),
            seen.observe(E::InitDone, fp),
        ];
        assert_eq!(names(relist), vec!["c"]);
        assert_eq!(names(vec![seen.observe(E::Apply(cm("b", "1")), fp)]), vec!["b"]);
        seen.observe(E::Delete(cm("b", "1")), fp);
        assert_eq!(names(vec![seen.observe(E::Apply(cm("b", "1")), fp)]), vec!["b"]);
    }
}
