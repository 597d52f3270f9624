//! The first steps of a pass, before anything is written: resolve the spec once, refuse what
//! may not be rendered (namespaces outside the trusted ones, a Secret that does not exist, an
//! invalid spec), read the inputs and plan. A refusal applies and prunes nothing.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;

use super::context::Context;
use super::error::{Error, Step};
use crate::crd::StorageOSCluster;
use crate::reasons::{self, OPERAND_NAMESPACE_NOT_ALLOWED, Reason, SECRET_NAMESPACE_NOT_ALLOWED};
use crate::render::{self, Inputs, Plan, Resolved};
use crate::runtime::kube::trusted::{SecretNamespaces, TrustedNamespaces};

/// Why a pass stops before it changes anything: Ready=False with `reason` and `message`, then
/// `then`.
#[derive(Debug)]
pub struct Refusal {
    pub reason: Reason,
    pub message: String,
    pub then: Then,
}

/// What a refused pass returns once the refusal is on the status.
#[derive(Debug)]
pub enum Then {
    /// Wait (for a change of the spec, or a while).
    Wait(Action),
    /// Fail the pass: it is retried with backoff.
    Fail(Error),
    /// Try again after the action, reporting nothing: a state that ends by itself within
    /// seconds (a namespace of ours still being deleted when a new cluster applies into it).
    Retry(Action),
}

/// The inputs and the plan of the pass, or why there is none.
pub async fn prepare(cluster: &StorageOSCluster, ctx: &Context) -> Result<Result<(Inputs, Plan), Refusal>, Error> {
    let resolved = render::resolve(&cluster.spec);
    let own = cluster.namespace().unwrap_or_default();
    if let Some((reason, message)) = namespace_refusal(&own, &resolved, &ctx.trusted, &ctx.secret_namespaces) {
        let then = Then::Wait(Action::await_change());
        return Ok(Err(Refusal { reason, message, then }));
    }
    let inputs = observe(cluster, ctx, &resolved).await?;
    if let Some((reason, message)) = missing_secret(&resolved, &inputs) {
        let then = Then::Wait(Action::requeue(Duration::from_secs(15)));
        return Ok(Err(Refusal { reason, message, then }));
    }
    if let Some(message) = missing_client_ca(ctx, &resolved).await? {
        let then = Then::Wait(Action::requeue(Duration::from_secs(15)));
        return Ok(Err(Refusal {
            reason: reasons::INVALID_SPEC,
            message,
            then,
        }));
    }
    match render::plan_resolved(&inputs, resolved) {
        Ok(plan) => Ok(Ok((inputs, plan))),
        // An invalid spec: say so and wait for the user to change it.
        Err(e) => Ok(Err(Refusal {
            reason: reasons::INVALID_SPEC,
            message: format!("cannot render the cluster: {e}"),
            then: Then::Wait(Action::await_change()),
        })),
    }
}

/// Why the webhook client CA the spec names cannot be used: its ConfigMap (in the operand
/// namespace) or its key `ca.crt` is missing. The api-manager would not start without it, and
/// the webhooks would fail.
async fn missing_client_ca(ctx: &Context, resolved: &Resolved) -> Result<Option<String>, Error> {
    let Some(name) = &resolved.webhook_client_ca_config_map else {
        return Ok(None);
    };
    let ns = &resolved.namespace;
    let found = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await
        .step(format!("read ConfigMap {ns}/{name}"))?;
    let has_key = found
        .as_ref()
        .and_then(|c| c.data.as_ref())
        .is_some_and(|d| d.get("ca.crt").is_some_and(|v| !v.trim().is_empty()));
    Ok(match (found, has_key) {
        (None, _) => Some(format!(
            "spec.apiManager.webhookClientCAConfigMap names ConfigMap {ns}/{name}, which does not exist: create it with the CA of the apiserver's webhook client certificate under key ca.crt (kubectl -n {ns} create configmap {name} --from-file=ca.crt=CA.pem), or unset the field"
        )),
        (Some(_), false) => Some(format!(
            "ConfigMap {ns}/{name} (spec.apiManager.webhookClientCAConfigMap) has no key ca.crt: put the CA of the apiserver's webhook client certificate there"
        )),
        (Some(_), true) => None,
    })
}

