//! `gangway bench` end to end: `--quick` runs every suite on every adapter and its JSON matches the
//! schema; the schema file is generated from the report types; `compare` pairs and judges; bad
//! input gets one-line errors; single-adapter runs (`--adapters <index>`) once per adapter. No test
//! asserts a speed.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Adapters, Span, case};
use gangway::Device;
use gangway::bench::Report;
use gangway::bench::report::Status;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(host: schema_file_is_generated_from_the_report_types),
        case!(adapters: quick_runs_every_suite_on_every_adapter_and_matches_the_schema)
            .span(Span::All),
        case!(device: a_size_over_the_limits_fails_its_case_and_the_others_still_run),
        case!(host: bad_input_gets_one_line_errors),
        case!(adapters: an_unknown_adapter_gets_a_one_line_error).span(Span::All),
        case!(device: a_terminal_gets_a_progress_bar),
        case!(host: two_machines_reports_compare_by_adapter_name),
        case!(host: several_reports_side_by_side),
        case!(device: a_real_slowdown_is_flagged),
    ])
}

const SCHEMA_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/bench-report.json");

fn gangway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gangway-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn validate(path: &Path) {
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(SCHEMA_FILE).unwrap()).unwrap();
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{} violates the schema: {errors:#?}",
        path.display()
    );
}

