//! PVC label sync ("pvc-label"): the labels of a StorageOS-provisioned PVC, over its
//! StorageClass's `storageos.com/` parameters, are the source of truth for its volume
//! (`{namespace: PVC namespace, name: PV name}`).
//!
//! `storageos.com/replicas` and `storageos.com/failure-mode` go through their own endpoints,
//! only when they differ (invalid values are reported and change nothing); create-time-only keys
//! (nocache, nocompress, encryption, topology) are ignored, not retried forever as in Go
//! (docs/api-manager.md); unreserved labels are sent as one set with the volume's reserved labels.
//!
//! The StorageClass must be the one the volume was made from: the PVC annotation
//! `storageos.com/storageclass` holds its UID. On a mismatch the PVC is skipped with an event
//! (remove the annotation to sync again); without the annotation, a class older than the PVC is
//! recorded there, a newer one means skip.
//!
//! The resync loop takes the next volume snapshot of the shared poll, matches them by PVC
//! namespace and PV name (Go used the PVC name and could never match, docs/api-manager.md), compares only the
//! settings this controller manages and reconciles only the PVCs that differ.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;

use super::Context;
use super::config::LabelSyncConfig;
use super::labels::{self, Failures, LabelSync, Syncing, VolumePlan, plan_volume};
use crate::cached_pvc::CachedPvc;
use crate::reasons::{self, Reason};
use crate::runtime::kube::cache::Shared;
use crate::runtime::kube::controller::{ReconcileError, category};
use crate::storageclass::{ClassRef, STORAGECLASS_ANNOTATION, class_ref, pick_default};
use crate::storageos;
use crate::storageos::models::{Labels, Volume};
use crate::storageos_poll;
use std::future::Future;

/// The controller's name in metrics, logs and events.
pub const NAME: &str = "pvc-label";

/// How often an unbound PVC is looked at again (binding itself also triggers a sync).
const UNBOUND_RECHECK: Duration = Duration::from_secs(60);

/// Why a PVC's labels could not be synced (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// StorageOS could not be read or refused a write for now.
    #[error("cannot sync the labels of PVC {pvc} to its StorageOS volume: {failures}; retrying with backoff")]
    Api { pvc: String, failures: Failures },
    /// Kubernetes could not be read or written.
    #[error("cannot {action} for PVC {pvc}: {source}; check the api-manager's RBAC and the apiserver")]
    Kube {
        pvc: String,
        action: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Api { .. } => category::STORAGEOS,
            Error::Kube { source, .. } => source.category(),
        }
    }
}

/// The StorageClass decision for one PVC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassCheck {
    /// Sync, with these class parameters; first record `annotate` (the class UID) on the PVC.
    Use {
        parameters: Labels,
        annotate: Option<String>,
    },
    /// Do not sync.
    Skip(Skip),
}

/// Why a PVC is not synced; each is reported as a warning event on the PVC.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Skip {
    #[error(
        "StorageClass {class} (UID {uid}) is not the class the volume was made from (annotation {STORAGECLASS_ANNOTATION}={annotated}), so its labels are not synced; if the class was recreated on purpose, remove the annotation"
    )]
    Mismatch {
        class: String,
        uid: String,
        annotated: String,
    },
    #[error(
        "StorageClass {class} was created after this PVC, so its parameters may not be the ones the volume was made from and labels are not synced; if it is right, annotate the PVC with {STORAGECLASS_ANNOTATION}={uid}"
    )]
    Newer { class: String, uid: String },
    #[error(
        "StorageClass {class} does not exist, so the volume's defaults are unknown and labels are not synced; recreate the class"
    )]
    Missing { class: String },
    #[error(
        "the PVC names no StorageClass and there is no default class, so labels are not synced; set spec.storageClassName"
    )]
    NoDefault,
}

impl Skip {
    fn reason(&self) -> Reason {
        match self {
            Skip::Mismatch { .. } => reasons::STORAGE_CLASS_MISMATCH,
            Skip::Newer { .. } => reasons::STORAGE_CLASS_NEWER,
            Skip::Missing { .. } | Skip::NoDefault => reasons::STORAGE_CLASS_NOT_FOUND,
        }
    }
}

