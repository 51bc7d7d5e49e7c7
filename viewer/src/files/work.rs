//! The files tab's work off the UI thread: opening a file, saving a timeline or the opened
//! trace (never replacing a file unasked), and reading the report to compare with, each on a
//! worker thread whose result [`FilesTab::poll`] takes ([`Done`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gangway::bench::Report;
use gangway::trace::{Event, Track};

use super::{FilesTab, Loaded, open, tracks_of};
use crate::background::{Job, drop_elsewhere, spawn};
use crate::timeline::{TimelineData, TimelineState};

/// Writes `events` as Chrome trace JSON (see [`write_file`]). Blocking: the UI runs it on a
/// worker thread.
pub fn save_trace(
    path: &Path,
    events: &[Event],
    tracks: &[Track],
    overwrite: bool,
) -> Result<(), String> {
    let json = gangway::trace::chrome::to_string(events, tracks);
    write_file(path, json.as_bytes(), overwrite)
}

/// Writes `bytes` to `path`, whole or not at all: [`gangway::fsutil::write_new`], which never
/// replaces a file, unless `overwrite` (the user confirmed), then
/// [`gangway::fsutil::write_atomic`]. Blocking.
pub fn write_file(path: &Path, bytes: &[u8], overwrite: bool) -> Result<(), String> {
    let written = if overwrite {
        gangway::fsutil::write_atomic(path, bytes)
    } else {
        gangway::fsutil::write_new(path, bytes)
    };
    written.map_err(|e| match &e {
        gangway::Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists => {
            format!("{} exists: not overwritten", path.display())
        }
        _ => format!("cannot write {e}"),
    })
}

/// A name beside `opened` that no file has yet, to save a copy of it to: `trace-copy.json`,
/// then `trace-copy-2.json`, ... (`.json.gz` kept whole).
pub fn copy_name(opened: &Path) -> PathBuf {
    let name = opened
        .file_name()
        .map_or_else(|| "trace.json".into(), |n| n.to_string_lossy().into_owned());
    let split = match name.strip_suffix(".json.gz") {
        Some(stem) => Some((stem, ".json.gz")),
        None => name
            .rfind('.')
            .filter(|&at| at > 0)
            .map(|at| name.split_at(at)),
    };
    let (stem, ext) = split.unwrap_or((name.as_str(), ""));
    let named = |k: usize| match k {
        1 => opened.with_file_name(format!("{stem}-copy{ext}")),
        k => opened.with_file_name(format!("{stem}-copy-{k}{ext}")),
    };
    (1..10_000)
        .map(named)
        .find(|p| !p.exists())
        .unwrap_or_else(|| named(1))
}

/// Which timeline "Save" writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveWhat {
    Live,
    BubbleLab,
    Opened,
}

/// What a save writes.
enum Payload {
    /// The opened file's bytes, as read.
    Bytes(Arc<[u8]>),
    /// A timeline's events and device names, in gangway's layout.
    Events(Vec<Event>, Vec<Track>),
}

/// What a worker hands back.
#[derive(Debug)]
pub(super) enum Done {
    /// `path`: where the file came from (canonical when it could be made so), for the recent
    /// list; `None` for a dropped file without one.
    Opened {
        path: Option<PathBuf>,
        result: Result<Loaded, String>,
    },
    Saved(Result<String, String>),
    /// The report to compare with, read.
    Compared(Result<Box<Report>, String>),
    /// A report to show side by side, read.
    Added(PathBuf, Result<Box<Report>, String>),
}

/// File I/O under way on a worker thread.
#[derive(Debug)]
pub(super) struct Work {
    /// What the spinner says: "opening trace.json".
    pub(super) what: String,
    pub(super) started: Instant,
    /// Only opens may be abandoned (a save finishes anyway, whole).
    pub(super) cancellable: bool,
    pub(super) job: Job<Done>,
}

impl FilesTab {
    /// Opens `path` in the background (shown in the path field).
    pub fn open(&mut self, path: PathBuf) {
        self.path = path.display().to_string();
        let what = format!("opening {}", path.display());
        self.start(what, true, move || {
            let result = open(&path);
            let path = std::fs::canonicalize(&path).unwrap_or(path);
            Done::Opened {
                path: Some(path),
                result,
            }
        });
    }

    /// Starts `job` in the background; any open under way is abandoned.
    pub(super) fn start(
        &mut self,
        what: String,
        cancellable: bool,
        job: impl FnOnce() -> Done + Send + 'static,
    ) {
        match spawn("gangway-viewer-files", self.ctx.clone(), job) {
            Ok(job) => {
                self.work = Some(Work {
                    what,
                    started: Instant::now(),
                    cancellable,
                    job,
                });
            }
            Err(e) => self.message = Some(Err(e)),
        }
    }

