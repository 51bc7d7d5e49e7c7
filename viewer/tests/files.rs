#![allow(clippy::unwrap_used)]
//! Opening and saving files through the UI: bad files are errors shown in the UI.

mod common;

use egui_kittest::kittest::Queryable;
use gangway_viewer::Tab;
use gangway_viewer::files::{Loaded, interpret};
use serde_json::json;

fn temp(name: &str, contents: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gangway-viewer-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

fn open_in_ui(path: &std::path::Path) -> egui_kittest::Harness<'static, gangway_viewer::ViewerApp> {
    let mut h = common::harness([1100.0, 700.0]);
    h.get_by_label("Files").click();
    h.run();
    assert_eq!(h.state().tab, Tab::Files);
    h.state_mut().files.path = path.display().to_string();
    h.run();
    h.get_by_label("Open").click();
    h.run();
    h
}

#[test]
fn opening_a_bad_file_shows_an_error() {
    let h = open_in_ui(&temp("bad.json", "{ this is not json"));
    h.get_by_label_contains("is not JSON");
    let h = open_in_ui(&temp("other.json", r#"{"hello": 1}"#));
    h.get_by_label_contains("error:");
    let h = open_in_ui(&temp(
        "bad-trace.json",
        r#"{"traceEvents": [{"ph": "X", "pid": 0}]}"#,
    ));
    h.get_by_label_contains("traceEvents[0]: missing \"ts\"");
    let h = open_in_ui(std::path::Path::new("/nonexistent/gangway/trace.json"));
    h.get_by_label_contains("cannot read");
}

#[test]
fn save_the_lab_timeline_then_open_it() {
    let path = temp("lab.json", "");
    let mut h = common::harness([1100.0, 700.0]);
    h.get_by_label("Files").click();
    h.run();
    h.state_mut().files.path = path.display().to_string();
    h.get_by_label("bubble-lab timeline").click();
    h.run();
    h.get_by_label("Save").click();
    h.run();
    // 1F1B p = 4, m = 8: 64 compute events.
    h.get_by_label_contains("saved 64 events");
    h.get_by_label("Open").click();
    h.run();
    h.get_by_label("opened Chrome trace: 64 events");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    gangway::trace::chrome::check(&json).unwrap();
}

/// A real report: the quick memory suite on every adapter found.
fn memory_report() -> Option<gangway::bench::Report> {
    let devices = gangway::discover(&gangway::DiscoveryOptions::from_env().unwrap()).ok()?;
    let adapters = gangway::bench::select_adapters(&devices, &[]).unwrap();
    let opts = gangway::bench::BenchOptions {
        suites: vec![gangway::bench::Suite::Memory],
        ..gangway::bench::BenchOptions::quick()
    };
    Some(gangway::bench::run::run(&adapters, &opts, |_| {}).unwrap())
}

#[test]
fn bench_reports_open_and_compare() {
    let Some(report) = memory_report() else {
        assert!(std::env::var("GANGWAY_REQUIRE_ADAPTER").as_deref() != Ok("1"));
        return;
    };
    let n = report.results.len();
    assert!(
        n >= 2 && report.results.iter().all(|r| r.is_ok()),
        "{report:?}"
    );
    let path = temp("report.json", &report.to_json());
    let mut h = open_in_ui(&path);
    h.get_by_label(&format!(
        "opened benchmark report: {n} results on {} adapter(s)",
        report.adapters.len()
    ));
    // The suite's table names every case and its derived figure's unit.
    h.get_by_label("memory: GB/s per case (higher is better)");
    assert!(h.query_all_by_label_contains("stream 2x+1").count() >= n);
    // Compared with itself: every case paired, nothing beyond the noise.
    h.state_mut().files.compare_path = path.display().to_string();
    h.run();
    h.get_by_label("Compare").click();
    h.run();
    h.get_by_label(&format!(
        "compared: {n} cases, 0 faster, 0 slower beyond the noise"
    ));
    // A bad second file is an error in the UI.
    h.state_mut().files.compare_path = "/nonexistent/old.json".into();
    h.run();
    h.get_by_label("Compare").click();
    h.run();
    h.get_by_label_contains("error: /nonexistent/old.json");
}

#[test]
fn old_and_malformed_bench_files_are_errors() {
    // What `gangway bench matmul --json` wrote before the schema.
    let old = json!([{"adapter": "llvmpipe", "case": "square 256", "gflops": 33.5}]);
    let err = interpret(&old).unwrap_err();
    assert!(err.contains("before schema version 1"), "{err}");
    let h = open_in_ui(&temp("old-bench.json", &old.to_string()));
    h.get_by_label_contains("before schema version 1");
    let future = json!({"schema": "gangway-bench", "schema_version": 7});
    assert!(interpret(&future).unwrap_err().contains("schema version 7"));
    let broken = json!({"schema": "gangway-bench", "schema_version": 1, "results": []});
    assert!(interpret(&broken).is_err());
    assert!(!matches!(
        interpret(&json!({"traceEvents": []})),
        Ok(Loaded::Bench(_))
    ));
}
