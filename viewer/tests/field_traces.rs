#![allow(clippy::unwrap_used)]
//! Issue 25: the viewer as the field's trace viewer. Traces PyTorch's and JAX's profilers wrote
//! open on the Files tab with their rows named as those tools name them and their counts;
//! every sub-row has a title; one time axis per kind of data; navigation as in Perfetto (W/S,
//! A/D, wheel, ctrl+wheel); the projector theme's timelines; pipeline traces read like the lab;
//! bare arrays get a message that fits them.

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use egui::epaint::Shape;
use egui::{Key, Modifiers, MouseWheelUnit};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gangway::trace::chrome::Dialect;
use gangway::trace::{Event, EventMeta};
use gangway_viewer::ViewerApp;
use gangway_viewer::files::{Loaded, OpenedTrace, open_bytes};
use gangway_viewer::timeline::{TimeAxis, TimelineData, TimelineState, timeline};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/traces")
        .join(name)
}

fn opened<'a>(h: &'a Harness<'static, ViewerApp>) -> &'a OpenedTrace {
    match &h.state().files.loaded {
        Some(Loaded::Trace(t)) => t,
        other => panic!("not a trace: {other:?}"),
    }
}

/// What the issue found: PyTorch's trace was refused whole ("needs a non-negative integer pid"),
/// and with its string-pid events removed showed one row "dev 10004 compute" over an axis from
/// "5312327 s". Now: its process and threads as the profiler named them, its counts, the
/// its instants and flows kept (issue 38: they were listed as not drawn), and an axis from 0.
#[test]
fn a_pytorch_profiler_trace_opens_with_its_rows_and_counts() {
    let h = common::open_in_app(&fixture("pytorch-mlp.json"), [1200.0, 700.0]);
    h.get_by_label("opened Chrome trace: 223 slices on 2 threads, 0 counter tracks");
    // Every flow point bound to its slice, both instants kept: nothing is left undrawn.
    h.get_by_label("261 trace events: M 8, X 223, f 14, i 2, s 14");
    assert_eq!(opened(&h).data.flows.len(), 14);
    assert_eq!(opened(&h).data.instants.len(), 2);
    let t = opened(&h);
    assert_eq!(t.dialect, Dialect::Foreign);
    let titles: Vec<&str> = t.data.row_titles.values().map(String::as_str).collect();
    assert_eq!(titles, ["thread 16108 (python)", "thread PyTorch Profiler"]);
    let per_row: Vec<usize> = t.data.tracks().iter().map(|t| t.events().len()).collect();
    assert_eq!(per_row, [222, 1]);
    // No legend of gangway's kinds: they mean nothing here.
    assert_eq!(h.query_all_by_label("host encode").count(), 0);

    let texts = common::painted_texts(&h.output().shapes);
    for title in [
        "python (pid 16108)",
        "thread 16108 (python)",
        "process Spans",
        "thread PyTorch Profiler",
        // Nested slices sit on sub-rows, each with its title.
        "   depth 1",
    ] {
        assert!(
            texts.iter().any(|t| t == title),
            "{title} not painted: {texts:?}"
        );
    }
    // The axis counts from the trace's start, not from 5319376 s.
    assert!(texts.iter().any(|t| t == "0 ms"), "{texts:?}");
    assert!(!texts.iter().any(|t| t.contains("5319")), "{texts:?}");
}

