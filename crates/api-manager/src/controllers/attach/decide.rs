//! Attach recovery's decisions, free of I/O: which VolumeAttachments StorageOS contradicts
//! ([`suspect`]), and which of those go once the pods using their PVC are known ([`confirm`]).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::ResourceExt;

use crate::controllers::fencing::select::claim_names;
use crate::metrics::AttachmentDeleted;
use crate::storageos::CSI_DRIVER;
use crate::storageos::models::{Health, Node, Volume};

/// A VolumeAttachment of the StorageOS attacher for a PersistentVolume, as recovery reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub name: String,
    /// Deleted only as this very object (a re-created one is another decision).
    pub uid: Option<String>,
    /// The Kubernetes node it attaches the volume to.
    pub node: String,
    /// The PersistentVolume (the StorageOS volume's name).
    pub pv: String,
    /// `status.attached`: the attacher reported the volume attached there.
    pub attached: bool,
}

/// The attachment `va` is, if recovery may look at it at all: the StorageOS attacher's, for a
/// PersistentVolume (inline volumes have no PVC to wait), and not being deleted already.
pub fn attachment(va: &VolumeAttachment) -> Option<Attachment> {
    if va.spec.attacher != CSI_DRIVER || va.metadata.deletion_timestamp.is_some() {
        return None;
    }
    Some(Attachment {
        name: va.name_any(),
        uid: va.uid(),
        node: va.spec.node_name.clone(),
        pv: va.spec.source.persistent_volume_name.clone()?,
        attached: va.status.as_ref().is_some_and(|s| s.attached),
    })
}

/// What Kubernetes says of a Node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum K8sNode {
    /// Ready, or no Ready condition yet (no conclusion either way).
    Ready,
    /// Its Ready condition is False or Unknown.
    NotReady,
    /// No Node of that name.
    Gone,
}

/// Why StorageOS contradicts an attachment (both may hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Suspect {
    /// Reported attached, but StorageOS has the volume detached or attached on another node.
    pub elsewhere: bool,
    /// Its node is offline in StorageOS and NotReady (or gone) in Kubernetes.
    pub node_lost: bool,
}

/// Whether StorageOS contradicts attachment `a` of volume `v`, given the StorageOS `nodes` and
/// what Kubernetes says of `a`'s node. Never an attachment whose node is online in StorageOS
/// and holds the volume; never one of a shared (NFS) volume, which is attached on its master
/// and served to pods on every node; never when `attachedOn` names a node not in `nodes`
/// (cannot tell).
pub fn suspect(a: &Attachment, v: &Volume, nodes: &[Node], k8s: K8sNode) -> Option<Suspect> {
    if v.attachment_type == "nfs" || v.nfs.service_endpoint.as_deref().is_some_and(|e| !e.is_empty()) {
        return None;
    }
    let holder = if v.attached_on.is_empty() {
        None
    } else {
        Some(nodes.iter().find(|n| n.id == v.attached_on)?.name.as_str())
    };
    let holds = holder == Some(a.node.as_str());
    let health = nodes.iter().find(|n| n.name == a.node.as_str()).map(|n| n.health);
    if health == Some(Health::Online) && holds {
        return None;
    }
    let s = Suspect {
        elsewhere: a.attached && !holds,
        node_lost: health == Some(Health::Offline) && k8s != K8sNode::Ready,
    };
    (s.elsewhere || s.node_lost).then_some(s)
}

/// A pod using the PVC, as [`confirm`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    /// The node it is scheduled on (None: not scheduled yet).
    pub node: Option<String>,
    /// Whether it is being deleted.
    pub deleting: bool,
}

/// The pods of `pods` (one namespace's) that mount the PVC `claim`, finished ones left out.
pub fn users(pods: &[Pod], claim: &str) -> Vec<User> {
    pods.iter()
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed")) && claim_names(p).contains(claim)
        })
        .map(|p| User {
            name: p.name_any(),
            node: p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            deleting: p.metadata.deletion_timestamp.is_some(),
        })
        .collect()
}

