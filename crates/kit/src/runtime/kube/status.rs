//! The one way the operator's controllers write a status: only when it changed, as the
//! operator's field manager, and only over the object version the new status was decided on.

use std::fmt::Debug;

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::EventType;

use super::conditions;
use super::controller::ControllerKit;
use crate::reasons::Reason;

/// Writes `next` as `obj`'s status when it differs from `previous`; returns whether it wrote.
/// The merge patch carries `obj`'s resourceVersion: a writer acting on a stale view (a watch
/// cache behind, or a replica that lost its lease mid-step) gets a 409 Conflict instead of
/// overwriting a newer status, and its controller requeues the object to decide again. It is
/// written as the field manager `manager`.
pub async fn write_if_changed<K, S>(
    api: &Api<K>,
    obj: &K,
    (previous, next): (&S, &S),
    manager: &str,
) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    S: Serialize + PartialEq,
{
    if next == previous {
        return Ok(false);
    }
    // A merge patch keeps what it does not mention: a field `next` drops is sent as null.
    let status = with_removals(
        &serde_json::to_value(previous).unwrap_or_default(),
        serde_json::to_value(next).unwrap_or_default(),
    );
    let patch = json!({"metadata": {"resourceVersion": obj.resource_version()}, "status": status});
    let params = PatchParams {
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    };
    api.patch_status(&obj.name_any(), &params, &Patch::Merge(&patch))
        .await?;
    Ok(true)
}

/// `next` with a null for every object key of `previous` it lacks, at any depth (a JSON merge
/// patch removes only what it sets to null; lists are replaced whole).
fn with_removals(previous: &serde_json::Value, next: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match (previous, next) {
        (Value::Object(before), Value::Object(mut after)) => {
            for (key, old) in before {
                match after.remove(key) {
                    Some(new) => {
                        after.insert(key.clone(), with_removals(old, new));
                    }
                    None => {
                        after.insert(key.clone(), Value::Null);
                    }
                }
            }
            Value::Object(after)
        }
        (_, next) => next,
    }
}

/// A status that carries conditions.
pub trait WithConditions {
    /// The status's conditions.
    fn conditions_mut(&mut self) -> &mut Option<Vec<Condition>>;
}

/// Sets Ready=False with `reason` and `message` on `next` (a status of `obj`, based on
/// `previous`), sends one Warning event (with `event_reason`) the first time it says so, and
/// writes it as `manager` ([`write_if_changed`]).
pub async fn set_not_ready<K, S>(
    (api, manager): (&Api<K>, &str),
    kit: &ControllerKit,
    obj: &K,
    previous: &S,
    mut next: S,
    (reason, event_reason): (Reason, Reason),
    message: String,
) -> Result<S, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Serialize + PartialEq + WithConditions,
{
    let conds = next.conditions_mut().get_or_insert_with(Vec::new);
    if conditions::set_not_ready(conds, reason, &message, obj.meta().generation) {
        kit.event(obj, EventType::Warning, event_reason, message).await;
    }
    write_if_changed(api, obj, (previous, &next), manager).await?;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_field_is_sent_as_null_at_any_depth() {
        let previous = json!({"phase": "Pending", "preview": {"image": "x"}, "cluster": {"name": "a", "namespace": "b"}, "apps": [1, 2]});
        let next = json!({"phase": "Completed", "cluster": {"name": "a"}, "apps": [1]});
        assert_eq!(
            with_removals(&previous, next),
            json!({"phase": "Completed", "preview": null, "cluster": {"name": "a", "namespace": null}, "apps": [1]})
        );
        // Nothing dropped: the patch is `next` itself.
        assert_eq!(
            with_removals(&json!({"a": 1}), json!({"a": 2, "b": 3})),
            json!({"a": 2, "b": 3})
        );
    }
}
