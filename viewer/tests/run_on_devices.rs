#![allow(clippy::unwrap_used)]
//! The bubble lab's "Run on devices": one pipelined MLP step on real (virtual) devices, driven
//! through the UI. Skipped with a message when fewer than 2 devices exist (fails instead under
//! `GANGWAY_REQUIRE_ADAPTER=1`).

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};
use gangway::pipeline::ScheduleKind;
use gangway::trace::Lane;
use gangway_viewer::ViewerApp;

/// The whole text of the one label containing `part` (a label's text is its AccessKit value).
fn label_of(h: &Harness<'_, ViewerApp>, part: &str) -> String {
    let node = h.get_by_label_contains(part);
    let node = node.accesskit_node();
    node.value().or_else(|| node.label()).unwrap_or_default()
}

#[test]
fn one_f_one_b_p2_m2_runs_on_devices_beside_the_simulation() {
    let test = "one_f_one_b_p2_m2_runs_on_devices_beside_the_simulation";
    let Some(mut h) = common::device_harness(test, 2, 2, true) else {
        return;
    };
    // Started by the user, the live workload runs on every tab: the run must hold it.
    common::start_live(&mut h);
    h.get_by_label("1F1B").click();
    h.run_ok();
    common::set_slider(&mut h, "stages p", 2.0);
    common::set_slider(&mut h, "microbatches m", 2.0);
    let p = h.state().lab.params;
    assert_eq!(
        (p.kind, p.stages, p.microbatches),
        (ScheduleKind::OneFOneB, 2, 2)
    );
    let button = h.get_by_label("Run on devices");
    assert!(!button.accesskit_node().is_disabled());
    button.click();
    h.step();
    h.step();

    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(180);
    let mut saw_hold = false;
    while h.state().lab.is_running() && Instant::now() < deadline {
        // The live workload stays off the devices while the run measures them.
        if let Some(r) = &h.state().live.runner {
            saw_hold |= r.hold.load(Ordering::Relaxed);
        }
        h.get_by_label_contains("running 1F1B, p = 2, m = 2 on devices");
        std::thread::sleep(Duration::from_millis(50));
        h.step();
    }
    assert!(!h.state().lab.is_running(), "no result within 180 s");
    eprintln!("{test}: run took {:.1} s", t0.elapsed().as_secs_f64());
    h.step();
    assert!(saw_hold, "the live workload was not held during the run");
    let r = h.state().live.runner.as_ref().unwrap();
    assert!(!r.hold.load(Ordering::Relaxed), "still held after the run");

    h.get_by_label("run: 1F1B, p = 2, m = 2");
    let measured = label_of(&h, "bubble (measured): ");
    let simulated = label_of(&h, "bubble (simulated from measured op times): ");
    h.get_by_label("textbook formula: 33.3%"); // (2 - 1) / (2 + 2 - 1)
    h.get_by_label_contains("step time ");
    for l in [&measured, &simulated] {
        let pct: f64 = l
            .rsplit(": ")
            .next()
            .and_then(|v| v.strip_suffix('%'))
            .unwrap()
            .parse()
            .unwrap();
        assert!((0.0..=100.0).contains(&pct), "{l}");
    }
    let err_label = label_of(&h, "max weight error vs single-device step: ");
    let err: f32 = err_label.rsplit(": ").next().unwrap().parse().unwrap();
    assert!(err < 1e-4, "{err_label}");
    let run = h.state().lab.measured.as_ref().unwrap().1.as_ref().unwrap();
    assert_eq!(
        err_label,
        format!(
            "max weight error vs single-device step: {:.2e}",
            run.result.max_weight_error
        )
    );
    // The measured timeline: a compute track per stage, with F and B kernels on each.
    let compute: Vec<usize> = run
        .data
        .tracks()
        .iter()
        .filter(|t| t.lane == Lane::Compute)
        .map(|t| t.device)
        .collect();
    assert_eq!(compute, [0, 1]);
    for t in run.data.tracks().iter().filter(|t| t.lane == Lane::Compute) {
        let names: Vec<&str> = t.events().iter().map(|e| e.name.as_str()).collect();
        assert!(
            names.contains(&"F") && names.contains(&"B"),
            "stage {}: {names:?}",
            t.device
        );
    }
    assert_eq!(run.data.device_prefix.as_deref(), Some("stage"));
    // In a 1280 × 820 window the measured timeline shows every lane, none behind its own
    // scrolling: the page scrolls instead.
    h.set_size(egui::vec2(1280.0, 820.0));
    h.run_ok();
    let run = h.state().lab.measured.as_ref().unwrap().1.as_ref().unwrap();
    assert!(run.timeline.every_row);
    assert!(
        !run.timeline.clipped,
        "the measured timeline hid rows at 1280 × 820"
    );

    // Changing the controls keeps the result, labelled as not matching them.
    common::set_slider(&mut h, "microbatches m", 4.0);
    h.get_by_label("run: 1F1B, p = 2, m = 2");
    h.get_by_label_contains("the controls have changed since");
    common::set_slider(&mut h, "microbatches m", 2.0);
    assert!(
        h.query_by_label_contains("the controls have changed since")
            .is_none()
    );
}

