//! The OLM bundle (`olm/`): a ClusterServiceVersion built from the same install objects as
//! `deploy/operator.yaml` (its Deployment spec, ClusterRole rules and leader-election Role rules),
//! the three CRDs, the metrics Service, `metadata/annotations.yaml` and `bundle.Dockerfile`.
//! docs/olm.md says what OLM and its validators require and why each field is what it is.

use base64::Engine;
use serde_json::{Value, json};

use super::{Error, Install, NAME, build, labels};
use crate::crd;
use crate::render::images::{BUILTIN_IMAGES, KUBE_SCHEDULER_ENV, kube_scheduler_images};

/// OLM package name (one package, one operator).
pub const PACKAGE: &str = "storageos-operator";
/// The channel this bundle is published to (a first release of the rewrite: `candidate`).
pub const CHANNEL: &str = "candidate";
/// Oldest Kubernetes the operator is tested against; OLM parses it as MAJOR.MINOR.PATCH.
pub const MIN_KUBE_VERSION: &str = "1.33.0";
/// The crate version is the operator version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// File name of the CSV under `manifests/`.
pub const CSV_FILE: &str = "storageos-operator.clusterserviceversion.yaml";

/// `storageos-operator.v<version>`, the form OLM and its validators expect.
pub fn csv_name() -> String {
    format!("{PACKAGE}.v{VERSION}")
}

/// The examples the console offers as "create" templates; each is a file of `deploy/examples/`
/// that the tests apply.
const EXAMPLES: [&str; 5] = [
    include_str!("../../../../deploy/examples/storageoscluster.yaml"),
    include_str!("../../../../deploy/examples/storageosupgrade.yaml"),
    include_str!("../../../../deploy/examples/job-cleanup.yaml"),
    // OLM's validator wants an example of every owned kind, also of the read-only mirrors the
    // api-manager writes (listed as internal objects, so the console offers no "create").
    "{apiVersion: api.storageos.com/v1, kind: Node, metadata: {name: node-1}, spec: {}}",
    "{apiVersion: api.storageos.com/v1, kind: Volume, metadata: {name: pvc-1}, spec: {}}",
];

/// The bundle's icon: a small stack of disks.
const ICON_SVG: &str = r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64"><rect width="64" height="64" rx="12" fill="#1d3f72"/><g fill="none" stroke="#fff" stroke-width="3"><ellipse cx="32" cy="17" rx="16" ry="6"/><path d="M16 17v30c0 3.3 7.2 6 16 6s16-2.7 16-6V17"/><path d="M16 27c0 3.3 7.2 6 16 6s16-2.7 16-6M16 37c0 3.3 7.2 6 16 6s16-2.7 16-6"/></g></svg>"##;

/// The bundle annotations, in `metadata/annotations.yaml` and as `bundle.Dockerfile` labels.
pub fn annotations() -> Vec<(&'static str, &'static str)> {
    vec![
        ("operators.operatorframework.io.bundle.mediatype.v1", "registry+v1"),
        ("operators.operatorframework.io.bundle.manifests.v1", "manifests/"),
        ("operators.operatorframework.io.bundle.metadata.v1", "metadata/"),
        ("operators.operatorframework.io.bundle.package.v1", PACKAGE),
        ("operators.operatorframework.io.bundle.channels.v1", CHANNEL),
        ("operators.operatorframework.io.bundle.channel.default.v1", CHANNEL),
    ]
}

/// The `alm-examples` objects (namespace left to the user, as the console expects).
pub fn examples() -> Result<Vec<Value>, Error> {
    EXAMPLES
        .iter()
        .map(|text| {
            let mut v: Value = serde_yaml::from_str(text)?;
            if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("namespace");
            }
            Ok(v)
        })
        .collect()
}

/// `spec.relatedImages`: the operator (which also runs the api-manager) and every operand image,
/// named after its `RELATED_IMAGE_*` variable; the kube-scheduler once per Kubernetes minor it
/// follows (`kube-scheduler-v1-36`), so that a mirror holds the one the cluster's minor picks.
pub fn related_images(image: &str) -> Vec<Value> {
    let mut out = vec![json!({"name": "storageos-operator", "image": image})];
    out.extend(
        BUILTIN_IMAGES
            .iter()
            .filter(|(env, _)| *env != KUBE_SCHEDULER_ENV)
            .map(|(env, image)| {
                let name = env
                    .trim_start_matches("RELATED_IMAGE_")
                    .to_lowercase()
                    .replace('_', "-");
                json!({"name": name, "image": image})
            }),
    );
    out.extend(
        kube_scheduler_images()
            .into_iter()
            .map(|((major, minor), image)| json!({"name": format!("kube-scheduler-v{major}-{minor}"), "image": image})),
    );
    out
}

