//! Unit tier: the CRD types accept every known CR unchanged, and `crds/` is up to date.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code may fail loudly

use std::path::{Path, PathBuf};

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use storageos_operator::crd::{self, Job, StorageOSCluster, StorageOSUpgrade};

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(kind);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    files.sort();
    files
}

/// Deserialises `doc` as `T` and serialises it back; the result must equal the input exactly.
fn assert_round_trip<T: DeserializeOwned + Serialize>(path: &Path, doc: &Value) {
    let typed: T =
        serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{} does not deserialise: {e}", path.display()));
    let back = serde_json::to_value(&typed).expect("serialise");
    pretty_assertions::assert_eq!(&back, doc, "{} lost or changed a field", path.display());
}

#[test]
fn seed_and_all_field_examples_round_trip_without_losing_a_field() {
    let files = fixtures("valid");
    assert!(
        files.len() >= 5,
        "expected the seed examples and the all-fields cluster"
    );
    for path in files {
        let text = std::fs::read_to_string(&path).expect("read fixture");
        let doc: Value = serde_yaml::from_str(&text).expect("fixture is YAML");
        match doc["kind"].as_str() {
            Some("StorageOSCluster") => assert_round_trip::<StorageOSCluster>(&path, &doc),
            Some("StorageOSUpgrade") => assert_round_trip::<StorageOSUpgrade>(&path, &doc),
            Some("Job") => assert_round_trip::<Job>(&path, &doc),
            other => panic!("{}: unexpected kind {other:?}", path.display()),
        }
    }
}

#[test]
fn all_fields_example_sets_every_spec_field() {
    // Guards the fixture itself: a field added to the types must be added to the example too.
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/valid/storageoscluster-all-fields.yaml"),
    )
    .expect("read");
    let cluster: StorageOSCluster = serde_yaml::from_str(&text).expect("parse");
    let spec = serde_json::to_value(&cluster.spec).expect("to json");
    let crd = serde_json::to_value(crd::all().remove(0).1).expect("crd");
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    // Fields this operator added after Go v2.4.2: the all-fields example is also the CR of the
    // Go adoption fixtures, which the Go operator rendered, so they are set in their own cases
    // (tests/golden/inputs/api-manager-placement.yaml, webhook-client-ca.yaml,
    // node-out-of-service.yaml, node-maintenance.yaml, disable-fencing.yaml).
    const NOT_GO_FIELDS: [&str; 5] = [
        "placement",
        "apiManager",
        "nodeOutOfService",
        "nodeMaintenance",
        "attachRecovery",
    ];
    for key in schema["properties"].as_object().expect("spec properties").keys() {
        if NOT_GO_FIELDS.contains(&key.as_str()) {
            continue;
        }
        assert!(
            spec.get(key).is_some(),
            "the all-fields example does not set spec.{key}"
        );
    }
}

#[test]
fn crds_directory_matches_generated_output() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    for (file, crd) in crd::all() {
        let on_disk = std::fs::read_to_string(dir.join(file))
            .unwrap_or_else(|e| panic!("crds/{file}: {e}; run `cargo run -- crds --out-dir crds`"));
        let generated = format!("---\n{}", serde_yaml::to_string(&crd).expect("yaml"));
        assert!(
            on_disk == generated,
            "crds/{file} is stale; run `cargo run -- crds --out-dir crds` and commit"
        );
    }
    let extra: Vec<_> = std::fs::read_dir(&dir)
        .expect("crds dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| !crd::all().iter().any(|(f, _)| f == name))
        .collect();
    assert!(
        extra.is_empty(),
        "crds/ holds files the operator does not generate: {extra:?}"
    );
}

/// The shape users and `kubectl` depend on.
/// Paths under `schema` (named from `path`) whose properties have no description; descends into
/// objects, array items and map values.
fn undocumented(schema: &Value, path: &str, missing: &mut Vec<String>) {
    if let Some(props) = schema["properties"].as_object() {
        for (name, prop) in props {
            let here = format!("{path}.{name}");
            if prop["description"].as_str().is_none_or(|d| d.trim().is_empty()) {
                missing.push(here.clone());
            }
            undocumented(prop, &here, missing);
        }
    }
    if schema["items"].is_object() {
        undocumented(&schema["items"], &format!("{path}[]"), missing);
    }
    if schema["additionalProperties"].is_object() {
        undocumented(&schema["additionalProperties"], &format!("{path}{{}}"), missing);
    }
}

#[test]
fn crds_have_names_columns_status_and_validation() {
    let crds: Vec<Value> = crd::all()
        .into_iter()
        .map(|(_, c)| serde_json::to_value(c).expect("json"))
        .collect();
    let cluster = &crds[0];
    assert_eq!(cluster["metadata"]["name"], "storageosclusters.storageos.com");
    assert_eq!(cluster["spec"]["scope"], "Namespaced");
    assert_eq!(cluster["spec"]["names"]["shortNames"], serde_json::json!(["stos"]));
    let version = &cluster["spec"]["versions"][0];
    assert_eq!(version["name"], "v1");
    assert!(version["subresources"]["status"].is_object());
    let columns: Vec<_> = version["additionalPrinterColumns"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| c["name"].as_str().expect("name").to_string())
        .collect();
    assert_eq!(columns, ["Ready", "Status", "Version", "Age"]);
    let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(
        spec["required"],
        serde_json::json!(["secretRefName", "secretRefNamespace"])
    );
    assert_eq!(spec["properties"]["namespace"]["default"], "kube-system");
    assert_eq!(
        spec["properties"]["csi"]["properties"]["deploymentStrategy"]["default"],
        "deployment"
    );
    assert_eq!(
        spec["properties"]["service"]["properties"]["externalPort"]["maximum"].as_f64(),
        Some(65535.0)
    );
    assert!(spec["properties"]["csi"]["properties"]["driverRegisterationMode"].is_object());
    let mut missing = Vec::new();
    // Every field of every CRD, at any depth, is documented, so `kubectl explain` has
    // something to say.
    for crd in &crds {
        let kind = crd["spec"]["names"]["kind"].as_str().expect("kind");
        for version in crd["spec"]["versions"].as_array().expect("versions") {
            let root = &version["schema"]["openAPIV3Schema"]["properties"];
            for part in ["spec", "status"] {
                undocumented(&root[part], &format!("{kind}.{part}"), &mut missing);
            }
        }
    }
    assert!(missing.is_empty(), "fields without a description: {missing:?}");
    let job = &crds[2];
    assert_eq!(job["metadata"]["name"], "jobs.storageos.com");
    let job_columns: Vec<_> = job["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| c["name"].as_str().expect("name").to_string())
        .collect();
    assert_eq!(job_columns, ["Completed", "Progress", "Age"]);
}
