//! [`LabelSet`]: labels as both processes keep them, small: of every StorageOS node, namespace
//! and volume the api-manager last read, and (as `view::Labels`) of every Node, PVC and node
//! pod the two processes cache.
//!
//! A `BTreeMap<String, String>` allocates a node of eleven slots (~0.5 KiB) however few labels
//! it holds, and a block for every key and value. Here the pairs are sorted in one allocation of
//! their exact size (40 bytes a pair). Keys repeat across objects (every Node has
//! `kubernetes.io/hostname`, every StorageOS volume `csi.storage.k8s.io/pvc/name`), so each
//! distinct key is allocated once and shared ([`shared_key`]); a value of up to 23 bytes
//! (`amd64`, most hostnames and claim names) is kept inline. A kwok Node's eight labels took
//! ~770 bytes of glibc's heap as boxed strings and take ~340 (`tests/cache_footprint.rs`).

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex};

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smol_str::SmolStr;

use crate::models::Labels;

/// At most this many distinct label keys are shared ([`shared_key`]); past it, a new key is
/// allocated for its object alone, so labels with made-up keys cannot grow the set for ever.
pub const SHARED_KEYS_MAX: usize = 4096;

/// `key` as the one shared allocation of that key (made at its first use while fewer than
/// [`SHARED_KEYS_MAX`] keys are shared; never freed, like the keys of a cluster).
pub fn shared_key(key: &str) -> Arc<str> {
    static KEYS: LazyLock<Mutex<HashSet<Arc<str>>>> = LazyLock::new(Mutex::default);
    match KEYS.lock() {
        Ok(mut keys) => share(&mut keys, key, SHARED_KEYS_MAX),
        Err(_) => Arc::from(key),
    }
}

/// `key` from `keys`, or added to them while they hold fewer than `max`.
fn share(keys: &mut HashSet<Arc<str>>, key: &str, max: usize) -> Arc<str> {
    if let Some(shared) = keys.get(key) {
        return shared.clone();
    }
    let new: Arc<str> = Arc::from(key);
    if keys.len() < max {
        keys.insert(new.clone());
    }
    new
}

/// Labels sorted by key, each key once. Reads like the map it replaces (`get`, `iter`,
/// `contains_key`); writes rebuild it, which only tests and the simulator do.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSet(Box<[(Arc<str>, SmolStr)]>);

impl LabelSet {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.position(key).ok().map(|i| self.0[i].1.as_str())
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    /// Every `(key, value)`, sorted by key.
    pub fn iter(&self) -> Iter<'_> {
        self.0.iter().map(|(k, v)| (k.as_ref(), v.as_str()))
    }

    /// Every key, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_ref())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sets `key` to `value`; the value it had, if any.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        match self.position(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value.into()).into()),
            Err(i) => {
                let mut pairs = std::mem::take(&mut self.0).into_vec();
                pairs.insert(i, (shared_key(&key), value.into()));
                self.0 = pairs.into_boxed_slice();
                None
            }
        }
    }

    /// Removes `key`; the value it had, if any.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let i = self.position(key).ok()?;
        let mut pairs = std::mem::take(&mut self.0).into_vec();
        let (_, value) = pairs.remove(i);
        self.0 = pairs.into_boxed_slice();
        Some(value.into())
    }

    /// The labels as the map requests (and the rest of the code) take.
    pub fn to_map(&self) -> Labels {
        self.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_ref().cmp(key))
    }

    /// From pairs in any order; of two pairs with one key, the later wins (as in a map).
    fn from_pairs(mut pairs: Vec<(String, String)>) -> Self {
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(&mut later.1, &mut kept.1);
            }
            same
        });
        Self::from_sorted(pairs)
    }

    /// From pairs already sorted by key, each key once.
    fn from_sorted(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        LabelSet(
            pairs
                .into_iter()
                .map(|(k, v)| (shared_key(&k), SmolStr::from(v)))
                .collect(),
        )
    }
}

/// The iterator of [`LabelSet::iter`].
pub type Iter<'a> =
    std::iter::Map<std::slice::Iter<'a, (Arc<str>, SmolStr)>, fn(&'a (Arc<str>, SmolStr)) -> (&'a str, &'a str)>;

