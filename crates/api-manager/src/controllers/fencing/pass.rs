//! One fencing pass over one offline node: which opted-in pods may go, and deleting them with
//! their VolumeAttachments. Every read and write goes through [`FenceLookups`] and
//! [`FenceActions`], so the decisions are unit-tested below with a fake.

use std::collections::{BTreeSet, HashMap, HashSet};

use k8s_openapi::api::core::v1::Pod;

use super::super::node_state::NodeState as Node;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::ResourceExt;

use super::CONTROLLER;
use super::episodes::Trigger;
use super::lookups::{About, Deleted, FenceActions, FenceLookups, StorageOSClaim};
use super::select::{self, OUT_OF_SERVICE_TAINT};
use crate::maintenance::Maintenance;
use crate::metrics::FencerOutcome;
use crate::reasons;
use crate::storageos::models::{Namespace, Volume};

/// What one episode has already done and said, so that each warning is published once.
#[derive(Debug, Default)]
pub struct Memory {
    suspended: bool,
    cordoned: bool,
    /// UIDs of pods warned about.
    skipped: HashSet<String>,
    /// UIDs of pods deleted (one with a finalizer stays until it is removed: not again).
    fenced: HashSet<String>,
}

impl Memory {
    /// Pods deleted so far.
    pub fn fenced(&self) -> usize {
        self.fenced.len()
    }

    /// Pods left alone (and warned about) so far.
    pub fn skipped(&self) -> usize {
        self.skipped.len()
    }
}

/// Why the pass runs, as its events say it.
fn cause(trigger: Trigger, node: &str) -> String {
    match trigger {
        Trigger::Offline => format!("StorageOS reports node {node} offline"),
        Trigger::OutOfService => format!("node {node} is tainted {OUT_OF_SERVICE_TAINT}"),
    }
}

/// One pass over `node` (StorageOS node ID `id`, empty if StorageOS does not know it), fenced
/// for `trigger`; Ok(true) when nothing is left to fence.
pub async fn fence_node<I: FenceLookups + FenceActions>(
    io: &I,
    node: &Node,
    id: &str,
    trigger: Trigger,
    memory: &mut Memory,
) -> Result<bool, kube::Error> {
    let name = node.name_any();
    let cause = cause(trigger, &name);
    let pods = io.pods_on(&name).await?;
    let mut left = 0usize;
    let mut targets = Vec::new();
    for pod in pods {
        if memory.fenced.contains(&pod.uid().unwrap_or_default()) {
            continue;
        }
        match select::opted_in(&pod) {
            // Out of service: every pod with StorageOS volumes, opted in or not.
            _ if trigger == Trigger::OutOfService => {}
            Ok(true) => {}
            Ok(false) => continue,
            Err(why) => {
                tracing::debug!(controller = CONTROLLER, pod = %pod.name_any(), "not fenced: {why}");
                continue;
            }
        }
        match io.storageos_claims(&pod).await {
            Ok(claims) if claims.is_empty() => {}
            Ok(claims) => targets.push((pod, claims)),
            Err(e) => {
                tracing::warn!(controller = CONTROLLER, pod = %pod.name_any(), error = %e, "cannot read the pod's claims; retrying");
                left += 1;
            }
        }
    }
    if targets.is_empty() {
        return Ok(left == 0);
    }
    // Cordoned: taken down on purpose (a drain, a node upgrade); its pods are being evicted or
    // come back with it, and a force-delete would only race the drain. The out-of-service taint
    // says the node is not coming back, cordoned or not.
    if trigger == Trigger::Offline && node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        tracing::info!(controller = CONTROLLER, node = %name, "the node is cordoned: not fencing");
        if !memory.cordoned {
            memory.cordoned = true;
            let note = format!(
                "StorageOS reports node {name} offline, but it is cordoned (being drained or serviced on purpose): {} pod(s) are not fenced; uncordon it if the node is lost",
                targets.len()
            );
            io.warn(About::Node(node), reasons::FENCING_SKIPPED_CORDONED, note)
                .await;
        }
        return Ok(false);
    }
    match io.maintenance().await {
        Ok(Maintenance::Off) => {}
        Ok(Maintenance::On { upgrade }) => {
            tracing::info!(controller = CONTROLLER, node = %name, upgrade, "fencing suspended during the upgrade");
            if !memory.suspended {
                memory.suspended = true;
                let note = format!(
                    "{cause}, but upgrade {upgrade} is in progress: {} pod(s) are not fenced while it runs",
                    targets.len()
                );
                io.count(FencerOutcome::Suspended);
                io.warn(About::Node(node), reasons::FENCING_SUSPENDED, note).await;
            }
            return Ok(false);
        }
        Err(e) => {
            tracing::warn!(controller = CONTROLLER, node = %name, error = %e, "cannot tell whether an upgrade is in progress; not fencing now");
            return Ok(false);
        }
    }
    let mut volumes = Volumes::default();
    let mut attachments = None;
    for (pod, claims) in targets {
        let problems = volumes.problems(io, &claims, id).await;
        if !problems.is_empty() {
            left += 1;
            let problems = problems.join("; ");
            tracing::info!(controller = CONTROLLER, node = %name, pod = %pod.name_any(), "not fenced: {problems}");
            if memory.skipped.insert(pod.uid().unwrap_or_default()) {
                let note = format!(
                    "{cause}, but the pod is not fenced: {problems}. It is left alone because the node may hold the only copy of the data"
                );
                io.count(FencerOutcome::Skipped);
                io.warn(About::Pod(&pod), reasons::FENCING_SKIPPED, note).await;
            }
            continue;
        }
        match fence_pod(io, &name, &cause, &pod, &claims, &mut attachments).await {
            Ok(()) => {
                memory.fenced.insert(pod.uid().unwrap_or_default());
            }
            Err(e) => {
                tracing::warn!(controller = CONTROLLER, node = %name, pod = %pod.name_any(), error = %e, "cannot delete the pod; retrying");
                left += 1;
            }
        }
    }
    Ok(left == 0)
}

