#![allow(clippy::unwrap_used)]
//! Issue 38: an opened trace is drawn as Perfetto draws it and never overwritten. Saving the
//! opened trace writes the bytes that were read, to a new name by default, and replaces an
//! existing file only once confirmed; counters are painted; slices that start together nest as
//! Perfetto nests them; flows are arrows (with a toggle), instants markers, and slices coloured
//! by name; a plain chrome://tracing-style trace with pid 1 is read as anyone's. Fixtures no
//! one here wrote: PyTorch's, JAX's, Chromium's own trace, and the npm tracer webpack uses.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use egui::Color32;
use egui::epaint::Shape;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gangway::trace::chrome::Dialect;
use gangway_viewer::files::{Loaded, OpenedTrace, SaveWhat, copy_name, open, open_bytes};
use gangway_viewer::timeline::{BarKind, TimelineData, TimelineState, timeline};

const FIXTURES: [&str; 5] = [
    "pytorch-mlp.json",
    "jax-mlp.trace.json.gz",
    "node-chrome-trace-event.json",
    "chromium-startup.json.gz",
    "viztracer-counters.json",
];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/traces")
        .join(name)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gangway-viewer-trace-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn trace_of(loaded: Loaded) -> OpenedTrace {
    match loaded {
        Loaded::Trace(t) => *t,
        Loaded::Bench(_) => panic!("not a trace"),
    }
}

fn opened<'a>(h: &'a Harness<'static, gangway_viewer::ViewerApp>) -> &'a OpenedTrace {
    h.state().files.loaded.as_ref().unwrap().trace().unwrap()
}

/// Everything the viewer keeps of a trace, event by event, for comparing two opens.
fn same_trace(a: &OpenedTrace, b: &OpenedTrace, what: &str) {
    let events = |t: &OpenedTrace| t.data.all_events().cloned().collect::<Vec<_>>();
    let (ea, eb) = (events(a), events(b));
    assert_eq!(ea.len(), eb.len(), "{what}: event counts");
    for (i, (x, y)) in ea.iter().zip(&eb).enumerate() {
        assert_eq!(x, y, "{what}: event {i}");
    }
    assert_eq!(a.data.counters, b.data.counters, "{what}: counters");
    assert_eq!(a.data.instants, b.data.instants, "{what}: instants");
    assert_eq!(a.data.flows, b.data.flows, "{what}: flows");
    assert_eq!(a.data.row_titles, b.data.row_titles, "{what}: rows");
    assert_eq!(a.phases, b.phases, "{what}: phases");
    assert_eq!(a.not_drawn, b.not_drawn, "{what}: not drawn");
    assert_eq!(a.dialect, b.dialect, "{what}: dialect");
}

/// Clicks Save and waits for the save (or the question it asks).
fn click_save(h: &mut Harness<'static, gangway_viewer::ViewerApp>) {
    h.get_by_label("Save").click();
    h.step();
    assert!(h.state_mut().files.wait_idle(Duration::from_secs(60)));
    h.run();
}

