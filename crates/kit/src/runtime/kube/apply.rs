//! Apply step shared by the reconcilers: server-side apply of desired objects, skipping objects
//! that have not changed since we last applied them, and pruning of objects that carry our
//! labels but are no longer desired.
//!
//! An idle cluster must cost nothing, so an object is only re-applied when what we want changed
//! or the live object changed under us (its `generation` for objects that have one, so that
//! status updates by other controllers do not trigger writes; its `resourceVersion` otherwise).
//!
//! Only objects of ours are ever taken over, replaced or deleted ([`Ownership::is_ours`]): an object that
//! exists already must carry `app.kubernetes.io/managed-by=storageos-operator` (which the Go
//! operator set too) or have been written by our field manager before we force-apply over it or
//! replace it; pruning needs our field manager. A user's StorageClass `fast`, or a copy of one
//! of our objects made with `kubectl`, is never touched.

use std::collections::{BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::{DynamicObject, ObjectMeta};
use serde_json::Value;
use tracing::Instrument;

use super::live::LiveIndex;
pub use super::object::{Malformed, ObjectKey, live_marker, written_by};
use crate::reasons::{self, Reason};

/// Why applying or pruning failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A rendered object lacks apiVersion, kind or name (a template bug).
    #[error(transparent)]
    Malformed(#[from] Malformed),
    /// The object exists but is not ours: it is left alone.
    #[error(
        "{0} exists and was not created by the StorageOS operator; it is left alone: delete or rename it, \
         or label it app.kubernetes.io/managed-by=storageos-operator to let the operator take it over"
    )]
    Foreign(ObjectKey),
    /// The apiserver refused a request.
    #[error("{verb} {kind} {name}: {source}")]
    Kube {
        verb: &'static str,
        kind: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
}

impl Error {
    /// What the apiserver said, short enough for a status message: its code, reason and
    /// message (a 403 names the verb and resource that were refused, a 422 the invalid field).
    pub fn apiserver_reason(&self) -> String {
        match self {
            Self::Kube { source, .. } => match source.as_ref() {
                kube::Error::Api(s) => format!("{} {}: {}", s.code, s.reason, s.message),
                other => other.to_string(),
            },
            _ => self.to_string(),
        }
    }

    /// The condition reason a reconciler reports for this error.
    pub fn reason(&self) -> Reason {
        match self {
            Error::Foreign(_) => reasons::FOREIGN_OBJECT,
            _ => reasons::APPLY_FAILED,
        }
    }
}

/// Which existing objects the applier may take over or replace: besides what our field manager
/// wrote, objects written by one of `adoptable_managers`, labelled `managed_by`, or named one of
/// `adoptable_names`. The owner of the kit (the operator) gives it at construction.
#[derive(Clone, Copy, Debug)]
pub struct Ownership {
    /// The field manager of every write the applier makes: what it wrote is its own to update
    /// and prune.
    pub field_manager: &'static str,
    /// Field managers of another controller whose objects are ours to adopt.
    pub adoptable_managers: &'static [&'static str],
    /// The label (key, value) that marks an object as managed by us.
    pub managed_by: (&'static str, &'static str),
    /// Names that are ours whoever created them (of any kind).
    pub adoptable_names: &'static [&'static str],
}

impl Ownership {
    /// Whether the object may be taken over by a forced apply.
    pub fn is_ours(&self, meta: &ObjectMeta) -> bool {
        written_by(meta, self.field_manager)
            || meta.managed_fields.iter().flatten().any(|f| {
                f.manager
                    .as_deref()
                    .is_some_and(|m| self.adoptable_managers.contains(&m))
            })
            || meta.name.as_deref().is_some_and(|n| self.adoptable_names.contains(&n))
            || meta
                .labels
                .as_ref()
                .and_then(|l| l.get(self.managed_by.0))
                .is_some_and(|v| v == self.managed_by.1)
    }
}

/// Kinds that are safe to delete and recreate when an immutable field must change: they only
/// describe how new volumes are made, so existing volumes and pods are unaffected. A Secret's
/// `type` is immutable too: the Go operator gave its copy of the etcd TLS Secret the source's
/// type, and the copy is now always `Opaque`; running pods keep the content they mounted.
pub const REPLACEABLE_KINDS: &[&str] = &["StorageClass", "CSIDriver", "Secret"];

