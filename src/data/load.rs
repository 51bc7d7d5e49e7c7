//! Reading corpora from disk: any files or directories a user names, or the bundled ones.

use std::fs;
use std::path::{Path, PathBuf};

use super::{Corpus, Document};
use crate::{Error, Result};

/// Environment variable naming a directory to use instead of the shipped `assets/corpora`.
pub const CORPORA_DIR_VAR: &str = "GANGWAY_CORPORA_DIR";

/// Deeper than any real corpus; stops a symlink loop from recursing forever.
const MAX_DEPTH: usize = 32;

/// Where the bundled corpora live: `$GANGWAY_CORPORA_DIR` if set, else the crate's
/// `assets/corpora` (found from the build-time manifest directory, so tests and examples work
/// from any working directory).
pub fn corpora_dir() -> PathBuf {
    match std::env::var_os(CORPORA_DIR_VAR) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/corpora"),
    }
}

impl Corpus {
    /// Loads every file named, and every file under every directory named (recursively, in
    /// name order, skipping hidden entries). Each document's domain is the name of the
    /// directory it was found through: the named directory itself, or a named file's parent.
    /// An unreadable path is an [`Error::Io`]; no bytes at all is an [`Error::InvalidArgument`].
    pub fn from_paths(paths: &[PathBuf]) -> Result<Corpus> {
        if paths.is_empty() {
            return Err(Error::InvalidArgument {
                what: "Corpus::from_paths",
                reason: "no paths given".into(),
            });
        }
        let mut documents = Vec::new();
        for path in paths {
            let meta = fs::metadata(path).map_err(Error::io(path))?;
            if meta.is_dir() {
                let domain = label(path);
                collect(path, &domain, &mut documents)?;
            } else {
                let domain = path.parent().map(label).unwrap_or_default();
                documents.push(read(path, domain)?);
            }
        }
        let corpus = Corpus::from_documents(documents);
        if corpus.is_empty() {
            return Err(Error::InvalidArgument {
                what: "Corpus::from_paths",
                reason: format!("no text in {}", list(paths)),
            });
        }
        Ok(corpus)
    }

    /// The shipped corpus of one domain (a subdirectory of [`corpora_dir`]).
    pub fn bundled(domain: &str) -> Result<Corpus> {
        load_domain(&corpora_dir(), domain)
    }

    /// Every shipped domain in one corpus, each document labelled with its domain.
    pub fn bundled_all() -> Result<Corpus> {
        let dir = corpora_dir();
        let mut documents = Vec::new();
        for domain in domains_in(&dir)? {
            documents.extend(load_domain(&dir, &domain)?.documents().iter().cloned());
        }
        if documents.is_empty() {
            return Err(no_domains(&dir));
        }
        Ok(Corpus::from_documents(documents))
    }

    /// The names of the shipped domains, sorted.
    pub fn bundled_domains() -> Result<Vec<String>> {
        domains_in(&corpora_dir())
    }
}