/// What the issue found: "Save" with "opened trace" chosen rewrote the opened file itself in
/// gangway's dialect (92 events became 343, counters replaced, instants dropped). Now each
/// fixture saves to a new name by default, byte for byte what was read, and reopens to the
/// same events, counters, instants, flows and rows; saving onto the source asks first, and
/// Cancel keeps it.
#[test]
fn saving_an_opened_trace_writes_what_was_read_and_never_over_it_unasked() {
    let dir = temp_dir("save");
    for name in FIXTURES {
        let source = dir.join(name);
        std::fs::copy(fixture(name), &source).unwrap();
        let original = std::fs::read(&source).unwrap();
        let mut h = common::open_in_app(&source, [1200.0, 800.0]);
        let target = PathBuf::from(&h.state().files.save_path);
        assert_ne!(target, std::fs::canonicalize(&source).unwrap(), "{name}");
        assert!(!target.exists(), "{name}: the default target exists");
        h.get_by_label("opened trace").click();
        h.run();
        assert_eq!(h.state().files.save_what, SaveWhat::Opened);
        click_save(&mut h);
        assert!(
            matches!(&h.state().files.message, Some(Ok(m)) if m.contains("as it was read")),
            "{name}: {:?}",
            h.state().files.message
        );
        assert_eq!(std::fs::read(&target).unwrap(), original, "{name}: bytes");
        assert_eq!(std::fs::read(&source).unwrap(), original, "{name}: source");
        let back = trace_of(open(&target).unwrap());
        same_trace(opened(&h), &back, name);

        // Onto the opened file itself: a question, and Cancel keeps the file.
        h.state_mut().files.save_path = source.display().to_string();
        h.run();
        click_save(&mut h);
        assert_eq!(h.state().files.confirm_overwrite.as_deref(), Some(&*source));
        h.get_by_label_contains("exists. Replace it?");
        h.get_by_label("Cancel").click();
        h.run();
        assert!(h.state().files.confirm_overwrite.is_none());
        assert_eq!(std::fs::read(&source).unwrap(), original, "{name}: kept");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every phase the importer reads goes through a save and comes back: slices (`X`, `B`/`E`),
/// instants of each scope, flow points (`s`/`t`/`f`), counters, metadata, args and categories
/// (kept in the bytes), and what it counts but does not draw.
#[test]
fn every_phase_round_trips_through_a_save() {
    let text = r#"{"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 4, "args": {"name": "trainer"}},
        {"ph": "M", "name": "thread_name", "pid": 4, "tid": 9, "args": {"name": "main"}},
        {"ph": "M", "name": "thread_sort_index", "pid": 4, "tid": 9, "args": {"sort_index": 1}},
        {"ph": "X", "name": "step", "cat": "train", "pid": 4, "tid": 9, "ts": 0, "dur": 100,
         "args": {"batch": 32, "note": "first"}},
        {"ph": "B", "name": "forward", "cat": "train", "pid": 4, "tid": 9, "ts": 0},
        {"ph": "E", "pid": 4, "tid": 9, "ts": 40},
        {"ph": "s", "id": 1, "name": "hand-off", "cat": "flow", "pid": 4, "tid": 9, "ts": 30},
        {"ph": "X", "name": "load", "cat": "io", "pid": 4, "tid": 10, "ts": 45, "dur": 20},
        {"ph": "t", "id": 1, "name": "hand-off", "cat": "flow", "pid": 4, "tid": 10, "ts": 50},
        {"ph": "X", "name": "apply", "cat": "io", "pid": 5, "tid": 1, "ts": 70, "dur": 20},
        {"ph": "f", "id": 1, "bp": "e", "name": "hand-off", "cat": "flow", "pid": 5, "tid": 1,
         "ts": 75},
        {"ph": "i", "name": "mark", "s": "t", "pid": 4, "tid": 9, "ts": 10},
        {"ph": "I", "name": "old mark", "pid": 4, "tid": 9, "ts": 11},
        {"ph": "i", "name": "proc mark", "s": "p", "pid": 5, "tid": 1, "ts": 12},
        {"ph": "i", "name": "global mark", "s": "g", "pid": 4, "tid": 9, "ts": 13},
        {"ph": "C", "name": "memory", "pid": 4, "ts": 0, "args": {"MB": 10, "pinned": 2}},
        {"ph": "C", "name": "memory", "pid": 4, "ts": 50, "args": {"MB": 30, "pinned": 3}},
        {"ph": "b", "name": "request", "id": 7, "cat": "net", "pid": 4, "tid": 9, "ts": 5},
        {"ph": "e", "name": "request", "id": 7, "cat": "net", "pid": 4, "tid": 9, "ts": 95},
        {"ph": "R", "name": "navigationStart", "pid": 4, "tid": 9, "ts": 1}
    ], "metadata": {"tool": "hand-written"}}"#;
    let dir = temp_dir("phases");
    let source = dir.join("all-phases.json");
    std::fs::write(&source, text).unwrap();
    let first = trace_of(open(&source).unwrap());
    assert_eq!(first.data.len(), 4);
    assert_eq!(first.data.instants.len(), 4);
    assert_eq!(first.data.counters.len(), 2);
    assert_eq!(first.data.flows.len(), 2, "s → t → f: two arrows");
    let mut h = common::open_in_app(&source, [1000.0, 600.0]);
    h.state_mut().files.save_what = SaveWhat::Opened;
    h.run();
    click_save(&mut h);
    let target = dir.join("all-phases-copy.json");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), text);
    same_trace(&first, &trace_of(open(&target).unwrap()), "all phases");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A timeline saved over an existing file replaces it only after "Overwrite"; the next free
