//! Chrome trace-event JSON back into [`Event`]s: the inverse of [`to_json`](super::to_json) for
//! gangway's traces, and a reader of what other tools write (PyTorch's profiler, JAX's and
//! TensorFlow's, Perfetto's JSON export, chrome://tracing), as [`ChromeTrace`] describes.
//!
//! Phases: `X` slices, and `B`/`E` pairs matched per thread, become events; `s`/`t`/`f` flow
//! points re-attach to the slice they bind to (`s` as the sending end, `t` and `f` as the
//! receiving one; a slice keeps its first); `i`/`I` instants are kept with their scope; `M`
//! metadata names processes and threads and orders them; `C` counters become counter tracks.
//! Every other phase (async and object events, samples, ...) is counted in
//! [`ChromeTrace::not_drawn`], never an error. `pid` and `tid` may be any JSON value (see
//! [`Id`]). The dialect is gangway's only when the top level's `otherData` carries gangway's
//! marker ([`PRODUCER`](super::PRODUCER)), never guessed from ids or names.
//!
//! The JSON is read straight into what the import keeps, one trace event at a time: a
//! `serde_json::Value` of a million-event trace is most of the time and memory an open would
//! take. Fields are read leniently (any JSON type; what a field must be is checked here, with
//! errors naming the event), unknown fields are read past, and a repeated key counts once, the
//! last time, as in a `Value`. [`parse`] runs the same reader over a `Value`. [`read`] takes a
//! file's bytes: gzipped or not, and an array whose closing `]` the producer never wrote (the
//! format allows it).
//!
//! Three parts: the event semantics here (threads, slices, nesting, counters, instants,
//! metadata, the dialect), the binding of flow points to slices (`flows.rs`), and the lenient
//! reader (`reader.rs`); `text.rs` turns a file's bytes into JSON text, and `sniff.rs` tells what a
//! document is (a trace, a bench report, ...) before it is read whole.

mod flows;
mod reader;
mod sniff;
mod text;

pub use sniff::{Document, sniff, sniff_value};
pub use text::text_of;

use std::borrow::Cow;
use std::collections::HashMap;

use serde::de::{IgnoredAny, SeqAccess};
use serde_json::Value;

use flows::{bind_flows, flow_id};
use reader::{Args, EventFields, Fields, Read, Scalar, Shape, Top, TrackMeta};

use super::imported::{
    BoundFlow, ChromeTrace, CounterTrack, Dialect, Id, InstantEvent, InstantScope, ThreadRow,
};
use crate::trace::PipelineOp;
use crate::trace::event::{
    Clock, Direction, Event, EventKind, Flow, FlowRole, Lane, Moved, TransferKind,
};
use crate::trace::track::{Track, TrackKind};

/// The trace in a file's bytes: gzip is unpacked first (by its magic number, whatever the
/// file is called), and a top-level array the producer did not close (Chrome's JSON Array
/// Format allows it, and a trace cut short by a crash ends so) is closed. Then [`parse_slice`].
pub fn read(bytes: &[u8]) -> Result<ChromeTrace, String> {
    parse_slice(&text_of(bytes)?)
}

/// A Chrome trace's JSON text as a [`ChromeTrace`].
///
/// The top level may be `{"traceEvents": [...]}` or a bare array. In a gangway trace, unknown
/// `tid`s take the lane their `cat` implies. An `X` or `B`/`E` without a valid `ts` (or an `X`
/// with a `dur` that is not a number >= 0) is an error naming `traceEvents[i]`; text that is not
/// JSON is an error saying where.
pub fn parse_slice(json: &[u8]) -> Result<ChromeTrace, String> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let mut import = Import::default();
    let found = Top(&mut import).read(&mut de).and_then(|found| {
        de.end()?;
        Ok(found)
    });
    import.finish(found)
}

/// [`parse_slice`] of a trace already parsed into a `Value`.
pub fn parse(trace: &Value) -> Result<ChromeTrace, String> {
    let mut import = Import::default();
    let found = Top(&mut import).read(trace);
    import.finish(found)
}

