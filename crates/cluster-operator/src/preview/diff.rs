//! What applying one object would change (pure): the object as it is, against the object the
//! apiserver answered to a server-side dry-run apply of the rendered one.

use serde::Serialize;
use serde_json::Value;

use crate::cluster::ownership::FIELD_MANAGER;

/// What the apply would do to one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Create,
    Change,
    /// An immutable field differs: the operator deletes the object and creates it again.
    Replace,
    Prune,
    Untouched,
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Create => "create",
            Self::Change => "change",
            Self::Replace => "replace",
            Self::Prune => "prune",
            Self::Untouched => "untouched",
        })
    }
}

/// When a pod-template change reaches running pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Restart {
    /// The workload rolls its pods as soon as it is applied.
    Now,
    /// `updateStrategy: OnDelete` (the StorageOS node DaemonSet): only pods deleted later, or an
    /// upgrade, run the new template.
    Pending,
}

impl std::fmt::Display for Restart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Now => "restart now",
            Self::Pending => "restart pending",
        })
    }
}

/// One object of the preview.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Entry {
    /// `Kind namespace/name`.
    pub object: String,
    pub action: Action,
    /// The fields that change (JSON paths), for `change`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    /// Other field managers that lose fields to the operator's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub losing_managers: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart: Option<Restart>,
}

/// How deep changed paths are named (deeper changes are named by their ancestor).
const DEPTH: usize = 10;

/// The entry of `object` whose live state is `live` (None: it does not exist) and whose state
/// after the apply would be `after` (the dry-run's answer).
pub fn entry(object: String, kind: &str, live: Option<&Value>, after: &Value) -> Entry {
    let Some(live) = live else {
        return Entry {
            object,
            action: Action::Create,
            fields: Vec::new(),
            losing_managers: Vec::new(),
            restart: None,
        };
    };
    let (before, now) = (normalized(live), normalized(after));
    let mut fields = Vec::new();
    changed_paths(&before, &now, "", 0, &mut fields);
    let losing_managers = losing_managers(live, after);
    let restart = restart(kind, live, &before, &now);
    Entry {
        object,
        action: if fields.is_empty() {
            Action::Untouched
        } else {
            Action::Change
        },
        fields,
        losing_managers,
        restart,
    }
}

/// An object whose apply the apiserver refuses because an immutable field differs (`why`, its
/// message): the operator replaces it.
pub fn replace(object: String, why: String) -> Entry {
    Entry {
        object,
        action: Action::Replace,
        fields: vec![why],
        losing_managers: Vec::new(),
        restart: None,
    }
}

/// An object the cluster no longer wants (it would be pruned).
pub fn prune(object: String) -> Entry {
    Entry {
        object,
        action: Action::Prune,
        fields: Vec::new(),
        losing_managers: Vec::new(),
        restart: None,
    }
}

/// The object without what the apiserver keeps for itself: status, and the metadata that
/// every write changes.
fn normalized(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "resourceVersion",
            "managedFields",
            "generation",
            "creationTimestamp",
            "uid",
            "selfLink",
        ] {
            meta.remove(k);
        }
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove("deprecated.daemonset.template.generation");
            if a.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    v
}