/// Whether suspect attachment `a` goes, and why, given the pods using its PVC: the pods waiting
/// for it (scheduled on another node, not being deleted) come with the answer.
/// - `elsewhere`: only while a pod on another node waits for the volume.
/// - `node_lost`: only when no pod of the PVC is left on the node (its pod was force-deleted),
///   or the Node is gone.
pub fn confirm(a: &Attachment, s: Suspect, k8s: K8sNode, users: &[User]) -> Option<(AttachmentDeleted, Vec<String>)> {
    let waiting: Vec<String> = users
        .iter()
        .filter(|u| !u.deleting && u.node.as_deref().is_some_and(|n| n != a.node))
        .map(|u| u.name.clone())
        .collect();
    if s.elsewhere && !waiting.is_empty() {
        return Some((AttachmentDeleted::Contradicted, waiting));
    }
    let left_on_node = users.iter().any(|u| u.node.as_deref() == Some(a.node.as_str()));
    if s.node_lost && (k8s == K8sNode::Gone || !left_on_node) {
        return Some((AttachmentDeleted::NodeLost, waiting));
    }
    None
}

/// Why an attachment went, for its events: the node and what StorageOS says.
pub fn why(a: &Attachment, v: &Volume, nodes: &[Node], deleted: AttachmentDeleted) -> String {
    match deleted {
        AttachmentDeleted::Contradicted => {
            let holder = nodes.iter().find(|n| n.id == v.attached_on).map(|n| n.name.as_str());
            match holder {
                Some(h) => format!("StorageOS has the volume attached on node {h}, not on node {}", a.node),
                None => format!("StorageOS has the volume detached, not attached on node {}", a.node),
            }
        }
        AttachmentDeleted::NodeLost => format!(
            "node {} is offline in StorageOS and NotReady (or gone) in Kubernetes, and no pod of the PVC is left on it",
            a.node
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(id: &str, health: Health) -> Node {
        Node {
            id: format!("id-{id}"),
            name: id.into(),
            health,
            ..Node::default()
        }
    }

    fn volume(attached_on: Option<&str>) -> Volume {
        Volume {
            name: "pv-1".into(),
            attached_on: attached_on.map(|n| format!("id-{n}")).unwrap_or_default(),
            attachment_type: if attached_on.is_some() { "host" } else { "detached" }.into(),
            ..Volume::default()
        }
    }

    fn on(node: &str) -> Attachment {
        Attachment {
            name: "csi-1".into(),
            uid: Some("u".into()),
            node: node.into(),
            pv: "pv-1".into(),
            attached: true,
        }
    }

    fn user(name: &str, node: &str, deleting: bool) -> User {
        User {
            name: name.into(),
            node: Some(node.into()),
            deleting,
        }
    }

    #[test]
    fn only_storageos_attachments_of_a_pv_not_being_deleted_are_looked_at() {
        let va = |attacher: &str, source: serde_json::Value, deleting: bool| -> VolumeAttachment {
            let mut meta = json!({"name": "csi-1", "uid": "u"});
            if deleting {
                meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            serde_json::from_value(json!({
                "metadata": meta,
                "spec": {"attacher": attacher, "nodeName": "a", "source": source},
                "status": {"attached": true}
            }))
            .unwrap()
        };
        let pv = json!({"persistentVolumeName": "pv-1"});
        assert_eq!(attachment(&va(CSI_DRIVER, pv.clone(), false)), Some(on("a")));
        assert_eq!(attachment(&va("other.csi", pv.clone(), false)), None);
        assert_eq!(attachment(&va(CSI_DRIVER, pv, true)), None);
        let inline = json!({"inlineVolumeSpec": {"csi": {"driver": CSI_DRIVER, "volumeHandle": "x"}}});
        assert_eq!(attachment(&va(CSI_DRIVER, inline, false)), None);
    }

    #[test]
    fn an_attachment_storageos_confirms_on_an_online_node_is_never_suspect() {
        let nodes = [node("a", Health::Online), node("b", Health::Online)];
        for k8s in [K8sNode::Ready, K8sNode::NotReady, K8sNode::Gone] {
            assert_eq!(suspect(&on("a"), &volume(Some("a")), &nodes, k8s), None, "{k8s:?}");
        }
    }

    #[test]
    fn detached_or_attached_elsewhere_is_suspect_once_reported_attached() {
        let nodes = [node("a", Health::Online), node("b", Health::Online)];
        let elsewhere = Some(Suspect {
            elsewhere: true,
            node_lost: false,
        });
        assert_eq!(suspect(&on("a"), &volume(None), &nodes, K8sNode::Ready), elsewhere);
        assert_eq!(suspect(&on("a"), &volume(Some("b")), &nodes, K8sNode::Ready), elsewhere);
        // Not attached yet: the attacher may be attaching it right now.
        let attaching = Attachment {
            attached: false,
            ..on("a")
        };
        assert_eq!(suspect(&attaching, &volume(None), &nodes, K8sNode::Ready), None);
        // Attached on a node StorageOS does not list: cannot tell.
        let mut unknown = volume(None);
        unknown.attached_on = "id-nowhere".into();
        assert_eq!(suspect(&on("a"), &unknown, &nodes, K8sNode::Ready), None);
        // A shared volume is attached on its master and served everywhere.
        let mut shared = volume(Some("b"));
        shared.attachment_type = "nfs".into();
        assert_eq!(suspect(&on("a"), &shared, &nodes, K8sNode::Ready), None);
    }

    #[test]
    fn a_lost_node_is_offline_in_storageos_and_not_ready_or_gone_in_kubernetes() {
        let nodes = [node("a", Health::Offline), node("b", Health::Online)];
        let lost = |k8s| suspect(&on("a"), &volume(Some("a")), &nodes, k8s);
        assert_eq!(lost(K8sNode::Ready), None, "Ready in Kubernetes: not lost");
        for k8s in [K8sNode::NotReady, K8sNode::Gone] {
            assert_eq!(
                lost(k8s),
                Some(Suspect {
                    elsewhere: false,
                    node_lost: true
                })
            );
        }
        let unknown = [node("a", Health::Unknown)];
        assert_eq!(
            suspect(&on("a"), &volume(Some("a")), &unknown, K8sNode::NotReady),
            None,
            "unknown is not offline"
        );
    }

    #[test]
    fn a_contradicted_attachment_goes_only_while_a_pod_elsewhere_waits() {
        let s = Suspect {
            elsewhere: true,
            node_lost: false,
        };
        let a = on("a");
        assert_eq!(
            confirm(&a, s, K8sNode::Ready, &[user("app-0", "b", false)]),
            Some((AttachmentDeleted::Contradicted, vec!["app-0".into()]))
        );
        assert_eq!(confirm(&a, s, K8sNode::Ready, &[]), None, "nobody waits");
        assert_eq!(confirm(&a, s, K8sNode::Ready, &[user("app-0", "a", false)]), None);
        assert_eq!(
            confirm(&a, s, K8sNode::Ready, &[user("app-0", "b", true)]),
            None,
            "a pod being deleted waits for nothing"
        );
        let unscheduled = User {
            name: "app-0".into(),
            node: None,
            deleting: false,
        };
        assert_eq!(confirm(&a, s, K8sNode::Ready, &[unscheduled]), None);
    }

    #[test]
    fn a_lost_nodes_attachment_goes_once_no_pod_of_the_claim_is_left_there() {
        let s = Suspect {
            elsewhere: false,
            node_lost: true,
        };
        let a = on("a");
        assert_eq!(
            confirm(&a, s, K8sNode::NotReady, &[]),
            Some((AttachmentDeleted::NodeLost, vec![]))
        );
        let stuck = [user("app-0", "a", true)];
        assert_eq!(
            confirm(&a, s, K8sNode::NotReady, &stuck),
            None,
            "its pod still terminating there"
        );
        assert_eq!(
            confirm(&a, s, K8sNode::Gone, &stuck),
            Some((AttachmentDeleted::NodeLost, vec![])),
            "the Node is gone"
        );
        assert_eq!(
            confirm(&a, s, K8sNode::NotReady, &[user("app-0", "b", false)]),
            Some((AttachmentDeleted::NodeLost, vec!["app-0".into()]))
        );
    }

    #[test]
    fn users_are_the_unfinished_pods_mounting_the_claim() {
        let pod = |name: &str, claim: &str, phase: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"nodeName": "b", "containers": [],
                         "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]},
                "status": {"phase": phase}
            }))
            .unwrap()
        };
        let pods = [
            pod("running", "data", "Running"),
            pod("pending", "data", "Pending"),
            pod("done", "data", "Succeeded"),
            pod("other", "logs", "Running"),
        ];
        let names: Vec<String> = users(&pods, "data").into_iter().map(|u| u.name).collect();
        assert_eq!(names, ["running", "pending"]);
    }

    #[test]
    fn the_reason_names_the_node_and_what_storageos_says() {
        let nodes = [node("a", Health::Online), node("b", Health::Online)];
        let note = why(&on("a"), &volume(Some("b")), &nodes, AttachmentDeleted::Contradicted);
        assert!(note.contains("attached on node b, not on node a"), "{note}");
        let note = why(&on("a"), &volume(None), &nodes, AttachmentDeleted::Contradicted);
        assert!(note.contains("detached"), "{note}");
        let note = why(&on("a"), &volume(None), &nodes, AttachmentDeleted::NodeLost);
        assert!(note.contains("node a is offline"), "{note}");
    }
}
