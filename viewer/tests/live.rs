#![allow(clippy::unwrap_used)]
//! Real work on real devices: the live workload streams events, utilization is measured, and
//! the dispatch comparison traces both modes. Skipped with a message when no adapter exists
//! (fails instead under `GANGWAY_REQUIRE_ADAPTER=1`).

use std::time::{Duration, Instant};

use gangway::sched::DispatchMode;
use gangway::trace::{EventKind, Lane};
use gangway::{DiscoveryOptions, discover};
use gangway_viewer::dispatch_compare::{RUNS, compare};
use gangway_viewer::live::{DeviceHub, Discovery};
use gangway_viewer::live_view::LiveView;

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
    let deadline = Instant::now() + Duration::from_secs(60);
    while (live.data.len() < 50 || live.utilization.is_empty()) && Instant::now() < deadline {
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
}

#[test]
fn comparison_traces_both_modes() {
    let Some(devices) = devices("comparison_traces_both_modes") else {
        return;
    };
    let runs = compare(&devices).unwrap();
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
