//! The chart's `values.schema.json` and the README generated from it: one description per value,
//! read by Helm (which refuses a value the schema does not allow), by editors and by people.
//! `cluster.spec` is the StorageOSCluster CRD's own `spec` schema, closed (a misspelt field is
//! refused instead of pruned by the apiserver).

use serde_json::{Map, Value, json};

use super::super::{Error, env};
use crate::crd;

/// The labels every templated object carries (`storageos-operator.labels` in `_helpers.tpl`); a
/// pod or ServiceMonitor label of the same key would be a duplicate key in the rendered YAML.
pub const STANDARD_LABELS: [&str; 6] = [
    "app.kubernetes.io/name",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/version",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
];

/// The labels only the chart adds (Helm's release and chart): `deploy/operator.yaml` has the
/// other [`STANDARD_LABELS`] with the same values.
pub const CHART_ONLY_LABELS: [&str; 3] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
];

/// The environment variables the chart itself sets on the operator (the install's, then
/// `WATCH_NAMESPACES` and `LOG_LEVEL` from their values): `extraEnv` may not repeat them.
pub fn chart_env_names() -> Vec<String> {
    env("")
        .iter()
        .filter_map(|e| e["name"].as_str().map(String::from))
        .chain(["WATCH_NAMESPACES".into(), "LOG_LEVEL".into()])
        .collect()
}

fn d(description: &str, mut schema: Value) -> Value {
    if let Some(map) = schema.as_object_mut() {
        map.insert("description".into(), description.into());
    }
    schema
}

fn closed(description: &str, properties: Value) -> Value {
    d(
        description,
        json!({"type": "object", "additionalProperties": false, "properties": properties}),
    )
}

fn string(description: &str) -> Value {
    d(description, json!({"type": "string"}))
}

fn boolean(description: &str) -> Value {
    d(description, json!({"type": "boolean"}))
}

/// A map of string to string whose keys are not [`STANDARD_LABELS`].
fn extra_labels(description: &str) -> Value {
    d(
        description,
        json!({
            "type": "object",
            "additionalProperties": {"type": "string"},
            "propertyNames": {"not": {"enum": STANDARD_LABELS}}
        }),
    )
}

