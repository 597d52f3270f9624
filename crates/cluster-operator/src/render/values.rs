//! The values the templates render from: the resolved spec, labels, images, scheduling and
//! Secret data, computed in Rust so the templates only place them.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::Error;
use super::defaults::{NODE_API_PORT, Resolved};
use super::go_defaults;
use super::images::{self, Images, is_go_api_manager};
use super::inputs::{FORWARDED_NODE_ENV, Inputs, forwarded_to_api_manager};
use super::labels::{self, Labels};
use super::scheduling::{affinity, helper_tolerations, merge_tolerations, node_tolerations, spread_over_hosts};
use super::secrets;
use crate::rbac::components::DRAIN_GUARD_NAMESPACE;

/// Name of the scheduler the extender runs as, and the api-manager sets on StorageOS pods.
pub const SCHEDULER_NAME: &str = "storageos-scheduler";
/// The unprivileged user the api-manager and scheduler run as (distroless `nonroot`).
const NON_ROOT_UID: i64 = 65532;

/// Keys of the node ConfigMap (`storageos-node-config`), consumed as environment and as files.
fn node_config(r: &Resolved, node_env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let bool_str = |b: bool| if b { "true" } else { "false" }.to_string();
    let mut c = BTreeMap::new();
    c.insert("ETCD_ENDPOINTS".into(), r.etcd_endpoints.clone());
    if r.etcd_tls_secret_ref.is_some() {
        c.insert(
            "ETCD_TLS_CLIENT_CA".into(),
            "/run/storageos/pki/etcd-client-ca.crt".into(),
        );
        c.insert(
            "ETCD_TLS_CLIENT_KEY".into(),
            "/run/storageos/pki/etcd-client.key".into(),
        );
        c.insert(
            "ETCD_TLS_CLIENT_CERT".into(),
            "/run/storageos/pki/etcd-client.crt".into(),
        );
    }
    for key in ["DISABLE_TELEMETRY", "DISABLE_VERSION_CHECK", "DISABLE_CRASH_REPORTING"] {
        c.insert(key.into(), bool_str(r.disable_telemetry));
    }
    if r.disable_tcmu {
        c.insert("DISABLE_TCMU".into(), "true".into());
    }
    if r.force_tcmu {
        c.insert("FORCE_TCMU".into(), "true".into());
    }
    c.insert("K8S_NAMESPACE".into(), r.namespace.clone());
    if let Some(distro) = &r.k8s_distro {
        c.insert("K8S_DISTRO".into(), distro.clone());
    }
    c.insert("CSI_ENDPOINT".into(), r.csi.endpoint.clone());
    c.insert("CSI_VERSION".into(), r.csi.version.clone());
    c.insert("K8S_ENABLE_SCHEDULER_EXTENDER".into(), "true".into());
    if let Some(shared) = &r.shared_dir {
        c.insert("DEVICE_DIR".into(), format!("{shared}/devices"));
    }
    c.insert("LOG_FORMAT".into(), "json".into());
    c.insert("LOG_LEVEL".into(), if r.debug { "debug" } else { "info" }.into());
    c.insert("RECOMMENDED_MAX_PIDS_LIMIT".into(), "32768".into());
    c.extend(
        node_env
            .iter()
            .filter(|(k, _)| FORWARDED_NODE_ENV.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    c
}

/// The api-manager container's environment: the cluster it belongs to (`STORAGEOS_CLUSTER`,
/// `namespace/name`: only that cluster's pause annotation signals maintenance), JSON logs from
/// our image (machine-readable, as the Go api-manager's were; a Go image logs JSON by itself),
/// and the operator's tracing variables, so that its spans go where the operator's go.
fn api_manager_env(cluster: &str, node_env: &BTreeMap<String, String>, go_image: bool) -> Vec<Value> {
    let log_format = (!go_image).then(|| json!({"name": "LOG_FORMAT", "value": "json"}));
    std::iter::once(json!({"name": "STORAGEOS_CLUSTER", "value": cluster}))
        .chain(log_format)
        .chain(
            node_env
                .iter()
                .filter(|(k, _)| forwarded_to_api_manager(k))
                .map(|(k, v)| json!({"name": k, "value": v})),
        )
        .collect()
}

/// A CSI helper sidecar's `--timeout` and worker flag (`workers_flag`) from `spec.csi`, else
/// `defaults` (timeout, workers) where the Go operator set them, else nothing (the sidecar's
/// own defaults), so an unset CR renders the Go operator's arguments.
fn sidecar_tuning(
    csi: &super::defaults::ResolvedCsi,
    defaults: Option<(&str, i32)>,
    workers_flag: &str,
) -> Vec<String> {
    let timeout = csi.timeout.clone().or(defaults.map(|(t, _)| t.to_string()));
    let workers = csi.worker_threads.or(defaults.map(|(_, w)| w));
    timeout
        .map(|t| format!("--timeout={t}"))
        .into_iter()
        .chain(workers.map(|w| format!("{workers_flag}={w}")))
        .collect()
}

/// Whether `path` is `dir` or below it (then the plugin dir is already visible through the
/// kubelet-dir mount, and a second mount would overlap).
fn is_under(path: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    path == dir || path.starts_with(&format!("{dir}/"))
}

/// The api-manager container: command and arguments. The operator's image runs the
/// `api-manager` subcommand; a Go api-manager image runs `/manager`. Both accept the same flags.
fn api_manager_command(r: &Resolved, image: &str, go_image: bool) -> (Vec<String>, Vec<String>) {
    let command = if go_image {
        vec!["/manager".to_string()]
    } else {
        vec!["storageos-operator".to_string(), "api-manager".to_string()]
    };
    let scheduler = if r.disable_scheduler { "" } else { SCHEDULER_NAME };
    let mut args = vec![
        "--enable-leader-election".to_string(),
        "--metrics-addr=:8080".to_string(),
        format!("--api-endpoint={}", r.api_endpoint()),
        // Empty when the scheduler is disabled: the pod mutator then leaves pods alone.
        format!("--scheduler-name={scheduler}"),
    ];
    // The Go api-manager has no such flag (its fencer cannot be turned off).
    if r.disable_fencing && !go_image {
        args.push("--enable-node-fencing=false".into());
    }
    // The Go api-manager has no out-of-service controller.
    if let (Some((polls, cool_down)), false) = (&r.node_out_of_service, go_image) {
        args.push("--enable-node-out-of-service=true".into());
        args.push(format!("--node-out-of-service-offline-polls={polls}"));
        args.push(format!("--node-out-of-service-cool-down={cool_down}"));
    }
    if r.webhook_client_ca_config_map.is_some() {
        args.push(format!("--webhook-client-ca-file={WEBHOOK_CLIENT_CA_DIR}/ca.crt"));
        if !r.webhook_client_names.is_empty() {
            args.push(format!("--webhook-client-names={}", r.webhook_client_names.join(",")));
        }
    }
    // The drain gate's guard pods run the api-manager's own image (`drain-guard`); the Go
    // api-manager has no drain gate.
    if !go_image {
        args.push(format!("--drain-guard-image={image}"));
        args.push(format!("--drain-guard-namespace={DRAIN_GUARD_NAMESPACE}"));
        args.push(format!("--drain-policy={}", r.drain_policy));
        args.push(format!("--enable-attach-recovery={}", r.attach_recovery));
        if let Some(hold) = &r.max_drain_hold {
            args.push(format!("--drain-max-hold={hold}"));
        }
    }
    (command, args)
}

/// Where the api-manager mounts `spec.apiManager.webhookClientCAConfigMap`.
const WEBHOOK_CLIENT_CA_DIR: &str = "/etc/storageos/webhook-client-ca";

/// Pod security of the unprivileged workloads. OpenShift assigns UIDs and fsGroups from the
/// namespace range itself, so they are only pinned elsewhere.
fn restricted_pod_security(openshift: bool) -> Value {
    if openshift {
        json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
    } else {
        json!({
            "runAsNonRoot": true,
            "runAsUser": NON_ROOT_UID,
            "runAsGroup": NON_ROOT_UID,
            "fsGroup": NON_ROOT_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        })
    }
}

/// What the images decide, decided once: whether the api-manager is a Go image, and which
/// kube-scheduler configuration version to write; an error when the spec asks what those images
/// cannot do.
fn image_decisions(r: &Resolved, images: &Images) -> Result<(bool, &'static str), Error> {
    let go_api_manager = is_go_api_manager(&images.api_manager_container);
    if r.webhook_client_ca_config_map.is_some() && go_api_manager {
        return Err(Error::WebhookClientCaNeedsOurApiManager {
            image: images.api_manager_container.clone(),
        });
    }
    // A pinned old kube-scheduler reads only the config version of its release.
    let config_api_version = match images::scheduler_config_version(&images.kube_scheduler_container) {
        Ok(v) => v,
        Err(_) if r.disable_scheduler => "v1",
        Err(minor) => {
            return Err(Error::SchedulerTooOld {
                image: images.kube_scheduler_container.clone(),
                minor,
            });
        }
    };
    Ok((go_api_manager, config_api_version))
}

/// The labels every object carries (the cluster's own among them) and each workload's.
struct LabelSets {
    common: Labels,
    api_manager_component: Labels,
    values: Value,
}

fn label_sets(inputs: &Inputs, r: &Resolved) -> LabelSets {
    let meta = &inputs.cluster.metadata;
    let cluster = meta.name.clone().unwrap_or_default();
    let cluster_ns = meta.namespace.clone().unwrap_or_default();
    let cr_labels: Labels = meta.labels.clone().unwrap_or_default();
    let common = labels::common(&cluster, &cluster_ns, &cr_labels);
    let with_common = |extra: &Labels| labels::merged(&common, extra);
    let helper_kind = if r.csi.statefulset { "statefulset" } else { "deployment" };
    let api_manager_pod = labels::pod(&cluster, None, "storageos-api-manager");
    let service_for = |v: &str| Labels::from([("app.kubernetes.io/service-for".to_string(), v.to_string())]);
    let api_manager_component = Labels::from([(
        "app.kubernetes.io/component".to_string(),
        "storageos-api-manager".to_string(),
    )]);
    let values = json!({
        "namespace": {"app": "storageos"},
        "common": common,
        "apiService": with_common(&service_for("storageos-api-server")),
        "apiManager": with_common(&api_manager_pod),
        "webhookService": with_common(&labels::merged(&api_manager_pod, &service_for("storageos-webhook-server"))),
        "metricsService": with_common(&labels::merged(&api_manager_pod, &service_for("storageos-api-manager"))),
        "daemonsetPod": labels::pod(&cluster, Some("daemonset"), "storageos-daemonset"),
        "csiHelperPod": labels::pod(&cluster, Some(helper_kind), "storageos-csi-helper"),
        "schedulerPod": labels::pod(&cluster, Some("deployment"), "storageos-scheduler"),
        "apiManagerPod": api_manager_pod,
        "metricsSelector": labels::merged(&api_manager_component, &service_for("storageos-api-manager")),
        "apiManagerComponent": api_manager_component,
        "serviceSelector": {"app": "storageos", "kind": "daemonset"},
    });
    LabelSets {
        common,
        api_manager_component,
        values,
    }
}

/// The Service in front of the nodes' API, and its Ingress.
fn service_and_ingress(r: &Resolved) -> (Value, Value) {
    let service = json!({
        "name": r.service_name,
        "type": r.service_type,
        // The Go operator's layout (port = internalPort; the port list is keyed by port, so
        // another port would add a second entry next to the Go one and be rejected), but
        // targeting the port the node really listens on.
        "port": r.internal_port,
        "targetPort": NODE_API_PORT,
        "nodePort": NODE_API_PORT,
        "annotations": if r.service_annotations.is_empty() { Value::Null } else { json!(r.service_annotations) },
    });
    let ingress = json!({
        "enabled": r.ingress_enabled,
        "tls": r.ingress_enabled && r.ingress_tls,
        "hostname": r.ingress_hostname,
        "annotations": if r.ingress_annotations.is_empty() { Value::Null } else { json!(r.ingress_annotations) },
    });
    (service, ingress)
}

/// The CSI paths and the helper sidecars' tuning.
fn csi(r: &Resolved) -> Value {
    json!({
        "kubeletDir": r.csi.kubelet_dir,
        "pluginDir": r.csi.plugin_dir,
        "pluginDirMount": !is_under(&r.csi.plugin_dir, &r.csi.kubelet_dir),
        "deviceDir": r.csi.device_dir,
        "registrarSocketDir": r.csi.registrar_socket_dir,
        "registrationDir": r.csi.registration_dir,
        "registrationPathArg": format!("--kubelet-registration-path={}", r.csi.kubelet_registration_path),
        "statefulset": r.csi.statefulset,
        "helperServiceAccount": if r.csi.statefulset { "storageos-statefulset-sa" } else { "storageos-csi-helper-sa" },
        "provisionerTuning": sidecar_tuning(&r.csi, Some(("30s", 20)), "--worker-threads"),
        "attacherTuning": sidecar_tuning(&r.csi, None, "--worker-threads"),
        "resizerTuning": sidecar_tuning(&r.csi, None, "--workers"),
    })
}

/// The node DaemonSet's and the CSI helper's pods: configuration, placement, container order.
fn node_and_helper(inputs: &Inputs, r: &Resolved, images: &Images) -> (Value, Value) {
    let node_affinity = affinity(&r.node_selector_terms, None);
    let node = json!({
        "config": node_config(r, &inputs.node_env),
        "resources": r.resources,
        "sharedDir": r.shared_dir,
        "deviceDirEnv": r.shared_dir.as_ref().map(|s| format!("{s}/devices")),
        "tolerations": merge_tolerations(node_tolerations(), &r.tolerations),
        "affinity": node_affinity,
        "defaultContainer": !go_defaults::kept_in_go_shape(&[
            &images.csi_node_driver_registrar_container,
            &images.csi_liveness_probe_container,
        ]),
    });
    let helper = json!({
        "tolerations": merge_tolerations(helper_tolerations(), &r.tolerations),
        "affinity": node_affinity,
        "defaultContainer": !go_defaults::kept_in_go_shape(&[
            &images.csi_external_attacher_container,
            &images.csi_external_resizer_container,
        ]),
    });
    (node, helper)
}

/// The api-manager's Deployment: command, environment, placement, probes, client CA.
fn api_manager(inputs: &Inputs, r: &Resolved, images: &Images, go_api_manager: bool, component: &Labels) -> Value {
    let meta = &inputs.cluster.metadata;
    let (command, args) = api_manager_command(r, &images.api_manager_container, go_api_manager);
    let cluster = format!(
        "{}/{}",
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default()
    );
    let helper_pod_tolerations = merge_tolerations(helper_tolerations(), &r.tolerations);
    json!({
        "command": command,
        "args": args,
        "env": api_manager_env(&cluster, &inputs.node_env, go_api_manager),
        "affinity": affinity(
            r.api_manager_node_selector_terms.as_deref().unwrap_or(&r.node_selector_terms),
            Some(spread_over_hosts(component.clone())),
        ),
        "tolerations": merge_tolerations(helper_pod_tolerations, &r.api_manager_tolerations),
        "podSecurityContext": restricted_pod_security(r.is_openshift()),
        // Our api-manager serves /healthz and /readyz (ready once serving webhooks with its
        // certificate, which needs no StorageOS) on the metrics port; the Go image's probe
        // endpoints differ, so it keeps none.
        "probes": !go_api_manager,
        "webhookClientCA": r.webhook_client_ca_config_map.as_ref().map(|name| json!({
            "configMap": name,
            "dir": WEBHOOK_CLIENT_CA_DIR,
        })),
    })
}

/// The scheduler extender's Deployment; `config` is filled in by the caller.
fn scheduler(r: &Resolved, config_api_version: &str) -> Value {
    json!({
        "enabled": !r.disable_scheduler,
        "configVersion": {
            "v1": config_api_version == "v1",
            "v1beta3": config_api_version == "v1beta3",
            "v1beta2": config_api_version == "v1beta2",
            "v1beta1": config_api_version == "v1beta1",
        },
        // Before v1 the default lock was endpoints-based; ours is a Lease (its RBAC).
        "legacyConfig": config_api_version != "v1",
        "name": SCHEDULER_NAME,
        "urlPrefix": format!("{}/v2/k8s/scheduler", r.api_endpoint()),
        "config": Value::Null,
        "podSecurityContext": restricted_pod_security(r.is_openshift()),
    })
}

/// Builds the template values. `scheduler.config`, the rendered kube-scheduler configuration
/// file, is null: the caller renders that file from these values, then sets it.
pub fn values(inputs: &Inputs, r: &Resolved, images: &Images) -> Result<Value, Error> {
    let (go_api_manager, config_api_version) = image_decisions(r, images)?;
    let sets = label_sets(inputs, r);
    let (service, ingress) = service_and_ingress(r);
    let (node, helper) = node_and_helper(inputs, r, images);
    let credentials = match &inputs.secret {
        Some(secret) => secrets::credential_values(secret, r.ingress_enabled && r.ingress_tls)?,
        None => Value::Null,
    };
    let etcd_secret = match (&r.etcd_tls_secret_ref, &inputs.etcd_tls_secret) {
        (Some(_), Some(secret)) => secrets::etcd_values(secret),
        _ => Value::Null,
    };
    // The pod mutator skips the control plane's namespace and its own (so it never waits on
    // itself while the api-manager's pods are created).
    let webhook_excluded: std::collections::BTreeSet<&str> = ["kube-system", r.namespace.as_str()].into();
    Ok(json!({
        "ns": r.namespace,
        "webhookExcludedNamespaces": webhook_excluded,
        "labels": sets.values,
        "images": images,
        "service": service,
        "ingress": ingress,
        "storageClassName": r.storage_class_name,
        "csi": csi(r),
        "node": node,
        "helper": helper,
        "etcdTls": r.etcd_tls_secret_ref.is_some(),
        "etcdSecret": etcd_secret,
        "credentials": credentials,
        "apiManager": api_manager(inputs, r, images, go_api_manager, &sets.api_manager_component),
        "scheduler": scheduler(r, config_api_version),
        "openshift": r.is_openshift(),
        "fencing": !r.disable_fencing,
        "nodeOutOfService": r.node_out_of_service.is_some(),
        // The drain gate's guards, in a namespace of their own (the Go api-manager has none).
        "drainGuard": (!go_api_manager).then(|| json!({
            "namespace": DRAIN_GUARD_NAMESPACE,
            "labels": labels::merged(&sets.common, &labels::restricted_namespace()),
        })),
        "serviceMonitor": inputs.service_monitor_crd,
        "operator": {"namespace": inputs.operator_namespace, "selector": crate::rbac::operator::selector()},
        "rbac": crate::rbac::components::template_values(),
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn plugin_dir_under_kubelet_dir_is_not_mounted_twice() {
        assert!(is_under(
            "/var/lib/kubelet/plugins_registry/storageos",
            "/var/lib/kubelet"
        ));
        assert!(is_under("/var/lib/kubelet", "/var/lib/kubelet/"));
        assert!(!is_under("/var/lib/kubelet-other/x", "/var/lib/kubelet"));
    }
}
