//! The architecture as a rule (docs/architecture.md, "Crates" and "Layers").
//!
//! Between crates, Cargo enforces the edges: [`EDGES`] is what each crate of the workspace may
//! depend on, read from `cargo metadata`, so a new edge is a deliberate edit here and in the doc.
//! Inside a crate, its top-level modules stand on floors ([`FLOORS`]) and may use only modules
//! on lower floors, and no files use each other in a loop. Read from the source: every
//! `crate::…`, `super::…` and child-module path outside `#[cfg(test)]` code is an arrow (paths
//! into other crates, re-exported under `crate::`, are Cargo's to check).

#![allow(clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each crate of the workspace and the workspace crates it may depend on (normal
/// dependencies). The kit and the client stand on nothing of the project; the contract on the
/// kit; the two daemons' crates on the contract, the kit and the client, never on each other;
/// the plugin on the operator's; the root crate (the binaries) on everything.
const EDGES: &[(&str, &[&str])] = &[
    ("operator-kit", &[]),
    ("storageos-client", &[]),
    ("storageos-sim", &["storageos-client"]),
    ("storageos-contract", &["operator-kit"]),
    (
        "storageos-api-manager",
        &["operator-kit", "storageos-contract", "storageos-client"],
    ),
    (
        "storageos-cluster-operator",
        &["operator-kit", "storageos-contract", "storageos-client"],
    ),
    (
        "storageos-plugin",
        &["operator-kit", "storageos-contract", "storageos-cluster-operator"],
    ),
    (
        "storageos-operator",
        &[
            "operator-kit",
            "storageos-contract",
            "storageos-client",
            "storageos-sim",
            "storageos-api-manager",
            "storageos-cluster-operator",
            "storageos-plugin",
        ],
    ),
    ("panic-check", &[]),
];

/// The workspace's packages, as `cargo metadata` describes them (read once per test binary).
fn workspace_packages() -> &'static [serde_json::Value] {
    static PACKAGES: std::sync::LazyLock<Vec<serde_json::Value>> = std::sync::LazyLock::new(read_packages);
    &PACKAGES
}

fn read_packages() -> Vec<serde_json::Value> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    meta["packages"].as_array().expect("packages").clone()
}

/// Each workspace crate's workspace dependencies by kind ("normal", "dev", "build").
fn workspace_edges() -> BTreeMap<String, BTreeSet<(String, String)>> {
    let packages = workspace_packages();
    let ours: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"].as_array().into_iter().flatten();
            let edges = deps
                .filter_map(|d| {
                    let name = d["name"].as_str()?;
                    let kind = d["kind"].as_str().unwrap_or("normal");
                    ours.contains(name).then(|| (name.to_string(), kind.to_string()))
                })
                .collect();
            (p["name"].as_str().unwrap_or_default().to_string(), edges)
        })
        .collect()
}