/// JAX's `*.trace.json.gz`: gzipped, integer ids past 2^31, rows ordered by its sort indices.
#[test]
fn a_jax_profiler_trace_opens_gzipped() {
    let h = common::open_in_app(&fixture("jax-mlp.trace.json.gz"), [1200.0, 700.0]);
    h.get_by_label("opened Chrome trace: 188 slices on 2 threads, 0 counter tracks");
    let t = opened(&h);
    let titles: Vec<&str> = t.data.row_titles.values().map(String::as_str).collect();
    assert_eq!(
        titles,
        [
            "python (tid 2547446150)",
            "tf_XLAPjRtCpuClient/3583329669373636408 (tid 1478635320)"
        ]
    );
    let per_row: Vec<usize> = t.data.tracks().iter().map(|t| t.events().len()).collect();
    assert_eq!(per_row, [73, 115]);
    assert!(
        t.phase_line().contains("not drawn: no phase 1"),
        "{}",
        t.phase_line()
    );
    let texts = common::painted_texts(&h.output().shapes);
    assert!(
        texts.iter().any(|t| t == "/host:CPU (pid 701)"),
        "{texts:?}"
    );
}

/// Counters (`C`) are tracks drawn under their process, with their name as the title.
#[test]
fn counters_are_drawn_as_tracks() {
    let text = r#"{"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "trainer"}},
        {"ph": "X", "name": "step", "cat": "op", "pid": 1, "tid": 1, "ts": 0, "dur": 50},
        {"ph": "C", "name": "memory", "pid": 1, "ts": 0, "args": {"MB": 10}},
        {"ph": "C", "name": "memory", "pid": 1, "ts": 25, "args": {"MB": 30}},
        {"ph": "C", "name": "queue", "pid": 2, "ts": 10, "args": {"value": 4}}
    ]}"#;
    let Loaded::Trace(t) = open_bytes(text.as_bytes(), "c.json").unwrap() else {
        panic!("not a trace");
    };
    let counters: Vec<(&str, Option<&str>, f64)> = t
        .data
        .counters
        .iter()
        .map(|c| (c.name.as_str(), c.group.as_deref(), c.max))
        .collect();
    assert_eq!(
        counters,
        [
            ("memory MB", Some("trainer (pid 1)"), 30.0),
            ("queue", Some("process 2"), 4.0)
        ]
    );
    let data = t.data.as_ref().clone();
    let mut h = Harness::builder().with_size([900.0, 300.0]).build_ui_state(
        |ui, (data, state): &mut (TimelineData, TimelineState)| {
            timeline(ui, "t", data, state);
        },
        (data, TimelineState::default()),
    );
    h.run();
    let texts = common::painted_texts(&h.output().shapes);
    for title in [
        "trainer (pid 1)",
        "memory MB",
        "process 2",
        "queue",
        "max 30",
    ] {
        assert!(texts.iter().any(|t| t == title), "{title}: {texts:?}");
    }
}

fn kernel(device: usize, name: &str, start: u64, end: u64) -> Event {
    EventMeta::kernel(device).event(name.into(), start, end)
}

fn timeline_harness(
    size: [f32; 2],
    data: TimelineData,
    state: TimelineState,
) -> Harness<'static, (TimelineData, TimelineState)> {
    Harness::builder()
        .with_size(size)
        .with_step_dt(1.0 / 60.0)
        .build_ui_state(
            |ui, (data, state): &mut (TimelineData, TimelineState)| {
                timeline(ui, "t", data, state);
            },
            (data, state),
        )
}

/// The tryout: the overflow sub-rows under a lane had no title.
#[test]
fn every_sub_row_has_a_title() {
    let data = TimelineData::from_events([
        kernel(0, "a", 0, 100),
        kernel(0, "b", 10, 90),
        kernel(0, "c", 20, 80),
    ]);
    assert_eq!(data.tracks()[0].row_count(), 3);
    let mut h = timeline_harness([800.0, 200.0], data, TimelineState::default());
    h.run();
    let texts = common::painted_texts(&h.output().shapes);
    for title in ["dev 0 compute", "   overlap 1", "   overlap 2"] {
        assert!(texts.iter().any(|t| t == title), "{title}: {texts:?}");
    }
}

