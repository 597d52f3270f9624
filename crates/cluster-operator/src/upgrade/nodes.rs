//! The StorageOS node DaemonSet during an upgrade: which image its template and its pods run,
//! and whether every node is back and ready (pure).
//!
//! The cluster reconciler is paused for the whole upgrade, so the upgrade itself sets the node
//! container's image on the DaemonSet and deletes every old pod at once (an offline upgrade;
//! the DaemonSet keeps its `OnDelete` strategy, which the Go operator switched permanently to
//! RollingUpdate).

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::{Resource, ResourceExt};

use crate::runtime::kube::controller::is_controlled_by;

/// Name of the node DaemonSet (templates/node-daemonset.yaml.hbs).
pub const NODE_DAEMONSET: &str = "storageos-daemonset";
/// Name of the StorageOS container in it.
pub const NODE_CONTAINER: &str = "storageos";

/// The image of the node container in `spec`.
pub fn node_image(spec: Option<&PodSpec>) -> Option<&str> {
    spec?
        .containers
        .iter()
        .find(|c| c.name == NODE_CONTAINER)?
        .image
        .as_deref()
}

/// One node pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePod {
    pub name: String,
    /// The Kubernetes node it runs on (the StorageOS node of that name).
    pub node_name: String,
    /// Image of its node container.
    pub image: Option<String>,
    /// Its Ready condition is True.
    pub ready: bool,
    /// It is being deleted.
    pub terminating: bool,
}

/// The node DaemonSet and its pods.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeView {
    /// Namespace of the DaemonSet.
    pub namespace: String,
    /// The DaemonSet's pod template spec (the puller is placed like it).
    pub template: PodSpec,
    /// Image of the node container in the template.
    pub template_image: Option<String>,
    /// The DaemonSet controller has seen the current template.
    pub current: bool,
    /// Pods the DaemonSet wants.
    pub desired: i32,
    /// Pods the DaemonSet owns.
    pub pods: Vec<NodePod>,
}

impl NodeView {
    /// Names of live pods not on `image`: they are deleted so the DaemonSet recreates them.
    pub fn outdated(&self, image: &str) -> Vec<String> {
        self.pods
            .iter()
            .filter(|p| !p.terminating && p.image.as_deref() != Some(image))
            .map(|p| p.name.clone())
            .collect()
    }

    /// Pods on `image` that are ready and not being deleted.
    pub fn ready_on(&self, image: &str) -> usize {
        self.pods
            .iter()
            .filter(|p| !p.terminating && p.ready && p.image.as_deref() == Some(image))
            .count()
    }

    /// Every wanted node runs `image` and is ready, and no old pod remains.
    pub fn upgraded(&self, image: &str) -> bool {
        self.current
            && self.template_image.as_deref() == Some(image)
            && self
                .pods
                .iter()
                .all(|p| !p.terminating && p.image.as_deref() == Some(image))
            && usize::try_from(self.desired).is_ok_and(|d| d == self.ready_on(image) && d == self.pods.len())
    }
}