/// Resolves the PVC's StorageClass among `classes` as Kubernetes (and the PVC webhook) does, and
/// checks it is the volume's: the legacy annotation, else `spec.storageClassName`; an empty name
/// means "no class" (no defaults); none means the default class (the newest if several).
pub fn check_class(pvc: &CachedPvc, classes: &[StorageClass]) -> ClassCheck {
    let class = match class_ref(pvc) {
        ClassRef::NoClass => {
            return ClassCheck::Use {
                parameters: Labels::new(),
                annotate: None,
            };
        }
        ClassRef::Named(name) => match classes.iter().find(|c| c.name_any() == name) {
            Some(c) => c,
            None => return ClassCheck::Skip(Skip::Missing { class: name.into() }),
        },
        ClassRef::Default => match pick_default(classes) {
            Some(c) => c,
            None => return ClassCheck::Skip(Skip::NoDefault),
        },
    };
    let uid = class.uid().unwrap_or_default();
    let parameters: Labels = class.parameters.clone().unwrap_or_default();
    match &pvc.annotated.class_uid {
        Some(annotated) if *annotated != uid => ClassCheck::Skip(Skip::Mismatch {
            class: class.name_any(),
            uid,
            annotated: annotated.clone(),
        }),
        Some(_) => ClassCheck::Use {
            parameters,
            annotate: None,
        },
        None if class.creation_timestamp() > pvc.creation_timestamp() => ClassCheck::Skip(Skip::Newer {
            class: class.name_any(),
            uid,
        }),
        None => ClassCheck::Use {
            parameters,
            annotate: Some(uid),
        },
    }
}

/// What the watch reacts to on StorageOS PVCs: labels, binding and the class annotation (whose
/// removal re-enables sync after a mismatch).
fn fingerprint(pvc: &CachedPvc) -> Option<u64> {
    pvc.provisioned_by_storageos()
        .then(|| labels::fingerprint((&pvc.labels, pvc.bound_pv(), pvc.annotated.class_uid.as_ref())))
}

/// Runs the controller until the future is dropped (at once, when it is turned off).
pub async fn run(ctx: Arc<Context>) {
    labels::run::<PvcLabelSync>(ctx).await;
}

/// The PVC label sync, run by [`labels::run`].
pub struct PvcLabelSync;

impl LabelSync for PvcLabelSync {
    type Object = CachedPvc;
    type Error = Error;
    const NAME: &'static str = NAME;

    fn config(ctx: &Context) -> Option<LabelSyncConfig> {
        ctx.config.pvc_label
    }

    fn source(ctx: &Context) -> Shared<CachedPvc> {
        ctx.pvcs.clone()
    }

    fn fingerprint(obj: &CachedPvc) -> Option<u64> {
        fingerprint(obj)
    }

    fn sync(obj: Arc<CachedPvc>, st: Arc<Syncing>) -> impl Future<Output = Result<Action, Error>> + Send {
        sync(obj, st)
    }

    fn resync(st: Arc<Syncing>, cached: Vec<Arc<CachedPvc>>) -> impl Future<Output = Vec<ObjectRef<CachedPvc>>> {
        resync(st, cached)
    }
}

fn pvc_key(pvc: &CachedPvc) -> String {
    format!("{}/{}", pvc.namespace().unwrap_or_default(), pvc.name_any())
}

fn api_error(pvc: &CachedPvc, failures: Failures) -> Error {
    Error::Api {
        pvc: pvc_key(pvc),
        failures,
    }
}

async fn list_classes(ctx: &Context) -> Result<Vec<StorageClass>, kube::Error> {
    Ok(Api::<StorageClass>::all(ctx.kube.clone())
        .list(&ListParams::default())
        .await?
        .items)
}

