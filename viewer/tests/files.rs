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

#[test]
fn bench_results_are_recognised() {
    let matmul = json!([
        {"adapter": "llvmpipe", "backend": "vulkan", "case": "square 256", "m": 256, "n": 256,
         "k": 256, "dtype": "f32", "variant": "tiled", "warmup": 1, "reps": 3,
         "median_ms": 1.0, "gflops": 33.5, "speedup_vs_naive": null},
        {"adapter": "llvmpipe", "backend": "vulkan", "case": "square 512", "m": 512, "n": 512,
         "k": 512, "dtype": "f32", "variant": "tiled", "warmup": 1, "reps": 3,
         "median_ms": 4.0, "gflops": 67.0, "speedup_vs_naive": 2.0}
    ]);
    assert!(matches!(interpret(&matmul), Ok(Loaded::Matmul(r)) if r.len() == 2));
    let dispatch = json!([
        {"suite": "chain", "case": "chain x1", "mode": "sequential", "stages": 1,
         "computations": 20, "median_s": 0.01, "computations_per_s": 2000.0, "note": ""},
        {"suite": "chain", "case": "chain x1", "mode": "parallel", "stages": 1,
         "computations": 20, "median_s": 0.005, "computations_per_s": 4000.0, "note": ""}
    ]);
    let h = open_in_ui(&temp("dispatch.json", &dispatch.to_string()));
    h.get_by_label("opened dispatch benchmark: 2 results");
    let h = open_in_ui(&temp("matmul.json", &matmul.to_string()));
    h.get_by_label("opened matmul benchmark: 2 results");
    // A result array missing its fields is an error, not a panic.
    assert!(interpret(&json!([{"gflops": 1.0}])).is_err());
}
