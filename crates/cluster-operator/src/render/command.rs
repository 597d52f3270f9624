//! `storageos-operator render`: read a StorageOSCluster (and its Secrets) from files, build, and
//! print the objects as one YAML stream, Secret values redacted unless asked.

use std::io::Write;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Secret;
use serde::Deserialize;
use serde_json::Value;

use super::{Error, Inputs, Object, default_images_from_env, node_env_from_process, secrets};
use crate::crd::StorageOSCluster;

/// Arguments of `render`.
#[derive(clap::Args, Debug)]
pub struct RenderArgs {
    /// File holding the StorageOSCluster (YAML or JSON). It may also hold the Secrets it names.
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,

    /// File holding the Secret that spec.secretRefName names (and, optionally, the etcd TLS
    /// Secret that spec.tlsEtcdSecretRefName names). Repeat for several files. Without it, the
    /// Secrets copied from it are not printed.
    #[arg(long)]
    pub secret: Vec<PathBuf>,

    /// Kubernetes version to render for, for example `1.34.2`.
    #[arg(long)]
    pub k8s_version: Option<String>,

    /// Print Secret values instead of redacting them.
    #[arg(long)]
    pub show_secrets: bool,

    /// Image of the operator, which runs the api-manager unless spec.images.apiManagerContainer
    /// is set.
    #[arg(long, env = "OPERATOR_IMAGE")]
    pub operator_image: Option<String>,

    /// Render as if the ServiceMonitor CRD (monitoring.coreos.com/v1) were installed.
    #[arg(long)]
    pub service_monitor: bool,
}

/// The operator image `render` assumes when `--operator-image`/`OPERATOR_IMAGE` is not given.
pub const DEFAULT_OPERATOR_IMAGE: &str = concat!("storageos/storageos-operator:v", env!("CARGO_PKG_VERSION"));

/// Parses a Kubernetes version as servers report it: `v1.34.2`, `1.34`, `1.34.2-gke.100`,
/// `v1.33.1+k3s1`.
pub fn parse_k8s_version(value: &str) -> Result<semver::Version, Error> {
    let bad = || Error::KubernetesVersion {
        value: value.to_string(),
    };
    let core = value.trim().trim_start_matches('v');
    let core = core.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<u64> = core
        .split('.')
        .map(|p| p.parse::<u64>().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    match parts.as_slice() {
        [major, minor] => Ok(semver::Version::new(*major, *minor, 0)),
        [major, minor, patch] => Ok(semver::Version::new(*major, *minor, *patch)),
        _ => Err(bad()),
    }
}

/// Every YAML document of a file, untyped.
fn read_documents(path: &Path) -> Result<Vec<Value>, Error> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: shown.clone(),
        source,
    })?;
    let mut docs = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let value = Value::deserialize(doc).map_err(|e| Error::Input {
            path: shown.clone(),
            message: format!("document {}: not valid YAML: {e}", i + 1),
        })?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

fn kind_of(doc: &Value) -> &str {
    doc.get("kind").and_then(Value::as_str).unwrap_or_default()
}

/// The Secret named `name` in `namespace` among `secrets` (a Secret without a namespace
/// matches any).
fn find_secret(secrets: &[Secret], name: &str, namespace: &str) -> Option<Secret> {
    secrets
        .iter()
        .find(|s| {
            s.metadata.name.as_deref() == Some(name) && s.metadata.namespace.as_deref().is_none_or(|ns| ns == namespace)
        })
        .cloned()
}

/// `doc` as `T`, a type error named by its field path (`spec.service.externalPort: invalid type
/// ...`).
fn typed<T: serde::de::DeserializeOwned>(doc: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(doc).map_err(|e| format!("{}: {}", e.path(), e.inner()))
}

/// What the apiserver would refuse in a StorageOSCluster (its CRD's schema and CEL rules), and
/// what it accepts but StorageOS cannot run without: an etcd address.
fn check_cluster(doc: &Value) -> Result<(), String> {
    use kube::CustomResourceExt;
    let mut problems: Vec<String> = crate::crd::check::check(&StorageOSCluster::crd(), doc)
        .iter()
        .map(ToString::to_string)
        .collect();
    let address = doc
        .pointer("/spec/kvBackend/address")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if address.trim().is_empty() {
        problems.push(
            "spec.kvBackend.address: Required value: StorageOS v2 keeps its state in etcd; give its endpoints, \
             for example http://etcd.storageos-etcd.svc:2379"
                .to_string(),
        );
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the apiserver would refuse it or StorageOS could not run:\n  {}",
            problems.join("\n  ")
        ))
    }
}

