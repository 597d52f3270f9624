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

/// Every file the build embeds (`include_str!`, `include_bytes!`) is copied into the build
/// stage, or `docker build` fails where `cargo build` passes.
#[test]
fn the_build_stage_copies_every_file_the_code_embeds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("Dockerfile")).expect("Dockerfile");
    let copied: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("COPY "))
        .filter(|rest| !rest.starts_with("--from"))
        .flat_map(|rest| {
            let words: Vec<&str> = rest.split_whitespace().collect();
            words[..words.len().saturating_sub(1)].to_vec()
        })
        .collect();
    let mut files = Vec::new();
    let mut dirs = vec![root.join("src"), root.join("crates")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable dir").flatten() {
            let p = entry.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                files.push(p);
            }
        }
    }
    let mut missing = Vec::new();
    let mut embedded = 0;
    for file in files {
        let code = std::fs::read_to_string(&file).expect("readable source");
        let parts = ["include_str!(\"", "include_bytes!(\""].map(|m| code.split(m).skip(1));
        for part in parts.into_iter().flatten() {
            let Some(rel) = part.split('"').next() else { continue };
            let Some(dir) = file.parent() else { continue };
            // Normalise `a/b/../../c` without touching the file system.
            let mut parts: Vec<String> = Vec::new();
            for c in dir.join(rel).strip_prefix(root).unwrap_or(Path::new(rel)).components() {
                match c {
                    std::path::Component::ParentDir => {
                        parts.pop();
                    }
                    c => parts.push(c.as_os_str().to_string_lossy().into_owned()),
                }
            }
            let path = parts.join("/");
            embedded += 1;
            if !copied.iter().any(|c| path.starts_with(c.trim_end_matches('/'))) {
                missing.push(path);
            }
        }
    }
    assert!(embedded > 10, "found only {embedded} embedded files");
    assert!(
        missing.is_empty(),
        "embedded files the Dockerfile does not COPY: {missing:?}"
    );
}