/// The view of the node DaemonSet `ds` and the pods its selector matched (pure); pods that
/// another controller owns are ignored.
pub fn view(ds: &DaemonSet, pods: &[Pod]) -> NodeView {
    let uid = ds.meta().uid.clone();
    let template = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .unwrap_or_default();
    let status = ds.status.as_ref();
    NodeView {
        namespace: ds.namespace().unwrap_or_default(),
        template_image: node_image(Some(&template)).map(str::to_string),
        template,
        current: status.and_then(|s| s.observed_generation).unwrap_or(0) >= ds.meta().generation.unwrap_or(0),
        desired: status.map_or(0, |s| s.desired_number_scheduled),
        pods: pods
            .iter()
            .filter(|p| is_controlled_by(*p, uid.as_ref()))
            .map(|p| NodePod {
                name: p.name_any(),
                node_name: p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default(),
                image: node_image(p.spec.as_ref()).map(str::to_string),
                ready: p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
                terminating: p.meta().deletion_timestamp.is_some(),
            })
            .collect(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ds(image: &str, generation: i64, observed: i64, desired: i32) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": NODE_DAEMONSET, "namespace": "storageos", "uid": "ds-uid", "generation": generation},
            "spec": {"selector": {}, "template": {"spec": {"containers": [
                {"name": "csi-driver-registrar", "image": "registrar:1"},
                {"name": NODE_CONTAINER, "image": image}]}}},
            "status": {"observedGeneration": observed, "desiredNumberScheduled": desired,
                       "currentNumberScheduled": desired, "numberMisscheduled": 0, "numberReady": 0}
        }))
        .unwrap()
    }

    fn pod(name: &str, image: &str, ready: bool, deleting: bool, owner: &str) -> Pod {
        let mut meta = json!({"name": name, "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
            "name": NODE_DAEMONSET, "uid": owner, "controller": true}]});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({"metadata": meta,
            "spec": {"containers": [{"name": NODE_CONTAINER, "image": image}]},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}}))
        .unwrap()
    }

    #[test]
    fn upgraded_only_when_every_wanted_pod_is_new_and_ready() {
        let new = "node:v2";
        let v = view(
            &ds(new, 2, 2, 2),
            &[
                pod("a", new, true, false, "ds-uid"),
                pod("b", new, true, false, "ds-uid"),
            ],
        );
        assert!(v.upgraded(new));
        assert_eq!(v.template_image.as_deref(), Some(new));
        assert_eq!(v.namespace, "storageos");

        // An old pod left, a pod not ready, an old pod terminating, a node missing, a stale status.
        let cases = [
            view(
                &ds(new, 2, 2, 2),
                &[
                    pod("a", new, true, false, "ds-uid"),
                    pod("b", "node:v1", true, false, "ds-uid"),
                ],
            ),
            view(
                &ds(new, 2, 2, 2),
                &[
                    pod("a", new, true, false, "ds-uid"),
                    pod("b", new, false, false, "ds-uid"),
                ],
            ),
            view(
                &ds(new, 2, 2, 2),
                &[
                    pod("a", new, true, false, "ds-uid"),
                    pod("b", new, true, false, "ds-uid"),
                    pod("c", "node:v1", false, true, "ds-uid"),
                ],
            ),
            view(&ds(new, 2, 2, 2), &[pod("a", new, true, false, "ds-uid")]),
            view(
                &ds(new, 3, 2, 2),
                &[
                    pod("a", new, true, false, "ds-uid"),
                    pod("b", new, true, false, "ds-uid"),
                ],
            ),
        ];
        for (i, v) in cases.iter().enumerate() {
            assert!(!v.upgraded(new), "case {i}");
        }
    }

    #[test]
    fn the_rendered_node_daemonset_has_the_names_the_upgrade_patches() {
        let cluster = serde_json::from_value(json!({"apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": "c", "namespace": "storageos"},
            "spec": {"secretRefName": "s", "secretRefNamespace": "storageos",
                     "images": {"nodeContainer": "storageos/node:v2.9.0"}}}))
        .unwrap();
        let objects = crate::render::build(&crate::render::Inputs::new(cluster, "op:1")).unwrap();
        let ds: DaemonSet = objects
            .iter()
            .map(|o| o.to_value().unwrap())
            .find(|v| v["kind"] == "DaemonSet" && v["metadata"]["name"] == NODE_DAEMONSET)
            .map(|v| serde_json::from_value(v).unwrap())
            .unwrap();
        let spec = ds.spec.unwrap().template.spec;
        assert_eq!(node_image(spec.as_ref()), Some("storageos/node:v2.9.0"));
    }

    #[test]
    fn outdated_pods_are_the_live_ones_on_another_image_of_this_daemonset() {
        let v = view(
            &ds("node:v2", 2, 2, 3),
            &[
                pod("old", "node:v1", true, false, "ds-uid"),
                pod("going", "node:v1", true, true, "ds-uid"),
                pod("new", "node:v2", true, false, "ds-uid"),
                pod("foreign", "node:v1", true, false, "other-uid"),
            ],
        );
        assert_eq!(v.outdated("node:v2"), ["old"]);
        assert_eq!(v.ready_on("node:v2"), 1);
        assert_eq!(v.pods.len(), 3);
    }
}
