//! The README and the book under `docs/`, checked offline: every relative link (a file, an
//! image, a `#heading` in a page) resolves; the book's `SUMMARY.md` lists every page and no
//! missing one; the README stays one page. The command-line reference is checked against the
//! binary in `tests/cli.rs` (`cli_reference_is_up_to_date`).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every Markdown file of the book, and the README.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut out = vec![root().join("README.md")];
    walk(&root().join("docs/src"), &mut out);
    out.sort();
    out
}

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// A heading's anchor as GitHub and mdBook make it: lower case, spaces to `-`, only letters,
/// digits, `-` and `_` kept.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c.to_lowercase().next().unwrap_or(c)),
            _ => None,
        })
        .collect()
}

fn anchors(page: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(page).unwrap();
    prose(&text)
        .into_iter()
        .filter_map(|l| {
            let hashes = l.chars().take_while(|&c| c == '#').count();
            (1..=6)
                .contains(&hashes)
                .then(|| l[hashes..].strip_prefix(' '))
                .flatten()
                .map(slug)
        })
        .collect()
}

/// The targets of `[text](target)` links and `![alt](target)` images in `line`.
fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(after[..end].trim());
        rest = &after[end..];
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        for line in prose(&text) {
            for target in link_targets(line) {
                if target.starts_with("http://")
                    || target.starts_with("https://")
                    || target.starts_with("mailto:")
                {
                    continue;
                }
                let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
                let file = if file.is_empty() {
                    page.clone()
                } else {
                    dir.join(file)
                };
                if !file.exists() {
                    broken.push(format!("{}: {target} (no such file)", page.display()));
                } else if !anchor.is_empty()
                    && file.extension().is_some_and(|e| e == "md")
                    && !anchors(&file).contains(anchor)
                {
                    broken.push(format!("{}: {target} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_summary_lists_every_page_of_the_book() {
    let src = root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> = prose(&summary)
        .into_iter()
        .flat_map(link_targets)
        .map(|t| src.join(t))
        .collect();
    let pages: BTreeSet<PathBuf> = pages()
        .into_iter()
        .filter(|p| p.starts_with(&src) && !p.ends_with("SUMMARY.md"))
        .collect();
    let missing: Vec<_> = listed.difference(&pages).collect();
    let unlisted: Vec<_> = pages.difference(&listed).collect();
    assert!(
        missing.is_empty() && unlisted.is_empty(),
        "listed but missing: {missing:?}; pages not listed: {unlisted:?}"
    );
}

/// The README is one page: what gangway is, its status, the two commands, a picture and where
/// to read next; the rest is the book's.
#[test]
fn the_readme_is_one_page() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 150, "README.md has {lines} lines");
    for part in [
        "## Status",
        "## The two commands",
        "## Read next",
        "cargo test --workspace",
    ] {
        assert!(readme.contains(part), "README.md lacks {part:?}");
    }
}

#[test]
fn slugs_are_as_github_makes_them() {
    assert_eq!(
        slug("Across processes and hosts (MPI)"),
        "across-processes-and-hosts-mpi"
    );
    assert_eq!(slug("Scale-out, measured here"), "scale-out-measured-here");
    assert_eq!(slug("The `Kernel` type"), "the-kernel-type");
}
