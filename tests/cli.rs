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
        case!(host: interleaved_beats_1f1b_at_the_same_model_cost),
        case!(host: link_presets_price_the_transfers),
        case!(host: a_closed_stdout_ends_quietly),
        case!(host: uneven_stages_stretch_the_pipeline),
        case!(host: stages_fold_onto_fewer_devices),
        case!(host: pipeline_svg_writes_the_figure_whole),
        case!(host: pipeline_compare_writes_every_schedule),
        case!(host: bad_svg_paths_are_clear_errors),
        case!(host: trace_sums_up_pytorch_and_jax_profiler_traces),
        case!(host: trace_reads_a_plain_pid_1_trace_as_anyones),
        case!(host: trace_sums_up_a_pipeline_trace_with_its_bubble),
        case!(host: trace_of_a_bad_file_is_a_one_line_error),
        case!(device: bench_dispatch_writes_json_and_a_valid_trace),
        case!(adapters: pipeline_run_trains_on_devices_and_matches_one_device).span(Span::All),
        case!(adapters: train_moe_reports_bits_per_byte_and_resumes_from_its_checkpoint)
            .span(Span::All),
        case!(adapters: train_lm_then_generate_eval_export_and_import).span(Span::All),
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
        out.contains(
            "bubble: 27.3% of total time, 37.5% over the ideal time (textbook at F = B = W with \
             free transfers: 27.3%)"
        ),
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
            "3",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("at least as many microbatches (3)"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // The help's default parses: --costs-us is comma separated, as shown.
    let help = gangway(&["pipeline", "--help"]);
    assert!(help.contains("[default: 100,100,100]"), "{help}");
    let out = gangway(&["pipeline", "--costs-us", "100,100,100"]);
    assert!(out.contains("F/B/W = 100/100/100 µs"), "{out}");
    for (args, want) in [
        (
            &["--schedule", "dualpipe", "--stages", "3"][..],
            "even stage count",
        ),
        (
            &["--latency-us=-1"][..],
            "--latency-us must be a non-negative",
        ),
        (
            &["--bandwidth-gbs", "0"][..],
            "--bandwidth-gbs must be a positive",
        ),
        (&["--link", "nvlink"][..], "one of nvlink4, pcie4"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .arg("pipeline")
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// The `makespan: X ms` line of a `pipeline --simulate` run, in ms.
fn makespan_ms(out: &str) -> f64 {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("makespan: "))
        .unwrap_or_else(|| panic!("no makespan in:\n{out}"));
    line.trim_end_matches(" ms").parse().unwrap()
}

/// `--costs-us` is a device's whole model share: interleaved runs v chunk ops of 1/v of it, so
/// at p = 4, m = 8 it finishes before 1F1B (2.85 against 3.3 ms), not after.
fn interleaved_beats_1f1b_at_the_same_model_cost() {
    let run = |schedule: &str| {
        gangway(&[
            "pipeline",
            "--schedule",
            schedule,
            "--chunks",
            "2",
            "--stages",
            "4",
            "--microbatches",
            "8",
            "--simulate",
            "--costs-us",
            "100,100,100",
        ])
    };
    let (inter, one) = (run("interleaved"), run("1f1b"));
    let (inter_ms, one_ms) = (makespan_ms(&inter), makespan_ms(&one));
    assert!(
        inter_ms < one_ms,
        "interleaved {inter_ms} ms vs 1f1b {one_ms} ms"
    );
    assert_eq!((inter_ms, one_ms), (2.85, 3.3));
    assert!(inter.contains("50/50/50 µs per chunk op"), "{inter}");
}

/// `--stage-costs`: a stage twice as slow stretches 1F1B to its own work plus the others' fill
/// and drain (5.3 ms against 3.3 ms even at p = 4, m = 8, F = B = W = 100 µs), in the single
/// view and the comparison; a factor per stage is required.
fn uneven_stages_stretch_the_pipeline() {
    let run = |extra: &[&str]| {
        let mut args = vec!["pipeline", "--microbatches", "8"];
        args.extend(extra);
        gangway(&args)
    };
    let even = run(&["--schedule", "1f1b"]);
    let slow = run(&["--schedule", "1f1b", "--stage-costs", "1,2,1,1"]);
    assert_eq!((makespan_ms(&even), makespan_ms(&slow)), (3.3, 5.3));
    assert!(slow.contains("take 1×, 2×, 1×, 1× the costs"), "{slow}");
    let compared = run(&["--compare", "--stage-costs", "1,2,1,1"]);
    assert!(compared.contains("| 1f1b | 5.300 ms |"), "{compared}");
    let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(["pipeline", "--stages", "4", "--stage-costs", "1,2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("2 stage cost factors for 4 stages"),
        "{err}"
    );
}

/// `--devices`: 1F1B's 4 stages on 2 devices, blocks (3.0 ms: 4 microbatches through two
/// stages' worth per device) and round robin (2.9 ms), a row per device, both placements said;
/// on one device it is all the work (4 × 4 × 300 µs); more devices than stages is an error.
fn stages_fold_onto_fewer_devices() {
    let run = |extra: &[&str]| {
        let mut args = vec!["pipeline", "--schedule", "1f1b", "--microbatches", "4"];
        args.extend(extra);
        gangway(&args)
    };
    let blocks = run(&["--devices", "2"]);
    assert!(
        blocks.contains("device 0: stages 0, 1; device 1: stages 2, 3"),
        "{blocks}"
    );
    assert!(blocks.contains("\ndevice 1 |"), "{blocks}");
    assert!(!blocks.contains("\nstage 2 |"), "{blocks}");
    assert!(
        blocks.contains("peak activations per device: [7, 2]"),
        "{blocks}"
    );
    let rr = run(&["--devices", "2", "--fold", "round-robin"]);
    assert!(rr.contains("device 0: stages 0, 2"), "{rr}");
    let one = run(&["--devices", "1"]);
    assert_eq!(
        (makespan_ms(&blocks), makespan_ms(&rr), makespan_ms(&one)),
        (3.0, 2.9, 4.8)
    );
    assert!(one.contains("bubble: 0.0% of total time"), "{one}");
    let compared = run(&["--compare", "--devices", "2"]);
    assert!(compared.contains("| 1f1b | 3.000 ms |"), "{compared}");
    let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(["pipeline", "--stages", "4", "--devices", "5"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("4 stages fold onto 1 to 4 devices, not 5"),
        "{err}"
    );
}

/// A reader that goes away (`gangway … | head`) ends the command quietly with SIGPIPE's shell
/// status, not a panic.
fn a_closed_stdout_ends_quietly() {
    // A pipe whose reader is gone before the command starts: its first write fails, whatever the
    // output's size (a reader that left mid-way would race with a short output).
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(["pipeline", "--schedule", "1f1b"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Link presets set the transfer cost (latency + 1 MiB activation / bandwidth): a slower link
/// stretches 1F1B's makespan, the line names the link, and explicit figures override it.
fn link_presets_price_the_transfers() {
    let run = |extra: &[&str]| {
        let mut args = vec!["pipeline", "--schedule", "1f1b", "--microbatches", "8"];
        args.extend(extra);
        gangway(&args)
    };
    let nvlink = run(&["--link", "nvlink4"]);
    let tcp = run(&["--link", "ethernet10g"]);
    // NVLink: 2 µs + 1048576 B / 450 B/ns; 10 GbE: 50 µs + 1048576 / 1.25.
    assert!(nvlink.contains("transfers over nvlink4 4.33"), "{nvlink}");
    assert!(tcp.contains("transfers over ethernet10g 888.86"), "{tcp}");
    let (fast, slow, free) = (
        makespan_ms(&nvlink),
        makespan_ms(&tcp),
        makespan_ms(&run(&[])),
    );
    assert!(free < fast && fast < slow, "{free} {fast} {slow}");
    let overridden = run(&[
        "--link",
        "ethernet10g",
        "--latency-us",
        "0",
        "--bandwidth-gbs",
        "1048.576",
    ]);
    assert!(overridden.contains("ethernet10g 1 µs each"), "{overridden}");
}

fn scratch_dir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gangway-cli-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every file in `dir` (no `.partial` temporaries left behind).
fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn pipeline_svg_writes_the_figure_whole() {
    let dir = scratch_dir("svg");
    let path = dir.join("1f1b.svg");
    std::fs::write(&path, "old").unwrap();
    let out = gangway(&[
        "pipeline",
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--svg",
        path.to_str().unwrap(),
    ]);
    assert!(
        out.contains("figure: ") && out.contains("projector theme"),
        "{out}"
    );
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(
        svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
        "{svg:.200}"
    );
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains(">1F1B</text>"));
    for mb in 1..=8 {
        // Each microbatch labels its F and B block on each of the 4 stages.
        let label = format!(">{mb}</text>");
        assert!(svg.matches(&label).count() >= 8, "label {mb}");
    }
    assert!(svg.contains("makespan 3300 µs, bubble 900 µs (27.3%)"));
    assert_eq!(names_in(&dir), ["1f1b.svg"]);
    // The screen theme is dark.
    gangway(&[
        "pipeline",
        "--svg",
        path.to_str().unwrap(),
        "--theme",
        "screen",
    ]);
    let dark = std::fs::read_to_string(&path).unwrap();
    assert!(dark.contains(r##"fill="#1b1b1b""##), "{dark:.400}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn pipeline_compare_writes_every_schedule() {
    let dir = scratch_dir("compare");
    let path = dir.join("compare.svg");
    let out = gangway(&[
        "pipeline",
        "--compare",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--chunks",
        "2",
        "--svg",
        path.to_str().unwrap(),
    ]);
    // The table's makespan column: "| 1f1b | 3.300 ms | ...".
    let ms = |name: &str| -> f64 {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("| {name} ")))
            .unwrap_or_else(|| panic!("no row {name}: {out}"));
        let cell = line.split('|').nth(2).unwrap().trim();
        cell.trim_end_matches(" ms").parse().unwrap()
    };
    assert_eq!(
        [ms("gpipe"), ms("1f1b"), ms("interleaved v=2"), ms("zb-h1")],
        [3.3, 3.3, 2.85, 2.7],
        "{out}"
    );
    // DualPipe idles (p/2 − 1)(F&B + B − 3W) = 1 · 200 µs per stage: 100 below ZB-H1's 300.
    assert_eq!(ms("dualpipe"), 2.6, "{out}");
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg"));
    for title in [
        ">GPipe<",
        ">1F1B<",
        ">Eager 1F1B<",
        ">Interleaved 1F1B, v = 2<",
        ">Looped BFS, v = 2<",
        ">ZB-H1<",
        ">ZB-V<",
        ">DualPipe<",
        ">DualPipeV<",
    ] {
        assert!(svg.contains(title), "{title}");
    }
    // A subset that one schedule cannot take: named and left out, the rest drawn.
    let out = gangway(&[
        "pipeline",
        "--compare",
        "--schedules",
        "1f1b,dualpipe",
        "--stages",
        "3",
        "--microbatches",
        "6",
    ]);
    assert!(out.contains("| 1f1b |"), "{out}");
    assert!(
        out.contains("left out dualpipe: dualpipe cannot take this shape: it needs an even"),
        "{out}"
    );
    assert!(svg.contains(">8</text>") && svg.contains("weight grad W"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A path in a missing directory or a directory fails at once, naming the path, and leaves
/// nothing behind.
fn bad_svg_paths_are_clear_errors() {
    let dir = scratch_dir("bad-svg");
    let missing = dir.join("no/such/dir/f.svg");
    for (path, want) in [
        (missing.to_str().unwrap(), "No such file"),
        (dir.to_str().unwrap(), "is a directory"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args(["pipeline", "--compare", "--svg", path])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{path}");
        assert!(
            err.contains("cannot write the SVG figure") && err.contains(path) && err.contains(want),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    assert!(names_in(&dir).is_empty(), "{:?}", names_in(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
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
    matches_its_reference(&out, "single-device");
    // The MoE stack on 2 stages of 2 devices, DualPipe's F&B pairs overlapped.
    let moe = gangway(&[
        "--virtual-devices",
        "4",
        "pipeline",
        "--schedule",
        "dualpipe",
        "--stages",
        "2",
        "--microbatches",
        "4",
        "--run",
        "--moe",
    ]);
    assert!(moe.contains("residual MoE layers"), "{moe}");
    assert!(moe.contains("F&B pairs overlapped"), "{moe}");
    assert!(moe.contains("hidden under compute"), "{moe}");
    matches_its_reference(&moe, "one-stage");
    // Folded: 4 MoE stages on 2 pairs, round robin.
    let folded = gangway(&[
        "--virtual-devices",
        "4",
        "pipeline",
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "4",
        "--run",
        "--moe",
        "--devices",
        "2",
        "--fold",
        "round-robin",
    ]);
    assert!(
        folded.contains("4 stages on 2 pairs of devices (round robin)"),
        "{folded}"
    );
    matches_its_reference(&folded, "one-stage");
}

/// `pipeline --run`'s output says its step's weights are within 1e-4 of the `reference` step's.
fn matches_its_reference(out: &str, reference: &str) {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("max |pipelined − {reference}| weight")))
        .unwrap_or_else(|| panic!("{out}"));
    let err: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(err < 1e-4, "{line}");
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
    let json = dir.join("report.json");
    let mut first = vec![
        "train",
        "moe",
        "--steps",
        "3",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ];
    first.extend(tiny);
    let out = gangway(&first);
    assert!(out.contains("3 steps, 96 tokens"), "{out}");
    assert!(out.contains("bits per byte; unigram byte model"), "{out}");
    assert!(
        out.contains("spread of kept tokens over the experts (cv)"),
        "{out}"
    );
    // Imbalance per step in the report, and its means.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for key in ["dropped_fractions", "expert_cvs"] {
        let per_step = report[key].as_array().unwrap();
        assert_eq!(per_step.len(), 3, "{key}: {report}");
        assert!(
            per_step.iter().all(|v| v.as_f64().unwrap() >= 0.0),
            "{report}"
        );
    }
    let cvs: Vec<f64> = report["expert_cvs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let mean = report["mean_expert_cv"].as_f64().unwrap();
    assert!(
        (mean - cvs.iter().sum::<f64>() / 3.0).abs() < 1e-12,
        "{report}"
    );
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
    // Groups dealt unevenly over two devices, as given and as measured.
    for (balance, want) in [
        ("3,1", "groups per device: 3,1\n"),
        ("measured", "for speeds"),
    ] {
        let mut dealt = vec![
            "--virtual-devices",
            "2",
            "train",
            "moe",
            "--steps",
            "2",
            "--devices",
            "2",
            "--groups",
            "4",
            "--balance",
            balance,
        ];
        dealt.extend(tiny);
        let out = gangway(&dealt);
        assert!(out.contains(want), "{out}");
        assert!(out.contains("2 steps, 64 tokens"), "{out}");
    }
    for (balance, says) in [
        ("3,0", "at least one routing group"),
        (
            "3,3",
            "a split of 6 groups over 2 devices for a trainer of 4",
        ),
        ("fast", "is not `even`, `measured`"),
    ] {
        let bad = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args(["--virtual-devices", "2", "train", "moe", "--steps", "1"])
            .args(["--devices", "2", "--groups", "4", "--balance", balance])
            .args(tiny)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(
            !bad.status.success() && err.contains(says) && !err.contains("panicked"),
            "{balance}: {err}"
        );
    }
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

/// The Transformer's commands end to end: a run with a checkpoint and a JSON report, a resumed
/// run, text from the model, its loss on a file, and its weights out and back in; damaged files
/// are one-line errors.
fn train_lm_then_generate_eval_export_and_import(_: &Adapters) {
    let dir = scratch_dir("lm");
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let (ckpt, json, weights, back) = (
        path("lm.safetensors"),
        path("report.json"),
        path("weights.safetensors"),
        path("back.safetensors"),
    );
    let tiny = [
        "--context",
        "16",
        "--d-model",
        "16",
        "--heads",
        "2",
        "--hidden",
        "32",
        "--experts",
        "2",
        "--batch",
        "4",
        "--eval-sequences",
        "8",
    ];
    let mut first = vec![
        "train",
        "lm",
        "--steps",
        "3",
        "--checkpoint",
        &ckpt,
        "--json",
        &json,
    ];
    first.extend(tiny);
    let out = gangway(&first);
    assert!(out.contains("3 steps (to step 3), 192 tokens"), "{out}");
    assert!(out.contains("bits per byte; unigram byte model"), "{out}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["losses"].as_array().unwrap().len(), 3, "{report}");
    assert_eq!(report["config"]["moe_every"], 2, "{report}");
    // `dropless` is a capacity factor of E/K: here 2 experts, top-1.
    let mut dropless = vec![
        "train",
        "lm",
        "--steps",
        "2",
        "--capacity-factor",
        "dropless",
    ];
    dropless.extend(["--json", &json]);
    dropless.extend(tiny);
    gangway(&dropless);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["config"]["capacity_factor"], 2.0, "{report}");
    let dropped = report["dropped_fractions"].as_array().unwrap();
    assert!(dropped.iter().all(|d| d == 0.0), "{report}");
    for bad in ["0", "-1", "lots", "inf"] {
        let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args(["train", "lm", &format!("--capacity-factor={bad}")])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}: {err}");
        assert!(
            err.contains("a positive number or `dropless`"),
            "{bad}: {err}"
        );
    }
    let mut again = vec!["train", "lm", "--steps", "2", "--resume", &ckpt];
    again.extend(tiny);
    let out = gangway(&again);
    assert!(out.contains("2 steps (to step 5)"), "{out}");

    let text = gangway(&[
        "generate",
        "--checkpoint",
        &ckpt,
        "--prompt",
        "The ",
        "--max-bytes",
        "20",
        "--temperature",
        "0",
    ]);
    assert!(text.starts_with("The "), "{text}");
    let eval = gangway(&[
        "eval",
        "lm",
        "--checkpoint",
        &ckpt,
        "--file",
        &fixture_path("README.md"),
        "--json",
    ]);
    let eval: serde_json::Value = serde_json::from_str(&eval).unwrap();
    let bpb = eval["bits_per_byte"].as_f64().unwrap();
    assert!(bpb > 0.0 && bpb < 12.0, "{eval}");

    let out = gangway(&["export", "--checkpoint", &ckpt, "--out", &weights]);
    assert!(out.contains("parameters"), "{out}");
    gangway(&["import", "--weights", &weights, "--out", &back]);
    // The exported weights score the file as the checkpoint did.
    let again = gangway(&[
        "eval",
        "lm",
        "--checkpoint",
        &back,
        "--file",
        &fixture_path("README.md"),
        "--json",
    ]);
    let again: serde_json::Value = serde_json::from_str(&again).unwrap();
    assert_eq!(again["bits_per_byte"], eval["bits_per_byte"]);

    let mut cut = std::fs::read(&weights).unwrap();
    cut.truncate(cut.len() / 2);
    std::fs::write(&back, cut).unwrap();
    for args in [
        vec!["generate", "--checkpoint", back.as_str()],
        vec!["import", "--weights", back.as_str(), "--out", &weights],
        vec!["train", "lm", "--resume", back.as_str()],
    ] {
        let bad = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(
            !bad.status.success() && err.contains("safetensors") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file of the repository, by its path from the root.
fn fixture_path(name: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/traces/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Issue 25: PyTorch's profiler trace (string pids, instants, flows) and JAX's gzipped one sum
/// up with their threads, named as the files name them, and their counts.
fn trace_sums_up_pytorch_and_jax_profiler_traces() {
    let out = gangway(&["trace", &fixture("pytorch-mlp.json")]);
    assert!(
        out.starts_with(
            "foreign trace (one row per thread): 261 trace events, 223 slices and 2 instants"
        ),
        "{out}"
    );
    assert!(out.contains("phases: M 8, X 223, f 14, i 2, s 14"), "{out}");
    // Flows bind to their slices and instants are kept: nothing is left undrawn.
    assert!(!out.contains("not drawn"), "{out}");
    assert!(
        out.contains("  python (pid 16108)\n    thread 16108 (python)"),
        "{out}"
    );
    assert!(
        out.contains("  process Spans\n    thread PyTorch Profiler"),
        "{out}"
    );
    assert!(out.contains("PyTorch Profiler (0)"), "{out}");

    let json: serde_json::Value =
        serde_json::from_str(&gangway(&["trace", "--json", &fixture("pytorch-mlp.json")])).unwrap();
    assert_eq!(json["dialect"], "foreign");
    assert_eq!(json["events"], 261);
    let threads: Vec<(String, u64)> = json["processes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["threads"].as_array().unwrap().iter())
        .map(|t| {
            (
                t["tid"].as_str().unwrap().to_string(),
                t["slices"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        threads,
        [
            ("16108".to_string(), 222),
            ("PyTorch Profiler".to_string(), 1)
        ]
    );
    assert_eq!(json["top_names"][0]["name"], "PyTorch Profiler (0)");
    assert_eq!(json["top_names"][1]["name"], "train_step_0");

    let json: serde_json::Value = serde_json::from_str(&gangway(&[
        "trace",
        "--json",
        &fixture("jax-mlp.trace.json.gz"),
    ]))
    .unwrap();
    assert_eq!(
        (json["events"].as_u64(), json["slices"].as_u64()),
        (Some(195), Some(188))
    );
    let p = &json["processes"][0];
    assert_eq!(p["name"], "/host:CPU");
    let threads: Vec<(&str, u64)> = p["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["slices"].as_u64().unwrap()))
        .collect();
    // Ordered by JAX's thread_sort_index: python 1, the XLA client 2.
    assert_eq!(
        threads,
        [
            ("python", 73),
            ("tf_XLAPjRtCpuClient/3583329669373636408", 115)
        ]
    );
    assert_eq!(
        json["top_names"][0]["name"],
        "$api.py:2479 block_until_ready"
    );
}

/// Issue 38: the npm tracer webpack uses, run as process 1 (pid 1, tid 1, no `cat`, no
/// metadata), was read as gangway's own: its slices were "kernels" of "device 1". It is one
/// thread of one process; only a trace with gangway's marker has devices.
fn trace_reads_a_plain_pid_1_trace_as_anyones() {
    let out = gangway(&["trace", &fixture("node-chrome-trace-event.json")]);
    assert!(
        out.starts_with(
            "foreign trace (one row per thread): 24 trace events, 12 slices and 3 instants"
        ),
        "{out}"
    );
    assert!(out.contains("  process 1\n    thread 1"), "{out}");
    assert!(!out.contains("kernels"), "{out}");
}

/// gangway's own pipeline trace: per device kernels against transfers, and the bubble the one
/// computation measures (the simulation's, as `gangway pipeline` prints it).
fn trace_sums_up_a_pipeline_trace_with_its_bubble() {
    let dir = std::env::temp_dir().join(format!("gangway-cli-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("1f1b.json");
    let printed = gangway(&[
        "pipeline",
        "--schedule",
        "gpipe",
        "--stages",
        "2",
        "--microbatches",
        "2",
        "--trace",
        path.to_str().unwrap(),
    ]);
    let out = gangway(&["trace", path.to_str().unwrap()]);
    assert!(out.starts_with("gangway trace"), "{out}");
    assert!(
        out.contains("device 0") && out.contains("kernels 4"),
        "{out}"
    );
    // GPipe, p = 2, m = 2, equal costs: (p − 1) / (m + p − 1) = 1/3, as the simulator says.
    assert!(
        out.contains("pipeline bubble: 33.3% (2 stages"),
        "{out}\n{printed}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&gangway(&["trace", "--json", path.to_str().unwrap()])).unwrap();
    assert_eq!(json["dialect"], "gangway");
    assert_eq!(json["bubble"]["stages"], 2);
    assert_eq!(json["devices"].as_array().unwrap().len(), 2);
    std::fs::remove_dir_all(&dir).ok();
}

fn trace_of_a_bad_file_is_a_one_line_error() {
    let dir = std::env::temp_dir().join(format!("gangway-cli-badtrace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases: [(&str, &[u8], &str); 3] = [
        (
            "torn.json",
            b"{\"traceEvents\": [{\"ph\": \"X\"",
            "not JSON",
        ),
        (
            "nots.json",
            b"[{\"ph\": \"X\", \"pid\": 1}]",
            "traceEvents[0]: missing \"ts\"",
        ),
        (
            "torn.json.gz",
            b"\x1f\x8b\x08\x00",
            "not a readable gzip file",
        ),
    ];
    for (name, text, says) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args(["trace", path.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.starts_with("error: ") && err.contains(says) && err.lines().count() == 1,
            "{name}: {err}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(["trace", "/nonexistent/trace.json"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/trace.json"));
    std::fs::remove_dir_all(&dir).ok();
}
