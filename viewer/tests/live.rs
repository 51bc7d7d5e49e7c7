#![allow(clippy::unwrap_used)]
//! Real work on real devices: the live workload streams events, utilization is measured, and
//! the dispatch comparison traces both modes. Skipped with a message when no adapter exists
//! (fails instead under `GANGWAY_REQUIRE_ADAPTER=1`).

mod common;

use std::time::{Duration, Instant};

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

use gangway::sched::{DispatchMode, Runtime, RuntimeOptions};
use gangway::trace::{EventKind, Lane};
use gangway::{DiscoveryOptions, discover};
use gangway_viewer::dispatch_compare::{RUNS, compare};
use gangway_viewer::live::{DeviceHub, Discovery};
use gangway_viewer::live_view::LiveView;
use gangway_viewer::{Tab, ViewerApp};

fn devices(test: &str) -> Option<Vec<gangway::Device>> {
    match DiscoveryOptions::from_env().and_then(|o| discover(&o)) {
        Ok(d) => Some(d),
        Err(e) => {
            assert!(
                std::env::var("GANGWAY_REQUIRE_ADAPTER").as_deref() != Ok("1"),
                "{test}: {e}"
            );
            eprintln!("{test}: skipped, no devices: {e}");
            None
        }
    }
}

#[test]
fn live_workload_streams_events_and_measures_utilization() {
    let hub = DeviceHub::discover_in_background(None);
    let deadline = Instant::now() + Duration::from_secs(60);
    while matches!(hub.get(), Discovery::Pending) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Discovery::Unavailable(why) = hub.get() {
        assert!(
            std::env::var("GANGWAY_REQUIRE_ADAPTER").as_deref() != Ok("1"),
            "no devices: {why}"
        );
        eprintln!("live_workload_streams_events_and_measures_utilization: skipped, {why}");
        return;
    }
    let mut live = LiveView::default();
    live.start(&hub, None);
    // What the Live tab shows is the stream the viewer serves: another client of that address
    // gets the same devices and kernels.
    let addr = hub.served_at().unwrap().unwrap();
    assert!(addr.ip().is_loopback(), "{addr}");
    let mut client =
        gangway::live::LiveClient::connect(addr, None, Duration::from_secs(10)).unwrap();
    assert_eq!(client.hello().devices.len(), hub.devices().unwrap().len());
    let deadline = Instant::now() + Duration::from_secs(60);
    while (live.data.len() < 50 || live.utilization.series.is_empty()) && Instant::now() < deadline
    {
        live.poll();
        std::thread::sleep(Duration::from_millis(50));
    }
    live.stop();
    assert!(live.error.is_none(), "{:?}", live.error);
    assert!(live.data.len() >= 50, "{} events", live.data.len());
    assert!(
        live.data
            .all_events()
            .any(|e| e.kind == EventKind::Kernel && e.lane == Lane::Compute)
    );
    let u = live.current(0).unwrap();
    assert!((0.0..=1.0).contains(&u), "{u}");
    let mut kernels = 0;
    while kernels == 0 {
        match client.recv(Duration::from_secs(5)).unwrap() {
            Some(gangway::live::Record::Event { event, .. }) => {
                kernels += usize::from(event.kind == EventKind::Kernel);
            }
            Some(_) => {}
            None => panic!("the served stream sent no kernel"),
        }
    }
}

#[test]
fn comparison_traces_both_modes() {
    let Some(devices) = devices("comparison_traces_both_modes") else {
        return;
    };
    let runtime = Runtime::new(devices.clone(), RuntimeOptions::default()).unwrap();
    let runs = compare(&runtime).unwrap();
    let modes: Vec<_> = runs.iter().map(|r| r.mode).collect();
    assert_eq!(modes, [DispatchMode::Sequential, DispatchMode::Parallel]);
    let stages = devices.len().clamp(1, 4);
    for r in &runs {
        let kernels = r
            .data
            .all_events()
            .filter(|e| e.kind == EventKind::Kernel)
            .count();
        assert_eq!(kernels, RUNS * stages, "{:?}", r.mode);
        assert!(r.wall_ns > 0);
    }
}

/// Steps `h` for `d`, a frame every 50 ms.
fn step_for(h: &mut Harness<'static, ViewerApp>, d: Duration) {
    let deadline = Instant::now() + d;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        h.step();
    }
}

/// Steps `h` until `done` (at most 60 s).
fn step_until(h: &mut Harness<'static, ViewerApp>, what: &str, done: impl Fn(&ViewerApp) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(h.state()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        h.step();
    }
    assert!(done(h.state()), "not within 60 s: {what}");
}

fn show(h: &mut Harness<'static, ViewerApp>, tab: Tab) {
    h.get_by_label(tab.title()).click();
    h.step();
    assert_eq!(h.state().tab, tab);
}

/// Bug 10: the default launch left the workload running on every tab (100–150 % CPU on the
/// lab). It runs only while the Live timeline (or Devices) tab is shown, and the lab then asks
/// for no frames at all.
#[test]
fn the_default_launch_runs_the_workload_only_while_its_tab_is_shown() {
    let test = "the_default_launch_runs_the_workload_only_while_its_tab_is_shown";
    let Some(mut h) = common::device_harness(test, 1, 1, true) else {
        return;
    };
    step_for(&mut h, Duration::from_millis(300));
    assert_eq!(h.state().tab, Tab::BubbleLab);
    assert!(h.state().live.runner.is_none(), "runs on the lab tab");
    // Idle: no repaint requests, so `run` settles within its step limit.
    h.try_run()
        .expect("the lab keeps asking for frames while idle");

    show(&mut h, Tab::Live);
    assert!(
        h.state().live.runner.is_some(),
        "not started on the Live tab"
    );
    step_until(&mut h, "events on the Live tab", |a| {
        a.live.data.len() >= 20
    });
    show(&mut h, Tab::Devices);
    assert!(
        h.state().live.runner.is_some(),
        "stopped on the Devices tab"
    );
    show(&mut h, Tab::BubbleLab);
    assert!(h.state().live.runner.is_none(), "still runs on the lab tab");
}

