//! Events to Chrome trace-event JSON, in gangway's layout (see the parent module): the
//! `otherData` marker, a process per lane named and typed by its [`Track`] (the `track` arg),
//! threads per lane with overflow threads for overlapping slices, each slice's ids and pipeline
//! op in its args, flow points for complete transfer pairs, and a utilization counter per
//! device. Its elements and their builders (a process's and a thread's metadata, a slice, a flow
//! point) are also what [`super::TraceStream`] writes one at a time.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use serde::Serialize;
use serde_json::Value;

use super::{FLOW_NAME, PRODUCER, UTILIZATION_COUNTER, thread_id};
use crate::trace::PipelineOp;
use crate::trace::event::{Event, FlowRole, Lane};
use crate::trace::track::{Track, TrackKind};
use crate::trace::utilization::{BusyTime, span};

/// Counter bins over the whole trace, and the shortest a bin may be.
const COUNTER_BINS: u64 = 100;
const MIN_BIN_NS: u64 = 1_000;

/// The trace as `{"otherData": {"producer": "gangway", ...}, "traceEvents": [...],
/// "displayTimeUnit": "ms"}`; `ts`/`dur` in µs. `otherData` is the marker the import reads
/// gangway's meaning by (chrome://tracing shows it as the trace's metadata).
///
/// `tracks` say what each process is ([`Track`]: its name, and its kind and stages in the
/// metadata's `track` arg); a device without one is "device N", and a track with no events
/// still gets its process. Flow events are written only for ids with exactly one `Out`
/// and one `In` event (a trace cut mid-transfer loses the arrow, not its validity); each sits
/// 1 ns inside its slice when the slice is long enough, so a viewer cannot bind it to a
/// neighbouring slice that ends exactly where this one starts.
pub fn to_json(events: &[Event], tracks: &[Track]) -> Value {
    // Plain structs of numbers and strings always serialize.
    serde_json::to_value(Trace::of(events, tracks)).unwrap_or(Value::Null)
}

/// [`to_json`] as compact JSON text, written straight from the events: a `Value` of a
/// million-event trace took most of the 7-13 s a save of one took (release build).
pub fn to_string(events: &[Event], tracks: &[Track]) -> String {
    serde_json::to_string(&Trace::of(events, tracks)).unwrap_or_default()
}

/// The whole document, borrowing the events' names.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Trace<'a> {
    other_data: OtherData,
    trace_events: Vec<Element<'a>>,
    display_time_unit: &'static str,
}

/// Who wrote the trace; [`PRODUCER`] makes it gangway's dialect.
#[derive(Serialize)]
pub(super) struct OtherData {
    producer: &'static str,
    version: &'static str,
}

/// One trace event of the format.
#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum Element<'a> {
    Metadata {
        ph: &'static str,
        name: &'static str,
        pid: usize,
        #[serde(skip_serializing_if = "Option::is_none")]
        tid: Option<u64>,
        args: MetadataArgs,
    },
    Complete {
        ph: &'static str,
        name: &'a str,
        cat: &'static str,
        pid: usize,
        tid: u64,
        ts: f64,
        dur: f64,
        args: SliceArgs,
    },
    FlowPoint {
        ph: &'static str,
        id: u64,
        cat: &'static str,
        name: &'static str,
        pid: usize,
        tid: u64,
        ts: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        bp: Option<&'static str>,
    },
    Counter {
        ph: &'static str,
        name: &'static str,
        pid: usize,
        ts: f64,
        args: CounterArgs,
    },
}

#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum MetadataArgs {
    Process { name: String, track: TrackArgs },
    Name { name: String },
    SortIndex { sort_index: u64 },
}

/// A process's [`Track`] beside its name: what it is, as the import reads it back.
#[derive(Serialize)]
pub(super) struct TrackArgs {
    kind: TrackKind,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stages: Vec<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rank: Option<usize>,
}

