//! What a [`Redactor`] must learn before the bundle or the recovery manifests write a line:
//! the Secrets the clusters name, the CSI copies and other Secrets among their children, the
//! webhooks' keys, the volume and namespace keys, the operator's credential-named env vars and
//! the userinfo of `kvBackend.address`. A Secret it cannot read is a warning, never silence:
//! its values can then only be caught by name or shape.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::{Redactor, credential};
use crate::crd::StorageOSCluster;

/// Labels of the Secrets the api-manager makes for encrypted volumes (volume and namespace keys).
const KEY_SECRETS: &str =
    "app.kubernetes.io/component=storageos-api-manager,app.kubernetes.io/managed-by=storageos-operator";

/// What was learnt, and what the command read on the way.
#[derive(Default)]
pub struct Learnt {
    pub redactor: Redactor,
    /// The Secrets the clusters name, by (namespace, name).
    pub secrets: BTreeMap<(String, String), Secret>,
    /// Each cluster's live children (unredacted), in the order of the clusters.
    pub children: Vec<Vec<Value>>,
    /// The operator's Deployment (unredacted), when it could be read.
    pub operator: Option<Deployment>,
    /// What could not be read, said to the user and written with the files.
    pub warnings: Vec<String>,
}

impl Learnt {
    fn warn(&mut self, line: String) {
        super::super::progress(format!("warning: {line}"));
        self.warnings.push(line);
    }
}

/// The namespace a cluster's StorageOS runs in.
pub fn operand_namespace(c: &StorageOSCluster) -> String {
    c.spec
        .namespace
        .clone()
        .unwrap_or_else(|| crate::render::defaults::DEFAULT_NAMESPACE.into())
}

/// `warnings.txt`, when there is something to warn of.
pub fn warnings_file(warnings: &[String]) -> Option<(String, String)> {
    (!warnings.is_empty()).then(|| ("warnings.txt".to_string(), warnings.join("\n") + "\n"))
}

/// Reads every source of credentials of `clusters` and of the operator in `namespace`.
pub async fn learn(client: &Client, namespace: &str, clusters: &[StorageOSCluster]) -> Learnt {
    let mut out = Learnt::default();
    match Api::<Deployment>::namespaced(client.clone(), namespace)
        .get_opt(storageos_cluster_operator::install::NAME)
        .await
    {
        Ok(d) => out.operator = d,
        Err(e) => out.warn(format!(
            "cannot read Deployment {namespace}/{} ({e}): its env vars are caught only by name",
            storageos_cluster_operator::install::NAME
        )),
    }
    if let Some(d) = &out.operator {
        learn_env(&mut out.redactor, d);
    }
    let fix = |ns: &str| {
        format!(
            "its values are caught only by name or shape: run as a user who may get Secrets in {ns}, and check the files before sending them"
        )
    };
    let mut webhooks = vec![(
        namespace.to_string(),
        storageos_cluster_operator::install::WEBHOOK_SECRET.to_string(),
    )];
    for c in clusters {
        let who = format!(
            "StorageOSCluster {}/{}",
            c.namespace().unwrap_or_default(),
            c.name_any()
        );
        let mut refs = vec![(c.spec.secret_ref_namespace.clone(), c.spec.secret_ref_name.clone())];
        if let Some((name, ns)) = crate::render::defaults::etcd_tls_secret_ref(&c.spec) {
            refs.push((ns, name));
        }
        for (ns, name) in refs {
            match Api::<Secret>::namespaced(client.clone(), &ns).get_opt(&name).await {
                Ok(Some(s)) => {
                    out.redactor.learn(&s);
                    out.secrets.insert((ns, name), s);
                }
                Ok(None) => out.warn(format!("Secret {ns}/{name}, named by {who}, does not exist")),
                Err(e) => out.warn(format!(
                    "cannot read Secret {ns}/{name}, named by {who} ({e}); {}",
                    fix(&ns)
                )),
            }
        }
        if let Some(address) = c.spec.kv_backend.as_ref().and_then(|k| k.address.as_deref()) {
            out.redactor.learn_address(address);
        }
        webhooks.push((
            operand_namespace(c),
            crate::rbac::components::API_MANAGER_WEBHOOK_SECRET.to_string(),
        ));
        let children = super::super::children::children(client, c).await;
        for s in children.iter().filter(|o| o["kind"] == "Secret") {
            if let Ok(s) = serde_json::from_value::<Secret>(s.clone()) {
                out.redactor.learn(&s);
            }
        }
        out.children.push(children);
    }
    webhooks.sort();
    webhooks.dedup();
    for (ns, name) in webhooks {
        match Api::<Secret>::namespaced(client.clone(), &ns).get_opt(&name).await {
            Ok(Some(s)) => out.redactor.learn(&s),
            Ok(None) => {}
            Err(e) => out.warn(format!(
                "cannot read the webhook Secret {ns}/{name} ({e}); {}",
                fix(&ns)
            )),
        }
    }
    match Api::<Secret>::all(client.clone())
        .list(&ListParams::default().labels(KEY_SECRETS))
        .await
    {
        Ok(list) => list.items.iter().for_each(|s| out.redactor.learn_all(s)),
        Err(e) => out.warn(format!(
            "cannot list the volume key Secrets ({e}); {}",
            fix("every namespace")
        )),
    }
    out
}

/// Learns the value of every env var of `d` whose name looks like a credential (`FOO_TOKEN`,
/// `*_PASSWORD`, `*_KEY`, `*_SECRET`), so it is redacted wherever else it appears.
pub fn learn_env(r: &mut Redactor, d: &Deployment) {
    let containers = d
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()));
    for env in containers.into_iter().flatten().flat_map(|c| c.env.iter().flatten()) {
        if let Some(value) = env.value.as_deref().filter(|_| credential(&env.name)) {
            r.learn_value(value);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// An apiserver on loopback that forbids every request.
    async fn forbidding_apiserver() -> Client {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 8192];
                let _ = s.read(&mut buf).await;
                let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"forbidden","reason":"Forbidden","code":403}"#;
                let answer = format!(
                    "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(answer.as_bytes()).await;
                let _ = s.shutdown().await;
            }
        });
        Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap()
    }

    #[tokio::test]
    async fn an_unreadable_secret_is_a_warning_not_silence() {
        let client = forbidding_apiserver().await;
        let cluster: StorageOSCluster = serde_json::from_value(json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": "storageos", "namespace": "ops"},
            "spec": {"secretRefName": "storageos-api", "secretRefNamespace": "ops"}
        }))
        .unwrap();
        let learnt = learn(&client, "storageos-operator", &[cluster]).await;
        let warnings = learnt.warnings.join("\n");
        assert!(
            warnings.contains("cannot read Secret ops/storageos-api, named by StorageOSCluster ops/storageos"),
            "{warnings}"
        );
        assert!(warnings.contains("may get Secrets in ops"), "{warnings}");
        assert!(warnings.contains("cannot list the volume key Secrets"), "{warnings}");
    }
}
