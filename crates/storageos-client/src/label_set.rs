//! [`LabelSet`]: the labels of a node, namespace or volume as read, kept small.
//!
//! A `BTreeMap` allocates a node of eleven slots (~0.5 KiB for `String` pairs) however few
//! labels it holds. The api-manager keeps every volume it last read, most with two or three
//! labels: at 1,000 volumes their maps were ~0.7 MB of its heap (heaptrack). A sorted boxed
//! slice holds the same pairs in one exact allocation.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::models::Labels;

/// Labels sorted by key, each key once. Reads like the map it replaces (`get`, `iter`,
/// `contains_key`); writes rebuild it, which only tests and the simulator do.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSet(Box<[(String, String)]>);

impl LabelSet {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&String> {
        self.position(key).ok().map(|i| &self.0[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    /// Every `(key, value)`, sorted by key.
    pub fn iter(&self) -> Iter<'_> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// Every key, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.iter().map(|(k, _)| k)
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
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                let mut pairs = std::mem::take(&mut self.0).into_vec();
                pairs.insert(i, (key, value));
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
        Some(value)
    }

    /// The labels as the map requests take.
    pub fn to_map(&self) -> Labels {
        self.0.iter().cloned().collect()
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
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
        LabelSet(pairs.into_boxed_slice())
    }
}

/// The iterator of [`LabelSet::iter`].
pub type Iter<'a> =
    std::iter::Map<std::slice::Iter<'a, (String, String)>, fn(&'a (String, String)) -> (&'a String, &'a String)>;

impl<'a> IntoIterator for &'a LabelSet {
    type Item = (&'a String, &'a String);
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
        // Already sorted and unique.
        LabelSet(map.into_iter().collect())
    }
}

impl PartialEq<BTreeMap<String, String>> for LabelSet {
    fn eq(&self, map: &BTreeMap<String, String>) -> bool {
        self.len() == map.len() && self.iter().eq(map.iter())
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
        assert_eq!(set.get("b").map(String::as_str), Some("2"));
        assert!(set.contains_key("c") && !set.contains_key("d"));
        assert_eq!(set.keys().map(String::as_str).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(serde_json::to_string(&set).unwrap(), r#"{"a":"1","b":"2","c":"3"}"#);
        assert_eq!(set.to_map(), map);
        assert_eq!(LabelSet::from(map), set);
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
        assert_eq!(set.iter().collect::<Vec<_>>(), [(&"b".to_string(), &"2".to_string())]);
    }

    #[test]
    fn a_value_that_is_not_a_string_is_an_error() {
        assert!(serde_json::from_str::<LabelSet>(r#"{"a":1}"#).is_err());
    }
}