/// Builds [`Inputs`] from the files `render` is given: the StorageOSCluster in `cluster_file`,
/// Secrets from any of the files, matched by the names the spec gives.
pub fn inputs_from_files(
    cluster_file: &Path,
    secret_files: &[PathBuf],
    k8s_version: Option<&str>,
    operator_image: &str,
) -> Result<Inputs, Error> {
    let shown = cluster_file.display().to_string();
    let mut cluster = None;
    let mut clusters = Vec::new();
    let mut secrets = Vec::new();
    for (path, docs) in std::iter::once(cluster_file)
        .chain(secret_files.iter().map(PathBuf::as_path))
        .map(|p| read_documents(p).map(|d| (p, d)))
        .collect::<Result<Vec<_>, _>>()?
    {
        let path_shown = path.display().to_string();
        for doc in docs {
            let invalid = |message: String, kind: &str| Error::Input {
                path: path_shown.clone(),
                message: format!("not a valid {kind}: {message}"),
            };
            match kind_of(&doc) {
                "StorageOSCluster" if path == cluster_file => {
                    clusters.push(doc["metadata"]["name"].as_str().unwrap_or("(no name)").to_string());
                    if cluster.is_none() {
                        check_cluster(&doc).map_err(|m| invalid(m, "StorageOSCluster"))?;
                        cluster = Some(typed::<StorageOSCluster>(doc).map_err(|m| invalid(m, "StorageOSCluster"))?);
                    }
                }
                "Secret" => secrets.push(typed::<Secret>(doc).map_err(|m| invalid(m, "Secret"))?),
                _ => {}
            }
        }
    }
    if clusters.len() > 1 {
        return Err(Error::Input {
            path: shown,
            message: format!(
                "{} StorageOSClusters ({}); render one at a time (only one cluster is active in a Kubernetes cluster)",
                clusters.len(),
                clusters.join(", ")
            ),
        });
    }
    let mut cluster = cluster.ok_or_else(|| Error::Input {
        path: shown,
        message: "no StorageOSCluster (apiVersion storageos.com/v1, kind StorageOSCluster) in this file".into(),
    })?;
    // A CR read from a file may have no namespace; the apiserver would give it `default`.
    cluster.metadata.namespace.get_or_insert_with(|| "default".to_string());

    let secret = find_secret(
        &secrets,
        &cluster.spec.secret_ref_name,
        &cluster.spec.secret_ref_namespace,
    );
    if secret.is_none() && !secret_files.is_empty() {
        return Err(Error::Input {
            path: secret_files
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            message: format!(
                "no Secret {}/{} (spec.secretRefNamespace/secretRefName) in these files",
                cluster.spec.secret_ref_namespace, cluster.spec.secret_ref_name
            ),
        });
    }
    let etcd_tls_secret = super::defaults::etcd_tls_secret_ref(&cluster.spec)
        .and_then(|(name, namespace)| find_secret(&secrets, &name, &namespace));

    let mut inputs = Inputs::new(cluster, operator_image);
    inputs.secret = secret;
    inputs.etcd_tls_secret = etcd_tls_secret;
    inputs.k8s_version = k8s_version.map(parse_k8s_version).transpose()?;
    Ok(inputs)
}

/// The objects as one multi-document YAML stream; Secret values are replaced by
/// [`secrets::REDACTED`] unless `show_secrets`.
pub fn to_yaml_stream(objects: &[Object], show_secrets: bool) -> Result<String, Error> {
    let mut out = String::new();
    for object in objects {
        let serialize = |message: String| Error::Serialize {
            what: object.describe(),
            message,
        };
        let mut value = object.to_value().map_err(|e| serialize(e.to_string()))?;
        if matches!(object, Object::Secret(_)) && !show_secrets {
            secrets::redact(&mut value);
        }
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&value).map_err(|e| serialize(e.to_string()))?);
    }
    Ok(out)
}

/// `storageos-operator render`: print every object the operator would apply.
pub fn run(args: &RenderArgs) -> Result<(), Error> {
    let operator_image = args.operator_image.as_deref().unwrap_or(DEFAULT_OPERATOR_IMAGE);
    let mut inputs = inputs_from_files(&args.file, &args.secret, args.k8s_version.as_deref(), operator_image)?;
    inputs.default_images = default_images_from_env();
    inputs.node_env = node_env_from_process();
    inputs.service_monitor_crd = args.service_monitor;
    if inputs.secret.is_none() {
        tracing::warn!(
            "no --secret given: the Secrets copied from {}/{} are not printed",
            inputs.cluster.spec.secret_ref_namespace,
            inputs.cluster.spec.secret_ref_name
        );
    }
    let objects = super::build(&inputs)?;
    let yaml = to_yaml_stream(&objects, args.show_secrets)?;
    match std::io::stdout().lock().write_all(yaml.as_bytes()) {
        // `render ... | head`: the reader has what it wanted.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => result.map_err(Error::Write),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_versions_as_servers_report_them() {
        assert_eq!(parse_k8s_version("v1.34.2").unwrap(), semver::Version::new(1, 34, 2));
        assert_eq!(parse_k8s_version("1.35").unwrap(), semver::Version::new(1, 35, 0));
        assert_eq!(
            parse_k8s_version("v1.33.1+k3s1").unwrap(),
            semver::Version::new(1, 33, 1)
        );
        assert_eq!(
            parse_k8s_version("1.34.0-gke.100").unwrap(),
            semver::Version::new(1, 34, 0)
        );
        assert!(parse_k8s_version("one.two").is_err());
        assert!(parse_k8s_version("1").is_err());
    }
}
