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

use std::borrow::Cow;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::io::Read as _;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::imported::{
    BoundFlow, ChromeTrace, CounterTrack, Dialect, Id, InstantEvent, InstantScope, PRODUCER,
    ThreadRow,
};
use crate::trace::bubble::PipelineOp;
use crate::trace::event::{Clock, Event, EventKind, Flow, FlowRole, Lane};
use crate::trace::track::{Track, TrackKind};

/// The trace in a file's bytes: gzip is unpacked first (by its magic number, whatever the
/// file is called), and a top-level array the producer did not close (Chrome's JSON Array
/// Format allows it, and a trace cut short by a crash ends so) is closed. Then [`parse_slice`].
pub fn read(bytes: &[u8]) -> Result<ChromeTrace, String> {
    parse_slice(&text_of(bytes)?)
}

/// The JSON text of a trace file's bytes, as [`read`] takes it: gunzipped, and an unclosed
/// top-level array closed (a trailing comma dropped). Anything else is returned as it is.
pub fn text_of(bytes: &[u8]) -> Result<Cow<'_, [u8]>, String> {
    let text: Cow<'_, [u8]> = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(bytes)
            .read_to_end(&mut out)
            .map_err(|e| format!("not a readable gzip file: {e}"))?;
        Cow::Owned(out)
    } else {
        Cow::Borrowed(bytes)
    };
    let trimmed = text.trim_ascii();
    if trimmed.starts_with(b"[") && !trimmed.ends_with(b"]") {
        let body = trimmed.strip_suffix(b",").unwrap_or(trimmed);
        let mut closed = Vec::with_capacity(body.len() + 1);
        closed.extend_from_slice(body);
        closed.push(b']');
        return Ok(Cow::Owned(closed));
    }
    Ok(text)
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

/// A flow's id: a number, or a string (`"0x1f"` in hex, decimal, or any other text hashed).
fn flow_id(ev: &Fields<'_>) -> Option<u64> {
    match ev.id.as_ref().or(ev.bind_id.as_ref())? {
        Scalar::U64(n) => Some(*n),
        Scalar::I64(n) => Some(*n as u64),
        Scalar::Str(s) => Some(
            s.strip_prefix("0x")
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .or_else(|| s.parse().ok())
                .unwrap_or_else(|| fnv1a(s.as_bytes())),
        ),
        _ => None,
    }
}

/// FNV-1a: a stable 64-bit hash of a string id.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Binds each flow point, in file order, to the innermost slice of its thread that covers it
/// (the latest to start; of slices starting together, the shorter, as they nest; of equal
/// ones, the later in the file). A slice's first flow is also its [`Event::flow`]. `slices_of`
/// holds each thread's slices as indices into `events`, which is in file order.
///
/// One sweep in time per thread, O(n log n): scanning the thread's slices for every point took
/// 8 minutes (debug build) to open a 1M-event trace with 100k flow points.
///
/// Returns every binding, as (index into `events`, flow), in file order, and how many points
/// no slice covers.
fn bind_flows(
    events: &mut [Event],
    slices_of: &mut [Vec<usize>],
    flow_points: &[(ThreadIx, u64, Flow)],
) -> (Vec<(usize, Flow)>, usize) {
    let mut points_of: HashMap<ThreadIx, Vec<usize>> = HashMap::new();
    for (p, (thread, ..)) in flow_points.iter().enumerate() {
        points_of.entry(*thread).or_default().push(p);
    }
    let mut targets = vec![None; flow_points.len()];
    for (thread, mut points) in points_of {
        let Some(slices) = slices_of.get_mut(thread as usize) else {
            continue;
        };
        slices.sort_by_key(|&e| events[e].start_ns);
        points.sort_by_key(|&p| flow_points[p].1);
        // The slices started by the point's time, by (start, shorter, index in `events`): the
        // innermost on top. One that ended before a point ended before
        // every later point too, so it is dropped for good once it reaches the top.
        let mut open = BinaryHeap::new();
        let mut next = 0;
        for p in points {
            let ts = flow_points[p].1;
            while let Some(&e) = slices.get(next)
                && events[e].start_ns <= ts
            {
                let end = std::cmp::Reverse(events[e].clamped_end_ns());
                open.push((events[e].start_ns, end, e));
                next += 1;
            }
            while let Some(&(_, _, e)) = open.peek()
                && events[e].clamped_end_ns() < ts
            {
                open.pop();
            }
            targets[p] = open.peek().map(|&(_, _, e)| e);
        }
    }
    let mut unbound = 0;
    let mut bound = Vec::with_capacity(flow_points.len());
    for ((_, _, flow), target) in flow_points.iter().zip(targets) {
        match target {
            Some(e) => {
                events[e].flow.get_or_insert(*flow);
                bound.push((e, *flow));
            }
            None => unbound += 1,
        }
    }
    (bound, unbound)
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
    }
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

