//! OLM's `OperatorCondition`: `Upgradeable=False` while replacing the operator would be unsafe.
//!
//! Under OLM the operator's Deployment carries `OPERATOR_CONDITION_NAME` (OLM injects it and
//! grants the operator's ServiceAccount get and update on that one object). While a
//! StorageOSUpgrade holds its cluster (from pausing it until the applications are back, rolling
//! back included) or a StorageOSCluster is Degraded, OLM must not swap the operator underneath:
//! the leader sets `spec.conditions` `Upgradeable=False` with the reason and what to wait for, and
//! `True` again after. Outside OLM the variable is unset and nothing here runs.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};

use crate::crd::{StorageOSCluster, StorageOSUpgrade};
use crate::reasons::{self, Reason};
use crate::runtime::kube::cache::every;
use crate::runtime::kube::conditions;
use crate::runtime::kube::namespaced;
use crate::runtime::kube::trusted::TrustedNamespaces;

/// The variable OLM sets on the operator's Deployment: the name of its `OperatorCondition`.
pub const ENV: &str = "OPERATOR_CONDITION_NAME";

/// The condition OLM reads before it replaces an operator.
pub const UPGRADEABLE: &str = "Upgradeable";

/// How soon a write that failed (the apiserver busy, access never granted) is tried again.
const RETRY: Duration = Duration::from_secs(60);

/// How long after start the OperatorCondition may be missing or not yet readable without a
/// warning: OLM creates it, and the Role that lets the operator read it, alongside the
/// Deployment, so the operator's first attempts can come before them.
const OLM_GRACE: Duration = Duration::from_secs(120);

/// The first wait while OLM is still granting; it doubles up to [`RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(2);

/// OLM's `OperatorCondition` (`operators.coreos.com/v2`).
fn resource() -> ApiResource {
    ApiResource {
        group: "operators.coreos.com".into(),
        version: "v2".into(),
        api_version: "operators.coreos.com/v2".into(),
        kind: "OperatorCondition".into(),
        plural: "operatorconditions".into(),
    }
}

/// Whether the operator may be replaced now, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub upgradeable: bool,
    pub reason: Reason,
    pub message: String,
}

/// The verdict for the watched `clusters` and `upgrades` (objects outside `trusted` are not the
/// operator's and count for nothing): an upgrade that holds its cluster first, then a Degraded
/// cluster, else upgradeable.
pub fn verdict(
    clusters: &[Arc<StorageOSCluster>],
    upgrades: &[Arc<StorageOSUpgrade>],
    trusted: &TrustedNamespaces,
) -> Verdict {
    let ours = |ns: Option<String>| ns.is_some_and(|ns| trusted.allows(&ns));
    let mut held: Vec<String> = upgrades
        .iter()
        .filter(|u| ours(u.namespace()))
        .filter_map(|u| {
            let phase = u.status.as_ref()?.phase?;
            phase
                .holds_cluster()
                .then(|| format!("{}/{} ({phase:?})", u.namespace().unwrap_or_default(), u.name_any()))
        })
        .collect();
    held.sort();
    if !held.is_empty() {
        return Verdict {
            upgradeable: false,
            reason: reasons::STORAGEOS_UPGRADE_UNDER_WAY,
            message: format!(
                "StorageOSUpgrade {} holds its cluster in maintenance; upgrade the operator once it is Completed or RolledBack (kubectl get storageosupgrades -A)",
                held.join(", ")
            ),
        };
    }
    let mut degraded: Vec<String> = clusters
        .iter()
        .filter(|c| ours(c.namespace()))
        .filter_map(|c| {
            let found = conditions::find(c.status.as_ref()?.conditions.as_deref(), "Degraded")?;
            (found.status == "True").then(|| {
                format!(
                    "{}/{} ({})",
                    c.namespace().unwrap_or_default(),
                    c.name_any(),
                    found.message
                )
            })
        })
        .collect();
    degraded.sort();
    if !degraded.is_empty() {
        return Verdict {
            upgradeable: false,
            reason: reasons::STORAGEOS_CLUSTER_DEGRADED,
            message: format!(
                "StorageOSCluster {} is Degraded; upgrade the operator once it is Running again (kubectl get stos -A)",
                degraded.join(", ")
            ),
        };
    }
    Verdict {
        upgradeable: true,
        reason: reasons::UPGRADE_SAFE,
        message: "No StorageOSUpgrade holds a cluster and no StorageOSCluster is Degraded.".into(),
    }
}

/// `conditions` with `Upgradeable` set to `verdict` (its transition time kept when the status
/// does not change), or `None` when it already says exactly that.
pub fn updated(conditions: &[Condition], verdict: &Verdict, now: &Time) -> Option<Vec<Condition>> {
    let status = if verdict.upgradeable { "True" } else { "False" };
    let same = conditions::find(Some(conditions), UPGRADEABLE)
        .is_some_and(|c| c.status == status && c.reason == verdict.reason.name() && c.message == verdict.message);
    if same {
        return None;
    }
    let mut conditions = conditions.to_vec();
    conditions::set(
        &mut conditions,
        UPGRADEABLE,
        verdict.upgradeable,
        verdict.reason,
        verdict.message.clone(),
        None,
        now,
    );
    Some(conditions)
}