fn descriptor(path: &str, name: &str, description: &str, x: &[&str]) -> Value {
    json!({"path": path, "displayName": name, "description": description, "x-descriptors": x})
}

const TEXT: &str = "urn:alm:descriptor:com.tectonic.ui:text";
const SWITCH: &str = "urn:alm:descriptor:com.tectonic.ui:booleanSwitch";
const PHASE: &str = "urn:alm:descriptor:io.kubernetes.phase";
const CONDITIONS: &str = "urn:alm:descriptor:io.kubernetes.conditions";

fn resources(kinds: &[(&str, &str)]) -> Vec<Value> {
    kinds
        .iter()
        .map(|(kind, version)| json!({"kind": kind, "name": "", "version": version}))
        .collect()
}

/// `spec.customresourcedefinitions.owned`: the CRDs, what they create, and the fields the
/// console shows.
fn owned_crds() -> Value {
    json!([
        {
            "name": "storageosclusters.storageos.com", "version": "v1", "kind": "StorageOSCluster",
            "displayName": "StorageOS Cluster",
            "description": "A StorageOS cluster: the node DaemonSet, CSI helpers, scheduler extender, \
                api-manager, StorageClass and their RBAC, kept running by the operator. Only one \
                cluster is active at a time.",
            "resources": resources(&[
                ("DaemonSet", "v1"), ("Deployment", "v1"), ("StatefulSet", "v1"), ("Service", "v1"),
                ("Secret", "v1"), ("ConfigMap", "v1"), ("ServiceAccount", "v1"), ("StorageClass", "v1"),
                ("CSIDriver", "v1"), ("ClusterRole", "v1"), ("ClusterRoleBinding", "v1"),
                ("Role", "v1"), ("RoleBinding", "v1"), ("MutatingWebhookConfiguration", "v1"), ("Ingress", "v1"),
            ]),
            "specDescriptors": [
                descriptor("secretRefName", "API Secret", "Secret with the StorageOS API username and password.",
                    &["urn:alm:descriptor:io.kubernetes:Secret"]),
                descriptor("secretRefNamespace", "API Secret namespace", "Namespace of the API Secret.",
                    &["urn:alm:descriptor:io.kubernetes:Namespace"]),
                descriptor("kvBackend.address", "etcd address", "The etcd StorageOS keeps its state in, e.g. http://etcd.storageos-etcd.svc:2379.",
                    &[TEXT]),
                descriptor("namespace", "Namespace", "Where StorageOS runs (default kube-system).",
                    &["urn:alm:descriptor:io.kubernetes:Namespace"]),
                descriptor("storageClassName", "StorageClass", "Name of the StorageClass created (default fast).",
                    &[TEXT]),
                descriptor("tolerations", "Tolerations", "Tolerations of the StorageOS pods.",
                    &["urn:alm:descriptor:io.kubernetes:Tolerations"]),
                descriptor("resources", "Resources", "Resources of the StorageOS node container.",
                    &["urn:alm:descriptor:com.tectonic.ui:resourceRequirements"]),
                descriptor("disableTelemetry", "Disable telemetry", "Do not send telemetry to StorageOS.",
                    &[SWITCH]),
                descriptor("disableScheduler", "Disable scheduler extender", "Do not run the StorageOS scheduler extender.",
                    &[SWITCH]),
                descriptor("pause", "Pause", "Stop repairing the cluster's objects.", &[SWITCH]),
            ],
            "statusDescriptors": [
                descriptor("phase", "Phase", "Creating, Running, Degraded, Pending or Terminating.", &[PHASE]),
                descriptor("ready", "Ready", "Ready StorageOS nodes out of the selected nodes.", &[TEXT]),
                descriptor("conditions", "Conditions", "Ready, Progressing and Degraded with reasons.", &[CONDITIONS]),
            ]
        },
        {
            "name": "storageosupgrades.storageos.com", "version": "v1", "kind": "StorageOSUpgrade",
            "displayName": "StorageOS Upgrade",
            "description": "An offline upgrade of every StorageOS node to a new image: pre-pulls it, \
                scales applications using StorageOS volumes down, upgrades and scales them back up.",
            "resources": resources(&[("DaemonSet", "v1"), ("Deployment", "v1"), ("StatefulSet", "v1")]),
            "specDescriptors": [
                descriptor("newImage", "New image", "The StorageOS node image to upgrade to.", &[TEXT]),
            ],
            "statusDescriptors": [
                descriptor("phase", "Phase", "The step the upgrade is in.", &[PHASE]),
                descriptor("completed", "Completed", "Whether the upgrade finished.", &[TEXT]),
                descriptor("conditions", "Conditions", "Progress and problems, with what to do.", &[CONDITIONS]),
            ]
        },
        {
            "name": "jobs.storageos.com", "version": "v1", "kind": "Job",
            "displayName": "StorageOS Job",
            "description": "A task run once on every selected node (for example cleaning up StorageOS \
                data after an uninstall); completes when every pod's log has the completion word.",
            "resources": resources(&[("DaemonSet", "v1"), ("Pod", "v1")]),
            "specDescriptors": [
                descriptor("image", "Image", "Container image of the task.", &[TEXT]),
                descriptor("hostPath", "Host path", "Host directory mounted into the task.", &[TEXT]),
                descriptor("mountPath", "Mount path", "Where the host directory is mounted.", &[TEXT]),
                descriptor("completionWord", "Completion word", "The word in a pod's log that marks it done.", &[TEXT]),
            ],
            "statusDescriptors": [
                descriptor("progress", "Progress", "Nodes completed out of the total.", &[TEXT]),
                descriptor("completed", "Completed", "Whether every node completed.", &[TEXT]),
                descriptor("conditions", "Conditions", "Progress and problems.", &[CONDITIONS]),
            ]
        },
        {
            "name": "nodes.api.storageos.com", "version": "v1", "kind": "Node",
            "displayName": "StorageOS Node (read-only)",
            "description": "What the StorageOS API reports about a node (health, capacity, labels), \
                mirrored by the api-manager; read-only.",
            "statusDescriptors": [
                descriptor("health", "Health", "online, offline or unknown.", &[TEXT]),
            ]
        },
        {
            "name": "volumes.api.storageos.com", "version": "v1", "kind": "Volume",
            "displayName": "StorageOS Volume (read-only)",
            "description": "What the StorageOS API reports about a volume (health, master, replicas, \
                attachment), mirrored by the api-manager in its PVC's namespace; read-only.",
            "statusDescriptors": [
                descriptor("health", "Health", "healthy, syncing, degraded or unavailable.", &[TEXT]),
                descriptor("master.node", "Master", "The node holding the master.", &[TEXT]),
            ]
        }
    ])
}