/// Index of a thread in [`Threads`].
type ThreadIx = u32;

/// Every `(pid, tid)` met, numbered in order of appearance.
#[derive(Default)]
struct Threads {
    keys: Vec<(Id, Id)>,
    index: HashMap<(Id, Id), ThreadIx>,
    /// The last thread looked up: consecutive events are mostly on one thread, and comparing
    /// ids with the text's values saves building (and allocating) a key.
    last: Option<ThreadIx>,
}

impl Threads {
    fn of(&mut self, pid: Option<&Scalar<'_>>, tid: Option<&Scalar<'_>>) -> ThreadIx {
        if let Some(last) = self.last
            && let Some((p, t)) = self.keys.get(last as usize)
            && is_id(p, pid)
            && is_id(t, tid)
        {
            return last;
        }
        let key = (id_of(pid), id_of(tid));
        let next = ThreadIx::try_from(self.keys.len()).unwrap_or(ThreadIx::MAX);
        let ix = *self.index.entry(key.clone()).or_insert_with(|| {
            self.keys.push(key);
            next
        });
        self.last = Some(ix);
        ix
    }
}

/// A missing `pid` or `tid` is 0, as in Perfetto.
fn id_of(v: Option<&Scalar<'_>>) -> Id {
    match v {
        None => Id::Int(0),
        Some(Scalar::U64(n)) => Id::Int(i128::from(*n)),
        Some(Scalar::I64(n)) => Id::Int(i128::from(*n)),
        // Integral floats (ids past 2^64 arrive so) are integers, if an i128 holds them.
        Some(Scalar::F64(x)) if x.fract() == 0.0 && x.abs() < 1e38 => Id::Int(*x as i128),
        Some(Scalar::Str(s)) => Id::Text(s.to_string()),
        Some(other) => Id::Text(other.to_string()),
    }
}

/// Whether `v` reads as `id` (without building one for the common cases).
fn is_id(id: &Id, v: Option<&Scalar<'_>>) -> bool {
    match (id, v) {
        (Id::Int(n), Some(Scalar::U64(m))) => *n == i128::from(*m),
        (Id::Int(n), Some(Scalar::I64(m))) => *n == i128::from(*m),
        (Id::Text(t), Some(Scalar::Str(s))) => t == s,
        (id, v) => *id == id_of(v),
    }
}

/// A counter track's `(ns, value)` samples.
type Samples = Vec<(u64, f64)>;

/// A trace's dialect, its rows (foreign) and its device names (gangway's).
type Placement = (Dialect, Vec<ThreadRow>, Vec<Track>);

/// A `B` waiting for its `E`: the event with its start, the end still to come, and where it
/// began in the file (for nesting slices that start together).
type Open = (Event, u64);

/// An instant as read: its thread (a [`ThreadIx`]), time, name and scope.
type RawInstant = (ThreadIx, u64, String, InstantScope);

/// A phase's count, in a short list (a trace has a handful of phases).
fn bump(counts: &mut Vec<(String, u64)>, what: &str) {
    match counts.iter_mut().find(|(k, _)| k == what) {
        Some((_, n)) => *n += 1,
        None => counts.push((what.to_string(), 1)),
    }
}

/// What a phase that is not drawn is, for [`ChromeTrace::not_drawn`].
fn not_drawn_name(ph: &str) -> Cow<'static, str> {
    Cow::Borrowed(match ph {
        "i" | "I" => "instant (i/I) without a time",
        "b" | "e" | "n" => "async (b/e/n)",
        "S" | "T" | "p" | "F" => "legacy async (S/T/p/F)",
        "N" | "O" | "D" => "object (N/O/D)",
        "P" => "sample (P)",
        "R" => "mark (R)",
        "c" => "clock sync (c)",
        "(" | ")" => "context ( )",
        "" => "no phase",
        "V" | "v" => "memory dump (V/v)",
        _ => return Cow::Owned(format!("phase {ph:?}")),
    })
}

