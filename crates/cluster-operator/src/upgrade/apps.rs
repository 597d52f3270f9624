//! Applications that use StorageOS volumes: which Deployments and StatefulSets qualify (pure),
//! and scaling them to zero and back.
//!
//! An application qualifies when its pod template mounts a claim bound to a volume of the
//! StorageOS CSI driver, or a claim (or claim template, or ephemeral volume) whose
//! StorageClass is provisioned by it. The Go operator looked for the provisioner `storageos`,
//! which no v2 volume has, so it never found an application; it also never scaled StatefulSets.
//!
//! Scaling down writes the original replicas on the object (annotation
//! [`REPLICAS_ANNOTATION`]) in the same patch that sets zero, so "carries the annotation"
//! means exactly "scaled down by an upgrade and not yet restored". Restoring is therefore safe
//! to repeat, and an application recorded in status but never scaled is left alone.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, PodSpec};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{Api, DynamicObject, ListParams, Patch};
use kube::core::{ApiResource, Selector};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::patch_params;
use crate::crd::ScaledApp;
use crate::storageos::kube::{CSI_DRIVER, is_storageos_volume, storageos_claims};

/// Annotation holding an application's replicas while an upgrade has it scaled to zero.
pub const REPLICAS_ANNOTATION: &str = "storageos.com/replicas-before-upgrade";
/// `ScaledApp.kind` of a Deployment.
pub const DEPLOYMENT: &str = "Deployment";
/// `ScaledApp.kind` of a StatefulSet.
pub const STATEFUL_SET: &str = "StatefulSet";
const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";
const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

/// The claims, volumes and classes that decide whether an application uses StorageOS.
pub struct Volumes<'a> {
    claims: BTreeMap<(String, String), &'a PersistentVolumeClaim>,
    storageos_pvs: BTreeMap<String, bool>,
    bound: std::collections::BTreeSet<(String, String)>,
    classes: &'a [StorageClass],
}

impl<'a> Volumes<'a> {
    pub fn new(pvcs: &'a [PersistentVolumeClaim], pvs: &'a [PersistentVolume], classes: &'a [StorageClass]) -> Self {
        Self {
            claims: pvcs
                .iter()
                .map(|c| ((c.namespace().unwrap_or_default(), c.name_any()), c))
                .collect(),
            storageos_pvs: pvs.iter().map(|pv| (pv.name_any(), is_storageos_volume(pv))).collect(),
            bound: storageos_claims(pvs),
            classes,
        }
    }

    /// Whether StorageClass `name` (the default class when None; no class when empty) is
    /// provisioned by StorageOS.
    fn class_is_storageos(&self, name: Option<&str>) -> bool {
        let class = match name {
            Some("") => return false,
            Some(n) => self.classes.iter().find(|c| c.name_any() == n),
            None => self.classes.iter().find(|c| {
                c.annotations()
                    .get(DEFAULT_CLASS_ANNOTATION)
                    .is_some_and(|v| v == "true")
            }),
        };
        class.is_some_and(|c| c.provisioner == CSI_DRIVER)
    }

    /// Whether the claim `namespace/name` is (or will be) a StorageOS volume.
    fn claim_is_storageos(&self, namespace: &str, name: &str) -> bool {
        let key = (namespace.to_string(), name.to_string());
        if self.bound.contains(&key) {
            return true;
        }
        let Some(pvc) = self.claims.get(&key) else { return false };
        let spec = pvc.spec.as_ref();
        if let Some(pv) = spec.and_then(|s| s.volume_name.as_deref())
            && self.storageos_pvs.get(pv) == Some(&true)
        {
            return true;
        }
        self.class_is_storageos(claim_class(
            &pvc.metadata,
            spec.and_then(|s| s.storage_class_name.as_deref()),
        ))
    }

    /// Whether a pod made from `spec` in `namespace` mounts a StorageOS volume.
    fn pod_uses_storageos(&self, namespace: &str, spec: Option<&PodSpec>) -> bool {
        spec.and_then(|s| s.volumes.as_ref()).is_some_and(|vols| {
            vols.iter().any(|v| {
                if let Some(c) = &v.persistent_volume_claim {
                    return self.claim_is_storageos(namespace, &c.claim_name);
                }
                v.ephemeral
                    .as_ref()
                    .and_then(|e| e.volume_claim_template.as_ref())
                    .is_some_and(|t| self.class_is_storageos(t.spec.storage_class_name.as_deref()))
            })
        })
    }

