#![allow(clippy::unwrap_used)]
//! The Attached tab against a real live server in this process: a job with two devices that
//! names them in a second hello, streams kernels on both and `train/loss` metrics, then ends;
//! and an address where nothing listens, which reads as reconnecting, never a panic. Headless
//! (egui_kittest), no adapter needed.

mod common;

use std::time::{Duration, Instant};

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gangway::live::{End, Hello, LiveDevice, LiveServer, Metric, ServeOptions};
use gangway::trace::{EventMeta, Track, ns_since_epoch};
use gangway_viewer::attach::State;
use gangway_viewer::{Tab, ViewerApp};

/// Steps `h` until `done` (at most 30 s), a frame every 20 ms.
fn step_until(h: &mut Harness<'static, ViewerApp>, what: &str, done: impl Fn(&ViewerApp) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done(h.state()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        h.step();
    }
    assert!(
        done(h.state()),
        "not within 30 s: {what}; state {:?}",
        h.state().attached.shown().map(|j| &j.state)
    );
}

/// The app on the Attached tab, attached to `addr` through the address field and Attach.
fn attached_app(addr: &str) -> Harness<'static, ViewerApp> {
    let mut h = common::harness([1400.0, 2400.0]);
    h.run();
    h.get_by_label(Tab::Attached.title()).click();
    h.step();
    assert_eq!(h.state().tab, Tab::Attached);
    h.state_mut().attached.addr = addr.to_string();
    h.step();
    h.get_by_label("Attach").click();
    h.step();
    assert_eq!(h.state().attached.jobs.len(), 1);
    h
}

fn state(app: &ViewerApp) -> State {
    app.attached.shown().unwrap().state.clone()
}

#[test]
fn a_running_job_shows_its_devices_timeline_and_loss_then_its_end() {
    // Served before the job found its devices, as `--live` does: a second hello names them.
    let server = LiveServer::bind(
        "127.0.0.1:0",
        ServeOptions::default(),
        Hello::for_this_process(),
    )
    .unwrap();
    let addr = server.local_addr().to_string();
    let mut h = attached_app(&addr);
    step_until(&mut h, "attached", |a| state(a) == State::Running);
    assert!(server.client_count() >= 1);

    let mut hello = Hello::for_this_process();
    hello.hosts = vec!["testhost".into()];
    hello.devices = (0..2)
        .map(|id| LiveDevice {
            id,
            rank: 0,
            host: "testhost".into(),
            adapter: format!("Test Adapter {id}"),
            backend: "vulkan".into(),
            track: Track::device(id, format!("test gpu {id} (vulkan)")),
        })
        .collect();
    server.update_hello(hello).unwrap();
    let now = ns_since_epoch(Instant::now());
    for device in 0..2 {
        let events: Vec<_> = (0..20u64)
            .map(|i| {
                let start = now.saturating_sub(40_000_000) + i * 2_000_000;
                EventMeta::kernel(device).event(format!("matmul {i}"), start, start + 1_000_000)
            })
            .collect();
        server.publish_events(0, &events);
    }
    let losses = [4.5, 3.9, 3.2, 2.8, 2.5];
    for (s, v) in losses.iter().enumerate() {
        server.publish_metric(Metric::now("train/loss", *v).at_step(s as u64 + 1));
    }
    server.finish(End::ok());

    step_until(&mut h, "the end", |a| {
        matches!(state(a), State::Finished(_))
    });
    h.step();
    let job = h.state().attached.shown().unwrap();
    assert_eq!(job.data.len(), 40, "both devices' kernels on the timeline");
    assert_eq!(job.recording.as_ref().unwrap().events.len(), 40);
    let loss: Vec<f64> = job.series["train/loss"][""]
        .points
        .iter()
        .map(|p| p[1])
        .collect();
    assert_eq!(loss, losses);
    assert_eq!(job.dropped(), (0, 0));

    h.get_by_label("state: finished: ok (exit code 0)");
    h.get_by_label("loss per step");
    h.get_by_label_contains("loss 2.5000");
    h.get_by_label("test gpu 0 (vulkan)");
    h.get_by_label("test gpu 1 (vulkan)");
    h.get_by_label("Test Adapter 1");
    h.get_by_label_contains("dropped events: 0");
    // The timeline titles each device's rows with its lane's label.
    let texts = common::painted_texts(&h.output().shapes);
    for label in [
        "test gpu 0 (vulkan)",
        "test gpu 1 (vulkan)",
        "dev 1 compute",
    ] {
        assert!(
            texts.iter().filter(|t| t.as_str() == label).count() >= 1,
            "{label} not painted: {texts:?}"
        );
    }
    // The list of attachments says how it ended.
    h.get_by_label(&format!("{addr} (finished ok)"));
    assert!(h.state().attached.recent.contains(&addr));
}