/// Kinds only the api-manager writes: the console offers no "create" for them and OLM asks for
/// no example.
const INTERNAL_OBJECTS: &str = r#"["nodes.api.storageos.com","volumes.api.storageos.com"]"#;

/// The long description the console shows: what it does and how to start.
const DESCRIPTION: &str = "\
StorageOS is a software-defined, cloud-native storage platform that turns the disks of your \
Kubernetes nodes into a pool of replicated, highly available block volumes (ReadWriteOnce, and \
ReadWriteMany through NFS), provisioned through CSI.

This operator installs StorageOS and keeps it running:

* **StorageOSCluster** — the node DaemonSet, CSI helpers, scheduler extender, api-manager \
(pod fencing, shared volumes, label sync, pod and PVC webhooks), StorageClass and RBAC, repaired \
when changed or deleted, with Ready/Progressing/Degraded conditions.
* **StorageOSUpgrade** — an offline upgrade of the StorageOS nodes to a new image.
* **Job** — a task run once on every node, such as cleaning up after an uninstall.

## Before you start

StorageOS keeps its cluster state in etcd: run an etcd cluster reachable from the nodes (for \
example in the namespace `storageos-etcd`).

## Getting started

1. Create the API credentials Secret:

       kubectl create secret generic storageos-api -n default \\
         --from-literal=username=storageos --from-literal=password=<password>

2. Create a StorageOSCluster (the example offered here) pointing `kvBackend.address` at your etcd.
3. Watch it become ready: `kubectl get stos -w` shows `READY 3/3` and `STATUS Running`.

Uninstall: delete the StorageOSCluster first (the operator removes what it created), then the \
operator.
";

/// The ClusterServiceVersion for the operator `image`.
pub fn csv(image: &str) -> Result<Value, Error> {
    let install = build(image)?;
    csv_from(&install, image)
}

