//! Volume health on the PVC (controller `storageos-volume-health`, docs/api-manager.md): from
//! the shared volume poll, an event on a PVC, and on the pods using it, when its StorageOS
//! volume becomes degraded or unavailable (`VolumeConditionAbnormal`, Warning: the reason the
//! CSI external-health-monitor gives, so tooling that watches for it sees StorageOS volumes
//! too) or healthy again (`VolumeConditionNormal`). The condition of every volume is kept in
//! memory and an event is published only when it changes: one event per change, never per
//! poll, and nothing is read or written in Kubernetes while no condition changes. The first
//! read after a start announces the volumes that are not healthy then.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};

use super::snapshot::{OnSnapshot, Subscription};
use super::volume_claims::pvc_of_in;
use super::{Context, attach::decide::users};
use crate::cached_pvc::CachedPvc;
use crate::reasons;
use crate::runtime::kube::controller::ControllerKit;
use crate::storageos::LABEL_REPLICAS;
use crate::storageos::models::{Health, Replica, Volume};
use crate::storageos_poll::VolumeSnapshot;

/// The controller name in logs and metrics.
pub const CONTROLLER: &str = "storageos-volume-health";

/// A volume's condition, as its PVC is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// Master online, every replica ready and as many as asked for.
    Healthy,
    /// Reachable, but with fewer ready copies than asked for: a replica syncing, failed or
    /// missing, or the master offline with a ready replica to promote.
    Degraded,
    /// Master not online and no ready replica that can take over: the data is unreachable.
    Unavailable,
}

impl Condition {
    /// The name `storageos_volume_condition_changes_total` uses.
    pub fn name(self) -> &'static str {
        match self {
            Condition::Healthy => "healthy",
            Condition::Degraded => "degraded",
            Condition::Unavailable => "unavailable",
        }
    }
}

fn ready(r: &Replica) -> bool {
    r.health == "ready"
}

/// The condition of volume `v`.
pub fn condition(v: &Volume) -> Condition {
    if v.master.health != Health::Online {
        return if v.replicas.iter().any(|r| r.promotable && ready(r)) {
            Condition::Degraded
        } else {
            Condition::Unavailable
        };
    }
    let wanted: usize = v.labels.get(LABEL_REPLICAS).and_then(|r| r.parse().ok()).unwrap_or(0);
    let ready_count = v.replicas.iter().filter(|r| ready(r)).count();
    if ready_count < wanted || ready_count < v.replicas.len() {
        Condition::Degraded
    } else {
        Condition::Healthy
    }
}

/// Bytes as people read them (binary units, one decimal).
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// What the event says of volume `v` in condition `c`; `name_of` names a StorageOS node ID.
pub fn describe(v: &Volume, c: Condition, name_of: &dyn Fn(&str) -> String) -> String {
    let master = name_of(&v.master.node_id);
    let wanted: usize = v.labels.get(LABEL_REPLICAS).and_then(|r| r.parse().ok()).unwrap_or(0);
    let ready_count = v.replicas.iter().filter(|r| ready(r)).count();
    match c {
        Condition::Healthy => format!(
            "StorageOS volume {} is healthy again: master online on node {master}, {ready_count} of {wanted} replicas ready",
            v.name
        ),
        Condition::Unavailable => format!(
            "StorageOS volume {} is unavailable: its master on node {master} is {} and no ready replica can take over; \
             its data is unreachable until the node is back (kubectl get volumes.api.storageos.com -A)",
            v.name,
            v.master.health.as_str()
        ),
        Condition::Degraded => {
            let mut parts = Vec::new();
            if v.master.health != Health::Online {
                parts.push(format!(
                    "master on node {master} is {}, a ready replica can take over",
                    v.master.health.as_str()
                ));
            }
            for r in v.replicas.iter().filter(|r| !ready(r)) {
                let p = r.sync_progress;
                let progress = if p.bytes_remaining > 0 {
                    format!(
                        " ({} left at {}/s, about {}s)",
                        bytes(p.bytes_remaining),
                        bytes(p.throughput_bytes),
                        p.estimated_seconds_remaining
                    )
                } else {
                    String::new()
                };
                parts.push(format!(
                    "replica on node {} is {}{progress}",
                    name_of(&r.node_id),
                    r.health
                ));
            }
            if ready_count < wanted {
                parts.push(format!("{ready_count} of {wanted} replicas ready"));
            }
            format!(
                "StorageOS volume {} is degraded: {}; do not take its ready copies away (drain, reboot) until it is healthy again",
                v.name,
                parts.join("; ")
            )
        }
    }
}

