//! A Chrome trace as [`parse_slice`](super::parse_slice) reads it: its slices as [`Event`]s,
//! what names its rows, its counter tracks, and a count of every phase it held.
//!
//! Two dialects. gangway's own traces (every slice's `cat` an [`EventKind`] name or none, an
//! integer `pid`, lanes as [`thread_id`](super::thread_id) numbers them, thread names that are
//! lane names) keep their meaning: `pid` is the device, `tid` the lane. Any other producer's
//! trace (PyTorch's profiler, JAX's, Perfetto, chrome://tracing) is read the way Perfetto
//! reads it: one row per thread that has slices, grouped by process, named from its
//! `process_name` / `thread_name` metadata and ordered by the sort-index metadata, then by id.
//! Each [`Event::device`] of such a trace is then the index of its row in
//! [`ChromeTrace::rows`], its lane [`Lane::Compute`].
//!
//! [`EventKind`]: crate::trace::EventKind
//! [`Lane::Compute`]: crate::trace::Lane::Compute

use std::fmt;

use crate::trace::event::Event;

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
    /// name that already holds the id (PyTorch's `thread 4711 (python)`) as it is.
    pub fn thread_label(&self) -> String {
        let tid = self.tid.to_string();
        match &self.thread_name {
            Some(name) if name.contains(&tid) => name.clone(),
            Some(name) => format!("{name} (tid {tid})"),
            None => format!("thread {tid}"),
        }
    }
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
    /// Slices (`X`, and `B`/`E` pairs), sorted by start time, then device and lane.
    pub events: Vec<Event>,
    /// [`Dialect::Gangway`]: each device's `process_name`. Empty for a foreign trace (its rows
    /// carry the names).
    pub device_names: Vec<(usize, String)>,
    /// [`Dialect::Foreign`]: the rows, in display order; an event's `device` indexes this.
    /// Empty for a gangway trace.
    pub rows: Vec<ThreadRow>,
    /// Counter series, by process (in row order), then name.
    pub counters: Vec<CounterTrack>,
    /// How many trace events had each phase (`"X"`, `"M"`, ...; `"(none)"` for an event
    /// without one), by phase.
    pub phases: Vec<(String, u64)>,
    /// What was read but is not drawn as a slice or a counter, with how many: instants, flow
    /// points (bound to their slices, not drawn as arrows), async and object events, `B`s that
    /// never ended and `E`s with no `B`. Never an error.
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