/// The install Deployment's spec without a fixed user and group: OpenShift's `restricted-v2`
/// SCC, which admits the operator without a privileged SCC, assigns one from the namespace's
/// range and refuses any other. The image's numeric user (65532) stands elsewhere, and
/// `runAsNonRoot` holds either way.
pub fn restricted_v2(mut deployment_spec: Value) -> Value {
    if let Some(sc) = deployment_spec
        .pointer_mut("/template/spec/securityContext")
        .and_then(Value::as_object_mut)
    {
        sc.remove("runAsUser");
        sc.remove("runAsGroup");
    }
    deployment_spec
}

fn csv_from(install: &Install, image: &str) -> Result<Value, Error> {
    let deployment_spec = restricted_v2(
        serde_json::to_value(install.deployment.spec.as_ref()).map_err(|source| Error::Typed {
            what: "Deployment spec",
            source,
        })?,
    );
    let alm_examples = serde_json::to_string_pretty(&examples()?).map_err(|source| Error::Typed {
        what: "alm-examples",
        source,
    })?;
    let icon = base64::engine::general_purpose::STANDARD.encode(ICON_SVG);
    Ok(json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": csv_name(),
            "annotations": {
                "alm-examples": alm_examples,
                "capabilities": "Seamless Upgrades",
                "categories": "Storage",
                "containerImage": image,
                "description": "Cloud-native persistent block storage for Kubernetes: installs, repairs and upgrades StorageOS.",
                "support": "StorageOS",
                "olm.skipRange": format!("<{VERSION}"),
                "operatorframework.io/suggested-namespace": super::NAMESPACE,
                "operators.operatorframework.io/builder": "storageos-operator manifests",
                "operators.operatorframework.io/internal-objects": INTERNAL_OBJECTS,
            },
            "labels": labels(),
        },
        "spec": {
            "displayName": "StorageOS",
            "description": DESCRIPTION,
            "version": VERSION,
            "minKubeVersion": MIN_KUBE_VERSION,
            "maturity": "alpha",
            "keywords": ["storage", "block storage", "persistent volumes", "csi", "storageos"],
            "maintainers": [{"name": "StorageOS", "email": "support@storageos.com"}],
            "provider": {"name": "StorageOS", "url": "https://storageos.com"},
            "links": [
                {"name": "StorageOS", "url": "https://storageos.com"},
                {"name": "Documentation", "url": "https://docs.storageos.com"},
            ],
            "icon": [{"base64data": icon, "mediatype": "image/svg+xml"}],
            "labels": {"operated-by": NAME},
            "selector": {"matchLabels": {"operated-by": NAME}},
            // The operator watches StorageOSClusters in every namespace and writes where a
            // cluster says: only the all-namespaces install mode fits.
            "installModes": [
                {"type": "OwnNamespace", "supported": false},
                {"type": "SingleNamespace", "supported": false},
                {"type": "MultiNamespace", "supported": false},
                {"type": "AllNamespaces", "supported": true},
            ],
            "install": {
                "strategy": "deployment",
                "spec": {
                    "deployments": [{"name": NAME, "label": labels(), "spec": deployment_spec}],
                    "clusterPermissions": [{
                        "serviceAccountName": NAME,
                        "rules": install.cluster_role.rules,
                    }],
                    "permissions": [{
                        "serviceAccountName": NAME,
                        "rules": install.role.rules,
                    }],
                }
            },
            // OLM creates the webhook's Service and configuration, issues its certificate and
            // mounts it where `run --webhook-cert-dir` looks by default.
            "webhookdefinitions": [{
                "type": "ValidatingAdmissionWebhook",
                "generateName": super::WEBHOOK_NAME,
                "deploymentName": NAME,
                "containerPort": 443,
                "targetPort": super::WEBHOOK_PORT,
                "webhookPath": super::WEBHOOK_PATH,
                "rules": [super::webhook_rule()],
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }],
            "customresourcedefinitions": {"owned": owned_crds()},
            "relatedImages": related_images(image),
        }
    }))
}

/// The metrics Service as a bundle object: OLM creates it in the install namespace.
fn metrics_service(install: &Install) -> Result<Value, Error> {
    let mut service = serde_json::to_value(&install.service).map_err(|source| Error::Typed {
        what: "Service",
        source,
    })?;
    if let Some(meta) = service.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("namespace");
    }
    if let Some(map) = service.as_object_mut() {
        map.insert("apiVersion".into(), "v1".into());
        map.insert("kind".into(), "Service".into());
    }
    Ok(service)
}

const GENERATED: &str = "Generated by `storageos-operator manifests --out-dir deploy --olm-dir olm`; do not edit.";

