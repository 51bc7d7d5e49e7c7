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

    // A report compared with itself: every case paired, none flagged.
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
            "{} within noise",
            report.results.iter().filter(|r| r.is_ok()).count()
        )),
        "{table}"
    );
    assert!(
        !table.contains("FASTER") && !table.contains("SLOWER"),
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
    assert!(text(&cross.stdout).contains(" → "));
    if report.adapters.len() > 1 {
        let ambiguous = gangway(&["bench", "compare", j, j, "--any-adapter"]);
        one_line_error(&ambiguous, "several adapters");
    }

    // Twice as slow everywhere: flagged, and --fail-on-slower fails.
    let mut slow = report.clone();
    for r in &mut slow.results {
        if let Some(s) = &mut r.stats {
            *s = gangway::bench::report::Stats::new(
                s.timing,
                s.warmup,
                s.samples_s
                    .iter()
                    .map(|x| x * s.max_s / s.min_s * 2.0)
                    .collect(),
            );
        }
    }
    let slow_path = temp("slow.json");
    std::fs::write(&slow_path, slow.to_json()).unwrap();
    let args = [
        "bench",
        "compare",
        json.to_str().unwrap(),
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
