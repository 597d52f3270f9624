//! `kubectl storageos uninstall`: in the safe order. It refuses while pods use StorageOS volumes
//! (unless `--force`), writes recovery manifests first, deletes each StorageOSCluster and waits
//! until the operator has removed what it created (its finalizer), then removes the operator
//! (the objects of `install`, last created first; its namespace only when `install` created it,
//! [`super::namespace`]) and the CRDs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::apply::{self, Applier};
use super::namespace;
use super::private;
use super::redact::REDACTED;
use super::redact::sources::{self, Learnt};
use super::wait::{self, Look, Waited};
use super::{FIELD_MANAGER, progress};
use crate::cluster::finalize::pods_using_volumes;
use crate::crd::FORCE_DELETE_ANNOTATION;
use crate::crd::{Job, StorageOSCluster, StorageOSUpgrade};

#[derive(Debug, clap::Args)]
#[command(
    about = "Remove the cluster, then the operator, after writing recovery manifests",
    long_about = "Uninstall StorageOS in the safe order: refuse while pods use StorageOS volumes \
    (naming them) unless --force; write recovery manifests (the StorageOSClusters, Upgrades and \
    Jobs ready to apply again, a reference to each credentials Secret with its key names but no \
    values, each cluster's live children, and the operator Deployment; every credential redacted \
    as `bundle` redacts it; files mode 0600 in a 0700 folder) to --recovery-dir; delete each StorageOSUpgrade and storageos.com Job, then each \
    StorageOSCluster, waiting each time until the operator has finished with it (for a cluster: \
    removed everything it created); then delete the operator's objects and, unless --keep-crds, \
    the CRDs; with --include-etcd, then the evaluation etcd `install --include-etcd` made (and \
    only that). A namespace (-n, --etcd-namespace) is deleted only when `install` created it \
    (labelled storageos.com/created-by=kubectl-storageos); any other is kept, with everything \
    in it, and the output says so. Data under /var/lib/storageos on the nodes and in etcd is not touched: reinstalling \
    with the same etcd and credentials finds the volumes again."
)]
pub struct UninstallArgs {
    /// Uninstall even while pods use StorageOS volumes (they lose their storage).
    #[arg(long)]
    pub force: bool,
    /// Where to write the recovery manifests (default: ~/.kube/storageos/<UTC time>).
    #[arg(long, value_name = "DIR")]
    pub recovery_dir: Option<PathBuf>,
    /// Also remove the evaluation etcd, if `install --include-etcd` installed it (an etcd not
    /// labelled as installed by this plugin is kept). Its data is lost.
    #[arg(long)]
    pub include_etcd: bool,
    /// Namespace of the evaluation etcd.
    #[arg(long, default_value = super::eval_etcd::NAMESPACE, value_name = "NAMESPACE")]
    pub etcd_namespace: String,
    /// Keep the CRDs (and so every custom resource not deleted here).
    #[arg(long)]
    pub keep_crds: bool,
    /// How long each wait may take (a custom resource's deletion, the operator's namespace).
    #[arg(long, default_value = "5m", value_parser = crate::duration::parse_flag, value_name = "DURATION")]
    pub timeout: Duration,
    /// Change nothing, write nothing: say what would be deleted.
    #[arg(long)]
    pub dry_run: bool,
}

