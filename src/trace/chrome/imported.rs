//! A Chrome trace as [`parse_slice`](super::parse_slice) reads it: its slices as [`Event`]s
//! (flow points bound to them), its instants, what names its rows, its counter tracks, and a
//! count of every phase it held.
//!
//! Two dialects, told apart by gangway's own marker and nothing else: a trace whose top level
//! has `"otherData": {"producer": "gangway", ...}` ([`PRODUCER`], which
//! [`to_json`](super::to_json) writes) keeps gangway's meaning: `pid` is the device, `tid` the
//! lane. Any other trace (PyTorch's profiler, JAX's, Perfetto, chrome://tracing, one written
//! by hand, gangway's from before the marker) is read the way Perfetto reads it, however small
//! its ids: one row per thread that has slices or thread instants, grouped by process, named
//! from its `process_name` / `thread_name` metadata and ordered by the sort-index metadata,
//! then by id. Each [`Event::device`] of such a trace is then the index of its row in
//! [`ChromeTrace::rows`], its lane [`Lane::Compute`].
//!
//! [`Lane::Compute`]: crate::trace::Lane::Compute

use std::fmt;

use crate::trace::event::{Event, Flow, Lane};
use crate::trace::track::Track;

/// The `producer` gangway writes in a trace's `otherData`: the one thing that makes a trace read
/// as [`Dialect::Gangway`].
pub const PRODUCER: &str = "gangway";

/// Which producer's conventions a trace follows; see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// gangway's: `pid` is a device, `tid` a lane.
    Gangway,
    /// Anyone else's: one row per thread.
    Foreign,
}

/// A `pid` or `tid` as the file wrote it: the format allows any JSON value, and producers use
/// OS ids beyond 2^32, negative ids and strings (PyTorch writes `"pid": "Spans"`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Id {
    /// An integral number (a float with no fraction counts).
    Int(i128),
    /// Anything else, as text: strings as they are, other values as JSON.
    Text(String),
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Int(n) => write!(f, "{n}"),
            Id::Text(s) if s.is_empty() => f.write_str("\"\""),
            Id::Text(s) => f.write_str(s),
        }
    }
}

/// One row of a [`Dialect::Foreign`] trace: a thread of a process.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadRow {
    pub pid: Id,
    pub tid: Id,
    /// From `process_name` metadata.
    pub process_name: Option<String>,
    /// From `thread_name` metadata.
    pub thread_name: Option<String>,
}

impl ThreadRow {
    /// The process as Perfetto titles it: `python3 (pid 4711)`, or `process 4711` unnamed.
    pub fn process_label(&self) -> String {
        process_label(&self.pid, self.process_name.as_deref())
    }

    /// The thread as Perfetto titles it: `MainThread (tid 4711)`, or `thread 4711` unnamed; a
    /// name that already holds the id as a word of its own (PyTorch's `thread 4711 (python)`)
    /// as it is. `worker 12` on thread 1 is `worker 12 (tid 1)`: the 1 in 12 is not the id.
    pub fn thread_label(&self) -> String {
        let tid = self.tid.to_string();
        match &self.thread_name {
            Some(name) if holds_word(name, &tid) => name.clone(),
            Some(name) => format!("{name} (tid {tid})"),
            None => format!("thread {tid}"),
        }
    }
}

/// Whether `word` occurs in `text` with no letter or digit right before or after it.
fn holds_word(text: &str, word: &str) -> bool {
    if word.is_empty() {
        return false;
    }
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// How far an instant reaches, by its `s` field: Perfetto draws a thread's on the thread's
/// track, a process's on the process, a global one across everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InstantScope {
    /// `"s": "t"`, or no `s`.
    Thread,
    /// `"s": "p"`.
    Process,
    /// `"s": "g"`.
    Global,
}

/// A flow point bound to a slice: a slice may send and receive several flows (a task that was
/// posted and posts another), where [`Event::flow`] holds only its first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoundFlow {
    /// Index into [`ChromeTrace::events`].
    pub event: usize,
    pub flow: Flow,
}

/// An instant (`i`, or the older `I`): a point in time with a name.
#[derive(Debug, Clone, PartialEq)]
pub struct InstantEvent {
    /// The row it is drawn on: a [`Dialect::Gangway`] trace's device, a foreign trace's index
    /// into [`ChromeTrace::rows`] (a process instant: its process's first row); `None` for a
    /// global instant, or a process instant whose process has no row.
    pub device: Option<usize>,
    /// The lane, in a gangway trace (as its `tid` says; [`Lane::Compute`] otherwise).
    pub lane: Lane,
    pub ns: u64,
    pub name: String,
    pub scope: InstantScope,
}

/// `name (pid N)`, or `process N` when the process has no name.
pub fn process_label(pid: &Id, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{name} (pid {pid})"),
        None => format!("process {pid}"),
    }
}

/// One counter series (`C` events): a process's values of one `args` key over time.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterTrack {
    pub pid: Id,
    /// The process's name, from its metadata.
    pub process_name: Option<String>,
    /// The event's name, then the series' key unless it is `value` (and the counter's `id`, if
    /// it has one): `"utilization busy %"`.
    pub name: String,
    /// `(ns, value)` in time order (by value among equal times).
    pub points: Vec<(u64, f64)>,
}

/// Everything the import keeps of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct ChromeTrace {
    pub dialect: Dialect,
    /// Slices (`X`, and `B`/`E` pairs), sorted by start time, device and lane, then as Perfetto
    /// nests slices that start together: the longer first (the parent), and of equal ones the
    /// one begun first in the file (an `X`'s place, a `B`'s).
    pub events: Vec<Event>,
    /// Every flow point bound to a slice, in file order (each slice's first is also its
    /// [`Event::flow`]).
    pub flows: Vec<BoundFlow>,
    /// Instants, by time.
    pub instants: Vec<InstantEvent>,
    /// [`Dialect::Gangway`]: what each named device's lane is (its name, and the [`Track`] it
    /// was written with), by id. Empty for a foreign trace (its rows carry the names).
    pub tracks: Vec<Track>,
    /// [`Dialect::Foreign`]: the rows, in display order; an event's `device` indexes this.
    /// Empty for a gangway trace.
    pub rows: Vec<ThreadRow>,
    /// Counter series, by process (in row order), then name.
    pub counters: Vec<CounterTrack>,
    /// How many trace events had each phase (`"X"`, `"M"`, ...; `"(none)"` for an event
    /// without one), by phase.
    pub phases: Vec<(String, u64)>,
    /// What was read but is not drawn as a slice, an instant, a flow arrow or a counter, with
    /// how many: async and object events, flow points inside no slice, `B`s that never ended
    /// and `E`s with no `B`. Never an error.
    pub not_drawn: Vec<(String, u64)>,
}

impl ChromeTrace {
    /// What a row of the timeline is called: `dev 2` for gangway's (lanes are added by the
    /// viewer), `MainThread (tid 7)` for a foreign row.
    pub fn row_label(&self, device: usize) -> String {
        match self.rows.get(device) {
            Some(row) => row.thread_label(),
            None => format!("dev {device}"),
        }
    }

    /// The total of [`ChromeTrace::phases`].
    pub fn event_count(&self) -> u64 {
        self.phases.iter().map(|(_, n)| n).sum()
    }
}