/// One axis convention per kind: files (and the lab, and the comparison) from the data's
/// start, Live back from now. The tryout saw a re-opened live trace at "1000–1014 s".
#[test]
fn file_axes_count_from_the_trace_start() {
    const S: u64 = 1_000_000_000;
    let data = TimelineData::from_events(
        (0..14u64).map(|i| kernel(0, "k", 1_000 * S + i * S, 1_000 * S + i * S + S / 2)),
    );
    let mut h = timeline_harness([1_000.0, 200.0], data, TimelineState::default());
    h.run();
    let texts = common::painted_texts(&h.output().shapes);
    assert!(texts.iter().any(|t| t == "0 s"), "{texts:?}");
    assert!(texts.iter().any(|t| t == "10 s"), "{texts:?}");
    assert!(!texts.iter().any(|t| t.starts_with("100")), "{texts:?}");
    // The hover text says the same.
    let view = h.state().1.view.unwrap();
    let x = 158.0 + view.x_of((1_003 * S + S / 4) as f64);
    h.hover_at(egui::pos2(x, 8.0 + 18.0 + 11.0));
    h.run();
    h.get_by_label("start 3.00 s after the first event");

    // Live counts back from now.
    h.state_mut().1.axis = TimeAxis::BeforeNewest;
    h.remove_cursor();
    h.run();
    let texts = common::painted_texts(&h.output().shapes);
    assert!(texts.iter().any(|t| t == "now"), "{texts:?}");
}

/// A harness of many rows in a short widget: the rows scroll.
fn tall_timeline() -> Harness<'static, (TimelineData, TimelineState)> {
    let events =
        (0..30usize).flat_map(|d| (0..10u64).map(move |i| kernel(d, "k", i * 100, i * 100 + 60)));
    let mut h = timeline_harness(
        [900.0, 300.0],
        TimelineData::from_events(events),
        TimelineState::default(),
    );
    h.run();
    h
}

fn wheel(h: &mut Harness<'static, (TimelineData, TimelineState)>, dy: f32, modifiers: Modifiers) {
    h.hover_at(egui::pos2(500.0, 150.0));
    h.run();
    h.event(egui::Event::MouseWheel {
        unit: MouseWheelUnit::Point,
        delta: egui::vec2(0.0, dy),
        modifiers,
        phase: egui::TouchPhase::Move,
        source: egui::MouseWheelSource::Unknown,
    });
    // egui spreads a wheel's scroll over a few frames.
    h.run_steps(40);
}

/// The tryout: a plain wheel did nothing over a timeline. It scrolls its rows (the axis stays);
/// ctrl+wheel zooms.
#[test]
fn a_plain_wheel_scrolls_rows_and_ctrl_wheel_zooms() {
    let mut h = tall_timeline();
    let texts = common::painted_texts(&h.output().shapes);
    assert!(texts.iter().any(|t| t == "dev 0 compute"));
    assert!(
        !texts.iter().any(|t| t == "dev 29 compute"),
        "all 30 rows fit?"
    );
    let view = h.state().1.view.unwrap();
    wheel(&mut h, -2_000.0, Modifiers::NONE);
    assert!(
        h.state().1.scroll_y > 0.0,
        "the wheel did not scroll the rows"
    );
    assert_eq!(
        h.state().1.view.unwrap(),
        view,
        "a plain wheel changed the time view"
    );
    let texts = common::painted_texts(&h.output().shapes);
    assert!(texts.iter().any(|t| t == "dev 29 compute"), "{texts:?}");
    // The axis labels are still painted at the top.
    assert!(texts.iter().any(|t| t.ends_with(" ns")), "{texts:?}");

    wheel(&mut h, 200.0, Modifiers::COMMAND);
    let zoomed = h.state().1.view.unwrap();
    assert!(
        zoomed.ns_per_px < view.ns_per_px * 0.9,
        "{view:?} -> {zoomed:?}"
    );
}