    /// Blocks until the background open, save or compare is done (or `timeout` passes) and takes
    /// its result; whether nothing is left under way. For tests and scripted use; the UI never
    /// waits.
    pub fn wait_idle(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while let Some(work) = &self.work {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(done) = work.job.wait(left, &format!("{}: the worker", work.what)) else {
                return false;
            };
            self.work = None;
            match done {
                Ok(done) => self.finish(done),
                Err(e) => self.message = Some(Err(e)),
            }
        }
        true
    }

    pub(super) fn finish(&mut self, done: Done) {
        match done {
            Done::Opened { path, result } => match result {
                Ok(l) => {
                    self.message = Some(Ok(format!("opened {}", l.summary())));
                    if let Some(p) = &path {
                        self.remember(p.clone());
                        if l.trace().is_some() {
                            self.save_path = copy_name(p).display().to_string();
                        }
                    }
                    // What "Save" writes next: the trace just opened (to its new name).
                    if l.trace().is_some() {
                        self.save_what = SaveWhat::Opened;
                    }
                    self.confirm_overwrite = None;
                    self.loaded_from = path;
                    if let Some(old) = self.loaded.replace(l) {
                        drop_elsewhere(old);
                    }
                    self.timeline = TimelineState::default();
                    self.compare.new_report_opened();
                    self.beside.new_report_opened();
                }
                Err(e) => {
                    // A recent file that is gone leaves the list.
                    if let Some(p) = path.filter(|p| !p.exists()) {
                        self.recent.retain(|r| *r != p);
                    }
                    self.message = Some(Err(e));
                }
            },
            Done::Saved(result) => self.message = Some(result),
            Done::Compared(result) => self.compare.loaded(result),
            Done::Added(path, result) => self.beside.added(path, result),
        }
    }

    /// Saves the chosen timeline to the save path, in the background. A path that exists is
    /// written only with `overwrite` (the user confirmed); otherwise the save waits for that
    /// ([`FilesTab::confirm_overwrite`]).
    pub fn save(&mut self, live: &TimelineData, lab: Option<&TimelineData>, overwrite: bool) {
        let path = PathBuf::from(self.save_path.trim());
        let shown = path.display().to_string();
        if path.as_os_str().is_empty() {
            self.message = Some(Err("nothing to save to: the save path is empty".into()));
            return;
        }
        if !overwrite && path.exists() {
            self.confirm_overwrite = Some(path);
            return;
        }
        self.confirm_overwrite = None;
        // The opened file's bytes are shared with the worker; the timelines are copied.
        let payload = match self.save_what {
            SaveWhat::Opened => match self.loaded.as_ref().and_then(Loaded::trace) {
                Some(t) => Payload::Bytes(Arc::clone(&t.source)),
                None => {
                    self.message = Some(Err("nothing to save: no trace is open".into()));
                    return;
                }
            },
            SaveWhat::Live | SaveWhat::BubbleLab => {
                let source = if self.save_what == SaveWhat::Live {
                    Some(live)
                } else {
                    lab
                };
                match source.filter(|d| !d.is_empty()) {
                    Some(d) => Payload::Events(d.all_events().cloned().collect(), tracks_of(d)),
                    None => {
                        self.message = Some(Err("nothing to save: that timeline is empty".into()));
                        return;
                    }
                }
            }
        };
        self.start(format!("saving {shown}"), false, move || {
            Done::Saved(match payload {
                Payload::Bytes(bytes) => write_file(&path, &bytes, overwrite).map(|()| {
                    format!(
                        "saved the opened trace as it was read ({} bytes) to {shown}",
                        bytes.len()
                    )
                }),
                Payload::Events(events, tracks) => save_trace(&path, &events, &tracks, overwrite)
                    .map(|()| format!("saved {} events to {shown}", events.len())),
            })
        });
    }

    /// Reads the report at `path` to show beside the opened one, in the background.
    pub(super) fn add_report(&mut self, path: PathBuf) {
        self.start(format!("reading {}", path.display()), true, move || {
            let result = Report::load(&path).map(Box::new).map_err(|e| e.to_string());
            Done::Added(path, result)
        });
    }

    /// Reads the report at `old` to compare the opened one with, in the background.
    pub(super) fn compare(&mut self, old: PathBuf) {
        self.start(
            format!("comparing with {}", old.display()),
            true,
            move || Done::Compared(Report::load(&old).map(Box::new).map_err(|e| e.to_string())),
        );
    }
}