/// Why a cluster in namespace `own` (a trusted one) may not be rendered: a Secret reference
/// names a namespace outside its own, the trusted ones and `secrets`, or the operand namespace
/// one outside its own, the trusted ones and kube-system (condition reason and message), or None.
pub fn namespace_refusal(
    own: &str,
    resolved: &Resolved,
    trusted: &TrustedNamespaces,
    secrets: &SecretNamespaces,
) -> Option<(Reason, String)> {
    let credentials = Some(("secretRefNamespace", resolved.secret_ref.1.clone()));
    let etcd = (resolved.etcd_tls_secret_ref.as_ref()).map(|(_, ns)| ("tlsEtcdSecretRefNamespace", ns.clone()));
    if let Some((field, ns)) = [credentials, etcd]
        .into_iter()
        .flatten()
        .find(|(_, ns)| !trusted.allows_secret_ref(own, ns) && !secrets.contains(ns))
    {
        return Some((
            SECRET_NAMESPACE_NOT_ALLOWED,
            format!(
                "spec.{field} {ns:?} is neither the cluster's namespace {own:?}, a trusted one ({trusted}) nor on \
                 --secret-namespaces ({secrets}): the operator copies the Secrets it names, so it reads them only \
                 there; move the Secret into {own:?} and set spec.{field} to it, or ask the operator's \
                 administrator to add {ns:?} to SECRET_NAMESPACES; nothing is applied or pruned meanwhile"
            ),
        ));
    }
    let target = &resolved.namespace;
    if !trusted.allows_operand_namespace(own, target) {
        return Some((
            OPERAND_NAMESPACE_NOT_ALLOWED,
            format!(
                "spec.namespace {target:?} is neither the cluster's namespace {own:?}, kube-system nor a trusted \
                 one ({trusted}): StorageOS's ServiceAccounts there get cluster-wide rights; use one of those \
                 (delete and re-create the cluster to move it); nothing is applied or pruned meanwhile"
            ),
        ));
    }
    None
}

/// Reads every input of the build: the Secrets it copies and whether ServiceMonitors are served.
/// (The status step reads Nodes and node pods, from the caches when they run, and StorageOS.)
async fn observe(cluster: &StorageOSCluster, ctx: &Context, resolved: &Resolved) -> Result<Inputs, Error> {
    let mut inputs = Inputs::new(cluster.clone(), ctx.config.operator_image.clone());
    inputs.default_images = ctx.config.default_images.clone();
    inputs.node_env = ctx.config.node_env.clone();
    inputs.operator_namespace = ctx.config.operator_namespace.clone();
    inputs.k8s_version = ctx.config.kubernetes_version.clone();
    read_inputs(&ctx.client, resolved, &mut inputs)
        .await
        .map_err(|(step, source)| Error::Kube { step, source })?;
    Ok(inputs)
}

/// Reads what the build takes from the cluster besides the CR (the Secrets it copies, and
/// whether ServiceMonitors are served) into `inputs`; an error names its step. Shared with
/// `plan`, so a preview renders from exactly what a pass would.
pub async fn read_inputs(
    client: &kube::Client,
    resolved: &Resolved,
    inputs: &mut Inputs,
) -> Result<(), (String, kube::Error)> {
    let secret = |ns: &str, name: &str| {
        let (api, step) = (
            Api::<Secret>::namespaced(client.clone(), ns),
            format!("read Secret {ns}/{name}"),
        );
        let name = name.to_string();
        async move { api.get_opt(&name).await.map_err(|e| (step, e)) }
    };
    let (name, ns) = &resolved.secret_ref;
    inputs.secret = secret(ns, name).await?;
    if let Some((name, ns)) = &resolved.etcd_tls_secret_ref {
        inputs.etcd_tls_secret = secret(ns, name).await?;
    }
    inputs.service_monitor_crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get_metadata_opt("servicemonitors.monitoring.coreos.com")
        .await
        .map_err(|e| ("look up the ServiceMonitor CRD".to_string(), e))?
        .is_some();
    Ok(())
}

