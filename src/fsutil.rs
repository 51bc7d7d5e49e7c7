//! Writing files so that a crash, a kill or a full disk never leaves a half-written one behind:
//! every file gangway writes for later reading (checkpoints, the autotune and pipeline caches,
//! bench reports) goes through [`write_atomic`], or [`write_new`] where an existing file must
//! never be replaced (the viewer's saves, unless the user said to overwrite). And where gangway's
//! caches live ([`cache_dir`]).

use crate::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Environment variable naming the directory of gangway's caches.
pub const CACHE_DIR_ENV: &str = "GANGWAY_CACHE_DIR";

/// The directory of gangway's caches (the autotuner's choices, the drivers' compiled pipelines):
/// `$GANGWAY_CACHE_DIR`, else `$XDG_CACHE_HOME/gangway`, else `~/.cache/gangway`; `None` when
/// none of these is set. Nothing is created here.
pub fn cache_dir() -> Option<PathBuf> {
    std::env::var_os(CACHE_DIR_ENV)
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("gangway")))
        .or_else(|| std::env::var_os("HOME").map(|d| PathBuf::from(d).join(".cache/gangway")))
}

/// Replaces `path` with `bytes`, all or nothing: the bytes go to a temporary file in the same
/// directory (a rename is only atomic within one file system), which is flushed to disk, renamed
/// over `path`, and then the directory is flushed so the rename itself survives a power cut.
/// Until the rename, `path` keeps its old contents; after a crash at any moment it holds either
/// the old or the new bytes, never a mix. A failed write removes its temporary file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = partial_path(path);
    let written = write_synced(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(source) = written {
        // Best effort: the error that matters is the write's, not the clean-up's.
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::Io {
            path: path.to_path_buf(),
            source,
        });
    }
    sync_dir(path).map_err(Error::io(path))
}

/// Writes `bytes` to `path` as [`write_atomic`] does, but only if nothing is there: the whole
/// file is linked into place under its name (a hard link fails if the name exists), so an
/// existing file is never replaced, not even by a race between a check and the write. An
/// existing `path` is an [`Error::Io`] of kind `AlreadyExists`. Where the file system has no
/// hard links, the name is checked and then renamed to (a race there can replace a file made
/// in between).
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = partial_path(path);
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Err(e) = write_synced(&tmp, bytes) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    let placed = match std::fs::hard_link(&tmp, path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists && !path.exists() => {
            std::fs::rename(&tmp, path)
        }
        linked => linked,
    };
    let _ = std::fs::remove_file(&tmp);
    placed.map_err(io)?;
    sync_dir(path).map_err(Error::io(path))
}

/// Errors now, not after a long run, when `path` cannot be written by [`write_atomic`]: creates
/// and removes a temporary file beside it. `path` itself is not touched.
pub fn check_writable(path: &Path) -> Result<()> {
    let probe = partial_path(path);
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(Error::io(path))
}

/// A temporary name beside `path`: `path` + `.<pid>.<n>.partial`. Unique per process and call, so
/// two writers of one file (tests sharing the autotune cache) never write into each other's
/// temporary file; the last rename wins, whole.
fn partial_path(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut name = path.as_os_str().to_owned();
    name.push(format!(
        ".{}.{}.partial",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    PathBuf::from(name)
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Flushes the directory entry of `path` (the rename). Only Unix can open a directory for that;
/// elsewhere the rename is as durable as the OS makes it.
fn sync_dir(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)?.sync_all()?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("gangway-fsutil-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary_behind() {
        let dir = temp_dir("replace");
        let path = dir.join("f.bin");
        write_atomic(&path, b"old").unwrap();
        write_atomic(&path, b"new contents").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new contents");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["f.bin"]);
        check_writable(&path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new contents");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn write_new_never_replaces_a_file() {
        let dir = temp_dir("new");
        let path = dir.join("f.bin");
        write_new(&path, b"first").unwrap();
        let err = write_new(&path, b"second").unwrap_err();
        assert!(
            matches!(&err, Error::Io { source, .. }
                if source.kind() == std::io::ErrorKind::AlreadyExists),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["f.bin"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_keeps_the_old_file() {
        let dir = temp_dir("fail");
        let path = dir.join("f.bin");
        write_atomic(&path, b"old").unwrap();
        // A directory where the file should go: the rename fails, the temporary is removed.
        let blocked = dir.join("sub");
        std::fs::create_dir_all(blocked.join("x")).unwrap();
        let err = write_atomic(&blocked, b"new").unwrap_err().to_string();
        assert!(err.contains("sub"), "{err}");
        assert!(check_writable(&dir.join("missing/f.bin")).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["f.bin", "sub"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