#[derive(Serialize)]
pub(super) struct SliceArgs {
    #[serde(skip_serializing_if = "Option::is_none")]
    program: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    microbatch: Option<u32>,
    clock: &'static str,
    /// The pipeline op (`F`, `B`, `W`) the event is: the import reads it back.
    #[serde(skip_serializing_if = "Option::is_none")]
    op: Option<&'static str>,
    /// What a transfer moved ([`Event::moved`]): the import reads it back.
    #[serde(skip_serializing_if = "Option::is_none")]
    transfer: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    direction: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
}

#[derive(Serialize)]
pub(super) struct CounterArgs {
    #[serde(rename = "busy %")]
    busy_percent: f64,
}

impl<'a> Trace<'a> {
    fn of(events: &'a [Event], tracks: &[Track]) -> Self {
        let slots = assign_slots(events);
        let mut out = Vec::new();
        let mut devices: BTreeSet<usize> = events.iter().map(|e| e.device).collect();
        devices.extend(tracks.iter().map(|t| t.id));

        for &device in &devices {
            let track = tracks
                .iter()
                .find(|t| t.id == device)
                .cloned()
                .unwrap_or_else(|| Track::unnamed(device));
            out.extend(process(track));
        }

        let threads: BTreeSet<(usize, Lane, usize)> = events
            .iter()
            .zip(&slots)
            .map(|(e, &slot)| (e.device, e.lane, slot))
            .collect();
        for (device, lane, slot) in threads {
            out.extend(thread(device, lane, slot));
        }

        // Slices before flows: viewers bind a flow to the slice open on its thread at its time.
        let mut order: Vec<usize> = (0..events.len()).collect();
        order.sort_by_key(|&i| {
            (
                events[i].start_ns,
                events[i].device,
                thread_id(events[i].lane, slots[i]),
            )
        });
        out.extend(order.iter().map(|&i| complete(&events[i], slots[i])));
        out.extend(flows(events, &slots));
        out.extend(counters(events, &devices));
        Trace {
            other_data: other_data(),
            trace_events: out,
            display_time_unit: "ms",
        }
    }
}

/// A process's two metadata events: its name and [`Track`], and its sort index.
pub(super) fn process(track: Track) -> [Element<'static>; 2] {
    let device = track.id;
    [
        metadata(
            device,
            None,
            "process_name",
            MetadataArgs::Process {
                name: track.label,
                track: TrackArgs {
                    kind: track.kind,
                    stages: track.stages,
                    rank: track.rank,
                },
            },
        ),
        metadata(
            device,
            None,
            "process_sort_index",
            MetadataArgs::SortIndex {
                sort_index: device as u64,
            },
        ),
    ]
}

/// A thread's two metadata events: the lane's name (with its overflow slot) and its sort index.
pub(super) fn thread(device: usize, lane: Lane, slot: usize) -> [Element<'static>; 2] {
    let tid = thread_id(lane, slot);
    let name = match slot {
        0 => lane.name().to_string(),
        k => format!("{} (overlap {k})", lane.name()),
    };
    // Overflow threads sort right after their lane's own thread.
    let sort_index = thread_id(lane, 0) * 1_000_000 + slot as u64;
    [
        metadata(
            device,
            Some(tid),
            "thread_name",
            MetadataArgs::Name { name },
        ),
        metadata(
            device,
            Some(tid),
            "thread_sort_index",
            MetadataArgs::SortIndex { sort_index },
        ),
    ]
}

/// gangway's marker, as the import reads it.
pub(super) fn other_data() -> OtherData {
    OtherData {
        producer: PRODUCER,
        version: env!("CARGO_PKG_VERSION"),
    }
}

/// Nanoseconds as the format's microseconds.
fn us(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

pub(super) fn metadata(
    pid: usize,
    tid: Option<u64>,
    name: &'static str,
    args: MetadataArgs,
) -> Element<'static> {
    Element::Metadata {
        ph: "M",
        name,
        pid,
        tid,
        args,
    }
}

