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

/// The Kubernetes Service types.
pub fn service_type() -> Value {
    json!([{
        "rule": "self in ['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName']",
        "message": "service.type must be one of ClusterIP, NodePort, LoadBalancer or ExternalName"
    }])
}

/// A required string that must not be blank; `what` names it in the message.
pub fn non_empty(what: &str) -> Value {
    json!([{
        "rule": "self.trim() != ''",
        "message": format!("{what} must not be empty")
    }])
}

/// A required string that must not be blank and cannot change once set.
pub fn non_empty_immutable(what: &str) -> Value {
    let mut rules = non_empty(what);
    if let Value::Array(r) = &mut rules {
        r.push(json!({"rule": "self == oldSelf", "message": format!("{what} cannot change; create a new resource instead")}));
    }
    rules
}