/// A CRD schema node as JSON Schema that refuses what the apiserver would prune: every object
/// with `properties` is closed, `nullable` becomes a `null` type, and the Kubernetes extensions
/// (CEL rules the apiserver checks, int-or-string markers) are left out.
fn strict(node: &Value) -> Value {
    let Some(map) = node.as_object() else {
        return node.clone();
    };
    let mut out = Map::new();
    let nullable = map.get("nullable") == Some(&Value::Bool(true));
    for (key, value) in map {
        if key.starts_with("x-kubernetes-") || key == "nullable" {
            continue;
        }
        let value = match key.as_str() {
            "properties" => Value::Object(
                value
                    .as_object()
                    .map(|props| props.iter().map(|(k, v)| (k.clone(), strict(v))).collect())
                    .unwrap_or_default(),
            ),
            "items" | "not" => strict(value),
            "additionalProperties" if value.is_object() => strict(value),
            "anyOf" | "oneOf" | "allOf" => Value::Array(value.as_array().into_iter().flatten().map(strict).collect()),
            "type" if nullable => match value {
                Value::String(t) => json!([t, "null"]),
                other => other.clone(),
            },
            "enum" if nullable => {
                let mut values = value.as_array().cloned().unwrap_or_default();
                values.push(Value::Null);
                Value::Array(values)
            }
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    let preserves = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if out.contains_key("properties") && !out.contains_key("additionalProperties") && !preserves {
        out.insert("additionalProperties".into(), Value::Bool(false));
    }
    Value::Object(out)
}

/// The StorageOSCluster CRD's `spec` schema, strict ([`strict`]), without its `required` list
/// (the chart fills in `secretRefName` and `secretRefNamespace`).
pub fn cluster_spec_schema() -> Result<Value, Error> {
    let (_, crd) = crd::all()
        .into_iter()
        .find(|(_, c)| c.spec.names.kind == "StorageOSCluster")
        .ok_or_else(|| Error::Template("no StorageOSCluster CRD".into()))?;
    let crd = serde_json::to_value(&crd).map_err(|e| Error::Template(e.to_string()))?;
    let spec = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec")
        .ok_or_else(|| Error::Template("the StorageOSCluster CRD has no spec schema".into()))?;
    let mut spec = strict(spec);
    if let Some(map) = spec.as_object_mut() {
        map.remove("required");
        map.insert(
            "description".into(),
            "The StorageOSCluster's spec, checked against the CRD's schema (a misspelt field is refused). \
             secretRefName defaults to storageos-api and secretRefNamespace to the release namespace."
                .into(),
        );
    }
    Ok(spec)
}

/// `values.schema.json`: Helm checks the values against it on install, upgrade, template and
/// lint, so a misspelt or mistyped value fails with its name instead of being ignored.
pub fn values_schema() -> Result<Value, Error> {
    let object = |description: &str| d(description, json!({"type": "object"}));
    let env_names = chart_env_names();
    Ok(json!({
        "$schema": "https://json-schema.org/draft-07/schema#",
        "title": "Values of the storageos-operator chart",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "global": d(
                "Values a parent chart shares with all its subcharts (Helm sets it); this chart reads none of them.",
                json!({"type": "object"})
            ),
            "enabled": boolean("Read by a parent chart's `condition: storageos-operator.enabled`; this chart ignores it."),
            "image": closed("The operator image; it also runs the api-manager of every StorageOSCluster (OPERATOR_IMAGE, RELATED_IMAGE_API_MANAGER).", json!({
                "repository": d("Repository of the operator image.", json!({"type": "string", "minLength": 1})),
                "tag": string("Tag of the image. Empty: v followed by the chart's appVersion, or none when a digest is set."),
                "digest": d("Digest to pull the image by (repository[:tag]@digest); empty for none.", json!({"type": "string", "pattern": "^$|^sha256:[0-9a-f]{64}$"})),
                "pullPolicy": d("The container's imagePullPolicy. Empty: Kubernetes' default (IfNotPresent for a tag, Always for :latest).", json!({"enum": ["", "Always", "IfNotPresent", "Never"]}))
            })),
            "imagePullSecrets": d(
                "Secrets of a private registry the operator's pods pull with, as [{name: my-registry}].",
                json!({"type": "array", "items": closed("A Secret of type kubernetes.io/dockerconfigjson in the release namespace.", json!({"name": string("Name of the Secret.")}))})
            ),
            "replicaCount": d(
                "Operator replicas: one holds the leader Lease and runs the controllers, the others take over within 15 s.",
                json!({"type": "integer", "minimum": 0})
            ),
            "podDisruptionBudget": closed("A PodDisruptionBudget for the operator's pods, rendered only when replicaCount is above 1 (with one replica it would block every drain).", json!({
                "enabled": boolean("Create the PodDisruptionBudget. Off by default, so that the defaults install exactly deploy/operator.yaml; on, a drain never evicts every replica at once."),
                "minAvailable": d("Replicas a voluntary eviction must leave running.", json!({"type": "integer", "minimum": 1}))
            })),
            "resources": object("Requests and limits of the operator container (measured needs: docs/install.md)."),
            "logLevel": string("LOG_LEVEL of the operator, a tracing filter such as debug or storageos_operator=debug,kube=info. Empty: info."),
            "extraEnv": d(
                "More environment variables of the operator container, as in a pod spec. They may not repeat a variable the chart sets (use the value that sets it).",
                json!({"type": "array", "items": {
                    "type": "object",
                    "description": "An environment variable: name with value or valueFrom.",
                    "additionalProperties": false,
                    "required": ["name"],
                    "properties": {
                        "name": d("Its name.", json!({"type": "string", "minLength": 1, "not": {"enum": env_names}})),
                        "value": string("Its value."),
                        "valueFrom": object("Where its value comes from (secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef).")
                    }
                }})
            ),
            "watchNamespaces": d(
                "Namespaces whose StorageOSClusters, StorageOSUpgrades and Jobs the operator honours (WATCH_NAMESPACES). Empty: only its own namespace; \"*\": every namespace. Anyone who may create these kinds in a listed namespace is cluster-admin in effect (docs/security.md).",
                json!({"type": "array", "items": {"type": "string", "minLength": 1, "description": "A namespace, or \"*\"."}})
            ),
            "serviceAccount": closed("The operator's ServiceAccount, which the chart's ClusterRoleBinding and RoleBinding name.", json!({
                "create": boolean("Create the ServiceAccount. False: it must exist in the release namespace."),
                "name": string("Name of the ServiceAccount. Empty: storageos-operator."),
                "annotations": d("Annotations of the ServiceAccount (for example a cloud IAM role).", json!({"type": "object", "additionalProperties": {"type": "string"}}))
            })),
            "podAnnotations": d("Annotations of the operator's pods.", json!({"type": "object", "additionalProperties": {"type": "string"}})),
            "podLabels": extra_labels("More labels of the operator's pods (not one of the chart's standard labels)."),
            "nodeSelector": d(
                "Node labels the operator's pods require (not StorageOS's nodes: that is the StorageOSCluster's spec).",
                json!({"type": "object", "additionalProperties": {"type": "string"}})
            ),
            "tolerations": d("Tolerations of the operator's pods.", json!({"type": "array", "items": {"type": "object", "description": "A toleration, as in a pod spec."}})),
            "affinity": object("Affinity of the operator's pods. The default spreads the replicas over nodes."),
            "priorityClassName": string("PriorityClass of the operator's pods; empty for none."),
            "metrics": closed("The operator's Prometheus metrics (/metrics on port 8080).", json!({
                "service": closed("The Service storageos-operator-metrics in front of /metrics.", json!({"enabled": boolean("Create the metrics Service.")})),
                "serviceMonitor": closed("A Prometheus Operator ServiceMonitor for the metrics Service (needs the monitoring.coreos.com CRDs and metrics.service.enabled).", json!({
                    "enabled": boolean("Create the ServiceMonitor."),
                    "interval": string("How often Prometheus scrapes, as a duration (30s)."),
                    "labels": extra_labels("More labels of the ServiceMonitor, for a Prometheus that selects by label (kube-prometheus-stack: release set to its release name).")
                }))
            })),
            "namespace": closed("The release namespace as an object of the chart.", json!({
                "create": boolean("Render the Namespace, labelled for the restricted Pod Security Standard as deploy/operator.yaml has it. Leave false with --create-namespace (Helm would refuse to adopt it).")
            })),
            "cluster": closed("A StorageOSCluster in the release namespace, with its API Secret, created with the release and kept by helm uninstall (helm.sh/resource-policy: keep).", json!({
                "create": boolean("Create the StorageOSCluster (and the Secret, see apiSecret.create)."),
                "name": d("Name of the StorageOSCluster.", json!({"type": "string", "minLength": 1})),
                "spec": cluster_spec_schema()?,
                "apiSecret": closed("The Secret spec.secretRefName, with the credentials of the StorageOS API.", json!({
                    "create": boolean("Create the Secret (else it must exist)."),
                    "username": string("Username of the StorageOS API."),
                    "password": string("Password of the StorageOS API; required when the Secret is created.")
                }))
            }))
        }
    }))
}

/// Markdown table cell: no `|` or newline breaks the row.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

fn type_of(schema: &Value) -> String {
    match schema.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" or "),
        _ if schema.get("enum").is_some() => "string".into(),
        _ => "any".into(),
    }
}

