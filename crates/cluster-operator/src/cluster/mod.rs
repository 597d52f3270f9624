//! The StorageOSCluster reconciler: observe → build (render) → apply → status.
//!
//! Watches the clusters, every child it creates (metadata only, by label), the node DaemonSet's
//! pods and the Nodes (only changes that affect membership), so drift is repaired in seconds.

pub mod admission;
pub mod adopt;
pub mod api_clients;
pub mod context;
pub mod error;
pub mod finalize;
pub mod kv_backend;
pub mod metrics;
pub mod node_cache;
pub mod ownership;
pub mod prepare;
pub mod reconcile;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod reconcile_tests;
pub mod rollout;
pub mod select;
pub mod settings_push;
pub mod status;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod status_tests;
pub mod status_write;

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use futures::TryStreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

pub use crate::crd::{FORCE_DELETE_ANNOTATION, NODE_POD_SELECTOR, PAUSED_BY_ANNOTATION};
pub use context::{CONTROLLER, Context, NodeCaches, OperatorConfig};
pub use error::Error;
pub use ownership::FINALIZER;

use crate::crd::StorageOSCluster;
use crate::render::labels::{ACTED_MARK_SELECTOR, CLUSTER_LABEL, CLUSTER_NAMESPACE_LABEL, MANAGED_BY, label_value};
use crate::runtime::kube::controller::{self, ControllerKit, Reconciler};
use crate::runtime::kube::trusted::TrustedNamespaces;
use crate::runtime::kube::view_store;
use node_cache::{ListedNode, ListedNodePod};

/// The cluster a child belongs to, from its labels. A long cluster name is hashed in the label
/// (see [`label_value`]), so the name is looked up among the known clusters.
fn owner_of<K: Resource>(
    store: &Store<StorageOSCluster>,
    child: PartialObjectMeta<K>,
) -> Option<ObjectRef<StorageOSCluster>> {
    let labels = child.labels();
    let (value, ns) = (labels.get(CLUSTER_LABEL)?, labels.get(CLUSTER_NAMESPACE_LABEL)?);
    let known = store
        .state()
        .iter()
        .find(|c| c.namespace().as_ref() == Some(ns) && label_value(&c.name_any()) == *value)
        .map(|c| ObjectRef::from_obj(c.as_ref()));
    Some(known.unwrap_or_else(|| ObjectRef::new(value).within(ns)))
}

fn all_clusters(store: &Store<StorageOSCluster>) -> Vec<ObjectRef<StorageOSCluster>> {
    store.state().iter().map(|c| ObjectRef::from_obj(c.as_ref())).collect()
}

impl Reconciler for Context {
    type Object = StorageOSCluster;
    type Error = Error;
    const NAME: &'static str = CONTROLLER;

    fn kit(&self) -> &ControllerKit {
        &self.kit
    }

    fn trusted(&self) -> &TrustedNamespaces {
        &self.trusted
    }

    async fn reconcile(cluster: Arc<StorageOSCluster>, ctx: Arc<Self>) -> Result<Action, Error> {
        reconcile::reconcile(cluster, ctx).await
    }

    async fn untrusted(cluster: Arc<StorageOSCluster>, ctx: Arc<Self>, refusal: String) -> Result<Action, Error> {
        reconcile::untrusted(cluster, ctx, refusal).await
    }

    fn forget(&self, live: &[Arc<StorageOSCluster>]) {
        let uids: HashSet<String> = live.iter().filter_map(|c| c.uid()).collect();
        self.retain_clusters(|uid| uids.contains(uid));
    }
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let client = ctx.client.clone();
    // Only the watched namespaces, and elsewhere only clusters the operator once finalized (so
    // one deleted after its namespace stopped being watched is still cleaned up).
    let controller = controller::controller_in::<StorageOSCluster>(&client, &ctx.trusted, Some(ACTED_MARK_SELECTOR));
    let store = controller.store();
    let managed = crate::runtime::kube::cache::every().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
    // The children watches also tell the apply step and pruning what exists, so an idle pass
    // reads no child from the apiserver (it still lists the clusters, reads the Secrets it
    // copies and asks StorageOS for its nodes and settings).
    let live = ctx.applier.live();

