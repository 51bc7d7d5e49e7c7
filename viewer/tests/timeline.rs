#![allow(clippy::unwrap_used)]
//! The timeline's view transform, its model (sorted tracks, visible ranges, merged bars) and its
//! navigation through the UI.

mod common;

use std::time::{Duration, Instant};

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gangway::trace::{Event, EventMeta, Flow, FlowRole, Lane};
use gangway_viewer::files::{Loaded, open_bytes};
use gangway_viewer::timeline::data::{BarKind, bars};
use gangway_viewer::timeline::{TimeAxis, TimeView, TimelineData, TimelineState, timeline};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn zoom_keeps_the_time_under_the_mouse_and_pan_is_reversible() {
    let mut v = TimeView::fit(1_000..101_000, 500.0);
    let before = v;
    let anchor = v.ns_at(123.0);
    v.zoom_about(3.0, 123.0);
    assert!(close(v.ns_at(123.0), anchor));
    assert!(close(v.ns_per_px, before.ns_per_px / 3.0));
    v.zoom_about(1.0 / 3.0, 123.0);
    assert!(close(v.start_ns, before.start_ns) && close(v.ns_per_px, before.ns_per_px));
    v.pan_px(40.0);
    assert!(close(v.start_ns, before.start_ns - 40.0 * before.ns_per_px));
    v.pan_px(-40.0);
    assert!(close(v.start_ns, before.start_ns));
    // x_of and ns_at are inverses.
    for x in [0.0f32, 1.5, 250.0, 499.0] {
        assert!(close(f64::from(v.x_of(v.ns_at(x))), f64::from(x)));
    }
    // The fitted view shows the whole span, with a margin.
    let vis = before.visible(500.0);
    assert!(vis.start <= 1_000 && vis.end >= 101_000);
    // Zooming to an event centres it; nonsense factors are ignored; extremes are clamped.
    let mut z = v;
    z.zoom_to(50_000..51_000, 500.0);
    assert!(close(z.ns_at(250.0), 50_500.0));
    let same = z;
    z.zoom_about(f32::NAN, 10.0);
    z.zoom_about(0.0, 10.0);
    assert_eq!(z, same);
    z.zoom_about(1e30, 0.0);
    assert!(z.ns_per_px >= gangway_viewer::timeline::view::MIN_NS_PER_PX);
}

fn kernel(device: usize, name: &str, start: u64, end: u64) -> Event {
    EventMeta::kernel(device).event(name.into(), start, end)
}

#[test]
fn tracks_stay_sorted_and_visible_finds_overlaps() {
    let mut d = TimelineData::default();
    d.push(kernel(1, "b", 50, 60));
    d.push(kernel(0, "a", 30, 40));
    d.push(kernel(0, "long", 0, 100));
    d.push(EventMeta::wait(0).event("w".into(), 5, 6));
    assert_eq!(d.len(), 4);
    assert_eq!(d.span(), Some(0..100));
    let keys: Vec<_> = d.tracks().iter().map(|t| (t.device, t.lane)).collect();
    assert_eq!(
        keys,
        [
            (0, gangway::trace::Lane::Host),
            (0, gangway::trace::Lane::Compute),
            (1, gangway::trace::Lane::Compute)
        ]
    );
    let compute0 = &d.tracks()[1];
    let starts: Vec<u64> = compute0.events().iter().map(|e| e.start_ns).collect();
    assert_eq!(starts, [0, 30]);
    // "long" starts before the window but overlaps it: it must be found.
    let names: Vec<&str> = compute0
        .visible(60..70)
        .iter()
        .filter(|e| e.end_ns > 60)
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(names, ["long"]);
}

/// Pipeline ops are coloured by the op their events carry, never by their names.
#[test]
fn kinds_come_from_ops() {
    use gangway::trace::PipelineOp::{Backward, Forward, WeightGrad};
    let op = |op, n: &str| BarKind::of(&EventMeta::kernel(0).op(op).event(n.into(), 0, 1));
    assert_eq!(op(Forward, "F3"), BarKind::Forward);
    assert_eq!(op(Backward, "B.c1"), BarKind::Backward);
    assert_eq!(op(WeightGrad, "anything"), BarKind::WeightGrad);
    // Named like ops, but nothing says they are.
    let k = |n: &str| BarKind::of(&kernel(0, n, 0, 1));
    assert_eq!(k("F"), BarKind::Kernel);
    assert_eq!(k("B.c1"), BarKind::Kernel);
    assert_eq!(k("moe all_to_all"), BarKind::AllToAll);
    assert_eq!(
        BarKind::of(&EventMeta::transfer(0).event("x".into(), 0, 1)),
        BarKind::Transfer
    );
}