/// Why the uninstall stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "refusing to uninstall: {} pod(s) use StorageOS volumes: {}. Delete them (or scale their apps to 0) first, or pass --force (they lose their storage)",
        .0.len(), .0.join(", ")
    )]
    InUse(Vec<String>),
    #[error("cannot read {what}: {source}; check --kubeconfig/--context")]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot {what}: {source}")]
    Write {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot write the recovery manifests to {path}: {source}; pass --recovery-dir DIR")]
    Recovery {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no home directory to put the recovery manifests in: pass --recovery-dir DIR")]
    NoHome,
    #[error(
        "{cluster} is still there after {timeout:?} (last seen: {last}). Is the operator running (kubectl -n {namespace} get pods)? Its status says why it waits"
    )]
    Timeout {
        cluster: String,
        namespace: String,
        timeout: Duration,
        last: String,
    },
    #[error(
        "namespace {namespace} is still terminating after {timeout:?}: kubectl get namespace {namespace} -o yaml says what it waits for"
    )]
    NamespaceStays { namespace: String, timeout: Duration },
    #[error(transparent)]
    Install(#[from] super::install::Error),
    #[error(transparent)]
    Apply(#[from] apply::Error),
    #[error(transparent)]
    Namespace(#[from] super::namespace::Error),
}

fn read(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Read { what, source }
}

/// `kubectl storageos uninstall`.
pub async fn run(client: &Client, namespace: &str, args: &UninstallArgs) -> Result<(), Error> {
    // Only the operator's objects: the StorageOS kinds in the namespaces it watches. A tenant's
    // elsewhere were never acted on, and its finalizers must not hold the uninstall.
    let watched = super::watched::of_install(client, namespace).await;
    let (clusters, other_clusters) =
        super::watched::split(super::list_or_none::<StorageOSCluster>(client).await, &watched);
    let (upgrades, other_upgrades) =
        super::watched::split(super::list_or_none::<StorageOSUpgrade>(client).await, &watched);
    let (jobs, other_jobs) = super::watched::split(super::list_or_none::<Job>(client).await, &watched);
    for (kind, names) in [
        ("StorageOSCluster", &other_clusters),
        ("StorageOSUpgrade", &other_upgrades),
        ("Job", &other_jobs),
    ] {
        if !names.is_empty() {
            progress(format!(
                "skipping {kind}s outside the namespaces the operator watches ({watched}): {}; they were never the operator's, delete them yourself if you mean to",
                names.join(", ")
            ));
        }
    }
    let pvs = super::list_all::<PersistentVolume>(client)
        .await
        .map_err(read("the PersistentVolumes"))?;
    let pods = super::list_all::<Pod>(client).await.map_err(read("the Pods"))?;
    let users = pods_using_volumes(&pvs, &pods);
    if !users.is_empty() {
        if !args.force {
            return Err(Error::InUse(users));
        }
        progress(format!(
            "--force: {} pod(s) using StorageOS volumes lose their storage: {}",
            users.len(),
            users.join(", ")
        ));
    }

    let dir = match &args.recovery_dir {
        Some(d) => d.clone(),
        None => std::env::var_os("HOME")
            .map(PathBuf::from)
            .ok_or(Error::NoHome)?
            .join(".kube/storageos")
            .join(chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string()),
    };
    if args.dry_run {
        println!("would write recovery manifests to {}", dir.display());
    } else {
        write_recovery(client, namespace, &clusters, &dir).await?;
        println!("wrote recovery manifests to {}", dir.display());
    }

    // Upgrades and Jobs first (the operator restores what an unfinished upgrade scaled down and
    // releases their finalizers), then each cluster.
    for u in upgrades {
        let api = Api::namespaced(client.clone(), &u.namespace().unwrap_or_default());
        delete_and_wait(&api, &u, namespace, args, upgrade_line).await?;
    }
    for j in jobs {
        let api = Api::namespaced(client.clone(), &j.namespace().unwrap_or_default());
        delete_and_wait(&api, &j, namespace, args, |_| "deleting".into()).await?;
    }
    for c in &clusters {
        delete_cluster(client, c, namespace, args).await?;
    }

    let mut applier = Applier::new(client.clone(), args.dry_run);
    let suffix = if args.dry_run { " (dry run)" } else { "" };
    let mut objects = super::install::operator_objects(crate::render::DEFAULT_OPERATOR_IMAGE, namespace)?;
    objects.reverse();
    if !args.keep_crds {
        objects.extend(super::install::crds()?);
    }
    let mut namespace_deleted = false;
    for obj in objects {
        namespace_deleted |= delete_one(client, &mut applier, &obj, suffix).await?;
    }
    if namespace_deleted && !args.dry_run {
        wait_namespace_gone(client, namespace, args.timeout).await?;
    }
    if args.include_etcd {
        remove_eval_etcd(client, &mut applier, args).await?;
    }
    println!(
        "{}StorageOS is uninstalled. Recovery manifests: {}",
        if args.dry_run { "(dry run) " } else { "" },
        dir.display()
    );
    Ok(())
}

/// Removes the evaluation etcd, only if this plugin installed it.
async fn remove_eval_etcd(client: &Client, applier: &mut Applier, args: &UninstallArgs) -> Result<(), Error> {
    use super::eval_etcd;
    let ns = &args.etcd_namespace;
    let sts = Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(client.clone(), ns)
        .get_opt(eval_etcd::NAME)
        .await
        .map_err(read(format!("StatefulSet {ns}/{}", eval_etcd::NAME)))?;
    match sts {
        None => println!("no evaluation etcd in namespace {ns}"),
        Some(s) if !eval_etcd::installed_by_us(s.labels()) => println!(
            "kept StatefulSet {ns}/{}: it is not an etcd kubectl storageos installed",
            eval_etcd::NAME
        ),
        Some(_) => {
            let suffix = if args.dry_run { " (dry run)" } else { "" };
            let mut objects = eval_etcd::objects(ns, eval_etcd::IMAGE, None);
            objects.reverse();
            for obj in objects {
                delete_one(client, applier, &obj, suffix).await?;
            }
        }
    }
    Ok(())
}

/// Deletes one install object, saying so; a Namespace only when the plugin created it
/// ([`namespace`]), saying when it keeps one. Returns whether it deleted a Namespace.
async fn delete_one(client: &Client, applier: &mut Applier, obj: &Value, suffix: &str) -> Result<bool, Error> {
    let key = crate::runtime::kube::apply::ObjectKey::of(obj).map_err(|e| apply::Error::Identity(e.to_string()))?;
    if key.kind == "Namespace" {
        match namespace::removal_of(client, &key.name).await? {
            namespace::Removal::Absent => return Ok(false),
            namespace::Removal::Kept => {
                println!("{}", namespace::kept_line(&key.name));
                return Ok(false);
            }
            namespace::Removal::Delete => {}
        }
    }
    let deleted = applier.delete(obj).await?;
    if deleted {
        println!("{} deleted{suffix}", apply::describe(&key));
    }
    Ok(deleted && key.kind == "Namespace")
}

/// Waits until the operator's namespace is gone, so that an install right after succeeds.
async fn wait_namespace_gone(client: &Client, namespace: &str, timeout: Duration) -> Result<(), Error> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let started = Instant::now();
    let mut said = false;
    while api
        .get_opt(namespace)
        .await
        .map_err(read(format!("namespace {namespace}")))?
        .is_some()
    {
        if !said {
            progress(format!("waiting for namespace {namespace} to be gone"));
            said = true;
        }
        if started.elapsed() > timeout {
            return Err(Error::NamespaceStays {
                namespace: namespace.into(),
                timeout,
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

/// Deletes one cluster (forced when asked) and waits until its finalizer is released.
async fn delete_cluster(
    client: &Client,
    c: &StorageOSCluster,
    operator_namespace: &str,
    args: &UninstallArgs,
) -> Result<(), Error> {
    let (ns, name) = (c.namespace().unwrap_or_default(), c.name_any());
    let api: Api<StorageOSCluster> = Api::namespaced(client.clone(), &ns);
    if args.force && !args.dry_run {
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
                "metadata": {"name": name, "namespace": ns, "annotations": {FORCE_DELETE_ANNOTATION: "true"}}
            })),
        )
        .await
        .map_err(|source| Error::Write {
            what: format!("annotate StorageOSCluster {ns}/{name} for a forced delete"),
            source,
        })?;
    }
    delete_and_wait(&api, c, operator_namespace, args, super::install::cluster_line).await
}

/// Deletes `obj` and waits (printing `line` of it when that changes) until the operator has
/// released its finalizer.
async fn delete_and_wait<K>(
    api: &Api<K>,
    obj: &K,
    operator_namespace: &str,
    args: &UninstallArgs,
    line: impl Fn(&K) -> String,
) -> Result<(), Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let (ns, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
    let kind = K::kind(&()).to_lowercase();
    let shown = format!("{kind}.{}/{name}", K::group(&()));
    let full = format!("{} {ns}/{name}", K::kind(&()));
    if args.dry_run {
        println!("{shown} deleted (dry run; namespace {ns})");
        return Ok(());
    }
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(source) => {
            return Err(Error::Write {
                what: format!("delete {full}"),
                source,
            });
        }
    }
    progress(format!(
        "deleting {full}; waiting for the operator to finish with it (up to {:?})",
        args.timeout
    ));
    let look = || async {
        let live = api.get_opt(&name).await.map_err(read(full.clone()))?;
        Ok::<_, Error>(Look {
            line: live.as_ref().map(&line),
            done: live.is_none(),
        })
    };
    match wait::until(&format!("{ns}/{name}"), args.timeout, look).await? {
        Waited::Done => {
            progress(format!("{full} is gone"));
            println!("{shown} deleted");
            Ok(())
        }
        Waited::TimedOut { last } => Err(Error::Timeout {
            cluster: full,
            namespace: operator_namespace.to_string(),
            timeout: args.timeout,
            last,
        }),
    }
}

/// An upgrade's phase, for progress lines.
fn upgrade_line(u: &StorageOSUpgrade) -> String {
    format!(
        "phase {}",
        u.status
            .as_ref()
            .and_then(|s| s.phase)
            .map(|p| format!("{p:?}"))
            .unwrap_or_else(|| "(none)".into())
    )
}

/// An object as it can be applied again: no status, no server-set metadata.
pub fn reapplicable(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "managedFields",
            "resourceVersion",
            "uid",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "finalizers",
            "ownerReferences",
        ] {
            meta.remove(k);
        }
    }
    v
}