    fn statefulset_uses_storageos(&self, sts: &StatefulSet) -> bool {
        let ns = sts.namespace().unwrap_or_default();
        let Some(spec) = sts.spec.as_ref() else { return false };
        if self.pod_uses_storageos(&ns, spec.template.spec.as_ref()) {
            return true;
        }
        spec.volume_claim_templates.iter().flatten().any(|t| {
            let spec = t.spec.as_ref();
            if self.class_is_storageos(claim_class(
                &t.metadata,
                spec.and_then(|s| s.storage_class_name.as_deref()),
            )) {
                return true;
            }
            // Claims already made from the template: `<template>-<statefulset>-<ordinal>`.
            let prefix = format!("{}-{}-", t.name_any(), sts.name_any());
            self.claims.keys().any(|(cns, name)| {
                *cns == ns
                    && name
                        .strip_prefix(&prefix)
                        .is_some_and(|o| !o.is_empty() && o.bytes().all(|b| b.is_ascii_digit()))
                    && self.claim_is_storageos(&ns, name)
            })
        })
    }
}

/// The StorageClass a claim asks for: `spec.storageClassName`, else the beta annotation.
fn claim_class<'m>(meta: &'m ObjectMeta, spec_class: Option<&'m str>) -> Option<&'m str> {
    spec_class.or_else(|| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(BETA_CLASS_ANNOTATION))
            .map(String::as_str)
    })
}

fn app(kind: &str, meta: &ObjectMeta, replicas: Option<i32>) -> ScaledApp {
    ScaledApp {
        kind: kind.into(),
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        // The apiserver defaults replicas to 1.
        replicas: replicas.unwrap_or(1),
    }
}

/// The running (replicas > 0) Deployments and StatefulSets that use StorageOS volumes, with
/// their current replicas, sorted by kind, namespace and name.
pub fn qualifying(deployments: &[Deployment], statefulsets: &[StatefulSet], volumes: &Volumes) -> Vec<ScaledApp> {
    let mut apps: Vec<ScaledApp> = deployments
        .iter()
        .filter(|d| {
            let ns = d.namespace().unwrap_or_default();
            volumes.pod_uses_storageos(&ns, d.spec.as_ref().and_then(|s| s.template.spec.as_ref()))
        })
        .map(|d| app(DEPLOYMENT, &d.metadata, d.spec.as_ref().and_then(|s| s.replicas)))
        .chain(
            statefulsets
                .iter()
                .filter(|s| volumes.statefulset_uses_storageos(s))
                .map(|s| app(STATEFUL_SET, &s.metadata, s.spec.as_ref().and_then(|s| s.replicas))),
        )
        .filter(|a| a.replicas > 0)
        .collect();
    apps.sort_by(|a, b| (&a.kind, &a.namespace, &a.name).cmp(&(&b.kind, &b.namespace, &b.name)));
    apps
}

/// What the upgrade needs to know about a recorded application right now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveApp {
    /// `spec.replicas` (1 when unset).
    pub replicas: i32,
    /// The value of [`REPLICAS_ANNOTATION`]: set while scaled down by an upgrade.
    pub scaled_down_from: Option<String>,
    /// Pods its selector still matches (only counted while scaling down).
    pub pods: usize,
}

fn api(client: &Client, app: &ScaledApp) -> Api<DynamicObject> {
    let ar = if app.kind == STATEFUL_SET {
        ApiResource::erase::<StatefulSet>(&())
    } else {
        ApiResource::erase::<Deployment>(&())
    };
    Api::namespaced_with(client.clone(), &app.namespace, &ar)
}