impl<'a> IntoIterator for &'a LabelSet {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl FromIterator<(String, String)> for LabelSet {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Self {
        Self::from_pairs(pairs.into_iter().collect())
    }
}

impl From<Labels> for LabelSet {
    fn from(map: Labels) -> Self {
        // A BTreeMap iterates sorted, with each key once.
        Self::from_sorted(map)
    }
}

impl From<Option<Labels>> for LabelSet {
    fn from(map: Option<Labels>) -> Self {
        map.map(LabelSet::from).unwrap_or_default()
    }
}

impl PartialEq<BTreeMap<String, String>> for LabelSet {
    fn eq(&self, map: &BTreeMap<String, String>) -> bool {
        self.len() == map.len() && self.iter().eq(map.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

impl Serialize for LabelSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for LabelSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Pairs;
        impl<'de> Visitor<'de> for Pairs {
            type Value = LabelSet;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of label keys to values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LabelSet, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
                while let Some(pair) = map.next_entry::<String, String>()? {
                    pairs.push(pair);
                }
                Ok(LabelSet::from_pairs(pairs))
            }
        }
        d.deserialize_map(Pairs)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn it_reads_like_the_map_it_replaces() {
        let set: LabelSet = serde_json::from_str(r#"{"b":"2","a":"1","c":"3"}"#).unwrap();
        let map: Labels = serde_json::from_str(r#"{"b":"2","a":"1","c":"3"}"#).unwrap();
        assert_eq!(set, map);
        assert_eq!(set.get("b"), Some("2"));
        assert!(set.contains_key("c") && !set.contains_key("d"));
        assert_eq!(set.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(serde_json::to_string(&set).unwrap(), r#"{"a":"1","b":"2","c":"3"}"#);
        assert_eq!(set.to_map(), map);
        assert_eq!(LabelSet::from(map), set);
        assert_eq!(LabelSet::from(None), LabelSet::default());
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value_as_a_map_would() {
        let set: LabelSet = serde_json::from_str(r#"{"a":"1","b":"x","a":"2"}"#).unwrap();
        let map: Labels = serde_json::from_str(r#"{"a":"1","b":"x","a":"2"}"#).unwrap();
        assert_eq!(set, map);
    }

    #[test]
    fn writes_keep_it_sorted() {
        let mut set = LabelSet::default();
        assert_eq!(set.insert("b".into(), "1".into()), None);
        assert_eq!(set.insert("a".into(), "1".into()), None);
        assert_eq!(set.insert("b".into(), "2".into()), Some("1".into()));
        assert_eq!(set.remove("a"), Some("1".into()));
        assert_eq!(set.remove("a"), None);
        assert_eq!(set.iter().collect::<Vec<_>>(), [("b", "2")]);
    }

    #[test]
    fn a_value_that_is_not_a_string_is_an_error() {
        assert!(serde_json::from_str::<LabelSet>(r#"{"a":1}"#).is_err());
    }

    #[test]
    fn keys_are_shared_and_values_of_up_to_23_bytes_inline() {
        let a: LabelSet = [("kubernetes.io/hostname".to_string(), "node-1".to_string())]
            .into_iter()
            .collect();
        let b: LabelSet = serde_json::from_str(r#"{"kubernetes.io/hostname": "node-2"}"#).unwrap();
        assert!(Arc::ptr_eq(&a.0[0].0, &b.0[0].0), "one allocation for the key");
        assert!(!a.0[0].1.is_heap_allocated());
        let long: LabelSet = [("k".to_string(), "x".repeat(24))].into_iter().collect();
        assert!(long.0[0].1.is_heap_allocated());
        assert_eq!(long.get("k"), Some("x".repeat(24).as_str()));
    }

    #[test]
    fn shared_keys_stop_at_the_cap_and_still_work_past_it() {
        let mut keys = HashSet::new();
        let first = share(&mut keys, "a", 2);
        assert!(Arc::ptr_eq(&first, &share(&mut keys, "a", 2)));
        share(&mut keys, "b", 2);
        let past = share(&mut keys, "c", 2);
        assert_eq!(&*past, "c");
        assert_eq!(keys.len(), 2, "the set does not grow past its cap");
        assert!(
            !Arc::ptr_eq(&past, &share(&mut keys, "c", 2)),
            "past the cap, a key is its object's own"
        );
    }

    #[test]
    fn labels_are_kept_sorted_and_read_like_the_map_they_came_from() {
        let map = BTreeMap::from([
            ("kubernetes.io/os".to_string(), "linux".to_string()),
            ("app".to_string(), "db".to_string()),
            ("empty".to_string(), String::new()),
        ]);
        let labels = LabelSet::from(map.clone());
        assert_eq!((labels.len(), labels.is_empty()), (3, false));
        assert_eq!(labels.get("app"), Some("db"));
        assert_eq!(labels.get("empty"), Some(""));
        assert_eq!(labels.get("kubernetes.io/os"), Some("linux"));
        assert_eq!(labels.get("missing"), None);
        assert_eq!(
            labels.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ["app", "empty", "kubernetes.io/os"]
        );
        assert_eq!(labels.to_map(), map);
        assert!(LabelSet::from(None).is_empty() && LabelSet::from(None).get("app").is_none());
        assert_eq!(LabelSet::from(Some(map)), labels);
    }
}