#[test]
fn each_crate_depends_only_on_what_the_architecture_allows() {
    let allowed: BTreeMap<&str, &[&str]> = EDGES.iter().copied().collect();
    let mut wrong = Vec::new();
    for (krate, edges) in workspace_edges() {
        let Some(may) = allowed.get(krate.as_str()) else {
            wrong.push(format!("{krate}: a crate EDGES in tests/layers.rs does not list"));
            continue;
        };
        for (dep, kind) in edges {
            if kind != "dev" && dep != krate && !may.contains(&dep.as_str()) {
                wrong.push(format!("{krate} depends on {dep} ({kind})"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "crate edges docs/architecture.md does not allow (move what both need into the contract or the kit):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_daemons_do_not_depend_on_each_other_and_the_kit_on_nothing_of_storageos() {
    let edges = workspace_edges();
    let deps = |k: &str| -> BTreeSet<String> { edges[k].iter().map(|(d, _)| d.clone()).collect() };
    assert!(!deps("storageos-api-manager").contains("storageos-cluster-operator"));
    assert!(!deps("storageos-cluster-operator").contains("storageos-api-manager"));
    // Not even for its tests.
    let kit: Vec<String> = deps("operator-kit")
        .into_iter()
        .filter(|d| d != "operator-kit")
        .collect();
    assert!(kit.is_empty(), "the kit depends on {kit:?}");
}

/// The lines of the kit's product code that may still say "storageos" (docs/architecture.md
/// lists them; each is a name users or stored objects already carry): a key stored on the webhook
/// certificates' Secret and its `part-of` label, the `storageos` reconcile-error category of the
/// dashboards, the trace target the StorageOS client's spans share, the refusal that tells a user
/// how to hand an object over, and a flag's example in an error message.
const KIT_MAY_SAY_STORAGEOS: &[&str] = &[
    "pub const NOT_AFTER_ANNOTATION: &str = \"storageos.com/not-after\";",
    "\"app.kubernetes.io/part-of\": \"storageos\"",
    "pub const STORAGEOS: &str = \"storageos\";",
    "APPLY, STORAGEOS, USER",
    "pub const TARGET: &str = \"storageos_operator::trace\";",
    "was not created by the StorageOS operator",
    "app.kubernetes.io/managed-by=storageos-operator",
    "for example \\\"storageos-operator,default\\\"",
];

/// The kit is given every name of a process (field managers, User-Agents, event components):
/// outside its tests it names nothing of StorageOS.
#[test]
fn the_kit_names_nothing_of_storageos() {
    let mut files = Vec::new();
    walk(&root().join("crates/kit/src"), &mut files);
    let mut named = Vec::new();
    for f in files.iter().filter(|f| !f.to_string_lossy().ends_with("tests.rs")) {
        let text = std::fs::read_to_string(f).expect("readable source");
        let (code, _) = split_tests(&text);
        for line in code.lines() {
            let said = line.to_lowercase().contains("storageos");
            if said && !KIT_MAY_SAY_STORAGEOS.iter().any(|ok| line.contains(ok)) {
                named.push(format!("{}: {}", f.display(), line.trim()));
            }
        }
    }
    assert!(
        named.is_empty(),
        "the kit names StorageOS (pass the name in): {named:#?}"
    );
}

/// Each workspace crate's source folder (`src` beside its Cargo.toml, relative to the root),
/// read as a tree of its own, with its crate's name.
fn sources() -> Vec<(String, PathBuf)> {
    let sources: Vec<(String, PathBuf)> = workspace_packages()
        .iter()
        .filter_map(|p| {
            let manifest = Path::new(p["manifest_path"].as_str()?);
            let src = manifest.parent()?.join("src");
            let src = src.strip_prefix(root()).ok()?.to_path_buf();
            Some((p["name"].as_str()?.to_string(), src))
        })
        .collect();
    assert!(sources.len() >= 8, "cargo metadata named only {sources:?}");
    sources
}

/// The floors of the top-level modules of the crates that have layers inside: a module may use
/// a module of a lower floor of its crate only, not one of its own floor, not one above.
const FLOORS: &[(&str, &[(&str, u8)])] = &[
    (
        "crates/kit/src",
        &[
            // Pure helpers and the reason type; logs and traces; the controller and process kit;
            // helpers for tests.
            ("duration", 1),
            ("go", 1),
            ("reasons", 1),
            ("text", 1),
            ("telemetry", 2),
            ("runtime", 3),
            ("testing", 4),
        ],
    ),
    (
        "crates/cluster-operator/src",
        &[
            // The pure build step; the install manifests and the prerequisite checks; the cluster
            // controller; the Job controller and the apply preview; the upgrade controller; the
            // process wiring.
            ("render", 1),
            ("install", 2),
            ("checks", 2),
            ("cluster", 3),
            ("job", 4),
            ("preview", 4),
            ("upgrade", 5),
            ("operator", 6),
        ],
    ),
    (
        "src",
        &[("simulate", 1), ("cli", 2), ("app", 3), ("storageos_tests", 4)],
    ),
];

/// File loops that are known and being removed (each names its files, sorted). Empty this list,
/// do not grow it.
const KNOWN_CYCLES: &[&[&str]] = &[];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn no_module_uses_one_on_its_own_floor_or_above() {
    let mut wrong = Vec::new();
    for (src, floors) in FLOORS {
        let tree = Tree::read(root().join(src));
        let floor: BTreeMap<&str, u8> = floors.iter().copied().collect();
        for (file, targets) in &tree.arrows {
            let from = top(&tree.modules[file]);
            for target in targets {
                let to = top(&tree.modules[target]);
                if from == to {
                    continue;
                }
                match (floor.get(from.as_str()), floor.get(to.as_str())) {
                    (Some(a), Some(b)) if b < a => {}
                    (Some(a), Some(b)) => wrong.push(format!(
                        "{} (floor {a}) uses {} (floor {b})",
                        tree.shown(file),
                        tree.shown(target)
                    )),
                    _ => wrong.push(format!("add `{from}` and `{to}` of {src} to FLOORS in tests/layers.rs")),
                }
            }
        }
    }
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "imports that run sideways or up (move the item down, or pass it in):\n{}",
        wrong.join("\n")
    );
}

/// The most lines a source file holds (docs/architecture.md): past it, a file is about more
/// than one thing. Unit tests live beside it in a `*_tests.rs` file when they would not fit.
const MAX_LINES: usize = 700;

#[test]
fn no_source_file_is_over_the_line_cap() {
    let mut files = Vec::new();
    // The crates, and the examples (the benchmark is a program of its own).
    for (_, src) in sources() {
        walk(&root().join(src), &mut files);
    }
    walk(&root().join("examples"), &mut files);
    assert!(files.len() > 200, "found only {} source files", files.len());
    let long: Vec<String> = files
        .iter()
        .map(|f| (f, std::fs::read_to_string(f).expect("readable source").lines().count()))
        .filter(|(_, n)| *n > MAX_LINES)
        .map(|(f, n)| format!("{} ({n} lines)", f.display()))
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines (split them): {long:#?}");
}

/// The StorageOS client's and simulator's own files are theirs to order.
const OWN_ORDER: &[&str] = &["storageos-client", "storageos-sim"];

#[test]
fn no_files_use_each_other_in_a_loop() {
    let known: BTreeSet<Vec<String>> = KNOWN_CYCLES
        .iter()
        .map(|c| c.iter().map(|f| f.to_string()).collect())
        .collect();
    let mut new = Vec::new();
    for (_, src) in sources().iter().filter(|(name, _)| !OWN_ORDER.contains(&name.as_str())) {
        let tree = Tree::read(root().join(src));
        new.extend(
            cycles(&tree.arrows)
                .into_iter()
                .map(|c| c.iter().map(|f| tree.shown(f)).collect::<Vec<_>>())
                .filter(|c| !known.contains(c)),
        );
    }
    assert!(new.is_empty(), "files that import each other in a loop: {new:#?}");
}

/// The first segment of a module path (`cluster` of `cluster::reconcile`).
fn top(module: &[String]) -> String {
    module.first().cloned().unwrap_or_default()
}

/// The library's files, their module paths and who uses whom.
struct Tree {
    src: PathBuf,
    /// File → module path (`crates/cluster-operator/src/cluster/mod.rs` → `["cluster"]`).
    modules: BTreeMap<PathBuf, Vec<String>>,
    /// File → the files it uses, outside test code.
    arrows: BTreeMap<PathBuf, BTreeSet<PathBuf>>,
}

impl Tree {
    fn read(src: PathBuf) -> Self {
        let mut files = Vec::new();
        walk(&src, &mut files);
        let mut modules = BTreeMap::new();
        for f in &files {
            let rel = f.strip_prefix(&src).expect("under src");
            let mut path: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
            let last = path.pop().expect("a file name");
            if !matches!(last.as_str(), "mod.rs" | "lib.rs") {
                path.push(last.trim_end_matches(".rs").to_string());
            }
            // The binaries are crates of their own: they use the library by name.
            if !(rel.starts_with("bin") || last == "main.rs" || last == "lib.rs") {
                modules.insert(f.clone(), path);
            }
        }
        let by_module: BTreeMap<Vec<String>, PathBuf> = modules.iter().map(|(f, m)| (m.clone(), f.clone())).collect();
        let mut test_only = BTreeSet::new();
        let mut code = BTreeMap::new();
        for file in modules.keys() {
            let text = std::fs::read_to_string(file).expect("readable source");
            let (product, tests) = split_tests(&text);
            for child in tests {
                let mut m = modules[file].clone();
                m.push(child);
                test_only.insert(m);
            }
            code.insert(file.clone(), product);
        }
        // Every path of every file, made absolute (`crate::…` from the root).
        let mut absolute = BTreeMap::new();
        for (file, text) in &code {
            let here = &modules[file];
            if test_only.iter().any(|t| here.starts_with(t)) {
                continue;
            }
            let children: BTreeSet<String> = declared_modules(text);
            let mut found = Vec::new();
            for path in paths(text) {
                found.push(match path[0].as_str() {
                    "crate" => path[1..].to_vec(),
                    "super" => {
                        let mut base = here.clone();
                        let mut rest = &path[..];
                        while rest.first().map(String::as_str) == Some("super") {
                            base.pop();
                            rest = &rest[1..];
                        }
                        base.into_iter().chain(rest.iter().cloned()).collect()
                    }
                    "self" => here.iter().chain(&path[1..]).cloned().collect(),
                    first if children.contains(first) => here.iter().chain(&path).cloned().collect(),
                    _ => continue,
                });
            }
            absolute.insert(file.clone(), found);
        }
        let files = Files {
            by_module: &by_module,
            code: &code,
            absolute: &absolute,
        };
        let mut arrows = BTreeMap::new();
        for (file, paths) in &absolute {
            let used = paths
                .iter()
                .filter_map(|p| files.resolve(p, 0))
                // A file may use its enclosing modules (a folder's `mod.rs` holds what its files
                // share); the folder's own arrows are drawn from its `mod.rs`.
                .filter(|t| !modules[file].starts_with(&modules[t]) && !test_only.contains(&modules[t]))
                .collect();
            arrows.insert(file.clone(), used);
        }
        Self { src, modules, arrows }
    }

    fn shown(&self, file: &Path) -> String {
        let src = self.src.strip_prefix(root()).unwrap_or(&self.src);
        format!(
            "{}/{}",
            src.display(),
            file.strip_prefix(&self.src).unwrap_or(file).display()
        )
    }
}

/// What resolving a path needs: the files by module, their code and their absolute paths.
struct Files<'a> {
    by_module: &'a BTreeMap<Vec<String>, PathBuf>,
    code: &'a BTreeMap<PathBuf, String>,
    absolute: &'a BTreeMap<PathBuf, Vec<Vec<String>>>,
}

impl Files<'_> {
    /// The file that defines what `path` names: the longest prefix that is a file of ours, or,
    /// when that file only re-exports the name (`pub use x::Name`, `pub use x::*`), the file it
    /// comes from.
    fn resolve(&self, path: &[String], depth: usize) -> Option<PathBuf> {
        let n = (1..=path.len())
            .rev()
            .find(|n| self.by_module.contains_key(&path[..*n]))?;
        let file = &self.by_module[&path[..n]];
        let Some(name) = path.get(n) else {
            return Some(file.clone());
        };
        if depth > 4 || defines(&self.code[file], name) {
            return Some(file.clone());
        }
        let uses = self.absolute.get(file).into_iter().flatten();
        let named = uses.clone().filter(|p| p.last() == Some(name) && p.as_slice() != path);
        if let Some(found) = named.filter_map(|p| self.resolve(p, depth + 1)).next() {
            return Some(found);
        }
        let glob = uses
            .filter_map(|p| self.by_module.get(p))
            .find(|g| *g != file && defines(&self.code[*g], name));
        Some(glob.unwrap_or(file).clone())
    }
}

/// Whether `code` defines an item called `name`.
fn defines(code: &str, name: &str) -> bool {
    // A custom resource's type is made by `#[derive(CustomResource)]` from its `kind`.
    code.contains(&format!("kind = \"{name}\""))
        || [
            "fn",
            "struct",
            "enum",
            "const",
            "static",
            "type",
            "trait",
            "mod",
            "union",
            "macro_rules!",
        ]
        .iter()
        .any(|kw| {
            let pattern = format!("{kw} {name}");
            code.match_indices(&pattern).any(|(i, _)| {
                let before = code[..i].chars().next_back();
                let after = code[i + pattern.len()..].chars().next();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        })
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("readable src")
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The product code of a file (without comments, and cut where its `#[cfg(test)] mod … {`
/// starts) and the names of the child modules it declares for tests only.
fn split_tests(text: &str) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut test_children = Vec::new();
    let mut after_cfg_test = false;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default().trim();
        if after_cfg_test && let Some(name) = module_name(code) {
            if code.ends_with(';') {
                test_children.push(name);
            } else {
                break;
            }
        }
        after_cfg_test = code == "#[cfg(test)]" || (after_cfg_test && code.starts_with("#["));
        out.push_str(code);
        out.push('\n');
    }
    (out, test_children)
}

/// `x` of a line `mod x;`, `pub mod x {`, `pub(crate) mod x;`.
fn module_name(code: &str) -> Option<String> {
    let rest = code.split_once("mod ")?;
    if !matches!(rest.0.trim(), "" | "pub" | "pub(crate)" | "pub(super)") {
        return None;
    }
    let name: String = rest
        .1
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

fn declared_modules(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| l.ends_with(';'))
        .filter_map(module_name)
        .collect()
}

/// Every path in `text`: `crate::a::b`, `super::x` anywhere, and each leaf of a `use` tree
/// (`use a::{b, c::{d, e}};` gives `a::b`, `a::c::d`, `a::c::e`).
fn paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut statement: Option<String> = None;
    for line in text.lines() {
        let tree = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|p| line.strip_prefix(p));
        if let Some(tree) = tree {
            statement = Some(tree.to_string());
        } else if let Some(s) = statement.as_mut() {
            s.push_str(line);
        }
        if statement.as_ref().is_some_and(|s| s.ends_with(';')) {
            let s = statement.take().unwrap_or_default();
            expand("", s.trim_end_matches(';'), &mut out);
        }
        for word in line.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')) {
            if word.starts_with("crate::") || word.starts_with("super::") {
                out.push(word.split("::").filter(|s| !s.is_empty()).map(String::from).collect());
            }
        }
    }
    out
}

fn expand(prefix: &str, tree: &str, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    match tree.find('{') {
        Some(open) => {
            let head = format!("{prefix}{}", &tree[..open]);
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let (mut depth, mut start) = (0, 0);
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&head, &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            expand(&head, &inner[start..], out);
        }
        None if !tree.is_empty() => {
            let path = format!("{prefix}{}", tree.split(" as ").next().unwrap_or(tree));
            let segments: Vec<String> = path
                .split("::")
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty() && s != "*")
                .collect();
            if !segments.is_empty() {
                out.push(segments);
            }
        }
        None => {}
    }
}

/// The loops of the graph (its strongly connected parts of more than one file), each sorted.
fn cycles(arrows: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    // Two files are in one loop when each reaches the other.
    let reach = |from: &PathBuf| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(f) = todo.pop() {
            for t in arrows.get(&f).into_iter().flatten() {
                if seen.insert(t.clone()) {
                    todo.push(t.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&PathBuf, BTreeSet<PathBuf>> = arrows.keys().map(|f| (f, reach(f))).collect();
    let mut loops = BTreeSet::new();
    for (f, r) in &reached {
        if !r.contains(*f) {
            continue;
        }
        let members: Vec<PathBuf> = r
            .iter()
            .filter(|g| reached.get(g).is_some_and(|rg| rg.contains(*f)))
            .cloned()
            .collect();
        if members.len() > 1 {
            loops.insert(members);
        }
    }
    loops.into_iter().collect()
}
