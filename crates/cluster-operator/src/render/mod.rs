//! Build step of the cluster reconciler: a pure function from [`Inputs`] to the desired objects.
//!
//! Each `templates/*.yaml.hbs` is rendered with handlebars (strict, no HTML escaping, every value
//! through the `json` helper) from values computed in [`values`], split into YAML documents, and
//! parsed into its k8s-openapi type. `storageos-operator render` prints the result.

mod command;
pub mod defaults;
mod documents;
pub mod go_defaults;
mod handlebars;
pub mod images;
mod inputs;
pub mod labels;
mod objects;
pub mod scheduling;
pub mod secrets;
mod values;

pub use command::{DEFAULT_OPERATOR_IMAGE, RenderArgs, inputs_from_files, parse_k8s_version, run, to_yaml_stream};
pub use defaults::{Resolved, resolve};
pub use documents::{Document, parse_document};
pub use images::{
    DefaultImages, Images, Replaced, default_images_from_env, replaced_go_defaults, replaced_message, resolve_images,
};
pub use inputs::{FORWARDED_NODE_ENV, Inputs, node_env_from, node_env_from_process};
pub use objects::{KINDS, Object, ServiceMonitor, ServiceMonitorEndpoint, ServiceMonitorSpec};
pub use values::SCHEDULER_NAME;

pub use crate::crd::contract::MIN_KUBERNETES;

/// Why rendering failed. Template errors name the template and document.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A template failed to compile or render (a missing value in strict mode, for example).
    #[error("template {template}: {source}")]
    Template {
        template: &'static str,
        #[source]
        source: Box<::handlebars::RenderError>,
    },
    /// A rendered document is not valid YAML.
    #[error("template {template}, document {document}: invalid YAML: {source}")]
    Yaml {
        template: &'static str,
        document: usize,
        #[source]
        source: serde_yaml::Error,
    },
    /// A rendered document does not fit its Kubernetes type.
    #[error("template {template}, document {document} ({what}): {source}")]
    Parse {
        template: &'static str,
        document: usize,
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// A rendered document has a kind `build` does not know.
    #[error("template {template}, document {document}: unknown kind {kind} of {api_version}")]
    UnknownKind {
        template: &'static str,
        document: usize,
        api_version: String,
        kind: String,
    },
    /// The cluster runs a Kubernetes older than [`MIN_KUBERNETES`].
    #[error("Kubernetes {version} is not supported; the oldest supported version is {MIN_KUBERNETES}")]
    UnsupportedKubernetes { version: semver::Version },
    /// The pinned kube-scheduler is older than 1.19 and reads no KubeSchedulerConfiguration.
    #[error(
        "spec.images.kubeSchedulerContainer {image} is kube-scheduler 1.{minor}, which cannot read a scheduler configuration file (1.19 or newer needed); remove the field to use the default image"
    )]
    SchedulerTooOld { image: String, minor: u64 },
    /// `spec.apiManager.webhookClientCAConfigMap` with a Go api-manager image, which has no
    /// such option.
    #[error(
        "spec.apiManager.webhookClientCAConfigMap needs the operator's own api-manager, but spec.images.apiManagerContainer is the Go api-manager {image}; remove that image to use ours, or remove webhookClientCAConfigMap"
    )]
    WebhookClientCaNeedsOurApiManager { image: String },
    /// The credentials Secret lacks a key the spec needs.
    #[error("Secret {secret} has no key {key:?}, which is needed because {why}")]
    MissingSecretKey {
        secret: String,
        key: &'static str,
        why: &'static str,
    },
    /// A `render` input file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A `render` input file is not valid YAML or does not fit its type.
    #[error("{path}: {message}")]
    Input { path: String, message: String },
    /// `--k8s-version` is not a version.
    #[error("invalid Kubernetes version {value:?}: expected MAJOR.MINOR[.PATCH], for example 1.34.2")]
    KubernetesVersion { value: String },
    /// Writing the output failed.
    #[error("cannot write the output: {0}")]
    Write(#[source] std::io::Error),
    /// An object could not be serialised (a bug: please report it).
    #[error("cannot serialise {what}: {message}")]
    Serialize { what: String, message: String },
}

/// Refuses Kubernetes versions older than [`MIN_KUBERNETES`] (pre-release suffixes such as
/// `-gke.1` are ignored).
fn check_version(version: Option<&semver::Version>) -> Result<(), Error> {
    match version {
        Some(v) if (v.major, v.minor, v.patch) < (MIN_KUBERNETES.major, MIN_KUBERNETES.minor, 0) => {
            Err(Error::UnsupportedKubernetes { version: v.clone() })
        }
        _ => Ok(()),
    }
}

/// Renders every template into untyped documents, in apply order. [`build`] types them; tests
/// compare both to prove no field is lost.
pub fn render_documents(inputs: &Inputs) -> Result<Vec<Document>, Error> {
    check_version(inputs.k8s_version.as_ref())?;
    let resolved = resolve(&inputs.cluster.spec);
    let defaults = inputs.default_images.for_kubernetes(inputs.k8s_version.as_ref());
    let images = resolve_images(inputs.cluster.spec.images.as_ref(), &defaults, &inputs.operator_image);
    documents::render(inputs, &resolved, &images)
}

/// What the build made of a cluster: its objects, and what it resolved on the way, so the
/// status and settings steps read it instead of resolving again.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The desired objects, in apply order, without owner references (the apply step adds them).
    pub objects: Vec<Object>,
    /// The spec with defaults (namespace, API endpoint, toggles).
    pub resolved: Resolved,
    /// The images the objects run.
    pub images: Images,
    /// Labels of the StorageOS node pods.
    pub node_pod_labels: labels::Labels,
    /// Tolerations of the node pods: the defaults merged with the spec's.
    pub tolerations: Vec<k8s_openapi::api::core::v1::Toleration>,
    /// Go operator default images that the build replaced by this operator's.
    pub replaced_go_defaults: Vec<Replaced>,
}

/// The plan of a StorageOSCluster. Pure: no I/O, no cluster access.
pub fn plan(inputs: &Inputs) -> Result<Plan, Error> {
    plan_resolved(inputs, resolve(&inputs.cluster.spec))
}

/// [`plan`], for a caller that has resolved the spec already (the cluster controller resolves
/// it once, to check its namespaces and read its Secrets before it plans).
pub fn plan_resolved(inputs: &Inputs, resolved: Resolved) -> Result<Plan, Error> {
    check_version(inputs.k8s_version.as_ref())?;
    let spec = &inputs.cluster.spec;
    let defaults = inputs.default_images.for_kubernetes(inputs.k8s_version.as_ref());
    let images = resolve_images(spec.images.as_ref(), &defaults, &inputs.operator_image);
    let replaced_go_defaults = replaced_go_defaults(spec.images.as_ref(), &defaults, &inputs.operator_image);
    let tolerations = scheduling::merge_tolerations(scheduling::node_tolerations(), &resolved.tolerations);
    let objects = documents::objects(inputs, &resolved, &images)?;
    let name = inputs.cluster.metadata.name.as_deref().unwrap_or_default();
    Ok(Plan {
        objects,
        node_pod_labels: labels::pod(name, Some("daemonset"), "storageos-daemonset"),
        tolerations,
        replaced_go_defaults,
        resolved,
        images,
    })
}

/// The desired objects of a StorageOSCluster, in apply order ([`plan`]'s objects).
pub fn build(inputs: &Inputs) -> Result<Vec<Object>, Error> {
    plan(inputs).map(|p| p.objects)
}