/// The error output must be one line (plus nothing else) and name the problem.
fn one_line_error(out: &Output, needle: &str) {
    assert!(!out.status.success());
    let err = text(&out.stderr);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.contains("XDG_RUNTIME_DIR"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(needle), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

fn schema_file_is_generated_from_the_report_types() {
    let generated = serde_json::to_string_pretty(&Report::json_schema()).unwrap() + "\n";
    if std::env::var_os("GANGWAY_BLESS").is_some() {
        std::fs::write(SCHEMA_FILE, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(SCHEMA_FILE).unwrap_or_default();
    assert!(
        committed == generated,
        "schemas/bench-report.json is stale: rerun with GANGWAY_BLESS=1 (and bump SCHEMA_VERSION \
         if a field changed meaning or went away)"
    );
    let printed = gangway(&["bench", "schema"]);
    assert!(printed.status.success());
    assert_eq!(text(&printed.stdout), generated);
}

fn quick_runs_every_suite_on_every_adapter_and_matches_the_schema(machine: &Adapters) {
    let json = temp("quick.json");
    let start = std::time::Instant::now();
    let out = gangway(&["bench", "--quick", "--json", json.to_str().unwrap()]);
    eprintln!("bench --quick: {:.1} s", start.elapsed().as_secs_f64());
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    validate(&json);
    let report = Report::load(&json).unwrap();

    // Every adapter found, every suite on each, every case measured.
    let adapters: std::collections::BTreeSet<usize> = machine.iter().map(|a| a.index).collect();
    assert_eq!(report.adapters.len(), adapters.len());
    for a in &report.adapters {
        // The scaleout suite runs once per job over the whole mesh (checked below).
        let per_adapter = gangway::bench::Suite::ALL
            .into_iter()
            .filter(|s| *s != gangway::bench::Suite::Scaleout);
        for suite in per_adapter {
            assert!(
                report
                    .results
                    .iter()
                    .any(|r| r.adapter == a.index && r.suite == suite.name() && r.is_ok()),
                "{} has no measured {} case",
                a.label(),
                suite.name()
            );
        }
    }
    let scaleout: Vec<_> = report
        .results
        .iter()
        .filter(|r| r.suite == "scaleout" && r.is_ok())
        .collect();
    assert!(
        scaleout.iter().any(|r| r.case.starts_with("moe step")),
        "no measured scaleout case: {scaleout:?}"
    );
    for r in &report.results {
        assert_ne!(r.status, Status::Failed, "{r:?}");
        if let Some(s) = &r.stats {
            assert_eq!(s.samples_s.len(), 3);
            assert!(
                s.min_s > 0.0 && s.min_s <= s.median_s && s.median_s <= s.max_s,
                "{r:?}"
            );
            let f = r.figure.as_ref().unwrap();
            assert!(f.value.is_finite() && f.value > 0.0, "{r:?}");
        }
    }
    // Where the adapter has timestamp queries, every kernel case is timed by the runtime's trace
    // of its kernel (GPU timestamps); baselines linked.
    for a in report.adapters.iter().filter(|a| a.timestamp_query) {
        let kernels: Vec<_> = report
            .results
            .iter()
            .filter(|r| {
                r.adapter == a.index
                    && ["matmul", "attention", "memory"].contains(&r.suite.as_str())
            })
            .filter_map(|r| r.stats.as_ref().map(|s| (r, s.timing)))
            .collect();
        assert!(!kernels.is_empty());
        for (r, timing) in kernels {
            assert_eq!(timing, gangway::bench::report::Timing::Gpu, "{r:?}");
        }
    }
    assert!(report.results.iter().any(|r| r.baseline.is_some()));
    // With two adapters, the MoE step over both runs once, on the first, against its D = 1.
    let across: Vec<_> = report
        .results
        .iter()
        .filter(|r| r.case == "parallel: D=4 over two adapters")
        .collect();
    assert_eq!(
        across.len(),
        usize::from(report.adapters.len() >= 2),
        "{across:?}"
    );
    for r in across {
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.baseline.as_ref().unwrap().case, "parallel: D=1");
        assert!(r.note.contains("devices: "), "{r:?}");
    }
    assert_eq!(
        report.machine.cores,
        std::thread::available_parallelism().unwrap().get()
    );

    // The table: the header the issue asks for, its rule, and a row per result.
    assert!(stdout.starts_with(
        "| suite | case | adapter | timing | median | min | max | figure | of peak |"
    ));
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("| ")).count(),
        report.results.len() + 2
    );
    // Not a terminal: plain progress lines, one per case.
    assert_eq!(
        stderr.lines().filter(|l| l.starts_with('[')).count(),
        report.results.len(),
        "{stderr}\n{stdout}"
    );
    assert!(!stderr.contains('\r'));

    // The kernel suites and dispatch took their samples in rounds.
    assert_eq!(
        report.settings.in_rounds,
        ["matmul", "attention", "memory", "dispatch"]
    );
    assert_eq!(report.settings.slowdown, None);

    // A report compared with itself: every case paired, none flagged; --quick's 3 samples a
    // side are too few to judge.
    let same = gangway(&[
        "bench",
        "compare",
        json.to_str().unwrap(),
        json.to_str().unwrap(),
    ]);
    let table = text(&same.stdout);
    assert!(same.status.success(), "{table}");
    assert!(
        table.contains(&format!(
            "0 faster, 0 slower, 0 no change, {} too few samples",
            report.results.iter().filter(|r| r.is_ok()).count()
        )),
        "{table}"
    );
    assert!(table.contains("lies beyond ±5%"), "{table}");
    assert!(
        !table.contains("| FASTER |") && !table.contains("| SLOWER |"),
        "{table}"
    );

    // Across adapters (two machines): each side narrowed to one adapter, paired by case.
    let (first, last) = (
        report.adapters[0].index,
        report.adapters.last().unwrap().index,
    );
    let (first, last) = (first.to_string(), last.to_string());
    let j = json.to_str().unwrap();
    let cross = gangway(&[
        "bench",
        "compare",
        j,
        j,
        "--any-adapter",
        "--old-adapter",
        &first,
        "--new-adapter",
        &last,
    ]);
    assert!(cross.status.success(), "{}", text(&cross.stderr));
    assert!(text(&cross.stdout).contains(" -> "));
    if report.adapters.len() > 1 {
        let ambiguous = gangway(&["bench", "compare", j, j, "--any-adapter"]);
        one_line_error(&ambiguous, "several adapters");
    }

    // Twice as slow everywhere (each case given 6 samples around its median): flagged, and
    // --fail-on-slower fails.
    let widened = |k: f64| {
        let mut r = report.clone();
        for c in &mut r.results {
            if let Some(s) = &mut c.stats {
                let samples = (0..6).map(|i| s.median_s * k * (1.0 + 0.01 * i as f64));
                *s = gangway::bench::report::Stats::new(s.timing, s.warmup, samples.collect());
            }
        }
        r
    };
    let (base_path, slow_path) = (temp("base.json"), temp("slow.json"));
    std::fs::write(&base_path, widened(1.0).to_json()).unwrap();
    std::fs::write(&slow_path, widened(2.0).to_json()).unwrap();
    let args = [
        "bench",
        "compare",
        base_path.to_str().unwrap(),
        slow_path.to_str().unwrap(),
    ];
    let out = gangway(&args);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("| SLOWER |"));
    let out = gangway(&[&args[..], &["--fail-on-slower"]].concat());
    one_line_error(&out, "got slower");
}

