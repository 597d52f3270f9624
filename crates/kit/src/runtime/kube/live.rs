//! What the metadata watches of a controller's children saw: for every object of a watched
//! kind, its live marker, whether our field manager wrote it, and its labels. The apply step
//! reads it instead of one GET per unchanged object, and pruning instead of one LIST per kind
//! (docs/benchmarks.md), once that kind's watch has listed everything; other kinds are read
//! from the apiserver as before.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::RwLock;

use kube::Resource;
use kube::core::{ObjectMeta, PartialObjectMeta};
use kube::runtime::watcher;

use super::object::{ObjectKey, live_marker, written_by};

/// One object as the watch last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveObject {
    /// `generation` (or `resourceVersion`), as the apply step compares it.
    pub marker: String,
    /// The index's field manager wrote it (only such objects are pruned).
    pub written_by_us: bool,
    pub labels: BTreeMap<String, String>,
}

/// (apiVersion, kind)
type Kind = (String, String);

#[derive(Default)]
struct Inner {
    objects: HashMap<ObjectKey, LiveObject>,
    /// Kinds whose watch has listed everything (since its last restart).
    listed: HashSet<Kind>,
    /// Objects of a kind being re-listed, replacing its entries once the list is complete.
    relisting: HashMap<Kind, HashMap<ObjectKey, LiveObject>>,
}

/// The index; empty (every kind unlisted) until a watch feeds it.
pub struct LiveIndex {
    inner: RwLock<Inner>,
    /// The field manager whose objects are "ours" (the applier's).
    manager: &'static str,
}

fn key_of<K: Resource<DynamicType = ()>>(meta: &ObjectMeta) -> ObjectKey {
    ObjectKey {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        namespace: meta.namespace.clone(),
        name: meta.name.clone().unwrap_or_default(),
    }
}

fn seen(meta: &ObjectMeta, manager: &str) -> LiveObject {
    LiveObject {
        marker: live_marker(meta),
        written_by_us: written_by(meta, manager),
        labels: meta.labels.clone().unwrap_or_default(),
    }
}

/// Whether `labels` match an equality selector `k=v,k2=v2`; None when the selector has any
/// other form (the caller then asks the apiserver).
fn matches(selector: &str, labels: &BTreeMap<String, String>) -> Option<bool> {
    let mut all = true;
    for term in selector.split(',').filter(|t| !t.is_empty()) {
        let (k, v) = term.split_once('=')?;
        if k.ends_with('!') || v.starts_with('=') || k.contains(['(', ' ']) {
            return None;
        }
        all &= labels.get(k).is_some_and(|l| l == v);
    }
    Some(all)
}

impl LiveIndex {
    /// An empty index whose own objects are those `manager` wrote.
    pub fn new(manager: &'static str) -> Self {
        Self {
            inner: RwLock::default(),
            manager,
        }
    }

    /// Feeds one event of a metadata watch of kind `K`.
    pub fn observe<K: Resource<DynamicType = ()>>(&self, event: &watcher::Event<PartialObjectMeta<K>>) {
        let Ok(mut inner) = self.inner.write() else { return };
        let kind: Kind = (K::api_version(&()).into_owned(), K::kind(&()).into_owned());
        match event {
            watcher::Event::Init => {
                inner.listed.remove(&kind);
                inner.relisting.insert(kind, HashMap::new());
            }
            watcher::Event::InitApply(o) => {
                inner
                    .relisting
                    .entry(kind)
                    .or_default()
                    .insert(key_of::<K>(&o.metadata), seen(&o.metadata, self.manager));
            }
            watcher::Event::InitDone => {
                let fresh = inner.relisting.remove(&kind).unwrap_or_default();
                inner.objects.retain(|k, _| k.api_version != kind.0 || k.kind != kind.1);
                inner.objects.extend(fresh);
                inner.listed.insert(kind);
            }
            watcher::Event::Apply(o) => {
                inner
                    .objects
                    .insert(key_of::<K>(&o.metadata), seen(&o.metadata, self.manager));
            }
            watcher::Event::Delete(o) => {
                inner.objects.remove(&key_of::<K>(&o.metadata));
            }
        }
    }

