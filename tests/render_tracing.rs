//! The operator's tracing variables reach the api-manager it renders (and only the Jaeger ones
//! the node ConfigMap, as before); without them the api-manager's environment is only its log
//! format (JSON) and its cluster (`STORAGEOS_CLUSTER`, for the maintenance signal).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code may fail loudly

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};
use storageos_operator::render;

fn objects(env: &[(&str, &str)]) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/inputs/defaults.yaml");
    let mut inputs = render::inputs_from_files(&path, &[], None, "op:v1").unwrap();
    let env: BTreeMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    // What the operator keeps of its environment (set, non-empty, forwarded variables).
    inputs.node_env = render::node_env_from(&env);
    render::build(&inputs)
        .unwrap()
        .iter()
        .map(|o| o.to_value().unwrap())
        .collect()
}

fn get<'a>(objs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objs.iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn api_manager_env(objs: &[Value]) -> Value {
    get(objs, "Deployment", "storageos-api-manager")["spec"]["template"]["spec"]["containers"][0]["env"].clone()
}

#[test]
fn tracing_variables_of_the_operator_reach_the_api_manager() {
    let objs = objects(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector.monitoring:4318"),
        ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0.1"),
        ("OTEL_SERVICE_NAME", "storageos-operator-prod"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer secret"),
        ("JAEGER_DISABLED", "false"),
        ("JAEGER_ENDPOINT", "http://jaeger:14268/api/traces"),
        ("JAEGER_SERVICE_NAME", "storageos-node"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""),
        ("UNRELATED", "x"),
    ]);
    assert_eq!(
        api_manager_env(&objs),
        json!([
            {"name": "LOG_FORMAT", "value": "json"},
            {"name": "STORAGEOS_CLUSTER", "value": "default/storageos"},
            {"name": "JAEGER_DISABLED", "value": "false"},
            {"name": "JAEGER_ENDPOINT", "value": "http://jaeger:14268/api/traces"},
            {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.monitoring:4318"},
            {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
            {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.1"},
        ]),
        "the service name is the api-manager's own; headers (credentials) and unset variables stay out"
    );
    let config = &get(&objs, "ConfigMap", "storageos-node-config")["data"];
    assert_eq!(config["JAEGER_ENDPOINT"], "http://jaeger:14268/api/traces");
    assert_eq!(config["JAEGER_SERVICE_NAME"], "storageos-node");
    for key in ["OTEL_EXPORTER_OTLP_ENDPOINT", "JAEGER_DISABLED", "OTEL_TRACES_SAMPLER"] {
        assert!(config.get(key).is_none(), "{key} must not reach the node ConfigMap");
    }
}

#[test]
fn without_tracing_variables_the_api_manager_has_only_its_log_format_and_cluster() {
    let objs = objects(&[("JAEGER_SERVICE_NAME", "storageos-node")]);
    assert_eq!(
        api_manager_env(&objs),
        json!([
            {"name": "LOG_FORMAT", "value": "json"},
            {"name": "STORAGEOS_CLUSTER", "value": "default/storageos"}
        ])
    );
}
