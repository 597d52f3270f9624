//! `kubectl storageos install`: the operator's install objects (the CRDs and
//! `storageos_operator::install::build`, exactly what `deploy/operator.yaml` holds, with
//! `--image` and `-n` applied), the StorageOS credentials Secret (a generated password unless
//! one is given) and a StorageOSCluster (from flags or `-f FILE`), all server-side applied.
//! A second run with the same flags changes nothing and says so. Namespaces are created only
//! when absent, never taken over ([`super::namespace`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use rand::Rng;
use serde::Deserialize;
use serde_json::{Value, json};

use super::apply::{self, Applier, Outcome, describe};
use super::image_pull::{self, PullWatch};
use super::wait::{self, Look, Waited};
use super::{eval_etcd, namespace, progress};
use crate::checks::etcd;
use crate::crd::StorageOSCluster;
use crate::render::{DEFAULT_OPERATOR_IMAGE, MIN_KUBERNETES};
use crate::runtime::kube::apply::ObjectKey;

/// Name of the credentials Secret `install` creates.
pub const SECRET_NAME: &str = "storageos-api";

#[derive(Debug, clap::Args)]
#[command(
    about = "Install the operator, the credentials Secret and a StorageOSCluster",
    long_about = "Install the operator (the objects of deploy/operator.yaml, with --image and -n), the \
    StorageOS credentials Secret (a generated password unless --admin-password is given; an existing \
    Secret is kept) and a StorageOSCluster (from --etcd-endpoints, or -f FILE), with server-side \
    apply. --include-etcd also installs an evaluation etcd (one member in a StatefulSet with a \
    Service, NOT for production) and points the cluster at it. The etcd endpoints are checked first (a put, get and delete; see `preflight`). A \
    namespace (-n, --etcd-namespace) is created only when it is absent, labelled \
    storageos.com/created-by=kubectl-storageos so that `uninstall` may delete it; an existing one \
    is used as it is, its labels (Pod Security included) unchanged. kube-system, kube-public and \
    default are refused as the operator's namespace. Running it \
    again with the same flags changes nothing and says so. --wait waits until the cluster is Running."
)]
pub struct InstallArgs {
    /// The operator image (it also runs the api-manager).
    #[arg(long, default_value = DEFAULT_OPERATOR_IMAGE, value_name = "IMAGE")]
    pub image: String,
    /// etcd endpoints for StorageOS (comma-separated http(s)://HOST:PORT): the cluster's
    /// spec.kvBackend.address.
    #[arg(long, value_name = "URLS")]
    pub etcd_endpoints: Option<String>,
    /// Also install an evaluation etcd (one member, NOT for production) and point the cluster
    /// at it.
    #[arg(long, conflicts_with = "etcd_endpoints")]
    pub include_etcd: bool,
    /// Namespace of the evaluation etcd.
    #[arg(long, default_value = eval_etcd::NAMESPACE, value_name = "NAMESPACE")]
    pub etcd_namespace: String,
    /// Image of the evaluation etcd.
    #[arg(long, default_value = eval_etcd::IMAGE, value_name = "IMAGE")]
    pub etcd_image: String,
    /// StorageClass for the evaluation etcd's data (default: an emptyDir, lost with the pod).
    #[arg(long, value_name = "CLASS")]
    pub etcd_storage_class: Option<String>,
    /// The etcd client TLS Secret in -n (keys etcd-client-ca.crt, etcd-client.crt,
    /// etcd-client.key), for an https etcd: the cluster's spec.tlsEtcdSecretRefName. Create it
    /// before installing.
    #[arg(long, value_name = "NAME")]
    pub etcd_tls_secret: Option<String>,
    /// Do not check the etcd endpoints from here (for an etcd reachable only inside the cluster).
    #[arg(long)]
    pub skip_etcd_endpoints_validation: bool,
    /// A StorageOSCluster to install (and optionally its credentials Secret) instead of one
    /// made from the flags.
    #[arg(short = 'f', long, value_name = "FILE")]
    pub filename: Option<PathBuf>,
    /// Name of the StorageOSCluster made from the flags.
    #[arg(long, default_value = "storageos", value_name = "NAME")]
    pub cluster_name: String,
    /// StorageOS admin username, for a new credentials Secret.
    #[arg(long, default_value = "storageos", value_name = "NAME")]
    pub admin_username: String,
    /// StorageOS admin password (default: an existing Secret's, else a generated one).
    #[arg(
        long,
        env = "STORAGEOS_ADMIN_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD"
    )]
    pub admin_password: Option<String>,
    /// Install only the operator, no Secret and no StorageOSCluster.
    #[arg(long)]
    pub skip_cluster: bool,
    /// Wait until the StorageOSCluster is Running, printing progress.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value = "10m", value_parser = crate::duration::parse_flag, value_name = "DURATION")]
    pub timeout: Duration,
    /// Change nothing: say what would be created or changed (server-side dry run).
    #[arg(long)]
    pub dry_run: bool,
}

