//! What each spec toggle does to the rendered objects, asserted field by field (the golden files
//! show everything; these name the behaviour that matters).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code may fail loudly

use std::path::Path;

use serde_json::{Value, json};
use storageos_operator::render;

fn objects(case: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/inputs/{case}.yaml"));
    let inputs = render::inputs_from_files(&path, &[], None, "op:v1").unwrap();
    render::build(&inputs)
        .unwrap()
        .iter()
        .map(|o| o.to_value().unwrap())
        .collect()
}

fn find<'a>(objs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objs.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn get<'a>(objs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    find(objs, kind, name).unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn pod_spec(o: &Value) -> &Value {
    &o["spec"]["template"]["spec"]
}

/// The kube-scheduler configuration file in the scheduler's ConfigMap.
fn scheduler_config(objs: &[Value]) -> Value {
    let text = get(objs, "ConfigMap", "storageos-scheduler-policy")["data"]["config.yaml"]
        .as_str()
        .unwrap();
    serde_yaml::from_str(text).unwrap()
}

fn api_manager_args(objs: &[Value]) -> Vec<String> {
    serde_json::from_value(pod_spec(get(objs, "Deployment", "storageos-api-manager"))["containers"][0]["args"].clone())
        .unwrap()
}

#[test]
fn defaults_render_the_go_operator_shape() {
    let objs = objects("defaults");
    let ds = get(&objs, "DaemonSet", "storageos-daemonset");
    assert_eq!(ds["metadata"]["namespace"], "kube-system");
    assert_eq!(ds["spec"]["updateStrategy"], json!({"type": "OnDelete"}));
    let spec = pod_spec(ds);
    assert_eq!(spec["initContainers"][0]["name"], "storageos-init");
    let names: Vec<_> = spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].clone())
        .collect();
    assert_eq!(names, ["storageos", "csi-driver-registrar", "csi-liveness-probe"]);
    assert_eq!(spec["volumes"].as_array().unwrap().len(), 10);
    assert_eq!(spec["priorityClassName"], "system-node-critical");
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(
        ds["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/default-logs-container"],
        "storageos"
    );
    assert!(find(&objs, "Deployment", "storageos-csi-helper").is_some());
    assert!(find(&objs, "StatefulSet", "storageos-statefulset").is_none());
    assert!(find(&objs, "ClusterRole", "storageos:openshift-scc").is_none());
    assert!(find(&objs, "ClusterRole", "storageos:pod-fencer").is_some());
    assert!(find(&objs, "ServiceMonitor", "storageos-api-manager-metrics").is_none());
    assert!(find(&objs, "Ingress", "storageos-ingress").is_none());
    let webhook = get(&objs, "MutatingWebhookConfiguration", "storageos-mutating-webhook");
    for w in webhook["webhooks"].as_array().unwrap() {
        assert!(
            w["clientConfig"].get("caBundle").is_none(),
            "caBundle belongs to the api-manager"
        );
        // Only PVCs asking for encryption fail closed.
        let policy = if w["name"] == "encrypted-pvc-mutator.storageos.com" {
            "Fail"
        } else {
            "Ignore"
        };
        assert_eq!(w["failurePolicy"], policy, "{}", w["name"]);
    }
    let am = get(&objs, "Deployment", "storageos-api-manager");
    assert_eq!(am["spec"]["replicas"], 2);
    assert_eq!(pod_spec(am)["containers"][0]["image"], "op:v1");
    assert_eq!(
        pod_spec(am)["containers"][0]["command"],
        json!(["storageos-operator", "api-manager"])
    );
    assert_eq!(pod_spec(am)["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod_spec(am)["containers"][0]["securityContext"]["readOnlyRootFilesystem"],
        true
    );
    assert!(api_manager_args(&objs).contains(&"--scheduler-name=storageos-scheduler".to_string()));
    assert!(api_manager_args(&objs).contains(&"--api-endpoint=http://storageos.kube-system.svc:5705".to_string()));
    let sc = get(&objs, "StorageClass", "fast");
    assert_eq!(sc["provisioner"], "csi.storageos.com");
    assert_eq!(sc["allowVolumeExpansion"], true);
    assert_eq!(
        get(&objs, "CSIDriver", "csi.storageos.com")["spec"]["attachRequired"],
        true
    );
    // The node Service selects the node pods, the webhook Service the api-manager pods.
    assert_eq!(
        get(&objs, "Service", "storageos")["spec"]["selector"],
        json!({"app": "storageos", "kind": "daemonset"})
    );
    assert_eq!(get(&objs, "Service", "storageos-webhook")["spec"]["type"], "ClusterIP");
}

