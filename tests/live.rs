//! Issue 56: a real job watched live. `gangway --live 127.0.0.1:0 train moe` in a child process,
//! attached through the one library client (`gangway::live::LiveClient`), on each adapter:
//!
//! - the hello names the job's devices, kernel events come for each, and the `train/loss`
//!   metrics are the job's own losses, bit for bit (its `--json` report);
//! - a client attaching late gets the hello and the whole metric history;
//! - served `--live-metrics-only`, the job streams the same losses, says in its hello that no
//!   event comes, and sends none;
//! - a client that never reads, one that sends garbage and one with a wrong token leave the
//!   job's losses bit-equal to a run without `--live`, its memory bounded and its exit code 0;
//! - `gangway watch` exits with the job's status, and `gangway trace record` saves the stream
//!   as a trace that reads back;
//! - a job killed with SIGKILL, and one interrupted with SIGINT (Ctrl-C), leave a `--trace` file
//!   that `gangway trace` and the library's reader open.
#![allow(clippy::unwrap_used)]

mod common;

use common::{case, report_losses, rss_kib};
use gangway::Device;
use gangway::live::{LiveClient, Record, Recording};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(device: a_served_job_streams_its_devices_events_and_losses),
        case!(device: a_job_served_metrics_only_streams_its_losses_and_no_event),
        case!(device: bad_clients_leave_the_job_as_it_was),
        case!(device: a_killed_or_interrupted_job_leaves_a_trace_that_opens),
    ])
}

const TOKEN: &str = "live-test-token";

/// A directory of this case's own: the adapters' trials of a case run at once.
fn dir(name: &str, device: &Device) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "gangway-live-{name}-{}-{}",
        device.info().backend,
        std::process::id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `train moe` on two virtual devices of `device`'s backend, small and quick.
fn train_args(device: &Device, steps: u32, json: &Path) -> Vec<String> {
    let backend = device.info().backend.clone();
    let args = [
        "--backends",
        &backend,
        "--virtual-devices",
        "2",
        "train",
        "moe",
        "--devices",
        "2",
        "--steps",
        &steps.to_string(),
        "--batch",
        "32",
        "--context",
        "4",
        "--embed",
        "4",
        "--model",
        "8",
        "--hidden",
        "8",
        "--experts",
        "2",
        "--json",
        json.to_str().unwrap(),
    ];
    args.iter().map(|s| s.to_string()).collect()
}

/// A child served live: its address (the first line of its stderr) and the child. The rest
/// of its stderr is drained on a thread, so it never blocks on a full pipe.
fn serve(args: &[String], extra: &[&str]) -> (String, Child) {
    let (addr, child, _) = serve_logged(args, extra);
    (addr, child)
}

/// [`serve`], and the job's later stderr lines as they come (for a failure to show).
fn serve_logged(args: &[String], extra: &[&str]) -> (String, Child, Arc<Mutex<Vec<String>>>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(["--live", "127.0.0.1:0"])
        .args(extra)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first
        .strip_prefix("live: serving this job at ")
        .unwrap_or_else(|| panic!("the first line names the address: {first}"))
        .to_string();
    let log = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            kept.lock().unwrap().push(line);
        }
    });
    (addr, child, log)
}

fn connect(addr: &str, token: Option<&str>) -> LiveClient {
    LiveClient::connect(addr, token, Duration::from_secs(20)).unwrap()
}