/// Kinds applied without the ownership check: the operand Namespace often exists already (it is
/// `kube-system` by default); applying only adds our labels to it, and it is never pruned.
pub const SHARED_KINDS: &[&str] = &["Namespace"];

fn is_immutable_rejection(s: &kube::core::Status) -> bool {
    s.code == 422 && s.message.contains("field is immutable")
}

/// A kind that may be pruned, and whether it is namespaced.
#[derive(Clone, Copy, Debug)]
pub struct PruneKind {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

/// What `apply` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The object was written.
    Applied,
    /// Nothing changed; no write was made.
    Unchanged,
}

/// One object the apiserver refused in [`Applier::apply_all`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyFailure {
    /// Kind, namespace and name.
    pub object: String,
    /// The apiserver's answer.
    pub reason: String,
    /// The condition reason for this failure alone (`ApplyFailed`, `ForeignObject`).
    pub condition: Reason,
}

/// What [`Applier::apply_all`] did.
#[derive(Clone, Debug, Default)]
pub struct ApplyReport {
    /// Every object that applied (written or unchanged): what pruning keeps.
    pub keep: BTreeSet<ObjectKey>,
    /// How many were written.
    pub written: usize,
    /// Every object refused.
    pub failures: Vec<ApplyFailure>,
    /// How many objects were asked for.
    pub total: usize,
}

impl ApplyReport {
    /// The Ready=False message of a pass with failures.
    pub fn failed_message(&self) -> String {
        let each = self
            .failures
            .iter()
            .map(|f| format!("{}: {}", f.object, f.reason))
            .collect::<Vec<_>>()
            .join("; ");
        format!(
            "cannot apply {} of {} objects (the others are applied; nothing is pruned until every object applies): {each}",
            self.failures.len(),
            self.total
        )
    }

    /// The condition reason of a pass with failures: the failures' own when they all share it
    /// (ForeignObject tells more), else ApplyFailed.
    pub fn failed_reason(&self) -> Reason {
        match self.failures.first().map(|f| f.condition) {
            Some(first) if self.failures.iter().all(|f| f.condition == first) => first,
            _ => reasons::APPLY_FAILED,
        }
    }
}

/// How many objects [`Applier::apply_all`] applies at once.
pub const APPLY_CONCURRENCY: usize = 8;

/// Applies and prunes objects, remembering what it applied.
pub struct Applier {
    client: Client,
    /// (desired hash, live marker) of the last successful apply of each object.
    applied: Mutex<HashMap<ObjectKey, (u64, String)>>,
    /// What the controller's watches of its children saw (empty unless a controller feeds it).
    live: Arc<LiveIndex>,
    /// Which existing objects may be taken over.
    ownership: Ownership,
}