#[test]
fn disable_scheduler_removes_the_extender_and_empties_the_scheduler_name() {
    let objs = objects("disable-scheduler");
    for (kind, name) in [
        ("Deployment", "storageos-scheduler"),
        ("ConfigMap", "storageos-scheduler-policy"),
        ("ClusterRole", "storageos:scheduler-extender"),
        ("ClusterRoleBinding", "storageos:scheduler-extender"),
        ("ServiceAccount", "storageos-scheduler-sa"),
    ] {
        assert!(find(&objs, kind, name).is_none(), "{kind} {name} still rendered");
    }
    let args = api_manager_args(&objs);
    assert!(args.contains(&"--scheduler-name=".to_string()), "{args:?}");
    assert!(
        !args.iter().any(|a| a.contains("\"\"")),
        "a literal \"\" is not empty: {args:?}"
    );
}

#[test]
fn scheduler_extender_uses_a_kube_scheduler_configuration() {
    let objs = objects("service");
    let config = scheduler_config(&objs);
    assert_eq!(config["kind"], "KubeSchedulerConfiguration");
    assert_eq!(config["profiles"][0]["schedulerName"], "storageos-scheduler");
    let extender = &config["extenders"][0];
    assert_eq!(
        extender["urlPrefix"],
        "http://sos-api.kube-system.svc:8443/v2/k8s/scheduler"
    );
    assert_eq!(
        (extender["filterVerb"].clone(), extender["prioritizeVerb"].clone()),
        (json!("filter"), json!("prioritize"))
    );
    assert_eq!(extender["weight"], 1000);
    let scheduler = get(&objs, "Deployment", "storageos-scheduler");
    assert_eq!(
        pod_spec(scheduler)["containers"][0]["image"],
        "registry.k8s.io/kube-scheduler:v1.33.5"
    );
}

#[test]
fn service_port_is_internal_port_and_targets_the_node_as_the_go_operator_had_it() {
    let objs = objects("service");
    let svc = get(&objs, "Service", "sos-api");
    assert_eq!(svc["spec"]["type"], "LoadBalancer");
    // Go layout: port = internalPort (8443); the node listens on 5705 whatever externalPort says.
    assert_eq!(svc["spec"]["ports"][0]["port"], 8443);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 5705);
    let node = &pod_spec(get(&objs, "DaemonSet", "storageos-daemonset"))["containers"][0];
    assert_eq!(
        node["ports"],
        json!([{"name": "api", "containerPort": 5705, "protocol": "TCP"}])
    );
    assert!(api_manager_args(&objs).contains(&"--api-endpoint=http://sos-api.kube-system.svc:8443".to_string()));
    // The webhook does not inherit the API Service type.
    assert_eq!(get(&objs, "Service", "storageos-webhook")["spec"]["type"], "ClusterIP");
}

#[test]
fn disable_fencing_removes_the_fencer_rbac_and_turns_the_fencer_off() {
    let with = objects("defaults");
    let without = objects("disable-fencing");
    assert!(find(&without, "ClusterRole", "storageos:pod-fencer").is_none());
    assert!(find(&without, "ClusterRoleBinding", "storageos:pod-fencer").is_none());
    assert_eq!(with.len(), without.len() + 2);
    // The api-manager's own fencer is turned off too.
    assert!(api_manager_args(&without).contains(&"--enable-node-fencing=false".to_string()));
    assert!(!api_manager_args(&with).iter().any(|a| a.contains("fencing")));
}