/// Why the install stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read the Kubernetes version: {0}; check --kubeconfig/--context")]
    Version(#[source] kube::Error),
    #[error("Kubernetes {found} is not supported: upgrade the cluster to {MIN_KUBERNETES} or newer")]
    Kubernetes { found: String },
    #[error(
        "--etcd-endpoints is required to make a StorageOSCluster: give it, or --include-etcd for an evaluation etcd, or -f FILE with a cluster, or --skip-cluster for the operator only"
    )]
    NoEtcd,
    #[error(
        "etcd is not usable: {0}. Fix the endpoints, or pass --skip-etcd-endpoints-validation if etcd is reachable only from inside the cluster"
    )]
    Etcd(#[from] etcd::Error),
    #[error(
        "the etcd TLS Secret {namespace}/{name} does not exist: create it first (kubectl -n {namespace} create secret generic {name} --from-file=etcd-client-ca.crt=CA --from-file=etcd-client.crt=CERT --from-file=etcd-client.key=KEY)"
    )]
    NoTlsSecret { name: String, namespace: String },
    #[error("cannot read {path}: {message}")]
    File { path: String, message: String },
    #[error("the install objects cannot be built: {0}")]
    Build(#[from] storageos_cluster_operator::install::Error),
    #[error(transparent)]
    Apply(#[from] apply::Error),
    #[error(transparent)]
    Namespace(#[from] namespace::Error),
    #[error("cannot read {what}: {source}")]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("timed out after {timeout:?} waiting for {what}; last seen: {last}. See `kubectl storageos status`")]
    Timeout {
        what: String,
        timeout: Duration,
        last: String,
    },
    #[error("{0}")]
    ImageNotPullable(String),
}

/// `kubectl storageos install`.
pub async fn run(client: &Client, namespace: &str, args: &InstallArgs) -> Result<(), Error> {
    namespace::refuse_reserved(namespace)?;
    let version = client.apiserver_version().await.map_err(Error::Version)?;
    if crate::render::parse_k8s_version(&version.git_version).is_ok_and(|v| v < MIN_KUBERNETES) {
        return Err(Error::Kubernetes {
            found: version.git_version,
        });
    }
    let wanted = if args.skip_cluster {
        None
    } else {
        Some(wanted_cluster(namespace, args)?)
    };
    if args.include_etcd {
        progress(format!(
            "the evaluation etcd ({}) is NOT for production: one member{}",
            eval_etcd::address(&args.etcd_namespace),
            if args.etcd_storage_class.is_some() {
                ""
            } else {
                ", its data in an emptyDir (lost with its pod)"
            }
        ));
    } else if let Some((cluster, _)) = &wanted
        && !args.skip_etcd_endpoints_validation
    {
        let address = cluster
            .spec
            .kv_backend
            .as_ref()
            .and_then(|k| k.address.clone())
            .ok_or(Error::NoEtcd)?;
        let tls = match crate::render::defaults::etcd_tls_secret_ref(&cluster.spec) {
            Some((name, ns)) => {
                let secret = Api::<Secret>::namespaced(client.clone(), &ns)
                    .get_opt(&name)
                    .await
                    .map_err(|source| Error::Read {
                        what: format!("the etcd TLS Secret {ns}/{name}"),
                        source,
                    })?
                    .ok_or_else(|| Error::NoTlsSecret {
                        name: name.clone(),
                        namespace: ns.clone(),
                    })?;
                Some(etcd::Tls::from_secret(&secret)?)
            }
            None => None,
        };
        for endpoint in etcd::parse_endpoints(&address)? {
            let took = etcd::check(&endpoint, Duration::from_secs(5), tls.as_ref()).await?;
            progress(format!(
                "etcd {endpoint}: usable (put, get, delete in {} ms)",
                took.as_millis()
            ));
        }
    }

    let mut applier = Applier::new(client.clone(), args.dry_run);
    let mut outcomes = Vec::new();
    let mut report = |obj: &Value, outcome: Outcome| {
        print_outcome(obj, outcome, args.dry_run);
        outcomes.push(outcome);
    };

    for crd in crds()? {
        let outcome = applier.apply(&crd).await?;
        report(&crd, outcome);
    }
    if !args.dry_run {
        wait_established(client).await?;
    }
    let mut objects = operator_objects(&args.image, namespace)?;
    if args.include_etcd {
        objects.extend(eval_etcd::objects(
            &args.etcd_namespace,
            &args.etcd_image,
            args.etcd_storage_class.as_deref(),
        ));
    }
    for obj in objects {
        let outcome = apply_install_object(client, &mut applier, &obj, args.dry_run).await?;
        report(&obj, outcome);
    }
    if let Some((cluster, file_secret)) = wanted {
        let (secret, generated) = secret(client, &cluster, file_secret, args).await?;
        if let Some(secret) = secret {
            let outcome = applier.apply(&secret).await?;
            report(&secret, outcome);
            if generated && !args.dry_run {
                progress(format!(
                    "generated the StorageOS admin password; read it with: kubectl -n {} get secret {} -o jsonpath='{{.data.password}}' | base64 -d",
                    cluster.spec.secret_ref_namespace, cluster.spec.secret_ref_name
                ));
            }
        } else {
            println!("secret/{} unchanged (kept as it is)", cluster.spec.secret_ref_name);
            report(&Value::Null, Outcome::Unchanged);
        }
        let value = serde_json::to_value(&cluster).map_err(|e| Error::File {
            path: "the StorageOSCluster".into(),
            message: e.to_string(),
        })?;
        let outcome = applier.apply(&value).await?;
        report(&value, outcome);
        summary(&outcomes, args.dry_run);
        if args.wait && !args.dry_run {
            wait_running(client, &cluster, namespace, args.timeout).await?;
        }
    } else {
        summary(&outcomes, args.dry_run);
    }
    Ok(())
}

/// Applies one of the operator's (or the evaluation etcd's) objects; a Namespace is created
/// when absent and otherwise left as it is, never taken over ([`namespace`]).
pub async fn apply_install_object(
    client: &Client,
    applier: &mut Applier,
    obj: &Value,
    dry_run: bool,
) -> Result<Outcome, Error> {
    if obj["kind"] != "Namespace" {
        return Ok(applier.apply(obj).await?);
    }
    let outcome = namespace::create_if_absent(client, obj, dry_run).await?;
    if outcome == Outcome::Unchanged {
        progress(format!(
            "namespace {} exists: used as it is, its labels (Pod Security included) unchanged",
            obj["metadata"]["name"].as_str().unwrap_or_default()
        ));
    }
    Ok(outcome)
}

/// `kind.group/name outcome`, as kubectl prints it.
pub fn print_outcome(obj: &Value, outcome: Outcome, dry_run: bool) {
    if let Ok(key) = ObjectKey::of(obj) {
        let suffix = if dry_run { " (dry run)" } else { "" };
        println!("{} {outcome}{suffix}", describe(&key));
    }
}

fn summary(outcomes: &[Outcome], dry_run: bool) {
    let count = |o| outcomes.iter().filter(|x| **x == o).count();
    if count(Outcome::Unchanged) == outcomes.len() {
        println!("Nothing to change: everything is installed as asked.");
    } else {
        println!(
            "{} {} created, {} configured, {} unchanged.",
            if dry_run { "Would have" } else { "Done:" },
            count(Outcome::Created),
            count(Outcome::Configured),
            count(Outcome::Unchanged)
        );
    }
}

/// The CRDs, as JSON.
pub fn crds() -> Result<Vec<Value>, Error> {
    crate::crd::all()
        .into_iter()
        .map(|(_, c)| {
            serde_json::to_value(c).map_err(|e| Error::File {
                path: "the CRDs".into(),
                message: e.to_string(),
            })
        })
        .collect()
}

/// The operator's install objects (`install::build`, as in deploy/operator.yaml) for `image`,
/// moved to `namespace`, in apply order.
pub fn operator_objects(image: &str, namespace: &str) -> Result<Vec<Value>, Error> {
    let mut objects = storageos_cluster_operator::install::build(image)?.objects();
    for o in &mut objects {
        if o["kind"] == "Namespace" {
            o["metadata"]["name"] = json!(namespace);
        } else if o["metadata"].get("namespace").is_some() {
            o["metadata"]["namespace"] = json!(namespace);
        }
        if let Some(subjects) = o.get_mut("subjects").and_then(Value::as_array_mut) {
            for s in subjects {
                s["namespace"] = json!(namespace);
            }
        }
        // The operator's webhook calls its Service, which moves with it.
        if let Some(hooks) = o.get_mut("webhooks").and_then(Value::as_array_mut) {
            for h in hooks {
                h["clientConfig"]["service"]["namespace"] = json!(namespace);
            }
        }
    }
    Ok(objects)
}

/// The StorageOSCluster to install, and the Secret that came with it in `-f FILE`.
fn wanted_cluster(namespace: &str, args: &InstallArgs) -> Result<(StorageOSCluster, Option<Value>), Error> {
    let endpoints = if args.include_etcd {
        Some(eval_etcd::address(&args.etcd_namespace))
    } else {
        args.etcd_endpoints.clone()
    };
    let Some(path) = &args.filename else {
        let address = endpoints.ok_or(Error::NoEtcd)?;
        let cluster: StorageOSCluster = serde_json::from_value(json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": args.cluster_name, "namespace": namespace},
            "spec": {
                "secretRefName": SECRET_NAME,
                "secretRefNamespace": namespace,
                "kvBackend": {"address": address},
                "tlsEtcdSecretRefName": args.etcd_tls_secret,
                "tlsEtcdSecretRefNamespace": args.etcd_tls_secret.as_ref().map(|_| namespace)
            }
        }))
        .map_err(|e| Error::File {
            path: "the flags".into(),
            message: e.to_string(),
        })?;
        return Ok((cluster, None));
    };
    let shown = path.display().to_string();
    let file = |message: String| Error::File {
        path: shown.clone(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file(e.to_string()))?;
    let mut cluster = None;
    let mut secrets = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let value = Value::deserialize(doc).map_err(|e| file(format!("document {}: not valid YAML: {e}", i + 1)))?;
        match value["kind"].as_str() {
            Some("StorageOSCluster") if cluster.is_none() => {
                let mut c: StorageOSCluster = serde_json::from_value(value)
                    .map_err(|e| file(format!("document {}: not a valid StorageOSCluster: {e}", i + 1)))?;
                c.metadata.namespace.get_or_insert_with(|| namespace.to_string());
                c.metadata.resource_version = None;
                c.status = None;
                cluster = Some(c);
            }
            Some("Secret") => secrets.push(value),
            _ => {}
        }
    }
    let mut cluster =
        cluster.ok_or_else(|| file("no StorageOSCluster (apiVersion storageos.com/v1) in this file".into()))?;
    if let Some(name) = &args.etcd_tls_secret {
        cluster.spec.tls_etcd_secret_ref_name = Some(name.clone());
        cluster.spec.tls_etcd_secret_ref_namespace = Some(namespace.to_string());
    }
    if let Some(address) = &endpoints {
        cluster.spec.kv_backend.get_or_insert_with(Default::default).address = Some(address.clone());
    }
    let secret = secrets
        .into_iter()
        .find(|s| s["metadata"]["name"] == cluster.spec.secret_ref_name.as_str())
        .map(|mut s| {
            if s["metadata"]["namespace"].is_null() {
                s["metadata"]["namespace"] = json!(cluster.spec.secret_ref_namespace);
            }
            s
        });
    Ok((cluster, secret))
}

