//! `storageos-operator plan`: what applying a StorageOSCluster would do, before it is done.
//! Every rendered object is applied with `dryRun=All` and the operator's field manager, and
//! the apiserver's answer is compared with the live object: create, change (the fields, the
//! field managers that lose them, and whether pods restart now or only when deleted), prune or
//! untouched. Nothing is written: every request is a read or a dry run.
//!
//! The same file previews an edit of a running cluster, and an adoption: run it with the Go
//! operator's own CR before this operator takes over.

pub mod diff;

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::Value;

use crate::cluster::ownership::FIELD_MANAGER;
use crate::cluster::ownership::{APPLY_OWNERSHIP, owned_kinds, selector};
use crate::crd::StorageOSCluster;
use crate::render::{self, DefaultImages, labels};
use crate::runtime::kube::apply::Applier;
use crate::runtime::kube::connect;
use crate::runtime::kube::object::ObjectKey;
use diff::{Action, Entry};

/// Arguments of `plan`.
#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// File holding the StorageOSCluster as it would be applied (an edited CR, or the Go
    /// operator's CR to preview an adoption), or a StorageOSUpgrade as it would be created.
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,

    /// kubeconfig of the cluster (default: `KUBECONFIG`, `~/.kube/config`, in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// The operator's image (the api-manager runs from it), with the `RELATED_IMAGE_*` of this
    /// process's environment; default: the running operator's image and environment (Deployment
    /// storageos-operator/storageos-operator), else this release's.
    #[arg(long, env = "OPERATOR_IMAGE")]
    pub operator_image: Option<String>,

    /// Namespace of the running operator's Deployment (`storageos-operator`), whose image and
    /// environment the preview renders with.
    #[arg(long, default_value = crate::rbac::operator::NAMESPACE)]
    pub operator_namespace: String,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// For a StorageOSUpgrade: read StorageOS here (for example a port-forward,
    /// `http://127.0.0.1:5705`) instead of the cluster's Service, which routes only in-cluster.
    #[arg(long, env = "STORAGEOS_ENDPOINT")]
    pub storageos_endpoint: Option<String>,
}

/// Why `plan` failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Connect(#[from] connect::Error),
    #[error(transparent)]
    Render(#[from] render::Error),
    #[error("cannot {what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Apply(#[from] crate::runtime::kube::apply::Error),
    #[error("cannot print the plan: {0}")]
    Print(#[source] serde_json::Error),
}

fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Kube { what, source }
}

/// Runs `plan` and prints it.
pub async fn run(args: &PlanArgs) -> Result<(), Error> {
    let connection = connect::connect(
        args.kubeconfig.as_deref(),
        &crate::crd::contract::user_agent(Some("plan")),
    )
    .await?;
    let entries = plan(&connection.client, args, &connection.version).await?;
    print(&entries, args.json)
}

/// Prints the plan: a table, or JSON.
pub fn print(entries: &[Entry], json: bool) -> Result<(), Error> {
    if json {
        println!("{}", serde_json::to_string_pretty(entries).map_err(Error::Print)?);
    } else {
        print!("{}", table(entries));
    }
    Ok(())
}