    /// `Some(seen)` or `Some(None)` (absent) once the kind of `key` is listed; None otherwise.
    pub fn get(&self, key: &ObjectKey) -> Option<Option<LiveObject>> {
        let inner = self.inner.read().ok()?;
        inner
            .listed
            .contains(&(key.api_version.clone(), key.kind.clone()))
            .then(|| inner.objects.get(key).cloned())
    }

    /// The objects of a listed kind matching an equality `selector` that our field manager
    /// wrote; None when the kind is not listed or the selector is not a plain equality one.
    pub fn written_by_us(&self, api_version: &str, kind: &str, selector: &str) -> Option<Vec<ObjectKey>> {
        let inner = self.inner.read().ok()?;
        if !inner.listed.contains(&(api_version.to_string(), kind.to_string())) {
            return None;
        }
        let mut out = Vec::new();
        for (k, s) in &inner.objects {
            if k.api_version == api_version && k.kind == kind && s.written_by_us && matches(selector, &s.labels)? {
                out.push(k.clone());
            }
        }
        out.sort();
        Some(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    use super::*;

    const MANAGER: &str = "an-operator";

    fn cm(name: &str, rv: &str, ours: bool, labels: &[(&str, &str)]) -> PartialObjectMeta<ConfigMap> {
        PartialObjectMeta::<ConfigMap> {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                managed_fields: ours.then(|| {
                    vec![ManagedFieldsEntry {
                        manager: Some(MANAGER.into()),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: name.into(),
        }
    }

    #[test]
    fn knows_nothing_until_the_kind_is_listed_then_follows_the_watch() {
        let idx = LiveIndex::new(MANAGER);
        assert_eq!(idx.get(&key("a")), None);
        idx.observe(&watcher::Event::<PartialObjectMeta<ConfigMap>>::Init);
        idx.observe(&watcher::Event::InitApply(cm("a", "1", true, &[("x", "1")])));
        assert_eq!(idx.get(&key("a")), None, "not listed before InitDone");
        idx.observe(&watcher::Event::<PartialObjectMeta<ConfigMap>>::InitDone);
        assert_eq!(idx.get(&key("a")).unwrap().unwrap().marker, "rv1");
        assert_eq!(idx.get(&key("b")), Some(None), "absent once listed");
        idx.observe(&watcher::Event::Apply(cm("a", "2", true, &[("x", "1")])));
        assert_eq!(idx.get(&key("a")).unwrap().unwrap().marker, "rv2");
        idx.observe(&watcher::Event::Delete(cm("a", "2", true, &[])));
        assert_eq!(idx.get(&key("a")), Some(None));
    }

    #[test]
    fn a_relist_replaces_the_kind_and_prune_sees_only_ours_matching() {
        let idx = LiveIndex::new(MANAGER);
        idx.observe(&watcher::Event::<PartialObjectMeta<ConfigMap>>::Init);
        idx.observe(&watcher::Event::InitApply(cm("old", "1", true, &[("x", "1")])));
        idx.observe(&watcher::Event::<PartialObjectMeta<ConfigMap>>::InitDone);
        idx.observe(&watcher::Event::<PartialObjectMeta<ConfigMap>>::Init);
        idx.observe(&watcher::Event::InitApply(cm(
            "ours",
            "1",
            true,
            &[("x", "1"), ("y", "2")],
        )));
        idx.observe(&watcher::Event::InitApply(cm("theirs", "1", false, &[("x", "1")])));
        idx.observe(&watcher::Event::InitApply(cm("other", "1", true, &[("x", "2")])));
        idx.observe(&watcher::Event::<PartialObjectMeta<ConfigMap>>::InitDone);
        assert_eq!(idx.get(&key("old")), Some(None), "gone after the relist");
        assert_eq!(idx.written_by_us("v1", "ConfigMap", "x=1"), Some(vec![key("ours")]));
        assert_eq!(
            idx.written_by_us("v1", "ConfigMap", "x!=1"),
            None,
            "not an equality selector"
        );
        assert_eq!(idx.written_by_us("v1", "Secret", "x=1"), None, "kind not listed");
    }
}