/// The paths at which `a` and `b` differ, `spec.template.spec.containers[0].resources` style.
fn changed_paths(a: &Value, b: &Value, at: &str, depth: usize, out: &mut Vec<String>) {
    if a == b {
        return;
    }
    let name = |k: &str| {
        if at.is_empty() {
            k.to_string()
        } else {
            format!("{at}.{k}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) if depth < DEPTH => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let null = Value::Null;
                changed_paths(
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    &name(k),
                    depth + 1,
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if depth < DEPTH && x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                changed_paths(p, q, &format!("{at}[{i}]"), depth + 1, out);
            }
        }
        _ => out.push(if at.is_empty() {
            "(the whole object)".into()
        } else {
            at.to_string()
        }),
    }
}

/// Field managers other than the operator's whose fields the apply would take: their entry in
/// `managedFields` shrinks or goes.
fn losing_managers(live: &Value, after: &Value) -> Vec<String> {
    let entries = |v: &Value| -> Vec<(String, Value)> {
        v.pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| {
                let manager = e.get("manager")?.as_str()?.to_string();
                Some((manager, e.get("fieldsV1").cloned().unwrap_or(Value::Null)))
            })
            .collect()
    };
    let now = entries(after);
    let mut out: Vec<String> = entries(live)
        .into_iter()
        .filter(|(m, _)| m != FIELD_MANAGER)
        .filter(|(m, fields)| !now.iter().any(|(n, f)| n == m && f == fields))
        .map(|(m, _)| m)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether the pods of a workload restart: its pod template changes.
fn restart(kind: &str, live: &Value, before: &Value, now: &Value) -> Option<Restart> {
    if !matches!(kind, "DaemonSet" | "Deployment" | "StatefulSet") {
        return None;
    }
    if before.pointer("/spec/template") == now.pointer("/spec/template") {
        return None;
    }
    let on_delete = live.pointer("/spec/updateStrategy/type").and_then(Value::as_str) == Some("OnDelete");
    Some(if on_delete { Restart::Pending } else { Restart::Now })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn daemonset(strategy: &str, memory: &str, managers: Value) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "storageos-daemonset", "namespace": "kube-system", "resourceVersion": "7",
                         "generation": 3, "managedFields": managers,
                         "annotations": {"deprecated.daemonset.template.generation": "3"}},
            "spec": {"updateStrategy": {"type": strategy},
                     "template": {"spec": {"containers": [{"name": "storageos", "resources": {"limits": {"memory": memory}}}]}}},
            "status": {"numberReady": 3}
        })
    }

    #[test]
    fn an_object_absent_is_created_and_an_equal_one_untouched() {
        let ds = daemonset("OnDelete", "1Gi", json!([]));
        assert_eq!(
            entry("DaemonSet x".into(), "DaemonSet", None, &ds).action,
            Action::Create
        );
        let mut after = ds.clone();
        after["metadata"]["resourceVersion"] = json!("8");
        after["status"] = json!({"numberReady": 1});
        let e = entry("DaemonSet x".into(), "DaemonSet", Some(&ds), &after);
        assert_eq!((e.action, e.restart), (Action::Untouched, None), "{e:?}");
    }

    #[test]
    fn a_template_change_restarts_now_or_when_pods_are_deleted() {
        let theirs = json!([{"manager": "kubectl-edit", "fieldsV1": {"f:spec": {}}},
                            {"manager": "storageos-operator", "fieldsV1": {"f:spec": {"f:x": {}}}}]);
        let live = daemonset("OnDelete", "1Gi", theirs);
        let after = daemonset(
            "OnDelete",
            "2Gi",
            json!([{"manager": "storageos-operator", "fieldsV1": {"f:spec": {"f:y": {}}}}]),
        );
        let e = entry("DaemonSet x".into(), "DaemonSet", Some(&live), &after);
        assert_eq!(e.action, Action::Change);
        assert_eq!(e.fields, ["spec.template.spec.containers[0].resources.limits.memory"]);
        assert_eq!(e.restart, Some(Restart::Pending));
        assert_eq!(e.losing_managers, ["kubectl-edit"]);
        let rolling = entry(
            "Deployment y".into(),
            "Deployment",
            Some(&daemonset("RollingUpdate", "1Gi", json!([]))),
            &daemonset("RollingUpdate", "2Gi", json!([])),
        );
        assert_eq!(rolling.restart, Some(Restart::Now));
    }

    #[test]
    fn a_change_outside_the_template_restarts_nothing() {
        let live = json!({"kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": 5705}]}});
        let after = json!({"kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": 5706}]}});
        let e = entry("Service s".into(), "Service", Some(&live), &after);
        assert_eq!((e.action, e.restart), (Action::Change, None));
        assert_eq!(e.fields, ["spec.ports[0].port"]);
    }
}
