//! The import's tests: gangway's traces round-trip through the exporter (marker, tracks, ops,
//! flows, counters); any other producer's read as Perfetto reads them (rows per thread, nesting at
//! equal times, instants by scope, flows bound to the innermost slice, counters per series); bad
//! input is an error naming the event; the text and its `Value` read alike.

use serde_json::json;

use super::*;
use crate::trace::chrome::to_json;
use crate::trace::meta::EventMeta;
use crate::trace::track::{Track, TrackKind};

/// In the import's order: by start, device and lane, the longer first.
fn sorted(mut events: Vec<Event>) -> Vec<Event> {
    events.sort_by_key(|e| {
        (
            e.start_ns,
            e.device,
            e.lane,
            std::cmp::Reverse(e.clamped_end_ns()),
        )
    });
    events
}

fn count<'a>(list: &'a [(String, u64)], key: &str) -> u64 {
    list.iter()
        .find(|(k, _)| k.as_str() == key)
        .map_or(0, |(_, n): &'a (String, u64)| *n)
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
            .moved(TransferKind::PointToPoint, Direction::Out, 4_096)
            .event("send".into(), 7_001, 9_000),
        EventMeta::transfer(1)
            .microbatch(2)
            .clock(Clock::Simulated)
            .flow(7, FlowRole::In)
            .moved(TransferKind::AllToAll, Direction::In, (1 << 40) + 3)
            .event("recv".into(), 7_500, 9_500),
        EventMeta::wait(1).event("wait".into(), 0, 7_500),
        EventMeta::kernel(2).event("big".into(), 1_234_567_891, 2_345_678_912),
    ];
    let tracks = vec![Track::device(0, "gpu A")];
    let back = parse(&to_json(&events, &tracks)).unwrap();
    assert_eq!(back.dialect, Dialect::Gangway);
    assert_eq!(back.events, sorted(events));
    assert_eq!(
        back.tracks,
        [
            Track::device(0, "gpu A"),
            Track::unnamed(1),
            Track::unnamed(2)
        ]
    );
    assert!(back.rows.is_empty());
    // The exporter's utilization counters come back as one track per device.
    let tracks: Vec<(&Id, &str)> = back
        .counters
        .iter()
        .map(|c| (&c.pid, c.name.as_str()))
        .collect();
    let util = "utilization (busy time / window, %) busy %";
    assert_eq!(
        tracks,
        [
            (&Id::Int(0), util),
            (&Id::Int(1), util),
            (&Id::Int(2), util)
        ]
    );
    assert_eq!(count(&back.phases, "X"), 8);
    assert_eq!(count(&back.phases, "s") + count(&back.phases, "f"), 2);
    // Both flow points bound to their slices: nothing is left undrawn.
    assert!(back.not_drawn.is_empty(), "{:?}", back.not_drawn);
}

#[test]
fn bad_input_is_an_error_naming_the_event() {
    assert!(parse(&json!(42)).is_err());
    assert!(parse(&json!({"foo": []})).is_err());
    let err = parse(&json!([{"ph": "X", "pid": 0, "tid": 2}])).unwrap_err();
    assert_eq!(err, "traceEvents[0]: missing \"ts\"");
    let err = parse(&json!({"traceEvents": [1]})).unwrap_err();
    assert_eq!(err, "traceEvents[0]: not an object");
    let err = parse(&json!([{"ph": "X", "pid": 0, "ts": -5.0}])).unwrap_err();
    assert!(err.contains("\"ts\""), "{err}");
    let err = parse(&json!([{"ph": "B", "pid": 0, "ts": "x"}])).unwrap_err();
    assert!(err.starts_with("traceEvents[0]: \"ts\""), "{err}");
    let err = parse(&json!([{"ph": "X", "pid": 0, "ts": 1, "dur": -1}])).unwrap_err();
    assert!(err.contains("\"dur\""), "{err}");
}

