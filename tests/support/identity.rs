//! Who the code under test acts as. Only test scaffolding is admin: the operator (`run`) and the
//! api-manager run as their own ServiceAccounts, with exactly the RBAC the project ships (the
//! install objects of `storageos_operator::install`, the api-manager rule table the operator
//! renders), through a TokenRequest token as a pod would get. A missing permission fails a test.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};
use storageos_operator::{install, rbac};

use super::{client, from_json, kubeconfig_path, wait_for};

/// Field manager of the scaffolding's own writes.
const SCAFFOLD: &str = "storageos-operator-tests";

/// Namespace of the api-manager's ServiceAccount in tests.
pub const API_MANAGER_NAMESPACE: &str = "storageos-tests";
/// The api-manager's ServiceAccount, as the operator renders it.
pub const API_MANAGER_SA: &str = "storageos-api-manager-sa";
/// The tests' copy of `storageos:api-manager` (same rules, another name, so that a test cluster
/// being deleted, which removes the real role, never takes the rights of other tests away).
pub const API_MANAGER_ROLE: &str = "storageos-tests:api-manager";

/// A ServiceAccount to act as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub namespace: &'static str,
    pub name: &'static str,
}

/// The operator, as `deploy/operator.yaml` installs it.
pub const OPERATOR: Identity = Identity {
    namespace: install::NAMESPACE,
    name: install::NAME,
};

/// The api-manager, as the operator renders it.
pub const API_MANAGER: Identity = Identity {
    namespace: API_MANAGER_NAMESPACE,
    name: API_MANAGER_SA,
};

async fn apply(client: &Client, obj: &Value) {
    let key = storageos_operator::runtime::kube::apply::ObjectKey::of(obj).expect("object identity");
    let (group, version) = key.api_version.split_once('/').unwrap_or(("", &key.api_version));
    let ar = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(group, version, &key.kind));
    let api: Api<kube::core::DynamicObject> = match &key.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    api.patch(&key.name, &PatchParams::apply(SCAFFOLD).force(), &Patch::Apply(obj))
        .await
        .unwrap_or_else(|e| panic!("apply {key}: {e}"));
}

/// Applies the operator's install RBAC (namespace, ServiceAccount, ClusterRole, Role and their
/// bindings) exactly as generated for `deploy/operator.yaml`; not its workload, Services or
/// webhook configuration.
pub async fn install_operator_rbac(admin: &Client) {
    let install = install::build("registry.invalid/storageos-operator:test").expect("install objects");
    for obj in install.objects() {
        if !["Deployment", "Service", "ValidatingWebhookConfiguration"]
            .contains(&obj["kind"].as_str().unwrap_or_default())
        {
            apply(admin, &obj).await;
        }
    }
}

/// Applies the api-manager's rules (the table the operator renders as `storageos:api-manager`)
/// bound to its ServiceAccount.
pub async fn install_api_manager_rbac(admin: &Client) {
    install_api_manager_rbac_for(admin, rbac::components::API_MANAGER_WEBHOOK_CONFIG).await;
}

/// The same, for an api-manager configured with `-webhook-config-mutating=<webhook_config>`.
pub async fn install_api_manager_rbac_for(admin: &Client, webhook_config: &str) {
    apply(
        admin,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": API_MANAGER_NAMESPACE}}),
    )
    .await;
    apply(
        admin,
        &json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": API_MANAGER_SA, "namespace": API_MANAGER_NAMESPACE}}),
    )
    .await;
    let role = if webhook_config == rbac::components::API_MANAGER_WEBHOOK_CONFIG {
        API_MANAGER_ROLE.to_string()
    } else {
        format!("{API_MANAGER_ROLE}:{webhook_config}")
    };
    apply(
        admin,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": role, "labels": {"storageos-operator-test": "true"}},
                "rules": rbac::components::api_manager_rules(webhook_config)}),
    )
    .await;
    apply(admin, &binding(&role, &role, API_MANAGER)).await;
}

/// The api-manager's Role for the drain gate's guards (`storageos:api-manager-drain-guard`) in
/// `namespace`, bound to its ServiceAccount, as the operator renders it in the operand namespace.
#[allow(dead_code)]
pub async fn install_drain_guard_role(admin: &Client, namespace: &str) {
    let name = "storageos:api-manager-drain-guard";
    apply(
        admin,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": name, "namespace": namespace},
                "rules": rbac::policy_rules(rbac::components::API_MANAGER_DRAIN_GUARD)}),
    )
    .await;
    apply(
        admin,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": API_MANAGER.name, "namespace": API_MANAGER.namespace}]}),
    )
    .await;
}

