#![allow(clippy::unwrap_used)]

use crate::trace::track::Track;
use serde_json::{Value, json};

use super::*;
use crate::trace::event::{Clock, Event, FlowRole};
use crate::trace::meta::EventMeta;

/// Two devices; two overlapping kernels on device 0's compute lane; a transfer from device 0
/// to device 1; host work on both.
fn sample() -> Vec<Event> {
    let k = |name: &str, start, end| {
        EventMeta::kernel(0)
            .program(1)
            .node(4)
            .clock(Clock::Gpu)
            .event(name.into(), start, end)
    };
    vec![
        EventMeta::host_encode(0).event("encode".into(), 0, 1_000),
        k("matmul", 1_000, 5_000),
        k("softmax", 3_000, 6_000),
        k("add", 6_000, 7_000),
        EventMeta::transfer(0)
            .flow(7, FlowRole::Out)
            .event("send".into(), 7_000, 9_000),
        EventMeta::transfer(1)
            .microbatch(2)
            .flow(7, FlowRole::In)
            .event("recv".into(), 7_500, 9_500),
        EventMeta::wait(1).event("wait".into(), 0, 7_500),
    ]
}

fn of_phase<'a>(trace: &'a Value, ph: &str) -> Vec<&'a Value> {
    trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == ph)
        .collect()
}

fn find<'a>(trace: &'a Value, ph: &str, name: &str) -> &'a Value {
    of_phase(trace, ph)
        .into_iter()
        .find(|e| e["name"] == name)
        .unwrap()
}

#[test]
fn export_passes_check_with_overflow_thread_and_flow() {
    let trace = to_json(&sample(), &[Track::device(0, "gpu A")]);
    let summary = check(&trace).unwrap();
    // Device 0: host, compute, compute overflow, transfer; device 1: host, transfer.
    assert_eq!(
        summary,
        ChromeSummary {
            processes: 2,
            threads: 6,
            complete: 7,
            counters: summary.counters,
            flow_pairs: 1,
        }
    );
    assert!(
        summary.counters >= 2 * 9,
        "one counter sample per bin per device"
    );
    assert_eq!(trace["displayTimeUnit"], "ms");

    let names: Vec<_> = of_phase(&trace, "M")
        .iter()
        .filter(|m| m["name"] == "process_name")
        .map(|m| (m["pid"].clone(), m["args"]["name"].clone()))
        .collect();
    assert_eq!(
        names,
        [(json!(0), json!("gpu A")), (json!(1), json!("device 1"))]
    );

    let softmax = find(&trace, "X", "softmax");
    assert_eq!(softmax["tid"], thread_id(Lane::Compute, 1));
    assert_eq!(find(&trace, "X", "matmul")["tid"], 2);
    assert_eq!(find(&trace, "X", "add")["tid"], 2, "free slot 0 is reused");
    assert!(
        of_phase(&trace, "M")
            .iter()
            .any(|m| m["name"] == "thread_name"
                && m["tid"] == 12
                && m["args"]["name"] == "compute (overlap 1)")
    );
    // Times stay true: softmax keeps its start and length.
    assert_eq!(
        (softmax["ts"].as_f64(), softmax["dur"].as_f64()),
        (Some(3.0), Some(3.0))
    );
    assert_eq!(softmax["cat"], "kernel");
    assert_eq!(
        softmax["args"],
        json!({ "program": 1, "node": 4, "clock": "gpu timestamp" })
    );

    let (s, f) = (find(&trace, "s", "transfer"), find(&trace, "f", "transfer"));
    assert_eq!(
        (&s["id"], &s["pid"], &s["tid"]),
        (&json!(7), &json!(0), &json!(3))
    );
    assert_eq!(
        (&f["id"], &f["pid"], &f["tid"], &f["bp"]),
        (&json!(7), &json!(1), &json!(3), &json!("e"))
    );
    assert!(s["ts"].as_f64().unwrap() >= 7.0 && s["ts"].as_f64().unwrap() < 7.01);
}

#[test]
fn counter_is_busy_percent_of_device_work() {
    let trace = to_json(&sample(), &[]);
    let c: Vec<_> = of_phase(&trace, "C")
        .into_iter()
        .filter(|c| c["pid"] == 1)
        .collect();
    // Span is 0..9500 ns: 9 bins (at least 1 µs each); device 1 busy only on 7500..9500.
    assert_eq!(c.len(), 9);
    assert!(c.iter().all(|c| c["name"] == UTILIZATION_COUNTER));
    assert_eq!(c[0]["args"]["busy %"].as_f64(), Some(0.0));
    assert_eq!(c[8]["args"]["busy %"].as_f64(), Some(100.0));
}

#[test]
fn unpaired_flow_is_left_out_and_empty_trace_is_valid() {
    let mut events = sample();
    events.retain(|e| e.name != "recv");
    let trace = to_json(&events, &[]);
    assert_eq!(check(&trace).unwrap().flow_pairs, 0);
    assert!(of_phase(&trace, "s").is_empty());

    let empty = to_json(&[], &[Track::device(3, "idle")]);
    let summary = check(&empty).unwrap();
    assert_eq!(
        (summary.processes, summary.threads, summary.complete),
        (1, 0, 0)
    );
}