/// Bug 1: Stop did not stop (the app restarted the workload at once, and follow-live turned
/// itself on).
#[test]
fn stop_stops_the_workload_until_start() {
    let test = "stop_stops_the_workload_until_start";
    let Some(mut h) = common::device_harness(test, 1, 1, true) else {
        return;
    };
    show(&mut h, Tab::Live);
    step_until(&mut h, "events", |a| a.live.data.len() >= 20);
    h.state_mut().live.timeline.follow_live = false;
    h.get_by_label("Stop workload").click();
    h.step();
    // The stream's last batch comes within its 250 ms batching after the last run.
    step_for(&mut h, Duration::from_millis(800));
    let count = h.state().live.data.len();
    step_for(&mut h, Duration::from_secs(1));
    let live = &h.state().live;
    assert!(live.runner.is_none(), "the workload restarted after Stop");
    assert_eq!(live.data.len(), count, "events still arrive after Stop");
    assert!(!live.timeline.follow_live, "follow-live turned itself on");
    h.get_by_label("Start workload");
    // Leaving the tab and coming back does not restart it either.
    show(&mut h, Tab::BubbleLab);
    show(&mut h, Tab::Live);
    assert!(h.state().live.runner.is_none());
}

/// Bug 2: Start → Stop → Start restarted the clock at 0, froze the span and added empty
/// sub-rows. The restarted run continues the same clock and the same rows.
#[test]
fn restarting_the_workload_continues_the_timeline() {
    let test = "restarting_the_workload_continues_the_timeline";
    let Some(mut h) = common::device_harness(test, 1, 1, false) else {
        return;
    };
    show(&mut h, Tab::Live);
    assert!(h.state().live.runner.is_none(), "--no-live started it");
    h.get_by_label("Start workload").click();
    h.step();
    step_until(&mut h, "first events", |a| a.live.data.len() >= 20);
    h.get_by_label("Stop workload").click();
    h.step();
    step_for(&mut h, Duration::from_millis(200));
    let data = &h.state().live.data;
    let (count, span) = (data.len(), data.span().unwrap());
    let last_end = data.all_events().map(|e| e.end_ns).max().unwrap();

    h.get_by_label("Start workload").click();
    h.step();
    step_until(&mut h, "events after the restart", |a| {
        a.live.data.len() >= count + 20
    });
    let data = &h.state().live.data;
    let later: Vec<_> = data
        .all_events()
        .filter(|e| e.start_ns > last_end)
        .collect();
    assert!(
        later.len() >= 20,
        "{} events after the first run's last one: the clock went back",
        later.len()
    );
    assert!(data.span().unwrap().end > span.end, "the span froze");
    // Overlapping events (parallel readbacks) may need more sub-rows; an empty one is the bug.
    for t in data.tracks() {
        let used: std::collections::BTreeSet<u32> = t.rows().iter().copied().collect();
        assert_eq!(
            used.len(),
            t.row_count(),
            "{} has empty sub-rows after the restart",
            data.track_label(t)
        );
    }
}

/// Bug 4: pausing the view recorded 0 % utilization for as long as it was paused, although
/// the workload kept running. Pause freezes the timeline only.
#[test]
fn pausing_the_view_keeps_measuring_utilization() {
    let test = "pausing_the_view_keeps_measuring_utilization";
    let Some(mut h) = common::device_harness(test, 1, 1, true) else {
        return;
    };
    show(&mut h, Tab::Live);
    step_until(&mut h, "utilization samples", |a| {
        a.live
            .utilization
            .series
            .get(&0)
            .is_some_and(|s| s.len() >= 2)
    });
    h.get_by_label("pause").click();
    h.step();
    let paused_at = h.state().live.utilization.series[&0].back().unwrap()[0];
    let count = h.state().live.data.len();
    step_for(&mut h, Duration::from_secs(2));
    let live = &h.state().live;
    assert_eq!(live.data.len(), count, "the paused timeline changed");
    let during: Vec<f64> = live.utilization.series[&0]
        .iter()
        .filter(|p| p[0] > paused_at)
        .map(|p| p[1])
        .collect();
    assert!(during.len() >= 3, "{} samples while paused", during.len());
    assert!(
        during.iter().any(|&u| u > 0.0),
        "0 % utilization while paused: {during:?}"
    );
    h.get_by_label("pause").click();
    h.step();
    h.step();
    assert!(
        h.state().live.data.len() > count,
        "the events of the pause did not reach the timeline on resume"
    );
}

/// Bug 9: a mistyped flag opened as a file. Unknown flags are clap errors (exit code 2), before
/// any window opens.
#[test]
fn a_mistyped_flag_is_an_error_not_a_file() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gangway-viewer"))
        .arg("--no-device")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unexpected argument '--no-device'"),
        "{stderr}"
    );
    assert!(stderr.contains("--no-devices"), "no suggestion: {stderr}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gangway-viewer"))
        .args(["--virtual-devices", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
