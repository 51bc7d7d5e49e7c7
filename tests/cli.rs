//! The `gangway` binary end to end: `pipeline` output, `bench dispatch` reports (on each adapter),
//! and `--trace` files that pass the Chrome trace structure check.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Adapters, Span, case};
use gangway::trace::chrome;
use std::process::Command;

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(host: pipeline_prints_the_textbook_bubble_and_traces_the_simulation),
        case!(host: bad_pipeline_parameters_are_clear_errors),
        case!(device: bench_dispatch_writes_json_and_a_valid_trace),
        case!(adapters: pipeline_run_trains_on_devices_and_matches_one_device).span(Span::All),
        case!(adapters: train_moe_reports_bits_per_byte_and_resumes_from_its_checkpoint)
            .span(Span::All),
    ])
}

fn gangway(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "gangway {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn checked_trace(path: &std::path::Path) -> chrome::ChromeSummary {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    chrome::check(&json).unwrap()
}

fn pipeline_prints_the_textbook_bubble_and_traces_the_simulation() {
    let dir = std::env::temp_dir().join(format!("gangway-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("pipeline.json");
    let out = gangway(&[
        "pipeline",
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert!(
        out.contains("bubble: 27.3% of total time (textbook 27.3%)"),
        "{out}"
    );
    assert!(
        out.contains("peak activations per stage: [4, 3, 2, 1]"),
        "{out}"
    );
    assert_eq!(out.lines().filter(|l| l.starts_with("stage ")).count(), 4);
    let summary = checked_trace(&trace);
    assert_eq!(summary.processes, 4);
    assert!(summary.flow_pairs > 0);
}

fn bad_pipeline_parameters_are_clear_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args([
            "pipeline",
            "--schedule",
            "interleaved",
            "--stages",
            "4",
            "--microbatches",
            "6",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("multiple"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Two virtual devices of the device's adapter, by `--adapters <index>`.
fn bench_dispatch_writes_json_and_a_valid_trace(device: &gangway::Device) {
    let index = device.info().adapter.to_string();
    let dir = common::scratch_path("cli-bench", device);
    std::fs::create_dir_all(&dir).unwrap();
    let (json, trace) = (dir.join("dispatch.json"), dir.join("trace.json"));
    let table = gangway(&[
        "--virtual-devices",
        "2",
        "bench",
        "dispatch",
        "--adapters",
        &index,
        "--runs",
        "2",
        "--samples",
        "1",
        "--warmup",
        "0",
        "--max-stages",
        "2",
        "--json",
        json.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert!(
        table.contains("| dispatch | chain 2 stages, parallel |"),
        "{table}"
    );
    let report = gangway::bench::Report::load(&json).unwrap();
    assert!(!report.results.is_empty());
    assert!(report.results.iter().all(|r| r.suite == "dispatch"
        && r.figure.as_ref().unwrap().value > 0.0
        && r.figure.as_ref().unwrap().unit == "computations/s"));
    let summary = checked_trace(&trace);
    assert!(
        summary.flow_pairs > 0 && summary.counters > 0,
        "{summary:?}"
    );
}

/// The CLI picks its two devices from two virtual devices of every adapter.
fn pipeline_run_trains_on_devices_and_matches_one_device(_: &Adapters) {
    let out = gangway(&[
        "--virtual-devices",
        "2",
        "pipeline",
        "--schedule",
        "1f1b",
        "--stages",
        "2",
        "--microbatches",
        "2",
        "--run",
    ]);
    assert!(out.contains("measured:") && out.contains("simulated with this run's op times:"));
    assert!(out.contains("% measured,"), "{out}");
    let err_line = out
        .lines()
        .find(|l| l.starts_with("max |pipelined"))
        .unwrap();
    let err: f64 = err_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(err < 1e-4, "{err_line}");
}

fn train_moe_reports_bits_per_byte_and_resumes_from_its_checkpoint(_: &Adapters) {
    let dir = std::env::temp_dir().join(format!("gangway-cli-moe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ckpt = dir.join("moe.ckpt");
    let tiny = [
        "--batch",
        "32",
        "--context",
        "4",
        "--embed",
        "4",
        "--model",
        "16",
        "--hidden",
        "16",
        "--experts",
        "2",
        "--top-k",
        "1",
    ];
    let mut first = vec![
        "train",
        "moe",
        "--steps",
        "3",
        "--checkpoint",
        ckpt.to_str().unwrap(),
    ];
    first.extend(tiny);
    let out = gangway(&first);
    assert!(out.contains("3 steps, 96 tokens"), "{out}");
    assert!(out.contains("bits per byte; unigram byte model"), "{out}");
    let mut again = vec![
        "train",
        "moe",
        "--steps",
        "2",
        "--resume",
        ckpt.to_str().unwrap(),
    ];
    again.extend(tiny);
    let out = gangway(&again);
    assert!(out.contains("2 steps, 64 tokens"), "{out}");
    std::fs::write(&ckpt, b"not a checkpoint").unwrap();
    let bad = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(["train", "moe", "--resume", ckpt.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && err.contains("checkpoint") && !err.contains("panicked"),
        "{err}"
    );
}