fn yaml_stream(items: impl IntoIterator<Item = Value>) -> String {
    items
        .into_iter()
        .map(|v| format!("---\n{}", serde_yaml::to_string(&v).unwrap_or_default()))
        .collect()
}

/// Writes the recovery manifests into `dir` ([`private`] modes), every object and every file
/// through the bundle's redactor: what they need of a Secret is its name and key names.
async fn write_recovery(
    client: &Client,
    namespace: &str,
    clusters: &[StorageOSCluster],
    dir: &Path,
) -> Result<(), Error> {
    let Learnt {
        redactor: r,
        secrets,
        children,
        operator,
        warnings,
    } = sources::learn(client, namespace, clusters).await;
    let stream = |items: Vec<Value>| {
        yaml_stream(items.into_iter().map(|o| {
            let mut o = reapplicable(o);
            r.object(&mut o);
            o
        }))
    };
    let mut files: Vec<(String, String)> = Vec::new();
    files.push(("storageosclusters.yaml".into(), stream(super::to_values(clusters))));
    let upgrades = super::list_or_none::<StorageOSUpgrade>(client).await;
    files.push(("storageosupgrades.yaml".into(), stream(super::to_values(&upgrades))));
    let jobs = super::list_or_none::<Job>(client).await;
    files.push(("jobs.yaml".into(), stream(super::to_values(&jobs))));
    let mut refs = Vec::new();
    for (c, children) in clusters.iter().zip(children) {
        let (ns, name) = (&c.spec.secret_ref_namespace, &c.spec.secret_ref_name);
        let keys: Vec<String> = secrets
            .get(&(ns.clone(), name.clone()))
            .map(|s| crate::render::secrets::contents(s).into_keys().collect())
            .unwrap_or_default();
        refs.push(json!({
            "cluster": format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()),
            "secret": {"namespace": ns, "name": name, "keys": keys},
            "note": "values are not written here: recreate this Secret with the same credentials before applying the cluster again"
        }));
        files.push((
            format!("children-{}_{}.yaml", c.namespace().unwrap_or_default(), c.name_any()),
            stream(children),
        ));
    }
    files.push(("secret-refs.yaml".into(), yaml_stream(refs)));
    if let Some(d) = operator {
        files.push(("operator-deployment.yaml".into(), stream(super::to_values(&[d]))));
    }
    files.extend(sources::warnings_file(&warnings));
    files.push((
        "README.txt".into(),
        format!(
            "Written by `kubectl storageos uninstall` at {}.\n\
             To restore: reinstall the operator (kubectl storageos install --skip-cluster -n {namespace}),\n\
             recreate each Secret named in secret-refs.yaml with the same credentials, then\n\
             kubectl apply -f storageosclusters.yaml. Every credential is redacted ({REDACTED}):\n\
             put back any that a cluster names inline (such as user:password in\n\
             spec.kvBackend.address) before applying it. The children-*.yaml files show what the\n\
             operator had created (it creates them again).\n",
            chrono::Utc::now().to_rfc3339()
        ),
    ));
    let fail = |source| Error::Recovery {
        path: dir.display().to_string(),
        source,
    };
    private::create_dir(dir).map_err(fail)?;
    for (name, content) in files {
        private::write(&dir.join(name), &r.text(&content)).map_err(fail)?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn recovery_objects_can_be_applied_again() {
        let v = reapplicable(json!({
            "apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
            "metadata": {"name": "s", "namespace": "n", "uid": "u", "resourceVersion": "1",
                         "finalizers": ["f"], "labels": {"a": "b"}},
            "spec": {"secretRefName": "x"}, "status": {"phase": "Running"}
        }));
        assert_eq!(
            v,
            json!({"apiVersion": "storageos.com/v1", "kind": "StorageOSCluster",
                   "metadata": {"name": "s", "namespace": "n", "labels": {"a": "b"}},
                   "spec": {"secretRefName": "x"}})
        );
    }
}
