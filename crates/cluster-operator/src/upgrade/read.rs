//! The reads behind "safe to start" and the health gate: StorageOS (nodes and every volume)
//! and the drain guards. A StorageOS read that fails anywhere is [`StorageOSRead::Failed`]
//! ("cannot tell"), never a partial picture.

use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::drain;
use super::health::StorageOSRead;
use super::{Context, Error};
use crate::crd::StorageOSCluster;
use crate::render;

/// Every StorageOS node and volume of `cluster`, with the credentials in its API Secret.
pub async fn storageos(cluster: &StorageOSCluster, ctx: &Context) -> StorageOSRead {
    let failed = |why: String| StorageOSRead::Failed(why);
    let Some((clients, endpoint)) = &ctx.storageos else {
        return failed("this operator was started without StorageOS access".into());
    };
    let (ns, name) = (&cluster.spec.secret_ref_namespace, &cluster.spec.secret_ref_name);
    // The cluster controller follows no reference out of the trusted namespaces; nor does this.
    if !ctx.trusted.allows(ns) {
        return failed(format!(
            "the StorageOS API Secret {ns}/{name} is in a namespace that is not trusted"
        ));
    }
    let secret = match Api::<Secret>::namespaced(ctx.client.clone(), ns).get_opt(name).await {
        Ok(Some(s)) => s,
        Ok(None) => return failed(format!("the StorageOS API Secret {ns}/{name} does not exist")),
        Err(e) => return failed(format!("the StorageOS API Secret {ns}/{name} cannot be read: {e}")),
    };
    let endpoint = endpoint
        .clone()
        .unwrap_or_else(|| render::resolve(&cluster.spec).api_endpoint());
    let client = match clients.for_secret(&endpoint, &secret) {
        Ok(c) => c,
        Err(e) => return failed(format!("no StorageOS API client: {e}")),
    };
    let nodes = match client.list_nodes().await {
        Ok(n) => n,
        Err(e) => return failed(format!("the StorageOS nodes cannot be read: {e}")),
    };
    let namespaces = match client.list_namespaces().await {
        Ok(n) => n,
        Err(e) => return failed(format!("the StorageOS namespaces cannot be read: {e}")),
    };
    let mut volumes = Vec::new();
    for n in &namespaces {
        match client.list_volumes(&n.id).await {
            Ok(v) => volumes.extend(v),
            Err(e) => {
                return failed(format!(
                    "the volumes of StorageOS namespace {} cannot be read: {e}",
                    n.name
                ));
            }
        }
    }
    StorageOSRead::Read {
        nodes,
        namespaces,
        volumes,
    }
}

/// The cordoned nodes a drain guard's PodDisruptionBudget in `namespace` (the api-manager's)
/// names. A failed read is an error (the upgrade retries), never "no drain".
pub async fn blocked_drains(namespace: &str, ctx: &Context) -> Result<Vec<String>, Error> {
    let pdbs = Api::<PodDisruptionBudget>::namespaced(ctx.client.clone(), namespace)
        .list(&ListParams::default().labels(&drain::guard_selector()))
        .await?
        .items;
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let mut blocked = Vec::new();
    for name in drain::guarded_nodes(&pdbs) {
        // A guard for a node that is gone guards nothing.
        if let Some(node) = nodes.get_opt(&name).await?
            && drain::cordoned(&node)
        {
            blocked.push(node.name_any());
        }
    }
    Ok(blocked)
}
