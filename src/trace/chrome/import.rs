//! Chrome trace-event JSON back into [`Event`]s: the inverse of [`to_json`](super::to_json), so a
//! saved trace can be reopened (by the viewer, or a test comparing runs).
//!
//! Reads what gangway writes and is lenient with other producers: `X` slices become events
//! (`pid` = device, `tid` = lane as in [`thread_id`](super::thread_id), overflow threads
//! included; `cat` = [`EventKind::name`]; `args` program / node / microbatch / clock), `s`/`f`
//! flow points re-attach to the slice they bind to, `process_name` metadata names devices, and
//! every other phase (counters, instants, ...) is skipped.
//!
//! The JSON is read straight into what the import keeps, one trace event at a time: a
//! `serde_json::Value` of a million-event trace is most of the time and memory an open would
//! take. Fields are read leniently (any JSON type; what a field must be is checked here, with
//! errors naming the event), unknown fields are read past, and a repeated key counts once, the
//! last time, as in a `Value`. [`parse`] runs the same reader over a `Value`.

use std::borrow::Cow;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::trace::event::{Clock, Event, EventKind, Flow, FlowRole, Lane};

/// Events and device names (`(pid, process_name)`) of a Chrome trace's JSON text.
///
/// The top level may be `{"traceEvents": [...]}` or a bare array. Unknown `cat`s take the kind
/// their lane implies (host → host encode, compute → kernel, transfer → transfer); unknown
/// `tid`s take the lane their kind implies. A slice without a valid `pid`, `ts` or `dur`, or
/// with a negative time, is an error naming `traceEvents[i]`; text that is not JSON is an error
/// saying where. Events come back sorted by start time, then device and lane.
#[allow(clippy::type_complexity)] // the pair `to_json` takes, returned as it is
pub fn parse_slice(json: &[u8]) -> Result<(Vec<Event>, Vec<(usize, String)>), String> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let mut import = Import::default();
    let found = Top(&mut import).read(&mut de).and_then(|found| {
        de.end()?;
        Ok(found)
    });
    import.finish(found)
}

/// [`parse_slice`] of a trace already parsed into a `Value`.
#[allow(clippy::type_complexity)] // the pair `to_json` takes, returned as it is
pub fn parse(trace: &Value) -> Result<(Vec<Event>, Vec<(usize, String)>), String> {
    let mut import = Import::default();
    let found = Top(&mut import).read(trace);
    import.finish(found)
}

/// What [`parse`] returns, inside this module.
type Imported = (Vec<Event>, Vec<(usize, String)>);

/// A Chrome thread: `(pid, tid)`.
type Thread = (u64, u64);