/// The api-manager's ClusterRole for tainting lost Nodes (`storageos:api-manager-out-of-service`,
/// rendered with `spec.nodeOutOfService.automatic`), bound to its ServiceAccount.
#[allow(dead_code)]
pub async fn install_out_of_service_role(admin: &Client) {
    let name = "storageos-tests:api-manager-out-of-service";
    apply(
        admin,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": name, "labels": {"storageos-operator-test": "true"}},
                "rules": rbac::policy_rules(rbac::components::API_MANAGER_OUT_OF_SERVICE)}),
    )
    .await;
    apply(admin, &binding(name, name, API_MANAGER)).await;
}

/// A ClusterRoleBinding of `role` to `who`.
pub fn binding(name: &str, role: &str, who: Identity) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
           "metadata": {"name": name},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
           "subjects": [{"kind": "ServiceAccount", "name": who.name, "namespace": who.namespace}]})
}

/// A kubeconfig (YAML) for the local plane that authenticates as `who` with a fresh
/// TokenRequest token (valid for a day).
pub async fn kubeconfig_yaml(admin: &Client, who: Identity) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), who.namespace);
    let request: TokenRequest = from_json(json!({"spec": {"audiences": [], "expirationSeconds": 86400}}));
    let token = sas
        .create_token_request(who.name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("token for {}/{}: {e}", who.namespace, who.name))
        .status
        .expect("TokenRequest status")
        .token;
    let admin_config = Kubeconfig::read_from(kubeconfig_path()).expect("read kubeconfig");
    let cluster = admin_config.clusters[0]
        .cluster
        .clone()
        .expect("a cluster in the kubeconfig");
    let ca = cluster.certificate_authority_data.expect("CA data in the kubeconfig");
    let server = cluster.server.expect("server in the kubeconfig");
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    \
         certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    token: {token}\n\
         contexts:\n- name: {user}\n  context: {{cluster: local, user: {user}, namespace: {ns}}}\n\
         current-context: {user}\n",
        user = who.name,
        ns = who.namespace,
    )
}

/// A client that acts as `who` (whose RBAC must be installed), once the apiserver's
/// authorizer has caught up with the RBAC just applied.
pub async fn client_as(who: Identity) -> Client {
    Client::try_from(config_as(who).await).expect("client")
}

/// The configuration of [`client_as`] (once its RBAC works), for a client made elsewhere (on
/// another runtime).
pub async fn config_as(who: Identity) -> Config {
    let admin = client().await;
    let yaml = kubeconfig_yaml(&admin, who).await;
    let kubeconfig = Kubeconfig::from_yaml(&yaml).expect("generated kubeconfig parses");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("generated kubeconfig is usable");
    let c = Client::try_from(config.clone()).expect("client");
    let nodes: Api<Node> = Api::all(c.clone());
    wait_for(
        &format!("RBAC of {}/{} to take effect", who.namespace, who.name),
        Duration::from_secs(30),
        || async { nodes.list(&ListParams::default().limit(1)).await.ok().map(|_| ()) },
    )
    .await;
    config
}

/// A client acting as the operator's ServiceAccount with the install RBAC.
pub async fn operator_client() -> Client {
    install_operator_rbac(&client().await).await;
    client_as(OPERATOR).await
}

/// A client acting as the api-manager's ServiceAccount with its rendered rules.
pub async fn api_manager_client() -> Client {
    install_api_manager_rbac(&client().await).await;
    client_as(API_MANAGER).await
}

/// The configuration of [`api_manager_client`].
#[allow(dead_code)]
pub async fn api_manager_config() -> Config {
    install_api_manager_rbac(&client().await).await;
    config_as(API_MANAGER).await
}

/// Writes a kubeconfig acting as `who` (whose RBAC must be installed) to
/// `dir/<name>.kubeconfig`, for a child process.
pub async fn kubeconfig_file(dir: &Path, who: Identity) -> PathBuf {
    let path = dir.join(format!("{}.kubeconfig", who.name));
    std::fs::write(&path, kubeconfig_yaml(&client().await, who).await).expect("write kubeconfig");
    path
}

/// A kubeconfig file acting as the operator's ServiceAccount with the install RBAC.
pub async fn operator_kubeconfig(dir: &Path) -> PathBuf {
    install_operator_rbac(&client().await).await;
    kubeconfig_file(dir, OPERATOR).await
}

