//! Unit tier: the install manifests (`deploy/operator.yaml`) are up to date with the Rust source,
//! no RBAC the project ships or renders uses a wildcard or holds less than it hands out, and the
//! shipped environment pins no kube-scheduler minor.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use serde_json::Value;
use storageos_operator::install::{self, operator_yaml};
use storageos_operator::rbac;
use storageos_operator::render::images::KUBE_SCHEDULER_ENV;
use storageos_operator::render::{self, DEFAULT_OPERATOR_IMAGE, DefaultImages};

fn repo(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML document"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// Rules of every ClusterRole and Role in a YAML stream.
fn rules_in(text: &str) -> Vec<(String, Vec<PolicyRule>)> {
    documents(text)
        .into_iter()
        .filter_map(|d| match d["kind"].as_str() {
            Some("ClusterRole") => {
                let r: ClusterRole = serde_json::from_value(d).unwrap();
                Some((r.metadata.name.unwrap_or_default(), r.rules.unwrap_or_default()))
            }
            Some("Role") => {
                let r: Role = serde_json::from_value(d).unwrap();
                Some((r.metadata.name.unwrap_or_default(), r.rules.unwrap_or_default()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn deploy_operator_yaml_is_what_the_manifests_command_writes() {
    let generated = operator_yaml(DEFAULT_OPERATOR_IMAGE).unwrap();
    let committed = repo("deploy/operator.yaml");
    assert!(
        committed == generated,
        "deploy/operator.yaml is out of date; regenerate it with `cargo run -- manifests --out-dir deploy --olm-dir olm`"
    );
}

#[test]
fn operator_yaml_lists_crds_first_then_the_install_objects() {
    let kinds: Vec<String> = documents(&repo("deploy/operator.yaml"))
        .iter()
        .map(|d| d["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        [
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Deployment",
            "Service",
            "Service",
            "ValidatingWebhookConfiguration"
        ]
    );
}

#[test]
fn no_role_in_deploy_or_in_any_render_golden_has_a_wildcard() {
    let mut streams = vec![("deploy/operator.yaml".to_string(), repo("deploy/operator.yaml"))];
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    for entry in std::fs::read_dir(&golden).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            streams.push((path.display().to_string(), std::fs::read_to_string(&path).unwrap()));
        }
    }
    let mut roles = 0;
    for (file, text) in streams {
        for (name, rules) in rules_in(&text) {
            roles += 1;
            assert!(!rbac::has_wildcard(&rules), "{file}: role {name} has a wildcard");
            for r in &rules {
                for v in ["escalate", "bind", "impersonate"] {
                    assert!(!r.verbs.iter().any(|x| x == v), "{file}: role {name} has {v}");
                }
            }
        }
    }
    assert!(
        roles > 10,
        "expected the operator's and the rendered roles, saw {roles}"
    );
}

#[test]
fn the_operator_may_create_every_role_the_all_fields_cluster_renders() {
    let held = install::build("x").unwrap().cluster_role.rules.unwrap();
    for file in ["tests/golden/all-fields.yaml", "tests/golden/openshift.yaml"] {
        for (name, rules) in rules_in(&repo(file)) {
            let m = rbac::missing(&held, &rules);
            assert!(m.is_empty(), "{file}: creating {name} would need {m:?}");
        }
    }
}

/// The operator may change and delete only the admission objects it renders by name: every
/// one a golden case renders is named in its rules.
#[test]
fn every_admission_object_a_cluster_renders_is_one_the_operator_may_change_by_name() {
    use storageos_operator::rbac::operator::{ADMISSION_POLICIES, WEBHOOK_CONFIGS};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        for doc in serde_yaml::Deserializer::from_str(&std::fs::read_to_string(&path).unwrap()) {
            let Ok(v) = <Value as serde::Deserialize>::deserialize(doc) else {
                continue;
            };
            let name = v["metadata"]["name"].as_str().unwrap_or_default();
            let allowed = match v["kind"].as_str() {
                Some("MutatingWebhookConfiguration") => WEBHOOK_CONFIGS,
                Some("ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding") => ADMISSION_POLICIES,
                _ => continue,
            };
            seen += 1;
            assert!(
                allowed.contains(&name),
                "{}: {name} is not in the operator's named rules",
                path.display()
            );
        }
    }
    assert!(seen > 0, "no admission object in the goldens");
}

/// Every file under `dir`, relative to it, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn olm_bundle_is_what_the_manifests_command_writes() {
    let generated = install::olm::bundle_files(DEFAULT_OPERATOR_IMAGE).unwrap();
    let olm = Path::new(env!("CARGO_MANIFEST_DIR")).join("olm");
    let mut expected: Vec<String> = generated.iter().map(|(f, _)| f.clone()).collect();
    expected.sort();
    assert_eq!(
        files_under(&olm),
        expected,
        "olm/ holds other files than the bundle; regenerate it with `cargo run -- manifests --out-dir deploy --olm-dir olm`"
    );
    for (file, text) in generated {
        assert!(
            repo(&format!("olm/{file}")) == text,
            "olm/{file} is out of date; regenerate it with `cargo run -- manifests --out-dir deploy --olm-dir olm`"
        );
    }
}

#[test]
fn the_bundle_crds_are_the_crds_and_the_csv_carries_the_install_rbac() {
    let docs = documents(&repo(&format!("olm/manifests/{}", install::olm::CSV_FILE)));
    let csv = &docs[0];
    let strategy = &csv["spec"]["install"]["spec"];
    let i = install::build(DEFAULT_OPERATOR_IMAGE).unwrap();
    assert_eq!(
        strategy["clusterPermissions"][0]["rules"],
        serde_json::to_value(i.cluster_role.rules.unwrap()).unwrap()
    );
    assert_eq!(
        strategy["deployments"][0]["spec"],
        install::olm::restricted_v2(serde_json::to_value(i.deployment.spec.unwrap()).unwrap())
    );
    assert!(!rbac::has_wildcard(
        &serde_json::from_value::<Vec<PolicyRule>>(strategy["clusterPermissions"][0]["rules"].clone()).unwrap()
    ));
    // The api-manager's webhooks stay operator-managed; OLM serves only the operator's own,
    // which refuses the kinds outside the watched namespaces and a second StorageOSCluster,
    // and never blocks (Ignore).
    let hooks = csv["spec"]["webhookdefinitions"].as_array().unwrap();
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0]["type"], "ValidatingAdmissionWebhook");
    assert_eq!(hooks[0]["deploymentName"], strategy["deployments"][0]["name"]);
    assert_eq!(hooks[0]["failurePolicy"], "Ignore");
    assert_eq!(hooks[0]["targetPort"], install::WEBHOOK_PORT);
    assert_eq!(
        hooks[0]["rules"][0]["resources"],
        serde_json::json!(["storageosclusters", "storageosupgrades", "jobs"])
    );
    for (file, _) in storageos_operator::crd::all() {
        assert_eq!(
            documents(&repo(&format!("olm/manifests/{file}"))),
            documents(&repo(&format!("crds/{file}"))),
            "olm/manifests/{file} differs from crds/{file}"
        );
    }
    // alm-examples are valid objects of the owned kinds.
    let examples: Vec<Value> =
        serde_json::from_str(csv["metadata"]["annotations"]["alm-examples"].as_str().unwrap()).unwrap();
    let _: storageos_operator::crd::StorageOSCluster = serde_json::from_value(examples[0].clone()).unwrap();
    let _: storageos_operator::crd::StorageOSUpgrade = serde_json::from_value(examples[1].clone()).unwrap();
    let _: storageos_operator::crd::Job = serde_json::from_value(examples[2].clone()).unwrap();
}

#[test]
fn helm_chart_and_kustomize_base_are_what_the_manifests_command_writes() {
    let regenerate = "regenerate them with `cargo run -- manifests --out-dir deploy --olm-dir olm`";
    let chart = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(install::helm::CHART_DIR);
    let generated = install::helm::chart_files(DEFAULT_OPERATOR_IMAGE).unwrap();
    let mut expected: Vec<String> = generated.iter().map(|(f, _)| f.clone()).collect();
    expected.sort();
    assert_eq!(
        files_under(&chart),
        expected,
        "deploy/helm/storageos-operator holds other files; {regenerate}"
    );
    for (file, text) in generated {
        assert!(
            repo(&format!("deploy/{}/{file}", install::helm::CHART_DIR)) == text,
            "deploy/{}/{file} is out of date; {regenerate}",
            install::helm::CHART_DIR
        );
    }
    assert!(
        repo("deploy/kustomization.yaml") == install::helm::kustomization_yaml(),
        "deploy/kustomization.yaml is out of date; {regenerate}"
    );
    assert!(
        repo(&format!("deploy/{}", install::helm::KUSTOMIZE_CONFIG)) == install::helm::kustomize_config(),
        "deploy/{} is out of date; {regenerate}",
        install::helm::KUSTOMIZE_CONFIG
    );
    // The chart's CRDs are the CRDs.
    for (file, _) in storageos_operator::crd::all() {
        assert_eq!(
            documents(&repo(&format!("deploy/{}/crds/{file}", install::helm::CHART_DIR))),
            documents(&repo(&format!("crds/{file}"))),
        );
    }
}

/// The `RELATED_IMAGE_*` values of a pod spec's first container, as the operator reads them.
fn related_image_env(pod: &Value) -> BTreeMap<String, String> {
    pod["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?.to_string(), e["value"].as_str()?.to_string())))
        .filter(|(name, _)| name.starts_with("RELATED_IMAGE_"))
        .collect()
}

/// The image of the scheduler extender's kube-scheduler, rendered for `tests/golden/inputs/defaults.yaml`
/// on Kubernetes `version` by an operator with `env`, and `spec.images.kubeSchedulerContainer`
/// set to `pin` when given.
fn scheduler_image(env: &BTreeMap<String, String>, version: &str, pin: Option<&str>) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/inputs/defaults.yaml");
    let mut inputs = render::inputs_from_files(&path, &[], Some(version), "op:v1").unwrap();
    inputs.default_images = DefaultImages::from_env_map(env);
    if let Some(pin) = pin {
        inputs
            .cluster
            .spec
            .images
            .get_or_insert_default()
            .kube_scheduler_container = Some(pin.into());
    }
    let objects: Vec<Value> = render::build(&inputs)
        .unwrap()
        .iter()
        .map(|o| o.to_value().unwrap())
        .collect();
    let scheduler = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "storageos-scheduler")
        .expect("the scheduler Deployment");
    scheduler["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn with_the_shipped_environment_the_scheduler_follows_each_kubernetes_minor() {
    let install = documents(&repo("deploy/operator.yaml"));
    let deployment = install.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let csv: Value =
        serde_yaml::from_str(&repo("olm/manifests/storageos-operator.clusterserviceversion.yaml")).unwrap();
    // The chart's Deployment is operator.yaml's (tests/dist_chart.rs renders it); its template
    // must not set the variable either.
    let chart = repo("deploy/helm/storageos-operator/templates/deployment.yaml");
    assert!(!chart.contains(KUBE_SCHEDULER_ENV), "the chart pins the kube-scheduler");
    for (source, pod) in [
        ("deploy/operator.yaml", &deployment["spec"]["template"]["spec"]),
        (
            "the CSV",
            &csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"],
        ),
    ] {
        let env = related_image_env(pod);
        assert!(env.contains_key("RELATED_IMAGE_STORAGEOS_NODE"), "{source}: {env:?}");
        for (version, tag) in [
            ("1.33.2", "v1.33.5"),
            ("1.34.1", "v1.34.0"),
            ("1.35.4", "v1.35.0"),
            ("1.36.3", "v1.36.0"),
        ] {
            assert_eq!(
                scheduler_image(&env, version, None),
                format!("registry.k8s.io/kube-scheduler:{tag}"),
                "{source} on Kubernetes {version}"
            );
        }
        // A user's value still pins it: in the operator's environment, or in the CR.
        let mut pinned = env.clone();
        pinned.insert(KUBE_SCHEDULER_ENV.into(), "mirror/kube-scheduler:v1.35.2".into());
        assert_eq!(
            scheduler_image(&pinned, "1.36.3", None),
            "mirror/kube-scheduler:v1.35.2"
        );
        assert_eq!(
            scheduler_image(&env, "1.36.3", Some("mirror/kube-scheduler:v1.35.9")),
            "mirror/kube-scheduler:v1.35.9"
        );
    }
    // Every image the default can be is in the bundle's relatedImages, for mirrors.
    let related: Vec<&str> = csv["spec"]["relatedImages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["image"].as_str())
        .collect();
    for minor in 33..=36 {
        assert!(
            related
                .iter()
                .any(|i| i.starts_with(&format!("registry.k8s.io/kube-scheduler:v1.{minor}."))),
            "{related:?}"
        );
    }
}