#[test]
fn hundred_thousand_events_cull_and_merge_fast() {
    // 100k 1 µs kernels, 1 µs apart, on one lane.
    let events: Vec<Event> = (0..100_000u64)
        .map(|i| kernel(0, "k", i * 2_000, i * 2_000 + 1_000))
        .collect();
    let data = TimelineData::from_events(events);
    let track = &data.tracks()[0];
    let width = 1_000.0;
    // The whole 200 ms span in 1000 px: 200 µs per pixel, so ~100 events per pixel.
    let all = TimeView::fit(data.span().unwrap(), width);
    let t0 = Instant::now();
    let visible = track.visible(all.visible(width));
    let b = bars(visible, width, &all);
    let whole = t0.elapsed();
    // Every event visible, but no more bars than a few per pixel after merging.
    assert_eq!(visible.len(), 100_000);
    assert!(b.len() <= 2 * width as usize, "{} bars", b.len());
    assert_eq!(b.iter().map(|b| b.merged).sum::<usize>(), 100_000);
    // Zoomed in: only a handful of events are even looked at.
    let mut zoomed = all;
    zoomed.zoom_to(100_000_000..100_010_000, width);
    let visible = track.visible(zoomed.visible(width));
    assert!(visible.len() <= 8, "{}", visible.len());
    let b = bars(visible, width, &zoomed);
    assert!(b.iter().all(|b| b.merged == 1));
    assert!(b.iter().filter(|b| b.x1 - b.x0 > 50.0).count() >= 3);
    assert!(
        whole.as_millis() < 200,
        "culling 100k events took {whole:?}"
    );
}

/// Drag pans by exactly the dragged pixels; reset (what double-click does) fits again.
#[test]
fn drag_pans_in_the_ui_and_reset_fits_again() {
    let data =
        TimelineData::from_events((0..100u64).map(|i| kernel(0, "k", i * 100, i * 100 + 50)));
    let state = (data, TimelineState::default());
    let mut h = Harness::builder().with_size([800.0, 200.0]).build_ui_state(
        |ui, (data, state): &mut (TimelineData, TimelineState)| {
            timeline(ui, "t", data, state);
        },
        state,
    );
    h.run();
    let fitted = h.state().1.view.unwrap();
    // Bars start at x = 150 (label column) + 8 (margin); the row is at y 8 + 18 + 11.
    let y = 8.0 + 18.0 + 11.0;
    h.hover_at(egui::pos2(500.0, y));
    h.run();
    h.drag_at(egui::pos2(500.0, y));
    h.run();
    // 50 px: panning stops a tenth of the view past the data's ends.
    h.hover_at(egui::pos2(450.0, y));
    h.run();
    h.drop_at(egui::pos2(450.0, y));
    h.run();
    let panned = h.state().1.view.unwrap();
    assert!(close(panned.ns_per_px, fitted.ns_per_px));
    assert!(
        close(panned.start_ns - fitted.start_ns, 50.0 * fitted.ns_per_px),
        "{fitted:?} -> {panned:?}"
    );
    let data = h.state().0.clone();
    h.state_mut().1.reset(&data);
    let reset = h.state().1.view.unwrap();
    assert!(close(reset.start_ns, fitted.start_ns) && close(reset.ns_per_px, fitted.ns_per_px));
}

/// Issue 15: the hover text sits at the pointer, not below the whole widget: hovering a bar at
/// either end of a tall timeline puts the event's details beside the pointer.
#[test]
fn hover_text_follows_the_pointer() {
    let events = (0..8usize)
        .flat_map(|d| (0..10u64).map(move |i| kernel(d, &format!("k{d}"), i * 100, i * 100 + 90)));
    let state = (TimelineData::from_events(events), TimelineState::default());
    let mut h = Harness::builder().with_size([900.0, 600.0]).build_ui_state(
        |ui, (data, state): &mut (TimelineData, TimelineState)| {
            timeline(ui, "t", data, state);
        },
        state,
    );
    h.run();
    // Rows are 22 pt apart from y = 8 + 18, bars from x = 158.
    for (device, x) in [(0usize, 200.0f32), (7, 820.0)] {
        let pointer = egui::pos2(x, 8.0 + 18.0 + 22.0 * device as f32 + 11.0);
        h.hover_at(pointer);
        h.run();
        let name = format!("k{device}");
        let gap = h.get_by_label(&name).rect().center().distance(pointer);
        assert!(
            gap < 200.0,
            "device {device}: hover text {gap} pt from the pointer"
        );
    }
}