    macro_rules! children {
        ($controller:expr, $($kind:ty),+) => {
            $controller$(.watches_stream(
                watcher(Api::<PartialObjectMeta<$kind>>::all(client.clone()), managed.clone())
                    .inspect_ok({
                        let live = live.clone();
                        move |event| live.observe(event)
                    })
                    .default_backoff()
                    .touched_objects(),
                {
                    let store = store.clone();
                    move |child| owner_of::<$kind>(&store, child)
                },
            ))+
        };
    }
    let controller = children!(
        controller,
        DaemonSet,
        Deployment,
        StatefulSet,
        Service,
        ConfigMap,
        Secret,
        ServiceAccount,
        ClusterRole,
        ClusterRoleBinding,
        Role,
        RoleBinding,
        StorageClass,
        CSIDriver,
        Ingress,
        MutatingWebhookConfiguration
    );
    let node_store = store.clone();
    let pod_store = store.clone();
    // Nodes and node pods are cached for the status step as views of what it reads
    // (`node_cache`); a change the views do not show (a heartbeat, a pod's restart count)
    // triggers nothing.
    let caches = NodeCaches::default();
    let _ = ctx.caches.set(caches.clone());
    let nodes = view_store::reflect_views(
        watcher(
            Api::<ListedNode>::all(client.clone()),
            crate::runtime::kube::cache::every(),
        )
        .default_backoff(),
        caches.nodes,
    );
    let node_pods = view_store::reflect_views(
        watcher(
            Api::<ListedNodePod>::all(client.clone()),
            crate::runtime::kube::cache::every().labels(NODE_POD_SELECTOR),
        )
        .default_backoff(),
        caches.node_pods,
    );

    let controller = controller
        .watches_stream(nodes, move |_| all_clusters(&node_store))
        .watches_stream(node_pods, move |listed: ListedNodePod| {
            let cr = listed.view.labels.get("storageos_cr").map(str::to_owned);
            all_clusters(&pod_store)
                .into_iter()
                .filter(move |r| Some(&label_value(&r.name)) == cr.as_ref())
        });
    controller::run(controller, ctx, shutdown).await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::runtime::kube::metrics::ReconcileMetrics;

    /// A context whose client talks to `client` (a mock or nothing at all).
    pub(crate) fn context(client: kube::Client) -> Context {
        let config = OperatorConfig {
            operator_image: "op:1".into(),
            default_images: Default::default(),
            node_env: Default::default(),
            storageos_endpoint: None,
            storageos_timeouts: (Duration::from_secs(1), Duration::from_secs(1)),
            operator_namespace: "storageos-operator".into(),
            kubernetes_version: None,
        };
        let registry = &mut prometheus_client::registry::Registry::default();
        Context::new(client, config, ReconcileMetrics::register(registry), None)
    }

    pub(crate) fn cluster(ns: &str, name: &str) -> StorageOSCluster {
        serde_json::from_value(json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}"), "generation": 1},
            "spec": {"secretRefName": "s", "secretRefNamespace": ns}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_deleted_cluster_leaves_no_backoff_for_a_same_named_replacement() {
        let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        let ctx = context(client);
        let (kept, gone) = (cluster("ns", "kept"), cluster("ns", "gone"));
        let refused = Error::ApplyFailed {
            failed: 1,
            message: "refused".into(),
        };
        for _ in 0..4 {
            ctx.kit.retry_after_error(&kept, &refused);
            ctx.kit.retry_after_error(&gone, &refused);
        }
        ctx.set_go_leftovers_checked(("ns-gone".into(), Some(1)));
        controller::forget_deleted(&ctx, &[Arc::new(kept.clone())]);
        let first = Action::requeue(controller::backoff_delay(1));
        assert_eq!(
            ctx.kit.retry_after_error(&gone, &refused),
            first,
            "backoff of the deleted cluster kept"
        );
        assert_ne!(
            ctx.kit.retry_after_error(&kept, &refused),
            first,
            "backoff of a live cluster lost"
        );
        assert!(!ctx.go_leftovers_checked(&("ns-gone".into(), Some(1))));
    }
}
