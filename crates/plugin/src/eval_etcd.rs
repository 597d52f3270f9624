//! `install --include-etcd`: an evaluation etcd, NOT for production. One etcd member in a
//! StatefulSet with a Service, in its own namespace, every object labelled as installed by the
//! plugin so that `uninstall --include-etcd` removes only an etcd it installed. Its data lives in
//! an emptyDir unless `--etcd-storage-class` is given (never a StorageOS class: StorageOS keeps
//! its own state there).
//!
//! It has no authentication, so a NetworkPolicy admits only the StorageOS node pods and the
//! operator (its etcd health check) to its client port: any other pod that could reach it could
//! erase StorageOS's state. It runs as a non-root user with no capabilities.

use serde_json::{Value, json};

/// Default namespace of the evaluation etcd.
pub const NAMESPACE: &str = "storageos-etcd";
/// Name of its StatefulSet and Service.
pub const NAME: &str = "storageos-etcd";
/// Default image.
pub const IMAGE: &str = "quay.io/coreos/etcd:v3.5.17";
/// Label that marks every object of the evaluation etcd.
pub const LABEL: &str = "storageos.com/evaluation-etcd";
/// Client port.
pub const PORT: i32 = 2379;
/// The user and group it runs as.
pub const USER_ID: i64 = 65532;

/// The address StorageOS uses for the evaluation etcd in `namespace`.
pub fn address(namespace: &str) -> String {
    format!("http://{NAME}.{namespace}.svc:{PORT}")
}

fn labels() -> Value {
    json!({
        "app.kubernetes.io/name": NAME,
        "app.kubernetes.io/part-of": "storageos",
        "app.kubernetes.io/managed-by": super::FIELD_MANAGER,
        LABEL: "true"
    })
}

/// Whether an object carries the labels this plugin puts on the evaluation etcd.
pub fn installed_by_us(labels: &std::collections::BTreeMap<String, String>) -> bool {
    labels.get(LABEL).is_some_and(|v| v == "true")
        && labels
            .get("app.kubernetes.io/managed-by")
            .is_some_and(|v| v == super::FIELD_MANAGER)
}

/// Who may connect to the client port: the StorageOS node pods and the operator's pods, in any
/// namespace (`kubectl port-forward`, for `preflight`, does not go through the policy).
fn network_policy(namespace: &str, selector: &Value) -> Value {
    let from_any_namespace = |labels: Value| json!({"namespaceSelector": {}, "podSelector": {"matchLabels": labels}});
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": NAME, "namespace": namespace, "labels": labels()},
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [
                    from_any_namespace(json!({"app": "storageos", "kind": "daemonset"})),
                    from_any_namespace(json!({"app.kubernetes.io/name": storageos_cluster_operator::install::NAME}))
                ],
                "ports": [{"protocol": "TCP", "port": PORT}]
            }]
        }
    })
}