/// W / S zoom about the pointer and A / D pan, while the pointer is over the timeline.
#[test]
fn wasd_zooms_and_pans() {
    let mut h = tall_timeline();
    let start = h.state().1.view.unwrap();
    // Left of the middle, so zooming about the pointer differs from zooming about the middle.
    h.hover_at(egui::pos2(300.0, 100.0));
    h.run();
    let hold = |h: &mut Harness<'static, (TimelineData, TimelineState)>, key: Key| {
        h.key_down(key);
        for _ in 0..30 {
            h.step();
        }
        h.key_up(key);
        h.run();
        h.state().1.view.unwrap()
    };
    let w = hold(&mut h, Key::W);
    assert!(w.ns_per_px < start.ns_per_px / 2.0, "W: {start:?} -> {w:?}");
    // The time under the pointer stays put: the point both views put at the same time is
    // the pointer's, about 300 − 158 px into the bars (the middle is about 370).
    let fixed = (w.start_ns - start.start_ns) / (start.ns_per_px - w.ns_per_px);
    assert!(
        (fixed - 142.0).abs() < 12.0,
        "{start:?} -> {w:?}: fixed at {fixed} px"
    );
    let s = hold(&mut h, Key::S);
    assert!(s.ns_per_px > w.ns_per_px * 2.0, "S: {w:?} -> {s:?}");
    let d = hold(&mut h, Key::D);
    assert!(
        d.start_ns > s.start_ns,
        "D shows later times: {s:?} -> {d:?}"
    );
    let a = hold(&mut h, Key::A);
    assert!(
        a.start_ns < d.start_ns,
        "A shows earlier times: {d:?} -> {a:?}"
    );
    // Away from the timeline, keys do nothing to it.
    h.remove_cursor();
    h.run();
    let away = hold(&mut h, Key::W);
    assert_eq!(away, a);
}

/// The tryout: in the projector theme the timelines were pale pastel on light grey with 12 px
/// labels. Now rows and labels grow with the theme's type.
#[test]
fn projector_timelines_are_larger() {
    let row_title_size = |projector: bool| {
        let mut h = Harness::builder().with_size([900.0, 300.0]).build_ui_state(
            move |ui, (data, state): &mut (TimelineData, TimelineState)| {
                gangway_viewer::theme::apply(ui.ctx(), projector);
                timeline(ui, "t", data, state);
            },
            (
                TimelineData::from_events([kernel(0, "k", 0, 100)]),
                TimelineState::default(),
            ),
        );
        h.run();
        h.run();
        let mut size = 0.0;
        for c in &h.output().shapes {
            if let Shape::Text(t) = &c.shape
                && t.galley.text() == "dev 0 compute"
            {
                size = t.galley.rect.height();
            }
        }
        (size, h.state().1.last_width)
    };
    let (screen, screen_w) = row_title_size(false);
    let (projector, projector_w) = row_title_size(true);
    assert!(
        screen > 0.0 && projector >= screen * 1.35,
        "{screen} vs {projector}"
    );
    // The label column grows with the type, so the bar area is narrower.
    assert!(projector_w < screen_w, "{projector_w} vs {screen_w}");
}

/// A folded run's trace is titled by what its lanes are ([`gangway::trace::Track`]'s kind):
/// here gangs of devices (MoE stages folded onto pairs), not stages, whatever the labels say.
#[test]
fn folded_pipeline_traces_are_titled_by_their_lanes() {
    use gangway::pipeline::{Costs, Fold, Schedule, ScheduleKind, simulate_folded};
    let schedule = Schedule::new(ScheduleKind::OneFOneB, 4, 4, 1).unwrap();
    let costs = Costs::compute_only(1_000_000, 2_000_000, 0);
    let sim = simulate_folded(&schedule, &costs, &[], Fold::RoundRobin { devices: 2 }).unwrap();
    use gangway::trace::{Track, TrackKind};
    // Labels that name no kind: the title comes from the tracks' kind alone.
    let tracks = [
        Track::holding(0, TrackKind::Gang, vec![0, 2], "#0 a + #1 b"),
        Track::holding(1, TrackKind::Gang, vec![1, 3], "#2 c + #3 d"),
    ];
    let json = gangway::trace::chrome::to_string(&sim.events, &tracks);
    let Loaded::Trace(t) = open_bytes(json.as_bytes(), "folded.json").unwrap() else {
        panic!("not a trace");
    };
    assert!(t.bubble.is_some());
    let data = t.data.as_ref().clone();
    let labels: Vec<String> = data.tracks().iter().map(|t| data.track_label(t)).collect();
    assert!(
        labels.contains(&"gang 0 compute".to_string())
            && labels.contains(&"gang 1 compute".to_string())
            && labels.iter().all(|l| l.starts_with("gang ")),
        "{labels:?}"
    );
}