/// Per event, which thread of its lane it goes on: greedy lowest free slot in start order, so
/// slices on one thread never overlap and non-overlapping lanes stay on one thread.
/// O(n log n): freed slots come off a min-heap of end times.
fn assign_slots(events: &[Event]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by_key(|&i| {
        let e = &events[i];
        (e.device, e.lane, e.start_ns, e.clamped_end_ns())
    });
    let mut slots = vec![0; events.len()];
    let mut lane = None;
    let mut busy: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut free: BinaryHeap<Reverse<usize>> = BinaryHeap::new();
    let mut used = 0;
    for i in order {
        let e = &events[i];
        if lane != Some((e.device, e.lane)) {
            lane = Some((e.device, e.lane));
            busy.clear();
            free.clear();
            used = 0;
        }
        while let Some(&Reverse((end, slot))) = busy.peek() {
            if end > e.start_ns {
                break;
            }
            busy.pop();
            free.push(Reverse(slot));
        }
        let slot = match free.pop() {
            Some(Reverse(slot)) => slot,
            None => {
                used += 1;
                used - 1
            }
        };
        busy.push(Reverse((e.clamped_end_ns(), slot)));
        slots[i] = slot;
    }
    slots
}

pub(super) fn complete(e: &Event, slot: usize) -> Element<'_> {
    Element::Complete {
        ph: "X",
        name: &e.name,
        cat: e.kind.name(),
        pid: e.device,
        tid: thread_id(e.lane, slot),
        ts: us(e.start_ns),
        dur: us(e.duration_ns()),
        args: SliceArgs {
            program: e.program,
            node: e.node,
            microbatch: e.microbatch,
            clock: e.clock.name(),
            op: e.op.map(PipelineOp::letter),
            transfer: e.moved.map(|m| m.kind.name()),
            direction: e.moved.map(|m| m.direction.name()),
            bytes: e.moved.map(|m| m.bytes),
        },
    }
}

fn flows(events: &[Event], slots: &[usize]) -> Vec<Element<'static>> {
    let mut ends: BTreeMap<u64, (Vec<usize>, Vec<usize>)> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        if let Some(flow) = e.flow {
            let (outs, ins) = ends.entry(flow.id).or_default();
            match flow.role {
                FlowRole::Out => outs.push(i),
                FlowRole::In => ins.push(i),
            }
        }
    }
    let mut out = Vec::new();
    for (id, (outs, ins)) in ends {
        if let ([s], [f]) = (outs.as_slice(), ins.as_slice()) {
            out.push(flow_point(id, "s", &events[*s], slots[*s]));
            out.push(flow_point(id, "f", &events[*f], slots[*f]));
        }
    }
    out
}

pub(super) fn flow_point(id: u64, ph: &'static str, e: &Event, slot: usize) -> Element<'static> {
    let anchor = e.start_ns + u64::from(e.duration_ns() >= 2);
    Element::FlowPoint {
        ph,
        id,
        cat: FLOW_NAME,
        name: FLOW_NAME,
        pid: e.device,
        tid: thread_id(e.lane, slot),
        ts: us(anchor),
        bp: (ph == "f").then_some("e"),
    }
}

fn counters(events: &[Event], devices: &BTreeSet<usize>) -> Vec<Element<'static>> {
    let Some(window) = span(events) else {
        return Vec::new();
    };
    let len = window.end - window.start;
    let bins = (len / MIN_BIN_NS).clamp(1, COUNTER_BINS) as usize;
    let mut out = Vec::new();
    for &device in devices {
        for (t, u) in BusyTime::of(events, device).series(window.clone(), bins) {
            out.push(Element::Counter {
                ph: "C",
                name: UTILIZATION_COUNTER,
                pid: device,
                ts: us(t),
                args: CounterArgs {
                    busy_percent: u * 100.0,
                },
            });
        }
    }
    out
}