/// The import so far, of the `traceEvents` list being read.
#[derive(Default)]
struct Import {
    /// Slices; `device` holds the [`ThreadIx`] until [`Import::finish`].
    events: Vec<Event>,
    /// Where each slice (parallel to `events`) began in the file: the index of its `X`, or of
    /// its `B`.
    begun: Vec<u64>,
    instants: Vec<RawInstant>,
    /// Per thread, whether it has a thread-scoped instant (it then gets a row).
    has_instants: Vec<bool>,
    /// The top level's `otherData` named gangway as the producer.
    marker: bool,
    threads: Threads,
    /// Per thread, indices into `events`, to bind flow points.
    slices_of: Vec<Vec<usize>>,
    /// Per thread, the `B`s not yet ended, innermost last.
    open: HashMap<ThreadIx, Vec<Open>>,
    flow_points: Vec<(ThreadIx, u64, Flow)>,
    process_names: HashMap<Id, String>,
    /// The [`Track`] args of gangway's `process_name` metadata.
    process_tracks: HashMap<Id, TrackMeta>,
    thread_names: HashMap<(Id, Id), String>,
    process_sort: HashMap<Id, f64>,
    thread_sort: HashMap<(Id, Id), f64>,
    /// Counter tracks by (pid, name), in order of appearance.
    counters: Vec<(Id, String, Samples)>,
    counter_index: HashMap<(Id, String), usize>,
    phases: Vec<(String, u64)>,
    not_drawn: Vec<(String, u64)>,
    /// The first bad event's error: the rest of the list is then only read past.
    failed: Option<String>,
}

impl Import {
    /// Reads a `traceEvents` list into `self`.
    fn read_list<'de, A: SeqAccess<'de>>(&mut self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while self.failed.is_none() {
            let Some(event) = seq.next_element_seed(Read(EventFields))? else {
                return Ok(());
            };
            if let Err(e) = self.add(i, event) {
                self.failed = Some(e);
            }
            i += 1;
        }
        // Read to the end all the same: text that is not JSON is that error, as with a `Value`.
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }

    /// Adds `traceEvents[i]` (`None`: not an object).
    fn add(&mut self, i: usize, event: Option<Fields<'_>>) -> Result<(), String> {
        let at = |what: &str| format!("traceEvents[{i}]: {what}");
        let ev = event.ok_or_else(|| at("not an object"))?;
        let ph = ev.ph.as_ref().and_then(Scalar::as_str).unwrap_or("");
        bump(&mut self.phases, if ph.is_empty() { "(none)" } else { ph });
        match ph {
            "X" => {
                let start_ns = micros_to_ns(&ev.ts, "ts").map_err(|e| at(&e))?;
                let dur_ns = micros_to_ns(&ev.dur, "dur").map_err(|e| at(&e))?;
                let thread = self.thread(&ev);
                let event = slice(&ev, thread, start_ns, start_ns.saturating_add(dur_ns));
                self.push_slice(thread, event, i as u64);
            }
            "B" => {
                let start_ns = micros_to_ns(&ev.ts, "ts").map_err(|e| at(&e))?;
                let thread = self.thread(&ev);
                let open = slice(&ev, thread, start_ns, start_ns);
                self.open.entry(thread).or_default().push((open, i as u64));
            }
            "E" => {
                let end_ns = micros_to_ns(&ev.ts, "ts").map_err(|e| at(&e))?;
                let thread = self.thread(&ev);
                match self.open.get_mut(&thread).and_then(Vec::pop) {
                    Some((mut event, begun)) => {
                        event.end_ns = end_ns.max(event.start_ns);
                        self.push_slice(thread, event, begun);
                    }
                    None => bump(&mut self.not_drawn, "E without a B"),
                }
            }
            "i" | "I" => {
                let Ok(ns) = micros_to_ns(&ev.ts, "ts") else {
                    bump(&mut self.not_drawn, &not_drawn_name(ph));
                    return Ok(());
                };
                let scope = match ev.s.as_ref().and_then(Scalar::as_str) {
                    Some("g") => InstantScope::Global,
                    Some("p") => InstantScope::Process,
                    _ => InstantScope::Thread,
                };
                let thread = self.thread(&ev);
                if scope == InstantScope::Thread
                    && let Some(has) = self.has_instants.get_mut(thread as usize)
                {
                    *has = true;
                }
                let name = match &ev.name {
                    Some(Scalar::Str(name)) => name.to_string(),
                    _ => String::new(),
                };
                self.instants.push((thread, ns, name, scope));
            }
            "s" | "t" | "f" => {
                let (Some(id), Ok(ts)) = (flow_id(&ev), micros_to_ns(&ev.ts, "ts")) else {
                    // A flow point we cannot place only loses its arrow.
                    bump(&mut self.not_drawn, "flow point without an id or a time");
                    return Ok(());
                };
                let thread = self.thread(&ev);
                let role = if ph == "s" {
                    FlowRole::Out
                } else {
                    FlowRole::In
                };
                self.flow_points.push((thread, ts, Flow { id, role }));
            }
            "M" => self.metadata(&ev),
            "C" => self.counter(&ev),
            other => bump(&mut self.not_drawn, &not_drawn_name(other)),
        }
        Ok(())
    }

