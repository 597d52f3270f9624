//! `kubectl storageos upgrade`: StorageOS (a StorageOSUpgrade, which the operator carries out
//! offline: pull, pause, scale down the apps using StorageOS volumes, restart the nodes on the
//! new image, scale back up) after path checks, or with `--operator` the operator's own install
//! objects (server-side apply of the ones this plugin carries).

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::apply::{self, Applier};
use super::progress;
use super::wait::{self, Look, Waited};
use crate::crd::{StorageOSCluster, StorageOSUpgrade, UpgradePhase};
use crate::render::DEFAULT_OPERATOR_IMAGE;
use storageos_cluster_operator::upgrade::apps::{Volumes, describe, qualifying};

#[derive(Debug, clap::Args)]
#[command(
    about = "Upgrade StorageOS (a StorageOSUpgrade) or the operator itself, with path checks",
    long_about = "Upgrade StorageOS to --version (the tag of the node image the cluster runs) or \
    --image: checks the path first (no downgrade, no skipped minor or major, no tag without a \
    version unless --force, which the operator then honours too: spec.force), \
    prints the plan (which Deployments and StatefulSets using StorageOS volumes are scaled to 0 \
    while the nodes restart), then creates a StorageOSUpgrade and, with --wait, follows it to \
    Completed. With --operator, applies the operator's install objects of this plugin's release \
    (or --operator-image) instead."
)]
pub struct UpgradeArgs {
    /// StorageOS version to upgrade to, for example 2.5.0 (the node image's tag).
    #[arg(long, value_name = "VERSION", conflicts_with = "image")]
    pub version: Option<String>,
    /// StorageOS node image to upgrade to.
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Allow a downgrade, a skipped minor or major version, or an image without a version tag
    /// (sets the StorageOSUpgrade's spec.force).
    #[arg(long)]
    pub force: bool,
    /// Upgrade the operator (its CRDs, RBAC and Deployment) instead of StorageOS.
    #[arg(long, conflicts_with_all = ["version", "image"])]
    pub operator: bool,
    /// The operator image for --operator.
    #[arg(long, default_value = DEFAULT_OPERATOR_IMAGE, value_name = "IMAGE")]
    pub operator_image: String,
    /// Wait until the upgrade has completed, printing progress.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value = "30m", value_parser = crate::duration::parse_flag, value_name = "DURATION")]
    pub timeout: Duration,
    /// Change nothing: check the path and print the plan (server-side dry run).
    #[arg(long)]
    pub dry_run: bool,
}

/// Why the upgrade did not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("say what to upgrade to: --version VERSION, --image IMAGE, or --operator")]
    Target,
    #[error("no StorageOSCluster found: install one first (kubectl storageos install)")]
    NoCluster,
    #[error("StorageOS already runs {0}: nothing to upgrade")]
    Same(String),
    /// The operator refuses the same paths (`spec.force` is --force).
    #[error("{0} (--force)")]
    Path(#[from] storageos_cluster_operator::upgrade::path::PathError),
    #[error(
        "StorageOSUpgrade {0} has not completed: wait for it (kubectl get storageosupgrades -A), or delete it to cancel"
    )]
    Running(String),
    #[error("cannot read {what}: {source}; check --kubeconfig/--context")]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot create StorageOSUpgrade {name}: {source}")]
    Create {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "timed out after {timeout:?} waiting for StorageOSUpgrade {name} (last seen: {last}); see kubectl describe storageosupgrade"
    )]
    Timeout {
        name: String,
        timeout: Duration,
        last: String,
    },
    #[error(
        "StorageOSUpgrade {name} rolled back: {cause}; the nodes run the previous image again. Read status.journal \
         (kubectl describe storageosupgrade), fix the cause, delete the upgrade and try again"
    )]
    RolledBack { name: String, cause: String },
    #[error(transparent)]
    Install(#[from] super::install::Error),
    #[error(transparent)]
    Apply(#[from] apply::Error),
}

fn read(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Read { what, source }
}

pub use storageos_cluster_operator::upgrade::path::{image_version, with_version};

/// The path check of `kubectl storageos upgrade`: as the operator's (`upgrade::path`), and an
/// upgrade to the running version is nothing to do.
pub fn check_path(from: &str, to: &str, force: bool) -> Result<(), Error> {
    if image_version(from).is_some_and(|f| image_version(to) == Some(f)) || from == to {
        return Err(Error::Same(from.into()));
    }
    Ok(storageos_cluster_operator::upgrade::path::check(from, to, force)?)
}

/// `kubectl storageos upgrade`.
pub async fn run(client: &Client, namespace: &str, args: &UpgradeArgs) -> Result<(), Error> {
    if args.operator {
        let mut applier = Applier::new(client.clone(), args.dry_run);
        let mut objects = super::install::crds()?;
        objects.extend(super::install::operator_objects(&args.operator_image, namespace)?);
        for obj in &objects {
            let outcome = super::install::apply_install_object(client, &mut applier, obj, args.dry_run).await?;
            super::install::print_outcome(obj, outcome, args.dry_run);
        }
        return Ok(());
    }
    let lp = ListParams::default();
    let clusters = super::list_all::<StorageOSCluster>(client)
        .await
        .map_err(read("the StorageOSClusters"))?;
    let cluster = clusters.first().ok_or(Error::NoCluster)?;
    let current = cluster
        .status
        .as_ref()
        .and_then(|s| s.images.as_ref()?.node_container.clone())
        .or_else(|| cluster.spec.images.as_ref()?.node_container.clone())
        .unwrap_or_else(|| crate::render::DefaultImages::default().node);
    let target = match (&args.image, &args.version) {
        (Some(image), _) => image.clone(),
        (None, Some(v)) => with_version(&current, v),
        (None, None) => return Err(Error::Target),
    };
    check_path(&current, &target, args.force)?;

    let ns = cluster.namespace().unwrap_or_default();
    let upgrades: Api<StorageOSUpgrade> = Api::namespaced(client.clone(), &ns);
    for u in upgrades.list(&lp).await.map_err(read("the StorageOSUpgrades"))?.items {
        if u.status.as_ref().and_then(|s| s.completed) != Some(true) {
            return Err(Error::Running(format!("{ns}/{}", u.name_any())));
        }
    }

    // The plan.
    let deployments = super::list_all::<Deployment>(client)
        .await
        .map_err(read("the Deployments"))?;
    let statefulsets = super::list_all::<StatefulSet>(client)
        .await
        .map_err(read("the StatefulSets"))?;
    let pvcs = super::list_all::<PersistentVolumeClaim>(client)
        .await
        .map_err(read("the PVCs"))?;
    let pvs = super::list_all::<PersistentVolume>(client)
        .await
        .map_err(read("the PVs"))?;
    let classes = super::list_all::<StorageClass>(client)
        .await
        .map_err(read("the StorageClasses"))?;
    let apps = qualifying(&deployments, &statefulsets, &Volumes::new(&pvcs, &pvs, &classes));
    println!(
        "Upgrade StorageOSCluster {ns}/{} from {current} to {target}:",
        cluster.name_any()
    );
    println!("  1. pull {target} on every StorageOS node");
    println!("  2. pause the cluster (maintenance)");
    if apps.is_empty() {
        println!("  3. scale down: no Deployment or StatefulSet uses StorageOS volumes");
    } else {
        println!(
            "  3. scale to 0 (and back afterwards): {}",
            apps.iter().map(describe).collect::<Vec<_>>().join(", ")
        );
    }
    println!("  4. restart every StorageOS node pod on {target}");
    println!("  5. scale the applications back up and unpause");

    let name = format!(
        "upgrade-{}",
        target
            .rsplit_once(':')
            .map(|(_, t)| t)
            .unwrap_or("new")
            .replace(['.', '_'], "-")
            .to_lowercase()
    );
    let upgrade: StorageOSUpgrade = serde_json::from_value(json!({
        "apiVersion": "storageos.com/v1", "kind": "StorageOSUpgrade",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"newImage": target, "force": args.force.then_some(true)}
    }))
    .map_err(|e| Error::Create {
        name: name.clone(),
        source: kube::Error::SerdeError(e),
    })?;
    let params = PostParams {
        dry_run: args.dry_run,
        field_manager: Some(super::FIELD_MANAGER.into()),
    };
    upgrades
        .create(&params, &upgrade)
        .await
        .map_err(|source| Error::Create {
            name: format!("{ns}/{name}"),
            source,
        })?;
    let suffix = if args.dry_run { " (dry run)" } else { "" };
    println!("storageosupgrade.storageos.com/{name} created{suffix}");
    if args.wait && !args.dry_run {
        wait_completed(&upgrades, &name, args.timeout).await?;
    }
    Ok(())
}