/// Why the condition could not be written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read or write OperatorCondition {namespace}/{name}: {source}")]
    Kube {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("OperatorCondition {namespace}/{name} has spec.conditions that are not conditions: {source}")]
    Malformed {
        namespace: String,
        name: String,
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// Whether OLM has not yet created the OperatorCondition (404) or granted the operator access
    /// to it (403): expected for a moment after OLM starts the operator.
    pub fn olm_not_ready(&self) -> bool {
        matches!(self, Error::Kube { source: kube::Error::Api(status), .. } if status.code == 403 || status.code == 404)
    }
}

/// Writes `verdict` into the OperatorCondition `namespace/name`'s `spec.conditions` (a read, and
/// an update only when it changes; a conflicting writer is read again).
pub async fn write(client: &Client, namespace: &str, name: &str, verdict: &Verdict) -> Result<bool, Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource());
    let kube_error = |source| Error::Kube {
        namespace: namespace.into(),
        name: name.into(),
        source,
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut object = api.get(name).await.map_err(kube_error)?;
        let current = object
            .data
            .pointer("/spec/conditions")
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        let current: Vec<Condition> = match current {
            serde_json::Value::Null => Vec::new(),
            v => serde_json::from_value(v).map_err(|source| Error::Malformed {
                namespace: namespace.into(),
                name: name.into(),
                source,
            })?,
        };
        let Some(next) = updated(&current, verdict, &conditions::now()) else {
            return Ok(false);
        };
        let next = serde_json::to_value(next).map_err(|source| Error::Malformed {
            namespace: namespace.into(),
            name: name.into(),
            source,
        })?;
        match object.data.get_mut("spec").and_then(|s| s.as_object_mut()) {
            Some(spec) => {
                spec.insert("conditions".into(), next);
            }
            None => object.data["spec"] = serde_json::json!({ "conditions": next }),
        }
        match api.replace(name, &PostParams::default(), &object).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 && attempts < 3 => continue,
            Err(e) => return Err(kube_error(e)),
        }
    }
}