    /// The thread of `ev`.
    fn thread(&mut self, ev: &Fields<'_>) -> ThreadIx {
        let ix = self.threads.of(ev.pid.as_ref(), ev.tid.as_ref());
        let n = ix as usize + 1;
        if self.slices_of.len() < n {
            self.slices_of.resize_with(n, Vec::new);
            self.has_instants.resize(n, false);
        }
        ix
    }

    /// Adds a slice that began at `begun` in the file.
    fn push_slice(&mut self, thread: ThreadIx, event: Event, begun: u64) {
        if let Some(slices) = self.slices_of.get_mut(thread as usize) {
            slices.push(self.events.len());
        }
        self.events.push(event);
        self.begun.push(begun);
    }

    /// `process_name`, `thread_name` and the sort indices; other metadata is only counted.
    fn metadata(&mut self, ev: &Fields<'_>) {
        let what = ev.name.as_ref().and_then(Scalar::as_str);
        let pid = || id_of(ev.pid.as_ref());
        let thread = || (id_of(ev.pid.as_ref()), id_of(ev.tid.as_ref()));
        let name = ev.args.name.as_ref().and_then(Scalar::as_str);
        let sort = ev.args.number("sort_index");
        match (what, name, sort) {
            (Some("process_name"), Some(name), _) => {
                self.process_names.insert(pid(), name.to_string());
                if let Some(track) = &ev.args.track {
                    self.process_tracks.insert(pid(), track.clone());
                }
            }
            (Some("thread_name"), Some(name), _) => {
                self.thread_names.insert(thread(), name.to_string());
            }
            (Some("process_sort_index"), _, Some(k)) => {
                self.process_sort.insert(pid(), k);
            }
            (Some("thread_sort_index"), _, Some(k)) => {
                self.thread_sort.insert(thread(), k);
            }
            _ => {}
        }
    }

    /// One sample of every number in `args`, each its own series (track) of the process.
    fn counter(&mut self, ev: &Fields<'_>) {
        let Ok(ts) = micros_to_ns(&ev.ts, "ts") else {
            bump(&mut self.not_drawn, "counter (C) without a time");
            return;
        };
        let pid = id_of(ev.pid.as_ref());
        let base = match &ev.name {
            Some(Scalar::Str(s)) => s.to_string(),
            _ => String::new(),
        };
        // Counters with an id are separate series (Chrome names them "name id").
        let base = match &ev.id {
            Some(Scalar::Str(id)) => format!("{base} {id}"),
            Some(id) => format!("{base} {id}"),
            None => base,
        };
        for (key, value) in ev.args.numbers() {
            let name = if key == "value" || key.is_empty() {
                base.clone()
            } else if base.is_empty() {
                key.to_string()
            } else {
                format!("{base} {key}")
            };
            let next = self.counters.len();
            let at = *self
                .counter_index
                .entry((pid.clone(), name.clone()))
                .or_insert(next);
            if at == next {
                self.counters.push((pid.clone(), name, Vec::new()));
            }
            if let Some((_, _, points)) = self.counters.get_mut(at) {
                points.push((ts, value));
            }
        }
    }