/// One row per value: objects with `properties` are walked into, but `cluster.spec` (the CRD's
/// own schema, with a description on each field) is one row.
fn rows(prefix: &str, schema: &Value, defaults: Option<&Value>, out: &mut Vec<String>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (key, property) in properties {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let default = defaults.and_then(|d| d.get(key));
        if property.get("properties").is_some() && path != "cluster.spec" {
            rows(&path, property, default, out);
            continue;
        }
        let default = match default {
            Some(v) => format!("`{}`", cell(&v.to_string())),
            None => "unset".into(),
        };
        let description = property.get("description").and_then(Value::as_str).unwrap_or_default();
        out.push(format!(
            "| `{path}` | {} | {default} | {} |",
            type_of(property),
            cell(description)
        ));
    }
}

/// The chart's README.md: how to install it, and each value from the schema with its default
/// (from values.yaml).
pub fn readme(schema: &Value, defaults: &Value, generated: &str) -> String {
    let mut table = vec![
        "| value | type | default | description |".to_string(),
        "|---|---|---|---|".into(),
    ];
    rows("", schema, Some(defaults), &mut table);
    format!(
        r#"<!-- {generated} -->
# storageos-operator

The StorageOS operator (cluster-operator and api-manager in one binary) and its CRDs. At the
default values the chart installs the objects of the project's `deploy/operator.yaml` (with
Helm's release labels) but the Namespace:

```sh
helm install storageos-operator <chart> -n storageos-operator --create-namespace
kubectl label namespace storageos-operator pod-security.kubernetes.io/enforce=restricted
```

Then a StorageOSCluster in that namespace (or `--set cluster.create=true` with
`cluster.apiSecret.password` and `cluster.spec`). One release per Kubernetes cluster: the
cluster-wide objects have fixed names.

The CRDs are in `crds/`: Helm installs them once and never upgrades them. Before `helm upgrade`
to a chart with changed CRDs:

```sh
kubectl apply --server-side --force-conflicts -f <chart>/crds/
```

As a subchart, the parent's `global:` values are allowed (and ignored), and so is `enabled` for a
`condition:`. `values.schema.json` refuses any other value it does not name, and checks
`cluster.spec` against the StorageOSCluster CRD's schema.

The images of StorageOS itself (node, init, CSI sidecars, kube-scheduler) are the operator's
defaults for its release; for a private registry set them per cluster in `cluster.spec.images`.

## Values

{table}

The project's docs/install.md explains the chart further.
"#,
        table = table.join("\n")
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// Every property of the schema, at any depth, as its path.
    fn properties(path: &str, schema: &Value, out: &mut Vec<(String, Value)>) {
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                let p = format!("{path}.{k}");
                out.push((p.clone(), v.clone()));
                properties(&p, v, out);
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(v) = schema.get(key).filter(|v| v.is_object()) {
                properties(&format!("{path}[{key}]"), v, out);
            }
        }
    }

    #[test]
    fn every_value_has_a_description() {
        let mut all = vec![];
        properties("", &values_schema().unwrap(), &mut all);
        assert!(all.len() > 100, "cluster.spec is the CRD's schema: {}", all.len());
        for (path, schema) in all {
            assert!(
                schema
                    .get("description")
                    .and_then(Value::as_str)
                    .is_some_and(|d| !d.is_empty()),
                "{path} has no description"
            );
        }
    }

    #[test]
    fn the_cluster_spec_is_closed_at_every_level() {
        let spec = cluster_spec_schema().unwrap();
        assert_eq!(spec["additionalProperties"], false);
        assert_eq!(spec["properties"]["kvBackend"]["additionalProperties"], false);
        assert!(spec.get("required").is_none());
        let text = spec.to_string();
        assert!(!text.contains("x-kubernetes-") && !text.contains("nullable"), "{text}");
    }

    #[test]
    fn strict_turns_nullable_into_a_null_type() {
        let s = strict(&json!({"type": "string", "nullable": true, "enum": ["a"]}));
        assert_eq!(s, json!({"type": ["string", "null"], "enum": ["a", null]}));
        let s = strict(&json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {}}));
        assert!(s.get("additionalProperties").is_none());
    }
}