/// name is `-copy-2` once `-copy` exists.
#[test]
fn overwriting_takes_a_confirmation() {
    let dir = temp_dir("overwrite");
    let taken = dir.join("lab.json");
    std::fs::write(&taken, b"keep me").unwrap();
    let mut h = common::harness([1200.0, 800.0]);
    h.run();
    h.get_by_label("Files").click();
    h.run();
    let files = &mut h.state_mut().files;
    files.save_what = SaveWhat::BubbleLab;
    files.save_path = taken.display().to_string();
    h.run();
    click_save(&mut h);
    assert_eq!(std::fs::read(&taken).unwrap(), b"keep me");
    assert!(h.state().files.confirm_overwrite.is_some());
    h.get_by_label("Overwrite").click();
    h.step();
    assert!(h.state_mut().files.wait_idle(Duration::from_secs(60)));
    h.run();
    let written = std::fs::read(&taken).unwrap();
    assert!(written.starts_with(b"{\"otherData\""), "not replaced");
    let back = trace_of(open(&taken).unwrap());
    assert_eq!(back.dialect, Dialect::Gangway);

    std::fs::write(dir.join("t-copy.json"), b"x").unwrap();
    assert_eq!(copy_name(&dir.join("t.json")), dir.join("t-copy-2.json"));
    assert_eq!(
        copy_name(&dir.join("t.trace.json.gz")),
        dir.join("t.trace-copy.json.gz")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The npm tracer webpack uses, run as process 1 (as in a container): pid 1, tid 1, no `cat`,
/// no metadata. The old reader took it for gangway's own ("dev 1 host"); it is one thread of
/// one process, with its instants.
#[test]
fn a_plain_trace_with_pid_1_is_read_as_anyones() {
    let t = trace_of(open(&fixture("node-chrome-trace-event.json")).unwrap());
    assert_eq!(t.dialect, Dialect::Foreign);
    let titles: Vec<&str> = t.data.row_titles.values().map(String::as_str).collect();
    assert_eq!(titles, ["thread 1"]);
    assert_eq!(t.data.group_of(0), Some("process 1"));
    assert_eq!(
        t.data.len(),
        12,
        "3 steps of step, forward, backward, optimizer"
    );
    assert_eq!(t.data.instants.len(), 3);
    assert!(t.data.colored_by_name());
}

/// VizTracer's counters (two series of one `C` name) and its instants of every scope.
#[test]
fn viztracer_counters_and_instants_are_kept() {
    let t = trace_of(open(&fixture("viztracer-counters.json")).unwrap());
    let counters: Vec<(&str, usize)> = t
        .data
        .counters
        .iter()
        .map(|c| (c.name.as_str(), c.points.len()))
        .collect();
    assert_eq!(
        counters,
        [("memory allocated_mb", 9), ("memory reserved_mb", 7)]
    );
    let global = t.data.instants.iter().filter(|i| i.track.is_none()).count();
    assert_eq!((t.data.instants.len(), global), (5, 1));
    assert!(t.not_drawn.is_empty(), "{:?}", t.not_drawn);
}

fn render_harness(
    size: [f32; 2],
    data: TimelineData,
    state: TimelineState,
    render: bool,
) -> Harness<'static, (TimelineData, TimelineState)> {
    let mut builder = Harness::builder().with_size(size).with_step_dt(1.0 / 60.0);
    if render {
        builder = builder.wgpu();
    }
    builder.build_ui_state(
        |ui, (data, state): &mut (TimelineData, TimelineState)| {
            timeline(ui, "t", data, state);
        },
        (data, state),
    )
}

fn loaded_data(text: &str) -> TimelineData {
    trace_of(open_bytes(text.as_bytes(), "t.json").unwrap())
        .data
        .as_ref()
        .clone()
}

/// What the issue found: counter rows had titles and hover values, but their pixels were the
/// background only (the gutter fill painted over them). Now the counter's colour is painted.
#[test]
fn counters_are_painted() {
    let data = loaded_data(
        r#"[{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "trainer"}},
            {"ph": "X", "name": "step", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
            {"ph": "C", "name": "memory", "pid": 1, "ts": 0, "args": {"MB": 10}},
            {"ph": "C", "name": "memory", "pid": 1, "ts": 40, "args": {"MB": 30}},
            {"ph": "C", "name": "memory", "pid": 1, "ts": 80, "args": {"MB": 5}}]"#,
    );
    let line = BarKind::named("memory MB").color();
    assert_ne!(line, BarKind::named("step").color(), "pick names apart");
    if !common::can_render("counters_are_painted") {
        return;
    }
    let mut h = render_harness([900.0, 200.0], data, TimelineState::default(), true);
    h.run();
    let image = h.render().unwrap();
    let near = |p: &image::Rgba<u8>, c: Color32| {
        (i32::from(p[0]) - i32::from(c.r())).abs() <= 8
            && (i32::from(p[1]) - i32::from(c.g())).abs() <= 8
            && (i32::from(p[2]) - i32::from(c.b())).abs() <= 8
    };
    let painted = image.pixels().filter(|p| near(p, line)).count();
    assert!(
        painted > 200,
        "{painted} pixels of the counter's line colour"
    );
}

/// What the issue found: a parent and its child starting at the same time were drawn with the
/// parent under its child (the JAX fixture's outermost call deepest). Perfetto makes the longer
/// `X` the parent, and the `B` opened first.
#[test]
fn slices_that_start_together_nest_as_in_perfetto() {
    let data = loaded_data(
        r#"[{"ph": "X", "name": "forward", "pid": 1, "tid": 1, "ts": 0, "dur": 40},
            {"ph": "X", "name": "step", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
            {"ph": "B", "name": "outer", "pid": 1, "tid": 2, "ts": 0},
            {"ph": "B", "name": "inner", "pid": 1, "tid": 2, "ts": 0},
            {"ph": "E", "pid": 1, "tid": 2, "ts": 50},
            {"ph": "E", "pid": 1, "tid": 2, "ts": 50}]"#,
    );
    let depth = |name: &str| {
        data.tracks()
            .iter()
            .find_map(|t| {
                let at = t.events().iter().position(|e| e.name == name)?;
                Some(t.rows()[at])
            })
            .unwrap()
    };
    assert_eq!((depth("step"), depth("forward")), (0, 1));
    assert_eq!((depth("outer"), depth("inner")), (0, 1));
    let mut h = render_harness([900.0, 300.0], data, TimelineState::default(), false);
    h.run();
    let at = common::painted_text_positions(&h.output().shapes);
    let y = |name: &str| at.iter().find(|(t, _)| t == name).unwrap().1.y;
    assert!(y("step") < y("forward"), "{at:?}");
    assert!(y("outer") < y("inner"), "{at:?}");

    // Every fixture: a slice that starts with another and holds it sits above it.
    for name in FIXTURES {
        let t = trace_of(open(&fixture(name)).unwrap());
        for track in t.data.tracks() {
            let (events, rows) = (track.events(), track.rows());
            for (i, a) in events.iter().enumerate() {
                for (j, b) in events.iter().enumerate().skip(i + 1) {
                    if b.start_ns != a.start_ns {
                        break;
                    }
                    if b.clamped_end_ns() > a.clamped_end_ns() {
                        panic!("{name}: {} holds {} but comes later", b.name, a.name);
                    }
                    assert!(rows[j] > rows[i] || b.duration_ns() == 0, "{name}");
                }
            }
        }
    }
}

/// Flows are arrows (a curve from the sending slice's end to the receiving slice's start), a
/// slice's second flow too, that a checkbox turns off; instants are markers; slices are coloured by name, the same name the
/// same colour.
#[test]
fn flows_instants_and_name_colours_are_painted() {
    let data = loaded_data(
        r#"[{"ph": "X", "name": "send", "pid": 1, "tid": 1, "ts": 0, "dur": 30},
            {"ph": "X", "name": "recv", "pid": 1, "tid": 2, "ts": 50, "dur": 30},
            {"ph": "X", "name": "send", "pid": 1, "tid": 2, "ts": 85, "dur": 10},
            {"ph": "X", "name": "apply", "pid": 1, "tid": 1, "ts": 85, "dur": 10},
            {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 10},
            {"ph": "f", "id": 1, "bp": "e", "pid": 1, "tid": 2, "ts": 50},
            {"ph": "s", "id": 2, "pid": 1, "tid": 2, "ts": 60},
            {"ph": "f", "id": 2, "bp": "e", "pid": 1, "tid": 1, "ts": 90},
            {"ph": "i", "name": "mark", "pid": 1, "tid": 1, "ts": 40},
            {"ph": "i", "name": "everywhere", "s": "g", "pid": 1, "tid": 1, "ts": 60}]"#,
    );
    // `recv` receives one flow and sends another: both are arrows.
    assert_eq!(data.flows.len(), 2);
    assert_eq!(
        data.flows[0].from.ns, 30_000,
        "from the sending slice's end"
    );
    assert_eq!(
        (data.flows[1].from.ns, data.flows[1].to.ns),
        (80_000, 85_000)
    );
    assert_eq!(data.flows[0].to.ns, 50_000);
    let mut h = render_harness([900.0, 200.0], data, TimelineState::default(), false);
    h.run();
    let shapes = common::painted_shapes(&h.output().shapes);
    let curves = |shapes: &[Shape]| {
        shapes
            .iter()
            .filter(|s| matches!(s, Shape::CubicBezier(_)))
            .count()
    };
    assert_eq!(curves(&shapes), 2);
    // Instant chevrons: closed three-point paths (the flow's head is one too).
    let triangles = shapes
        .iter()
        .filter(|s| matches!(s, Shape::Path(p) if p.closed && p.points.len() == 3))
        .count();
    assert_eq!(triangles, 4, "two instants and two arrow heads");
    // A global instant is a line down every row.
    assert!(
        shapes
            .iter()
            .any(|s| matches!(s, Shape::LineSegment { points, .. }
        if (points[0].x - points[1].x).abs() < 0.01 && points[1].y - points[0].y > 40.0))
    );
    // Name colours: both "send" blocks alike, "recv" another.
    let fills: Vec<Color32> = shapes
        .iter()
        .filter_map(|s| match s {
            Shape::Rect(r) if r.rect.height() > 10.0 && r.rect.height() < 30.0 => Some(r.fill),
            _ => None,
        })
        .collect();
    let send = BarKind::named("send").color();
    let recv = BarKind::named("recv").color();
    assert_ne!(send, recv);
    assert_eq!(fills.iter().filter(|&&c| c == send).count(), 2, "{fills:?}");
    assert_eq!(fills.iter().filter(|&&c| c == recv).count(), 1, "{fills:?}");

    h.state_mut().1.show_flows = false;
    h.run();
    assert_eq!(curves(&common::painted_shapes(&h.output().shapes)), 0);
}

