//! Server-side apply of untyped objects, saying what changed, kubectl-style
//! (`deployment.apps/storageos-operator created|configured|unchanged`). With `dry_run`, every
//! write is a server-side dry run (`dryRun=All`): the apiserver validates it, nothing is stored.

use std::collections::HashMap;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{Scope, pinned_kind};
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::FIELD_MANAGER;
use crate::runtime::kube::apply::ObjectKey;

/// Why an object could not be applied or deleted.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("object without apiVersion, kind or name: {0}")]
    Identity(String),
    #[error(
        "the cluster does not serve {api_version} {kind}: {source}; is it the Kubernetes you meant (--kubeconfig/--context)?"
    )]
    Discovery {
        api_version: String,
        kind: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot {verb} {what}: {source}")]
    Api {
        verb: &'static str,
        what: String,
        #[source]
        source: kube::Error,
    },
}

/// What applying an object did (or would do, in a dry run).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Created,
    Configured,
    Unchanged,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Created => "created",
            Self::Configured => "configured",
            Self::Unchanged => "unchanged",
        })
    }
}

/// Applies objects as [`FIELD_MANAGER`], finding each kind's resource once.
pub struct Applier {
    client: Client,
    dry_run: bool,
    resources: HashMap<GroupVersionKind, (ApiResource, bool)>,
}

impl Applier {
    pub fn new(client: Client, dry_run: bool) -> Self {
        Self {
            client,
            dry_run,
            resources: HashMap::new(),
        }
    }

    /// The API of `key`'s kind (and namespace).
    pub async fn api(&mut self, key: &ObjectKey) -> Result<Api<DynamicObject>, Error> {
        let (group, version) = key.api_version.split_once('/').unwrap_or(("", &key.api_version));
        let gvk = GroupVersionKind::gvk(group, version, &key.kind);
        if !self.resources.contains_key(&gvk) {
            let (ar, caps) = pinned_kind(&self.client, &gvk)
                .await
                .map_err(|source| Error::Discovery {
                    api_version: key.api_version.clone(),
                    kind: key.kind.clone(),
                    source,
                })?;
            self.resources
                .insert(gvk.clone(), (ar, caps.scope == Scope::Namespaced));
        }
        let (ar, namespaced) = &self.resources[&gvk];
        Ok(match (&key.namespace, namespaced) {
            (Some(ns), true) => Api::namespaced_with(self.client.clone(), ns, ar),
            _ => Api::all_with(self.client.clone(), ar),
        })
    }

    /// Server-side applies `obj` (forcing ownership of the fields it sets) and says what changed.
    pub async fn apply(&mut self, obj: &Value) -> Result<Outcome, Error> {
        let key = ObjectKey::of(obj).map_err(|e| Error::Identity(e.to_string()))?;
        let api = match self.api(&key).await {
            Ok(api) => api,
            // A dry run of a custom resource whose CRD the same dry run "created": it would be
            // created.
            Err(Error::Discovery { .. }) if self.dry_run => return Ok(Outcome::Created),
            Err(e) => return Err(e),
        };
        let what = describe(&key);
        let mut params = PatchParams::apply(FIELD_MANAGER).force();
        params.dry_run = self.dry_run;
        let mut attempt = 1;
        loop {
            let live = api.get_opt(&key.name).await.map_err(|source| Error::Api {
                verb: "read",
                what: what.clone(),
                source,
            })?;
            let applied = match api.patch(&key.name, &params, &Patch::Apply(obj)).await {
                Ok(o) => o,
                // A dry run of an object in a namespace the same dry run "created": it would be
                // created.
                Err(kube::Error::Api(e)) if self.dry_run && live.is_none() && e.code == 404 => {
                    return Ok(Outcome::Created);
                }
                Err(source) => {
                    return Err(Error::Api {
                        verb: "apply",
                        what,
                        source,
                    });
                }
            };
            match outcome(live.as_ref(), &applied, self.dry_run) {
                Some(outcome) => return Ok(outcome),
                // Written by someone else between the read and the dry run (an operator putting
                // its CA into a webhook configuration): read again, so a change of theirs is not
                // reported as one of ours.
                None if attempt < DRY_RUN_ATTEMPTS => attempt += 1,
                None => return Ok(Outcome::Configured),
            }
        }
    }

