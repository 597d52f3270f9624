//! The caller gate: who may create or change StorageOSClusters, StorageOSUpgrades and Jobs.
//!
//! Each of those kinds makes the operator run privileged pods on every node (a node image, a
//! Job's image and host path), so creating one is as powerful as being cluster-admin. Namespaces
//! alone cannot say who is trusted: OLM aggregates create rights on every CRD a bundle owns into
//! the built-in `admin` and `edit` roles, and a Go user's cluster lives in `default`. So admission
//! also asks the authorizer whether the caller holds a permission no aggregated role grants:
//! `create` on the virtual resource `trust` of group `storageos.com`, in the object's namespace.
//! cluster-admin holds it (`*` on `*`); an administrator hands it out by binding
//! [`CLUSTER_ROLE`], cluster-wide or in one namespace. The operator holds it for its own writes
//! (finalizers, the pause annotation).

use serde_json::{Value, json};

/// The group of the virtual resource.
pub const GROUP: &str = "storageos.com";
/// The virtual resource (no such kind is served; RBAC and the authorizer do not need one).
pub const RESOURCE: &str = "trust";
/// The verb checked.
pub const VERB: &str = "create";
/// The ValidatingAdmissionPolicy and its binding.
pub const POLICY: &str = "storageos-operator-callers";
/// The ClusterRole that grants the permission (and nothing else).
pub const CLUSTER_ROLE: &str = "storageos:trust";
/// The kinds the gate covers, as resources.
pub const GATED: &[&str] = &["storageosclusters", "storageosupgrades", "jobs"];
/// The reason at the start of a refusal's message.
pub const REFUSED: &str = "CallerNotTrusted";

fn labels() -> Value {
    json!({
        "app.kubernetes.io/part-of": "storageos",
        "app.kubernetes.io/managed-by": "storageos-operator",
        "app.kubernetes.io/component": "caller-gate"
    })
}

/// The policy: creates and updates of the [`GATED`] kinds (not their status) are admitted only
/// from callers the authorizer allows `create` on `storageos.com/trust` in the object's namespace.
pub fn policy() -> Value {
    let check = format!(
        "authorizer.group('{GROUP}').resource('{RESOURCE}').namespace(request.namespace).check('{VERB}').allowed()"
    );
    let message = format!(
        "'{REFUSED}: ' + request.userInfo.username + ' may not create or change ' + request.resource.resource + \
         ' in namespace ' + request.namespace + ': that takes {VERB} on {RESOURCE}.{GROUP} there, which cluster-admin \
         has and no aggregated role grants; ask a cluster administrator to create it, or to bind the ClusterRole \
         {CLUSTER_ROLE} to you in that namespace'"
    );
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY, "labels": labels()},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [GROUP], "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"], "resources": GATED
            }]},
            "validations": [{"expression": check, "messageExpression": message, "reason": "Forbidden"}]
        }
    })
}

/// The binding that makes [`policy`] deny.
pub fn binding() -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY, "labels": labels()},
        "spec": {"policyName": POLICY, "validationActions": ["Deny"]}
    })
}

/// The ClusterRole to bind to someone who may create the [`GATED`] kinds without being
/// cluster-admin (they need create on the kinds too).
pub fn cluster_role() -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": CLUSTER_ROLE, "labels": labels()},
        "rules": [{"apiGroups": [GROUP], "resources": [RESOURCE], "verbs": [VERB]}]
    })
}

/// The gate's objects, in apply order.
pub fn objects() -> Vec<Value> {
    vec![cluster_role(), policy(), binding()]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_covers_the_three_kinds_but_not_their_status() {
        let p = policy();
        let rule = &p["spec"]["matchConstraints"]["resourceRules"][0];
        assert_eq!(
            rule["resources"],
            json!(["storageosclusters", "storageosupgrades", "jobs"])
        );
        assert_eq!(rule["operations"], json!(["CREATE", "UPDATE"]));
        assert_eq!(p["spec"]["failurePolicy"], "Fail");
        let expr = p["spec"]["validations"][0]["expression"].as_str().unwrap();
        assert!(expr.contains("resource('trust')") && expr.contains("namespace(request.namespace)"));
        assert_eq!(binding()["spec"]["validationActions"], json!(["Deny"]));
    }
}
