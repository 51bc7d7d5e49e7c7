//! Shared by the GPU integration tests: their `main` and the devices their cases run on.
//!
//! Each test binary lists its tests as [`Case`]s (`case!(device: name)`) and hands them to
//! [`run`], which makes one libtest-mimic trial per adapter, named `name::<backend>_<adapter>`
//! (`plain_matmul_matches_reference::gl_llvmpipe`), like wgpu's `#[gpu_test]`:
//!
//! - `case!(host: f)`, `fn f()`: no GPU; one trial `f`.
//! - `case!(device: f)`, `fn f(device: &Device)`: one trial per adapter, on its device.
//! - `case!(adapters: f)`, `fn f(adapters: &Adapters)`: one trial per adapter; the test takes
//!   `adapters.mesh(n)` (n virtual devices of the adapter) or `adapters.discover(opts)` (new ones).
//!   `.span(Span::EachAndCross)` adds `f::cross_adapter` on every adapter at once, for tests that
//!   mix adapters; `Span::Cross` is that trial alone; `Span::All` is one trial `f` on everything.
//!
//! Cases run isolated (a panic fails that trial only). One an adapter cannot run
//! (`.needs(Need::F16)` on GL, a cross-adapter case on one adapter) is reported
//! `ignored (<reason>)`, never passed, and listed on stderr before the run. With no adapter at all
//! each GPU test is one trial, skipped with the discovery error, or failed when
//! `GANGWAY_REQUIRE_ADAPTER=1` (CI). Test output is not captured (libtest-mimic cannot).

// Each test binary uses its own part of what is here.
#![allow(dead_code, unused_imports, unused_macros)]

mod adapters;
pub mod generated;
mod harness;
pub mod moe;
pub mod programs;

pub use adapters::{Adapter, Adapters};
pub(crate) use harness::case;
pub use harness::{Case, Need, Span, run};

/// Asserts `got` is within `tol` (relative to the magnitude) of `want`, element by element.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        assert!(
            err <= tol * (1.0 + w.abs()),
            "{what}: element {i}: got {g}, want {w} (|err| {err} > tol {tol})"
        );
    }
}

/// proptest's config for `cases` random cases, without its regression files: they go beside the
/// crate's `lib.rs` or `main.rs`, which `tests/` lacks, so none was ever written, and the warning
/// saying so would now show in every run (libtest-mimic does not capture output).
pub fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..Default::default()
    }
}

/// A temporary path for `what` that is this process's and `device`'s adapter's: the trials of one
/// binary run at the same time, one per adapter.
pub fn scratch_path(what: &str, device: &gangway::Device) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "gangway-{what}-{}-{}",
        std::process::id(),
        device.info().adapter
    ))
}

/// A runtime over `devices` (each once, in first-seen order), as a process's one runtime would
/// be, and a client of it named `name`. Keep the runtime while the client is used: its workers
/// stop when it is dropped.
pub fn runtime_client(
    devices: &[gangway::Device],
    name: &str,
) -> (gangway::sched::Runtime, gangway::sched::Client) {
    let mut unique: Vec<gangway::Device> = Vec::new();
    for d in devices {
        if !unique.contains(d) {
            unique.push(d.clone());
        }
    }
    let runtime = gangway::sched::Runtime::new(unique, gangway::sched::RuntimeOptions::default())
        .expect("a runtime over the test's devices");
    let client = runtime.client(name, 1);
    (runtime, client)
}

/// The `losses` of a training report (`train moe|lm --json`) at `path`.
pub fn report_losses(path: impl AsRef<std::path::Path>) -> Vec<f64> {
    let text = std::fs::read_to_string(path).unwrap();
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    report["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_f64().unwrap())
        .collect()
}

/// The cross-entropy (nats) of `target` under one row of logits, in f64 from the max.
pub fn cross_entropy(row: &[f32], target: usize) -> f64 {
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = f64::from(m)
        + row
            .iter()
            .map(|&v| f64::from(v - m).exp())
            .sum::<f64>()
            .ln();
    lse - f64::from(row[target])
}

/// The resident memory of process `pid`, in KiB (0 where `/proc` cannot tell).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