async fn wait_completed(api: &Api<StorageOSUpgrade>, name: &str, timeout: Duration) -> Result<(), Error> {
    progress(format!(
        "waiting for StorageOSUpgrade {name} to complete (up to {timeout:?})"
    ));
    let look = || async {
        let Some(u) = api
            .get_opt(name)
            .await
            .map_err(read(format!("StorageOSUpgrade {name}")))?
        else {
            return Ok::<_, Error>(Look {
                line: None,
                done: false,
            });
        };
        let status = u.status.unwrap_or_default();
        let message = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .map(|c| format!("{}={} {}", c.type_, c.status, c.message))
            .collect::<Vec<_>>()
            .join("; ");
        let phase = status
            .phase
            .map(|p| format!("{p:?}"))
            .unwrap_or_else(|| "(none yet)".into());
        Ok::<_, Error>(Look {
            line: Some(if message.is_empty() {
                format!("phase {phase}")
            } else {
                format!("phase {phase}: {message}")
            }),
            // Over either way; which way is read once more below.
            done: status.completed == Some(true) || status.phase == Some(UpgradePhase::RolledBack),
        })
    };
    match wait::until(name, timeout, look).await? {
        Waited::Done => {
            let status = api
                .get(name)
                .await
                .map_err(read(format!("StorageOSUpgrade {name}")))?
                .status
                .unwrap_or_default();
            if let Some(rollback) = status.rollback.filter(|_| status.completed != Some(true)) {
                return Err(Error::RolledBack {
                    name: name.into(),
                    cause: rollback.cause,
                });
            }
            progress(format!("StorageOSUpgrade {name} completed"));
            Ok(())
        }
        Waited::TimedOut { last } => Err(Error::Timeout {
            name: name.into(),
            timeout,
            last,
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn upgrade_paths() {
        use storageos_cluster_operator::upgrade::path::PathError;
        let from = "storageos/node:v2.4.2";
        assert!(check_path(from, "storageos/node:v2.4.4", false).is_ok());
        assert!(check_path(from, "storageos/node:v2.5.0", false).is_ok());
        assert!(matches!(
            check_path(from, "storageos/node:v2.3.0", false),
            Err(Error::Path(PathError::Downgrade { .. }))
        ));
        assert!(matches!(
            check_path(from, "storageos/node:v2.6.0", false),
            Err(Error::Path(PathError::Skip { .. }))
        ));
        assert!(check_path(from, "storageos/node:v2.6.0", true).is_ok());
        assert!(matches!(check_path(from, from, true), Err(Error::Same(_))));
        let e = check_path(from, "storageos/node:latest", false).unwrap_err();
        assert!(e.to_string().contains("--force"), "{e}");
    }
}