/// A kubeconfig file acting as the api-manager's ServiceAccount with its rendered rules, for an
/// api-manager run with `-webhook-config-mutating=<webhook_config>`.
pub async fn api_manager_kubeconfig(dir: &Path, webhook_config: &str) -> PathBuf {
    install_api_manager_rbac_for(&client().await, webhook_config).await;
    kubeconfig_file(dir, API_MANAGER).await
}

/// A client acting as the api-manager with its rules for `-webhook-config-mutating=<webhook_config>`.
pub async fn api_manager_client_for(webhook_config: &str) -> Client {
    install_api_manager_rbac_for(&client().await, webhook_config).await;
    client_as(API_MANAGER).await
}

/// Creates (or replaces the rules of) a ClusterRole.
pub async fn put_cluster_role(admin: &Client, name: &str, rules: Value) {
    apply(
        admin,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": name}, "rules": rules}),
    )
    .await;
}

/// Deletes the ClusterRole and ClusterRoleBinding called `name`.
pub async fn delete_cluster_role(admin: &Client, name: &str) {
    let _ = Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(name, &Default::default())
        .await;
    let _ = Api::<ClusterRole>::all(admin.clone())
        .delete(name, &Default::default())
        .await;
}

/// Applies any object as the scaffolding (admin).
pub async fn apply_as_admin(admin: &Client, obj: &Value) {
    apply(admin, obj).await;
}

impl Identity {
    /// The username the apiserver sees.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

/// Every write (`verb resource[/subresource] namespace/name`) the apiserver audited for `who`
/// from `since` on. Counting by identity measures the code under test only, never Kubernetes'
/// own controllers or the test scaffolding.
pub fn writes_by(who: Identity, since: chrono::DateTime<chrono::Utc>) -> Vec<String> {
    audited(who, since)
        .into_iter()
        .filter(|r| !r.starts_with("get "))
        .collect()
}

/// Every request the apiserver audited for `who` from `since` on, read from the plane's audit
/// log (hack/k8s.sh logs every ServiceAccount write and pod-log read), as
/// `verb resource[/subresource] namespace/name`.
pub fn audited(who: Identity, since: chrono::DateTime<chrono::Utc>) -> Vec<String> {
    audit_events(who, since)
        .iter()
        .filter(|e| !is_marker(e))
        .map(|e| {
            let o = &e["objectRef"];
            let sub = o["subresource"].as_str().map(|s| format!("/{s}")).unwrap_or_default();
            format!(
                "{} {}{sub} {}/{}",
                e["verb"].as_str().unwrap_or_default(),
                o["resource"].as_str().unwrap_or_default(),
                o["namespace"].as_str().unwrap_or_default(),
                o["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// The prefix of the namespaces [`audit_flushed`]'s marker requests name (none exists).
const MARKER: &str = "audit-marker-";

/// Whether an audit event is an [`audit_flushed`] marker, which is nobody's work.
fn is_marker(e: &Value) -> bool {
    e["objectRef"]["namespace"]
        .as_str()
        .is_some_and(|ns| ns.starts_with(MARKER))
}

/// Waits until the audit log holds every request `who` finished before the call. The apiserver
/// writes an event before it answers, one after another: once a request `who` makes now (a
/// dry-run create in a namespace named for the marker, refused or not) is in the log, so is
/// everything it finished earlier.
pub async fn audit_flushed(who: Identity) {
    use k8s_openapi::api::core::v1::ConfigMap;
    let since = chrono::Utc::now() - chrono::Duration::seconds(5);
    let marker = format!("{MARKER}{}", super::suffix());
    let api: Api<ConfigMap> = Api::namespaced(client_as(who).await, &marker);
    let probe: ConfigMap = from_json(json!({"metadata": {"name": marker}}));
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let _ = api.create(&dry_run, &probe).await;
    wait_for(
        "the audit log to hold the marker request",
        Duration::from_secs(30),
        || async {
            audit_events(who, since)
                .iter()
                .any(|e| e["requestURI"].as_str().is_some_and(|u| u.contains(&marker)))
                .then_some(())
        },
    )
    .await;
}

/// The audit events (JSON, as the apiserver wrote them) of every request `who` made from
/// `since` on, for a test that needs more than [`audited`] shows (such as the response code).
pub fn audit_events(who: Identity, since: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
    let log = kubeconfig_path()
        .parent()
        .expect("the kubeconfig lives in the plane's directory")
        .join("logs/audit.log");
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| {
        panic!(
            "read the audit log {} (restart the plane with this hack/k8s.sh): {e}",
            log.display()
        )
    });
    let user = who.username();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["user"]["username"] == user.as_str())
        .filter(|e| {
            e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .is_some_and(|t| t >= since)
        })
        .collect()
}