pub(super) fn domains_in(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(Error::io(dir))? {
        let entry = entry.map_err(Error::io(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && entry.path().is_dir() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

pub(super) fn load_domain(dir: &Path, domain: &str) -> Result<Corpus> {
    let known = domains_in(dir)?;
    if !known.iter().any(|d| d == domain) {
        if known.is_empty() {
            return Err(no_domains(dir));
        }
        return Err(Error::InvalidArgument {
            what: "Corpus::bundled",
            reason: format!(
                "no domain {domain:?} in {} (have: {})",
                dir.display(),
                known.join(", ")
            ),
        });
    }
    Corpus::from_paths(&[dir.join(domain)])
}

fn collect(dir: &Path, domain: &str, out: &mut Vec<Document>) -> Result<()> {
    for path in files_under(dir)? {
        out.push(read(&path, domain.to_string())?);
    }
    Ok(())
}

/// Every file under `dir`, recursively, in name order, skipping hidden entries: what a corpus
/// directory holds (and what ranks compare of it, `job::Settings::input`).
pub(crate) fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    walk(dir, 0, &mut out)?;
    Ok(out)
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(Error::InvalidArgument {
            what: "Corpus::from_paths",
            reason: format!(
                "{} is nested deeper than {MAX_DEPTH} directories (a symlink loop?)",
                dir.display()
            ),
        });
    }
    let mut entries = Vec::new();
    for entry in fs::read_dir(dir).map_err(Error::io(dir))? {
        let entry = entry.map_err(Error::io(dir))?;
        if !entry.file_name().to_string_lossy().starts_with('.') {
            entries.push(entry.path());
        }
    }
    entries.sort();
    for path in entries {
        let meta = fs::metadata(&path).map_err(Error::io(&path))?;
        if meta.is_dir() {
            walk(&path, depth + 1, out)?;
        } else if meta.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

fn read(path: &Path, domain: String) -> Result<Document> {
    let bytes = fs::read(path).map_err(Error::io(path))?;
    Ok(Document::new(domain, path.display().to_string(), bytes))
}

/// A directory's own name, or the whole path when it has none (`.`, `/`).
fn label(path: &Path) -> String {
    match path.file_name() {
        Some(name) => name.to_string_lossy().into_owned(),
        None => path.display().to_string(),
    }
}

fn no_domains(dir: &Path) -> Error {
    Error::InvalidArgument {
        what: "Corpus::bundled",
        reason: format!(
            "{} holds no corpus directories (set {CORPORA_DIR_VAR} to a directory with one \
             subdirectory per domain)",
            dir.display()
        ),
    }
}

fn list(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gangway-data-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn directories_label_their_documents_and_load_in_name_order() -> Result<()> {
        let root = scratch("order");
        let io = |e| Error::io(&root)(e);
        fs::create_dir_all(root.join("poems/deep")).map_err(io)?;
        fs::write(root.join("poems/b.txt"), "bee").map_err(io)?;
        fs::write(root.join("poems/a.txt"), "ay").map_err(io)?;
        fs::write(root.join("poems/deep/c.txt"), "sea").map_err(io)?;
        fs::write(root.join("poems/.hidden"), "no").map_err(io)?;
        fs::write(root.join("poems/empty.txt"), "").map_err(io)?;
        fs::write(root.join("loose.txt"), "x").map_err(io)?;

        let c = Corpus::from_paths(&[root.join("poems"), root.join("loose.txt")])?;
        let got: Vec<(&str, &[u8])> = c
            .documents()
            .iter()
            .map(|d| (d.domain.as_str(), d.bytes.as_slice()))
            .collect();
        let root_label = label(&root);
        assert_eq!(
            got,
            [
                ("poems", &b"ay"[..]),
                ("poems", b"bee"),
                ("poems", b"sea"),
                (root_label.as_str(), b"x")
            ]
        );
        assert_eq!(domains_in(&root)?, ["poems"]);
        assert_eq!(load_domain(&root, "poems")?.len_bytes(), 8);
        assert!(matches!(
            load_domain(&root, "nope"),
            Err(Error::InvalidArgument { .. })
        ));
        let _ = fs::remove_dir_all(&root);
        Ok(())
    }

    #[test]
    fn missing_and_empty_inputs_are_errors() -> Result<()> {
        let root = scratch("empty");
        fs::create_dir_all(root.join("nothing")).map_err(Error::io(&root))?;
        assert!(matches!(
            Corpus::from_paths(&[root.join("missing.txt")]),
            Err(Error::Io { .. })
        ));
        assert!(matches!(
            Corpus::from_paths(&[root.join("nothing")]),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            Corpus::from_paths(&[]),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            load_domain(&root.join("nothing"), "x"),
            Err(Error::InvalidArgument { .. })
        ));
        let _ = fs::remove_dir_all(&root);
        Ok(())
    }
}
