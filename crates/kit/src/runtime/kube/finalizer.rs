//! Adding and releasing a finalizer, one way for every controller: a merge patch guarded by the
//! object's resourceVersion, so a finalizer list someone else changed meanwhile is never
//! overwritten (the write fails with 409 and the reconcile runs again on fresh data).

use std::fmt::Debug;

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// Whether `obj` carries finalizer `name`.
pub fn has<K: Resource>(obj: &K, name: &str) -> bool {
    obj.finalizers().iter().any(|f| f == name)
}

/// Adds finalizer `name` to `obj`. Returns the object as written, or None when it already had it
/// (nothing is written).
pub async fn add<K>(api: &Api<K>, obj: &K, name: &str, params: &PatchParams) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    if has(obj, name) {
        return Ok(None);
    }
    let mut finalizers = obj.finalizers().to_vec();
    finalizers.push(name.into());
    write(api, obj, finalizers, params).await.map(Some)
}

/// Adds finalizer `name` to `obj` together with the label `mark` (key, value), which stays after
/// the finalizer is released: a label selector can find what the controller once finalized where
/// it no longer watches ([`super::namespaced::watch`]). Returns the object as written, or None
/// when it already had both.
pub async fn add_marked<K>(
    api: &Api<K>,
    obj: &K,
    name: &str,
    mark: (&str, &str),
    params: &PatchParams,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let marked = obj.labels().get(mark.0).map(String::as_str) == Some(mark.1);
    if has(obj, name) && marked {
        return Ok(None);
    }
    let mut finalizers = obj.finalizers().to_vec();
    if !has(obj, name) {
        finalizers.push(name.into());
    }
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "labels": {mark.0: mark.1},
        "resourceVersion": obj.resource_version(),
    }});
    api.patch(&obj.name_any(), params, &Patch::Merge(&patch))
        .await
        .map(Some)
}

/// Labels `obj` with `mark` (key, value) unless it has it: [`add_marked`] for an object that gets
/// no finalizer. Returns the object as written, or None when nothing was written.
pub async fn mark<K>(api: &Api<K>, obj: &K, mark: (&str, &str), params: &PatchParams) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    if obj.labels().get(mark.0).map(String::as_str) == Some(mark.1) {
        return Ok(None);
    }
    let patch = json!({"metadata": {"labels": {mark.0: mark.1}}});
    api.patch(&obj.name_any(), params, &Patch::Merge(&patch))
        .await
        .map(Some)
}

/// Releases finalizer `name` from `obj`; nothing is written when it is not there.
pub async fn remove<K>(api: &Api<K>, obj: &K, name: &str, params: &PatchParams) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    if !has(obj, name) {
        return Ok(());
    }
    let finalizers = obj.finalizers().iter().filter(|f| *f != name).cloned().collect();
    write(api, obj, finalizers, params).await.map(|_| ())
}

async fn write<K>(api: &Api<K>, obj: &K, finalizers: Vec<String>, params: &PatchParams) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}});
    api.patch(&obj.name_any(), params, &Patch::Merge(&patch)).await
}