/// What the issue found: PyTorch's `"pid": "Spans"`, `"pid": ""`, OS ids read as devices.
#[test]
fn any_pid_and_tid_is_a_row_named_from_metadata() {
    let trace = parse(&json!([
        {"ph": "M", "name": "process_name", "pid": 5_312_327, "args": {"name": "python3"}},
        {"ph": "M", "name": "thread_name", "pid": 5_312_327, "tid": 5_312_327,
         "args": {"name": "MainThread"}},
        {"ph": "M", "name": "thread_name", "pid": 5_312_327, "tid": 77,
         "args": {"name": "worker"}},
        {"ph": "M", "name": "thread_sort_index", "pid": 5_312_327, "tid": 77,
         "args": {"sort_index": -1}},
        {"ph": "M", "name": "process_sort_index", "pid": "Spans", "args": {"sort_index": 9}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 5_312_327, "tid": 5_312_327,
         "ts": 1_000.0, "dur": 5.5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 5_312_327, "tid": 77,
         "ts": 1_001, "dur": 1},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
         "tid": "PyTorch Profiler", "ts": 999, "dur": 20},
        {"ph": "i", "s": "t", "name": "Iteration Start", "pid": "", "tid": "", "ts": 1000},
        // Ids past 2^64 and negative ones are ids too.
        {"ph": "X", "name": "far", "pid": 1e20, "tid": -3, "ts": 1002, "dur": 1},
    ]))
    .unwrap();
    assert_eq!(trace.dialect, Dialect::Foreign);
    let rows: Vec<(String, String)> = trace
        .rows
        .iter()
        .map(|r| (r.process_label(), r.thread_label()))
        .collect();
    assert_eq!(
        rows,
        [
            // Sort index -1 puts "worker" before the main thread; "Spans" sorts last (9).
            ("python3 (pid 5312327)".into(), "worker (tid 77)".into()),
            (
                "python3 (pid 5312327)".into(),
                "MainThread (tid 5312327)".into()
            ),
            ("process 100000000000000000000".into(), "thread -3".into()),
            // A thread with only an instant is a row too, as in Perfetto.
            ("process \"\"".into(), "thread \"\"".into()),
            ("process Spans".into(), "thread PyTorch Profiler".into()),
        ]
    );
    let on_row = |name: &str| {
        let e = trace.events.iter().find(|e| e.name == name).unwrap();
        (e.device, e.lane, e.kind)
    };
    assert_eq!(on_row("aten::add"), (0, Lane::Compute, EventKind::Kernel));
    assert_eq!(on_row("aten::mm"), (1, Lane::Compute, EventKind::Kernel));
    assert_eq!(on_row("far").0, 2);
    assert_eq!(on_row("PyTorch Profiler (0)").0, 4);
    // Times stay absolute: the viewer shows them from the trace's start.
    assert_eq!(trace.events[0].start_ns, 999_000);
    assert_eq!(count(&trace.phases, "M"), 5);
    assert_eq!(count(&trace.phases, "X"), 4);
    // The thread instant is kept, on a row of its own thread (pid "", tid "").
    assert!(trace.not_drawn.is_empty(), "{:?}", trace.not_drawn);
    assert_eq!(
        trace.instants,
        [InstantEvent {
            device: Some(3),
            lane: Lane::Compute,
            ns: 1_000_000,
            name: "Iteration Start".into(),
            scope: InstantScope::Thread,
        }]
    );
    assert_eq!(trace.rows[3].thread_label(), "thread \"\"");
    assert_eq!(trace.event_count(), 10);
}

/// What each lane is travels as a type in the process metadata's args and comes back: a stage,
/// a device or a gang holding folded stages, a rank's device; a reader never parses the label.
#[test]
fn tracks_round_trip_through_the_process_metadata() {
    let tracks = vec![
        Track::holding(0, TrackKind::Stage, vec![0], "stage 0: a"),
        Track::holding(
            1,
            TrackKind::Device,
            vec![1, 3],
            "device 1 (stages 1, 3): b",
        ),
        Track::holding(2, TrackKind::Gang, vec![2], "gang 2: c + d"),
        Track {
            rank: Some(1),
            ..Track::device(3, "rank 1: e")
        },
    ];
    let events = [EventMeta::kernel(0).event("F".into(), 0, 5)];
    let back = parse(&to_json(&events, &tracks)).unwrap();
    assert_eq!(back.tracks, tracks);
    // A label that reads like another kind means nothing: the kind is the arg's.
    let renamed = vec![Track::holding(
        0,
        TrackKind::Stage,
        vec![0],
        "device 0 (stages 0, 1)",
    )];
    let back = parse(&to_json(&events, &renamed)).unwrap();
    assert_eq!(back.tracks[0].kind, TrackKind::Stage);
    // A malformed track arg is read leniently: what is there, the kind a device's.
    let back = both(
        r#"{"otherData": {"producer": "gangway"}, "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 0,
             "args": {"name": "x", "track": {"kind": "planet", "stages": [1, "two", 3]}}},
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "y", "track": 7}}]}"#,
    )
    .unwrap();
    assert_eq!(
        back.tracks,
        [
            Track::holding(0, TrackKind::Device, vec![1, 3], "x"),
            Track::device(1, "y")
        ]
    );
}