/// Pipeline traces opened from Files are titled by stage (their tracks say so) and their blocks
/// numbered by microbatch, as in the lab (the tryout saw "dev N" and no numbers).
#[test]
fn pipeline_traces_read_like_the_lab() {
    use gangway::pipeline::{Costs, Schedule, ScheduleKind, simulate};
    use gangway::trace::{Track, TrackKind};
    let schedule = Schedule::new(ScheduleKind::OneFOneB, 2, 2, 1).unwrap();
    let costs = Costs::compute_only(1_000_000, 2_000_000, 0);
    let sim = simulate(&schedule, &costs).unwrap();
    let tracks: Vec<Track> = (0..2)
        .map(|s| Track::holding(s, TrackKind::Stage, vec![s], format!("stage {s}")))
        .collect();
    let json = gangway::trace::chrome::to_string(&sim.events, &tracks);
    let Loaded::Trace(t) = open_bytes(json.as_bytes(), "p.json").unwrap() else {
        panic!("not a trace");
    };
    assert!(t.bubble.is_some());
    let data = t.data.as_ref().clone();
    let labels: Vec<String> = data.tracks().iter().map(|t| data.track_label(t)).collect();
    assert!(
        labels.iter().all(|l| l.starts_with("stage "))
            && labels.contains(&"stage 0 compute".to_string())
            && labels.contains(&"stage 1 compute".to_string()),
        "{labels:?}"
    );
    let mut h = timeline_harness([1_200.0, 200.0], data, TimelineState::default());
    h.run();
    let texts = common::painted_texts(&h.output().shapes);
    // Microbatches 0 and 1 of the file, counted from 1 as the lab counts them.
    for block in ["F1", "F2", "B1", "B2"] {
        assert!(texts.iter().any(|t| t == block), "{block}: {texts:?}");
    }
}