/// Bar area and view for picking tests: bars from x = 0, 1 ns per px, rows from y = 0.
fn pick_setup() -> (TimeView, egui::Rect) {
    let view = TimeView {
        start_ns: 0.0,
        ns_per_px: 1.0,
    };
    let rect = egui::Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(3_000.0, 400.0));
    (view, rect)
}

#[test]
fn overlapping_events_land_on_distinct_sub_rows_and_hover_finds_each() {
    // Host encodes of three runs on device 0 overlap; two sends on device 1 at once. Pushed
    // out of order, one by one (the live path), and in one batch: same rows either way.
    let events = vec![
        EventMeta::host_encode(0).event("enc c".into(), 1_200, 2_000),
        EventMeta::host_encode(0).event("enc a".into(), 0, 1_000),
        EventMeta::host_encode(0).event("enc b".into(), 500, 1_500),
        EventMeta::transfer(1).event("send x".into(), 100, 900),
        EventMeta::transfer(1).event("send y".into(), 100, 900),
    ];
    let batch = TimelineData::from_events(events.clone());
    let mut live = TimelineData::default();
    for e in events.clone() {
        live.push(e);
    }
    for d in [&batch, &live] {
        let rows: Vec<(usize, Vec<(&str, u32)>)> = d
            .tracks()
            .iter()
            .map(|t| {
                let named = t
                    .events()
                    .iter()
                    .map(|e| e.name.as_str())
                    .zip(t.rows().iter().copied());
                (t.row_count(), named.collect())
            })
            .collect();
        assert_eq!(
            rows,
            [
                (2, vec![("enc a", 0), ("enc b", 1), ("enc c", 0)]),
                (2, vec![("send x", 0), ("send y", 1)]),
            ]
        );
    }
    // As many sub-rows as the Chrome exporter's threads for that lane.
    let json = gangway::trace::chrome::to_json(&events, &[]);
    let threads = |pid: u64| {
        json["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["name"] == "thread_name" && m["pid"] == pid)
            .count()
    };
    assert_eq!((threads(0), threads(1)), (2, 2));

    // Picking: track 0 (host encode) has rows at y 0..22 and 22..44, track 1 at 44..88.
    let (view, rect) = pick_setup();
    let pick = |x: f32, y: f32| {
        gangway_viewer::timeline::draw::event_at(&batch, &view, rect, egui::pos2(x, y))
            .map(|e| e.name.as_str())
    };
    assert_eq!(pick(700.0, 11.0), Some("enc a"));
    assert_eq!(pick(700.0, 33.0), Some("enc b"));
    assert_eq!(pick(1_400.0, 11.0), Some("enc c"));
    assert_eq!(pick(1_400.0, 33.0), Some("enc b"));
    assert_eq!(pick(1_800.0, 33.0), None);
    assert_eq!(pick(500.0, 55.0), Some("send x"));
    assert_eq!(pick(500.0, 77.0), Some("send y"));
    assert_eq!(pick(500.0, 99.0), None);

    // In the UI the widget grows with the sub-rows, and a click on the lower sub-row zooms to
    // that bar. Bars start at x = 158 (8 margin + 150 labels); rows at y = 8 + 18.
    let mut h = Harness::builder().with_size([800.0, 300.0]).build_ui_state(
        |ui, (data, state): &mut (TimelineData, TimelineState)| {
            timeline(ui, "t", data, state);
        },
        (batch.clone(), TimelineState::default()),
    );
    h.run();
    let fitted = h.state().1.view.unwrap();
    let x = 158.0 + fitted.x_of(1_250.0);
    let w = f64::from(h.state().1.last_width);
    let mut click = |y: f32| {
        h.state_mut().1.view = Some(fitted);
        h.hover_at(egui::pos2(x, y));
        h.run();
        h.drag_at(egui::pos2(x, y));
        h.run();
        h.drop_at(egui::pos2(x, y));
        h.run();
        let v = h.state().1.view.unwrap();
        (
            v.ns_at(h.state().1.last_width / 2.0).round() as u64,
            v.ns_per_px,
        )
    };
    // zoom_to shows the event with 10 % margin each side: 1.2 × its length across the width.
    let (mid_b, px_b) = click(8.0 + 18.0 + 22.0 + 11.0);
    assert_eq!(mid_b, 1_000, "zoomed to enc b (500..1500)");
    assert!(close(px_b, 1_200.0 / w), "{px_b}");
    let (mid_c, px_c) = click(8.0 + 18.0 + 11.0);
    assert_eq!(mid_c, 1_600, "zoomed to enc c (1200..2000)");
    assert!(close(px_c, 960.0 / w), "{px_c}");
}

#[test]
fn non_overlapping_events_stay_on_one_row() {
    // Back to back (end == next start) and gapped events share one row, on every track.
    let mut d = TimelineData::from_events(
        (0..1_000u64)
            .map(|i| kernel(0, "k", i * 100, i * 100 + 100))
            .chain((0..1_000u64).map(|i| kernel(1, "k", i * 300, i * 300 + 100))),
    );
    assert!(
        d.tracks()
            .iter()
            .all(|t| t.row_count() == 1 && t.rows().iter().all(|&r| r == 0))
    );
    // A burst of overlap grows a track; forgetting it shrinks the track back.
    d.push(kernel(0, "late", 99_950, 100_500));
    assert_eq!(d.tracks()[0].row_count(), 2);
    d.push(kernel(0, "later", 100_600, 100_700));
    d.forget_before(100_550);
    assert_eq!(d.tracks()[0].row_count(), 1);
    assert_eq!(d.tracks()[0].rows(), [0]);
}

type Ui = (TimelineData, TimelineState);

fn timeline_harness(
    size: [f32; 2],
    data: TimelineData,
    state: TimelineState,
) -> Harness<'static, Ui> {
    Harness::builder()
        .with_size(size)
        .with_step_dt(1.0 / 60.0)
        .build_ui_state(
            |ui, (data, state): &mut Ui| {
                timeline(ui, "t", data, state);
            },
            (data, state),
        )
}

