//! Chrome trace-event JSON back into [`Event`]s: the inverse of [`to_json`](super::to_json), so a
//! saved trace can be reopened (by the viewer, or a test comparing runs).
//!
//! Reads what gangway writes and is lenient with other producers: `X` slices become events
//! (`pid` = device, `tid` = lane as in [`thread_id`](super::thread_id), overflow threads
//! included; `cat` = [`EventKind::name`]; `args` program / node / microbatch / clock), `s`/`f`
//! flow points re-attach to the slice they bind to, `process_name` metadata names devices, and
//! every other phase (counters, instants, ...) is skipped.

use std::collections::{BTreeMap, BinaryHeap};

use serde_json::{Map, Value};

use crate::trace::event::{Clock, Event, EventKind, Flow, FlowRole, Lane};

/// Events and device names (`(pid, process_name)`) of a Chrome trace.
///
/// The top level may be `{"traceEvents": [...]}` or a bare array. Unknown `cat`s take the kind
/// their lane implies (host → host encode, compute → kernel, transfer → transfer); unknown
/// `tid`s take the lane their kind implies. A slice without a valid `pid`, `ts` or `dur`, or
/// with a negative time, is an error naming `traceEvents[i]`. Events come back sorted by
/// start time, then device and lane.
#[allow(clippy::type_complexity)] // the pair `to_json` takes, returned as it is
pub fn parse(trace: &Value) -> Result<(Vec<Event>, Vec<(usize, String)>), String> {
    let list = match trace {
        Value::Array(list) => list,
        _ => trace
            .get("traceEvents")
            .and_then(Value::as_array)
            .ok_or("top level must be an object with a \"traceEvents\" array, or an array")?,
    };

    let mut events = Vec::new();
    // Per (pid, tid), indices into `events`, to bind flow points.
    let mut threads: BTreeMap<Thread, Vec<usize>> = BTreeMap::new();
    let mut names = BTreeMap::new();
    let mut flow_points = Vec::new();

    for (i, raw) in list.iter().enumerate() {
        let at = |what: &str| format!("traceEvents[{i}]: {what}");
        let obj = raw.as_object().ok_or_else(|| at("not an object"))?;
        match obj.get("ph").and_then(Value::as_str) {
            Some("X") => {
                let pid = uint(obj, "pid").ok_or_else(|| at("needs a non-negative integer pid"))?;
                let tid = uint(obj, "tid").unwrap_or(0);
                let start_ns = micros_to_ns(obj, "ts").map_err(|e| at(&e))?;
                let dur_ns = micros_to_ns(obj, "dur").map_err(|e| at(&e))?;
                let device = usize::try_from(pid).map_err(|_| at("pid too large"))?;
                let event = slice(obj, device, tid, start_ns, dur_ns);
                threads.entry((pid, tid)).or_default().push(events.len());
                events.push(event);
            }
            Some(ph @ ("s" | "f")) => {
                let (Some(pid), Some(tid), Some(id), Ok(ts)) = (
                    uint(obj, "pid"),
                    uint(obj, "tid"),
                    uint(obj, "id"),
                    micros_to_ns(obj, "ts"),
                ) else {
                    // A flow point we cannot place only loses its arrow.
                    continue;
                };
                let role = if ph == "s" {
                    FlowRole::Out
                } else {
                    FlowRole::In
                };
                flow_points.push(((pid, tid), ts, Flow { id, role }));
            }
            Some("M") if obj.get("name").and_then(Value::as_str) == Some("process_name") => {
                let pid = uint(obj, "pid").and_then(|p| usize::try_from(p).ok());
                let name = obj
                    .get("args")
                    .and_then(|a| a.get("name"))
                    .and_then(Value::as_str);
                if let (Some(pid), Some(name)) = (pid, name) {
                    names.insert(pid, name.to_string());
                }
            }
            _ => {}
        }
    }

    bind_flows(&mut events, &mut threads, &flow_points);

    events.sort_by(|a, b| {
        (a.start_ns, a.device, a.lane, a.end_ns).cmp(&(b.start_ns, b.device, b.lane, b.end_ns))
    });
    Ok((events, names.into_iter().collect()))
}

/// A Chrome thread: `(pid, tid)`.
type Thread = (u64, u64);

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
fn slice(obj: &Map<String, Value>, device: usize, tid: u64, start_ns: u64, dur_ns: u64) -> Event {
    let cat = obj.get("cat").and_then(Value::as_str).unwrap_or("");
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
    let args = obj.get("args").and_then(Value::as_object);
    let arg = |key: &str| args.and_then(|a| a.get(key)).and_then(Value::as_u64);
    let clock = args
        .and_then(|a| a.get("clock"))
        .and_then(Value::as_str)
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
        name: obj
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        program: arg("program"),
        node: arg("node").and_then(|n| u32::try_from(n).ok()),
        microbatch: arg("microbatch").and_then(|n| u32::try_from(n).ok()),
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

fn uint(obj: &Map<String, Value>, key: &str) -> Option<u64> {
    obj.get(key).and_then(Value::as_u64)
}

/// A field in the format's microseconds as whole nanoseconds (`dur` may be absent: 0).
fn micros_to_ns(obj: &Map<String, Value>, key: &str) -> Result<u64, String> {
    let Some(v) = obj.get(key) else {
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
}