/// The fields of a trace event the import reads.
#[derive(Default)]
struct Fields<'a> {
    ph: Option<Scalar<'a>>,
    name: Option<Scalar<'a>>,
    cat: Option<Scalar<'a>>,
    pid: Option<Scalar<'a>>,
    tid: Option<Scalar<'a>>,
    ts: Option<Scalar<'a>>,
    dur: Option<Scalar<'a>>,
    id: Option<Scalar<'a>>,
    bind_id: Option<Scalar<'a>>,
    /// An instant's scope.
    s: Option<Scalar<'a>>,
    /// Empty unless `args` is an object.
    args: Args<'a>,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Key {
    Ph,
    Name,
    Cat,
    Pid,
    Tid,
    Ts,
    Dur,
    Id,
    #[serde(rename = "bind_id")]
    BindId,
    S,
    Args,
    #[serde(other)]
    Other,
}

/// A process's `track` arg, as far as it could be read: what is missing or malformed is left
/// out (the kind then defaults to a device).
#[derive(Debug, Clone, Default)]
struct TrackMeta {
    kind: Option<TrackKind>,
    stages: Vec<usize>,
    rank: Option<usize>,
}

/// The `args` the import reads: of slices, the name and sort index of metadata (and gangway's
/// `track` of a process), and every other number (a counter's series).
#[derive(Default)]
struct Args<'a> {
    program: Option<Scalar<'a>>,
    node: Option<Scalar<'a>>,
    microbatch: Option<Scalar<'a>>,
    clock: Option<Scalar<'a>>,
    name: Option<Scalar<'a>>,
    /// gangway's pipeline op of a slice (`F`, `B`, `W`).
    op: Option<Scalar<'a>>,
    /// gangway's [`Track`] of a process, beside its name.
    track: Option<TrackMeta>,
    /// The numbers under other keys, each key once (the last, as in a `Value`). Allocated only
    /// when there is one: gangway's slices have none.
    others: Vec<(Cow<'a, str>, f64)>,
}

impl Args<'_> {
    /// Every number in `args`, the known keys' included, by key.
    fn numbers(&self) -> impl Iterator<Item = (&str, f64)> {
        let known = [
            ("program", &self.program),
            ("node", &self.node),
            ("microbatch", &self.microbatch),
            ("clock", &self.clock),
            ("name", &self.name),
            ("op", &self.op),
        ];
        known
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.as_ref()?.as_f64()?)))
            .chain(self.others.iter().map(|(k, v)| (k.as_ref(), *v)))
    }

    /// The number under `key`.
    fn number(&self, key: &str) -> Option<f64> {
        self.numbers().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

#[derive(Deserialize)]
#[serde(field_identifier)]
enum TopKey {
    #[serde(rename = "traceEvents")]
    TraceEvents,
    #[serde(rename = "otherData")]
    OtherData,
    #[serde(other)]
    Other,
}

/// A field's JSON value: numbers and strings as they are (strings borrowed from the text where
/// they have no escapes), arrays and objects only noted.
#[derive(Debug, Clone, PartialEq)]
enum Scalar<'a> {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(Cow<'a, str>),
    Array,
    Object,
}