#[test]
fn save_trace_writes_what_arrived_and_asks_before_overwriting() {
    let server = LiveServer::bind(
        "127.0.0.1:0",
        ServeOptions::default(),
        Hello::for_this_process(),
    )
    .unwrap();
    let mut h = attached_app(&server.local_addr().to_string());
    step_until(&mut h, "attached", |a| state(a) == State::Running);
    let now = ns_since_epoch(Instant::now());
    let events: Vec<_> = (0..5u64)
        .map(|i| EventMeta::kernel(0).event(format!("k{i}"), now + i * 10, now + i * 10 + 5))
        .collect();
    server.publish_events(0, &events);
    server.finish(End::error(3, "it broke"));
    step_until(&mut h, "the end", |a| {
        matches!(state(a), State::Finished(_))
    });
    h.get_by_label("state: finished: error (exit code 3): it broke");

    let dir = std::env::temp_dir().join(format!("gangway-attach-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("attached.json");
    std::fs::write(&path, "keep me").unwrap();
    h.state_mut().attached.jobs[0].save.path = path.display().to_string();
    h.step();
    h.get_by_label("Save trace").click();
    h.step();
    h.get_by_label_contains("exists. Replace it?");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me");
    h.get_by_label("Overwrite").click();
    h.step();
    step_until(&mut h, "the save", |a| !a.attached.jobs[0].is_saving());
    h.step();
    h.get_by_label_contains("saved 5 events to");
    h.get_by_label_contains("the job dropped 0 events for this viewer");
    let saved = gangway::trace::chrome::read(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(saved.events.len(), 5);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn nothing_listening_reads_as_reconnecting_never_a_panic() {
    // A port that was free a moment ago: bound, then released.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let mut h = attached_app(&addr);
    step_until(&mut h, "the failed connect", |a| {
        matches!(state(a), State::Retrying { .. })
    });
    h.step();
    let State::Retrying {
        why,
        attached_before,
    } = state(h.state())
    else {
        unreachable!()
    };
    assert!(!attached_before);
    assert!(why.contains(&addr), "{why}");
    h.get_by_label_contains("cannot connect: ");
    h.get_by_label_contains("reconnecting every 2 s");
    h.get_by_label(&format!("{addr} (reconnecting)"));
    // It keeps trying, and Detach stops it.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        h.step();
    }
    assert!(h.state().attached.jobs[0].is_reading());
    h.get_by_label("Detach").click();
    h.step();
    h.step();
    assert!(!h.state().attached.jobs[0].is_reading());
    assert_eq!(state(h.state()), State::Detached);
    h.get_by_label("Reconnect");
    h.get_by_label(&format!("{addr} (detached)"));
}

#[test]
fn an_address_without_a_port_is_refused_in_the_tab() {
    let mut h = common::harness([1000.0, 700.0]);
    h.run();
    h.get_by_label(Tab::Attached.title()).click();
    h.step();
    h.state_mut().attached.addr = "localhost".into();
    h.step();
    h.get_by_label("Attach").click();
    h.step();
    assert!(h.state().attached.jobs.is_empty());
    h.get_by_label_contains("is not an address: give HOST:PORT");
}

#[test]
fn a_lost_connection_reconnects_and_takes_the_resent_history_once() {
    let now = ns_since_epoch(Instant::now());
    let kernel =
        |i: u64| EventMeta::kernel(0).event(format!("k{i}"), now + i * 100, now + i * 100 + 50);
    let loss = |s: u64| Metric::now("train/loss", 5.0 - s as f64).at_step(s);
    let (early_events, early_metrics): (Vec<_>, Vec<_>) =
        ((0..3).map(kernel).collect(), (0..3).map(loss).collect());

    let first = LiveServer::bind(
        "127.0.0.1:0",
        ServeOptions::default(),
        Hello::for_this_process(),
    )
    .unwrap();
    let addr = first.local_addr();
    let mut h = attached_app(&addr.to_string());
    step_until(&mut h, "attached", |a| state(a) == State::Running);
    first.publish_events(0, &early_events);
    for m in &early_metrics {
        first.publish_metric(m.clone());
    }
    step_until(&mut h, "the first records", |a| {
        a.attached.jobs[0].data.len() == 3
    });
    // The job's server goes away without an end (its process was killed, say)...
    drop(first);
    step_until(&mut h, "the loss", |a| {
        matches!(
            state(a),
            State::Retrying {
                attached_before: true,
                ..
            }
        )
    });
    h.step();
    h.get_by_label_contains("connection lost: ");
    // ...and comes back at the same address, as the same job: it sends its history again.
    let second =
        LiveServer::bind(addr, ServeOptions::default(), Hello::for_this_process()).unwrap();
    second.publish_events(0, &early_events);
    for m in &early_metrics {
        second.publish_metric(m.clone());
    }
    second.publish_events(0, &[kernel(3)]);
    second.publish_metric(loss(3));
    step_until(&mut h, "the reconnect", |a| state(a) == State::Running);
    second.finish(End::ok());
    step_until(&mut h, "the end", |a| {
        matches!(state(a), State::Finished(_))
    });
    let job = &h.state().attached.jobs[0];
    assert_eq!(job.data.len(), 4, "each event once");
    assert_eq!(job.recording.as_ref().unwrap().events.len(), 4);
    let steps: Vec<f64> = job.series["train/loss"][""]
        .points
        .iter()
        .map(|p| p[0])
        .collect();
    assert_eq!(steps, [0.0, 1.0, 2.0, 3.0], "each metric once");
}

/// On a window whose frames are expensive (llvmpipe's 150 ms of CPU each, fed to the window's
/// pace meter), the reader gathers a job's events for about a second before it asks for a
/// frame, where a cheap window's reader asks four times a second: events published every
/// 50 ms reach the timeline in batches about a second apart.
#[test]
fn an_expensive_window_takes_a_jobs_events_about_once_a_second() {
    use gangway_viewer::pace::{FramePace, PaceMeter};
    let server = LiveServer::bind(
        "127.0.0.1:0",
        ServeOptions::default(),
        Hello::for_this_process(),
    )
    .unwrap();
    let mut h = common::harness([1400.0, 2400.0]);
    h.run();
    // Frames of 150 ms of CPU with a little background, 0.2 and 0.3 s apart.
    let pace = FramePace::of(Some(&h.ctx));
    let mut meter = PaceMeter::default();
    let (mut t, mut cpu) = (Instant::now(), Duration::ZERO);
    for i in 0..20 {
        meter.frame(t, Some(cpu), &pace);
        let d = Duration::from_millis(if i % 2 == 0 { 200 } else { 300 });
        t += d;
        cpu += Duration::from_millis(150) + d / 20;
    }
    let every = pace.every();
    assert!(
        (Duration::from_millis(750)..=Duration::from_millis(1250)).contains(&every),
        "{every:?}"
    );
    assert!(
        pace.describe().contains("a frame costs 150 ms of CPU"),
        "{}",
        pace.describe()
    );

    h.get_by_label(Tab::Attached.title()).click();
    h.step();
    h.state_mut().attached.addr = server.local_addr().to_string();
    h.step();
    h.get_by_label("Attach").click();
    h.step();
    step_until(&mut h, "attached", |a| state(a) == State::Running);

    let started = Instant::now();
    let mut arrivals: Vec<Duration> = Vec::new();
    let mut seen = 0;
    let mut next = 0u64;
    while started.elapsed() < Duration::from_secs(4) {
        let now = ns_since_epoch(Instant::now());
        server.publish_events(
            0,
            &[EventMeta::kernel(0).event(format!("k{next}"), now, now + 1)],
        );
        next += 1;
        std::thread::sleep(Duration::from_millis(50));
        h.step();
        let len = h.state().attached.shown().unwrap().data.len();
        if len > seen {
            seen = len;
            arrivals.push(started.elapsed());
        }
    }
    // A cheap window's pace would bring them in about 16 batches.
    assert!((3..=6).contains(&arrivals.len()), "{arrivals:?}");
    for gap in arrivals.windows(2).map(|w| w[1] - w[0]) {
        assert!(
            gap >= every.mul_f64(0.9),
            "{gap:?} apart at a pace of {every:?}: {arrivals:?}"
        );
    }
}
