//! The plane's audit log as the bench reads it: who wrote what, when. Its policy (written by the
//! bench) logs every ServiceAccount write, get and list, and StorageOSCluster creates.

use std::io::BufRead;
use std::path::Path;

use serde_json::Value;

pub const OPERATOR_SA: &str = "system:serviceaccount:storageos-operator:storageos-operator";
/// The user agent of both processes starts with this.
pub const UA: &str = "storageos-operator/";
pub const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// The audit policy of the bench plane: the default (every ServiceAccount write), plus reads by
/// ServiceAccounts (re-lists show there) and StorageOSCluster creates by anyone (the start of
/// the cluster-apply measure).
pub const POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [\"create\", \"delete\"]
    resources: [{group: \"storageos.com\", resources: [\"storageosclusters\"]}]
  - level: Metadata
    userGroups: [\"system:serviceaccounts\"]
    verbs: [\"create\", \"update\", \"patch\", \"delete\", \"deletecollection\", \"get\", \"list\"]
  - level: None
";

/// Every event of a JSON-lines file (lines that do not parse are skipped; no file, no events).
pub fn events(path: &Path) -> impl Iterator<Item = Value> {
    let file = std::fs::File::open(path).ok();
    file.into_iter().flat_map(|f| {
        std::io::BufReader::new(f)
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| serde_json::from_str::<Value>(&l).ok())
    })
}

/// Epoch seconds of an RFC 3339 time.
pub fn ts(s: &str) -> Option<f64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.timestamp() as f64 + f64::from(t.timestamp_subsec_nanos()) / 1e9)
}

pub fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_default()
}

/// `resource` or `resource/subresource`.
pub fn resource(ev: &Value) -> String {
    let r = &ev["objectRef"];
    let mut s = r["resource"].as_str().unwrap_or("?").to_string();
    if let Some(sub) = r["subresource"].as_str().filter(|s| !s.is_empty()) {
        s.push('/');
        s.push_str(sub);
    }
    s
}

pub fn component(ev: &Value) -> &'static str {
    if str_of(ev, "userAgent").contains("api-manager") {
        "api-manager"
    } else {
        "operator"
    }
}

pub fn completed(ev: &Value) -> bool {
    str_of(ev, "stage") == "ResponseComplete"
}

pub fn is_write(ev: &Value) -> bool {
    WRITES.contains(&str_of(ev, "verb"))
}

/// A completed apiserver write of the api-manager's, Lease renewals apart.
pub fn api_manager_write(ev: &Value) -> bool {
    completed(ev)
        && is_write(ev)
        && str_of(ev, "userAgent").starts_with(UA)
        && component(ev) == "api-manager"
        && resource(ev) != "leases"
}