/// Runs the controller until the future is dropped.
pub async fn run(ctx: Arc<Context>) {
    let subscription = Subscription::to::<Conditions>(&ctx);
    let pvcs = ctx.pvcs.get(&ctx.kube, CONTROLLER);
    let _ = pvcs.wait_until_ready().await;
    let mut health = Conditions {
        ctx: &ctx,
        kit: ctx.kit(CONTROLLER),
        pvcs: &pvcs,
        seen: HashMap::new(),
    };
    subscription.follow(&mut health).await;
}

/// The controller between snapshots.
struct Conditions<'a> {
    ctx: &'a Context,
    kit: ControllerKit,
    pvcs: &'a Store<CachedPvc>,
    /// By volume ID, the condition last seen.
    seen: HashMap<String, Condition>,
}

impl OnSnapshot for Conditions<'_> {
    /// Subscribed so that the nodes are polled; an event names nodes from the latest list.
    const NODES: bool = true;
    const VOLUMES: bool = true;

    async fn volumes(&mut self, snapshot: &VolumeSnapshot) {
        // A failed read says nothing; a partial one says nothing of the volumes it missed.
        let Some(list) = snapshot.ok() else { return };
        let mut changed = Vec::new();
        for (v, ns) in list.volumes_with_namespace() {
            let now = condition(v);
            let before = self.seen.insert(v.id.clone(), now);
            let announce = match before {
                Some(b) => b != now,
                None => now != Condition::Healthy,
            };
            if announce {
                changed.push((v, ns, now));
            }
        }
        if list.complete() {
            let ids: std::collections::HashSet<&str> = list.volumes().map(|v| v.id.as_str()).collect();
            self.seen.retain(|id, _| ids.contains(id.as_str()));
        }
        // The pods of each namespace with a change, listed once for all its volumes.
        let mut pods: HashMap<String, Option<Vec<Pod>>> = HashMap::new();
        for (v, ns, now) in changed {
            self.announce(v, ns, now, &mut pods).await;
        }
    }
}