/// Whether the view shows all of `span` across the bar area.
fn covers(h: &Harness<'_, Ui>) -> bool {
    let (data, state) = h.state();
    let (span, view) = (data.span().unwrap(), state.view.unwrap());
    let vis = view.visible(state.last_width);
    vis.start <= span.start && vis.end >= span.end
}

/// Bug 7: a view nobody navigated refits when the bar area changes width (window resize,
/// ctrl+plus); once panned it stays put, until a double-click fits it again.
#[test]
fn a_fitted_view_refits_on_resize_until_the_user_pans() {
    let data =
        TimelineData::from_events((0..200u64).map(|i| kernel(0, "k", i * 100, i * 100 + 60)));
    let mut h = timeline_harness([800.0, 200.0], data, TimelineState::default());
    h.run();
    assert!(covers(&h) && h.state().1.is_fitted());
    let narrow = h.state().1.last_width;
    // Wider window.
    h.set_size(egui::vec2(1_200.0, 200.0));
    h.run();
    assert!(h.state().1.last_width > narrow + 300.0);
    assert!(covers(&h), "{:?}", h.state().1.view);
    let wide = h.state().1.view.unwrap();
    // ctrl+plus: the same window in more pixels per point, so fewer points across. Before the
    // fix the end of the data was cut off here.
    h.set_pixels_per_point(1.5);
    h.set_size(egui::vec2(800.0, 200.0));
    h.run();
    assert!(
        covers(&h),
        "end cut off after zooming the UI: {:?}",
        h.state().1.view
    );
    assert!(h.state().1.view.unwrap().ns_per_px > wide.ns_per_px);
    h.set_pixels_per_point(1.0);
    h.set_size(egui::vec2(1_200.0, 200.0));
    h.run();
    assert!(covers(&h));
    assert!(close(h.state().1.view.unwrap().ns_per_px, wide.ns_per_px));

    // Pan: the view is the user's now and survives a resize.
    let y = 8.0 + 18.0 + 11.0;
    h.hover_at(egui::pos2(600.0, y));
    h.drag_at(egui::pos2(600.0, y));
    h.hover_at(egui::pos2(550.0, y));
    h.drop_at(egui::pos2(550.0, y));
    h.run();
    let panned = h.state().1.view.unwrap();
    assert!(!h.state().1.is_fitted());
    assert!(close(
        panned.start_ns - wide.start_ns,
        50.0 * wide.ns_per_px
    ));
    h.set_size(egui::vec2(900.0, 200.0));
    h.run();
    assert_eq!(
        h.state().1.view.unwrap(),
        panned,
        "a panned view moved on resize"
    );

    // Double-click fits again, and it then follows resizes again.
    let at = egui::pos2(500.0, y);
    for pressed in [true, false, true, false] {
        h.event(egui::Event::PointerButton {
            pos: at,
            button: egui::PointerButton::Primary,
            pressed,
            modifiers: egui::Modifiers::NONE,
        });
    }
    h.run();
    assert!(h.state().1.is_fitted() && covers(&h));
    h.set_size(egui::vec2(700.0, 200.0));
    h.run();
    assert!(covers(&h));
    assert!((h.state().1.view.unwrap().ns_at(h.state().1.last_width) - 20_000.0).abs() < 2_000.0);
}