/// Reads a recorded application; None when it no longer exists. With `count_pods`, also
/// counts the pods its selector matches (any phase but Succeeded/Failed, terminating or not).
pub async fn observe(client: &Client, app: &ScaledApp, count_pods: bool) -> Result<Option<LiveApp>, kube::Error> {
    let Some(obj) = api(client, app).get_opt(&app.name).await? else {
        return Ok(None);
    };
    let spec = &obj.data["spec"];
    let replicas = spec["replicas"]
        .as_i64()
        .and_then(|r| i32::try_from(r).ok())
        .unwrap_or(1);
    let mut live = LiveApp {
        replicas,
        scaled_down_from: obj.annotations().get(REPLICAS_ANNOTATION).cloned(),
        pods: 0,
    };
    if count_pods {
        let selector = serde_json::from_value::<LabelSelector>(spec["selector"].clone())
            .ok()
            .and_then(|s| Selector::try_from(s).ok())
            .filter(|s| !s.selects_all());
        if let Some(selector) = selector {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &app.namespace);
            // Finished pods hold no volume.
            live.pods = pods
                .list(&ListParams::default().labels_from(&selector))
                .await?
                .items
                .iter()
                .filter(|p| {
                    !matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded" | "Failed")
                    )
                })
                .count();
        }
    }
    Ok(Some(live))
}

/// Scales `app` to zero, writing its recorded replicas on it in the same patch.
pub async fn scale_down(client: &Client, app: &ScaledApp) -> Result<(), kube::Error> {
    let patch = json!({
        "metadata": {"annotations": {REPLICAS_ANNOTATION: app.replicas.to_string()}},
        "spec": {"replicas": 0}
    });
    ignore_missing(
        api(client, app)
            .patch(&app.name, &patch_params(), &Patch::Merge(&patch))
            .await,
    )
}

/// Gives `app` its recorded replicas back and removes the annotation.
pub async fn restore(client: &Client, app: &ScaledApp) -> Result<(), kube::Error> {
    let patch = json!({
        "metadata": {"annotations": {REPLICAS_ANNOTATION: null}},
        "spec": {"replicas": app.replicas}
    });
    ignore_missing(
        api(client, app)
            .patch(&app.name, &patch_params(), &Patch::Merge(&patch))
            .await,
    )
}