/// The credentials Secret to apply (None: keep the live one as it is), and whether its
/// password was generated here.
async fn secret(
    client: &Client,
    cluster: &StorageOSCluster,
    from_file: Option<Value>,
    args: &InstallArgs,
) -> Result<(Option<Value>, bool), Error> {
    if from_file.is_some() {
        return Ok((from_file, false));
    }
    let (name, ns) = (&cluster.spec.secret_ref_name, &cluster.spec.secret_ref_namespace);
    let live = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|source| Error::Read {
            what: format!("Secret {ns}/{name}"),
            source,
        })?;
    if live.is_some() && args.admin_password.is_none() {
        return Ok((None, false));
    }
    let (password, generated) = match &args.admin_password {
        Some(p) => (p.clone(), false),
        None => (generate_password(), true),
    };
    Ok((
        Some(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/part-of": "storageos"}},
            "type": "Opaque",
            "stringData": {"username": args.admin_username, "password": password}
        })),
        generated,
    ))
}

/// A random 24-character alphanumeric password.
pub fn generate_password() -> String {
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(24)
        .map(char::from)
        .collect()
}

/// Waits (up to a minute) until every CRD of the operator is Established.
async fn wait_established(client: &Client) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let names: Vec<String> = crate::crd::all().into_iter().map(|(_, c)| c.name_any()).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    for name in names {
        loop {
            let crd = api.get_opt(&name).await.map_err(|source| Error::Read {
                what: format!("CRD {name}"),
                source,
            })?;
            let established = crd
                .and_then(|c| c.status?.conditions)
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"));
            if established {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!("CRD {name} to be Established"),
                    timeout: Duration::from_secs(60),
                    last: "not Established".into(),
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    Ok(())
}

/// One line on a cluster: phase, ready members and the Ready condition.
pub fn cluster_line(c: &StorageOSCluster) -> String {
    let status = c.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| format!(", Ready={} {}: {}", c.status, c.reason, c.message))
        .unwrap_or_default();
    format!(
        "phase {}, {} ready{ready}",
        status.phase.as_deref().unwrap_or("(none yet)"),
        status.ready.as_deref().unwrap_or("0/?")
    )
}

/// Waits until `cluster` is Running, printing a progress line whenever what it shows changes.
/// It stops early, with the fix, when the image of the operator just installed in
/// `operator_namespace` cannot be pulled ([`image_pull`]).
pub async fn wait_running(
    client: &Client,
    cluster: &StorageOSCluster,
    operator_namespace: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let api: Api<StorageOSCluster> = Api::namespaced(client.clone(), &ns);
    let operator_pods = Api::<Pod>::namespaced(client.clone(), operator_namespace);
    let selector = format!("app.kubernetes.io/name={}", storageos_cluster_operator::install::NAME);
    let pulls = std::cell::RefCell::new(PullWatch::default());
    progress(format!(
        "waiting for StorageOSCluster {ns}/{name} to be Running (up to {timeout:?})"
    ));
    let look = || async {
        // A read of the operator's pods that fails (RBAC, a blip) only skips this check.
        if let Ok(list) = operator_pods.list(&ListParams::default().labels(&selector)).await
            && let Some((failure, lasted)) = pulls.borrow_mut().saw(image_pull::pull_failure(&list.items))
        {
            return Err(Error::ImageNotPullable(failure.explain(lasted)));
        }
        let live = api.get_opt(&name).await.map_err(|source| Error::Read {
            what: format!("StorageOSCluster {ns}/{name}"),
            source,
        })?;
        Ok::<_, Error>(Look {
            line: live.as_ref().map(cluster_line),
            done: live.and_then(|c| c.status?.phase).as_deref() == Some("Running"),
        })
    };
    match wait::until(&format!("{ns}/{name}"), timeout, look).await? {
        Waited::Done => {
            progress(format!("StorageOSCluster {ns}/{name} is Running"));
            Ok(())
        }
        Waited::TimedOut { last } => Err(Error::Timeout {
            what: format!("StorageOSCluster {ns}/{name} to be Running"),
            timeout,
            last,
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn the_operator_moves_to_the_namespace_asked_for() {
        let objects = operator_objects("reg/op:v1", "stos").unwrap();
        assert_eq!(objects[0]["kind"], "Namespace");
        assert_eq!(objects[0]["metadata"]["name"], "stos");
        for o in &objects[1..] {
            if o["kind"] == "ValidatingWebhookConfiguration" {
                assert_eq!(o["webhooks"][0]["clientConfig"]["service"]["namespace"], "stos");
            } else if o["kind"] != "ClusterRole" && o["kind"] != "ClusterRoleBinding" {
                assert_eq!(o["metadata"]["namespace"], "stos", "{}", o["kind"]);
            }
            if let Some(subjects) = o["subjects"].as_array() {
                assert!(subjects.iter().all(|s| s["namespace"] == "stos"));
            }
        }
        let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["image"],
            "reg/op:v1"
        );
    }

    #[test]
    fn the_cluster_from_flags_points_at_etcd_and_the_secret() {
        let cli = super::super::Cli::try_parse_from([
            "kubectl-storageos",
            "install",
            "--etcd-endpoints",
            "http://10.0.0.1:2379",
        ])
        .unwrap();
        let super::super::Command::Install(args) = cli.command else {
            panic!("not install")
        };
        let (c, secret) = wanted_cluster("stos", &args).unwrap();
        assert!(secret.is_none());
        assert_eq!(c.spec.secret_ref_name, SECRET_NAME);
        assert_eq!(c.spec.secret_ref_namespace, "stos");
        assert_eq!(
            c.spec.kv_backend.unwrap().address.as_deref(),
            Some("http://10.0.0.1:2379")
        );
    }

    #[test]
    fn generated_passwords_differ() {
        let (a, b) = (generate_password(), generate_password());
        assert_eq!(a.len(), 24);
        assert_ne!(a, b);
    }
}