/// Keeps the OperatorCondition `namespace/name` in step with the watched StorageOSClusters and
/// StorageOSUpgrades until `shutdown` (run by the leader only).
pub async fn run(
    client: Client,
    namespace: String,
    name: String,
    trusted: TrustedNamespaces,
    shutdown: impl Future<Output = ()>,
) {
    let (clusters, cluster_writer) = reflector::store::<StorageOSCluster>();
    let (upgrades, upgrade_writer) = reflector::store::<StorageOSUpgrade>();
    // Only the watched namespaces: objects elsewhere count for nothing, so they are not read.
    let cluster_events = reflector::reflector(
        cluster_writer,
        namespaced::watch(&client, &trusted, &every(), None, clusters.clone()).default_backoff(),
    )
    .map(|e| (0, e.map(|e| matches!(e, watcher::Event::InitDone))));
    let upgrade_events = reflector::reflector(
        upgrade_writer,
        namespaced::watch(&client, &trusted, &every(), None, upgrades.clone()).default_backoff(),
    )
    .map(|e| (1, e.map(|e| matches!(e, watcher::Event::InitDone))));
    let events = stream::select(cluster_events, upgrade_events);
    tokio::pin!(events);
    let mut filled = [false, false];
    let mut written: Option<Verdict> = None;
    let started = tokio::time::Instant::now();
    let mut retry_in = FIRST_RETRY;
    tracing::info!(operator_condition = %format!("{namespace}/{name}"), "reporting Upgradeable to OLM");
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            event = events.next() => match event {
                None => return,
                Some((i, Ok(init_done))) => filled[i] |= init_done,
                Some((_, Err(e))) => {
                    tracing::warn!(error = %e, "watch of StorageOSClusters or StorageOSUpgrades failed; retrying");
                    continue;
                }
            },
            () = tokio::time::sleep(retry_in), if written.is_none() => {}
        }
        // Never decide from a half-listed cache: an upgrade not yet listed is not "none".
        if filled != [true, true] {
            continue;
        }
        let verdict = verdict(&clusters.state(), &upgrades.state(), &trusted);
        if written.as_ref() == Some(&verdict) {
            continue;
        }
        match write(&client, &namespace, &name, &verdict).await {
            Ok(changed) => {
                if changed {
                    tracing::info!(upgradeable = verdict.upgradeable, reason = %verdict.reason, message = %verdict.message, "set the OperatorCondition");
                }
                written = Some(verdict);
                retry_in = FIRST_RETRY;
            }
            Err(e) if e.olm_not_ready() && started.elapsed() < OLM_GRACE => {
                tracing::info!(retry_in = ?retry_in, "the OperatorCondition is not yet created or readable; OLM grants it alongside the Deployment");
                written = None;
                retry_in = (retry_in * 2).min(RETRY);
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?RETRY, "could not tell OLM whether the operator may be upgraded");
                written = None;
                retry_in = RETRY;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cluster(yaml: &str) -> Arc<StorageOSCluster> {
        Arc::new(serde_yaml::from_str(yaml).unwrap())
    }

    fn upgrade(ns: &str, name: &str, phase: &str) -> Arc<StorageOSUpgrade> {
        Arc::new(
            serde_yaml::from_str(&format!(
                "apiVersion: storageos.com/v1\nkind: StorageOSUpgrade\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{newImage: n}}\nstatus: {{phase: {phase}}}\n"
            ))
            .unwrap(),
        )
    }

    fn degraded(ns: &str) -> Arc<StorageOSCluster> {
        cluster(&format!(
            "apiVersion: storageos.com/v1\nkind: StorageOSCluster\nmetadata: {{name: storageos, namespace: {ns}}}\nspec: {{secretRefName: s, secretRefNamespace: s}}\nstatus:\n  phase: Degraded\n  conditions:\n  - {{type: Degraded, status: 'True', reason: NodesLost, message: 2/3 nodes ready, lastTransitionTime: '2026-01-01T00:00:00Z'}}\n"
        ))
    }

    #[test]
    fn an_upgrade_that_holds_its_cluster_or_a_degraded_cluster_makes_the_operator_not_upgradeable() {
        let trusted = TrustedNamespaces::only("storageos");
        let v = verdict(&[], &[], &trusted);
        assert!(v.upgradeable);
        assert_eq!(v.reason, reasons::UPGRADE_SAFE);

        for phase in ["Pausing", "ScalingDown", "UpgradingNodes", "RollingBack", "ScalingUp"] {
            let v = verdict(&[], &[upgrade("storageos", "up", phase)], &trusted);
            assert!(!v.upgradeable, "{phase}");
            assert_eq!(v.reason, reasons::STORAGEOS_UPGRADE_UNDER_WAY);
            assert!(v.message.contains(&format!("storageos/up ({phase})")), "{}", v.message);
        }
        for phase in [
            "Pending",
            "PullingImage",
            "Completed",
            "RolledBack",
            "Failed",
            "Refused",
        ] {
            assert!(
                verdict(&[], &[upgrade("storageos", "up", phase)], &trusted).upgradeable,
                "{phase}"
            );
        }

        let v = verdict(&[degraded("storageos")], &[], &trusted);
        assert!(!v.upgradeable);
        assert_eq!(v.reason, reasons::STORAGEOS_CLUSTER_DEGRADED);
        assert!(
            v.message.contains("storageos/storageos (2/3 nodes ready)"),
            "{}",
            v.message
        );
        // The upgrade is what to wait for first: it is why the cluster looks degraded.
        let v = verdict(
            &[degraded("storageos")],
            &[upgrade("storageos", "up", "RollingBack")],
            &trusted,
        );
        assert_eq!(v.reason, reasons::STORAGEOS_UPGRADE_UNDER_WAY);
    }

    #[test]
    fn a_missing_or_not_yet_granted_condition_is_olm_still_starting_and_other_failures_are_not() {
        let api = |code: u16| Error::Kube {
            namespace: "ns".into(),
            name: "op.v1".into(),
            source: kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            })),
        };
        assert!(api(403).olm_not_ready());
        assert!(api(404).olm_not_ready());
        assert!(!api(500).olm_not_ready());
        assert!(!api(409).olm_not_ready());
    }

    #[test]
    fn objects_outside_the_watched_namespaces_count_for_nothing() {
        let trusted = TrustedNamespaces::only("storageos");
        let v = verdict(
            &[degraded("tenant")],
            &[upgrade("tenant", "up", "UpgradingNodes")],
            &trusted,
        );
        assert!(v.upgradeable, "{v:?}");
    }

    #[test]
    fn the_condition_moves_its_transition_time_only_when_its_status_flips() {
        let t0 = Time("2026-01-01T00:00:00Z".parse().unwrap());
        let t1 = Time("2026-01-02T00:00:00Z".parse().unwrap());
        let trusted = TrustedNamespaces::only("storageos");
        let held = verdict(&[], &[upgrade("storageos", "up", "UpgradingNodes")], &trusted);
        let other = Condition {
            type_: "Other".into(),
            status: "True".into(),
            reason: "X".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: t0.clone(),
        };
        let first = updated(std::slice::from_ref(&other), &held, &t0).unwrap();
        assert_eq!(first.len(), 2, "other conditions are kept");
        assert_eq!(updated(&first, &held, &t1), None, "nothing to write");
        let rolling = verdict(&[], &[upgrade("storageos", "up", "RollingBack")], &trusted);
        let second = updated(&first, &rolling, &t1).unwrap();
        let c = conditions::find(Some(&second), UPGRADEABLE).unwrap();
        assert_eq!((c.status.as_str(), &c.last_transition_time), ("False", &t0));
        let safe = verdict(&[], &[], &trusted);
        let third = updated(&second, &safe, &t1).unwrap();
        let c = conditions::find(Some(&third), UPGRADEABLE).unwrap();
        assert_eq!((c.status.as_str(), &c.last_transition_time), ("True", &t1));
        assert_eq!(c.reason, "UpgradeSafe");
    }
}