/// The tryout: any JSON array that was not a trace got "a gangway bench result array from
/// before schema version 1".
#[test]
fn bare_arrays_get_messages_that_fit() {
    let told = |text: &str| match open_bytes(text.as_bytes(), "a.json") {
        Ok(l) => l.summary(),
        Err(e) => e,
    };
    // Without gangway's marker, an empty array is anyone's empty trace.
    assert_eq!(
        told("[]"),
        "Chrome trace: 0 slices on 0 threads, 0 counter tracks"
    );
    assert_eq!(
        told(r#"[{"name": "x", "ph": "X", "cat": "op", "pid": 1, "tid": 1, "ts": 0, "dur": 1}]"#),
        "Chrome trace: 1 slices on 1 threads, 0 counter tracks"
    );
    let other = told(r#"[{"name": "x"}, 2]"#);
    assert!(other.contains("not of Chrome trace events"), "{other}");
    assert!(!other.contains("schema"), "{other}");
    let old = told(r#"[{"suite": "matmul", "case": "square 256"}]"#);
    assert!(old.contains("before schema version 1"), "{old}");
    // Chrome's JSON Array Format may leave the array open.
    assert_eq!(
        told(r#"[{"name": "x", "ph": "X", "cat": "op", "pid": 1, "tid": 1, "ts": 0, "dur": 1},"#),
        "Chrome trace: 1 slices on 1 threads, 0 counter tracks"
    );
}

/// Issue 25: a 1M-event trace of another tool (PyTorch-style: string and OS-sized ids,
/// `cat`s of its own, a flow on every 10th slice, args on every slice) opens about as fast as a
/// gangway trace of that size. Both are timed here, one after the other; the bound on their
/// ratio is loose for a busy 2-core machine.
#[test]
fn a_million_event_foreign_trace_opens_about_as_fast_as_a_gangway_one() {
    let (threads, per) = (16usize, 62_500usize);
    let mut text = String::from("{\"traceEvents\": [\n");
    text.push_str(
        r#"{"ph": "M", "name": "process_name", "pid": 4123456, "args": {"name": "python"}}"#,
    );
    for t in 0..threads {
        let tid = 4_123_456 + t;
        text.push_str(&format!(
            ",\n{{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 4123456, \"tid\": {tid}, \"args\": {{\"name\": \"worker {t}\"}}}}"
        ));
    }
    for i in 0..per {
        for t in 0..threads {
            let tid = 4_123_456 + t;
            let ts = (i * 10) as f64 + 0.25;
            text.push_str(&format!(
                ",\n{{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::op{}\", \"pid\": 4123456, \"tid\": {tid}, \"ts\": {ts:.3}, \"dur\": 6.5, \"args\": {{\"External id\": {i}, \"Ev Idx\": {i}}}}}",
                i % 50
            ));
            if i % 10 == 0 && t % 2 == 0 {
                text.push_str(&format!(
                    ",\n{{\"ph\": \"s\", \"id\": {}, \"pid\": 4123456, \"tid\": {tid}, \"ts\": {:.3}, \"cat\": \"fwdbwd\", \"name\": \"fwdbwd\"}}",
                    i * threads + t,
                    ts + 1.0
                ));
            }
        }
    }
    text.push_str("\n]}");
    let gangway_text = gangway::trace::chrome::to_string(
        &(0..per)
            .flat_map(|i| {
                (0..threads).map(move |t| {
                    EventMeta::kernel(t).program(1).event(
                        format!("op{}", i % 50),
                        i as u64 * 10_000,
                        i as u64 * 10_000 + 6_500,
                    )
                })
            })
            .collect::<Vec<_>>(),
        &[],
    );
    let time = |text: &str| {
        let t0 = Instant::now();
        let loaded = open_bytes(text.as_bytes(), "1m.json").unwrap();
        let took = t0.elapsed();
        let Loaded::Trace(t) = loaded else {
            panic!("not a trace")
        };
        assert_eq!(t.data.len(), threads * per);
        (took, t)
    };
    let (foreign, t) = time(&text);
    assert_eq!(t.dialect, Dialect::Foreign);
    assert_eq!(t.data.row_titles.len(), threads);
    assert_eq!(
        t.data.row_titles.get(&3).map(String::as_str),
        Some("worker 3 (tid 4123459)")
    );
    let flows = t.data.all_events().filter(|e| e.flow.is_some()).count();
    assert_eq!(flows, per / 10 * threads / 2);
    drop(t);
    let (own, t) = time(&gangway_text);
    assert_eq!(t.dialect, Dialect::Gangway);
    println!(
        "1M-event traces: foreign ({:.0} MB) open_bytes {:.0} ms, gangway ({:.0} MB) {:.0} ms",
        text.len() as f64 / 1e6,
        foreign.as_secs_f64() * 1e3,
        gangway_text.len() as f64 / 1e6,
        own.as_secs_f64() * 1e3
    );
    assert!(
        foreign.as_secs_f64() < 2.5 * own.as_secs_f64() + 1.0,
        "foreign {foreign:?} vs gangway {own:?}"
    );
}
