//! Puts the caller gate (`rbac::trust`) in place when the operator starts, whichever way it was
//! installed (manifests, Helm, kustomize, the plugin or OLM, whose bundle cannot carry an
//! admission policy). The gate's objects are owned by the StorageOSCluster CRD: they guard its
//! kinds, and go with it when the CRDs are removed.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::cluster::ownership::FIELD_MANAGER;
use crate::rbac::trust;
use crate::runtime::kube::apply::ObjectKey;

/// The CRD that owns the gate.
pub const OWNER_CRD: &str = "storageosclusters.storageos.com";

/// How long to wait between attempts while the gate cannot be applied.
const RETRY: Duration = Duration::from_secs(30);

/// Why the gate could not be put in place.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "cannot read CustomResourceDefinition {OWNER_CRD}: {0}; install the CRDs (deploy/operator.yaml or crds/) first"
    )]
    Crd(#[source] kube::Error),
    #[error(
        "cannot apply {what}: {source}; until it is in place any editor allowed to create StorageOS kinds is trusted (check the operator's ClusterRole)"
    )]
    Apply {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("the caller gate's object {0} is malformed; this is a bug, please report it")]
    Malformed(String),
}

/// The gate's objects owned by the CRD `crd_uid` (pure, for tests).
pub fn owned_objects(crd_uid: &str) -> Vec<Value> {
    let owner = json!([{
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "name": OWNER_CRD, "uid": crd_uid
    }]);
    trust::objects()
        .into_iter()
        .map(|mut o| {
            o["metadata"]["ownerReferences"] = owner.clone();
            o
        })
        .collect()
}

/// Applies the gate once (server-side apply, forced: these objects are the operator's).
pub async fn ensure(client: &Client) -> Result<(), Error> {
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get(OWNER_CRD)
        .await
        .map_err(Error::Crd)?;
    let uid = crd.uid().unwrap_or_default();
    for object in owned_objects(&uid) {
        let key = ObjectKey::of(&object).map_err(|_| Error::Malformed(object["kind"].to_string()))?;
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &key.api_resource());
        api.patch(
            &key.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await
        .map_err(|source| Error::Apply {
            what: key.to_string(),
            source,
        })?;
    }
    Ok(())
}

/// [`ensure`], tried again every [`RETRY`] until it succeeds.
pub async fn keep_trying(client: Client) {
    loop {
        match ensure(&client).await {
            Ok(()) => {
                tracing::info!(policy = trust::POLICY, "the caller gate is in place");
                return;
            }
            Err(e) => tracing::error!(error = %e, retry_in = ?RETRY, "the caller gate is not in place"),
        }
        tokio::time::sleep(RETRY).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_object_of_the_gate_is_owned_by_the_cluster_crd() {
        let objects = owned_objects("u-1");
        assert_eq!(objects.len(), 3);
        for o in &objects {
            assert_eq!(o["metadata"]["ownerReferences"][0]["name"], OWNER_CRD);
            assert_eq!(o["metadata"]["ownerReferences"][0]["uid"], "u-1");
        }
    }
}
