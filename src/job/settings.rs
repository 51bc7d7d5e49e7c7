//! Ranks agree on what they compute, or the job does not start.
//!
//! Under `mpirun` every rank parses its own command line and environment. Settings that change
//! the program (the experts, the steps) make ranks' programs differ, which the gang scheduler
//! catches; settings that change only data or arithmetic (a seed, a learning rate, a corpus file)
//! do not, and such a job used to run to the end with losses that matched neither setting. So
//! every rank states its [`Settings`] (each a name and a value: a flag, an environment value, an
//! input file's or directory's contents as a digest), [`Job::agree`] gathers them, and a rank
//! whose settings differ from rank 0's ends the job with an error naming itself and the setting.
//!
//! What is rank-local by nature (where a rank writes its trace or report, which device it has)
//! is the caller's to leave out.

use super::Job;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::Path;
use std::time::Duration;

/// How long a rank that agrees with rank 0 waits before it reports another rank's difference:
/// the first rank to end a job under MPI ends every rank, and the user should read the
/// differing rank's own line, which names its value.
const CULPRIT_FIRST: Duration = Duration::from_secs(2);

/// One rank's settings: names and values, in the order they were added.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings(Vec<(String, String)>);

impl Settings {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a setting.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let (name, value) = (name.into(), value.into());
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name, value)),
        }
    }

    /// Adds a file's or directory's contents as a setting: its size and CRC-32 (a directory's
    /// files as the corpus loader finds them, each with its relative path), or why it cannot be
    /// read. Two ranks may keep the same data at different paths; what they read must be the
    /// same.
    pub fn input(&mut self, name: impl Into<String>, path: &Path) {
        let value = match digest(path) {
            Ok((bytes, crc)) => format!("{bytes} bytes, crc32 {crc:08x}"),
            Err(e) => format!("unreadable ({e})"),
        };
        self.set(name, value);
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Every setting in which `self` differs from `root`: `(name, self's value, root's value)`,
    /// a missing one as "not set".
    pub fn differences(&self, root: &Settings) -> Vec<(String, String, String)> {
        const UNSET: &str = "not set";
        let value = |s: &Settings, name: &str| {
            s.iter()
                .find(|(n, _)| *n == name)
                .map_or(UNSET.to_string(), |(_, v)| v.to_string())
        };
        let mut names: Vec<&str> = root.iter().map(|(n, _)| n).collect();
        names.extend(self.iter().map(|(n, _)| n).filter(|n| !root.has(n)));
        names
            .into_iter()
            .filter_map(|name| {
                let (here, there) = (value(self, name), value(root, name));
                (here != there).then(|| (name.to_string(), here, there))
            })
            .collect()
    }

    fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(n, _)| n == name)
    }
}

/// The total size and CRC-32 of a file, or of every file under a directory as the corpus
/// loader finds them (each after its path relative to the directory: corpora take their domain
/// from it).
fn digest(path: &Path) -> Result<(u64, u32)> {
    let mut crc = crc32fast::Hasher::new();
    let mut bytes = 0;
    let meta = std::fs::metadata(path).map_err(Error::io(path))?;
    let files = if meta.is_dir() {
        crate::data::files_under(path)?
    } else {
        vec![path.to_path_buf()]
    };
    for file in files {
        if let Ok(relative) = file.strip_prefix(path) {
            crc.update(relative.as_os_str().as_encoded_bytes());
        }
        let mut reader = std::fs::File::open(&file).map_err(Error::io(&file))?;
        let mut buffer = vec![0u8; 1 << 16];
        loop {
            let n = reader.read(&mut buffer).map_err(Error::io(&file))?;
            if n == 0 {
                break;
            }
            crc.update(&buffer[..n]);
            bytes += n as u64;
        }
    }
    Ok((bytes, crc.finalize()))
}