    /// Deletes the object `obj` names (foreground), or in a dry run only checks it exists.
    /// Returns whether it was there.
    pub async fn delete(&mut self, obj: &Value) -> Result<bool, Error> {
        let key = ObjectKey::of(obj).map_err(|e| Error::Identity(e.to_string()))?;
        let api = self.api(&key).await?;
        let what = describe(&key);
        let exists = api
            .get_opt(&key.name)
            .await
            .map_err(|source| Error::Api {
                verb: "read",
                what: what.clone(),
                source,
            })?
            .is_some();
        if !exists || self.dry_run {
            return Ok(exists);
        }
        match api.delete(&key.name, &DeleteParams::foreground()).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
            Err(source) => Err(Error::Api {
                verb: "delete",
                what,
                source,
            }),
        }
    }
}

/// `kind.group/name` as kubectl prints it (`deployment.apps/storageos-operator`).
pub fn describe(key: &ObjectKey) -> String {
    let kind = key.kind.to_lowercase();
    match key.api_version.split_once('/') {
        Some((group, _)) => format!("{kind}.{group}/{}", key.name),
        None => format!("{kind}/{}", key.name),
    }
}

/// How often a dry run is compared again when the object changed between the read and it.
const DRY_RUN_ATTEMPTS: u32 = 3;

/// What applying did, from the object read just before and the apply's answer; `None` when a
/// dry run was answered from another version of the object than the one read, so the two cannot
/// be compared.
fn outcome(live: Option<&DynamicObject>, applied: &DynamicObject, dry_run: bool) -> Option<Outcome> {
    let Some(live) = live else {
        return Some(Outcome::Created);
    };
    if same(live, applied, dry_run) {
        return Some(Outcome::Unchanged);
    }
    if dry_run && live.resource_version() != applied.resource_version() {
        return None;
    }
    Some(Outcome::Configured)
}

/// Whether applying changed nothing: the same resourceVersion (a real apply that wrote nothing),
/// or the same object apart from bookkeeping.
/// A dry run keeps the live resourceVersion whatever it would change, so only the content tells.
fn same(live: &DynamicObject, applied: &DynamicObject, dry_run: bool) -> bool {
    let kept = live.resource_version().is_some() && live.resource_version() == applied.resource_version();
    (kept && !dry_run) || comparable(live) == comparable(applied)
}

/// The object without the metadata that changes on every write or dry run.
fn comparable(o: &DynamicObject) -> Value {
    let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "managedFields",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "uid",
        ] {
            meta.remove(k);
        }
    }
    v
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn kubectl_style_names() {
        let key = ObjectKey::of(&json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "op", "namespace": "ns"}}))
        .unwrap();
        assert_eq!(describe(&key), "deployment.apps/op");
        let key = ObjectKey::of(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})).unwrap();
        assert_eq!(describe(&key), "namespace/ns");
    }

    #[test]
    fn a_dry_run_that_changes_only_bookkeeping_is_unchanged() {
        let live = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "resourceVersion": "5", "managedFields": []}, "data": {"a": "1"}}));
        let same_data = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "resourceVersion": "6", "managedFields": [{"manager": "x"}]}, "data": {"a": "1"}}));
        let other_data = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "resourceVersion": "6"}, "data": {"a": "2"}}));
        assert!(same(&live, &same_data, true));
        assert!(!same(&live, &other_data, true));
        // A dry run answers with the live resourceVersion even when it would change the object.
        let mut dry = other_data.clone();
        dry.metadata.resource_version = Some("5".into());
        assert!(!same(&live, &dry, true));
        assert!(same(&live, &dry, false));
    }

    #[test]
    fn a_dry_run_answered_from_a_newer_object_is_compared_again() {
        let live = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "resourceVersion": "5"}, "data": {"a": "1"}}));
        // Another writer added a key between the read and the dry run: the dry run answers with
        // their resourceVersion, and the difference is not the plugin's.
        let theirs = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "resourceVersion": "7"}, "data": {"a": "1", "b": "2"}}));
        assert_eq!(outcome(Some(&live), &theirs, true), None);
        // The same answer from a real apply is a change (it wrote, or someone did).
        assert_eq!(outcome(Some(&live), &theirs, false), Some(Outcome::Configured));
        // A dry run from the version read that differs would change the object.
        let mut ours = theirs.clone();
        ours.metadata.resource_version = Some("5".into());
        assert_eq!(outcome(Some(&live), &ours, true), Some(Outcome::Configured));
        assert_eq!(outcome(Some(&live), &live, true), Some(Outcome::Unchanged));
        assert_eq!(outcome(None, &live, true), Some(Outcome::Created));
    }
}
