//! What an upgrade would do if it started now (pure): for `spec.dryRun` and
//! `storageos-operator plan -f upgrade.yaml`. It is read off the same decision a real start
//! makes ([`plan::next`] at phase Pending) and the same observations, so the preview cannot
//! promise what the upgrade would not do.

use super::plan::{Observed, Step};
use crate::crd::{ScaledApp, UpgradePhase, UpgradePreview};

/// The preview of upgrading to `image`, given the decision `step` at phase Pending, what was
/// observed for it, and the applications that use StorageOS volumes now (`candidates`).
pub fn build(step: &Step, image: &str, observed: &Observed, mut candidates: Vec<ScaledApp>) -> UpgradePreview {
    let blocker = match step {
        Step::Advance(UpgradePhase::PullingImage) => None,
        Step::Blocked(first) => Some(format!("StorageOSUpgrade {first} goes first")),
        Step::Wait(why) => Some(why.clone()),
        Step::Problem(p) => Some(p.to_string()),
        Step::Refuse(e) => Some(e.to_string()),
        Step::Hold(h) => Some(h.to_string()),
        other => Some(format!("unexpected step before the start: {other:?}")),
    };
    candidates.sort_by(|a, b| (&a.namespace, &a.kind, &a.name).cmp(&(&b.namespace, &b.kind, &b.name)));
    let mut nodes: Vec<String> = observed
        .nodes
        .iter()
        .flat_map(|n| n.pods.iter().filter(|p| !p.terminating).map(|p| p.node_name.clone()))
        .filter(|n| !n.is_empty())
        .collect();
    nodes.sort();
    nodes.dedup();
    UpgradePreview {
        would_start: blocker.is_none(),
        blocker,
        from_image: observed.nodes.as_ref().and_then(|n| n.template_image.clone()),
        image: image.to_string(),
        apps: candidates,
        nodes,
    }
}

/// One line for the condition and the event.
pub fn summary(p: &UpgradePreview) -> String {
    let from = p.from_image.as_deref().unwrap_or("the running image");
    let what = format!(
        "dry run: would pull {} on {} node(s), scale {} application(s) to 0 and restart the node pods from {from}",
        p.image,
        p.nodes.len(),
        p.apps.len()
    );
    match &p.blocker {
        None => format!("{what}; it would start now. Set spec.dryRun to false to run it"),
        Some(b) => format!("{what}; it would not start yet: {b}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::upgrade::nodes::{NodePod, NodeView};
    use crate::upgrade::plan::Hold;

    fn observed() -> Observed {
        let pod = |name: &str, node: &str, terminating| NodePod {
            name: name.into(),
            node_name: node.into(),
            image: Some("storageos/node:v2.4.2".into()),
            ready: true,
            terminating,
        };
        Observed {
            nodes: Some(NodeView {
                template_image: Some("storageos/node:v2.4.2".into()),
                pods: vec![
                    pod("a", "node-b", false),
                    pod("b", "node-a", false),
                    pod("c", "node-c", true),
                ],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn app(ns: &str, name: &str) -> ScaledApp {
        ScaledApp {
            kind: "StatefulSet".into(),
            namespace: ns.into(),
            name: name.into(),
            replicas: 2,
        }
    }

    #[test]
    fn a_start_lists_apps_image_and_live_nodes_in_order() {
        let p = build(
            &Step::Advance(UpgradePhase::PullingImage),
            "storageos/node:v2.5.0",
            &observed(),
            vec![app("b", "db"), app("a", "web")],
        );
        assert!(p.would_start && p.blocker.is_none());
        assert_eq!(
            p.nodes,
            ["node-a", "node-b"],
            "a terminating pod's node is not counted twice or at all"
        );
        assert_eq!(p.apps[0].namespace, "a");
        assert_eq!(p.from_image.as_deref(), Some("storageos/node:v2.4.2"));
        assert!(summary(&p).contains("it would start now"), "{}", summary(&p));
    }

    #[test]
    fn what_holds_the_start_is_the_blocker() {
        let hold = Step::Hold(Hold::VolumesNotReady("default/pvc-1: replica syncing".into()));
        let p = build(&hold, "storageos/node:v2.5.0", &observed(), vec![]);
        assert!(!p.would_start);
        let b = p.blocker.clone().unwrap();
        assert!(b.contains("pvc-1"), "{b}");
        assert!(summary(&p).contains("would not start yet"), "{}", summary(&p));
    }
}