/// The Files tab's checkbox turns flow arrows off and on, for an opened trace with flows.
#[test]
fn the_flow_toggle_is_on_the_files_tab() {
    let mut h = common::open_in_app(&fixture("chromium-startup.json.gz"), [1400.0, 900.0]);
    assert!(!opened(&h).data.flows.is_empty());
    // Issue 57's tryout found 70 of its 80 threads undrawn, those with instants only: every
    // thread with a slice or a thread-scoped instant is a row (79; the one left has a global
    // instant alone, drawn across every row).
    let data = &opened(&h).data;
    assert_eq!(data.row_titles.len(), 79);
    // And every one of them is drawn: each thread instant's track is a row of the timeline.
    let rows: std::collections::BTreeSet<_> =
        data.tracks().iter().map(|t| (t.device, t.lane)).collect();
    let marked: std::collections::BTreeSet<_> =
        data.instants.iter().filter_map(|i| i.track).collect();
    assert!(marked.len() >= 70, "{} tracks with instants", marked.len());
    assert!(marked.is_subset(&rows), "{:?}", marked.difference(&rows));
    assert_eq!(rows.len(), 79);
    assert!(h.state().files.timeline.show_flows);
    h.get_by_label_contains("flow arrows").click();
    h.run();
    assert!(!h.state().files.timeline.show_flows);
}