/// The Namespace, Service, NetworkPolicy and StatefulSet, in apply order.
pub fn objects(namespace: &str, image: &str, storage_class: Option<&str>) -> Vec<Value> {
    let annotations = json!({"storageos.com/warning": "evaluation etcd installed by kubectl storageos: one member, not for production"});
    let meta =
        |name: &str| json!({"name": name, "namespace": namespace, "labels": labels(), "annotations": annotations});
    let selector = json!({"app.kubernetes.io/name": NAME, LABEL: "true"});
    let data = json!({"name": "data", "mountPath": "/var/lib/etcd"});
    let mut pod_spec = json!({
        "containers": [{
            "name": "etcd",
            "image": image,
            "command": ["etcd",
                "--name=storageos-etcd-0",
                "--data-dir=/var/lib/etcd",
                "--listen-client-urls=http://0.0.0.0:2379",
                format!("--advertise-client-urls={}", address(namespace)),
                "--listen-peer-urls=http://0.0.0.0:2380",
                "--auto-compaction-retention=1"],
            "ports": [{"name": "client", "containerPort": PORT}, {"name": "peer", "containerPort": 2380}],
            "volumeMounts": [data],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
            "readinessProbe": {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 10},
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "readOnlyRootFilesystem": true,
                "capabilities": {"drop": ["ALL"]}
            }
        }],
        // The data volume is writable by the group it runs as (emptyDir or a claim).
        "securityContext": {
            "runAsNonRoot": true, "runAsUser": USER_ID, "runAsGroup": USER_ID, "fsGroup": USER_ID,
            "seccompProfile": {"type": "RuntimeDefault"}
        }
    });
    let mut spec = json!({
        "serviceName": NAME,
        "replicas": 1,
        "selector": {"matchLabels": selector},
        "template": {"metadata": {"labels": labels()}, "spec": {}}
    });
    match storage_class {
        Some(class) => {
            spec["volumeClaimTemplates"] = json!([{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                         "resources": {"requests": {"storage": "1Gi"}}}
            }]);
        }
        None => pod_spec["volumes"] = json!([{"name": "data", "emptyDir": {}}]),
    }
    spec["template"]["spec"] = pod_spec;
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": namespace, "labels": labels(), "annotations": annotations}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": meta(NAME),
               "spec": {"selector": selector, "ports": [{"name": "client", "port": PORT, "targetPort": "client"}]}}),
        network_policy(namespace, &selector),
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta(NAME), "spec": spec}),
    ]
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSet;

    #[test]
    fn one_labelled_member_with_its_data_where_asked() {
        let objects = objects("ns", IMAGE, None);
        assert_eq!(objects.len(), 4);
        let sts: StatefulSet = serde_json::from_value(objects[3].clone()).unwrap();
        assert_eq!(sts.spec.as_ref().unwrap().replicas, Some(1));
        let pod = sts.spec.clone().unwrap().template.spec.unwrap();
        assert!(pod.volumes.unwrap()[0].empty_dir.is_some());
        assert!(installed_by_us(&sts.metadata.labels.clone().unwrap()));
        let with_class: StatefulSet =
            serde_json::from_value(super::objects("ns", IMAGE, Some("local")).remove(3)).unwrap();
        let claims = with_class.spec.unwrap().volume_claim_templates.unwrap();
        assert_eq!(
            claims[0].spec.as_ref().unwrap().storage_class_name.as_deref(),
            Some("local")
        );
        assert_eq!(address("ns"), "http://storageos-etcd.ns.svc:2379");
    }

    #[test]
    fn it_runs_as_no_root_and_only_storageos_and_the_operator_may_connect() {
        use k8s_openapi::api::networking::v1::NetworkPolicy;
        let objects = objects("ns", IMAGE, None);
        let sts: StatefulSet = serde_json::from_value(objects[3].clone()).unwrap();
        let pod = sts.spec.unwrap().template.spec.unwrap();
        let psc = pod.security_context.unwrap();
        assert_eq!((psc.run_as_non_root, psc.run_as_user), (Some(true), Some(USER_ID)));
        let csc = pod.containers[0].security_context.clone().unwrap();
        assert_eq!(csc.allow_privilege_escalation, Some(false));
        assert_eq!(csc.capabilities.unwrap().drop.unwrap(), ["ALL"]);
        let policy: NetworkPolicy = serde_json::from_value(objects[2].clone()).unwrap();
        let spec = policy.spec.unwrap();
        assert_eq!(spec.policy_types.unwrap(), ["Ingress"]);
        let rule = &spec.ingress.unwrap()[0];
        let from: Vec<_> = rule
            .from
            .clone()
            .unwrap()
            .into_iter()
            .map(|p| p.pod_selector.unwrap().match_labels.unwrap())
            .collect();
        assert_eq!(from.len(), 2, "only the node pods and the operator");
        assert_eq!(from[0]["app"], "storageos");
        assert_eq!(from[1]["app.kubernetes.io/name"], "storageos-operator");
        assert_eq!(
            rule.ports.clone().unwrap()[0].port,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(PORT))
        );
    }

    #[test]
    fn only_our_labels_count() {
        let mut l = std::collections::BTreeMap::new();
        l.insert(LABEL.to_string(), "true".to_string());
        assert!(!installed_by_us(&l));
        l.insert("app.kubernetes.io/managed-by".into(), "kubectl-storageos".into());
        assert!(installed_by_us(&l));
    }
}
