//! Unit tests of the chart rendering.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

#[test]
fn images_split_into_repository_tag_and_digest() {
    let d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    assert_eq!(
        split_image("storageos/storageos-operator:v0.1.0"),
        ImageRef {
            repository: "storageos/storageos-operator".into(),
            tag: "v0.1.0".into(),
            digest: "".into()
        }
    );
    assert_eq!(
        split_image(&format!("localhost:5000/op@{d}")),
        ImageRef {
            repository: "localhost:5000/op".into(),
            tag: "".into(),
            digest: d.into()
        }
    );
    assert_eq!(
        split_image(&format!("reg:443/a/op:v1@{d}")),
        ImageRef {
            repository: "reg:443/a/op".into(),
            tag: "v1".into(),
            digest: d.into()
        }
    );
    assert_eq!(split_image("op").repository, "op");
}

#[test]
fn no_sentinel_is_left_in_any_template() {
    for (file, text) in chart_files("x/y:z").unwrap() {
        assert!(!text.contains("@@"), "{file} keeps a sentinel:\n{text}");
    }
}

#[test]
fn an_unknown_sentinel_is_an_error() {
    assert!(template(&json!({"a": "@@NOPE@@"})).is_err());
}
