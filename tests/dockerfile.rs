//! The Dockerfile's base images are pinned by digest: a tag moved upstream cannot change what a
//! release build pulls (supply chain). A stage built on an earlier stage names no registry.

use std::path::Path;

#[test]
fn every_base_image_is_pinned_by_digest() {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile")).expect("Dockerfile");
    let stages: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("FROM "))
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    assert!(stages.len() >= 2, "a build stage and a runtime stage: {stages:?}");
    for image in stages {
        let Some((named, digest)) = image.split_once("@sha256:") else {
            panic!("{image} is not pinned by digest: add @sha256:… (crane digest {image})");
        };
        assert!(
            named.contains(':'),
            "{image}: keep the tag beside the digest, it says which image it is"
        );
        assert!(
            digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "{image}: a digest is 64 lowercase hex digits"
        );
    }
}