/// The preview of applying the StorageOSCluster of `args.file` to the cluster of `client`.
pub async fn plan(client: &kube::Client, args: &PlanArgs, k8s_version: &str) -> Result<Vec<Entry>, Error> {
    // The running operator's settings, unless an image is given: then this process's.
    let (operator_image, env) = match &args.operator_image {
        Some(image) => (image.clone(), std::env::vars().collect()),
        None => {
            let (image, env) = running_operator(client, &args.operator_namespace).await?;
            (image.unwrap_or_else(|| render::DEFAULT_OPERATOR_IMAGE.to_string()), env)
        }
    };
    let mut inputs = render::inputs_from_files(&args.file, &[], Some(k8s_version), &operator_image)?;
    inputs.default_images = DefaultImages::from_env_map(&env);
    inputs.node_env = render::node_env_from(&env);
    let resolved = render::resolve(&inputs.cluster.spec);
    crate::cluster::prepare::read_inputs(client, &resolved, &mut inputs)
        .await
        .map_err(|(what, source)| Error::Kube { what, source })?;
    let plan = render::plan(&inputs)?;

    // Owned by the cluster where they share its namespace, as the operator applies them.
    let cluster = &inputs.cluster;
    let (ns, name) = (cluster.namespace().unwrap_or_default(), cluster.name_any());
    let live_cluster = Api::<StorageOSCluster>::namespaced(client.clone(), &ns)
        .get_opt(&name)
        .await
        .map_err(kube(format!("read StorageOSCluster {ns}/{name}")))?;
    let owner = live_cluster.as_ref().and_then(|c| c.controller_owner_ref(&()));

    let mut entries = Vec::new();
    let mut wanted = Vec::new();
    let mut new_namespaces = std::collections::BTreeSet::new();
    for object in &plan.objects {
        let mut value = object.to_value().map_err(|_| {
            crate::runtime::kube::apply::Error::from(crate::runtime::kube::object::Malformed("a serialisable object"))
        })?;
        let key = ObjectKey::of(&value).map_err(crate::runtime::kube::apply::Error::from)?;
        if let (Some(owner), Some(obj_ns)) = (&owner, &key.namespace)
            && *obj_ns == ns
            && let Ok(owner) = serde_json::to_value(owner)
        {
            value["metadata"]["ownerReferences"] = Value::Array(vec![owner]);
        }
        // In a namespace this plan creates (the drain guards' on a first install or an
        // adoption), the apiserver cannot dry-run anything yet: the object is created.
        if key.namespace.as_ref().is_some_and(|n| new_namespaces.contains(n)) {
            entries.push(diff::entry(key.to_string(), &key.kind, None, &value));
            wanted.push(key);
            continue;
        }
        let api: Api<DynamicObject> = match &key.namespace {
            Some(n) => Api::namespaced_with(client.clone(), n, &key.api_resource()),
            None => Api::all_with(client.clone(), &key.api_resource()),
        };
        let live = api.get_opt(&key.name).await.map_err(kube(format!("read {key}")))?;
        let live = live.map(serde_json::to_value).transpose().map_err(Error::Print)?;
        // A namespace still being deleted (a cluster's, just deleted) is one the plan creates
        // again: nothing in it can be dry-run before it is gone.
        let terminating = live
            .as_ref()
            .is_some_and(|l| l.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()));
        if key.kind == "Namespace" && (live.is_none() || terminating) {
            new_namespaces.insert(key.name.clone());
        }
        if key.kind == "Namespace" && terminating {
            entries.push(diff::entry(key.to_string(), &key.kind, None, &value));
            wanted.push(key);
            continue;
        }
        let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
        let after = match api.patch(&key.name, &params, &Patch::Apply(&value)).await {
            Ok(after) => after,
            // As the operator's apply does, an object whose immutable field differs is replaced.
            Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains("immutable") => {
                entries.push(diff::replace(key.to_string(), s.message));
                wanted.push(key);
                continue;
            }
            Err(e) => return Err(kube(format!("dry-run apply {key}"))(e)),
        };
        let after = serde_json::to_value(after).map_err(Error::Print)?;
        entries.push(diff::entry(key.to_string(), &key.kind, live.as_ref(), &after));
        wanted.push(key);
    }
    // What the operator wrote for this cluster and no longer renders.
    let applier = Applier::new(client.clone(), APPLY_OWNERSHIP);
    let found = applier
        .list(&owned_kinds(), &selector(&labels::pruning(&name, &ns)))
        .await?;
    for key in found {
        if !wanted.contains(&key) {
            entries.push(diff::prune(key.to_string()));
        }
    }
    Ok(entries)
}

/// The running operator's image and environment (its `RELATED_IMAGE_*` defaults and the
/// variables it forwards to the nodes), when its Deployment `storageos-operator` is in `ns`.
async fn running_operator(
    client: &kube::Client,
    ns: &str,
) -> Result<(Option<String>, BTreeMap<String, String>), Error> {
    let name = crate::rbac::operator::NAME;
    let deployment = Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(kube(format!("read Deployment {ns}/{name}")))?;
    let container = deployment
        .and_then(|d| d.spec)
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next());
    let Some(container) = container else {
        return Ok((None, BTreeMap::new()));
    };
    let env = container
        .env
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| Some((e.name, e.value?)))
        .collect();
    Ok((container.image, env))
}

/// The plan as a table: one line per object, changed ones first, then a summary.
pub fn table(entries: &[Entry]) -> String {
    let mut out = String::new();
    let order = |a: Action| match a {
        Action::Create => 0,
        Action::Change => 1,
        Action::Replace => 2,
        Action::Prune => 3,
        Action::Untouched => 4,
    };
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by_key(|e| (order(e.action), e.object.clone()));
    for e in &sorted {
        let mut line = format!("{:<10} {}", e.action.to_string(), e.object);
        if let Some(r) = e.restart {
            line.push_str(&format!("  [{r}]"));
        }
        out.push_str(&line);
        out.push('\n');
        for f in &e.fields {
            out.push_str(&format!("             ~ {f}\n"));
        }
        if !e.losing_managers.is_empty() {
            out.push_str(&format!(
                "             takes fields from: {}\n",
                e.losing_managers.join(", ")
            ));
        }
    }
    let count = |a: Action| entries.iter().filter(|e| e.action == a).count();
    let pending = entries
        .iter()
        .filter(|e| e.restart == Some(diff::Restart::Pending))
        .count();
    out.push_str(&format!(
        "\n{} to create, {} to change, {} to replace, {} to prune, {} untouched; restarts: {} now, {pending} pending (pods of the node DaemonSet pick up a template change only when deleted, or in a StorageOSUpgrade)\n",
        count(Action::Create),
        count(Action::Change),
        count(Action::Replace),
        count(Action::Prune),
        count(Action::Untouched),
        entries.iter().filter(|e| e.restart == Some(diff::Restart::Now)).count(),
    ));
    out
}