/// gangway's meaning comes from its marker alone: chrome://tracing-style traces with small ids
/// and no metadata (pid 1, tid 1 and 2, `cat`s gangway also writes) are read as anyone's.
#[test]
fn the_dialect_is_told_by_the_marker_never_by_small_ids() {
    let events = json!([
        {"ph": "X", "name": "step", "cat": "kernel", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "X", "name": "load", "pid": 1, "tid": 2, "ts": 1, "dur": 2},
    ]);
    let plain = parse(&events).unwrap();
    assert_eq!(plain.dialect, Dialect::Foreign);
    let rows: Vec<String> = plain.rows.iter().map(ThreadRow::thread_label).collect();
    assert_eq!(rows, ["thread 1", "thread 2"]);
    assert!(plain.tracks.is_empty());
    // The same events under gangway's marker: pid 1 is device 1, tid 1 its host lane.
    let marked = parse(&json!({
        "otherData": {"producer": "gangway", "version": "0.1.0"},
        "traceEvents": events,
    }))
    .unwrap();
    assert_eq!(marked.dialect, Dialect::Gangway);
    assert_eq!(
        (marked.events[0].device, marked.events[0].lane),
        (1, Lane::Host)
    );
    // The marker may follow the list; another producer's is not gangway's.
    let text = r#"{"traceEvents": [{"ph": "X", "pid": 0, "tid": 2, "ts": 0}],
                   "otherData": {"producer": "gangway"}}"#;
    assert_eq!(both(text).unwrap().dialect, Dialect::Gangway);
    let text = r#"{"otherData": {"producer": "perfetto"},
                   "traceEvents": [{"ph": "X", "pid": 0, "tid": 2, "ts": 0}]}"#;
    assert_eq!(both(text).unwrap().dialect, Dialect::Foreign);
    // What the exporter writes carries it.
    let back = parse(&to_json(
        &[EventMeta::kernel(0).event("k".into(), 0, 5)],
        &[],
    ))
    .unwrap();
    assert_eq!(back.dialect, Dialect::Gangway);
}

/// Perfetto's nesting of slices that start together: of `X`s, the longer is the parent; of
/// `B`/`E` pairs, the one opened first (its `E` comes last); equal `X`s nest in file order.
#[test]
fn slices_that_start_together_nest_as_perfetto_nests_them() {
    let trace = parse(&json!([
        // The child first in the file, as profilers that write on exit do.
        {"ph": "X", "name": "forward", "pid": 1, "tid": 1, "ts": 0, "dur": 4},
        {"ph": "X", "name": "step", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "B", "name": "outer", "pid": 1, "tid": 2, "ts": 0},
        {"ph": "B", "name": "inner", "pid": 1, "tid": 2, "ts": 0},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 5},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 5},
        {"ph": "X", "name": "a", "pid": 1, "tid": 3, "ts": 0, "dur": 3},
        {"ph": "X", "name": "b", "pid": 1, "tid": 3, "ts": 0, "dur": 3},
    ]))
    .unwrap();
    let names: Vec<&str> = trace.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["step", "forward", "outer", "inner", "a", "b"]);
}