#[test]
fn openshift_adds_the_scc_role_for_node_and_helper() {
    let objs = objects("openshift");
    let binding = get(&objs, "ClusterRoleBinding", "storageos:openshift-scc");
    let subjects: Vec<_> = binding["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert_eq!(subjects, ["storageos-daemonset-sa", "storageos-csi-helper-sa"]);
    let am = get(&objs, "Deployment", "storageos-api-manager");
    assert!(
        pod_spec(am)["securityContext"].get("runAsUser").is_none(),
        "OpenShift assigns the UID"
    );
}

#[test]
fn statefulset_strategy_swaps_the_helper_kind_and_account() {
    let objs = objects("statefulset");
    assert!(find(&objs, "Deployment", "storageos-csi-helper").is_none());
    let sts = get(&objs, "StatefulSet", "storageos-statefulset");
    assert_eq!(pod_spec(sts)["serviceAccountName"], "storageos-statefulset-sa");
    assert_eq!(sts["spec"]["selector"]["matchLabels"]["kind"], "statefulset");
    assert!(find(&objs, "ServiceAccount", "storageos-statefulset-sa").is_some());
    assert!(find(&objs, "ServiceAccount", "storageos-csi-helper-sa").is_none());
}

#[test]
fn node_selection_reaches_every_workload_and_keeps_the_api_manager_spread() {
    let objs = objects("node-selection");
    let mut terms = None;
    for (kind, name) in [
        ("DaemonSet", "storageos-daemonset"),
        ("Deployment", "storageos-csi-helper"),
        ("Deployment", "storageos-api-manager"),
        ("Deployment", "storageos-scheduler"),
    ] {
        let affinity = &pod_spec(get(&objs, kind, name))["affinity"];
        let t = &affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
        assert_eq!(t.as_array().map(Vec::len), Some(2), "{kind} {name}");
        assert_eq!(*terms.get_or_insert_with(|| t.clone()), *t);
        let tolerations = pod_spec(get(&objs, kind, name))["tolerations"]
            .as_array()
            .unwrap()
            .clone();
        assert!(tolerations.iter().any(|t| t["key"] == "dedicated"), "{kind} {name}");
    }
    let am = pod_spec(get(&objs, "Deployment", "storageos-api-manager"));
    assert_eq!(
        am["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"],
        "kubernetes.io/hostname"
    );
    // The user's not-ready toleration replaced the helper default (30 s).
    let helper = pod_spec(get(&objs, "Deployment", "storageos-csi-helper"));
    let not_ready: Vec<_> = helper["tolerations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["key"] == "node.kubernetes.io/not-ready")
        .collect();
    assert_eq!(not_ready.len(), 1);
    assert_eq!(not_ready[0]["tolerationSeconds"], 300);
}

#[test]
fn shared_dir_adds_env_mount_and_config_key() {
    let objs = objects("shared-dir");
    let shared = "/var/lib/kubelet/plugins/kubernetes.io~storageos";
    let node = &pod_spec(get(&objs, "DaemonSet", "storageos-daemonset"))["containers"][0];
    assert!(
        node["env"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "DEVICE_DIR", "value": format!("{shared}/devices")}))
    );
    assert!(node["volumeMounts"].as_array().unwrap().contains(&json!({
        "name": "shared", "mountPath": shared, "mountPropagation": "Bidirectional"
    })));
    assert_eq!(
        get(&objs, "ConfigMap", "storageos-node-config")["data"]["DEVICE_DIR"],
        format!("{shared}/devices")
    );
}

#[test]
fn config_keys_follow_debug_telemetry_and_tcmu() {
    let debug = objects("debug");
    assert_eq!(
        get(&debug, "ConfigMap", "storageos-node-config")["data"]["LOG_LEVEL"],
        "debug"
    );
    let t = objects("disable-telemetry");
    let data = &get(&t, "ConfigMap", "storageos-node-config")["data"];
    for key in [
        "DISABLE_TELEMETRY",
        "DISABLE_VERSION_CHECK",
        "DISABLE_CRASH_REPORTING",
        "DISABLE_TCMU",
        "FORCE_TCMU",
    ] {
        assert_eq!(data[key], "true", "{key}");
    }
}