/// StorageOS volumes looked up during one pass: each list is read at most once per pass.
#[derive(Default)]
struct Volumes {
    namespaces: Option<Result<Vec<Namespace>, String>>,
    /// By namespace ID.
    volumes: HashMap<String, Result<Vec<Volume>, String>>,
}

impl Volumes {
    /// Why fencing a pod with these claims is unsafe; empty when every volume was found with
    /// its master online.
    async fn problems(&mut self, io: &impl FenceLookups, claims: &[StorageOSClaim], offline_id: &str) -> Vec<String> {
        let mut problems = Vec::new();
        for c in claims {
            match self.find(io, &c.namespace, &c.pv).await {
                Ok(v) => problems.extend(select::unhealthy(&v, &c.namespace, offline_id)),
                Err(e) => problems.push(format!("cannot look up StorageOS volume {}/{}: {e}", c.namespace, c.pv)),
            }
        }
        problems
    }

    async fn find(&mut self, io: &impl FenceLookups, namespace: &str, pv: &str) -> Result<Volume, String> {
        if self.namespaces.is_none() {
            self.namespaces = Some(io.namespaces().await.map_err(|e| e.to_string()));
        }
        let namespaces = match &self.namespaces {
            Some(Ok(n)) => n,
            Some(Err(e)) => return Err(e.clone()),
            None => return Err("namespaces not read".into()),
        };
        let id = namespaces
            .iter()
            .find(|n| n.name == namespace)
            .map(|n| n.id.clone())
            .ok_or_else(|| format!("StorageOS has no namespace {namespace:?}"))?;
        if !self.volumes.contains_key(&id) {
            let listed = io.volumes(&id).await.map_err(|e| e.to_string());
            self.volumes.insert(id.clone(), listed);
        }
        match self.volumes.get(&id) {
            Some(Ok(list)) => list
                .iter()
                .find(|v| v.name == pv)
                .cloned()
                .ok_or_else(|| format!("StorageOS has no volume {pv:?} in namespace {namespace:?}")),
            Some(Err(e)) => Err(e.clone()),
            None => Err("volumes not read".into()),
        }
    }
}