#[test]
fn run_on_devices_is_disabled_with_fewer_devices_than_stages() {
    let test = "run_on_devices_is_disabled_with_fewer_devices_than_stages";
    let Some(mut h) = common::device_harness(test, 2, 2, false) else {
        return;
    };
    let n = h.state().hub.devices().unwrap().len();
    if n >= 16 {
        eprintln!("{test}: skipped, {n} devices cover every p the slider allows");
        return;
    }
    common::set_slider(&mut h, "stages p", (n + 1) as f64);
    assert_eq!(h.state().lab.params.stages, n + 1);
    let button = h.get_by_label("Run on devices");
    assert!(button.accesskit_node().is_disabled());
    button.hover();
    for _ in 0..6 {
        h.step();
    }
    h.get_by_label_contains(&format!(
        "needs {} devices (one per stage), {n} found",
        n + 1
    ));
    h.get_by_label_contains("GANGWAY_VIRTUAL_DEVICES=");
    // Back to p = n: enabled.
    common::set_slider(&mut h, "stages p", n as f64);
    assert!(
        !h.get_by_label("Run on devices")
            .accesskit_node()
            .is_disabled()
    );
}

#[test]
fn without_devices_the_button_is_disabled_and_says_why() {
    let mut h = common::harness([1200.0, 900.0]);
    let button = h.get_by_label("Run on devices");
    assert!(button.accesskit_node().is_disabled());
    button.hover();
    for _ in 0..6 {
        h.step();
    }
    h.get_by_label_contains("real runs are off: device discovery is off");
}

/// More stages than devices: blocked at p = n + 1, the run goes once the stages fold onto 2
/// devices, and its measured timeline has a lane per device, named so.
#[test]
fn a_folded_run_needs_only_the_folds_devices() {
    let test = "a_folded_run_needs_only_the_folds_devices";
    let Some(mut h) = common::device_harness(test, 2, 2, false) else {
        return;
    };
    let n = h.state().hub.devices().unwrap().len();
    if n >= 16 {
        eprintln!("{test}: skipped, {n} devices cover every p the slider allows");
        return;
    }
    h.get_by_label("1F1B").click();
    h.run_ok();
    common::set_slider(&mut h, "stages p", (n + 1) as f64);
    common::set_slider(&mut h, "microbatches m", 4.0);
    assert!(
        h.get_by_label("Run on devices")
            .accesskit_node()
            .is_disabled()
    );
    h.get_by_label("fewer devices than stages").click();
    h.run_ok();
    common::set_slider(&mut h, "devices", 2.0);
    h.get_by_label("round robin").click();
    h.run_ok();
    let button = h.get_by_label("Run on devices");
    assert!(!button.accesskit_node().is_disabled());
    button.click();
    h.step();
    let deadline = Instant::now() + Duration::from_secs(180);
    while h.state().lab.is_running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        h.step();
    }
    assert!(!h.state().lab.is_running(), "no result within 180 s");
    h.step();
    h.get_by_label(&format!(
        "run: 1F1B, p = {}, m = 4, on 2 devices (round robin)",
        n + 1
    ));
    let run = h.state().lab.measured.as_ref().unwrap().1.as_ref().unwrap();
    assert!(
        run.result.max_weight_error < 1e-4,
        "{}",
        run.result.max_weight_error
    );
    assert_eq!(run.result.devices, 2);
    let lanes: Vec<usize> = run
        .data
        .tracks()
        .iter()
        .filter(|t| t.lane == Lane::Compute)
        .map(|t| t.device)
        .collect();
    assert_eq!(lanes, [0, 1]);
    assert_eq!(run.data.device_prefix.as_deref(), Some("device"));
}
