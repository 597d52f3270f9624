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
