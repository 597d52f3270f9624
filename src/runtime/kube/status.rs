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
use super::object::FIELD_MANAGER;
use crate::reasons::Reason;

/// Writes `next` as `obj`'s status when it differs from `previous`; returns whether it wrote.
/// The merge patch carries `obj`'s resourceVersion: a writer acting on a stale view (a watch
/// cache behind, or a replica that lost its lease mid-step) gets a 409 Conflict instead of
/// overwriting a newer status, and its controller requeues the object to decide again.
pub async fn write_if_changed<K, S>(api: &Api<K>, obj: &K, previous: &S, next: &S) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    S: Serialize + PartialEq,
{
    if next == previous {
        return Ok(false);
    }
    let patch = json!({"metadata": {"resourceVersion": obj.resource_version()}, "status": next});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    api.patch_status(&obj.name_any(), &params, &Patch::Merge(&patch))
        .await?;
    Ok(true)
}

/// A status that carries conditions.
pub trait WithConditions {
    /// The status's conditions.
    fn conditions_mut(&mut self) -> &mut Option<Vec<Condition>>;
}

/// Sets Ready=False with `reason` and `message` on `next` (a status of `obj`, based on
/// `previous`), sends one Warning event (with `event_reason`) the first time it says so, and
/// writes it ([`write_if_changed`]).
pub async fn set_not_ready<K, S>(
    api: &Api<K>,
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
    write_if_changed(api, obj, previous, &next).await?;
    Ok(next)
}