/// Bug 3: the live view keeps the last minute; the span (and a fitted view) follows what is
/// kept instead of keeping its first start, so the kept events fill the axis.
#[test]
fn the_span_and_a_fitted_view_follow_forgotten_events() {
    const S: u64 = 1_000_000_000;
    // Five minutes of a kernel every 100 ms.
    let data = TimelineData::from_events(
        (0..3_000u64).map(|i| kernel(0, "k", i * S / 10, i * S / 10 + S / 50)),
    );
    let mut h = timeline_harness([900.0, 200.0], data, TimelineState::default());
    h.run();
    assert!(covers(&h));
    h.state_mut().0.forget_before(300 * S - 60 * S);
    let span = h.state().0.span().unwrap();
    assert!(span.start >= 239 * S && span.start <= 240 * S, "{span:?}");
    h.run();
    assert!(covers(&h));
    let (_, state) = h.state();
    let view = state.view.unwrap();
    // The kept minute spans the axis (2 % margins), not its right fifth.
    let x_start = view.x_of(span.start as f64);
    assert!(
        x_start < 0.05 * state.last_width,
        "kept events start at x = {x_start}"
    );
    // Every row holds events: nothing was left as an empty sub-row.
    assert!(h.state().0.tracks().iter().all(|t| t.row_count() == 1));
}

/// The live view's axis counts back from the newest event; the hover text says the same.
#[test]
fn relative_axis_counts_back_to_now() {
    const S: u64 = 1_000_000_000;
    let data = TimelineData::from_events(
        (0..60u64).map(|i| kernel(0, "k", 100 * S + i * S, 100 * S + i * S + S / 2)),
    );
    let state = TimelineState {
        axis: TimeAxis::BeforeNewest,
        ..TimelineState::default()
    };
    let mut h = timeline_harness([1_000.0, 200.0], data, state);
    h.run();
    let texts = common::painted_texts(&h.output().shapes);
    assert!(texts.iter().any(|t| t == "now"), "{texts:?}");
    assert!(texts.iter().any(|t| t == "\u{2212}10 s"), "{texts:?}");
    assert!(
        !texts
            .iter()
            .any(|t| t.starts_with("100 s") || t.starts_with("110 s")),
        "{texts:?}"
    );
    // Hover the last kernel (starts 0.5 s before the newest event's end).
    let view = h.state().1.view.unwrap();
    let x = 158.0 + view.x_of((159 * S + S / 4) as f64);
    h.hover_at(egui::pos2(x, 8.0 + 18.0 + 11.0));
    h.run();
    h.get_by_label_contains("before the newest event");
    // From the start again.
    h.state_mut().1.axis = TimeAxis::FromStart;
    h.remove_cursor();
    h.run();
    let texts = common::painted_texts(&h.output().shapes);
    assert!(!texts.iter().any(|t| t == "now"), "{texts:?}");
}