/// Instants keep their scope: a thread's on its row (a thread with only instants gets one), a
/// process's on the process's first row, a global one on none.
#[test]
fn instants_are_kept_on_their_rows() {
    let trace = parse(&json!([
        {"ph": "X", "name": "work", "pid": 3, "tid": 8, "ts": 0, "dur": 10},
        {"ph": "i", "name": "thread mark", "pid": 3, "tid": 9, "ts": 2},
        {"ph": "I", "name": "old style", "pid": 3, "tid": 8, "ts": 1},
        {"ph": "i", "name": "process mark", "s": "p", "pid": 3, "tid": 9, "ts": 3},
        {"ph": "i", "name": "global mark", "s": "g", "pid": 3, "tid": 9, "ts": 4},
        {"ph": "i", "name": "no time", "pid": 3, "tid": 9},
    ]))
    .unwrap();
    let got: Vec<(&str, Option<usize>, u64, InstantScope)> = trace
        .instants
        .iter()
        .map(|i| (i.name.as_str(), i.device, i.ns, i.scope))
        .collect();
    assert_eq!(
        got,
        [
            ("old style", Some(0), 1_000, InstantScope::Thread),
            ("thread mark", Some(1), 2_000, InstantScope::Thread),
            ("process mark", Some(0), 3_000, InstantScope::Process),
            ("global mark", None, 4_000, InstantScope::Global),
        ]
    );
    assert_eq!(trace.rows.len(), 2);
    assert_eq!(
        trace.not_drawn,
        [("instant (i/I) without a time".to_string(), 1)]
    );
}

/// A thread name keeps its id beside it unless the name holds the id as a word of its own.
#[test]
fn numeric_tids_stand_beside_names_that_do_not_hold_them() {
    let row = |tid: i128, name: &str| ThreadRow {
        pid: Id::Int(1),
        tid: Id::Int(tid),
        process_name: None,
        thread_name: Some(name.into()),
    };
    assert_eq!(row(1, "worker 12").thread_label(), "worker 12 (tid 1)");
    assert_eq!(
        row(7, "CrBrowserMain").thread_label(),
        "CrBrowserMain (tid 7)"
    );
    assert_eq!(
        row(16108, "thread 16108 (python)").thread_label(),
        "thread 16108 (python)"
    );
}

#[test]
fn begin_end_pairs_nest_per_thread_and_strays_are_counted() {
    let trace = parse(&json!([
        {"ph": "B", "name": "outer", "pid": 1, "tid": 1, "ts": 0},
        {"ph": "B", "name": "inner", "pid": 1, "tid": 1, "ts": 2},
        // Another thread's B does not close this thread's.
        {"ph": "B", "name": "other", "pid": 1, "tid": 2, "ts": 3},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 4},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 11},
        {"ph": "X", "name": "x", "cat": "python_function", "pid": 1, "tid": 1, "ts": 12,
         "dur": 1},
    ]))
    .unwrap();
    let spans: Vec<(&str, u64, u64)> = trace
        .events
        .iter()
        .map(|e| (e.name.as_str(), e.start_ns, e.end_ns))
        .collect();
    assert_eq!(
        spans,
        [
            ("outer", 0, 10_000),
            ("inner", 2_000, 4_000),
            ("x", 12_000, 13_000)
        ]
    );
    assert_eq!(
        trace.not_drawn,
        [
            ("B that never ended".to_string(), 1),
            ("E without a B".to_string(), 1)
        ]
    );
    // Only threads with slices are rows.
    assert_eq!(trace.rows.len(), 1);
}

#[test]
fn counters_are_tracks_per_process_and_series() {
    let trace = parse(&json!([
        {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "host"}},
        {"ph": "C", "name": "memory", "pid": 7, "ts": 2, "args": {"used": 5, "free": 1.5}},
        {"ph": "C", "name": "memory", "pid": 7, "ts": 1, "args": {"used": 4, "free": 2,
                                                                   "note": "text"}},
        {"ph": "C", "name": "queue", "pid": 7, "ts": 1, "args": {"value": 3}},
        {"ph": "C", "name": "queue", "id": 2, "pid": 7, "ts": 1, "args": {"value": 1}},
        {"ph": "C", "name": "late", "pid": 7, "args": {"value": 1}},
        {"ph": "X", "name": "work", "cat": "op", "pid": 7, "tid": 1, "ts": 0, "dur": 3},
    ]))
    .unwrap();
    let tracks: Vec<(&str, &[(u64, f64)])> = trace
        .counters
        .iter()
        .map(|c| (c.name.as_str(), c.points.as_slice()))
        .collect();
    assert_eq!(
        tracks,
        [
            ("memory free", &[(1_000, 2.0), (2_000, 1.5)][..]),
            ("memory used", &[(1_000, 4.0), (2_000, 5.0)][..]),
            ("queue", &[(1_000, 3.0)][..]),
            ("queue 2", &[(1_000, 1.0)][..]),
        ]
    );
    assert_eq!(trace.counters[0].process_name.as_deref(), Some("host"));
    assert_eq!(
        trace.not_drawn,
        [("counter (C) without a time".to_string(), 1)]
    );
}