#[test]
fn custom_namespace_moves_every_namespaced_object_and_reference() {
    let objs = objects("custom-namespace");
    assert!(find(&objs, "Namespace", "storageos").is_some());
    for o in &objs {
        if let Some(ns) = o["metadata"]["namespace"].as_str() {
            // The drain guards keep a namespace of their own wherever StorageOS runs.
            let own = ns == "storageos-drain-guard" && o["metadata"]["name"] == "storageos:api-manager-drain-guard";
            assert!(ns == "storageos" || own, "{}: {ns}", o["metadata"]["name"]);
        }
    }
    // The pod mutator's namespaceSelector names kube-system on purpose (it skips it).
    let mut objs = objs;
    for o in &mut objs {
        if o["kind"] == "MutatingWebhookConfiguration" {
            for w in o["webhooks"].as_array_mut().unwrap() {
                w.as_object_mut().unwrap().remove("namespaceSelector");
            }
        }
    }
    let text = serde_json::to_string(&objs).unwrap();
    assert!(!text.contains("kube-system"), "a reference still points at kube-system");
}

#[test]
fn csi_timeout_and_workers_reach_every_helper_sidecar_and_unset_keep_the_go_arguments() {
    let args = |objs: &[Value], container: &str| -> Vec<String> {
        let pod = pod_spec(get(objs, "Deployment", "storageos-csi-helper"));
        let c = pod["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == container)
            .unwrap();
        serde_json::from_value(c["args"].clone()).unwrap()
    };
    let tuning = |a: Vec<String>| -> Vec<String> {
        a.into_iter()
            .filter(|a| a.starts_with("--timeout") || a.starts_with("--worker"))
            .collect()
    };
    let defaults = objects("defaults");
    assert_eq!(
        tuning(args(&defaults, "csi-external-provisioner")),
        ["--timeout=30s", "--worker-threads=20"]
    );
    assert!(tuning(args(&defaults, "csi-external-attacher")).is_empty());
    assert!(tuning(args(&defaults, "csi-external-resizer")).is_empty());

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/inputs/defaults.yaml");
    let mut inputs = render::inputs_from_files(&path, &[], None, "op:v1").unwrap();
    let csi = inputs.cluster.spec.csi.get_or_insert_with(Default::default);
    csi.timeout = Some("2m".into());
    csi.worker_threads = Some(40);
    let tuned: Vec<Value> = render::build(&inputs)
        .unwrap()
        .iter()
        .map(|o| o.to_value().unwrap())
        .collect();
    assert_eq!(
        tuning(args(&tuned, "csi-external-provisioner")),
        ["--timeout=2m", "--worker-threads=40"]
    );
    assert_eq!(
        tuning(args(&tuned, "csi-external-attacher")),
        ["--timeout=2m", "--worker-threads=40"]
    );
    assert_eq!(
        tuning(args(&tuned, "csi-external-resizer")),
        ["--timeout=2m", "--workers=40"]
    );
}

#[test]
fn go_api_manager_image_runs_its_own_binary() {
    let objs = objects("go-api-manager");
    let c = &pod_spec(get(&objs, "Deployment", "storageos-api-manager"))["containers"][0];
    assert_eq!(c["image"], "storageos/api-manager:v1.2.12");
    assert_eq!(c["command"], json!(["/manager"]));
}

#[test]
fn a_webhook_client_ca_with_a_go_api_manager_image_is_refused_naming_both_fields() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/inputs/go-api-manager.yaml");
    let mut inputs = render::inputs_from_files(&path, &[], None, "op:v1").unwrap();
    inputs.cluster.spec.api_manager = Some(storageos_operator::crd::StorageOSClusterApiManager {
        webhook_client_ca_config_map: Some("ca".into()),
        webhook_client_names: None,
    });
    let e = render::build(&inputs).unwrap_err().to_string();
    assert!(
        e.contains("webhookClientCAConfigMap") && e.contains("apiManagerContainer"),
        "{e}"
    );
}

