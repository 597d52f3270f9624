//! A custom resource checked against its CRD outside the apiserver, as the apiserver checks it on
//! create: fields the schema does not know (kubectl's strict validation refuses them, and the
//! apiserver would drop them), types, enums, ranges, required fields, and the CEL rules
//! (`x-kubernetes-validations`, evaluated with the `cel` crate, so `render` and the apiserver
//! apply the same rule text). Rules about changes (`oldSelf`) do not apply to a new object.

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

/// One reason the apiserver would refuse the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Field path, such as `spec.kvBackend.adress`.
    pub path: String,
    /// What is wrong, in the apiserver's words where it has them.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every violation of `object`'s `spec` against the first version's schema of `crd`.
pub fn check(crd: &CustomResourceDefinition, object: &Value) -> Vec<Violation> {
    let schema = crd
        .spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null);
    let mut out = Vec::new();
    if let (Some(spec_schema), Some(spec)) = (schema.pointer("/properties/spec"), object.get("spec")) {
        walk(spec_schema, spec, "spec", &mut out);
    }
    out
}

fn push(out: &mut Vec<Violation>, path: &str, message: impl Into<String>) {
    out.push(Violation {
        path: path.to_string(),
        message: message.into(),
    });
}

fn walk(schema: &Value, value: &Value, path: &str, out: &mut Vec<Violation>) {
    if value.is_null() {
        // An explicit null is dropped by the apiserver for an optional field.
        return;
    }
    let int_or_string = schema["x-kubernetes-int-or-string"] == true;
    let ty = schema["type"].as_str().unwrap_or_default();
    let type_ok = match ty {
        _ if int_or_string => value.is_i64() || value.is_u64() || value.is_string(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        _ => true,
    };
    if !type_ok {
        push(
            out,
            path,
            format!(
                "Invalid value: \"{}\": {path} in body must be of type {ty}",
                type_name(value)
            ),
        );
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        let allowed: Vec<String> = allowed.iter().map(Value::to_string).collect();
        push(
            out,
            path,
            format!("Unsupported value: {value}: supported values: {}", allowed.join(", ")),
        );
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema["minimum"].as_f64().filter(|min| n < *min) {
            push(
                out,
                path,
                format!("Invalid value: {value}: {path} in body should be greater than or equal to {min}"),
            );
        }
        if let Some(max) = schema["maximum"].as_f64().filter(|max| n > *max) {
            push(
                out,
                path,
                format!("Invalid value: {value}: {path} in body should be less than or equal to {max}"),
            );
        }
    }
    if let (Some(max), Some(items)) = (schema["maxItems"].as_u64(), value.as_array())
        && items.len() as u64 > max
    {
        push(
            out,
            path,
            format!("Too many: {}: must have at most {max} items", items.len()),
        );
    }
    match value {
        Value::Object(map) => {
            for required in schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !map.contains_key(required) {
                    push(out, &format!("{path}.{required}"), "Required value");
                }
            }
            let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
            for (key, v) in map {
                let child = format!("{path}.{key}");
                match (&schema["properties"][key], &schema["additionalProperties"]) {
                    (s, _) if s.is_object() => walk(s, v, &child, out),
                    (_, s) if s.is_object() => walk(s, v, &child, out),
                    (_, Value::Bool(true)) => {}
                    _ if preserve => {}
                    _ => push(out, &child, "unknown field"),
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                walk(&schema["items"], v, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
    for rule in schema["x-kubernetes-validations"].as_array().into_iter().flatten() {
        let (Some(text), message) = (rule["rule"].as_str(), rule["message"].as_str()) else {
            continue;
        };
        if text.contains("oldSelf") {
            continue;
        }
        // As the apiserver reports it: at `fieldPath` below the rule's object when set, and as
        // a missing field for reason FieldValueRequired.
        let at = format!("{path}{}", rule["fieldPath"].as_str().unwrap_or_default());
        let failed = format!("failed rule: {text}");
        let message = message.unwrap_or(&failed);
        match evaluate(text, value) {
            Ok(true) => {}
            Ok(false) if rule["reason"] == "FieldValueRequired" => push(out, &at, format!("Required value: {message}")),
            Ok(false) => push(out, &at, format!("Invalid value: {}: {message}", short(value))),
            Err(e) => push(out, path, format!("cannot evaluate the rule {text:?}: {e}")),
        }
    }
}

/// The JSON type of `value`, as the apiserver names it.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The value as the apiserver shows it in a message: scalars as they are, composites by type.
fn short(value: &Value) -> String {
    match value {
        Value::Array(_) => "\"array\"".into(),
        Value::Object(_) => "\"object\"".into(),
        v => v.to_string(),
    }
}

/// Evaluates a CEL rule with `self` bound to `value`, plus the Kubernetes string extension the
/// rules use (`trim`).
fn evaluate(rule: &str, value: &Value) -> Result<bool, String> {
    let program = cel::Program::compile(rule).map_err(|e| e.to_string())?;
    let mut context = cel::Context::default();
    context
        .add_function(
            "trim",
            |cel::extractors::This(s): cel::extractors::This<Arc<String>>| Arc::new(s.trim().to_string()),
        )
        .map_err(|e| e.to_string())?;
    let value = cel::to_value(value).map_err(|e| e.to_string())?;
    context.add_variable_from_value("self", value);
    match program.execute(&context).map_err(|e| e.to_string())? {
        cel::Value::Bool(b) => Ok(b),
        other => Err(format!("the rule gave {other:?}, not a boolean")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;
    use serde_json::json;

    use crate::crd::StorageOSCluster;

    fn violations(spec: Value) -> Vec<String> {
        check(&StorageOSCluster::crd(), &json!({"spec": spec}))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn base() -> Value {
        json!({"secretRefName": "s", "secretRefNamespace": "ns", "kvBackend": {"address": "http://etcd:2379"}})
    }

    #[test]
    fn a_valid_spec_has_no_violation() {
        assert!(violations(base()).is_empty(), "{:?}", violations(base()));
    }

    #[test]
    fn unknown_fields_wrong_types_and_ranges_are_named_by_path() {
        let mut spec = base();
        spec["kvBackend"]["adress"] = json!("http://typo:2379");
        spec["service"] = json!({"externalPort": "abc", "internalPort": 70000});
        let v = violations(spec);
        assert!(v.contains(&"spec.kvBackend.adress: unknown field".to_string()), "{v:?}");
        assert!(
            v.contains(
                &"spec.service.externalPort: Invalid value: \"string\": spec.service.externalPort in body must be of type integer"
                    .to_string()
            ),
            "{v:?}"
        );
        assert!(
            v.iter()
                .any(|m| m.starts_with("spec.service.internalPort: Invalid value: 70000")),
            "{v:?}"
        );
    }

    #[test]
    fn csi_sidecar_tuning_is_a_duration_with_a_unit_and_a_bounded_worker_count() {
        let mut spec = base();
        spec["csi"] = json!({"timeout": "2m", "workerThreads": 40});
        assert!(violations(spec.clone()).is_empty(), "{:?}", violations(spec.clone()));
        spec["csi"] = json!({"timeout": "2 minutes", "workerThreads": 0});
        let v = violations(spec);
        assert!(
            v.iter()
                .any(|m| m.starts_with("spec.csi.timeout: Invalid value: \"2 minutes\"") && m.contains("30s")),
            "{v:?}"
        );
        assert!(
            v.iter()
                .any(|m| m.starts_with("spec.csi.workerThreads: Invalid value: 0")),
            "{v:?}"
        );
    }

    #[test]
    fn node_out_of_service_takes_bounded_polls_and_a_cool_down_with_a_unit() {
        let mut spec = base();
        spec["nodeOutOfService"] = json!({"automatic": true, "offlinePolls": 3, "coolDown": "5m"});
        assert!(violations(spec.clone()).is_empty(), "{:?}", violations(spec.clone()));
        spec["nodeOutOfService"] = json!({"automatic": true, "offlinePolls": 0, "coolDown": "5 minutes"});
        let v = violations(spec);
        assert!(
            v.iter()
                .any(|m| m.starts_with("spec.nodeOutOfService.coolDown: Invalid value") && m.contains("5m")),
            "{v:?}"
        );
        assert!(
            v.iter()
                .any(|m| m.starts_with("spec.nodeOutOfService.offlinePolls: Invalid value: 0")),
            "{v:?}"
        );
    }

    #[test]
    fn the_crd_cel_rules_apply() {
        let mut spec = base();
        spec["csi"] = json!({"deploymentStrategy": "daemonset"});
        spec["tolerations"] = json!([{"key": "k", "operator": "Exists", "value": "v"}]);
        let v = violations(spec);
        assert!(
            v.iter().any(
                |m| m.starts_with("spec.csi.deploymentStrategy: Invalid value: \"daemonset\"")
                    && m.contains("statefulset")
            ),
            "{v:?}"
        );
        assert!(
            v.iter()
                .any(|m| m.starts_with("spec.tolerations: Invalid value: \"array\"")),
            "{v:?}"
        );
    }

    #[test]
    fn required_fields_are_named() {
        let v = violations(json!({"kvBackend": {"address": "x"}}));
        assert!(v.contains(&"spec.secretRefName: Required value".to_string()), "{v:?}");
    }
}