impl Scalar<'_> {
    /// As `Value::as_u64`: a non-negative integer.
    fn as_u64(&self) -> Option<u64> {
        match *self {
            Scalar::U64(n) => Some(n),
            Scalar::I64(n) => u64::try_from(n).ok(),
            _ => None,
        }
    }

    /// As `Value::as_f64`: any number.
    fn as_f64(&self) -> Option<f64> {
        match *self {
            Scalar::U64(n) => Some(n as f64),
            Scalar::I64(n) => Some(n as f64),
            Scalar::F64(x) => Some(x),
            _ => None,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// As JSON, for errors (containers elided).
impl fmt::Display for Scalar<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Null => f.write_str("null"),
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::U64(n) => write!(f, "{n}"),
            Scalar::I64(n) => write!(f, "{n}"),
            Scalar::F64(x) => write!(f, "{}", Value::from(*x)),
            Scalar::Str(s) => write!(f, "{}", Value::from(s.as_ref())),
            Scalar::Array => f.write_str("[…]"),
            Scalar::Object => f.write_str("{…}"),
        }
    }
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Read(AnyScalar).deserialize(d)
    }
}

/// How a part of the trace is read from whatever JSON value is there: objects and arrays as it
/// says (by default read past, as [`Scalar::Object`] / [`Scalar::Array`]), anything else as a
/// [`Scalar`]. So a value of an unexpected type is this reader's to judge, never a serde error.
trait Shape<'de>: Sized {
    type Out;

    fn scalar(self, value: Scalar<'de>) -> Self::Out;

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Out, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(self.scalar(Scalar::Object))
    }

    fn array<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Out, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(self.scalar(Scalar::Array))
    }

    fn read<D: Deserializer<'de>>(self, d: D) -> Result<Self::Out, D::Error> {
        Read(self).deserialize(d)
    }
}

/// The serde visitor (and seed) of a [`Shape`].
struct Read<S>(S);

impl<'de, S: Shape<'de>> DeserializeSeed<'de> for Read<S> {
    type Value = S::Out;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Out, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, S: Shape<'de>> Visitor<'de> for Read<S> {
    type Value = S::Out;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::Bool(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::I64(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::U64(v)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::F64(v)))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::Str(Cow::Borrowed(v))))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::Str(Cow::Owned(v.to_owned()))))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::Str(Cow::Owned(v))))
    }

    fn visit_unit<E: de::Error>(self) -> Result<S::Out, E> {
        Ok(self.0.scalar(Scalar::Null))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<S::Out, A::Error> {
        self.0.object(map)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<S::Out, A::Error> {
        self.0.array(seq)
    }
}

/// A field: any value.
struct AnyScalar;

impl<'de> Shape<'de> for AnyScalar {
    type Out = Scalar<'de>;

    fn scalar(self, value: Scalar<'de>) -> Scalar<'de> {
        value
    }
}

/// The top level: a bare `traceEvents` list, or an object with one (the last, as in a
/// `Value`). Whether one was found.
struct Top<'s>(&'s mut Import);

impl<'de> Shape<'de> for Top<'_> {
    type Out = bool;

    fn scalar(self, _: Scalar<'de>) -> bool {
        false
    }

    fn array<A: SeqAccess<'de>>(self, seq: A) -> Result<bool, A::Error> {
        List(self.0).array(seq)
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut found = false;
        while let Some(key) = map.next_key::<TopKey>()? {
            match key {
                TopKey::TraceEvents => {
                    // The last list counts, as in a `Value`; the marker may come before it.
                    let marker = self.0.marker;
                    *self.0 = Import {
                        marker,
                        ..Import::default()
                    };
                    found = map.next_value_seed(Read(List(&mut *self.0)))?;
                }
                TopKey::OtherData => {
                    self.0.marker = map.next_value_seed(Read(Marker))?;
                }
                TopKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }
}

/// A `track` arg: its kind, stages and rank, when it is an object.
struct TrackFields;

impl<'de> Shape<'de> for TrackFields {
    type Out = Option<TrackMeta>;

    fn scalar(self, _: Scalar<'de>) -> Option<TrackMeta> {
        None
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Out, A::Error> {
        let mut meta = TrackMeta::default();
        while let Some(key) = map.next_key_seed(Read(AnyScalar))? {
            match key.as_str() {
                Some("kind") => {
                    let kind: Scalar<'de> = map.next_value()?;
                    meta.kind = kind.as_str().and_then(TrackKind::of_word);
                }
                Some("stages") => meta.stages = map.next_value_seed(Read(Indices))?,
                Some("rank") => {
                    let rank: Scalar<'de> = map.next_value()?;
                    meta.rank = rank.as_u64().and_then(|r| usize::try_from(r).ok());
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(meta))
    }
}

/// A list of non-negative integers (anything else in it is left out).
struct Indices;

impl<'de> Shape<'de> for Indices {
    type Out = Vec<usize>;

    fn scalar(self, _: Scalar<'de>) -> Vec<usize> {
        Vec::new()
    }

    fn array<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<usize>, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Read(AnyScalar))? {
            if let Some(i) = v.as_u64().and_then(|i| usize::try_from(i).ok()) {
                out.push(i);
            }
        }
        Ok(out)
    }
}

/// The value of `otherData`: whether it names gangway as the producer.
struct Marker;

impl<'de> Shape<'de> for Marker {
    type Out = bool;

    fn scalar(self, _: Scalar<'de>) -> bool {
        false
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut marked = false;
        while let Some(key) = map.next_key_seed(Read(AnyScalar))? {
            let value: Scalar<'de> = map.next_value()?;
            if key.as_str() == Some("producer") {
                marked = value.as_str() == Some(PRODUCER);
            }
        }
        Ok(marked)
    }
}

/// The value of `traceEvents`: whether it is a list.
struct List<'s>(&'s mut Import);

impl<'de> Shape<'de> for List<'_> {
    type Out = bool;

    fn scalar(self, _: Scalar<'de>) -> bool {
        false
    }

    fn array<A: SeqAccess<'de>>(self, seq: A) -> Result<bool, A::Error> {
        self.0.read_list(seq)?;
        Ok(true)
    }
}