impl Job {
    /// A collective: every rank's `settings` against rank 0's. Returns `Ok` when all agree; else
    /// every rank returns [`Error::RanksDisagree`] for the first rank that differs (a rank that
    /// differs reports itself, and at once; the others after a moment, so that the line a user
    /// reads is the differing rank's own).
    pub fn agree(&self, settings: &Settings) -> Result<()> {
        if self.size() == 1 {
            return Ok(());
        }
        let all: Vec<Settings> = self.all_gather(settings)?;
        let differing = |rank: usize| all[rank].differences(&all[0]);
        let mine = differing(self.rank());
        let (rank, differences) = if mine.is_empty() {
            match (1..all.len())
                .map(|r| (r, differing(r)))
                .find(|(_, d)| !d.is_empty())
            {
                None => return Ok(()),
                Some(found) => {
                    std::thread::sleep(CULPRIT_FIRST);
                    found
                }
            }
        } else {
            (self.rank(), mine)
        };
        let (setting, value, root_value) = differences[0].clone();
        Err(Error::RanksDisagree {
            rank,
            setting,
            value,
            root_value,
            more: differences.len() - 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        let mut s = Settings::new();
        for (n, v) in pairs {
            s.set(*n, *v);
        }
        s
    }

    #[test]
    fn differences_name_every_setting_that_differs_or_is_missing() {
        let root = settings(&[("--seed", "1"), ("--lr", "0.003"), ("--steps", "10")]);
        let rank = settings(&[("--seed", "2"), ("--lr", "0.003"), ("--extra", "x")]);
        assert_eq!(
            rank.differences(&root),
            vec![
                ("--seed".into(), "2".into(), "1".into()),
                ("--steps".into(), "not set".into(), "10".into()),
                ("--extra".into(), "x".into(), "not set".into()),
            ]
        );
        assert!(root.differences(&root).is_empty());
    }

    #[test]
    fn inputs_are_compared_by_contents_not_by_path() {
        let dir = std::env::temp_dir().join(format!("gangway-settings-{}", std::process::id()));
        let (a, b) = (dir.join("a"), dir.join("b"));
        for d in [&a, &b] {
            std::fs::create_dir_all(d.join("domain")).unwrap();
            std::fs::write(d.join("domain/text.txt"), b"the same words").unwrap();
        }
        let (mut x, mut y) = (Settings::new(), Settings::new());
        x.input("--corpus", &a);
        y.input("--corpus", &b);
        assert_eq!(x, y, "the same files at two paths");
        std::fs::write(b.join("domain/text.txt"), b"other words").unwrap();
        y.input("--corpus", &b);
        assert_eq!(y.differences(&x).len(), 1);
        // A renamed file is different data for a corpus (its domain, its order).
        std::fs::rename(b.join("domain"), b.join("elsewhere")).unwrap();
        std::fs::write(b.join("elsewhere/text.txt"), b"the same words").unwrap();
        y.input("--corpus", &b);
        assert_eq!(y.differences(&x).len(), 1);
        y.input("--corpus", &dir.join("missing"));
        assert!(y.iter().next().unwrap().1.starts_with("unreadable"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_rank_that_differs_is_named_by_every_rank() {
        let said = crate::job::on_each_rank(3, |job| {
            let seed = if job.rank() == 2 { "7" } else { "1" };
            job.agree(&settings(&[("--seed", seed), ("--lr", "0.003")]))
        });
        for result in said {
            match result {
                Err(Error::RanksDisagree {
                    rank,
                    setting,
                    value,
                    root_value,
                    more,
                }) => {
                    assert_eq!((rank, setting.as_str()), (2, "--seed"));
                    assert_eq!((value.as_str(), root_value.as_str(), more), ("7", "1", 0));
                }
                other => panic!("{other:?}"),
            }
        }
        let agreeing = crate::job::on_each_rank(2, |job| job.agree(&settings(&[("--seed", "1")])));
        assert!(agreeing.iter().all(Result::is_ok), "{agreeing:?}");
    }
}
