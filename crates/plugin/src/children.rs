//! The live children of a cluster, as the bundle collects them and the redactor learns their
//! Secrets from (a file of its own, so neither imports the other).

use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::discovery::pinned_kind;
use serde_json::Value;

use crate::cluster::ownership::{children_selector, owned_kinds};
use crate::crd::StorageOSCluster;

/// The live children of a cluster (every kind it may own, by its label selector).
pub async fn children(client: &Client, c: &StorageOSCluster) -> Vec<Value> {
    let sel = children_selector(c);
    let mut out = Vec::new();
    for kind in owned_kinds() {
        let (group, version) = kind.api_version.split_once('/').unwrap_or(("", kind.api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind.kind);
        // A kind the cluster does not serve (ServiceMonitor without prometheus-operator).
        let Ok((ar, _)) = pinned_kind(client, &gvk).await else {
            continue;
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        if let Ok(list) = api.list(&ListParams::default().labels(&sel)).await {
            for mut o in list.items {
                o.types = Some(kube::core::TypeMeta {
                    api_version: kind.api_version.to_string(),
                    kind: kind.kind.to_string(),
                });
                if let Ok(v) = serde_json::to_value(&o) {
                    out.push(v);
                }
            }
        }
    }
    out
}