/// Every file of the bundle directory, as (path relative to it, content).
pub fn bundle_files(image: &str) -> Result<Vec<(String, String)>, Error> {
    let install = build(image)?;
    let mut files = vec![(
        format!("manifests/{CSV_FILE}"),
        format!("# {GENERATED}\n{}", serde_yaml::to_string(&csv_from(&install, image)?)?),
    )];
    for (file, c) in crd::all() {
        files.push((
            format!("manifests/{file}"),
            format!("# {GENERATED}\n{}", serde_yaml::to_string(&c)?),
        ));
    }
    files.push((
        "manifests/storageos-operator-metrics_v1_service.yaml".into(),
        format!("# {GENERATED}\n{}", serde_yaml::to_string(&metrics_service(&install)?)?),
    ));
    let mut annotations_yaml = format!("# {GENERATED}\nannotations:\n");
    let mut dockerfile = format!(
        "# The OLM bundle image of storageos-operator {VERSION}. {GENERATED}\n\
         # Build it with the bundle directory as context: docker build -f olm/bundle.Dockerfile -t <bundle-image> olm\n\
         FROM scratch\n"
    );
    for (k, v) in annotations() {
        annotations_yaml.push_str(&format!("  {k}: {v}\n"));
        dockerfile.push_str(&format!("LABEL {k}={v}\n"));
    }
    dockerfile.push_str("COPY manifests /manifests/\nCOPY metadata /metadata/\n");
    files.push(("metadata/annotations.yaml".into(), annotations_yaml));
    files.push(("bundle.Dockerfile".into(), dockerfile));
    Ok(files)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn the_csv_installs_exactly_the_install_objects() {
        let install = build("example/op:v1").unwrap();
        let csv = csv("example/op:v1").unwrap();
        let spec = &csv["spec"]["install"]["spec"];
        assert_eq!(
            spec["deployments"][0]["spec"],
            restricted_v2(serde_json::to_value(install.deployment.spec.unwrap()).unwrap())
        );
        let sc = &spec["deployments"][0]["spec"]["template"]["spec"]["securityContext"];
        assert!(sc.get("runAsUser").is_none() && sc.get("runAsGroup").is_none(), "{sc}");
        assert_eq!(sc["runAsNonRoot"], true);
        assert_eq!(
            spec["clusterPermissions"][0]["rules"],
            serde_json::to_value(install.cluster_role.rules.unwrap()).unwrap()
        );
        assert_eq!(
            spec["permissions"][0]["rules"],
            serde_json::to_value(install.role.rules.unwrap()).unwrap()
        );
        assert_eq!(spec["permissions"][0]["serviceAccountName"], NAME);
        assert_eq!(
            spec["deployments"][0]["spec"]["template"]["spec"]["serviceAccountName"],
            NAME
        );
        assert_eq!(csv["metadata"]["name"], format!("storageos-operator.v{VERSION}"));
    }

    #[test]
    fn related_images_name_the_operator_and_every_operand() {
        let images = related_images("example/op:v1");
        assert_eq!(images.len(), BUILTIN_IMAGES.len() + kube_scheduler_images().len());
        assert!(
            images
                .iter()
                .any(|i| i["name"] == "kube-scheduler-v1-36" && i["image"] == "registry.k8s.io/kube-scheduler:v1.36.0")
        );
        assert!(
            images
                .iter()
                .any(|i| i["name"] == "storageos-node" && i["image"] == BUILTIN_IMAGES[0].1)
        );
        assert_eq!(images[0]["image"], "example/op:v1");
    }

    #[test]
    fn examples_are_one_of_each_owned_kind_without_a_namespace() {
        let kinds: Vec<_> = examples().unwrap().iter().map(|e| e["kind"].clone()).collect();
        assert_eq!(kinds, ["StorageOSCluster", "StorageOSUpgrade", "Job", "Node", "Volume"]);
        assert!(
            examples()
                .unwrap()
                .iter()
                .all(|e| e["metadata"].get("namespace").is_none())
        );
    }

    #[test]
    fn annotations_and_dockerfile_labels_agree() {
        let files = bundle_files("x/y:z").unwrap();
        let get = |p: &str| files.iter().find(|(f, _)| f == p).unwrap().1.clone();
        let (ann, docker) = (get("metadata/annotations.yaml"), get("bundle.Dockerfile"));
        for (k, v) in annotations() {
            assert!(ann.contains(&format!("  {k}: {v}\n")));
            assert!(docker.contains(&format!("LABEL {k}={v}\n")));
        }
    }
}