/// Why the build cannot start: a Secret it copies does not exist (condition reason and
/// message), or None.
fn missing_secret(resolved: &Resolved, inputs: &Inputs) -> Option<(Reason, String)> {
    if inputs.secret.is_none() {
        let (name, ns) = &resolved.secret_ref;
        return Some((
            reasons::SECRET_NOT_FOUND,
            format!(
                "Secret {ns}/{name} with the StorageOS API credentials does not exist; create it (keys username and password)"
            ),
        ));
    }
    // The node pods mount the copy of the etcd TLS Secret: without its source, applying would
    // leave the copy out and prune it, and no node pod could start again. Wait instead.
    let (name, ns) = resolved.etcd_tls_secret_ref.as_ref()?;
    inputs.etcd_tls_secret.is_none().then(|| {
        (
            reasons::ETCD_TLS_SECRET_NOT_FOUND,
            format!(
                "Secret {ns}/{name} with the etcd TLS client certificate does not exist; create it (or remove tlsEtcdSecretRefName); nothing is changed meanwhile"
            ),
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refusal(ns: &str, spec: serde_json::Value, trusted: &TrustedNamespaces) -> Option<(Reason, String)> {
        let cluster: StorageOSCluster = serde_json::from_value(json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": "storageos", "namespace": ns}, "spec": spec
        }))
        .unwrap();
        namespace_refusal(
            ns,
            &render::resolve(&cluster.spec),
            trusted,
            &SecretNamespaces::default(),
        )
    }

    #[test]
    fn secret_refs_outside_the_cluster_namespace_and_trusted_ones_are_refused() {
        let trusted = TrustedNamespaces::only("storageos-operator");
        let own = json!({"secretRefName": "s", "secretRefNamespace": "storageos-operator",
                         "tlsEtcdSecretRefName": "etcd"});
        assert_eq!(refusal("storageos-operator", own, &trusted), None);
        let creds = json!({"secretRefName": "s", "secretRefNamespace": "kube-system"});
        let (reason, msg) = refusal("storageos-operator", creds, &trusted).unwrap();
        assert_eq!(reason, SECRET_NAMESPACE_NOT_ALLOWED);
        assert!(msg.contains("spec.secretRefNamespace \"kube-system\""), "{msg}");
        let etcd = json!({"secretRefName": "s", "secretRefNamespace": "storageos-operator",
                          "tlsEtcdSecretRefName": "etcd", "tlsEtcdSecretRefNamespace": "tenant"});
        let (reason, msg) = refusal("storageos-operator", etcd, &trusted).unwrap();
        assert_eq!(reason, SECRET_NAMESPACE_NOT_ALLOWED);
        assert!(msg.contains("spec.tlsEtcdSecretRefNamespace \"tenant\""), "{msg}");
        // A trusted namespace other than the cluster's own may be named.
        let wider: TrustedNamespaces = "storageos-operator,default".parse().unwrap();
        let go = json!({"secretRefName": "s", "secretRefNamespace": "storageos-operator"});
        assert_eq!(refusal("default", go, &wider), None);
        // The Go operator's e2e CR: the cluster in the operator's namespace, its Secret in
        // `default`, which is listed for Secrets only.
        let e2e = json!({"secretRefName": "s", "secretRefNamespace": "default"});
        let cluster: StorageOSCluster = serde_json::from_value(json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": "storageos", "namespace": "storageos-operator"}, "spec": e2e
        }))
        .unwrap();
        let resolved = render::resolve(&cluster.spec);
        let secrets: SecretNamespaces = "default".parse().unwrap();
        assert_eq!(
            namespace_refusal("storageos-operator", &resolved, &trusted, &secrets),
            None
        );
        let (_, msg) =
            namespace_refusal("storageos-operator", &resolved, &trusted, &SecretNamespaces::default()).unwrap();
        assert!(msg.contains("SECRET_NAMESPACES"), "{msg}");
        assert!(
            "*".parse::<SecretNamespaces>().is_err(),
            "every namespace is never a Secret namespace"
        );
    }

    #[test]
    fn operands_go_only_to_kube_system_the_cluster_namespace_or_trusted_ones() {
        let trusted = TrustedNamespaces::only("ops");
        let spec = |ns: Option<&str>| {
            let mut s = json!({"secretRefName": "s", "secretRefNamespace": "ops"});
            if let Some(ns) = ns {
                s["namespace"] = json!(ns);
            }
            s
        };
        for ok in [None, Some("kube-system"), Some("ops")] {
            assert_eq!(refusal("ops", spec(ok), &trusted), None, "{ok:?}");
        }
        let (reason, msg) = refusal("ops", spec(Some("tenant")), &trusted).unwrap();
        assert_eq!(reason, OPERAND_NAMESPACE_NOT_ALLOWED);
        assert!(msg.contains("spec.namespace \"tenant\""), "{msg}");
    }
}