    /// The result, from what reading found: a JSON error, no `traceEvents` list, the first bad
    /// event, or the trace with its flows bound, rows named and everything sorted.
    fn finish(mut self, found: Result<bool, serde_json::Error>) -> Result<ChromeTrace, String> {
        let found = found.map_err(|e| format!("not JSON: {e}"))?;
        if !found {
            return Err(
                "top level must be an object with a \"traceEvents\" array, or an array".into(),
            );
        }
        if let Some(e) = self.failed {
            return Err(e);
        }
        let unended: usize = self.open.values().map(Vec::len).sum();
        for _ in 0..unended {
            bump(&mut self.not_drawn, "B that never ended");
        }
        let (bound, unbound) = bind_flows(&mut self.events, &mut self.slices_of, &self.flow_points);
        for _ in 0..unbound {
            bump(&mut self.not_drawn, "flow point inside no slice");
        }
        let keys = std::mem::take(&mut self.threads.keys);
        let (dialect, rows, tracks) = if self.marker {
            self.rows_by_device(&keys)
        } else {
            self.rows_by_thread(&keys)
        };
        let instants = self.place_instants(dialect, &keys, &rows);
        // Perfetto's nesting of slices that start together: the longer is the parent, and of
        // equal ones the one begun first in the file.
        let mut order: Vec<usize> = (0..self.events.len()).collect();
        let (events, begun) = (&self.events, &self.begun);
        order.sort_by_key(|&i| {
            let e = &events[i];
            (
                e.start_ns,
                e.device,
                e.lane,
                std::cmp::Reverse(e.clamped_end_ns()),
                begun.get(i).copied().unwrap_or(0),
            )
        });
        let mut slots: Vec<Option<Event>> = self.events.drain(..).map(Some).collect();
        let events: Vec<Event> = order.iter().filter_map(|&i| slots[i].take()).collect();
        let mut moved_to = vec![0; order.len()];
        for (new, &old) in order.iter().enumerate() {
            moved_to[old] = new;
        }
        let flows = bound
            .into_iter()
            .map(|(old, flow)| BoundFlow {
                event: moved_to[old],
                flow,
            })
            .collect();
        let sort_of = |pid: &Id| self.process_sort.get(pid).copied().unwrap_or(0.0);
        let mut counters: Vec<CounterTrack> = self
            .counters
            .into_iter()
            .map(|(pid, name, mut points)| {
                // By time, then value: two series of one event may share a track's name
                // (`value` and `""`), and keys come in file order or sorted (from a `Value`).
                points.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
                CounterTrack {
                    process_name: self.process_names.get(&pid).cloned(),
                    pid,
                    name,
                    points,
                }
            })
            .collect();
        counters.sort_by(|a, b| {
            sort_of(&a.pid)
                .total_cmp(&sort_of(&b.pid))
                .then_with(|| a.pid.cmp(&b.pid))
                .then_with(|| a.name.cmp(&b.name))
        });
        let mut phases = self.phases;
        phases.sort();
        let mut not_drawn = self.not_drawn;
        not_drawn.sort();
        Ok(ChromeTrace {
            dialect,
            events,
            flows,
            instants,
            tracks,
            rows,
            counters,
            phases,
            not_drawn,
        })
    }

    /// A gangway trace: each slice's device is its `pid`, checked integral when it was read.
    fn rows_by_device(&mut self, keys: &[(Id, Id)]) -> Placement {
        let device_of = |thread: usize| match keys.get(thread) {
            Some((Id::Int(pid), _)) => usize::try_from(*pid).unwrap_or(0),
            _ => 0,
        };
        for e in &mut self.events {
            e.device = device_of(e.device);
        }
        let mut tracks: Vec<Track> = self
            .process_names
            .iter()
            .filter_map(|(pid, name)| {
                let Id::Int(p) = pid else { return None };
                let id = usize::try_from(*p).ok()?;
                let meta = self.process_tracks.get(pid);
                Some(Track {
                    id,
                    kind: meta.and_then(|m| m.kind).unwrap_or(TrackKind::Device),
                    stages: meta.map(|m| m.stages.clone()).unwrap_or_default(),
                    rank: meta.and_then(|m| m.rank),
                    label: name.clone(),
                })
            })
            .collect();
        tracks.sort_by_key(|t| t.id);
        (Dialect::Gangway, Vec::new(), tracks)
    }

