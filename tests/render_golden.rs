//! Golden files of `render`: every case under `tests/golden/inputs/` renders exactly the stream
//! in `tests/golden/<case>.yaml`, and every rendered document survives typing without losing a
//! field.
//!
//! After an intended change: `UPDATE_GOLDEN=1 cargo test --test render_golden`, then review the
//! diff of `tests/golden/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code may fail loudly

use std::path::{Path, PathBuf};

use storageos_operator::render::{self, Inputs, Object};

/// The operator image the golden files are rendered with.
const OPERATOR_IMAGE: &str = "example.com/storageos-operator:v0.0.0-golden";

/// Inputs that a CR file cannot express: (case, Kubernetes version, ServiceMonitor CRD present).
/// Cases not listed use no version and no ServiceMonitor CRD.
const OPTIONS: [(&str, Option<&str>, bool); 2] = [
    ("service-monitor", Some("1.34.2"), true),
    ("all-fields", Some("v1.33.0"), true),
];

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Every case: the file names under `tests/golden/inputs/`, without `.yaml`.
fn cases() -> Vec<String> {
    let mut cases: Vec<String> = std::fs::read_dir(golden_dir().join("inputs"))
        .expect("tests/golden/inputs")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    cases.sort();
    cases
}

fn inputs(case: &str) -> Inputs {
    let (_, version, service_monitor) = OPTIONS
        .iter()
        .find(|(c, ..)| *c == case)
        .copied()
        .unwrap_or((case, None, false));
    let path = golden_dir().join("inputs").join(format!("{case}.yaml"));
    let mut inputs =
        render::inputs_from_files(&path, &[], version, OPERATOR_IMAGE).unwrap_or_else(|e| panic!("case {case}: {e}"));
    inputs.service_monitor_crd = service_monitor;
    inputs
}

fn rendered(case: &str) -> (Vec<Object>, String) {
    let objects = render::build(&inputs(case)).unwrap_or_else(|e| panic!("case {case}: {e}"));
    let stream = render::to_yaml_stream(&objects, true).unwrap();
    (objects, stream)
}

#[test]
fn every_case_matches_its_golden_file() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let cases = cases();
    assert!(cases.len() >= 15, "expected the golden cases, found {cases:?}");
    let mut failed = Vec::new();
    for case in &cases {
        let (_, actual) = rendered(case);
        let path = golden_dir().join(format!("{case}.yaml"));
        if update {
            std::fs::write(&path, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        if expected != actual {
            eprintln!("=== golden case {case} differs ({}):", path.display());
            eprintln!("{}", pretty_assertions::StrComparison::new(&expected, &actual));
            failed.push(case.clone());
        }
    }
    assert!(
        failed.is_empty(),
        "golden files differ for {failed:?}; if the change is intended, run \
         `UPDATE_GOLDEN=1 cargo test --test render_golden` and review the diff"
    );
}

#[test]
fn no_golden_file_without_an_input() {
    let cases = cases();
    for entry in std::fs::read_dir(golden_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            assert!(
                cases.contains(&stem),
                "{} has no input in tests/golden/inputs/",
                path.display()
            );
        }
    }
}

/// Typing a document must not drop or change a field: a template typo (`imagePullPolicyy`, a
/// key at the wrong level) that the typed struct would silently ignore fails here.
#[test]
fn typed_round_trip_loses_no_field_in_any_case() {
    for case in cases() {
        let docs = render::render_documents(&inputs(&case)).unwrap();
        for doc in docs {
            let (template, index, untyped) = (doc.template, doc.index, doc.value.clone());
            let typed = render::parse_document(doc).unwrap_or_else(|e| panic!("case {case}: {e}"));
            let back = typed.to_value().unwrap();
            pretty_assertions::assert_eq!(
                back,
                untyped,
                "case {case}: template {template}, document {index} ({}) changed when typed",
                typed.describe()
            );
        }
    }
}

/// Every object carries the pruning labels (except the never-pruned Namespace), and no object
/// sets an owner reference (the apply step does).
#[test]
fn every_object_carries_the_pruning_labels_and_no_owner() {
    for case in cases() {
        let (objects, _) = rendered(&case);
        for o in &objects {
            assert!(o.metadata().owner_references.is_none(), "{}", o.describe());
            if matches!(o, Object::Namespace(_)) {
                continue;
            }
            let labels = o.metadata().labels.clone().unwrap_or_default();
            assert_eq!(
                labels.get("app.kubernetes.io/managed-by").map(String::as_str),
                Some("storageos-operator")
            );
            let cluster = if case == "all-fields" {
                "example-storageos"
            } else {
                "storageos"
            };
            assert_eq!(labels.get("storageos.com/cluster").map(String::as_str), Some(cluster));
            assert_eq!(
                labels.get("storageos.com/cluster-namespace").map(String::as_str),
                Some("default"),
                "case {case}: {}",
                o.describe()
            );
        }
    }
}

/// The round trip above would catch a misspelt key: typing drops it.
#[test]
fn round_trip_catches_a_field_the_type_does_not_know() {
    let untyped = serde_json::json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "sa", "namespace": "ns", "lables": {"a": "b"}},
    });
    let doc = render::Document {
        template: "test",
        index: 0,
        value: untyped.clone(),
    };
    let typed = render::parse_document(doc).unwrap();
    assert_ne!(typed.to_value().unwrap(), untyped);
}
