//! Events to Chrome trace-event JSON.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use serde_json::{Map, Value, json};

use super::{FLOW_NAME, UTILIZATION_COUNTER, thread_id};
use crate::trace::event::{Event, FlowRole, Lane};
use crate::trace::utilization::{BusyTime, span};

/// Counter bins over the whole trace, and the shortest a bin may be.
const COUNTER_BINS: u64 = 100;
const MIN_BIN_NS: u64 = 1_000;

/// The trace as `{"traceEvents": [...], "displayTimeUnit": "ms"}`; `ts`/`dur` in µs.
///
/// `device_names` names processes (unnamed devices are "device N"); a named device with no
/// events still gets its process. Flow events are written only for ids with exactly one `Out`
/// and one `In` event (a trace cut mid-transfer loses the arrow, not its validity); each sits
/// 1 ns inside its slice when the slice is long enough, so a viewer cannot bind it to a
/// neighbouring slice that ends exactly where this one starts.
pub fn to_json(events: &[Event], device_names: &[(usize, String)]) -> Value {
    let slots = assign_slots(events);
    let mut out = Vec::new();
    let mut devices: BTreeSet<usize> = events.iter().map(|e| e.device).collect();
    devices.extend(device_names.iter().map(|(d, _)| *d));

    for &device in &devices {
        let name = device_names
            .iter()
            .find(|(d, _)| *d == device)
            .map_or_else(|| format!("device {device}"), |(_, n)| n.clone());
        out.push(metadata(
            device,
            None,
            "process_name",
            json!({ "name": name }),
        ));
        out.push(metadata(
            device,
            None,
            "process_sort_index",
            json!({ "sort_index": device }),
        ));
    }

    let threads: BTreeSet<(usize, Lane, usize)> = events
        .iter()
        .zip(&slots)
        .map(|(e, &slot)| (e.device, e.lane, slot))
        .collect();
    for (device, lane, slot) in threads {
        let tid = thread_id(lane, slot);
        let name = match slot {
            0 => lane.name().to_string(),
            k => format!("{} (overlap {k})", lane.name()),
        };
        // Overflow threads sort right after their lane's own thread.
        let sort_index = thread_id(lane, 0) * 1_000_000 + slot as u64;
        out.push(metadata(
            device,
            Some(tid),
            "thread_name",
            json!({ "name": name }),
        ));
        out.push(metadata(
            device,
            Some(tid),
            "thread_sort_index",
            json!({ "sort_index": sort_index }),
        ));
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

    json!({ "traceEvents": out, "displayTimeUnit": "ms" })
}

/// [`to_json`] as compact JSON text.
pub fn to_string(events: &[Event], device_names: &[(usize, String)]) -> String {
    to_json(events, device_names).to_string()
}

/// Nanoseconds as the format's microseconds.
fn us(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

fn metadata(pid: usize, tid: Option<u64>, name: &str, args: Value) -> Value {
    let mut m = json!({ "ph": "M", "name": name, "pid": pid, "args": args });
    if let (Some(tid), Some(obj)) = (tid, m.as_object_mut()) {
        obj.insert("tid".into(), tid.into());
    }
    m
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

fn complete(e: &Event, slot: usize) -> Value {
    let mut args = Map::new();
    if let Some(p) = e.program {
        args.insert("program".into(), p.into());
    }
    if let Some(n) = e.node {
        args.insert("node".into(), n.into());
    }
    if let Some(m) = e.microbatch {
        args.insert("microbatch".into(), m.into());
    }
    args.insert("clock".into(), e.clock.name().into());
    json!({
        "ph": "X",
        "name": e.name,
        "cat": e.kind.name(),
        "pid": e.device,
        "tid": thread_id(e.lane, slot),
        "ts": us(e.start_ns),
        "dur": us(e.duration_ns()),
        "args": args,
    })
}

fn flows(events: &[Event], slots: &[usize]) -> Vec<Value> {
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

fn flow_point(id: u64, ph: &str, e: &Event, slot: usize) -> Value {
    let anchor = e.start_ns + u64::from(e.duration_ns() >= 2);
    let mut v = json!({
        "ph": ph,
        "id": id,
        "cat": FLOW_NAME,
        "name": FLOW_NAME,
        "pid": e.device,
        "tid": thread_id(e.lane, slot),
        "ts": us(anchor),
    });
    if let (Some(obj), "f") = (v.as_object_mut(), ph) {
        obj.insert("bp".into(), "e".into());
    }
    v
}

fn counters(events: &[Event], devices: &BTreeSet<usize>) -> Vec<Value> {
    let Some(window) = span(events) else {
        return Vec::new();
    };
    let len = window.end - window.start;
    let bins = (len / MIN_BIN_NS).clamp(1, COUNTER_BINS) as usize;
    let mut out = Vec::new();
    for &device in devices {
        for (t, u) in BusyTime::of(events, device).series(window.clone(), bins) {
            out.push(json!({
                "ph": "C",
                "name": UTILIZATION_COUNTER,
                "pid": device,
                "ts": us(t),
                "args": { "busy %": u * 100.0 },
            }));
        }
    }
    out
}
