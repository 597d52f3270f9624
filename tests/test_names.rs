//! Test names say what they test: none is prefixed with the finding ID of a review (`m1_`,
//! `h3_`, `l2_` ...), which means nothing to a reader of the repository.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod scan;

use std::path::Path;

use scan::rust_files;

/// `fn m1_`, `fn h12_`, `fn l2_`: a review ID where the name should start.
fn review_id_prefix(line: &str) -> bool {
    let decl = line
        .trim_start()
        .trim_start_matches("pub ")
        .trim_start_matches("async ");
    let Some(rest) = decl.strip_prefix("fn ") else {
        return false;
    };
    let mut chars = rest.chars();
    let letter = chars.next().is_some_and(|c| matches!(c, 'm' | 'h' | 'l'));
    let digits: String = chars.by_ref().take_while(char::is_ascii_digit).collect();
    letter && !digits.is_empty() && rest[1 + digits.len()..].starts_with('_')
}

#[test]
fn no_function_is_named_after_a_review_finding() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "crates", "tests", "examples"] {
        rust_files(&root.join(dir), &mut files);
    }
    let found: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let rel = f.strip_prefix(root).unwrap().display().to_string();
            text.lines()
                .enumerate()
                .filter(|(_, l)| review_id_prefix(l))
                .map(|(i, l)| format!("{rel}:{}: {}", i + 1, l.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        found.is_empty(),
        "drop the review ID from these names:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_a_review_id_and_nothing_else() {
    assert!(review_id_prefix("    async fn m7_more_than_half_offline() {"));
    assert!(review_id_prefix("fn h12_x() {"));
    assert!(!review_id_prefix("fn more_than_half_offline() {"));
    assert!(!review_id_prefix("fn l_value() {"));
    assert!(!review_id_prefix("fn m2x_y() {"));
    assert!(!review_id_prefix("// not fn m1_x"));
}