/// The device's adapter alone, by `--adapters <index>`.
fn a_size_over_the_limits_fails_its_case_and_the_others_still_run(device: &Device) {
    let index = device.info().adapter.to_string();
    let json = temp(&format!("limits-{index}.json"));
    let out = gangway(&[
        "bench",
        "matmul",
        "--quick",
        "--adapters",
        &index,
        "--matmul-sizes",
        "100000,16",
        "--variants",
        "naive",
        "--samples",
        "1",
        "--warmup",
        "0",
        "--json",
        json.to_str().unwrap(),
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success());
    assert!(
        stderr
            .trim_end()
            .lines()
            .last()
            .unwrap()
            .contains("1 case(s) FAILED"),
        "{stderr}"
    );
    assert!(
        stdout.contains("| matmul | square 100000 f32 naive |"),
        "{stdout}"
    );
    assert!(stdout.contains("FAILED"), "{stdout}");
    assert!(
        stdout.contains("max_storage_buffer_binding_size"),
        "{stdout}"
    );
    let report = Report::load(&json).unwrap();
    assert_eq!(report.failures().count(), 1);
    assert!(
        report
            .results
            .iter()
            .any(|r| r.case == "square 16 f32 naive" && r.is_ok())
    );
}

fn an_unknown_adapter_gets_a_one_line_error(_: &Adapters) {
    one_line_error(
        &gangway(&["bench", "matmul", "--adapters", "no-such-gpu"]),
        "no adapter matches \"no-such-gpu\"",
    );
}

fn bad_input_gets_one_line_errors() {
    one_line_error(&gangway(&["bench", "nosuch"]), "unknown suite \"nosuch\"");
    one_line_error(
        &gangway(&["bench", "pipeline", "--microbatches", "4,0"]),
        "--microbatches needs positive values, got [4, 0]",
    );
    let unwritable = "/nonexistent-gangway-dir/out.json";
    let start = std::time::Instant::now();
    one_line_error(
        &gangway(&["bench", "memory", "--quick", "--json", unwritable]),
        "cannot write /nonexistent-gangway-dir/out.json",
    );
    // Refused before any device work.
    assert!(start.elapsed().as_secs_f64() < 10.0);
    let missing = temp("missing.json");
    let ok = temp("ok.json");
    std::fs::write(&ok, "{}").unwrap();
    let compare = |a: &Path, b: &Path| {
        gangway(&["bench", "compare", a.to_str().unwrap(), b.to_str().unwrap()])
    };
    one_line_error(&compare(&missing, &ok), "missing.json");
    let malformed = temp("malformed.json");
    std::fs::write(&malformed, "{ not json").unwrap();
    one_line_error(&compare(&malformed, &ok), "malformed JSON");
    // What `gangway bench matmul --json` wrote before the schema: an array of rows.
    let old = temp("old.json");
    std::fs::write(&old, r#"[{"adapter": "x", "gflops": 1.0}]"#).unwrap();
    one_line_error(&compare(&old, &ok), "not a gangway bench report");
    let future = temp("future.json");
    std::fs::write(
        &future,
        r#"{"schema": "gangway-bench", "schema_version": 99}"#,
    )
    .unwrap();
    one_line_error(&compare(&future, &ok), "schema version 99");
    let wrong = temp("wrong.json");
    std::fs::write(
        &wrong,
        r#"{"schema": "gangway-bench", "schema_version": 1, "results": 3}"#,
    )
    .unwrap();
    one_line_error(&compare(&wrong, &ok), "does not match schema version 1");
}

/// The device's adapter alone, by `--adapters <index>`.
fn a_terminal_gets_a_progress_bar(device: &Device) {
    // `script` (util-linux) runs the command on a pseudo-terminal.
    let command = format!(
        "{} bench memory --quick --adapters {}",
        env!("CARGO_BIN_EXE_gangway"),
        device.info().adapter
    );
    let Ok(out) = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
    else {
        eprintln!("skipped: no `script` to make a pseudo-terminal");
        return;
    };
    let all = text(&out.stdout);
    assert!(out.status.success(), "{all}");
    // indicatif's bar, redrawn in place (an escape sequence before it), then each finished
    // case's line above it.
    assert!(all.contains("] 0/2 memory · stream"), "{all:?}");
    assert!(all.contains("\x1b["), "no terminal redraw: {all:?}");
    assert!(all.contains("[2/2] memory · stream"), "{all:?}");
}

/// A report of `cases` (name, samples) on `adapters` (index, name), every case on each adapter.
fn synthetic(adapters: &[(usize, &str)], cases: &[(&str, Vec<f64>)]) -> Report {
    use gangway::bench::report::{
        AdapterRecord, Build, CaseResult, Machine, Settings, Stats, Timing,
    };
    Report {
        schema: gangway::bench::report::SCHEMA.into(),
        schema_version: gangway::bench::report::SCHEMA_VERSION,
        gangway: Build::current(),
        timestamp: "2026-12-07T00:00:00Z".into(),
        machine: Machine::current(),
        settings: Settings {
            suites: vec!["matmul".into()],
            quick: false,
            sampling: gangway::bench::Sampling {
                warmup: 2,
                samples: 6,
            },
            command: Vec::new(),
            in_rounds: vec!["matmul".into()],
            slowdown: None,
        },
        adapters: adapters
            .iter()
            .map(|&(index, name)| AdapterRecord {
                index,
                name: name.into(),
                backend: "vulkan".into(),
                device_type: "discrete-gpu".into(),
                driver: String::new(),
                driver_info: String::new(),
                virtual_devices: 1,
                timestamp_query: true,
                peak: None,
            })
            .collect(),
        results: adapters
            .iter()
            .flat_map(|&(index, _)| {
                cases.iter().map(move |(case, samples)| CaseResult {
                    reason: None,
                    stats: Some(Stats::new(Timing::Gpu, 2, samples.clone())),
                    ..CaseResult::not_run(
                        "matmul",
                        case.to_string(),
                        index,
                        Status::Ok,
                        String::new(),
                    )
                })
            })
            .collect(),
    }
}

/// Two machines' reports whose adapters differ in name and order, compared by name through the
/// CLI (`--new-adapter 4090`: not an index there, so a name); ambiguous and unknown names are
/// one-line errors listing the report's adapters.
fn two_machines_reports_compare_by_adapter_name() {
    let around = |m: f64| {
        (0..6)
            .map(|i| m * (1.0 + 0.01 * i as f64))
            .collect::<Vec<f64>>()
    };
    let old = synthetic(
        &[
            (0, "llvmpipe (LLVM 15.0.6, 256 bits)"),
            (1, "AMD Radeon RX 7900 XTX"),
        ],
        &[
            ("square 1024 f32 tiled", around(2e-3)),
            ("square 512 f32 tiled", around(4e-4)),
        ],
    );
    let new = synthetic(
        &[
            (0, "NVIDIA GeForce RTX 4090"),
            (1, "lavapipe"),
            (2, "llvmpipe (LLVM 15.0.6, 256 bits)"),
        ],
        &[
            ("square 1024 f32 tiled", around(1e-3)),
            ("square 512 f32 tiled", around(4.04e-4)),
        ],
    );
    let (a, b) = (temp("machine-a.json"), temp("machine-b.json"));
    std::fs::write(&a, old.to_json()).unwrap();
    std::fs::write(&b, new.to_json()).unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let compare = |old: &str, new: &str| {
        gangway(&[
            "bench",
            "compare",
            a,
            b,
            "--any-adapter",
            "--old-adapter",
            old,
            "--new-adapter",
            new,
        ])
    };
    let out = compare("radeon", "4090");
    let table = text(&out.stdout);
    assert!(out.status.success(), "{table}{}", text(&out.stderr));
    assert!(
        table.contains(
            "| matmul | square 1024 f32 tiled | AMD Radeon RX 7900 XTX (vulkan) -> NVIDIA GeForce RTX 4090 (vulkan) | 2.00 ms | 1.00 ms | 0.500× |"
        ),
        "{table}"
    );
    assert!(table.contains("| FASTER |"), "{table}");
    // 1% apart: inside the noise threshold.
    assert!(table.contains("1 faster, 0 slower, 1 no change"), "{table}");
    // By index still, where the number is one: the same pairing.
    let by_index = text(&compare("1", "0").stdout);
    assert_eq!(by_index, table);
    // An adapter chosen on each side pairs by case without --any-adapter, and the suite's
    // geometric mean sums it up (0.500× and 1.01×).
    let chosen = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "compare",
            a,
            b,
            "--old-adapter",
            "radeon",
            "--new-adapter",
            "4090",
        ];
        args.extend_from_slice(extra);
        text(&gangway(&args).stdout)
    };
    let plain = chosen(&[]);
    assert_eq!(plain, table, "the same comparison");
    assert!(
        plain.contains("paired by suite and case, across adapters"),
        "{plain}"
    );
    assert!(
        plain.contains("geometric mean of new/old per suite: matmul 0.71"),
        "{plain}"
    );
    // A noise threshold of 100% (a change must more than double, or more than halve, the
    // time): halving it is within the noise; past 100% is an error.
    let wide = chosen(&["--noise-threshold", "100"]);
    assert!(wide.contains("0 faster, 0 slower, 2 no change"), "{wide}");
    assert!(wide.contains("lies beyond ±100%"), "{wide}");
    one_line_error(
        &gangway(&["bench", "compare", a, b, "--noise-threshold", "101"]),
        "--noise-threshold takes a percentage from 0 to 100, got 101",
    );
    // Names in either order, any case.
    let llvm = compare("LLVMPIPE", "llvm");
    assert!(llvm.status.success(), "{}", text(&llvm.stderr));
    one_line_error(
        &compare("radeon", "pipe"),
        "matches several adapters (1 lavapipe (vulkan), 2 llvmpipe",
    );
    one_line_error(
        &compare("intel", "4090"),
        "no adapter matches \"intel\"; the report has 0 llvmpipe",
    );
}