/// A deleted application needs no scaling.
fn ignore_missing<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// `Kind namespace/name` of an application, for messages.
pub fn describe(app: &ScaledApp) -> String {
    format!("{} {}/{}", app.kind, app.namespace, app.name)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn yaml<T: serde::de::DeserializeOwned>(s: &str) -> Vec<T> {
        serde_yaml::Deserializer::from_str(s)
            .map(|d| T::deserialize(d).unwrap())
            .collect()
    }

    const CLASSES: &str = r#"
metadata: {name: fast}
provisioner: csi.storageos.com
---
metadata: {name: standard, annotations: {storageclass.kubernetes.io/is-default-class: "true"}}
provisioner: other.csi
"#;

    const PVS: &str = r#"
metadata: {name: pv-sos}
spec: {csi: {driver: csi.storageos.com, volumeHandle: v1}, claimRef: {namespace: app, name: bound}}
---
metadata: {name: pv-sos-unclaimed}
spec: {csi: {driver: csi.storageos.com, volumeHandle: v2}}
---
metadata: {name: pv-other}
spec: {csi: {driver: other.csi, volumeHandle: v3}, claimRef: {namespace: app, name: other}}
"#;

    const PVCS: &str = r#"
metadata: {name: bound, namespace: app}
spec: {storageClassName: "", volumeName: pv-sos}
---
metadata: {name: by-volume-name, namespace: app}
spec: {storageClassName: "", volumeName: pv-sos-unclaimed}
---
metadata: {name: by-class, namespace: app}
spec: {storageClassName: fast}
---
metadata: {name: by-beta-annotation, namespace: app, annotations: {volume.beta.kubernetes.io/storage-class: fast}}
spec: {}
---
metadata: {name: other, namespace: app}
spec: {storageClassName: standard, volumeName: pv-other}
---
metadata: {name: data-legacy-0, namespace: app}
spec: {storageClassName: "", volumeName: pv-sos-unclaimed}
"#;

    fn deployment(name: &str, replicas: Option<i32>, volumes: &str) -> String {
        let replicas = replicas.map(|r| format!("replicas: {r}, ")).unwrap_or_default();
        format!(
            "metadata: {{name: {name}, namespace: app}}\nspec: {{{replicas}selector: {{matchLabels: {{a: {name}}}}}, template: {{metadata: {{labels: {{a: {name}}}}}, spec: {{containers: [], volumes: {volumes}}}}}}}\n"
        )
    }

    fn pvc_vol(claim: &str) -> String {
        format!("[{{name: d, persistentVolumeClaim: {{claimName: {claim}}}}}]")
    }

    #[test]
    fn apps_on_storageos_claims_qualify_and_others_do_not() {
        let (classes, pvs, pvcs): (Vec<StorageClass>, Vec<PersistentVolume>, Vec<PersistentVolumeClaim>) =
            (yaml(CLASSES), yaml(PVS), yaml(PVCS));
        let v = Volumes::new(&pvcs, &pvs, &classes);
        let docs = [
            deployment("bound", Some(3), &pvc_vol("bound")),
            deployment("by-volume-name", Some(1), &pvc_vol("by-volume-name")),
            deployment("by-class", None, &pvc_vol("by-class")),
            deployment("by-beta", Some(2), &pvc_vol("by-beta-annotation")),
            deployment(
                "ephemeral",
                Some(1),
                "[{name: e, ephemeral: {volumeClaimTemplate: {spec: {storageClassName: fast}}}}]",
            ),
            // Not StorageOS: another driver, a missing claim, no volumes, already at zero.
            deployment("other", Some(4), &pvc_vol("other")),
            deployment("missing-claim", Some(1), &pvc_vol("nope")),
            deployment("empty-dir", Some(1), "[{name: e, emptyDir: {}}]"),
            deployment("at-zero", Some(0), &pvc_vol("bound")),
            deployment(
                "ephemeral-default-class",
                Some(1),
                "[{name: e, ephemeral: {volumeClaimTemplate: {spec: {}}}}]",
            ),
        ]
        .join("---\n");
        let deployments: Vec<Deployment> = yaml(&docs);
        let got: Vec<(String, i32)> = qualifying(&deployments, &[], &v)
            .into_iter()
            .map(|a| (a.name, a.replicas))
            .collect();
        assert_eq!(
            got,
            [
                ("bound".to_string(), 3),
                ("by-beta".to_string(), 2),
                ("by-class".to_string(), 1),
                ("by-volume-name".to_string(), 1),
                ("ephemeral".to_string(), 1),
            ]
        );
    }

    #[test]
    fn statefulsets_qualify_by_claim_template_class_or_existing_claims() {
        let (classes, pvs, pvcs): (Vec<StorageClass>, Vec<PersistentVolume>, Vec<PersistentVolumeClaim>) =
            (yaml(CLASSES), yaml(PVS), yaml(PVCS));
        let v = Volumes::new(&pvcs, &pvs, &classes);
        let sts = |name: &str, templates: &str| {
            format!(
                "metadata: {{name: {name}, namespace: app}}\nspec: {{replicas: 2, serviceName: s, selector: {{matchLabels: {{a: b}}}}, template: {{spec: {{containers: []}}}}, volumeClaimTemplates: {templates}}}\n"
            )
        };
        let docs = [
            sts("db", "[{metadata: {name: data}, spec: {storageClassName: fast}}]"),
            // Claims made earlier from the template are bound to StorageOS volumes.
            sts("legacy", "[{metadata: {name: data}, spec: {storageClassName: \"\"}}]"),
            // The default class is not StorageOS's.
            sts("plain", "[{metadata: {name: data}, spec: {}}]"),
        ]
        .join("---\n");
        let statefulsets: Vec<StatefulSet> = yaml(&docs);
        let got: Vec<ScaledApp> = qualifying(&[], &statefulsets, &v);
        assert_eq!(
            got.iter().map(describe).collect::<Vec<_>>(),
            ["StatefulSet app/db", "StatefulSet app/legacy"]
        );
        assert!(got.iter().all(|a| a.replicas == 2));

        // With StorageOS as the default class, a template without a class qualifies too.
        let classes: Vec<StorageClass> = yaml(
            "metadata: {name: sos, annotations: {storageclass.kubernetes.io/is-default-class: \"true\"}}\nprovisioner: csi.storageos.com\n",
        );
        let v = Volumes::new(&pvcs, &pvs, &classes);
        assert_eq!(qualifying(&[], &statefulsets[2..], &v).len(), 1);
    }
}
