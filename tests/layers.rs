//! The house rules that a reader checks by eye, checked on every build: layers point one way
//! inside a folder too (the modules of one folder never form a circle), and no source file is
//! over 1,000 lines. A circle is found from the paths a file names (`super::x`, `crate::a::b`,
//! the names a folder's `mod.rs` re-exports), outside its comments and its `#[cfg(test)]` tail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOTS: [&str; 2] = ["src", "viewer/src"];
const MAX_LINES: usize = 1000;

type ModPath = Vec<String>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `src/a/b.rs` and `src/a/b/mod.rs` are `[a, b]`; `lib.rs` and `main.rs` are their folder.
fn module_of(root: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(root).expect("file under its root");
    let mut parts: ModPath = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn is_folder_face(file: &Path) -> bool {
    matches!(
        file.file_name().and_then(|n| n.to_str()),
        Some("mod.rs" | "lib.rs" | "main.rs")
    )
}

/// The file's code: without line comments and without its test module at the end.
fn code_of(text: &str) -> String {
    let text = text.find("#[cfg(test)]").map_or(text, |i| &text[..i]);
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &[u8], mut i: usize) -> (String, usize) {
    let start = i;
    while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == b'_') {
        i += 1;
    }
    (String::from_utf8_lossy(&s[start..i]).into_owned(), i)
}

/// Every path that starts at `crate`, `super` or `self`, as written (`use a::{b, c::d}` gives
/// `a::b` and `a::c`).
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let s = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let boundary = i == 0 || !(s[i - 1].is_ascii_alphanumeric() || s[i - 1] == b'_');
        if !boundary || !s[i].is_ascii_alphabetic() {
            i += 1;
            continue;
        }
        let (word, mut j) = ident_at(s, i);
        if !matches!(word.as_str(), "crate" | "super" | "self") || !code[j..].starts_with("::") {
            i = j.max(i + 1);
            continue;
        }
        let mut path = vec![word];
        while code[j..].starts_with("::") {
            j += 2;
            if s.get(j) == Some(&b'{') {
                // One level of a use group: each item's first name.
                let end = code[j..].find('}').map_or(s.len(), |e| j + e);
                for item in code[j + 1..end].split(',') {
                    let name = item.trim().split("::").next().unwrap_or("").trim();
                    let name = name.trim_start_matches('{').trim();
                    if !name.is_empty() && name != "self" {
                        let mut p = path.clone();
                        p.push(name.to_string());
                        out.push(p);
                    }
                }
                j = end;
                break;
            }
            let (next, k) = ident_at(s, j);
            if next.is_empty() {
                break;
            }
            path.push(next);
            j = k;
        }
        out.push(path);
        i = j.max(i + 1);
    }
    out
}

/// `path` as written in module `from`, made absolute.
fn absolute(from: &ModPath, path: &[String]) -> ModPath {
    let mut base: ModPath = match path[0].as_str() {
        "crate" => Vec::new(),
        _ => from.clone(),
    };
    let mut rest = &path[1..];
    if path[0] == "super" {
        // In `a/b.rs` and in `a/b/mod.rs` alike, `super` is `a`.
        base.pop();
        while rest.first().is_some_and(|p| p == "super") {
            base.pop();
            rest = &rest[1..];
        }
    }
    base.extend(rest.iter().cloned());
    base
}

struct Crate {
    files: BTreeMap<ModPath, PathBuf>,
    /// `(folder, name)` re-exported by the folder's face from its child module.
    reexports: BTreeMap<ModPath, ModPath>,
}

impl Crate {
    fn read(root: &Path) -> Crate {
        let mut list = Vec::new();
        rust_files(root, &mut list);
        let files: BTreeMap<ModPath, PathBuf> = list
            .iter()
            .map(|f| (module_of(root, f), f.clone()))
            .collect();
        let mut reexports = BTreeMap::new();
        for (module, file) in &files {
            if !is_folder_face(file) {
                continue;
            }
            let code = code_of(&std::fs::read_to_string(file).expect("source file"));
            for stmt in code.split(';') {
                let stmt = stmt.trim();
                let Some(rest) = ["pub use ", "pub(crate) use ", "pub(super) use "]
                    .iter()
                    .find_map(|p| stmt.rfind(p).map(|i| &stmt[i + p.len()..]))
                else {
                    continue;
                };
                let rest = rest.trim_start_matches("self::");
                let Some((child, items)) = rest.split_once("::") else {
                    continue;
                };
                let mut child_path = module.clone();
                child_path.push(child.trim().to_string());
                if !files.contains_key(&child_path) {
                    continue;
                }
                for item in items.trim_matches(|c| c == '{' || c == '}').split(',') {
                    let name = item.rsplit(" as ").next().unwrap_or("").trim();
                    let name = name.rsplit("::").next().unwrap_or("").trim();
                    if !name.is_empty() {
                        let mut key = module.clone();
                        key.push(name.to_string());
                        reexports.insert(key, child_path.clone());
                    }
                }
            }
        }
        Crate { files, reexports }
    }