/// Background deletion of exactly the object `meta` describes.
fn only(meta: &ObjectMeta) -> DeleteParams {
    DeleteParams {
        preconditions: meta.uid.clone().map(|uid| kube::api::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::background()
    }
}

fn hash_of(v: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    // serde_json maps are ordered (BTreeMap), so the string form is canonical.
    v.to_string().hash(&mut h);
    h.finish()
}

impl Applier {
    /// An applier writing with `client` that takes over only the objects `ownership` allows.
    pub fn new(client: Client, ownership: Ownership) -> Self {
        Self {
            client,
            applied: Mutex::new(HashMap::new()),
            live: Arc::new(LiveIndex::new(ownership.field_manager)),
            ownership,
        }
    }

    /// The index the controller's metadata watches of its children feed
    /// ([`LiveIndex::observe`]); reads of the kinds it has listed then come from it.
    pub fn live(&self) -> Arc<LiveIndex> {
        self.live.clone()
    }

    fn api(&self, key: &ObjectKey) -> Api<DynamicObject> {
        let ar = key.api_resource();
        match &key.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    fn remembered(&self, key: &ObjectKey) -> Option<(u64, String)> {
        self.applied.lock().ok().and_then(|m| m.get(key).cloned())
    }

    /// Forgets what was applied for every key `keep` refuses: objects deleted by someone else
    /// (the garbage collector, with their owner), so the memory does not grow with every Job.
    pub fn retain(&self, keep: impl Fn(&ObjectKey) -> bool) {
        if let Ok(mut m) = self.applied.lock() {
            m.retain(|k, _| keep(k));
        }
    }

    /// Forgets what was applied for `key`.
    pub fn forget(&self, key: &ObjectKey) {
        self.remember(key.clone(), None);
    }

    /// Remembers `key` as applied (tests of the callers' forgetting).
    #[cfg(any(test, feature = "testing"))]
    pub fn remember_applied(&self, key: ObjectKey) {
        self.remember(key, Some((0, String::new())));
    }

    /// How many objects are remembered.
    pub fn remembered_count(&self) -> usize {
        self.applied.lock().map(|m| m.len()).unwrap_or(0)
    }

    fn remember(&self, key: ObjectKey, entry: Option<(u64, String)>) {
        if let Ok(mut m) = self.applied.lock() {
            match entry {
                Some(e) => m.insert(key, e),
                None => m.remove(&key),
            };
        }
    }

    /// Server-side applies `obj` (forcing ownership of the fields it sets) unless neither it
    /// nor the live object changed since our last apply. `owner` is added as owner reference
    /// when the object lives in `owner_namespace`: Kubernetes forbids owners in another
    /// namespace (the garbage collector would delete the object).
    pub async fn apply(
        &self,
        obj: &Value,
        owner: Option<(&OwnerReference, &str)>,
    ) -> Result<(ObjectKey, Outcome), Error> {
        let key = ObjectKey::of(obj)?;
        let span = crate::telemetry::spans::apply(&key.kind, key.namespace.as_deref(), &key.name);
        let result = self.apply_key(key, obj, owner).instrument(span.clone()).await;
        crate::telemetry::spans::finish(&span, &result);
        result
    }

    async fn apply_key(
        &self,
        key: ObjectKey,
        obj: &Value,
        owner: Option<(&OwnerReference, &str)>,
    ) -> Result<(ObjectKey, Outcome), Error> {
        let mut desired = obj.clone();
        if let Some((owner, owner_ns)) = owner
            && key.namespace.as_deref() == Some(owner_ns)
            && let Ok(owner) = serde_json::to_value(owner)
        {
            desired["metadata"]["ownerReferences"] = Value::Array(vec![owner]);
        }
        let hash = hash_of(&desired);
        let api = self.api(&key);
        let kube_err = |verb, source| Error::Kube {
            verb,
            kind: key.kind.clone(),
            name: key.name.clone(),
            source: Box::new(source),
        };

        match self.remembered(&key) {
            Some((last_hash, last_marker)) if last_hash == hash => {
                let unchanged = match self.live.get(&key) {
                    Some(seen) => seen.is_some_and(|s| s.marker == last_marker),
                    None => api
                        .get_metadata_opt(&key.name)
                        .await
                        .map_err(|e| kube_err("get", e))?
                        .is_some_and(|l| live_marker(&l.metadata) == last_marker),
                };
                if unchanged {
                    return Ok((key, Outcome::Unchanged));
                }
            }
            Some(_) => {}
            None if SHARED_KINDS.contains(&key.kind.as_str()) => {}
            None => {
                // Not applied by this process yet: never force-apply over someone else's object.
                let live = api.get_metadata_opt(&key.name).await.map_err(|e| kube_err("get", e))?;
                if live.is_some_and(|l| !self.ownership.is_ours(&l.metadata)) {
                    return Err(Error::Foreign(key));
                }
            }
        }
        let params = PatchParams::apply(self.ownership.field_manager).force();
        let written = match api.patch(&key.name, &params, &Patch::Apply(&desired)).await {
            Ok(written) => written,
            Err(kube::Error::Api(s))
                if is_immutable_rejection(&s) && REPLACEABLE_KINDS.contains(&key.kind.as_str()) =>
            {
                // Immutable fields of a template-like object changed: replace it, if it is ours
                // (only that very object). Never done for workloads, whose replacement would
                // restart storage.
                let live = api.get_metadata_opt(&key.name).await.map_err(|e| kube_err("get", e))?;
                let Some(live) = live.filter(|l| self.ownership.is_ours(&l.metadata)) else {
                    return Err(Error::Foreign(key));
                };
                tracing::warn!(object = %key, "immutable fields changed; deleting and recreating");
                api.delete(&key.name, &only(&live.metadata))
                    .await
                    .map_err(|e| kube_err("delete", e))?;
                for _ in 0..100 {
                    if api
                        .get_metadata_opt(&key.name)
                        .await
                        .map_err(|e| kube_err("get", e))?
                        .is_none()
                    {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                api.patch(&key.name, &params, &Patch::Apply(&desired))
                    .await
                    .map_err(|e| kube_err("apply", e))?
            }
            Err(e) => return Err(kube_err("apply", e)),
        };
        self.remember(key.clone(), Some((hash, live_marker(&written.metadata))));
        Ok((key, Outcome::Applied))
    }

    /// Applies every object, in waves (`wave(kind)`, lowest first) of a few at once, and
    /// reports what applied and what was refused. Every object is tried even when one fails: a
    /// refused DaemonSet must not leave the Service or the RBAC unreconciled. `owner` as in
    /// [`Applier::apply`].
    pub async fn apply_all(
        &self,
        objects: &[Value],
        owner: Option<(&OwnerReference, &str)>,
        wave: impl Fn(&str) -> u8,
    ) -> ApplyReport {
        let kind = |v: &Value| v["kind"].as_str().unwrap_or_default().to_string();
        let mut waves: Vec<u8> = objects.iter().map(|v| wave(&kind(v))).collect();
        waves.sort_unstable();
        waves.dedup();
        let mut report = ApplyReport {
            total: objects.len(),
            ..ApplyReport::default()
        };
        for w in waves {
            let this: Vec<&Value> = objects.iter().filter(|v| wave(&kind(v)) == w).collect();
            for chunk in this.chunks(APPLY_CONCURRENCY) {
                let applied = futures::future::join_all(chunk.iter().map(|v| self.apply(v, owner))).await;
                for (value, result) in chunk.iter().zip(applied) {
                    match result {
                        Ok((key, outcome)) => {
                            if outcome == Outcome::Applied {
                                tracing::debug!(object = %key, "applied");
                                report.written += 1;
                            }
                            report.keep.insert(key);
                        }
                        Err(e) => {
                            let object = ObjectKey::of(value).map_or_else(|e| e.to_string(), |k| k.to_string());
                            tracing::warn!(%object, error = %e, "apply failed");
                            report.failures.push(ApplyFailure {
                                object,
                                reason: e.apiserver_reason(),
                                condition: e.reason(),
                            });
                        }
                    }
                }
            }
        }
        report
    }

    /// Deletes every object of `kinds` matching `selector` whose key is not in `keep`.
    /// Returns what it deleted. Call only after every desired object applied successfully:
    /// pruning on a partial view could delete something still wanted.
    pub async fn prune(
        &self,
        kinds: &[PruneKind],
        selector: &str,
        keep: &BTreeSet<ObjectKey>,
    ) -> Result<Vec<ObjectKey>, Error> {
        let mut found_all = Vec::new();
        for k in kinds {
            match self.live.written_by_us(k.api_version, k.kind, selector) {
                Some(found) => found_all.extend(found),
                None => found_all.extend(self.list(std::slice::from_ref(k), selector).await?),
            }
        }
        let mut deleted = Vec::new();
        for found in found_all {
            if !keep.contains(&found) {
                self.delete(&found).await?;
                deleted.push(found);
            }
        }
        Ok(deleted)
    }

    /// Every object of `kinds` matching `selector`, in all namespaces, that our field manager
    /// wrote: an object someone else made with the same labels is never listed (so never pruned
    /// or finalized).
    pub async fn list(&self, kinds: &[PruneKind], selector: &str) -> Result<Vec<ObjectKey>, Error> {
        let mut out = Vec::new();
        for k in kinds {
            let probe = ObjectKey {
                api_version: k.api_version.into(),
                kind: k.kind.into(),
                namespace: None,
                name: String::new(),
            };
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &probe.api_resource());
            let list = match api.list_metadata(&ListParams::default().labels(selector)).await {
                Ok(list) => list,
                // A kind whose API is not served (e.g. no ServiceMonitor CRD) holds nothing of ours.
                Err(kube::Error::Api(s)) if s.code == 404 => continue,
                Err(source) => {
                    return Err(Error::Kube {
                        verb: "list",
                        kind: k.kind.into(),
                        name: selector.into(),
                        source: Box::new(source),
                    });
                }
            };
            for item in list
                .items
                .into_iter()
                .filter(|i| written_by(&i.metadata, self.ownership.field_manager))
            {
                out.push(ObjectKey {
                    api_version: k.api_version.into(),
                    kind: k.kind.into(),
                    namespace: if k.namespaced {
                        item.metadata.namespace.clone()
                    } else {
                        None
                    },
                    name: item.metadata.name.clone().unwrap_or_default(),
                });
            }
        }
        Ok(out)
    }

    /// Deletes one object if it is ours ([`written_by`] its field manager), only that very object (a UID
    /// precondition); a missing object counts as deleted, a foreign one is left alone
    /// (`Ok(false)`).
    pub async fn delete_ours(&self, key: &ObjectKey) -> Result<bool, Error> {
        let api = self.api(key);
        let live = match api.get_metadata_opt(&key.name).await {
            Ok(live) => live,
            Err(source) => {
                return Err(Error::Kube {
                    verb: "get",
                    kind: key.kind.clone(),
                    name: key.name.clone(),
                    source: Box::new(source),
                });
            }
        };
        match live {
            None => Ok(true),
            Some(l) if !written_by(&l.metadata, self.ownership.field_manager) => {
                tracing::warn!(object = %key, "not deleting an object the operator did not write");
                Ok(false)
            }
            Some(l) => self.delete_with(key, &only(&l.metadata)).await.map(|()| true),
        }
    }

    /// Deletes one object (foreground for workloads is not needed: their pods are garbage
    /// collected). A missing object counts as deleted.
    pub async fn delete(&self, key: &ObjectKey) -> Result<(), Error> {
        self.delete_with(key, &DeleteParams::background()).await
    }

    async fn delete_with(&self, key: &ObjectKey, params: &DeleteParams) -> Result<(), Error> {
        match self.api(key).delete(&key.name, params).await {
            Ok(_) => {}
            // Gone, or replaced by another object of the same name since it was read.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(source) => {
                return Err(Error::Kube {
                    verb: "delete",
                    kind: key.kind.clone(),
                    name: key.name.clone(),
                    source: Box::new(source),
                });
            }
        }
        self.remember(key.clone(), None);
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn apiserver_reason_keeps_code_reason_and_the_whole_message() {
        let forbidden = kube::core::Status {
            code: 403,
            reason: "Forbidden".into(),
            message: r#"daemonsets.apps "ds" is forbidden: User "system:serviceaccount:x:y" cannot patch resource "daemonsets" in API group "apps" in the namespace "ns""#.into(),
            ..Default::default()
        };
        let e = Error::Kube {
            verb: "apply",
            kind: "DaemonSet".into(),
            name: "ds".into(),
            source: Box::new(kube::Error::Api(Box::new(forbidden))),
        };
        assert_eq!(
            e.apiserver_reason(),
            r#"403 Forbidden: daemonsets.apps "ds" is forbidden: User "system:serviceaccount:x:y" cannot patch resource "daemonsets" in API group "apps" in the namespace "ns""#
        );
    }

    #[test]
    fn hash_is_stable_and_sensitive() {
        let a = json!({"b": 1, "a": [1, 2]});
        assert_eq!(hash_of(&a), hash_of(&json!({"a": [1, 2], "b": 1})));
        assert_ne!(hash_of(&a), hash_of(&json!({"a": [2, 1], "b": 1})));
    }

    #[test]
    fn failed_message_names_every_object_and_reason() {
        let report = ApplyReport {
            failures: vec![
                ApplyFailure {
                    object: "DaemonSet ns/storageos-daemonset".into(),
                    reason: "403 Forbidden: denied by policy".into(),
                    condition: reasons::APPLY_FAILED,
                },
                ApplyFailure {
                    object: "Service ns/storageos".into(),
                    reason: "422 Invalid: duplicate port".into(),
                    condition: reasons::APPLY_FAILED,
                },
            ],
            total: 40,
            ..ApplyReport::default()
        };
        let m = report.failed_message();
        assert!(m.starts_with("cannot apply 2 of 40 objects"), "{m}");
        assert!(m.contains("DaemonSet ns/storageos-daemonset: 403 Forbidden: denied by policy; Service ns/storageos: 422 Invalid: duplicate port"), "{m}");
        assert!(m.contains("nothing is pruned"), "{m}");
        assert_eq!(report.failed_reason(), reasons::APPLY_FAILED);
    }
}