#[test]
fn to_string_is_the_same_json() {
    let text = to_string(&sample(), &[]);
    let parsed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed, to_json(&sample(), &[]));
}

#[test]
fn many_overlapping_events_each_get_a_thread() {
    let events: Vec<Event> = (0..50)
        .map(|i| EventMeta::kernel(0).event(format!("k{i}"), i, 1_000 + i))
        .collect();
    let summary = check(&to_json(&events, &[])).unwrap();
    assert_eq!(summary.threads, 50);
}

/// A minimal valid trace: one process, one thread, two abutting slices and a flow between them.
fn minimal() -> Value {
    json!({ "traceEvents": [
        { "ph": "M", "name": "process_name", "pid": 0, "args": { "name": "p" } },
        { "ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": { "name": "t" } },
        { "ph": "X", "name": "a", "pid": 0, "tid": 1, "ts": 0.0, "dur": 1.5 },
        { "ph": "X", "name": "b", "pid": 0, "tid": 1, "ts": 1.5, "dur": 1.0 },
        { "ph": "s", "name": "x", "cat": "x", "id": 1, "pid": 0, "tid": 1, "ts": 0.5 },
        { "ph": "f", "name": "x", "cat": "x", "id": 1, "pid": 0, "tid": 1, "ts": 2.0, "bp": "e" },
        { "ph": "C", "name": "c", "pid": 0, "ts": 0.0, "args": { "v": 1 } },
    ]})
}

fn edited(edit: impl FnOnce(&mut Vec<Value>)) -> Value {
    let mut trace = minimal();
    edit(trace["traceEvents"].as_array_mut().unwrap());
    trace
}

#[test]
fn check_accepts_minimal_trace() {
    let summary = check(&minimal()).unwrap();
    assert_eq!(
        summary,
        ChromeSummary {
            processes: 1,
            threads: 1,
            complete: 2,
            counters: 1,
            flow_pairs: 1
        }
    );
}

#[test]
fn check_rejects_overlap() {
    let trace = edited(|evs| evs[3]["ts"] = json!(1.4));
    let err = check(&trace).unwrap_err();
    assert!(err.contains("overlap on pid 0 tid 1"), "{err}");
    assert!(
        err.contains("traceEvents[2] \"a\"") && err.contains("traceEvents[3] \"b\""),
        "{err}"
    );
}

#[test]
fn check_rejects_nesting() {
    let trace = edited(|evs| {
        evs[3]["ts"] = json!(0.5);
        evs[3]["dur"] = json!(0.5);
    });
    assert!(check(&trace).unwrap_err().contains("overlap"));
}

#[test]
fn check_rejects_flow_without_f() {
    let trace = edited(|evs| {
        evs.remove(5);
    });
    let err = check(&trace).unwrap_err();
    assert!(err.contains("flow id 1 needs exactly one"), "{err}");
    assert!(err.contains("0 f"), "{err}");
}

#[test]
fn check_rejects_flow_going_back_in_time_or_unbound() {
    let back = edited(|evs| evs[4]["ts"] = json!(2.2));
    assert!(check(&back).unwrap_err().contains("is after f"));
    let unbound = edited(|evs| evs[5]["ts"] = json!(9.0));
    assert!(
        check(&unbound)
            .unwrap_err()
            .contains("no enclosing X slice")
    );
    let renamed = edited(|evs| evs[5]["name"] = json!("y"));
    assert!(
        check(&renamed)
            .unwrap_err()
            .contains("differ in cat or name")
    );
}

#[test]
fn check_rejects_missing_metadata() {
    let no_thread = edited(|evs| {
        evs.remove(1);
    });
    let err = check(&no_thread).unwrap_err();
    assert!(
        err.contains("pid 0 tid 1") && err.contains("no thread_name"),
        "{err}"
    );
    let no_process = edited(|evs| {
        evs.remove(0);
    });
    assert!(check(&no_process).unwrap_err().contains("no process_name"));
}

#[test]
fn check_rejects_malformed_events() {
    assert!(check(&json!([])).unwrap_err().contains("traceEvents"));
    type Edit = fn(&mut Vec<Value>);
    let cases: [(Edit, &str); 6] = [
        (
            |evs| evs[2]["ts"] = json!("soon"),
            "no finite number \"ts\"",
        ),
        (|evs| evs[2]["dur"] = json!(-1.0), "negative \"dur\""),
        (
            |evs| evs[2]["pid"] = json!("zero"),
            "\"pid\" must be an integer",
        ),
        (
            |evs| evs[6]["args"] = json!({ "v": "high" }),
            "counter arg \"v\" is not a number",
        ),
        (|evs| evs[2]["ph"] = json!("B"), "unsupported phase"),
        (|evs| evs.push(json!(3)), "traceEvents[7] is not an object"),
    ];
    for (edit, want) in cases {
        let err = check(&edited(edit)).unwrap_err();
        assert!(err.contains(want), "{err:?} should mention {want:?}");
    }
}
