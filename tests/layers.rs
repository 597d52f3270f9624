//! The layering of `src/` as a rule (docs/architecture.md, "Layers"): every top-level module
//! stands on a floor of [`FLOORS`] and may use only modules on lower floors, and no files use
//! each other in a loop. Read from the source: every `crate::…`, `super::…` and child-module
//! path outside `#[cfg(test)]` code is an arrow. Moving a module, or carving one into a crate,
//! is one edit of the table.

#![allow(clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of `src/` (a folder or a file) and its floor. A module may use a
/// module of a lower floor only: not one of its own floor, not one above.
const FLOORS: &[(&str, u8)] = &[
    // API types, the rules and names components share, pure helpers.
    ("crd", 1),
    ("rbac", 1),
    ("duration", 1),
    ("go", 1),
    ("reasons", 1),
    ("text", 1),
    // Logging and traces.
    ("telemetry", 2),
    // The pure build step; the controller and process kit; the StorageOS client.
    ("render", 3),
    ("runtime", 3),
    // (`storageos` is the crate `storageos-client`, re-exported under that name: below every
    // module of `src/`, and it cannot import them. So is `sim`, the crate `storageos-sim`.)
    ("storageos", 3),
    ("sim", 3),
    // The install manifests; the prerequisite checks.
    ("install", 4),
    ("checks", 4),
    // The cluster controller (it keeps checking its prerequisites); the api-manager; the
    // simulator's process (`simulate`).
    ("cluster", 5),
    ("apimanager", 5),
    ("simulate", 5),
    // The Job controller (it reads the cluster's), then the StorageOSUpgrade controller.
    ("job", 6),
    // `plan`: a preview of the cluster controller's apply (the plugin may offer it).
    ("preview", 6),
    ("upgrade", 7),
    // Process wiring, the plugin, then the command line and dispatch.
    ("operator", 8),
    ("plugin", 8),
    ("cli", 9),
    ("app", 10),
    // Unit tests of the StorageOS client against the operator's own servers (test-only).
    ("storageos_tests", 10),
];

/// File loops that are known and being removed (each names its files, sorted). Empty this list,
/// do not grow it.
const KNOWN_CYCLES: &[&[&str]] = &[];

#[test]
fn no_module_uses_one_on_its_own_floor_or_above() {
    let tree = Tree::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let floor: BTreeMap<&str, u8> = FLOORS.iter().copied().collect();
    let mut wrong = Vec::new();
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
                _ => wrong.push(format!("add `{from}` and `{to}` to FLOORS in tests/layers.rs")),
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

/// The two daemons' own modules: the operator's controllers and the api-manager. Neither side
/// uses the other; what they share (CRDs, contracts, the kit) lies below both. This is the
/// boundary a crate per process will make Cargo's to enforce.
const OPERATOR_SIDE: &[&str] = &["cluster", "job", "preview", "upgrade", "operator"];
const API_MANAGER_SIDE: &[&str] = &["apimanager"];

#[test]
fn the_operator_and_the_api_manager_do_not_use_each_other() {
    let tree = Tree::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let side = |m: &str| {
        if OPERATOR_SIDE.contains(&m) {
            Some("operator")
        } else if API_MANAGER_SIDE.contains(&m) {
            Some("api-manager")
        } else {
            None
        }
    };
    let mut crossing = Vec::new();
    for (file, targets) in &tree.arrows {
        let from = side(&top(&tree.modules[file]));
        for target in targets {
            let to = side(&top(&tree.modules[target]));
            if from.is_some() && to.is_some() && from != to {
                crossing.push(format!("{} uses {}", tree.shown(file), tree.shown(target)));
            }
        }
    }
    assert!(
        crossing.is_empty(),
        "the operator and the api-manager use each other (move what they share into `crd`):\n{}",
        crossing.join("\n")
    );
}

/// What the controller and process kit (`src/runtime/`) may not name outside its tests: the
/// StorageOS client, the simulator and the CRDs. It is the kit crate-to-be: Kubernetes and
/// process plumbing, with nothing of StorageOS but the `Reason` type of the reasons table.
const NOT_IN_THE_KIT: &[&str] = &["crate::storageos", "storageos_client", "crate::sim", "crate::crd"];

#[test]
fn the_kit_names_nothing_of_storageos() {
    let mut files = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/runtime"), &mut files);
    let mut named = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("readable source");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            if let Some(name) = NOT_IN_THE_KIT.iter().find(|name| line.contains(*name)) {
                named.push(format!("{}:{}: {name}", f.display(), n + 1));
            }
        }
    }
    assert!(
        named.is_empty(),
        "the kit names StorageOS (pass it in instead): {named:#?}"
    );
}

/// The most lines a file of `src/` holds (docs/architecture.md): past it, a file is about more
/// than one thing. Unit tests live beside it in a `*_tests.rs` file when they would not fit.
const MAX_LINES: usize = 700;

#[test]
fn no_file_of_src_is_over_the_line_cap() {
    let mut files = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    let long: Vec<String> = files
        .iter()
        .map(|f| (f, std::fs::read_to_string(f).expect("readable source").lines().count()))
        .filter(|(_, n)| *n > MAX_LINES)
        .map(|(f, n)| format!("{} ({n} lines)", f.display()))
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines (split them): {long:#?}");
}

#[test]
fn no_files_use_each_other_in_a_loop() {
    let tree = Tree::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let known: BTreeSet<Vec<String>> = KNOWN_CYCLES
        .iter()
        .map(|c| c.iter().map(|f| f.to_string()).collect())
        .collect();
    let new: Vec<Vec<String>> = cycles(&tree.arrows)
        .into_iter()
        .map(|c| c.iter().map(|f| tree.shown(f)).collect::<Vec<_>>())
        .filter(|c| !known.contains(c))
        .collect();
    assert!(new.is_empty(), "files that import each other in a loop: {new:#?}");
}

/// The first segment of a module path (`cluster` of `cluster::reconcile`).
fn top(module: &[String]) -> String {
    module.first().cloned().unwrap_or_default()
}

/// The library's files, their module paths and who uses whom.
struct Tree {
    src: PathBuf,
    /// File → module path (`src/cluster/mod.rs` → `["cluster"]`).
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
        format!("src/{}", file.strip_prefix(&self.src).unwrap_or(file).display())
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
