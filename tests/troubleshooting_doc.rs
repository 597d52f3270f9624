//! docs/troubleshooting.md has a section for every condition and event reason of the table
//! (`storageos_operator::reasons::ALL`) and none for a reason that does not exist; and no code
//! builds a condition or an event around the table.
//!
//! The table is closed by types: `runtime::conditions` and `ControllerKit::event` take only a `Reason`,
//! which only the reasons tables (the contract's and the kit's) make. What types cannot see is code that builds a condition or
//! an event object itself, assigns a reason string, or matches one by name (a field selector);
//! the scan below finds those outside the few modules allowed to.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod scan;

use std::collections::BTreeSet;
use std::path::Path;

use scan::rust_files;

use storageos_operator::reasons::ALL;

const DOC: &str = "docs/troubleshooting.md";

/// The reasons docs/troubleshooting.md has a section for: headings "### `Name`".
fn documented(doc: &str) -> BTreeSet<String> {
    doc.lines()
        .filter_map(|l| l.strip_prefix("### `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_reason_has_a_section_and_every_section_a_reason() {
    let doc = std::fs::read_to_string(DOC).unwrap();
    let sections = documented(&doc);
    let table: BTreeSet<String> = ALL.iter().map(|r| r.name().to_string()).collect();
    let missing: Vec<_> = table.difference(&sections).collect();
    let stale: Vec<_> = sections.difference(&table).collect();
    assert!(
        missing.is_empty(),
        "{DOC} has no section (### `Name`) for these reasons of crates/contract/src/reasons.rs: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "{DOC} has sections for reasons crates/contract/src/reasons.rs does not have: {stale:?}"
    );
}

#[test]
fn each_section_says_what_to_do_with_a_command() {
    let doc = std::fs::read_to_string(DOC).unwrap();
    // A section runs from its heading to the next heading.
    let mut name = None;
    let mut body = String::new();
    let mut bare = Vec::new();
    for line in doc.lines().chain(std::iter::once("## end")) {
        if line.starts_with("#") {
            if let Some(n) = name.take()
                && !body.contains("kubectl")
            {
                bare.push(n);
            }
            body.clear();
            name = line
                .strip_prefix("### `")
                .and_then(|l| l.split('`').next())
                .map(str::to_string);
        } else {
            body.push_str(line);
            body.push('\n');
        }
    }
    assert!(bare.is_empty(), "sections of {DOC} with no kubectl command: {bare:?}");
}

/// Files allowed to build condition and event objects: the condition setters, the event
/// publisher and the table itself.
const ALLOWED: &[&str] = &[
    "crates/contract/src/reasons.rs",
    "crates/kit/src/reasons.rs",
    "crates/kit/src/runtime/kube/conditions.rs",
    "crates/kit/src/runtime/kube/controller.rs",
    "crates/kit/src/runtime/kube/events.rs",
];

/// The crates that publish conditions and events.
const SOURCES: &[&str] = &[
    "src",
    "crates/kit/src",
    "crates/contract/src",
    "crates/api-manager/src",
    "crates/cluster-operator/src",
    "crates/plugin/src",
];

/// The code of a source file without its test module (`#[cfg(test)]` followed by `mod … {`,
/// which this crate keeps at the end of a file) and without comment lines.
fn code_of(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut end = lines.len();
    for (i, l) in lines.iter().enumerate() {
        if l.trim() == "#[cfg(test)]" {
            let next = lines[i + 1..].iter().find(|l| !l.trim_start().starts_with("#["));
            if next.is_some_and(|n| n.trim_start().starts_with("mod ") && n.trim_end().ends_with('{')) {
                end = i;
                break;
            }
        }
    }
    lines[..end]
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, *l))
        .collect()
}