    /// The longest prefix of `path` that is a module or a re-exported name, as a module.
    fn resolve(&self, path: &ModPath) -> Option<ModPath> {
        (1..=path.len()).rev().find_map(|k| {
            let prefix = path[..k].to_vec();
            if let Some(m) = self.reexports.get(&prefix) {
                Some(m.clone())
            } else if self.files.contains_key(&prefix) {
                Some(prefix)
            } else {
                None
            }
        })
    }

    /// Module → the sibling modules (same folder) it names.
    fn sibling_edges(&self) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
        for (module, file) in &self.files {
            let Some(folder) = module.split_last().map(|(_, f)| f.to_vec()) else {
                continue;
            };
            let code = code_of(&std::fs::read_to_string(file).expect("source file"));
            for path in paths_in(&code) {
                let abs = absolute(module, &path);
                let Some(target) = self.resolve(&abs) else {
                    continue;
                };
                if target.len() > folder.len() && target[..folder.len()] == folder[..] {
                    let sibling = target[..=folder.len()].to_vec();
                    if &sibling != module && self.files.contains_key(&sibling) {
                        edges.entry(module.clone()).or_default().insert(sibling);
                    }
                }
            }
        }
        edges
    }
}

/// Strongly connected components of more than one module (Tarjan).
fn circles(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<ModPath, usize>,
        low: BTreeMap<ModPath, usize>,
        stack: Vec<ModPath>,
        on_stack: BTreeSet<ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    impl Walk<'_> {
        fn visit(&mut self, v: &ModPath) {
            let n = self.index.len();
            self.index.insert(v.clone(), n);
            self.low.insert(v.clone(), n);
            self.stack.push(v.clone());
            self.on_stack.insert(v.clone());
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(&w);
                    let done = &w == v;
                    component.push(w);
                    if done {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

fn root(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)
}

#[test]
fn modules_of_a_folder_form_no_circle() {
    let mut report = Vec::new();
    for dir in ROOTS {
        let krate = Crate::read(&root(dir));
        let edges = krate.sibling_edges();
        for circle in circles(&edges) {
            let members: BTreeSet<&ModPath> = circle.iter().collect();
            let mut lines = vec![format!("{dir}: a circle of {} modules", circle.len())];
            for m in &circle {
                let to: Vec<String> = edges[m]
                    .iter()
                    .filter(|t| members.contains(t))
                    .map(|t| t.join("/"))
                    .collect();
                lines.push(format!("  {} -> {}", m.join("/"), to.join(", ")));
            }
            report.push(lines.join("\n"));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn a_circle_is_found_where_there_is_one() {
    // The checker itself: two siblings naming each other, through a path and a re-export.
    let dir = std::env::temp_dir().join(format!("gangway-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod a;\n").unwrap();
    std::fs::write(dir.join("a/mod.rs"), "mod x;\nmod y;\npub use y::Why;\n").unwrap();
    std::fs::write(dir.join("a/x.rs"), "use super::Why;\npub struct Ex;\n").unwrap();
    std::fs::write(
        dir.join("a/y.rs"),
        "// super::x in a comment is not a use\nuse crate::a::x::{Ex};\npub struct Why;\n",
    )
    .unwrap();
    let krate = Crate::read(&dir);
    let found = circles(&krate.sibling_edges());
    std::fs::write(
        dir.join("a/y.rs"),
        "// use super::x::Ex;\npub struct Why;\n",
    )
    .unwrap();
    let none = circles(&Crate::read(&dir).sibling_edges());
    let _ = std::fs::remove_dir_all(&dir);
    let ab = |s: &str| vec!["a".to_string(), s.to_string()];
    assert_eq!(found, vec![vec![ab("x"), ab("y")]]);
    assert!(none.is_empty(), "{none:?}");
}

#[test]
fn no_source_file_is_over_a_thousand_lines() {
    let mut long = Vec::new();
    for dir in ROOTS
        .iter()
        .copied()
        .chain(["tests", "viewer/tests", "examples"])
    {
        let root = root(dir);
        if !root.exists() {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&root, &mut files);
        for f in files {
            let lines = std::fs::read_to_string(&f)
                .expect("source file")
                .lines()
                .count();
            if lines > MAX_LINES {
                long.push(format!("{} ({lines} lines)", f.display()));
            }
        }
    }
    assert!(long.is_empty(), "over {MAX_LINES} lines: {long:?}");
}
