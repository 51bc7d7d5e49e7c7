#![allow(clippy::unwrap_used)]
//! Small rendered snapshots (wgpu renderer; lavapipe in CI), compared with tolerant thresholds,
//! and the README's and the book's screenshots. Skipped with a message when no adapter can render.

mod common;

use egui_kittest::kittest::Queryable;
use egui_kittest::{Harness, SnapshotOptions};
use gangway::trace::EventMeta;
use gangway_viewer::ViewerApp;
use gangway_viewer::timeline::{TimelineData, TimelineState, legend, timeline};

fn tolerant() -> SnapshotOptions {
    // A little slack for anti-aliasing differences between drivers; layout changes fail.
    SnapshotOptions::new().threshold(1.0).max_failed_pixels(60)
}

fn app_harness(size: [f32; 2]) -> Harness<'static, ViewerApp> {
    Harness::builder()
        .with_size(size)
        .wgpu()
        .build_ui_state(|ui, app: &mut ViewerApp| app.show(ui), common::app())
}

#[test]
fn snapshot_bubble_lab_gpipe() {
    if !common::can_render("snapshot_bubble_lab_gpipe") {
        return;
    }
    let mut h = app_harness([900.0, 560.0]);
    h.get_by_label("GPipe").click();
    h.run();
    h.state_mut().lab.params.stages = 3;
    h.state_mut().lab.params.microbatches = 4;
    h.run();
    h.remove_cursor();
    h.run();
    h.snapshot_options("bubble_lab_gpipe", &tolerant());
}

/// 1F1B, p = 4, m = 4, folded round robin onto 2 devices: two lanes named "device", each
/// device's two stages shaded apart.
#[test]
fn snapshot_bubble_lab_folded() {
    if !common::can_render("snapshot_bubble_lab_folded") {
        return;
    }
    let mut h = app_harness([900.0, 560.0]);
    h.get_by_label("1F1B").click();
    h.run();
    let p = &mut h.state_mut().lab.params;
    p.microbatches = 4;
    p.devices = Some(2);
    p.round_robin = true;
    h.run();
    h.remove_cursor();
    h.run();
    h.snapshot_options("bubble_lab_folded", &tolerant());
}

#[test]
fn snapshot_timeline_kinds_and_idle() {
    if !common::can_render("snapshot_timeline_kinds_and_idle") {
        return;
    }
    use gangway::trace::PipelineOp::{Backward, Forward, WeightGrad};
    let mut events = Vec::new();
    for (i, (name, op)) in [
        ("F0", Some(Forward)),
        ("B0", Some(Backward)),
        ("W0", Some(WeightGrad)),
        ("stage 1", None),
        ("all_to_all", None),
    ]
    .into_iter()
    .enumerate()
    {
        let t = i as u64 * 3_000;
        let meta = EventMeta::kernel(0).microbatch(0);
        let meta = op.map_or(meta, |op| meta.op(op));
        events.push(meta.event(name.into(), t, t + 2_000));
    }
    events.push(EventMeta::host_encode(0).event("encode".into(), 0, 1_000));
    events.push(EventMeta::wait(0).event("wait".into(), 1_000, 6_000));
    events.push(EventMeta::transfer(1).event("send".into(), 7_000, 9_500));
    let data = TimelineData::from_events(events);
    let mut h = Harness::builder()
        .with_size([640.0, 150.0])
        .wgpu()
        .build_ui_state(
            |ui, (data, state): &mut (TimelineData, TimelineState)| {
                legend(ui);
                timeline(ui, "t", data, state);
            },
            (data, TimelineState::default()),
        );
    h.run();
    h.snapshot_options("timeline_kinds", &tolerant());
}

/// Renders the README screenshot: the bubble lab, 1F1B with p = 4, m = 8, stepped into the
/// schedule. Written to `assets/viewer.png` when `GANGWAY_WRITE_SCREENSHOT=1`, else to the
/// target directory (so CI does not rewrite tracked files).
#[test]
fn readme_screenshot() {
    if !common::can_render("readme_screenshot") {
        return;
    }
    let mut h = app_harness([1280.0, 800.0]);
    h.get_by_label("1F1B").click();
    h.run();
    h.state_mut().lab.player.go_to_op(19);
    h.run();
    h.remove_cursor();
    h.run();
    save_screenshot(&mut h, "viewer.png", [1280, 800]);
}

/// The viewer guide's lecture screenshot: the four schedules stacked on one time axis, in the
/// projector theme, animated to the middle of the step.
#[test]
fn readme_projector_comparison_screenshot() {
    if !common::can_render("readme_projector_comparison_screenshot") {
        return;
    }
    let mut h = app_harness([1400.0, 1500.0]);
    h.key_press(egui::Key::P);
    h.run();
    h.get_by_label("compare").click();
    h.run();
    assert!(h.state().settings.projector);
    h.state_mut().lab.player.go_to_op(130);
    h.run();
    h.remove_cursor();
    h.run();
    save_screenshot(&mut h, "viewer-projector-compare.png", [1400, 1500]);
}

/// Renders `h` (`size` pixels) into `assets/NAME` when `GANGWAY_WRITE_SCREENSHOT=1`, else into
/// the temp directory (so CI does not rewrite tracked files).
fn save_screenshot(h: &mut Harness<'static, ViewerApp>, name: &str, size: [u32; 2]) {
    let image = h.render().unwrap();
    assert_eq!([image.width(), image.height()], size);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = if std::env::var("GANGWAY_WRITE_SCREENSHOT").as_deref() == Ok("1") {
        root.join("assets").join(name)
    } else {
        std::env::temp_dir().join(format!("gangway-{name}"))
    };
    image.save(&path).unwrap();
    eprintln!("wrote {}", path.display());
}