/// What on `line` puts a reason around the table, if anything.
fn escape(line: &str) -> Option<&'static str> {
    let word_at = |at: usize, word: &str| {
        line[at..].starts_with(word)
            && !line[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
    };
    for (at, _) in line.match_indices("reason") {
        let raw = &line[at + "reason".len()..];
        // `reason=Name` inside a string: a field selector naming a reason.
        if raw
            .strip_prefix('=')
            .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_uppercase()))
        {
            return Some("a reason written as a string");
        }
        let rest = raw.trim_start();
        let Some(c) = rest.chars().next() else { continue };
        if c != ':' && c != '=' || rest.starts_with("::") || rest.starts_with("==") {
            continue;
        }
        // `reason: "Name"`, `reason = "Name"`.
        if rest[1..]
            .trim_start()
            .strip_prefix('"')
            .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_uppercase()))
        {
            return Some("a reason written as a string");
        }
    }
    for (at, _) in line.match_indices(".reason =") {
        if !line[at..].starts_with(".reason ==") {
            return Some("a reason assigned to an object");
        }
    }
    // A type's declaration or a function returning it is not a struct literal.
    let declares = ["fn ", "->", "impl", "struct ", "enum "]
        .iter()
        .any(|w| line.contains(w));
    for (at, _) in line.match_indices("Reason {") {
        if word_at(at, "Reason {") && !declares {
            return Some("a Reason made outside the reasons tables");
        }
    }
    for (at, _) in line.match_indices("Reason::new(") {
        if word_at(at, "Reason::new(") {
            return Some("a Reason made outside the reasons tables");
        }
    }
    for kind in ["Condition {", "Event {", "K8sEvent {"] {
        for (at, _) in line.match_indices(kind) {
            if word_at(at, kind) && !declares {
                return Some(
                    "a condition or event object built outside runtime::kube::{conditions, controller, events}",
                );
            }
        }
    }
    None
}

#[test]
fn no_reason_escapes_the_table() {
    let mut files = Vec::new();
    for src in SOURCES {
        rust_files(Path::new(src), &mut files);
    }
    files.sort();
    assert!(files.len() > 200, "found only {} source files", files.len());
    let mut found = Vec::new();
    for file in &files {
        let shown = file.display().to_string();
        if ALLOWED.contains(&shown.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in code_of(&text) {
            if let Some(what) = escape(line) {
                found.push(format!("{shown}:{n}: {what}: {}", line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "every condition and event reason comes from crates/contract/src/reasons.rs (add it there and to {DOC}):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_sees_what_it_looks_for() {
    for bad in [
        r#"conditions::set(c, "Ready", false, reason: "Oops", m)"#,
        r#"    reason: "NewReason".into(),"#,
        r#"let x = ListParams::default().fields("reason=Fenced");"#,
        r#"    c.reason = "Oops".into();"#,
        r#"    let r = Reason { name: "X" };"#,
        r#"    const R: Reason = Reason::new("X", Kind::Event, "Pod", "x");"#,
        r#"    let c = Condition { type_: "Ready".into(), ..Default::default() };"#,
        r#"    let e = Event { reason: r.into(), ..e };"#,
    ] {
        assert!(escape(bad).is_some(), "not seen: {bad}");
    }
    for fine in [
        r#"    reason: e.apiserver_reason(),"#,
        r#"    reason: format!("its ID {:?} cannot be a label", id),"#,
        r#"    .any(|c| c.reason == reason && c.status == "False")"#,
        r#"    reason: reasons::FENCED,"#,
        r#"    Invalid { reason: String },"#,
        r#"    vec![NodeCondition {"#,
        r#"    "reason": c.reason,"#,
        r#"    pub fn reason(&self) -> Reason {"#,
        r#"    ) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {"#,
    ] {
        assert!(escape(fine).is_none(), "seen: {fine}");
    }
    let text =
        "fn a() {}\n// reason: \"InComment\"\n#[cfg(test)]\n#[allow(x)]\nmod tests {\n    reason: \"InTest\"\n}\n";
    assert_eq!(code_of(text), vec![(1, "fn a() {}")]);
}