/// One element of `traceEvents`: its fields, or `None` if it is not an object.
struct EventFields;

impl<'de> Shape<'de> for EventFields {
    type Out = Option<Fields<'de>>;

    fn scalar(self, _: Scalar<'de>) -> Option<Fields<'de>> {
        None
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Out, A::Error> {
        let mut ev = Fields::default();
        while let Some(key) = map.next_key::<Key>()? {
            let field = match key {
                Key::Ph => &mut ev.ph,
                Key::Name => &mut ev.name,
                Key::Cat => &mut ev.cat,
                Key::Pid => &mut ev.pid,
                Key::Tid => &mut ev.tid,
                Key::Ts => &mut ev.ts,
                Key::Dur => &mut ev.dur,
                Key::Id => &mut ev.id,
                Key::BindId => &mut ev.bind_id,
                Key::S => &mut ev.s,
                Key::Args => {
                    ev.args = map.next_value_seed(Read(ArgFields))?;
                    continue;
                }
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *field = Some(map.next_value()?);
        }
        Ok(Some(ev))
    }
}

/// An event's `args`: empty unless an object.
struct ArgFields;

impl<'de> Shape<'de> for ArgFields {
    type Out = Args<'de>;

    fn scalar(self, _: Scalar<'de>) -> Args<'de> {
        Args::default()
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Args<'de>, A::Error> {
        let mut args = Args::default();
        while let Some(key) = map.next_key_seed(Read(AnyScalar))? {
            let Scalar::Str(key) = key else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            let field = match key.as_ref() {
                "program" => &mut args.program,
                "node" => &mut args.node,
                "microbatch" => &mut args.microbatch,
                "clock" => &mut args.clock,
                "name" => &mut args.name,
                "op" => &mut args.op,
                "track" => {
                    args.track = map.next_value_seed(Read(TrackFields))?;
                    continue;
                }
                _ => {
                    let value: Scalar<'de> = map.next_value()?;
                    args.others.retain(|(k, _)| *k != key);
                    if let Some(x) = value.as_f64() {
                        args.others.push((key, x));
                    }
                    continue;
                }
            };
            *field = Some(map.next_value()?);
        }
        Ok(args)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
