#![allow(clippy::unwrap_used)]
//! The timeline's view transform, its model (sorted tracks, visible ranges, merged bars) and its
//! navigation through the UI.

use std::time::Instant;

use egui_kittest::Harness;
use gangway::trace::{Event, EventMeta};
use gangway_viewer::timeline::data::{BarKind, bars};
use gangway_viewer::timeline::{TimeView, TimelineData, TimelineState, timeline};

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

#[test]
fn kinds_come_from_names() {
    let k = |n: &str| BarKind::of(&kernel(0, n, 0, 1));
    assert_eq!(k("F"), BarKind::Forward);
    assert_eq!(k("F3"), BarKind::Forward);
    assert_eq!(k("B.c1"), BarKind::Backward);
    assert_eq!(k("W"), BarKind::WeightGrad);
    assert_eq!(k("Fused"), BarKind::Kernel);
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
    let b = bars(visible, width, |ns| all.x_of(ns));
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
    let b = bars(visible, width, |ns| zoomed.x_of(ns));
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
    h.hover_at(egui::pos2(400.0, y));
    h.run();
    h.drop_at(egui::pos2(400.0, y));
    h.run();
    let panned = h.state().1.view.unwrap();
    assert!(close(panned.ns_per_px, fitted.ns_per_px));
    assert!(
        close(panned.start_ns - fitted.start_ns, 100.0 * fitted.ns_per_px),
        "{fitted:?} -> {panned:?}"
    );
    let data = h.state().0.clone();
    h.state_mut().1.reset(&data);
    let reset = h.state().1.view.unwrap();
    assert!(close(reset.start_ns, fitted.start_ns) && close(reset.ns_per_px, fitted.ns_per_px));
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