/// Zoomed out, a trace busy a fifth of the time paints at a fifth of the opacity, not solid
/// (checked on the rendered image where an adapter exists); hovering it still names the event
/// under the pointer.
#[test]
fn zoomed_out_density_is_painted_by_busy_fraction() {
    // 1 µs kernels every 5 µs for 50 ms: 10k events across ~640 px.
    let data = TimelineData::from_events((0..10_000u64).map(|i| {
        EventMeta::kernel(0)
            .op(gangway::trace::PipelineOp::Forward)
            .event("F1".into(), i * 5_000, i * 5_000 + 1_000)
    }));
    let render = common::can_render("zoomed_out_density_is_painted_by_busy_fraction");
    let mut builder = Harness::builder()
        .with_size([800.0, 120.0])
        .with_step_dt(1.0 / 60.0);
    if render {
        builder = builder.wgpu();
    }
    let mut h = builder.build_ui_state(
        |ui, (data, state): &mut Ui| {
            timeline(ui, "t", data, state);
        },
        (data, TimelineState::default()),
    );
    h.run();
    if render {
        let image = h.render().unwrap();
        let idle = egui::Color32::from_gray(48);
        let f = BarKind::Forward.color();
        // Busy fraction read back from the red channel, along the middle of the row.
        let y = (8.0 + 18.0 + 11.0) as u32;
        let fractions: Vec<f32> = (200..760)
            .map(|x| {
                let p = image.get_pixel(x, y);
                (f32::from(p[0]) - f32::from(idle.r())) / (f32::from(f.r()) - f32::from(idle.r()))
            })
            .collect();
        let mean = fractions.iter().sum::<f32>() / fractions.len() as f32;
        assert!(
            (mean - 0.2).abs() < 0.05,
            "mean busy fraction painted {mean}"
        );
        assert!(
            fractions.iter().all(|&f| f < 0.5),
            "painted solid: {fractions:?}"
        );
    }
    // Tooltip at the pointer.
    h.hover_at(egui::pos2(158.0 + 300.0, 8.0 + 18.0 + 11.0));
    h.run();
    h.get_by_label("F1");
    h.get_by_label_contains("duration 1.0 µs");
}

/// A pipeline-shaped trace: `devices` × (compute, transfer) lanes, `per_track` events each,
/// a 10 µs period with busy time that drifts and jitters, so density varies across the axis.
fn synthetic_trace(devices: usize, per_track: u64) -> Vec<Event> {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let names = ["F0", "B0", "W0", "gemm", "F1", "B1"];
    let mut events = Vec::with_capacity(devices * 2 * per_track as usize);
    for i in 0..per_track {
        let t = i * 10_000;
        let drift = (i / 2_000) % 5;
        for d in 0..devices {
            let busy = 1_000 + drift * 1_500 + next() % 2_000;
            let name = names[(i as usize + d) % names.len()];
            events.push(EventMeta::kernel(d).microbatch((i % 8) as u32).event(
                name.into(),
                t,
                t + busy,
            ));
            let send = 500 + next() % 1_500;
            events.push(EventMeta::transfer(d).event("send".into(), t + busy, t + busy + send));
        }
    }
    events
}

fn mean_ms(frames: &[Duration]) -> f64 {
    frames.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e3 / frames.len().max(1) as f64
}

fn max_ms(frames: &[Duration]) -> f64 {
    frames.iter().map(Duration::as_secs_f64).fold(0.0, f64::max) * 1e3
}

fn report(what: &str, frames: &[Duration]) {
    println!(
        "{what}: frame mean {:.1} ms ({:.0} fps), max {:.1} ms",
        mean_ms(frames),
        1e3 / mean_ms(frames),
        max_ms(frames)
    );
}

/// Renders `frames` frames while dragging left by `dx` a frame from `x`; the time of each (UI
/// pass, then tessellation, render and read-back of the image).
fn pan_frames<S>(h: &mut Harness<'_, S>, x: f32, y: f32, frames: usize, dx: f32) -> Vec<Duration> {
    let mut x = x;
    h.hover_at(egui::pos2(x, y));
    h.step();
    h.drag_at(egui::pos2(x, y));
    h.step();
    let mut times = Vec::with_capacity(frames);
    for _ in 0..frames {
        x -= dx;
        let t0 = Instant::now();
        h.hover_at(egui::pos2(x, y));
        h.step();
        h.render().unwrap();
        times.push(t0.elapsed());
    }
    h.drop_at(egui::pos2(x, y));
    h.step();
    times
}