/// `GANGWAY_BENCH_SLOWDOWN` (test-only) really makes every sample slower: compared with a plain
/// run, the slowed cases are SLOWER (none FASTER) and the report says it was slowed.
fn a_real_slowdown_is_flagged(device: &Device) {
    let index = device.info().adapter.to_string();
    let run = |name: &str, slowdown: Option<&str>| {
        let json = temp(&format!("{name}-{index}.json"));
        let mut command = Command::new(env!("CARGO_BIN_EXE_gangway"));
        command.args([
            "bench",
            "memory",
            "--quick",
            "--adapters",
            &index,
            "--samples",
            "6",
            "--json",
            json.to_str().unwrap(),
        ]);
        if let Some(f) = slowdown {
            command.env("GANGWAY_BENCH_SLOWDOWN", f);
        }
        let out = command.output().unwrap();
        (out, json)
    };
    let (out, plain) = run("plain", None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (out, slowed) = run("slowed", Some("10"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = Report::load(&slowed).unwrap();
    assert_eq!(report.settings.slowdown, Some(10.0));
    assert!(
        report.results.iter().filter(|r| r.is_ok()).count() >= 2,
        "{report:?}"
    );
    let args = [
        "bench",
        "compare",
        plain.to_str().unwrap(),
        slowed.to_str().unwrap(),
    ];
    let out = gangway(&args);
    let table = text(&out.stdout);
    assert!(out.status.success(), "{table}");
    // No speed is asserted: 10× is far beyond this machine's noise, yet a burst of load on the
    // plain run could still hide one case, so one SLOWER case (and none FASTER) must show.
    let slower = table.matches("| SLOWER |").count();
    assert!(slower >= 1 && !table.contains("| FASTER |"), "{table}");
    assert!(
        table.contains(&format!("0 faster, {slower} slower")),
        "{table}"
    );
    assert!(table.contains("SLOWED DOWN 10× on purpose"), "{table}");
    one_line_error(
        &gangway(&[&args[..], &["--fail-on-slower"]].concat()),
        "got slower",
    );
    // A value that is no factor is refused, not ignored.
    let (out, _) = run("bad", Some("fast"));
    one_line_error(&out, "GANGWAY_BENCH_SLOWDOWN=\"fast\"");
}

/// Issue 57: several machines' reports side by side, a column per machine and adapter.
fn several_reports_side_by_side() {
    let one = |adapter: &str, t: f64| {
        synthetic(
            &[(0, adapter)],
            &[
                ("square 512 f32 tiled", vec![t; 5]),
                ("square 1024 f32 tiled", vec![8.0 * t; 5]),
            ],
        )
    };
    let paths: Vec<PathBuf> = [("llvmpipe", 4e-3), ("RTX 4090", 1e-3), ("M2", 2e-3)]
        .iter()
        .enumerate()
        .map(|(i, &(a, t))| {
            let p = temp(&format!("side-{i}.json"));
            std::fs::write(&p, one(a, t).to_json()).unwrap();
            p
        })
        .collect();
    let args: Vec<&str> = paths.iter().map(|p| p.to_str().unwrap()).collect();
    let out = gangway(&[&["bench", "side-by-side"], &args[..]].concat());
    let table = text(&out.stdout);
    assert!(out.status.success(), "{table}{}", text(&out.stderr));
    assert!(
        table.contains(&format!("column 2: {}: RTX 4090 (vulkan)", args[1])),
        "{table}"
    );
    assert!(
        table.contains("| suite | case | column 1 | column 2 | column 3 |"),
        "{table}"
    );
    assert!(
        table.contains(
            "| matmul | square 512 f32 tiled | 4.00 ms (1.000×) | 1.00 ms (0.250×) | 2.00 ms (0.500×) |"
        ),
        "{table}"
    );
    assert!(
        table.contains("| matmul | geometric mean of × | 1.000× (2 cases) | 0.250× (2 cases) | 0.500× (2 cases) |"),
        "{table}"
    );
    // One report is no side by side; an unknown suite and a missing file are errors.
    let out = gangway(&["bench", "side-by-side", args[0]]);
    assert!(!out.status.success());
    one_line_error(
        &gangway(&[&["bench", "side-by-side", "--suites", "moe"], &args[..]].concat()),
        "no report has the suite \"moe\"; they have: matmul",
    );
    one_line_error(
        &gangway(&["bench", "side-by-side", args[0], "/nonexistent/x.json"]),
        "/nonexistent/x.json",
    );
}