#[test]
fn go_written_back_images_render_like_no_images_but_keep_the_go_sidecars() {
    // The input files differ only in spec.images; the rendered objects differ only in the four
    // CSI sidecar images, which an adopted cluster keeps, and in the default-container
    // annotation, which a template in the Go shape goes without (its pod templates do not change).
    let text = |case| serde_json::to_string(&objects(case)).unwrap();
    let mut go_era = text("go-era-images");
    for (go, ours) in [
        (
            "quay.io/k8scsi/csi-node-driver-registrar:v2.1.0",
            "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.1.0",
        ),
        (
            "quay.io/k8scsi/csi-attacher:v3.1.0",
            "registry.k8s.io/sig-storage/csi-attacher:v3.1.0",
        ),
        (
            "quay.io/k8scsi/csi-resizer:v1.1.0",
            "registry.k8s.io/sig-storage/csi-resizer:v1.1.0",
        ),
        (
            "quay.io/k8scsi/livenessprobe:v2.2.0",
            "registry.k8s.io/sig-storage/livenessprobe:v2.2.0",
        ),
    ] {
        assert!(go_era.contains(go), "{go} is not kept");
        go_era = go_era.replace(go, ours);
    }
    let ours = text("defaults")
        .replace(r#""kubectl.kubernetes.io/default-container":"storageos","#, "")
        .replace(
            r#""annotations":{"kubectl.kubernetes.io/default-container":"csi-external-provisioner"},"#,
            "",
        );
    assert_eq!(go_era, ours);
}

#[test]
fn a_pinned_old_scheduler_reads_the_config_version_of_its_release() {
    let objs = objects("old-scheduler");
    let config = scheduler_config(&objs);
    assert_eq!(config["apiVersion"], "kubescheduler.config.k8s.io/v1beta2");
    assert_eq!(
        scheduler_config(&objects("defaults"))["apiVersion"],
        "kubescheduler.config.k8s.io/v1"
    );
    assert_eq!(config["leaderElection"]["resourceLock"], "leases");
    assert_eq!(
        pod_spec(get(&objs, "Deployment", "storageos-scheduler"))["containers"][0]["image"],
        "registry.k8s.io/kube-scheduler:v1.22.17"
    );
}

/// The defaults case rendered with `labels` on the StorageOSCluster.
fn with_cr_labels(labels: &[(&str, &str)]) -> Vec<Value> {
    with_cluster(|c| c.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()))
}

#[test]
fn cluster_labelled_aggregate_to_view_renders_no_clusterrole_with_that_label() {
    let objs = with_cr_labels(&[
        ("rbac.authorization.k8s.io/aggregate-to-view", "true"),
        ("rbac.authorization.k8s.io/aggregate-to-admin", "true"),
        ("node-role.kubernetes.io/control-plane", ""),
        ("team", "storage"),
    ]);
    let roles: Vec<&Value> = objs.iter().filter(|o| o["kind"] == "ClusterRole").collect();
    assert!(!roles.is_empty());
    for o in &objs {
        let labels = o["metadata"]["labels"].as_object().cloned().unwrap_or_default();
        assert!(
            labels
                .keys()
                .all(|k| !k.starts_with("rbac.authorization.k8s.io/") && !k.starts_with("node-role.")),
            "{} {} carries a reserved label: {labels:?}",
            o["kind"],
            o["metadata"]["name"]
        );
    }
    // Other CR labels are still copied, but not onto RBAC objects.
    assert!(roles.iter().all(|r| r["metadata"]["labels"].get("team").is_none()));
    assert_eq!(
        get(&objs, "DaemonSet", "storageos-daemonset")["metadata"]["labels"]["team"],
        "storage"
    );
}