    /// Each instant on its row (see [`InstantEvent::device`]), by time.
    fn place_instants(
        &mut self,
        dialect: Dialect,
        keys: &[(Id, Id)],
        rows: &[ThreadRow],
    ) -> Vec<InstantEvent> {
        let mut out: Vec<InstantEvent> = std::mem::take(&mut self.instants)
            .into_iter()
            .map(|(thread, ns, name, scope)| {
                let key = keys.get(thread as usize);
                let (device, lane) = match dialect {
                    Dialect::Gangway => {
                        let device = match key {
                            Some((Id::Int(pid), _)) => usize::try_from(*pid).ok(),
                            _ => None,
                        };
                        let lane = match key {
                            Some((_, Id::Int(t))) => lane_of_tid(u64::try_from(*t).ok()),
                            _ => None,
                        };
                        (device, lane.unwrap_or(Lane::Compute))
                    }
                    Dialect::Foreign => {
                        let row = match scope {
                            InstantScope::Global => None,
                            InstantScope::Thread => key.and_then(|(pid, tid)| {
                                rows.iter().position(|r| r.pid == *pid && r.tid == *tid)
                            }),
                            InstantScope::Process => {
                                key.and_then(|(pid, _)| rows.iter().position(|r| r.pid == *pid))
                            }
                        };
                        (row, Lane::Compute)
                    }
                };
                let device = if scope == InstantScope::Global {
                    None
                } else {
                    device
                };
                InstantEvent {
                    device,
                    lane,
                    ns,
                    name,
                    scope,
                }
            })
            .collect();
        out.sort_by_key(|i| i.ns);
        out
    }

    /// A foreign trace: one row per thread with slices or thread instants, ordered as Perfetto
    /// orders them (by process sort index, pid, thread sort index, tid); each slice's device is
    /// its row.
    fn rows_by_thread(&mut self, keys: &[(Id, Id)]) -> Placement {
        let mut threads: Vec<usize> = (0..keys.len())
            .filter(|&t| {
                self.slices_of.get(t).is_some_and(|s| !s.is_empty())
                    || self.has_instants.get(t).copied().unwrap_or(false)
            })
            .collect();
        let process_sort = |pid: &Id| self.process_sort.get(pid).copied().unwrap_or(0.0);
        let thread_sort = |key: &(Id, Id)| self.thread_sort.get(key).copied().unwrap_or(0.0);
        threads.sort_by(|&a, &b| {
            let (ka, kb) = (&keys[a], &keys[b]);
            process_sort(&ka.0)
                .total_cmp(&process_sort(&kb.0))
                .then_with(|| ka.0.cmp(&kb.0))
                .then_with(|| thread_sort(ka).total_cmp(&thread_sort(kb)))
                .then_with(|| ka.1.cmp(&kb.1))
        });
        let mut row_of = vec![0usize; keys.len()];
        for (row, &t) in threads.iter().enumerate() {
            row_of[t] = row;
        }
        for e in &mut self.events {
            e.device = row_of.get(e.device).copied().unwrap_or(0);
            e.lane = Lane::Compute;
            e.kind = EventKind::Kernel;
        }
        let rows = threads
            .iter()
            .map(|&t| {
                let (pid, tid) = keys[t].clone();
                ThreadRow {
                    process_name: self.process_names.get(&pid).cloned(),
                    thread_name: self.thread_names.get(&(pid.clone(), tid.clone())).cloned(),
                    pid,
                    tid,
                }
            })
            .collect();
        (Dialect::Foreign, rows, Vec::new())
    }
}