/// The viewer guide's bench screenshot: the development machine's bench report, matmul suite.
#[test]
fn readme_bench_screenshot() {
    if !common::can_render("readme_bench_screenshot") {
        return;
    }
    let mut h = app_harness([1280.0, 800.0]);
    h.get_by_label("Files").click();
    h.run();
    // Tests run in the viewer's directory.
    h.state_mut().files.path = "../assets/bench/dev-2core.json".into();
    h.run();
    h.get_by_label("Open").click();
    h.step();
    assert!(
        h.state_mut()
            .files
            .wait_idle(std::time::Duration::from_secs(60))
    );
    h.run();
    h.get_by_label_contains("opened benchmark report: 112 results on 2 adapter(s)");
    h.get_by_label_contains("matmul: GFLOP/s per case (higher is better)");
    h.remove_cursor();
    h.run();
    save_screenshot(&mut h, "viewer-bench.png", [1280, 800]);
}

/// A hand trace of one training step: `step` (B/E) and its child `forward` begin together, as
/// do the `X` slices `epoch` and `batch 0`, with a memory counter, a flow from the loader's
/// thread and an instant: what the issue's tryout drew wrong.
const HAND_TRACE: &str = r#"{"traceEvents": [
    {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "trainer"}},
    {"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "main"}},
    {"ph": "M", "name": "thread_name", "pid": 7, "tid": 2, "args": {"name": "loader"}},
    {"ph": "B", "name": "step", "pid": 7, "tid": 1, "ts": 0},
    {"ph": "B", "name": "forward", "pid": 7, "tid": 1, "ts": 0},
    {"ph": "E", "pid": 7, "tid": 1, "ts": 400},
    {"ph": "B", "name": "backward", "pid": 7, "tid": 1, "ts": 400},
    {"ph": "E", "pid": 7, "tid": 1, "ts": 900},
    {"ph": "E", "pid": 7, "tid": 1, "ts": 1000},
    {"ph": "X", "name": "batch 0", "pid": 7, "tid": 2, "ts": 0, "dur": 300},
    {"ph": "X", "name": "epoch", "pid": 7, "tid": 2, "ts": 0, "dur": 1000},
    {"ph": "X", "name": "batch 1", "pid": 7, "tid": 2, "ts": 500, "dur": 300},
    {"ph": "s", "id": 1, "name": "batch", "pid": 7, "tid": 2, "ts": 250},
    {"ph": "f", "id": 1, "bp": "e", "name": "batch", "pid": 7, "tid": 1, "ts": 450},
    {"ph": "i", "name": "checkpoint", "s": "t", "pid": 7, "tid": 1, "ts": 950},
    {"ph": "C", "name": "memory", "pid": 7, "ts": 0, "args": {"MB": 100}},
    {"ph": "C", "name": "memory", "pid": 7, "ts": 300, "args": {"MB": 450}},
    {"ph": "C", "name": "memory", "pid": 7, "ts": 700, "args": {"MB": 250}},
    {"ph": "C", "name": "memory", "pid": 7, "ts": 1000, "args": {"MB": 120}}
]}"#;

/// Screenshots of the Files tab on traces the issue found drawn wrong (issue 38): the hand
/// trace above (nesting at equal times, counter, flow, instant), VizTracer's counters, and
/// PyTorch's profiler trace with its flows, zoomed to its first step.
#[test]
fn readme_trace_drawing_screenshots() {
    if !common::can_render("readme_trace_drawing_screenshots") {
        return;
    }
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/traces");
    let hand = std::env::temp_dir().join(format!("gangway-hand-{}.json", std::process::id()));
    std::fs::write(&hand, HAND_TRACE).unwrap();
    // The file, the screenshot's name, and the share of the fitted view to zoom to.
    type Shot<'a> = (&'a std::path::Path, &'a str, Option<(f64, f64)>);
    let shots: [Shot<'_>; 3] = [
        (&hand, "viewer-trace-hand.png", None),
        (
            &fixtures.join("viztracer-counters.json"),
            "viewer-trace-viztracer.png",
            None,
        ),
        (
            &fixtures.join("pytorch-mlp.json"),
            "viewer-trace-pytorch-flows.png",
            // The first SGD step, where the flows run from the autograd engine's thread.
            Some((0.47, 0.62)),
        ),
    ];
    for (path, name, window) in shots {
        let mut h = app_harness([1280.0, 720.0]);
        common::open_in(&mut h, path);
        if let Some((from, to)) = window {
            let tl = &mut h.state_mut().files.timeline;
            let v = tl.view.unwrap();
            let width = f64::from(tl.last_width);
            let span = v.ns_per_px * width;
            tl.view = Some(gangway_viewer::timeline::TimeView {
                start_ns: v.start_ns + span * from,
                ns_per_px: v.ns_per_px * (to - from),
            });
            h.run();
        }
        h.remove_cursor();
        h.run();
        save_screenshot(&mut h, name, [1280, 720]);
    }
    let _ = std::fs::remove_file(&hand);
}

/// Issue 38's projector case: Interleaved 1F1B in the projector theme at 1280 × 800, which was
/// cut off on the right; now drawn smaller to fit the window.
#[test]
fn readme_projector_interleaved_screenshot() {
    if !common::can_render("readme_projector_interleaved_screenshot") {
        return;
    }
    let mut h = app_harness([1280.0, 800.0]);
    h.key_press(egui::Key::P);
    h.run();
    h.get_by_label("Interleaved 1F1B").click();
    h.run();
    h.remove_cursor();
    h.run();
    save_screenshot(&mut h, "viewer-lab-projector-interleaved.png", [1280, 800]);
}