/// Enter in the path field opens the file, as the Open button does.
#[test]
fn enter_in_the_path_field_opens() {
    let mut h = common::harness([1000.0, 600.0]);
    h.run();
    h.get_by_label("Files").click();
    h.run();
    h.state_mut().files.path = fixture("viztracer-counters.json").display().to_string();
    h.run();
    h.get_by_label("file path").focus();
    h.run();
    h.key_press(egui::Key::Enter);
    h.step();
    assert!(h.state_mut().files.wait_idle(Duration::from_secs(60)));
    h.run();
    assert!(
        h.state().files.loaded.is_some(),
        "{:?}",
        h.state().files.message
    );
}

/// Dragging far past either end of the trace stops with the data still in view: at most a
/// tenth of the view beyond its ends.
#[test]
fn panning_stops_at_the_traces_ends() {
    let data = loaded_data(
        r#"[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
            {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 900, "dur": 100}]"#,
    );
    let span = data.span().unwrap();
    let mut h = render_harness([800.0, 200.0], data, TimelineState::default(), false);
    h.run();
    let y = 8.0 + 18.0 + 11.0;
    let drag = |h: &mut Harness<'static, (TimelineData, TimelineState)>, from: f32, to: f32| {
        h.hover_at(egui::pos2(from, y));
        h.run();
        h.drag_at(egui::pos2(from, y));
        h.run();
        h.hover_at(egui::pos2(to, y));
        h.run();
        h.drop_at(egui::pos2(to, y));
        h.run();
    };
    let shown = |h: &Harness<'static, (TimelineData, TimelineState)>| {
        let s = &h.state().1;
        let v = s.view.unwrap();
        (v.start_ns, v.ns_per_px * f64::from(s.last_width))
    };
    // Dragged right, far: the view starts at most a tenth of its width before the trace.
    drag(&mut h, 160.0, 790.0);
    drag(&mut h, 160.0, 790.0);
    let (start, width) = shown(&h);
    assert!(
        start >= span.start as f64 - width * 0.1 - 1.0,
        "view from {start} (width {width}) for a trace starting at {}",
        span.start
    );
    // Dragged left, far: it ends at most a tenth of its width after the trace.
    for _ in 0..3 {
        drag(&mut h, 790.0, 160.0);
    }
    let (start, width) = shown(&h);
    assert!(
        start + width <= span.end as f64 + width * 0.1 + 1.0,
        "view to {} for a trace ending at {}",
        start + width,
        span.end
    );
}