#[test]
fn gzip_and_unclosed_arrays_are_read() {
    use std::io::Write as _;
    let text = br#"[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 1},
                    {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 2, "dur": 1},"#;
    let trace = read(text).unwrap();
    assert_eq!(trace.events.len(), 2);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(text).unwrap();
    let gz = gz.finish().unwrap();
    assert_eq!(read(&gz).unwrap(), trace);
    // A torn gzip file is an error saying so.
    let err = read(&gz[..gz.len() / 2]).unwrap_err();
    assert!(err.starts_with("not a readable gzip file"), "{err}");
    // Text that is not JSON stays that error.
    assert!(read(b"[{\"ph\": ").unwrap_err().starts_with("not JSON"));
}

#[test]
fn flow_points_bind_to_the_latest_covering_slice_without_a_flow() {
    // All on pid 0, tid 3: a transfer thread.
    let x = |name: &str, ts: f64, dur: f64| json!({"ph": "X", "pid": 0, "tid": 3, "name": name, "ts": ts, "dur": dur});
    let point =
        |ph: &str, id: u64, ts: f64| json!({"ph": ph, "pid": 0, "tid": 3, "id": id, "ts": ts});
    let trace = parse(&json!([
        x("outer", 0.0, 10.0),
        x("inner", 2.0, 2.0),
        // Two slices starting together: the later in the file is the one bound.
        x("first", 6.0, 2.0),
        x("second", 6.0, 2.0),
        // Of two starting together, the shorter (the inner) binds, whatever the file order.
        x("child", 30.0, 2.0),
        x("parent", 30.0, 8.0),
        x("late", 20.0, 1.0),
        // Points in any order: `inner` covers 3; at 5 only `outer` still does.
        point("f", 2, 5.0),
        point("s", 1, 3.0),
        point("s", 3, 7.0),
        // `second` has a flow already: this point binds to it as well (its second flow), not to
        // `first`.
        point("f", 4, 7.0),
        // Covered by nothing; on a thread without slices.
        point("s", 5, 15.0),
        json!({"ph": "s", "pid": 0, "tid": 2, "id": 6, "ts": 1.0}),
        // Ends count as covered: `late` ends at 21.
        point("f", 7, 21.0),
        point("s", 8, 31.0),
    ]))
    .unwrap();
    let flows: Vec<_> = trace
        .events
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
            ("parent", None),
            ("child", Some((8, FlowRole::Out))),
        ]
    );
    // Every binding, in file order, with the slice it bound to: `second` has two.
    let bound: Vec<(&str, u64)> = trace
        .flows
        .iter()
        .map(|b| (trace.events[b.event].name.as_str(), b.flow.id))
        .collect();
    assert_eq!(
        bound,
        [
            ("outer", 2),
            ("inner", 1),
            ("second", 3),
            ("second", 4),
            ("late", 7),
            ("child", 8),
        ]
    );
    assert_eq!(
        trace.not_drawn,
        [("flow point inside no slice".to_string(), 2)]
    );
}

#[test]
fn string_flow_ids_and_steps_bind_as_receiving_ends() {
    let trace = parse(&json!([
        {"ph": "X", "name": "a", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 0, "dur": 5},
        {"ph": "X", "name": "b", "cat": "cpu_op", "pid": 1, "tid": 2, "ts": 0, "dur": 5},
        {"ph": "X", "name": "c", "cat": "cpu_op", "pid": 1, "tid": 3, "ts": 0, "dur": 5},
        {"ph": "s", "id": "0x1f", "pid": 1, "tid": 1, "ts": 1},
        {"ph": "t", "id": "flow-a", "pid": 1, "tid": 2, "ts": 1},
        {"ph": "f", "bind_id": 31, "pid": 1, "tid": 3, "ts": 1, "bp": "e"},
    ]))
    .unwrap();
    let flows: Vec<_> = trace
        .events
        .iter()
        .map(|e| e.flow.map(|f| (f.id, f.role)))
        .collect();
    assert_eq!(flows[0], Some((31, FlowRole::Out)));
    assert_eq!(flows[1].map(|f| f.1), Some(FlowRole::In));
    assert_eq!(flows[2], Some((31, FlowRole::In)));
}