/// One slice as an event on `thread` (its device until [`Import::finish`]), with the lane and
/// kind gangway's `tid` and `cat` give it: unknown `cat`s take the kind their lane implies
/// (host → host encode, compute → kernel, transfer → transfer), unknown `tid`s the lane their
/// kind implies.
fn slice(ev: &Fields<'_>, thread: ThreadIx, start_ns: u64, end_ns: u64) -> Event {
    let cat = ev.cat.as_ref().and_then(Scalar::as_str).unwrap_or("");
    let kind = EventKind::ALL.into_iter().find(|k| k.name() == cat);
    let lane = lane_of_tid(uint(&ev.tid));
    let (lane, kind) = match (lane, kind) {
        (Some(lane), Some(kind)) => (lane, kind),
        (Some(lane), None) => (lane, kind_of_lane(lane)),
        (None, Some(kind)) => (lane_of_kind(kind), kind),
        (None, None) => (Lane::Compute, EventKind::Kernel),
    };
    let args = &ev.args;
    let clock = args
        .clock
        .as_ref()
        .and_then(Scalar::as_str)
        .and_then(|c| {
            [Clock::Gpu, Clock::Host, Clock::Simulated]
                .into_iter()
                .find(|k| k.name() == c)
        })
        .unwrap_or(Clock::Host);
    Event {
        device: thread as usize,
        lane,
        kind,
        name: match &ev.name {
            Some(Scalar::Str(name)) => name.to_string(),
            _ => String::new(),
        },
        program: uint(&args.program),
        node: uint(&args.node).and_then(|n| u32::try_from(n).ok()),
        microbatch: uint(&args.microbatch).and_then(|n| u32::try_from(n).ok()),
        start_ns,
        end_ns,
        clock,
        flow: None,
        op: args
            .op
            .as_ref()
            .and_then(Scalar::as_str)
            .and_then(PipelineOp::of_letter),
        moved: moved(args),
    }
}

/// A gangway transfer's `transfer`, `direction` and `bytes` args, when all three are there.
fn moved(args: &Args<'_>) -> Option<Moved> {
    Some(Moved {
        kind: TransferKind::of_name(args.transfer.as_ref()?.as_str()?)?,
        direction: Direction::of_name(args.direction.as_ref()?.as_str()?)?,
        bytes: uint(&args.bytes)?,
    })
}

/// The lane gangway's `tid` numbers ([`thread_id`](super::thread_id)): 1, 2, 3, and their
/// overflow threads 11, 12, ...
fn lane_of_tid(tid: Option<u64>) -> Option<Lane> {
    match tid.map(|t| t % 10) {
        Some(1) => Some(Lane::Host),
        Some(2) => Some(Lane::Compute),
        Some(3) => Some(Lane::Transfer),
        _ => None,
    }
}

fn kind_of_lane(lane: Lane) -> EventKind {
    match lane {
        Lane::Host => EventKind::HostEncode,
        Lane::Compute => EventKind::Kernel,
        Lane::Transfer => EventKind::Transfer,
    }
}

fn lane_of_kind(kind: EventKind) -> Lane {
    match kind {
        EventKind::Kernel => Lane::Compute,
        EventKind::Transfer => Lane::Transfer,
        EventKind::HostEncode | EventKind::Wait => Lane::Host,
    }
}

fn uint(field: &Option<Scalar<'_>>) -> Option<u64> {
    field.as_ref().and_then(Scalar::as_u64)
}

/// A field in the format's microseconds as whole nanoseconds (`dur` may be absent: 0).
fn micros_to_ns(field: &Option<Scalar<'_>>, key: &str) -> Result<u64, String> {
    let Some(v) = field else {
        return if key == "dur" {
            Ok(0)
        } else {
            Err(format!("missing \"{key}\""))
        };
    };
    let us = v
        .as_f64()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| format!("\"{key}\" must be a finite number >= 0, got {v}"))?;
    // Float-to-int casts saturate; traces are far below 2^64 ns.
    Ok((us * 1_000.0).round() as u64)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