/// The StorageOS volume `namespace/pv` (None if StorageOS has no such volume).
async fn find_volume(ctx: &Context, namespace: &str, pv: &str) -> Result<Option<Volume>, storageos::Error> {
    let namespaces = ctx.metrics.track("list_namespaces", ctx.api.list_namespaces()).await?;
    let Some(ns) = namespaces.into_iter().find(|n| n.name == namespace) else {
        return Ok(None);
    };
    match ctx.metrics.track("list_volumes", ctx.api.list_volumes(&ns.id)).await {
        Ok(volumes) => Ok(volumes.into_iter().find(|v| v.name == pv)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

async fn sync(pvc: Arc<CachedPvc>, st: Arc<Syncing>) -> Result<Action, Error> {
    if !pvc.provisioned_by_storageos() {
        return Ok(Action::await_change());
    }
    let ctx = &st.ctx;
    let Some(pv) = pvc.bound_pv() else {
        tracing::debug!(pvc = %pvc_key(&pvc), "not bound yet; syncing once it is");
        return Ok(Action::requeue(UNBOUND_RECHECK));
    };
    let kube_error = |action, source| Error::Kube {
        pvc: pvc_key(&pvc),
        action,
        source: Box::new(source),
    };
    // The volume first: a PVC StorageOS knows nothing about gets no event and no annotation.
    let namespace = pvc.namespace().unwrap_or_default();
    let volume = find_volume(ctx, &namespace, pv)
        .await
        .map_err(|e| api_error(&pvc, Failures::of("look up the volume", &e)))?;
    let Some(volume) = volume else {
        tracing::debug!(pvc = %pvc_key(&pvc), pv, "StorageOS has no volume for this PVC; nothing to sync");
        return Ok(Action::await_change());
    };
    let classes = list_classes(ctx)
        .await
        .map_err(|e| kube_error("list StorageClasses", e))?;
    let (parameters, annotate) = match check_class(&pvc, &classes) {
        ClassCheck::Use { parameters, annotate } => (parameters, annotate),
        ClassCheck::Skip(skip) => {
            st.kit
                .event(pvc.as_ref(), EventType::Warning, skip.reason(), skip.to_string())
                .await;
            return Ok(Action::await_change());
        }
    };
    if let Some(uid) = annotate {
        // Migrates PVCs made before the admission webhook recorded the class.
        let patch = serde_json::json!({"metadata": {"annotations": {STORAGECLASS_ANNOTATION: uid}}});
        Api::<CachedPvc>::namespaced(ctx.kube.clone(), &namespace)
            .patch(&pvc.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| kube_error("record the StorageClass UID", e))?;
    }
    let plan = plan_volume(&parameters, &pvc.labels.to_map(), &volume);
    st.report_not_applied(pvc.as_ref(), &plan.not_applied).await;
    apply(&pvc, &st, plan, volume).await
}

/// One write of a volume sync.
#[derive(Clone, Copy)]
enum Step {
    Replicas,
    FailureMode,
    Labels,
}

/// Writes what `plan` says, each step even if another failed, re-reading the volume after a
/// replicas change (its answer carries no new version).
async fn apply(pvc: &CachedPvc, st: &Syncing, plan: VolumePlan, mut current: Volume) -> Result<Action, Error> {
    let ctx = &st.ctx;
    let mut failures = Failures::default();
    let mut applied = Vec::new();
    let steps = if plan.failure_mode_first(&current) {
        [Step::FailureMode, Step::Replicas, Step::Labels]
    } else {
        [Step::Replicas, Step::FailureMode, Step::Labels]
    };
    for step in steps {
        let (ns, id, version) = (&current.namespace_id, &current.id, &current.version);
        let (what, result) = match (step, plan.replicas, plan.failure_mode, &plan.labels) {
            (Step::Replicas, Some(n), _, _) => {
                let set = ctx.api.set_replicas(ns, id, n, version);
                let result = match ctx.metrics.track("ensure_replicas", set).await {
                    Ok(()) => ctx.metrics.track("get_volume", ctx.api.get_volume(ns, id)).await,
                    Err(e) => Err(e),
                };
                (format!("replicas {n}"), result)
            }
            (Step::FailureMode, _, Some(mode), _) => {
                let set = ctx.api.set_failure_mode(ns, id, mode, version);
                let result = ctx.metrics.track("ensure_failure_mode", set).await;
                (format!("failure mode {}", mode.label_value()), result)
            }
            (Step::Labels, _, _, Some(wanted)) => {
                let set = ctx.api.set_volume_unreserved_labels(&current, wanted);
                let result = ctx.metrics.track("ensure_unreserved_volume_labels", set).await;
                (format!("{} unreserved labels", wanted.len()), result)
            }
            _ => continue,
        };
        match result {
            Ok(v) => {
                current = v;
                applied.push(what);
            }
            Err(e) => failures.add(&format!("set {what}"), &e),
        }
    }
    st.finish(pvc, "volume", &applied, failures)
        .await
        .map_err(|f| api_error(pvc, f))
}

/// The StorageClasses once and the next volume snapshot of the shared poll, then the bound PVCs
/// whose volume differs.
async fn resync(st: Arc<Syncing>, cached: Vec<Arc<CachedPvc>>) -> Vec<ObjectRef<CachedPvc>> {
    let mut by_namespace: HashMap<String, Vec<Arc<CachedPvc>>> = HashMap::new();
    for pvc in cached {
        if pvc.provisioned_by_storageos() && pvc.bound_pv().is_some() {
            by_namespace
                .entry(pvc.namespace().unwrap_or_default())
                .or_default()
                .push(pvc);
        }
    }
    let mut due = Vec::new();
    if by_namespace.is_empty() {
        return due;
    }
    let ctx = &st.ctx;
    let warn = |what: &str, e: &dyn std::fmt::Display| {
        tracing::warn!(controller = NAME, error = %e, "PVC label resync cannot {what}; the next pass retries");
    };
    let classes = match list_classes(ctx).await {
        Ok(c) => c,
        Err(e) => {
            warn("list StorageClasses", &e);
            return due;
        }
    };
    let mut polls = ctx.storageos.volumes();
    let snapshot = storageos_poll::next(&mut polls).await;
    let listing = match snapshot.as_ref().map(|s| &s.read) {
        Some(Ok(l)) => l,
        Some(Err(e)) => {
            warn("list StorageOS volumes", e);
            return due;
        }
        None => return due,
    };
    for (namespace, e) in &listing.failed {
        warn(&format!("list the StorageOS volumes of namespace {namespace}"), e);
    }
    let names: HashMap<&str, &str> = listing
        .namespaces
        .iter()
        .map(|n| (n.id.as_str(), n.name.as_str()))
        .collect();
    let by_key: HashMap<(&str, &str), &Volume> = listing
        .volumes()
        .filter_map(|v| Some(((*names.get(v.namespace_id.as_str())?, v.name.as_str()), v)))
        .collect();
    for (namespace, pvcs) in &by_namespace {
        for pvc in pvcs {
            let Some(volume) = pvc.bound_pv().and_then(|pv| by_key.get(&(namespace.as_str(), pv))) else {
                continue;
            };
            if let ClassCheck::Use { parameters, .. } = check_class(pvc, &classes)
                && plan_volume(&parameters, &pvc.labels.to_map(), volume).has_writes()
            {
                due.push(ObjectRef::from_obj(pvc.as_ref()));
            }
        }
    }
    due
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn pvc(yaml: &str) -> CachedPvc {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn classes() -> Vec<StorageClass> {
        serde_yaml::from_str(
            r#"
- metadata: {name: fast, uid: uid-fast, creationTimestamp: "2024-01-01T00:00:00Z"}
  provisioner: csi.storageos.com
  parameters: {storageos.com/replicas: "1", csi.storage.k8s.io/fstype: ext4}
- metadata: {name: old-default, uid: uid-old, creationTimestamp: "2023-01-01T00:00:00Z",
             annotations: {storageclass.kubernetes.io/is-default-class: "true"}}
  provisioner: csi.storageos.com
- metadata: {name: new-default, uid: uid-new, creationTimestamp: "2024-06-01T00:00:00Z",
             annotations: {storageclass.beta.kubernetes.io/is-default-class: "true"}}
  provisioner: csi.storageos.com
  parameters: {storageos.com/failure-mode: soft}
"#,
        )
        .unwrap()
    }

    const CREATED_2025: &str = "metadata: {name: p, namespace: ns, creationTimestamp: '2025-01-01T00:00:00Z'";

    #[test]
    fn the_class_is_resolved_and_checked_against_the_annotation() {
        let cs = classes();
        // Named, older than the PVC, not annotated yet: use it and record its UID.
        let p = pvc(&format!("{CREATED_2025}}}\nspec: {{storageClassName: fast}}\n"));
        let ClassCheck::Use { parameters, annotate } = check_class(&p, &cs) else {
            panic!("expected use")
        };
        assert_eq!(parameters.get("storageos.com/replicas").map(String::as_str), Some("1"));
        assert_eq!(annotate.as_deref(), Some("uid-fast"));

        // Annotated with the same UID: use it, nothing to record.
        let p = pvc(&format!(
            "{CREATED_2025}, annotations: {{storageos.com/storageclass: uid-fast}}}}\nspec: {{storageClassName: fast}}\n"
        ));
        assert!(matches!(check_class(&p, &cs), ClassCheck::Use { annotate: None, .. }));

        // Annotated with another UID (class recreated): skip.
        let p = pvc(&format!(
            "{CREATED_2025}, annotations: {{storageos.com/storageclass: uid-gone}}}}\nspec: {{storageClassName: fast}}\n"
        ));
        let ClassCheck::Skip(skip) = check_class(&p, &cs) else {
            panic!("expected skip")
        };
        assert_eq!(skip.reason(), "StorageClassMismatch");
        assert!(skip.to_string().contains("remove the annotation"), "{skip}");

        // A class newer than the PVC: skip.
        let p = pvc(
            "metadata: {name: p, namespace: ns, creationTimestamp: '2023-06-01T00:00:00Z'}\nspec: {storageClassName: fast}\n",
        );
        assert!(matches!(check_class(&p, &cs), ClassCheck::Skip(Skip::Newer { .. })));

        // No class name: the newest default class.
        let p = pvc(&format!("{CREATED_2025}}}\nspec: {{}}\n"));
        let ClassCheck::Use { parameters, annotate } = check_class(&p, &cs) else {
            panic!("expected use")
        };
        assert_eq!(annotate.as_deref(), Some("uid-new"));
        assert_eq!(
            parameters.get("storageos.com/failure-mode").map(String::as_str),
            Some("soft")
        );

        // An empty class name means no class at all (Go took the default).
        let p = pvc(&format!("{CREATED_2025}}}\nspec: {{storageClassName: ''}}\n"));
        assert_eq!(
            check_class(&p, &cs),
            ClassCheck::Use {
                parameters: Labels::new(),
                annotate: None
            }
        );

        // The legacy annotation wins over the spec.
        let p = pvc(&format!(
            "{CREATED_2025}, annotations: {{volume.beta.kubernetes.io/storage-class: fast}}}}\nspec: {{storageClassName: other}}\n"
        ));
        assert!(matches!(check_class(&p, &cs), ClassCheck::Use { annotate: Some(u), .. } if u == "uid-fast"));

        // A missing class, or no default: skip.
        let p = pvc(&format!("{CREATED_2025}}}\nspec: {{storageClassName: gone}}\n"));
        assert!(matches!(check_class(&p, &cs), ClassCheck::Skip(Skip::Missing { .. })));
        let p = pvc(&format!("{CREATED_2025}}}\nspec: {{}}\n"));
        assert_eq!(check_class(&p, &cs[..1]), ClassCheck::Skip(Skip::NoDefault));
    }

    #[test]
    fn the_watch_reacts_to_labels_binding_and_the_class_annotation_of_storageos_pvcs() {
        let base = "metadata: {name: p, namespace: ns, labels: {a: '1'}, annotations: {volume.kubernetes.io/storage-provisioner: csi.storageos.com";
        let unbound = pvc(&format!("{base}}}}}\nspec: {{}}\n"));
        let bound = pvc(&format!("{base}}}}}\nspec: {{volumeName: pv1}}\n"));
        let annotated = pvc(&format!(
            "{base}, storageos.com/storageclass: u}}}}\nspec: {{volumeName: pv1}}\n"
        ));
        let foreign =
            pvc("metadata: {name: p, namespace: ns, annotations: {volume.kubernetes.io/storage-provisioner: other}}\n");
        assert_eq!(unbound.bound_pv(), None);
        assert_eq!(bound.bound_pv(), Some("pv1"));
        let fps: Vec<_> = [&unbound, &bound, &annotated].iter().map(|p| fingerprint(p)).collect();
        assert!(fps.iter().all(Option::is_some));
        assert_ne!(fps[0], fps[1]);
        assert_ne!(fps[1], fps[2]);
        assert_eq!(fingerprint(&foreign), None);
    }
}