/// `parse_slice` of the text and `parse` of its `Value` agree, errors included.
fn both(text: &str) -> Result<ChromeTrace, String> {
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
    let text = to_json(&events, &[Track::device(1, "gpu \"B\"")]).to_string();
    let back = both(&text).unwrap();
    assert_eq!(back.events, sorted(events));
    assert_eq!(back.tracks[1], Track::device(1, "gpu \"B\""));

    for text in [
        // Escaped keys and names, numbers of every JSON kind, fields of unexpected types.
        r#"[{"p\u0068": "X", "pid": 0, "ts": 1e0, "dur": 2, "name": "a\u00e9", "tid": "2",
             "args": [1, {"program": 1}], "cat": {"deep": [[[{}]]]}},
            {"ph": "X", "pid": 1, "ts": 0, "args": {"program": -1, "node": 4.0, "clock": 7}}]"#,
        // A repeated key counts the last time, as in a `Value`.
        r#"[{"ph": "C", "ph": "X", "pid": 0, "ts": 5, "ts": 1, "name": "x", "name": "y"}]"#,
        r#"[{"ph": "X", "args": {"a": 1}, "ph": "C", "pid": 0, "ts": 5,
             "args": {"a": 1, "b": 2, "a": "no", "\u0063": 3, "c": 4}}]"#,
        r#"{"traceEvents": 1, "traceEvents": [{"ph": "X", "pid": 0, "ts": 0}]}"#,
        r#"{"traceEvents": [{"ph": "X"}], "traceEvents": [], "other": {"a": [1, 2]}}"#,
        r#"{"traceEvents": [], "traceEvents": {}}"#,
        // Metadata naming threads and processes of every id type.
        r#"[{"ph": "M", "name": "thread_name", "pid": "p", "tid": 1.5, "args": {"name": "t"}},
            {"ph": "X", "pid": "p", "tid": 1.5, "ts": 1},
            {"ph": "M", "name": "process_sort_index", "pid": "p", "args": {"sort_index": 2}}]"#,
        // Errors, with the same message either way.
        r#"[{"ph": "X", "pid": 0, "ts": 1}, {"ph": "X", "pid": 0, "ts": "soon"}]"#,
        r#"[{"ph": "X", "pid": 0, "ts": 1, "dur": null}]"#,
        r#"[{"ph": "X", "pid": 0, "ts": 1, "dur": [1]}]"#,
        r#"[{"ph": "X", "pid": 0, "ts": -1e-9}]"#,
        r#"[[], {"ph": "X"}]"#,
        r#"{"displayTimeUnit": "ms"}"#,
        r#""traceEvents""#,
        "null",
    ] {
        let _ = both(text);
    }
    assert_eq!(
        both(r#"[{"ph": "X", "pid": 0, "ts": 1}, {"ph": "X", "pid": 0, "ts": "soon"}]"#).err(),
        Some("traceEvents[1]: \"ts\" must be a finite number >= 0, got \"soon\"".into())
    );
    let trace =
        both(r#"[{"ph": "C", "ph": "X", "pid": 0, "ts": 5, "ts": 1, "name": "x", "name": "y"}]"#)
            .unwrap();
    assert_eq!(
        (trace.events[0].name.as_str(), trace.events[0].start_ns),
        ("y", 1_000)
    );
    let trace = both(
        r#"[{"ph": "X", "args": {"a": 1}, "ph": "C", "pid": 0, "ts": 5,
             "args": {"a": 1, "b": 2, "a": "no", "\u0063": 3, "c": 4}}]"#,
    )
    .unwrap();
    let names: Vec<(&str, f64)> = trace
        .counters
        .iter()
        .map(|c| (c.name.as_str(), c.points[0].1))
        .collect();
    assert_eq!(names, [("b", 2.0), ("c", 4.0)]);
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
