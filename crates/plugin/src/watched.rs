//! The namespaces the installed operator watches, as its Deployment says (`WATCH_NAMESPACES`):
//! what the plugin may treat as the operator's. Objects of the StorageOS kinds elsewhere are a
//! tenant's, never the operator's, and the plugin leaves them alone.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use kube::{Client, Resource, ResourceExt};

use crate::runtime::kube::trusted::TrustedNamespaces;

/// The variable the operator reads its watched namespaces from.
pub const ENV: &str = "WATCH_NAMESPACES";

/// The watched namespaces of the operator installed in `namespace`: its Deployment's
/// `WATCH_NAMESPACES`, or `namespace` alone (the operator's default, and all that is safe to
/// assume when the Deployment is gone or unreadable).
pub async fn of_install(client: &Client, namespace: &str) -> TrustedNamespaces {
    let deployment = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get_opt(storageos_cluster_operator::install::NAME)
        .await
        .ok()
        .flatten();
    deployment
        .as_ref()
        .and_then(from_deployment)
        .unwrap_or_else(|| TrustedNamespaces::only(namespace))
}

/// The `WATCH_NAMESPACES` value of the operator container, if set and valid (pure, for tests).
pub fn from_deployment(d: &Deployment) -> Option<TrustedNamespaces> {
    let containers = &d.spec.as_ref()?.template.spec.as_ref()?.containers;
    let env = containers.first()?.env.as_ref()?;
    let value = env.iter().find(|e| e.name == ENV)?.value.as_deref()?;
    value.parse().ok()
}

/// `objects` split into those in `watched` namespaces and the names (`namespace/name`) of the
/// rest.
pub fn split<K: Resource>(objects: Vec<K>, watched: &TrustedNamespaces) -> (Vec<K>, Vec<String>) {
    let (ours, others): (Vec<K>, Vec<K>) = objects
        .into_iter()
        .partition(|o| watched.allows(&o.namespace().unwrap_or_default()));
    let names = others
        .iter()
        .map(|o| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any()))
        .collect();
    (ours, names)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::crd::Job;

    #[test]
    fn the_deployments_variable_names_the_watched_namespaces() {
        let d: Deployment = serde_json::from_value(serde_json::json!({
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "operator",
                "env": [{"name": "WATCH_NAMESPACES", "value": "storageos-operator,default"}]}]}}}
        }))
        .unwrap();
        let watched = from_deployment(&d).unwrap();
        assert!(watched.allows("default") && !watched.allows("team-a"));
        let plain: Deployment = serde_json::from_value(serde_json::json!({
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "operator"}]}}}
        }))
        .unwrap();
        assert_eq!(from_deployment(&plain), None);
    }

    #[test]
    fn objects_outside_the_watched_namespaces_are_named_not_kept() {
        let job = |ns: &str| -> Job {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "storageos.com/v1", "kind": "Job",
                "metadata": {"name": "j", "namespace": ns},
                "spec": {"image": "i", "args": [], "mountPath": "/m", "hostPath": "/var/lib/storageos", "completionWord": "w"}
            }))
            .unwrap()
        };
        let (ours, others) = split(
            vec![job("storageos-operator"), job("team-a")],
            &TrustedNamespaces::only("storageos-operator"),
        );
        assert_eq!(ours.len(), 1);
        assert_eq!(others, vec!["team-a/j".to_string()]);
    }
}