/// Issue 15: a trace of 1M events opens (indexing and the first frame) in under 2 s and pans at
/// 30 fps or better on lavapipe. The numbers are printed (`--nocapture`), with the frame time of
/// an empty window of the same size (the harness's own render and read-back) for scale. The
/// bounds are loose, and relative to that floor measured in the same run where it is slow: a
/// busy 2-core machine doubled both the floor and the frames (98 and 210 ms at 1600 × 900)
/// and failed an absolute 200 ms.
#[test]
fn a_million_events_open_and_pan_fast() {
    let events = synthetic_trace(8, 62_500);
    assert_eq!(events.len(), 1_000_000);
    let t0 = Instant::now();
    let data = TimelineData::from_events(events);
    let build = t0.elapsed();
    assert_eq!(data.len(), 1_000_000);
    assert_eq!(data.tracks().len(), 16);
    assert!(data.tracks().iter().all(|t| t.row_count() == 1));
    println!("1M events: from_events {:.0} ms", build.as_secs_f64() * 1e3);
    assert!(
        build < Duration::from_secs(10),
        "from_events took {build:?}"
    );

    // The per-frame model work alone: bars of every track, the whole trace in view.
    let fitted = TimeView::fit(data.span().unwrap(), 1_442.0);
    let t0 = Instant::now();
    let bars: usize = data
        .tracks()
        .iter()
        .map(|t| t.bars(&fitted, 1_442.0).iter().map(Vec::len).sum::<usize>())
        .sum();
    let model = t0.elapsed();
    println!(
        "1M events: bars of a whole-trace frame {:.1} ms ({bars} bars)",
        model.as_secs_f64() * 1e3
    );

    if !common::can_render("a_million_events_open_and_pan_fast") {
        return;
    }
    let size = [1_600.0, 900.0];
    let builder = Harness::builder()
        .with_size(size)
        .with_step_dt(1.0 / 60.0)
        .with_max_steps(1_000)
        .wgpu();
    let t0 = Instant::now();
    let mut h = builder.build_ui_state(
        |ui, (data, state): &mut Ui| {
            timeline(ui, "t", data, state);
        },
        (data, TimelineState::default()),
    );
    h.render().unwrap();
    let first = t0.elapsed();
    println!(
        "1M events: first frame {:.0} ms; open (from_events + first frame) {:.0} ms",
        first.as_secs_f64() * 1e3,
        (build + first).as_secs_f64() * 1e3
    );
    assert!(h.state().1.view.is_some());

    let mut results = Vec::new();
    for size in [[1_600.0f32, 900.0], [1_024.0, 576.0]] {
        // The floor: an empty widget of the timeline's size (the harness fills its panel
        // behind it, renders and reads the image back).
        let mut empty = Harness::builder()
            .with_size(size)
            .with_step_dt(1.0 / 60.0)
            .wgpu()
            .build_ui(|ui| {
                let size = egui::vec2(ui.available_width(), 18.0 + 16.0 * 22.0 + 4.0);
                ui.allocate_exact_size(size, egui::Sense::click_and_drag());
            });
        let floor = pan_frames(&mut empty, size[0] - 100.0, 100.0, 20, 8.0);
        report(&format!("empty widget, {size:?} window"), &floor);

        h.set_size(egui::vec2(size[0], size[1]));
        h.run();
        h.state_mut().1.view = None;
        h.run();
        let y = 8.0 + 18.0 + 11.0;
        let fitted = h.state().1.view.unwrap();
        let whole = pan_frames(&mut h, size[0] - 100.0, y, 30, 8.0);
        let panned = h.state().1.view.unwrap();
        assert!(panned.start_ns > fitted.start_ns, "the drag did not pan");
        report(&format!("1M events {size:?}, all in view"), &whole);
        let floor_ms = mean_ms(&floor);
        results.push((mean_ms(&whole), (4.0 * floor_ms).max(200.0)));
        for zoom in [100.0, 3_000.0] {
            let mut zoomed = panned;
            zoomed.zoom_about(zoom, size[0] / 2.0);
            h.state_mut().1.view = Some(zoomed);
            h.step();
            let near = pan_frames(&mut h, size[0] - 100.0, y, 30, 8.0);
            report(&format!("1M events {size:?}, zoomed {zoom}x"), &near);
            // Zoomed in, wide bars are shapes with names: looser.
            results.push((mean_ms(&near), (6.0 * floor_ms).max(400.0)));
        }
    }
    assert!(
        build + first < Duration::from_secs(20),
        "opening took {:?}",
        build + first
    );
    assert!(
        results.iter().all(|&(ms, bound)| ms < bound),
        "mean frame ms (bound): {results:?}"
    );
}

