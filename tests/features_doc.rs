//! docs/features.md lists the component images of this release as `crates/cluster-operator/src/render/images.rs` has
//! them: a default image changed in the code without the table (or the reverse) fails here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use storageos_operator::render::images::BUILTIN_IMAGES;

/// The rows of the images table: `RELATED_IMAGE_*` variable → image.
fn documented(doc: &str) -> BTreeMap<String, String> {
    doc.lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            // | component | `image` | `VARIABLE` |
            let [_, _, image, var, _] = cells.as_slice() else {
                return None;
            };
            let var = var.strip_prefix('`')?.strip_suffix('`')?;
            let image = image.strip_prefix('`')?.strip_suffix('`')?;
            Some((format!("RELATED_IMAGE_{var}"), image.to_string()))
        })
        .collect()
}

#[test]
fn the_image_table_is_the_code_s() {
    let doc = std::fs::read_to_string("docs/features.md").unwrap();
    let table = documented(&doc);
    let code: BTreeMap<String, String> = BUILTIN_IMAGES
        .iter()
        .map(|(var, image)| (var.to_string(), image.to_string()))
        .collect();
    pretty_assertions::assert_eq!(
        table,
        code,
        "docs/features.md's image table against crates/cluster-operator/src/render/images.rs"
    );
}