impl Conditions<'_> {
    /// The event of a changed condition, on the PVC bound to the volume and on its pods.
    async fn announce(
        &self,
        v: &Volume,
        storageos_ns: Option<&str>,
        c: Condition,
        pods: &mut HashMap<String, Option<Vec<Pod>>>,
    ) {
        self.ctx.metrics.count_volume_condition(c.name());
        let Some((ns, claim)) = pvc_of_in(v, storageos_ns) else {
            tracing::info!(controller = CONTROLLER, volume = %v.name, condition = c.name(), "a volume without a PVC changed condition");
            return;
        };
        let Some(pvc) = self
            .pvcs
            .get(&ObjectRef::new(&claim).within(&ns))
            .filter(|p| p.bound_pv() == Some(v.name.as_str()))
        else {
            return;
        };
        let nodes = self.ctx.storageos.latest_nodes();
        let listed = nodes.as_ref().and_then(|n| n.ok());
        let name_of = |id: &str| {
            listed
                .and_then(|l| l.iter().find(|n| n.id == id))
                .map_or_else(|| id.to_string(), |n| n.name.to_string())
        };
        let note = describe(v, c, &name_of);
        let (kind, reason) = match c {
            Condition::Healthy => (EventType::Normal, reasons::VOLUME_CONDITION_NORMAL),
            _ => (EventType::Warning, reasons::VOLUME_CONDITION_ABNORMAL),
        };
        tracing::info!(controller = CONTROLLER, pvc = %format!("{ns}/{claim}"), condition = c.name(), "{note}");
        self.kit.event(pvc.as_ref(), kind, reason, note.clone()).await;
        if !pods.contains_key(&ns) {
            let listed = Api::<Pod>::namespaced(self.ctx.kube.clone(), &ns)
                .list(&ListParams::default())
                .await;
            if let Err(e) = &listed {
                tracing::warn!(controller = CONTROLLER, namespace = %ns, error = %e, "cannot list the pods using the PVC; the event is on the PVC only");
            }
            pods.insert(ns.clone(), listed.ok().map(|l| l.items));
        }
        let in_ns = pods.get(&ns).and_then(Option::as_deref).unwrap_or_default();
        for user in users(in_ns, &claim).iter().filter(|u| !u.deleting) {
            if let Some(pod) = in_ns.iter().find(|p| p.metadata.name.as_ref() == Some(&user.name)) {
                let note = format!("PVC {claim}: {note}");
                self.kit.event(pod, kind, reason, note).await;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::storageos::models::{Master, SyncProgress};

    fn volume(master: Health, replicas: &[(&str, bool)], wanted: u8) -> Volume {
        let mut v = Volume {
            name: "pv-1".into(),
            master: Master {
                node_id: "id-a".into(),
                health: master,
                ..Master::default()
            },
            replicas: replicas
                .iter()
                .map(|(h, promotable)| Replica {
                    node_id: "id-b".into(),
                    health: (*h).into(),
                    promotable: *promotable,
                    ..Replica::default()
                })
                .collect(),
            ..Volume::default()
        };
        v.labels.insert(LABEL_REPLICAS.into(), wanted.to_string());
        v
    }

    #[test]
    fn a_volume_is_healthy_degraded_or_unavailable() {
        use Condition::*;
        assert_eq!(condition(&volume(Health::Online, &[], 0)), Healthy);
        assert_eq!(condition(&volume(Health::Online, &[("ready", true)], 1)), Healthy);
        assert_eq!(condition(&volume(Health::Online, &[("syncing", false)], 1)), Degraded);
        assert_eq!(
            condition(&volume(Health::Online, &[], 1)),
            Degraded,
            "replica not made yet"
        );
        assert_eq!(
            condition(&volume(Health::Online, &[("ready", true), ("failed", false)], 1)),
            Degraded,
            "a replica not ready"
        );
        assert_eq!(
            condition(&volume(Health::Offline, &[("ready", true)], 1)),
            Degraded,
            "a ready replica can take over"
        );
        assert_eq!(
            condition(&volume(Health::Offline, &[("syncing", false)], 1)),
            Unavailable
        );
        assert_eq!(condition(&volume(Health::Unknown, &[], 0)), Unavailable);
    }

    #[test]
    fn the_note_names_the_nodes_and_the_sync_progress() {
        let name_of = |id: &str| id.trim_start_matches("id-").to_string();
        let mut v = volume(Health::Online, &[("syncing", false)], 1);
        v.replicas[0].sync_progress = SyncProgress {
            bytes_remaining: 3 << 30,
            throughput_bytes: 64 << 20,
            estimated_seconds_remaining: 48,
        };
        let note = describe(&v, Condition::Degraded, &name_of);
        assert!(
            note.contains("replica on node b is syncing (3.0 GiB left at 64.0 MiB/s, about 48s)"),
            "{note}"
        );
        assert!(note.contains("0 of 1 replicas ready"), "{note}");
        let note = describe(&volume(Health::Offline, &[], 0), Condition::Unavailable, &name_of);
        assert!(note.contains("master on node a is offline"), "{note}");
        let note = describe(
            &volume(Health::Online, &[("ready", true)], 1),
            Condition::Healthy,
            &name_of,
        );
        assert!(
            note.contains("healthy again") && note.contains("1 of 1 replicas ready"),
            "{note}"
        );
        assert_eq!(bytes(512), "512 B");
    }
}