/// Issue 15: a 1M-event Chrome trace file opens (JSON parse, import with flow binding, and the
/// timeline index) in under 2 s. [`synthetic_trace`] with a flow on every 10th event (a transfer
/// from an even device to the next one), written as gangway writes traces; the open's time is
/// printed (`--nocapture`) and bounded loosely, for a busy 2-core debug build. What comes back
/// must be exactly what was written, flows included.
#[test]
fn a_million_event_trace_file_opens_fast() {
    let devices = 8;
    let mut events = synthetic_trace(devices, 62_500);
    // Events come as (kernel, transfer) per device per step.
    let transfer = |step: usize, device: usize| (step * devices + device) * 2 + 1;
    for step in (0..62_500).step_by(5) {
        for d in (0..devices).step_by(2) {
            let id = (step * devices + d) as u64;
            events[transfer(step, d)].flow = Some(Flow {
                id,
                role: FlowRole::Out,
            });
            events[transfer(step, d + 1)].flow = Some(Flow {
                id,
                role: FlowRole::In,
            });
        }
    }
    assert_eq!(events.iter().filter(|e| e.flow.is_some()).count(), 100_000);
    let t0 = Instant::now();
    let json = gangway::trace::chrome::to_string(
        &events,
        &[gangway::trace::Track::device(3, "gpu three")],
    );
    println!(
        "1M-event trace: written in {:.1} s, {:.0} MB",
        t0.elapsed().as_secs_f64(),
        json.len() as f64 / 1e6
    );

    let t0 = Instant::now();
    let loaded = open_bytes(json.as_bytes(), "1m.json").unwrap();
    let open = t0.elapsed();
    println!(
        "1M-event trace: open_bytes {:.0} ms",
        open.as_secs_f64() * 1e3
    );
    let Loaded::Trace(trace) = loaded else {
        panic!("not opened as a trace: {}", loaded.summary());
    };
    let data = &trace.data;
    assert_eq!(data.len(), 1_000_000);
    assert_eq!(
        data.lanes.get(&3).map(|t| t.label.as_str()),
        Some("gpu three")
    );
    assert_eq!(
        data.lanes.get(&0).map(|t| t.label.as_str()),
        Some("device 0")
    );
    // Every track as written, in order: names, times, microbatches, clocks and flows.
    assert_eq!(data.tracks().len(), 2 * devices);
    for track in data.tracks() {
        let written: Vec<&Event> = events
            .iter()
            .filter(|e| (e.device, e.lane) == (track.device, track.lane))
            .collect();
        assert_eq!(track.events().len(), written.len());
        assert!(
            track.events().iter().eq(written.iter().copied()),
            "device {} {:?} differs",
            track.device,
            track.lane
        );
    }
    let flows = data
        .tracks()
        .iter()
        .flat_map(|t| t.events())
        .filter(|e| e.flow.is_some())
        .count();
    assert_eq!(flows, 100_000);
    // Tracks go by (device, lane): 1 is device 0's transfers, 3 device 1's.
    let flow = |track: usize, k: usize| {
        let e = &data.tracks()[track].events()[k];
        assert_eq!(e.lane, Lane::Transfer);
        e.flow.map(|f| (e.device, f.id, f.role))
    };
    assert_eq!(flow(1, 0), Some((0, 0, FlowRole::Out)));
    assert_eq!(flow(3, 0), Some((1, 0, FlowRole::In)));
    assert_eq!(flow(1, 1), None);
    assert_eq!(flow(3, 5), Some((1, 40, FlowRole::In)));
    assert!(open < Duration::from_secs(20), "open_bytes took {open:?}");
}

/// Issue 57: a pipeline op's block and hover counted its microbatch from 0 ("F0", "microbatch
/// 0") under a lab figure that counts from 1. An event's `microbatch` stays an index; people
/// read it from 1.
#[test]
fn pipeline_ops_count_microbatches_from_one() {
    let data = TimelineData::from_events((0..2u32).map(|mb| {
        EventMeta::kernel(0)
            .op(gangway::trace::PipelineOp::Forward)
            .microbatch(mb)
            .event(
                "F".into(),
                u64::from(mb) * 10_000,
                u64::from(mb) * 10_000 + 8_000,
            )
    }));
    let mut h = timeline_harness([800.0, 120.0], data, TimelineState::default());
    h.run();
    let texts = common::painted_texts(&h.output().shapes);
    for block in ["F1", "F2"] {
        assert!(texts.iter().any(|t| t == block), "{block}: {texts:?}");
    }
    assert!(!texts.iter().any(|t| t == "F0"), "{texts:?}");
    // The first block, hovered: its microbatch counted from 1 too.
    let (_, corner) = common::painted_text_positions(&h.output().shapes)
        .into_iter()
        .find(|(t, _)| t == "F1")
        .unwrap();
    h.hover_at(corner + egui::vec2(4.0, 4.0));
    h.run();
    h.get_by_label("microbatch 1");
}