fn wait_ok(mut child: Child) {
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

fn a_served_job_streams_its_devices_events_and_losses(device: &Device) {
    let d = dir("serve", device);
    let json = d.join("report.json");
    let (addr, child) = serve(&train_args(device, 40, &json), &[]);
    let mut client = connect(&addr, None);
    let mut recording = Recording::new(client.hello().clone());
    // A second client, attached once some steps were published, and a `trace record`.
    let mut late = None;
    let record_out = d.join("recorded.json");
    let recorder = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args([
            "trace",
            "record",
            &addr,
            "--out",
            record_out.to_str().unwrap(),
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while recording.end.is_none() {
        assert!(Instant::now() < deadline, "the job never ended");
        if let Some(record) = client.recv(Duration::from_millis(100)).unwrap_or(None) {
            recording.push(record);
        }
        if late.is_none() && recording.series("train/loss").count() >= 10 {
            let mut client = connect(&addr, None);
            // Read as it comes: a client that falls behind while the job ends is cut off.
            late = Some(std::thread::spawn(move || {
                let mut second = Recording::new(client.hello().clone());
                client.record_until_end(&mut second).unwrap();
                second
            }));
        }
    }
    wait_ok(child);
    let losses = report_losses(&json);
    let streamed: Vec<f64> = recording.series("train/loss").map(|m| m.value).collect();
    assert_eq!(
        streamed, losses,
        "the stream's losses are the job's, bit for bit"
    );
    let steps: Vec<u64> = recording
        .series("train/loss")
        .map(|m| m.step.unwrap())
        .collect();
    assert_eq!(steps, (1..=40).collect::<Vec<u64>>());
    let hello = &recording.hello;
    assert_eq!(hello.devices.len(), 2, "{hello:?}");
    assert!(hello.command.iter().any(|a| a == "moe"), "{hello:?}");
    for d in &hello.devices {
        let kernels = recording
            .events
            .iter()
            .filter(|e| e.device == d.track.id && e.kind == gangway::trace::EventKind::Kernel)
            .count();
        assert!(kernels > 0, "no kernel events for {d:?}");
    }
    assert_eq!(
        recording.dropped_events, 0,
        "a reading client loses nothing here"
    );
    // The late client: the hello, then every metric from step 1 on.
    let second = late.expect("a late client attached").join().unwrap();
    assert!(second.end.is_some(), "the late client got the end");
    assert_eq!(second.hello.devices, hello.devices);
    let late_losses: Vec<f64> = second.series("train/loss").map(|m| m.value).collect();
    assert_eq!(late_losses, losses, "the history and the rest");
    // `trace record` saved the stream as a trace the reader takes as gangway's.
    let status = recorder.wait_with_output().unwrap().status;
    assert!(status.success(), "{status:?}");
    let trace = gangway::trace::chrome::read(&std::fs::read(&record_out).unwrap()).unwrap();
    assert!(trace.events.len() > 100, "{} events", trace.events.len());
    let _ = std::fs::remove_dir_all(&d);
}

fn a_job_served_metrics_only_streams_its_losses_and_no_event(device: &Device) {
    let d = dir("metrics-only", device);
    let json = d.join("report.json");
    let (addr, child) = serve(&train_args(device, 12, &json), &["--live-metrics-only"]);
    let mut client = connect(&addr, None);
    let mut recording = Recording::new(client.hello().clone());
    client.record_until_end(&mut recording).unwrap();
    wait_ok(child);
    assert!(!recording.hello.events, "{:?}", recording.hello);
    assert_eq!(recording.hello.devices.len(), 2);
    assert!(
        recording.events.is_empty(),
        "{} events",
        recording.events.len()
    );
    let streamed: Vec<f64> = recording.series("train/loss").map(|m| m.value).collect();
    assert_eq!(streamed, report_losses(&json));
    let _ = std::fs::remove_dir_all(&d);
}

fn bad_clients_leave_the_job_as_it_was(device: &Device) {
    let d = dir("bad", device);
    let steps = 60;
    let plain = d.join("plain.json");
    let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(train_args(device, steps, &plain))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let served = d.join("served.json");
    let (addr, child) = serve(
        &train_args(device, steps, &served),
        &["--live-token", TOKEN],
    );
    let pid = child.id();
    // A client that attaches and never reads.
    let stuck = connect(&addr, Some(TOKEN));
    // One that sends garbage: closed by the job, with a logged reason.
    let mut garbage = TcpStream::connect(&addr).unwrap();
    garbage.write_all(&[0xff; 64]).unwrap();
    garbage.write_all(b"\x00\x00\x00\x05hello").unwrap();
    // One with a wrong token: refused before anything else.
    match LiveClient::connect(addr.as_str(), Some("wrong"), Duration::from_secs(20)) {
        Err(e) => assert!(e.to_string().contains("token"), "{e}"),
        Ok(_) => panic!("a wrong token attached"),
    }
    // One that knows no token at all.
    assert!(LiveClient::connect(addr.as_str(), None, Duration::from_secs(20)).is_err());
    let mut peak = 0;
    let mut child = child;
    while child.try_wait().unwrap().is_none() {
        peak = peak.max(rss_kib(pid));
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(peak < 1 << 20, "{peak} KiB resident");
    drop(stuck);
    assert_eq!(
        report_losses(&served),
        report_losses(&plain),
        "bit-equal losses"
    );
    let _ = std::fs::remove_dir_all(&d);
}

fn a_killed_or_interrupted_job_leaves_a_trace_that_opens(device: &Device) {
    let d = dir("kill", device);
    for signal in ["KILL", "INT"] {
        let trace = d.join(format!("{signal}.json"));
        let json = d.join("report.json");
        let mut args = vec!["--trace".to_string(), trace.display().to_string()];
        args.extend(train_args(device, 100_000, &json));
        let (addr, mut child, log) = serve_logged(&args, &[]);
        // Wait until the job has run some steps.
        let mut client = connect(&addr, None);
        let mut seen = 0;
        while seen < 5 {
            if let Some(Record::Metric(m)) = client.recv(Duration::from_secs(30)).unwrap()
                && m.name == "train/loss"
            {
                seen += 1;
            }
        }
        let kill = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let status = child.wait().unwrap();
        // The reader has the job's last words once its stderr closed.
        std::thread::sleep(Duration::from_millis(200));
        let said = log.lock().unwrap().join("\n");
        match signal {
            "INT" => assert_eq!(status.code(), Some(130), "{status:?}; its stderr:\n{said}"),
            _ => assert_eq!(status.code(), None, "killed: {status:?}"),
        }
        let bytes = std::fs::read(&trace).unwrap();
        let read = gangway::trace::chrome::read(&bytes).unwrap();
        assert_eq!(read.dialect, gangway::trace::chrome::Dialect::Gangway);
        assert!(
            read.events.len() > 10,
            "{signal}: {} events",
            read.events.len()
        );
        if signal == "INT" {
            assert!(
                bytes.trim_ascii_end().ends_with(b"]}"),
                "Ctrl-C closes the file"
            );
        }
        let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args(["trace", trace.to_str().unwrap()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("compute"), "{text}");
        // Its transfers say what they moved: the batches' uploads at least.
        assert!(
            text.contains("moved ") && text.contains("host in "),
            "{text}"
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}