/// The import so far, of the `traceEvents` list being read.
#[derive(Default)]
struct Import {
    events: Vec<Event>,
    /// Per thread, indices into `events`, to bind flow points.
    threads: BTreeMap<Thread, Vec<usize>>,
    names: BTreeMap<usize, String>,
    flow_points: Vec<(Thread, u64, Flow)>,
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
        match ev.ph.as_ref().and_then(Scalar::as_str) {
            Some("X") => {
                let pid = uint(&ev.pid).ok_or_else(|| at("needs a non-negative integer pid"))?;
                let tid = uint(&ev.tid).unwrap_or(0);
                let start_ns = micros_to_ns(&ev.ts, "ts").map_err(|e| at(&e))?;
                let dur_ns = micros_to_ns(&ev.dur, "dur").map_err(|e| at(&e))?;
                let device = usize::try_from(pid).map_err(|_| at("pid too large"))?;
                let event = slice(ev, device, tid, start_ns, dur_ns);
                self.threads
                    .entry((pid, tid))
                    .or_default()
                    .push(self.events.len());
                self.events.push(event);
            }
            Some(ph @ ("s" | "f")) => {
                let (Some(pid), Some(tid), Some(id), Ok(ts)) = (
                    uint(&ev.pid),
                    uint(&ev.tid),
                    uint(&ev.id),
                    micros_to_ns(&ev.ts, "ts"),
                ) else {
                    // A flow point we cannot place only loses its arrow.
                    return Ok(());
                };
                let role = if ph == "s" {
                    FlowRole::Out
                } else {
                    FlowRole::In
                };
                self.flow_points.push(((pid, tid), ts, Flow { id, role }));
            }
            Some("M") if ev.name.as_ref().and_then(Scalar::as_str) == Some("process_name") => {
                let pid = uint(&ev.pid).and_then(|p| usize::try_from(p).ok());
                if let (Some(pid), Some(name)) =
                    (pid, ev.args.name.as_ref().and_then(Scalar::as_str))
                {
                    self.names.insert(pid, name.to_string());
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The result, from what reading found: a JSON error, no `traceEvents` list, the first bad
    /// event, or the events with their flows bound, sorted.
    fn finish(mut self, found: Result<bool, serde_json::Error>) -> Result<Imported, String> {
        let found = found.map_err(|e| format!("not JSON: {e}"))?;
        if !found {
            return Err(
                "top level must be an object with a \"traceEvents\" array, or an array".into(),
            );
        }
        if let Some(e) = self.failed {
            return Err(e);
        }
        bind_flows(&mut self.events, &mut self.threads, &self.flow_points);
        let mut events = self.events;
        events.sort_by(|a, b| {
            (a.start_ns, a.device, a.lane, a.end_ns).cmp(&(b.start_ns, b.device, b.lane, b.end_ns))
        });
        Ok((events, self.names.into_iter().collect()))
    }
}

/// Binds each flow point, in file order, to the latest slice of its thread that starts at or
/// before it and still covers it (of slices starting together, the later in the file), if that
/// slice has no flow yet. `threads` holds each thread's slices as indices into `events`, which
/// is in file order.
///
/// One sweep in time per thread, O(n log n): scanning the thread's slices for every point took
/// 8 minutes (debug build) to open a 1M-event trace with 100k flow points.
fn bind_flows(
    events: &mut [Event],
    threads: &mut BTreeMap<Thread, Vec<usize>>,
    flow_points: &[(Thread, u64, Flow)],
) {
    let mut points_of: BTreeMap<Thread, Vec<usize>> = BTreeMap::new();
    for (p, (thread, ..)) in flow_points.iter().enumerate() {
        points_of.entry(*thread).or_default().push(p);
    }
    let mut targets = vec![None; flow_points.len()];
    for (thread, mut points) in points_of {
        let Some(slices) = threads.get_mut(&thread) else {
            continue;
        };
        slices.sort_unstable_by_key(|&e| events[e].start_ns);
        points.sort_unstable_by_key(|&p| flow_points[p].1);
        // The slices started by the point's time, by (start, index in `events`): the latest
        // start, then the later in the file, on top. One that ended before a point ended before
        // every later point too, so it is dropped for good once it reaches the top.
        let mut open = BinaryHeap::new();
        let mut next = 0;
        for p in points {
            let ts = flow_points[p].1;
            while let Some(&e) = slices.get(next)
                && events[e].start_ns <= ts
            {
                open.push((events[e].start_ns, e));
                next += 1;
            }
            while let Some(&(_, e)) = open.peek()
                && events[e].clamped_end_ns() < ts
            {
                open.pop();
            }
            targets[p] = open.peek().map(|&(_, e)| e);
        }
    }
    for ((_, _, flow), target) in flow_points.iter().zip(targets) {
        if let Some(e) = target
            && events[e].flow.is_none()
        {
            events[e].flow = Some(*flow);
        }
    }
}

/// One `X` slice as an event.
fn slice(ev: Fields<'_>, device: usize, tid: u64, start_ns: u64, dur_ns: u64) -> Event {
    let cat = ev.cat.as_ref().and_then(Scalar::as_str).unwrap_or("");
    let kind = EventKind::ALL.into_iter().find(|k| k.name() == cat);
    let lane = match tid % 10 {
        1 => Some(Lane::Host),
        2 => Some(Lane::Compute),
        3 => Some(Lane::Transfer),
        _ => None,
    };
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
        device,
        lane,
        kind,
        name: match ev.name {
            Some(Scalar::Str(name)) => name.into_owned(),
            _ => String::new(),
        },
        program: uint(&args.program),
        node: uint(&args.node).and_then(|n| u32::try_from(n).ok()),
        microbatch: uint(&args.microbatch).and_then(|n| u32::try_from(n).ok()),
        start_ns,
        end_ns: start_ns.saturating_add(dur_ns),
        clock,
        flow: None,
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
    Args,
    #[serde(other)]
    Other,
}

/// The `args` the import reads: of slices, and the name of `process_name` metadata.
#[derive(Default)]
struct Args<'a> {
    program: Option<Scalar<'a>>,
    node: Option<Scalar<'a>>,
    microbatch: Option<Scalar<'a>>,
    clock: Option<Scalar<'a>>,
    name: Option<Scalar<'a>>,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum ArgKey {
    Program,
    Node,
    Microbatch,
    Clock,
    Name,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(field_identifier)]
enum TopKey {
    #[serde(rename = "traceEvents")]
    TraceEvents,
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
                    *self.0 = Import::default();
                    found = map.next_value_seed(Read(List(&mut *self.0)))?;
                }
                TopKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
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
        while let Some(key) = map.next_key::<ArgKey>()? {
            let field = match key {
                ArgKey::Program => &mut args.program,
                ArgKey::Node => &mut args.node,
                ArgKey::Microbatch => &mut args.microbatch,
                ArgKey::Clock => &mut args.clock,
                ArgKey::Name => &mut args.name,
                ArgKey::Other => {
                    map.next_value::<IgnoredAny>()?;
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
mod tests {
    use serde_json::json;

    use super::*;
    use crate::trace::chrome::to_json;
    use crate::trace::meta::EventMeta;

    fn sorted(mut events: Vec<Event>) -> Vec<Event> {
        events.sort_by(|a, b| {
            (a.start_ns, a.device, a.lane, a.end_ns).cmp(&(b.start_ns, b.device, b.lane, b.end_ns))
        });
        events
    }

    #[test]
    fn export_then_parse_round_trips_events() {
        let k = |name: &str, start, end| {
            EventMeta::kernel(0)
                .program(1)
                .node(4)
                .clock(Clock::Gpu)
                .event(name.into(), start, end)
        };
        let events = vec![
            EventMeta::host_encode(0).event("encode".into(), 0, 1_000),
            k("F0", 1_000, 5_000),
            // Overlaps F0: goes to an overflow thread (tid 12) and must come back as compute.
            k("F1", 3_000, 6_000),
            k("B0", 6_000, 7_001),
            EventMeta::transfer(0)
                .flow(7, FlowRole::Out)
                .event("send".into(), 7_001, 9_000),
            EventMeta::transfer(1)
                .microbatch(2)
                .clock(Clock::Simulated)
                .flow(7, FlowRole::In)
                .event("recv".into(), 7_500, 9_500),
            EventMeta::wait(1).event("wait".into(), 0, 7_500),
            EventMeta::kernel(2).event("big".into(), 1_234_567_891, 2_345_678_912),
        ];
        let names = vec![(0, "gpu A".to_string())];
        let (back, back_names) = parse(&to_json(&events, &names)).unwrap();
        assert_eq!(back, sorted(events));
        assert_eq!(
            back_names,
            [
                (0, "gpu A".to_string()),
                (1, "device 1".to_string()),
                (2, "device 2".to_string())
            ]
        );
    }

    #[test]
    fn bad_input_is_an_error_naming_the_event() {
        assert!(parse(&json!(42)).is_err());
        assert!(parse(&json!({"foo": []})).is_err());
        let err = parse(&json!([{"ph": "X", "pid": 0, "tid": 2}])).unwrap_err();
        assert_eq!(err, "traceEvents[0]: missing \"ts\"");
        let err = parse(&json!({"traceEvents": [1]})).unwrap_err();
        assert_eq!(err, "traceEvents[0]: not an object");
        let err = parse(&json!([{"ph": "X", "pid": -1, "ts": 0}])).unwrap_err();
        assert!(err.contains("pid"), "{err}");
        let err = parse(&json!([{"ph": "X", "pid": 0, "ts": -5.0}])).unwrap_err();
        assert!(err.contains("\"ts\""), "{err}");
    }

    #[test]
    fn foreign_traces_are_read_leniently() {
        let (events, names) = parse(&json!([
            {"ph": "X", "pid": 3, "tid": 77, "ts": 1.5, "dur": 2, "name": "gemm", "cat": "transfer"},
            {"ph": "X", "pid": 3, "tid": 1, "ts": 0, "name": "enc", "cat": "whatever"},
            {"ph": "C", "pid": 3, "ts": 0, "name": "c", "args": {"x": 1}},
            {"ph": "i", "pid": 3, "ts": 0, "name": "mark"},
        ]))
        .unwrap();
        assert!(names.is_empty());
        assert_eq!(events.len(), 2);
        assert_eq!(
            (events[0].lane, events[0].kind, events[0].end_ns),
            (Lane::Host, EventKind::HostEncode, 0)
        );
        assert_eq!(
            (
                events[1].lane,
                events[1].kind,
                events[1].start_ns,
                events[1].end_ns
            ),
            (Lane::Transfer, EventKind::Transfer, 1_500, 3_500)
        );
    }

    #[test]
    fn flow_points_bind_to_the_latest_covering_slice_without_a_flow() {
        // All on pid 0, tid 3: a transfer thread.
        let x = |name: &str, ts: f64, dur: f64| json!({"ph": "X", "pid": 0, "tid": 3, "name": name, "ts": ts, "dur": dur});
        let point =
            |ph: &str, id: u64, ts: f64| json!({"ph": ph, "pid": 0, "tid": 3, "id": id, "ts": ts});
        let (events, _) = parse(&json!([
            x("outer", 0.0, 10.0),
            x("inner", 2.0, 2.0),
            // Two slices starting together: the later in the file is the one bound.
            x("first", 6.0, 2.0),
            x("second", 6.0, 2.0),
            x("late", 20.0, 1.0),
            // Points in any order: `inner` covers 3; at 5 only `outer` still does.
            point("f", 2, 5.0),
            point("s", 1, 3.0),
            point("s", 3, 7.0),
            // `second` has a flow already: this point binds to nothing, not to `first`.
            point("f", 4, 7.0),
            // Covered by nothing; on a thread without slices.
            point("s", 5, 15.0),
            json!({"ph": "s", "pid": 0, "tid": 2, "id": 6, "ts": 1.0}),
            // Ends count as covered: `late` ends at 21.
            point("f", 7, 21.0),
        ]))
        .unwrap();
        let flows: Vec<_> = events
            .iter()
            .map(|e| (e.name.as_str(), e.flow.map(|f| (f.id, f.role))))
            .collect();
        assert_eq!(
            flows,
            [
                ("outer", Some((2, FlowRole::In))),
                ("inner", Some((1, FlowRole::Out))),
                ("first", None),
                ("second", Some((3, FlowRole::Out))),
                ("late", Some((7, FlowRole::In))),
            ]
        );
    }

    /// `parse_slice` of the text and `parse` of its `Value` agree, errors included.
    fn both(text: &str) -> Result<Imported, String> {
        let sliced = parse_slice(text.as_bytes());
        let value: Value = serde_json::from_str(text).unwrap();
        assert_eq!(sliced, parse(&value), "{text}");
        sliced
    }

    #[test]
    fn text_and_value_are_read_alike() {
        let events = vec![
            EventMeta::kernel(0)
                .program(3)
                .node(1)
                .microbatch(2)
                .clock(Clock::Gpu)
                .event("na\"me\\ é".into(), 1_000, 2_500),
            EventMeta::transfer(0)
                .flow(9, FlowRole::Out)
                .event("send".into(), 2_500, 4_000),
            EventMeta::transfer(1)
                .flow(9, FlowRole::In)
                .event("recv".into(), 3_000, 4_500),
        ];
        let text = to_json(&events, &[(1, "gpu \"B\"".into())]).to_string();
        let (back, names) = both(&text).unwrap();
        assert_eq!(back, sorted(events));
        assert_eq!(names[1], (1, "gpu \"B\"".to_string()));

        for text in [
            // Escaped keys and names, numbers of every JSON kind, fields of unexpected types.
            r#"[{"p\u0068": "X", "pid": 0, "ts": 1e0, "dur": 2, "name": "a\u00e9", "tid": "2",
                 "args": [1, {"program": 1}], "cat": {"deep": [[[{}]]]}},
                {"ph": "X", "pid": 1, "ts": 0, "args": {"program": -1, "node": 4.0, "clock": 7}}]"#,
            // A repeated key counts the last time, as in a `Value`.
            r#"[{"ph": "C", "ph": "X", "pid": 0, "ts": 5, "ts": 1, "name": "x", "name": "y"}]"#,
            r#"{"traceEvents": 1, "traceEvents": [{"ph": "X", "pid": 0, "ts": 0}]}"#,
            r#"{"traceEvents": [{"ph": "X"}], "traceEvents": [], "other": {"a": [1, 2]}}"#,
            r#"{"traceEvents": [], "traceEvents": {}}"#,
            // Errors, with the same message either way.
            r#"[{"ph": "X", "pid": 0, "ts": 1}, {"ph": "X", "pid": 0, "ts": "soon"}]"#,
            r#"[{"ph": "X", "pid": 0, "ts": 1, "dur": null}]"#,
            r#"[{"ph": "X", "pid": 0, "ts": 1, "dur": [1]}]"#,
            r#"[{"ph": "X", "pid": 0.5, "ts": 1}]"#,
            r#"[{"ph": "X", "pid": 0, "ts": -1e-9}]"#,
            r#"[[], {"ph": "X"}]"#,
            r#"{"displayTimeUnit": "ms"}"#,
            r#""traceEvents""#,
            "null",
        ] {
            let _ = both(text);
        }
        assert_eq!(
            both(r#"[{"ph": "X", "pid": 0, "ts": 1}, {"ph": "X", "pid": 0, "ts": "soon"}]"#),
            Err("traceEvents[1]: \"ts\" must be a finite number >= 0, got \"soon\"".into())
        );
        let (events, _) = both(
            r#"[{"ph": "C", "ph": "X", "pid": 0, "ts": 5, "ts": 1, "name": "x", "name": "y"}]"#,
        )
        .unwrap();
        assert_eq!((events[0].name.as_str(), events[0].start_ns), ("y", 1_000));
    }

    #[test]
    fn text_that_is_not_json_is_an_error_saying_where() {
        for text in [
            "",
            "{ this is not json",
            r#"{"traceEvents": [{"ph": "X", "pid": 0, "ts": 1}"#,
            r#"[{"ph": "X", "pid": 0, "ts": 1},]"#,
            // A bad event first: text that is not JSON is still the error, as with a `Value`.
            r#"[{"ph": "X"}, {"ph": "X", "pid": 0, "ts": 1 "dur": 2}]"#,
            r#"[] []"#,
        ] {
            let err = parse_slice(text.as_bytes()).unwrap_err();
            assert!(
                err.starts_with("not JSON: ") && err.contains("line 1"),
                "{text}: {err}"
            );
            assert!(serde_json::from_str::<Value>(text).is_err());
        }
    }
}