#[test]
fn cr_labels_never_reach_rbac_objects() {
    let objs = with_cr_labels(&[
        ("example.com/aggregate-to-support", "true"),
        ("olm.opgroup.permissions/aggregate-to-admin", "true"),
        ("app", "storageos"),
    ]);
    let rbac: Vec<&Value> = objs
        .iter()
        .filter(|o| ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"].contains(&o["kind"].as_str().unwrap()))
        .collect();
    assert!(rbac.len() > 10, "{}", rbac.len());
    for o in rbac {
        let labels = o["metadata"]["labels"].as_object().unwrap();
        assert!(
            !labels.contains_key("example.com/aggregate-to-support")
                && !labels.contains_key("olm.opgroup.permissions/aggregate-to-admin"),
            "{} {} carries a CR label: {labels:?}",
            o["kind"],
            o["metadata"]["name"]
        );
        // The operator's own labels stay.
        assert_eq!(labels["app"], "storageos");
    }
}

#[test]
fn the_pod_mutator_skips_system_namespaces_and_pods_without_pvcs() {
    let objs = objects("custom-namespace");
    let mwc = get(&objs, "MutatingWebhookConfiguration", "storageos-mutating-webhook");
    let hooks = mwc["webhooks"].as_array().unwrap();
    let hook = |name: &str| hooks.iter().find(|h| h["name"] == name).unwrap();
    let ns = get(&objs, "DaemonSet", "storageos-daemonset")["metadata"]["namespace"].clone();
    let pods = hook("pod-mutator.storageos.com");
    assert_eq!(
        pods["namespaceSelector"]["matchExpressions"][0],
        json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", ns]})
    );
    assert!(
        pods["matchConditions"][0]["expression"]
            .as_str()
            .unwrap()
            .contains("persistentVolumeClaim")
    );
    assert_eq!(pods["failurePolicy"], "Ignore");
    // PVCs whose label asks for encryption fail closed, every other PVC fails open.
    let plain = hook("pvc-mutator.storageos.com");
    let encrypted = hook("encrypted-pvc-mutator.storageos.com");
    assert_eq!(
        (plain["failurePolicy"].as_str(), encrypted["failurePolicy"].as_str()),
        (Some("Ignore"), Some("Fail"))
    );
    let selector = |h: &Value| h["objectSelector"]["matchExpressions"][0].clone();
    assert_eq!(selector(plain)["operator"], "NotIn");
    assert_eq!(selector(encrypted)["operator"], "In");
    assert_eq!(selector(plain)["values"], selector(encrypted)["values"]);
    assert_eq!(plain["clientConfig"], encrypted["clientConfig"]);
}

#[test]
fn our_api_manager_has_health_probes_and_the_go_image_none() {
    let probes = |objs: &[Value]| {
        let c = pod_spec(get(objs, "Deployment", "storageos-api-manager"))["containers"][0].clone();
        (
            c["livenessProbe"]["httpGet"]["path"].clone(),
            c["readinessProbe"]["httpGet"]["path"].clone(),
        )
    };
    assert_eq!(probes(&objects("defaults")), (json!("/healthz"), json!("/readyz")));
    assert_eq!(probes(&objects("go-api-manager")), (Value::Null, Value::Null));
}

/// The defaults rendered with `edit` applied to the cluster's spec first.
fn with_spec(edit: impl FnOnce(&mut storageos_operator::crd::StorageOSClusterSpec)) -> Vec<Value> {
    with_cluster(|c| edit(&mut c.spec))
}

/// The defaults rendered with `edit` applied to the cluster first.
fn with_cluster(edit: impl FnOnce(&mut storageos_operator::crd::StorageOSCluster)) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/inputs/defaults.yaml");
    let mut inputs = render::inputs_from_files(&path, &[], None, "op:v1").unwrap();
    edit(&mut inputs.cluster);
    render::build(&inputs)
        .unwrap()
        .iter()
        .map(|o| o.to_value().unwrap())
        .collect()
}

