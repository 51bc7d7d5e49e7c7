#![allow(clippy::unwrap_used)]
//! The MoE training panel driven through its UI: a short run on real (virtual) devices, Stop,
//! an expert count the devices cannot split, and no devices at all. Runs on devices skip with a
//! message when too few devices exist (fail instead under `GANGWAY_REQUIRE_ADAPTER=1`).

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};
use gangway_viewer::{Tab, ViewerApp};

/// [`common::device_harness`] on the MoE tab.
fn device_harness(
    test: &str,
    virtual_devices: usize,
    needed: usize,
    live: bool,
) -> Option<Harness<'static, ViewerApp>> {
    let mut h = common::device_harness(test, virtual_devices, needed, live)?;
    h.get_by_label("MoE training").click();
    h.step();
    assert_eq!(h.state().tab, Tab::Moe);
    Some(h)
}

fn click(h: &mut Harness<'_, ViewerApp>, label: &str) {
    h.get_by_label(label).click();
    h.run_ok();
}

/// Steps the harness until the run is over (at most `limit`); whether the live workload was held
/// at any point meanwhile.
fn wait_for_run(h: &mut Harness<'_, ViewerApp>, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut saw_hold = false;
    while h.state().moe.is_running() && Instant::now() < deadline {
        if let Some(r) = &h.state().live.runner {
            saw_hold |= r.hold.load(Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(50));
        h.step();
    }
    assert!(!h.state().moe.is_running(), "no result within {limit:?}");
    h.step();
    saw_hold
}

/// Starts a 2000-step run of 32-token batches without validation, and steps the harness until
/// `steps` steps have been reported (at most 120 s).
fn start_long_run(h: &mut Harness<'_, ViewerApp>, steps: usize) {
    common::set_slider(h, "steps", 2000.0);
    common::set_slider(h, "batch (tokens)", 32.0);
    common::set_slider(h, "validate every", 0.0);
    assert_eq!(h.state().moe.settings.steps, 2000);
    h.get_by_label("Start training").click();
    h.step();
    let deadline = Instant::now() + Duration::from_secs(120);
    while h.state().moe.history.len() < steps && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        h.step();
    }
    assert!(
        h.state().moe.history.len() >= steps,
        "not {steps} steps within 120 s"
    );
}