/// Deletes the pod (grace 0, only this very pod) and then its StorageOS VolumeAttachments on
/// the node. Attachment failures are reported, not retried: the attach-detach controller removes
/// them in time anyway.
async fn fence_pod<I: FenceLookups + FenceActions>(
    io: &I,
    node: &str,
    cause: &str,
    pod: &Pod,
    claims: &[StorageOSClaim],
    attachments: &mut Option<Result<Vec<VolumeAttachment>, String>>,
) -> Result<(), kube::Error> {
    if io.delete_pod(pod).await? == Deleted::Already {
        return Ok(());
    }
    if attachments.is_none() {
        *attachments = Some(io.attachments().await.map_err(|e| e.to_string()));
    }
    let pvs: BTreeSet<String> = claims.iter().map(|c| c.pv.clone()).collect();
    let mut deleted = Vec::new();
    let mut failed = Vec::new();
    match attachments {
        Some(Ok(list)) => {
            for va in select::attachments(list, node, &pvs) {
                let name = va.name_any();
                match io.delete_attachment(&name).await {
                    Ok(()) => deleted.push(name),
                    Err(e) => failed.push(format!("{name} ({e})")),
                }
            }
        }
        Some(Err(e)) => failed.push(format!("cannot list VolumeAttachments ({e})")),
        None => {}
    }
    let mut note = format!(
        "{cause} and the pod's StorageOS volumes are online elsewhere: deleted the pod (grace period 0) so that it can start on another node"
    );
    if !deleted.is_empty() {
        note.push_str(&format!(", and VolumeAttachments {}", deleted.join(", ")));
    }
    if !failed.is_empty() {
        note.push_str(&format!("; could not delete VolumeAttachments: {}", failed.join(", ")));
    }
    tracing::info!(controller = CONTROLLER, node, pod = %pod.name_any(), namespace = ?pod.namespace(), attachments = ?deleted, failed = ?failed, "pod fenced");
    io.count(FencerOutcome::Fenced);
    io.warn(About::Pod(pod), reasons::FENCED, note).await;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;
    use crate::reasons::Reason;
    use crate::storageos;
    use crate::storageos::models::Health;

    const OFFLINE: &str = "id-a";

    /// A node, its pods and StorageOS as a test describes them; records what the pass did.
    #[derive(Default)]
    struct Fake {
        pods: Vec<Pod>,
        /// By pod name.
        claims: HashMap<String, Vec<StorageOSClaim>>,
        /// `None`: the read fails.
        maintenance: Option<Maintenance>,
        namespaces: Vec<Namespace>,
        /// By namespace ID; absent: the read fails.
        volumes: HashMap<String, Vec<Volume>>,
        attachments: Vec<VolumeAttachment>,
        deleted_pods: Mutex<Vec<String>>,
        deleted_attachments: Mutex<Vec<String>>,
        /// `(reason, object name)`.
        events: Mutex<Vec<(String, String)>>,
        outcomes: Mutex<Vec<String>>,
    }

    fn refused() -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code: 503,
            message: "unavailable".into(),
            ..Default::default()
        }))
    }

    impl FenceLookups for Fake {
        async fn pods_on(&self, _node: &str) -> Result<Vec<Pod>, kube::Error> {
            Ok(self.pods.clone())
        }
        async fn storageos_claims(&self, pod: &Pod) -> Result<Vec<StorageOSClaim>, kube::Error> {
            Ok(self.claims.get(&pod.name_any()).cloned().unwrap_or_default())
        }
        async fn maintenance(&self) -> Result<Maintenance, kube::Error> {
            self.maintenance.clone().ok_or_else(refused)
        }
        async fn namespaces(&self) -> Result<Vec<Namespace>, storageos::Error> {
            Ok(self.namespaces.clone())
        }
        async fn volumes(&self, namespace_id: &str) -> Result<Vec<Volume>, storageos::Error> {
            self.volumes
                .get(namespace_id)
                .cloned()
                .ok_or_else(|| storageos::Error::from_status(500, "GET", "/v2/namespaces/x/volumes", "boom".into()))
        }
        async fn attachments(&self) -> Result<Vec<VolumeAttachment>, kube::Error> {
            Ok(self.attachments.clone())
        }
    }

    impl FenceActions for Fake {
        async fn delete_pod(&self, pod: &Pod) -> Result<Deleted, kube::Error> {
            self.deleted_pods.lock().unwrap().push(pod.name_any());
            Ok(Deleted::Now)
        }
        async fn delete_attachment(&self, name: &str) -> Result<(), kube::Error> {
            self.deleted_attachments.lock().unwrap().push(name.into());
            Ok(())
        }
        async fn warn(&self, about: About<'_>, reason: Reason, _note: String) {
            let name = match about {
                About::Node(n) => n.name_any(),
                About::Pod(p) => p.name_any(),
            };
            self.events.lock().unwrap().push((reason.to_string(), name));
        }
        fn count(&self, outcome: FencerOutcome) {
            self.outcomes.lock().unwrap().push(format!("{outcome:?}"));
        }
    }

    fn node() -> Node {
        serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap()
    }

    fn pod(name: &str, fenced: bool) -> Pod {
        let labels = if fenced {
            json!({"storageos.com/fenced": "true"})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "app", "uid": format!("uid-{name}"), "labels": labels},
            "spec": {"nodeName": "a", "containers": []}
        }))
        .unwrap()
    }

    fn volume(pv: &str, master_on: &str, health: Health) -> Volume {
        let mut v = Volume {
            name: pv.into(),
            namespace_id: "ns-app".into(),
            ..Volume::default()
        };
        v.master.node_id = master_on.into();
        v.master.health = health;
        v
    }

    fn attachment(name: &str, pv: &str, node: &str) -> VolumeAttachment {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"attacher": "csi.storageos.com", "nodeName": node, "source": {"persistentVolumeName": pv}}
        }))
        .unwrap()
    }

    /// Node `a` (StorageOS ID `id-a`) offline, with an opted-in pod `web` on PV `pv1`.
    fn world(pv1: Volume) -> Fake {
        Fake {
            pods: vec![pod("web", true)],
            claims: HashMap::from([(
                "web".into(),
                vec![StorageOSClaim {
                    namespace: "app".into(),
                    pv: "pv1".into(),
                }],
            )]),
            maintenance: Some(Maintenance::Off),
            namespaces: vec![Namespace {
                id: "ns-app".into(),
                name: "app".into(),
                ..Namespace::default()
            }],
            volumes: HashMap::from([("ns-app".into(), vec![pv1])]),
            attachments: vec![
                attachment("va-web", "pv1", "a"),
                attachment("va-elsewhere", "pv1", "b"),
                attachment("va-other", "pv9", "a"),
            ],
            ..Fake::default()
        }
    }

    fn events(fake: &Fake) -> Vec<(String, String)> {
        fake.events.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn a_pod_whose_volume_is_online_on_another_node_is_fenced_with_its_attachment_there() {
        let fake = world(volume("pv1", "id-b", Health::Online));
        let mut memory = Memory::default();
        let finished = fence_node(&fake, &node(), OFFLINE, Trigger::Offline, &mut memory)
            .await
            .unwrap();
        assert!(finished, "nothing left");
        assert_eq!(*fake.deleted_pods.lock().unwrap(), ["web"]);
        assert_eq!(
            *fake.deleted_attachments.lock().unwrap(),
            ["va-web"],
            "only the pod's volumes' attachments on the offline node"
        );
        assert_eq!(events(&fake), [("Fenced".to_string(), "web".to_string())]);
        assert_eq!(memory.fenced(), 1);
        // The next pass does not delete it again (a pod with a finalizer can linger).
        fence_node(&fake, &node(), OFFLINE, Trigger::Offline, &mut memory)
            .await
            .unwrap();
        assert_eq!(fake.deleted_pods.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_volume_read_that_fails_fences_nothing_and_says_why_once() {
        let mut fake = world(volume("pv1", "id-b", Health::Online));
        fake.volumes.clear();
        let mut memory = Memory::default();
        let finished = fence_node(&fake, &node(), OFFLINE, Trigger::Offline, &mut memory)
            .await
            .unwrap();
        assert!(!finished, "the pod is left to fence, retried");
        assert!(fake.deleted_pods.lock().unwrap().is_empty());
        assert!(fake.deleted_attachments.lock().unwrap().is_empty());
        fence_node(&fake, &node(), OFFLINE, Trigger::Offline, &mut memory)
            .await
            .unwrap();
        assert_eq!(
            events(&fake),
            [("FencingSkipped".to_string(), "web".to_string())],
            "one warning per episode"
        );
    }

    #[tokio::test]
    async fn a_volume_whose_master_is_not_online_elsewhere_is_never_fenced() {
        for v in [
            volume("pv1", "id-b", Health::Offline),
            volume("pv1", OFFLINE, Health::Online),
            volume("pv1", "", Health::Online),
        ] {
            let fake = world(v.clone());
            fence_node(&fake, &node(), OFFLINE, Trigger::Offline, &mut Memory::default())
                .await
                .unwrap();
            assert!(fake.deleted_pods.lock().unwrap().is_empty(), "{v:?}");
        }
        let mut missing = world(volume("pv9", "id-b", Health::Online));
        missing.claims.clear();
        missing.claims.insert(
            "web".into(),
            vec![StorageOSClaim {
                namespace: "app".into(),
                pv: "pv1".into(),
            }],
        );
        fence_node(&missing, &node(), OFFLINE, Trigger::Offline, &mut Memory::default())
            .await
            .unwrap();
        assert!(
            missing.deleted_pods.lock().unwrap().is_empty(),
            "a volume StorageOS does not list"
        );
    }

    #[tokio::test]
    async fn nothing_is_fenced_during_an_upgrade_or_when_that_cannot_be_read() {
        let mut fake = world(volume("pv1", "id-b", Health::Online));
        fake.maintenance = Some(Maintenance::On {
            upgrade: "up (StorageOSCluster kube-system/storageos)".into(),
        });
        let mut memory = Memory::default();
        assert!(
            !fence_node(&fake, &node(), OFFLINE, Trigger::Offline, &mut memory)
                .await
                .unwrap()
        );
        fence_node(&fake, &node(), OFFLINE, Trigger::Offline, &mut memory)
            .await
            .unwrap();
        assert!(fake.deleted_pods.lock().unwrap().is_empty());
        assert_eq!(
            events(&fake),
            [("FencingSuspended".to_string(), "a".to_string())],
            "said once, on the Node"
        );

        fake.maintenance = None;
        let mut memory = Memory::default();
        assert!(
            !fence_node(&fake, &node(), OFFLINE, Trigger::Offline, &mut memory)
                .await
                .unwrap()
        );
        assert!(fake.deleted_pods.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_cordoned_node_is_not_fenced_and_says_why_once() {
        let fake = world(volume("pv1", "id-b", Health::Online));
        let cordoned: Node =
            serde_json::from_value(json!({"metadata": {"name": "a"}, "spec": {"unschedulable": true}})).unwrap();
        let mut memory = Memory::default();
        assert!(
            !fence_node(&fake, &cordoned, OFFLINE, Trigger::Offline, &mut memory)
                .await
                .unwrap()
        );
        fence_node(&fake, &cordoned, OFFLINE, Trigger::Offline, &mut memory)
            .await
            .unwrap();
        assert!(fake.deleted_pods.lock().unwrap().is_empty());
        assert_eq!(events(&fake), [("FencingSkippedCordoned".to_string(), "a".to_string())]);
        // Uncordoned: fenced at the next pass.
        fence_node(&fake, &node(), OFFLINE, Trigger::Offline, &mut memory)
            .await
            .unwrap();
        assert_eq!(*fake.deleted_pods.lock().unwrap(), ["web"]);
    }

    #[tokio::test]
    async fn pods_without_storageos_volumes_or_not_opted_in_are_left_alone_silently() {
        let mut fake = world(volume("pv1", "id-b", Health::Online));
        fake.pods = vec![pod("web", false), pod("cache", true)];
        // `web` is not opted in; `cache` has no StorageOS claims. Neither asks for maintenance.
        fake.maintenance = None;
        let finished = fence_node(&fake, &node(), OFFLINE, Trigger::Offline, &mut Memory::default())
            .await
            .unwrap();
        assert!(finished);
        assert!(fake.deleted_pods.lock().unwrap().is_empty());
        assert!(events(&fake).is_empty());
    }

    #[tokio::test]
    async fn out_of_service_fences_every_storageos_pod_cordoned_or_not_and_nothing_else() {
        let mut fake = world(volume("pv1", "id-b", Health::Online));
        fake.pods = vec![pod("web", false), pod("cache", false), pod("labelled", true)];
        let claims = fake.claims["web"].clone();
        fake.claims.insert("labelled".into(), claims);
        let cordoned: Node =
            serde_json::from_value(json!({"metadata": {"name": "a"}, "spec": {"unschedulable": true}})).unwrap();
        let mut memory = Memory::default();
        let finished = fence_node(&fake, &cordoned, OFFLINE, Trigger::OutOfService, &mut memory)
            .await
            .unwrap();
        assert!(finished);
        assert_eq!(
            *fake.deleted_pods.lock().unwrap(),
            ["web", "labelled"],
            "opted in or not; `cache` has no StorageOS volume and is left to Kubernetes"
        );
        let deleted = fake.deleted_attachments.lock().unwrap().clone();
        assert!(deleted.iter().all(|va| va == "va-web"), "{deleted:?}");
    }

    #[tokio::test]
    async fn out_of_service_still_never_acts_on_a_failed_read_or_an_unsafe_volume_or_during_an_upgrade() {
        let mut failed = world(volume("pv1", "id-b", Health::Online));
        failed.volumes.clear();
        let unsafe_master = world(volume("pv1", OFFLINE, Health::Online));
        let mut upgrading = world(volume("pv1", "id-b", Health::Online));
        upgrading.maintenance = Some(Maintenance::On { upgrade: "up".into() });
        let mut unreadable = world(volume("pv1", "id-b", Health::Online));
        unreadable.maintenance = None;
        for fake in [failed, unsafe_master, upgrading, unreadable] {
            let finished = fence_node(&fake, &node(), OFFLINE, Trigger::OutOfService, &mut Memory::default())
                .await
                .unwrap();
            assert!(!finished);
            assert!(fake.deleted_pods.lock().unwrap().is_empty());
            assert!(fake.deleted_attachments.lock().unwrap().is_empty());
        }
    }
}