#[test]
fn automatic_out_of_service_renders_its_flags_and_the_node_patch_role_only_when_on() {
    use storageos_operator::crd::StorageOSClusterNodeOutOfService as Oos;
    let off = objects("defaults");
    assert!(find(&off, "ClusterRole", "storageos:api-manager-out-of-service").is_none());
    assert!(!api_manager_args(&off).iter().any(|a| a.contains("out-of-service")));
    let not_automatic = with_spec(|s| {
        s.node_out_of_service = Some(Oos {
            automatic: Some(false),
            offline_polls: Some(9),
            cool_down: None,
        })
    });
    assert_eq!(not_automatic, off, "automatic: false is the default");

    let on = with_spec(|s| {
        s.node_out_of_service = Some(Oos {
            automatic: Some(true),
            ..Oos::default()
        })
    });
    let args = api_manager_args(&on);
    for flag in [
        "--enable-node-out-of-service=true",
        "--node-out-of-service-offline-polls=3",
        "--node-out-of-service-cool-down=5m",
    ] {
        assert!(args.contains(&flag.to_string()), "{flag} in {args:?}");
    }
    let role = get(&on, "ClusterRole", "storageos:api-manager-out-of-service");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}])
    );
    let binding = get(&on, "ClusterRoleBinding", "storageos:api-manager-out-of-service");
    assert_eq!(binding["subjects"][0]["name"], "storageos-api-manager-sa");
    assert_eq!(on.len(), off.len() + 2);
    let tuned = with_spec(|s| {
        s.node_out_of_service = Some(Oos {
            automatic: Some(true),
            offline_polls: Some(6),
            cool_down: Some("10m".into()),
        })
    });
    let args = api_manager_args(&tuned);
    assert!(
        args.contains(&"--node-out-of-service-offline-polls=6".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--node-out-of-service-cool-down=10m".to_string()),
        "{args:?}"
    );
}

#[test]
fn the_drain_gate_renders_its_policy_hold_and_a_restricted_namespace_of_its_own() {
    use storageos_operator::crd::{DrainPolicy, StorageOSClusterNodeMaintenance as Maintenance};
    let defaults = objects("defaults");
    let args = api_manager_args(&defaults);
    for flag in [
        "--drain-guard-namespace=storageos-drain-guard",
        "--drain-policy=BlockIfReplicatedVolumeAtRisk",
    ] {
        assert!(args.contains(&flag.to_string()), "{flag} in {args:?}");
    }
    assert!(
        !args.iter().any(|a| a.starts_with("--drain-max-hold")),
        "no hold by default"
    );
    // The guards' namespace: Pod Security restricted, and the api-manager's pod and budget
    // rights there and in no other namespace.
    let ns = get(&defaults, "Namespace", "storageos-drain-guard");
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    let roles: Vec<&serde_json::Value> = defaults
        .iter()
        .filter(|o| o["kind"] == "Role" && o["metadata"]["name"] == "storageos:api-manager-drain-guard")
        .collect();
    assert_eq!(roles.len(), 1);
    assert_eq!(roles[0]["metadata"]["namespace"], "storageos-drain-guard");
    let binding = get(&defaults, "RoleBinding", "storageos:api-manager-drain-guard");
    assert_eq!(binding["metadata"]["namespace"], "storageos-drain-guard");
    assert_eq!(binding["subjects"][0]["namespace"], "kube-system");
    for o in &defaults {
        let pods = o["rules"].as_array().into_iter().flatten().any(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|x| x == "pods"))
                && r["verbs"]
                    .as_array()
                    .is_some_and(|vs| vs.iter().any(|v| v == "create" || v == "patch"))
        });
        if pods && o["kind"] == "Role" {
            assert_eq!(o["metadata"]["namespace"], "storageos-drain-guard", "{o}");
        }
        assert!(!(pods && o["kind"] == "ClusterRole"), "a ClusterRole writes pods: {o}");
    }

    let tuned = with_spec(|s| {
        s.node_maintenance = Some(Maintenance {
            drain_policy: Some(DrainPolicy::BlockLastCopy),
            max_drain_hold: Some("30m".into()),
        })
    });
    let args = api_manager_args(&tuned);
    for flag in ["--drain-policy=BlockLastCopy", "--drain-max-hold=30m"] {
        assert!(args.contains(&flag.to_string()), "{flag} in {args:?}");
    }
}