#[test]
fn a_short_run_shows_loss_aux_dropped_and_tokens_per_expert() {
    let test = "a_short_run_shows_loss_aux_dropped_and_tokens_per_expert";
    let Some(mut h) = device_harness(test, 1, 1, true) else {
        return;
    };
    // Started by the user, the live workload runs on every tab: training must hold it.
    common::start_live(&mut h);
    click(&mut h, "2 experts");
    click(&mut h, "top-1 (Switch)");
    common::set_slider(&mut h, "devices", 1.0);
    common::set_slider(&mut h, "steps", 8.0);
    common::set_slider(&mut h, "batch (tokens)", 32.0);
    common::set_slider(&mut h, "validate every", 4.0);
    let s = h.state().moe.settings;
    assert_eq!(
        (
            s.experts,
            s.top_k,
            s.devices,
            s.steps,
            s.batch,
            s.eval_every
        ),
        (2, 1, 1, 8, 32, 4)
    );
    let start = h.get_by_label("Start training");
    assert!(!start.accesskit_node().is_disabled());
    assert!(h.get_by_label("Stop").accesskit_node().is_disabled());
    h.get_by_label("Start training").click();
    h.step();
    h.step();
    let t0 = Instant::now();
    let saw_hold = wait_for_run(&mut h, Duration::from_secs(120));
    eprintln!("{test}: run took {:.1} s", t0.elapsed().as_secs_f64());
    let r = h.state().live.runner.as_ref().unwrap();
    assert!(saw_hold, "the live workload was not held during training");
    assert!(!r.hold.load(Ordering::Relaxed), "still held after training");

    let moe = &h.state().moe;
    assert_eq!(moe.error, None);
    assert_eq!(moe.history.len(), 8);
    assert!(moe.history.iter().all(|s| s.tokens_per_expert.len() == 2));
    assert_eq!(moe.valid.iter().map(|v| v.0).collect::<Vec<_>>(), [4, 8]);
    let report = moe.report.as_ref().unwrap();
    assert_eq!(report.steps, 8);
    let last = moe.history.last().unwrap().clone();

    // The run is one more source of the viewer's stream: a client of the address it is served
    // at (a late one: the run is over) gets its losses, bit for bit, and its kernels.
    let addr = h.state().hub.served_at().unwrap().unwrap();
    let mut client =
        gangway::live::LiveClient::connect(addr, None, Duration::from_secs(10)).unwrap();
    let mut got = gangway::live::Recording::new(client.hello().clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    let kernel = |got: &gangway::live::Recording| {
        got.events
            .iter()
            .any(|e| e.kind == gangway::trace::EventKind::Kernel)
    };
    // The history comes metrics first, then the events.
    while (got.series("train/loss").count() < 8 || !kernel(&got)) && Instant::now() < deadline {
        if let Some(r) = client.recv(Duration::from_millis(100)).unwrap() {
            got.push(r);
        }
    }
    let streamed: Vec<f64> = got.series("train/loss").map(|m| m.value).collect();
    let losses: Vec<f64> = moe.history.iter().map(|s| s.loss).collect();
    assert_eq!(streamed, losses);
    assert!(!got.hello.devices.is_empty());
    assert!(kernel(&got), "no kernel in the served history");

    h.get_by_label("run: 2 experts, top-1, capacity 1.25, 1 device, 8 steps of 32 tokens");
    h.get_by_label_contains("finished 8 steps in ");
    h.get_by_label(&format!("loss (ce): {:.3}", last.ce));
    h.get_by_label(&format!("aux loss: {:.4}", last.aux));
    h.get_by_label(&format!("dropped: {:.1}%", last.dropped_fraction * 100.0));
    h.get_by_label_contains("tokens/s: ");
    h.get_by_label_contains("validation: ");
    h.get_by_label("loss per step");
    h.get_by_label("dropped fraction per step (%)");
    h.get_by_label_contains("tokens per expert at step 8 (");

    // The step slider shows an earlier step's bars; "latest" goes back.
    common::set_slider(&mut h, "step shown", 3.0);
    assert_eq!(h.state().moe.shown_step, Some(3));
    h.get_by_label_contains("tokens per expert at step 3 (");
    click(&mut h, "latest");
    assert_eq!(h.state().moe.shown_step, None);
    h.get_by_label_contains("tokens per expert at step 8 (");
}

#[test]
fn stop_ends_a_long_run_early_with_a_report() {
    let test = "stop_ends_a_long_run_early_with_a_report";
    let Some(mut h) = device_harness(test, 1, 1, false) else {
        return;
    };
    click(&mut h, "2 experts");
    start_long_run(&mut h, 2);
    let stop = h.get_by_label("Stop");
    assert!(!stop.accesskit_node().is_disabled());
    stop.click();
    h.step();
    wait_for_run(&mut h, Duration::from_secs(120));
    let moe = &h.state().moe;
    assert_eq!(moe.error, None);
    let report = moe.report.as_ref().unwrap();
    assert!(report.steps < 2000, "{} steps", report.steps);
    assert_eq!(report.steps as usize, moe.history.len());
    h.get_by_label_contains(&format!("stopped after {} of 2000 steps", report.steps));
}

#[test]
fn experts_not_divisible_by_devices_disable_start_and_say_why() {
    let test = "experts_not_divisible_by_devices_disable_start_and_say_why";
    let Some(mut h) = device_harness(test, 3, 3, false) else {
        return;
    };
    click(&mut h, "8 experts");
    common::set_slider(&mut h, "devices", 3.0);
    assert_eq!(h.state().moe.settings.devices, 3);
    assert!(
        h.get_by_label("Start training")
            .accesskit_node()
            .is_disabled()
    );
    h.get_by_label_contains("cannot start: 8 experts cannot be split evenly over 3 devices");
    // 2 devices split 8 experts: enabled.
    common::set_slider(&mut h, "devices", 2.0);
    assert!(
        !h.get_by_label("Start training")
            .accesskit_node()
            .is_disabled()
    );
    assert!(h.query_by_label_contains("cannot start:").is_none());
}

#[test]
fn without_devices_the_panel_says_why_and_start_is_disabled() {
    let mut h = common::harness([1200.0, 900.0]);
    h.get_by_label("MoE training").click();
    h.run();
    assert_eq!(h.state().tab, Tab::Moe);
    h.get_by_label_contains("MoE training is off: real runs are off: device discovery is off");
    let start = h.get_by_label("Start training");
    assert!(start.accesskit_node().is_disabled());
    start.hover();
    for _ in 0..6 {
        h.step();
    }
    // The panel's line and the button's tooltip.
    assert!(
        h.query_all_by_label_contains("real runs are off: device discovery is off")
            .count()
            >= 2
    );
    assert!(h.get_by_label("Stop").accesskit_node().is_disabled());
    assert!(!h.state().moe.is_running());
}

#[test]
fn a_device_lost_mid_training_shows_the_error_and_the_viewer_keeps_running() {
    let test = "a_device_lost_mid_training_shows_the_error_and_the_viewer_keeps_running";
    let Some(mut h) = device_harness(test, 4, 4, false) else {
        return;
    };
    click(&mut h, "8 experts");
    common::set_slider(&mut h, "devices", 4.0);
    assert_eq!(h.state().moe.settings.devices, 4);
    start_long_run(&mut h, 1);
    // The third of the run's four devices goes, as a driver reset would take it.
    let lost = h.state().hub.devices().unwrap()[2].clone();
    lost.destroy();
    wait_for_run(&mut h, Duration::from_secs(120));
    let error = h.state().moe.error.clone().unwrap();
    assert!(error.contains("was lost"), "{error}");
    assert!(error.contains(&lost.label()), "{error}");
    h.get_by_label_contains(&format!("training failed: device {}", lost.label()));
    // The viewer goes on: another tab draws, and the panel can start again.
    h.get_by_label("Devices").click();
    h.run_ok();
    assert_eq!(h.state().tab, Tab::Devices);
    h.get_by_label("MoE training").click();
    h.run_ok();
    assert_eq!(h.state().tab, Tab::Moe);
    assert!(!h.state().moe.is_running());
    assert!(
        !h.get_by_label("Start training")
            .accesskit_node()
            .is_disabled()
    );
}

#[test]
fn the_live_timeline_shows_the_kernels_of_training_started_from_the_panel() {
    let test = "the_live_timeline_shows_the_kernels_of_training_started_from_the_panel";
    let Some(mut h) = device_harness(test, 2, 2, false) else {
        return;
    };
    click(&mut h, "2 experts");
    common::set_slider(&mut h, "devices", 2.0);
    start_long_run(&mut h, 2);
    h.get_by_label("Stop").click();
    h.step();
    wait_for_run(&mut h, Duration::from_secs(120));
    // The run's kernels reached the live timeline through the runtime's event stream: named by
    // their program node, on both devices, beside the all-to-all's transfers.
    let devices: Vec<usize> = h.state().hub.devices().unwrap()[..2]
        .iter()
        .map(gangway::Device::id)
        .collect();
    let data = &h.state().live.data;
    for &device in &devices {
        for name in [
            "r0 b0 router",
            "r0 b0 expert w1",
            "r0 b0 expert weight grads",
        ] {
            assert!(
                data.all_events().any(|e| e.device == device
                    && e.kind == gangway::trace::EventKind::Kernel
                    && e.name == name),
                "no kernel {name:?} on device {device} in the live timeline ({} events)",
                data.len()
            );
        }
        assert!(
            data.all_events()
                .any(|e| e.device == device && e.name.contains("all-to-all forward")),
            "no all-to-all on device {device}"
        );
    }
    h.get_by_label("Live timeline").click();
    h.step();
    // The tab counts what it holds (its frame had the same data the state has now).
    let held = h.state().live.data.len();
    h.get_by_label(&format!("{held} events"));
}
