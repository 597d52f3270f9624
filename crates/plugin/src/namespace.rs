//! The namespaces the plugin installs into (the operator's, `-n`, and the evaluation etcd's,
//! `--etcd-namespace`) are its own only when it made them. It creates one only when it is
//! absent, and then marks it ([`CREATED_BY`]); it never changes an existing namespace's labels
//! (its Pod Security level is its admin's choice); `uninstall` deletes only a namespace that
//! carries the mark, so a shared namespace and everything else in it stay. The operator's
//! namespace may not be one Kubernetes itself uses: its Pod Security level would refuse
//! StorageOS's, the CNI's and kube-proxy's pods there, and `uninstall` would remove the operator
//! from beside them.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::FIELD_MANAGER;
use super::apply::Outcome;

/// Label the plugin puts on a namespace it created (value [`FIELD_MANAGER`]).
pub const CREATED_BY: &str = "storageos.com/created-by";

/// Namespaces Kubernetes uses itself: never the operator's.
pub const RESERVED: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Why a namespace could not be used or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "refusing to install the operator into namespace {0}: Kubernetes uses it, and the operator's namespace enforces the restricted Pod Security level. Give the operator a namespace of its own with -n (the default, storageos-operator, is created for it); StorageOS's own pods still run where the cluster's spec.namespace says"
    )]
    Reserved(String),
    #[error("the install's Namespace object is not valid: {0}")]
    Object(String),
    #[error(
        "cannot {verb} namespace {name}: {source}; check --kubeconfig/--context and that you may {verb} namespaces"
    )]
    Api {
        verb: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Refuses a namespace of [`RESERVED`] as the operator's.
pub fn refuse_reserved(namespace: &str) -> Result<(), Error> {
    if RESERVED.contains(&namespace) {
        return Err(Error::Reserved(namespace.to_string()));
    }
    Ok(())
}

/// Whether the plugin created `ns` (it carries [`CREATED_BY`]).
pub fn created_by_us(ns: &Namespace) -> bool {
    ns.labels().get(CREATED_BY).is_some_and(|v| v == FIELD_MANAGER)
}

/// `obj`, a Namespace, with the [`CREATED_BY`] mark among its labels.
pub fn marked(mut obj: Value) -> Value {
    if !obj["metadata"]["labels"].is_object() {
        obj["metadata"]["labels"] = json!({});
    }
    obj["metadata"]["labels"][CREATED_BY] = json!(FIELD_MANAGER);
    obj
}

/// Creates the Namespace `obj` describes, marked, when there is none of its name; an existing
/// one is left exactly as it is ([`Outcome::Unchanged`]). With `dry_run`, a server-side dry run.
pub async fn create_if_absent(client: &Client, obj: &Value, dry_run: bool) -> Result<Outcome, Error> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let fail = |verb, source| Error::Api {
        verb,
        name: name.clone(),
        source,
    };
    let ns: Namespace = serde_json::from_value(marked(obj.clone())).map_err(|e| Error::Object(e.to_string()))?;
    let params = PostParams {
        dry_run,
        field_manager: Some(FIELD_MANAGER.into()),
    };
    let api = Api::<Namespace>::all(client.clone());
    // Read first, so a second install writes nothing.
    if api.get_opt(&name).await.map_err(|e| fail("read", e))?.is_some() {
        return Ok(Outcome::Unchanged);
    }
    // A create, not an apply: if someone made it since, it is theirs and stays untouched.
    match api.create(&params, &ns).await {
        Ok(_) => Ok(Outcome::Created),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Outcome::Unchanged),
        Err(source) => Err(fail("create", source)),
    }
}

/// What `uninstall` does with a namespace it finds.
#[derive(Debug, PartialEq, Eq)]
pub enum Removal {
    /// Not there.
    Absent,
    /// There, but the plugin did not create it: kept, with everything in it.
    Kept,
    /// The plugin created it: deleted.
    Delete,
}

/// What `uninstall` does with `live`.
pub fn removal(live: Option<&Namespace>) -> Removal {
    match live {
        None => Removal::Absent,
        Some(ns) if created_by_us(ns) => Removal::Delete,
        Some(_) => Removal::Kept,
    }
}

/// Reads the namespace `name` and decides what `uninstall` does with it.
pub async fn removal_of(client: &Client, name: &str) -> Result<Removal, Error> {
    let live = Api::<Namespace>::all(client.clone())
        .get_opt(name)
        .await
        .map_err(|source| Error::Api {
            verb: "read",
            name: name.to_string(),
            source,
        })?;
    Ok(removal(live.as_ref()))
}

/// The line `uninstall` prints for a namespace it keeps.
pub fn kept_line(name: &str) -> String {
    format!(
        "namespace/{name} kept: kubectl storageos did not create it (no {CREATED_BY}={FIELD_MANAGER} label); delete it yourself if nothing else uses it"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn ns(labels: Value) -> Namespace {
        serde_json::from_value(json!({"metadata": {"name": "n", "labels": labels}})).unwrap()
    }

    #[test]
    fn namespaces_kubernetes_uses_are_refused_with_what_to_do() {
        for reserved in ["kube-system", "kube-public", "default"] {
            let e = refuse_reserved(reserved).unwrap_err().to_string();
            assert!(
                e.contains(&format!("namespace {reserved}")) && e.contains("with -n"),
                "{e}"
            );
        }
        assert!(refuse_reserved("storageos-operator").is_ok());
        assert!(refuse_reserved("kube-systemx").is_ok());
    }

    #[test]
    fn only_a_namespace_with_the_mark_is_deleted() {
        assert_eq!(removal(None), Removal::Absent);
        assert_eq!(removal(Some(&ns(json!({"team": "platform"})))), Removal::Kept);
        // The labels every install put on its namespace are not the mark.
        let applied_before = ns(json!({"app.kubernetes.io/part-of": "storageos",
            "app.kubernetes.io/managed-by": "kubectl-storageos",
            "pod-security.kubernetes.io/enforce": "restricted"}));
        assert_eq!(removal(Some(&applied_before)), Removal::Kept);
        assert_eq!(removal(Some(&ns(json!({CREATED_BY: "someone-else"})))), Removal::Kept);
        assert_eq!(removal(Some(&ns(json!({CREATED_BY: FIELD_MANAGER})))), Removal::Delete);
    }

    #[test]
    fn a_namespace_the_plugin_creates_carries_the_mark_and_keeps_its_labels() {
        let made = marked(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "n", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}));
        let made: Namespace = serde_json::from_value(made).unwrap();
        assert!(created_by_us(&made));
        assert_eq!(made.labels()["pod-security.kubernetes.io/enforce"], "restricted");
        let bare: Namespace = serde_json::from_value(marked(json!({"metadata": {"name": "n"}}))).unwrap();
        assert!(created_by_us(&bare));
    }
}
