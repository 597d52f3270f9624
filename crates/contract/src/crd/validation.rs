//! CEL validation rules shared by the CRDs. Each rule carries the message `kubectl` shows when
//! the apiserver rejects an object, so the user learns what to change.

use serde_json::{Value, json};

/// Most tolerations a list may hold; bounds the CEL cost estimate of [`tolerations`].
pub const MAX_TOLERATIONS: u32 = 64;

/// A toleration with `operator: Exists` matches every value, so a value is a mistake.
pub fn tolerations() -> Value {
    json!([{
        "rule": "self.all(t, !has(t.operator) || t.operator != 'Exists' || !has(t.value) || size(t.value) == 0)",
        "message": "a toleration with operator Exists must not set a value; remove the value or use operator Equal"
    }])
}

/// The CSI helpers run either as a Deployment or as a StatefulSet.
pub fn deployment_strategy() -> Value {
    json!([{
        "rule": "self in ['deployment', 'statefulset']",
        "message": "csi.deploymentStrategy must be 'deployment' or 'statefulset'"
    }])
}

/// A CSI sidecar's `--timeout`: a whole number of ms, s, m or h (the form every sidecar's flag
/// parser accepts).
pub fn sidecar_timeout() -> Value {
    json!([{
        "rule": "self.matches('^[1-9][0-9]*(ms|s|m|h)$')",
        "message": "csi.timeout must be a whole number with a unit, for example 30s, 2m or 1h"
    }])
}

/// `nodeOutOfService.coolDown`: a whole number of s, m or h (the api-manager's duration flags
/// take it as is).
pub fn cool_down() -> Value {
    json!([{
        "rule": "self.matches('^[0-9]+(s|m|h)$')",
        "message": "nodeOutOfService.coolDown must be a whole number with a unit, for example 30s, 5m or 1h"
    }])
}

/// `nodeMaintenance.maxDrainHold`: a whole number with a unit.
pub fn max_drain_hold() -> Value {
    json!([{
        "rule": "self.matches('^[0-9]+(s|m|h)$')",
        "message": "nodeMaintenance.maxDrainHold must be a whole number with a unit, for example 30m or 2h"
    }])
}

/// The Kubernetes Service types.
pub fn service_type() -> Value {
    json!([{
        "rule": "self in ['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName']",
        "message": "service.type must be one of ClusterIP, NodePort, LoadBalancer or ExternalName"
    }])
}

/// StorageOS keeps its state in etcd: a cluster without `kvBackend.address` cannot start (it
/// would render `ETCD_ENDPOINTS: ''`), so it is refused at admission. On `spec`, because the
/// field it requires sits in an optional object; `fieldPath` points the message at the field.
pub fn kv_backend_address() -> Value {
    json!([{
        "rule": "has(self.kvBackend) && has(self.kvBackend.address) && self.kvBackend.address.trim() != ''",
        "message": "set spec.kvBackend.address to the etcd endpoints StorageOS keeps its state in, for example http://etcd.storageos-etcd.svc:2379",
        "fieldPath": ".kvBackend.address",
        "reason": "FieldValueRequired"
    }])
}

/// A required string that must not be blank; `what` names it in the message.
pub fn non_empty(what: &str) -> Value {
    json!([{
        "rule": "self.trim() != ''",
        "message": format!("{what} must not be empty")
    }])
}

/// The rule that a field cannot change once set.
fn unchanged(message: String) -> Value {
    json!({"rule": "self == oldSelf", "message": message})
}

/// A required string that must not be blank and cannot change once set.
pub fn non_empty_immutable(what: &str) -> Value {
    let mut rules = non_empty(what);
    if let Value::Array(r) = &mut rules {
        r.push(unchanged(format!(
            "{what} cannot change; create a new resource instead"
        )));
    }
    rules
}

/// `spec.namespace` cannot change once set: the operator would start a second StorageOS on the
/// same nodes and data directory and prune the running one.
pub fn operand_namespace() -> Value {
    json!([unchanged(
        "spec.namespace cannot change once set: moving it would remove the running StorageOS and start another \
         on the same nodes; delete the StorageOSCluster and create it again to move it"
            .into()
    )])
}

/// A Job's `hostPath`: what the operator's `--job-host-paths` can ever allow (see
/// `job::hostpath`: `/var/lib/storageos` or a path under it), checked at admission so
/// `kubectl apply` of a Job mounting `/` or `/var/lib` fails with the allowed paths. The
/// operator then checks its own list, by default exactly `/var/lib/storageos`.
pub fn job_host_path() -> Value {
    let mut rules = non_empty("hostPath");
    if let Value::Array(r) = &mut rules {
        r.push(json!({
            "rule": "self == '/var/lib/storageos' || (self.startsWith('/var/lib/storageos/') && !self.matches('/[.][.]?(/|$)|//|/$'))",
            "message": "hostPath must be /var/lib/storageos (by default exactly that; a path under it only if the operator's --job-host-paths allows it), without '.', '..' or empty segments: a Job runs on every node with the operator's rights"
        }));
    }
    rules
}
