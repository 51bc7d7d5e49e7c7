//! The `gangway bench --json` file: one versioned schema ([`SCHEMA`], [`SCHEMA_VERSION`]) with the
//! machine, the adapters, the build and every case's raw samples, so that runs on different
//! machines and versions can be compared (`gangway bench compare`). `schemas/bench-report.json` is
//! the same schema as a JSON Schema document, generated from these types.

use super::format::{number, seconds};
use super::host::HostCost;
use super::work::{Sampling, Work};
use crate::{Error, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The columns of [`Report::table`].
pub const TABLE_COLUMNS: [&str; 12] = [
    "suite",
    "case",
    "adapter",
    "timing",
    "median",
    "min",
    "max",
    "figure",
    "of peak",
    "vs baseline",
    "host per run",
    "note",
];

/// The `schema` field of every report.
pub const SCHEMA: &str = "gangway-bench";
/// Bumped whenever a field changes meaning or is removed; readers refuse other versions.
pub const SCHEMA_VERSION: u32 = 1;

/// One `gangway bench` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// [`SCHEMA_VERSION`] of the gangway that wrote it.
    pub schema_version: u32,
    pub gangway: Build,
    /// When the run started, RFC 3339 in UTC.
    pub timestamp: String,
    pub machine: Machine,
    pub settings: Settings,
    pub adapters: Vec<AdapterRecord>,
    pub results: Vec<CaseResult>,
}

/// The gangway build that measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Build {
    pub version: String,
    /// Commit hash at build time, or `unknown` outside a git checkout.
    pub git: String,
}

impl Build {
    pub fn current() -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION").into(),
            git: env!("GANGWAY_GIT_HASH").into(),
        }
    }
}

/// The host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// `linux`, `macos`, `windows`, …
    pub os: String,
    /// The distribution or release, when it can be read.
    pub os_version: String,
    pub arch: String,
    /// The CPU model, when it can be read.
    pub cpu: String,
    /// Logical cores available to gangway.
    pub cores: usize,
}

/// What was asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub suites: Vec<String>,
    pub quick: bool,
    pub sampling: Sampling,
    /// The command line that ran the benchmarks (sizes and all), when run from the CLI.
    #[serde(default)]
    pub command: Vec<String>,
    /// The suites whose samples were taken in rounds across their cases (each round one run of
    /// every case); the others ran each case's samples back to back. Empty in reports from
    /// before rounds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_rounds: Vec<String>,
    /// Test-only: every sample was made this factor slower on purpose (`GANGWAY_BENCH_SLOWDOWN`).
    /// Absent in real runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown: Option<f64>,
}

/// One physical adapter the suites ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdapterRecord {
    /// Index among the adapters discovered (`gangway devices`); results refer to it.
    pub index: usize,
    pub name: String,
    pub backend: String,
    /// `discrete-gpu`, `integrated-gpu`, `cpu`, …
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    /// Virtual devices the adapter was split into (multi-device cases run on these).
    pub virtual_devices: usize,
    pub timestamp_query: bool,
    /// Theoretical peak, when known or given.
    pub peak: Option<Peak>,
}

impl AdapterRecord {
    /// A software Vulkan adapter without a known peak, for tests.
    #[cfg(test)]
    pub(crate) fn fake(index: usize, name: &str) -> Self {
        Self {
            index,
            name: name.into(),
            backend: "vulkan".into(),
            device_type: "cpu".into(),
            driver: String::new(),
            driver_info: String::new(),
            virtual_devices: 1,
            timestamp_query: true,
            peak: None,
        }
    }

    /// `name (backend)`, how tables and comparisons name the adapter.
    pub fn label(&self) -> String {
        format!("{} ({})", self.name, self.backend)
    }
}

/// An adapter's theoretical peak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Peak {
    /// FP32 GFLOP/s (without tensor cores).
    pub gflops: Option<f64>,
    /// Device-memory GB/s.
    pub gbps: Option<f64>,
    /// Where the numbers come from: the command line or the built-in table.
    pub source: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    /// The case ran and returned an error (or panicked); `reason` says why.
    Failed,
    /// The case could not run here (too few devices, an unsupported dtype); `reason` says why.
    Skipped,
}

/// Which clock the samples come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    /// GPU timestamp queries around the recorded work.
    Gpu,
    /// Host wall time around the run and its completion.
    Wall,
    /// The host-clock span of the run's traced work, first kernel start to last kernel end
    /// (excluding set-up such as uploads and pipeline creation).
    Trace,
}

impl Timing {
    pub fn name(self) -> &'static str {
        match self {
            Timing::Gpu => "gpu",
            Timing::Wall => "wall",
            Timing::Trace => "trace",
        }
    }
}

/// The timed samples of one case and their summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Stats {
    pub timing: Timing,
    /// Untimed runs before the samples.
    pub warmup: usize,
    /// Seconds per run, in the order measured.
    pub samples_s: Vec<f64>,
    pub min_s: f64,
    pub median_s: f64,
    pub max_s: f64,
}

impl Stats {
    pub fn new(timing: Timing, warmup: usize, samples_s: Vec<f64>) -> Self {
        let mut sorted = samples_s.clone();
        let median_s = crate::kernels::autotune::median(&mut sorted);
        Self {
            timing,
            warmup,
            min_s: sorted.first().copied().unwrap_or(f64::NAN),
            max_s: sorted.last().copied().unwrap_or(f64::NAN),
            median_s,
            samples_s,
        }
    }
}

/// A derived rate, e.g. `{ value: 12.5, unit: "GFLOP/s" }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    pub value: f64,
    pub unit: String,
}

/// What bounds a kernel on its adapter's roofline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    Compute,
    Memory,
}

/// A kernel against the roofline `min(peak FLOP/s, intensity × peak bandwidth)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Roofline {
    /// FLOPs per byte of compulsory device-memory traffic.
    pub intensity: f64,
    pub bound: Bound,
    pub attainable_gflops: f64,
    pub achieved_gflops: f64,
    /// `achieved / attainable`.
    pub fraction: f64,
}

/// This case's speed against another case of the same suite, adapter and run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    pub case: String,
    /// This case's work per median second over the baseline's (`baseline median / this
    /// median` where both do the same work): above 1 is faster than the baseline.
    pub speedup: f64,
}

/// One (suite, case, adapter).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaseResult {
    pub suite: String,
    pub case: String,
    /// [`AdapterRecord::index`] of the adapter it ran on.
    pub adapter: usize,
    pub status: Status,
    /// Why it failed or was skipped.
    pub reason: Option<String>,
    pub work: Option<Work>,
    pub stats: Option<Stats>,
    /// `work / median`, in the work's unit.
    pub figure: Option<Figure>,
    /// Achieved over the adapter's peak for what bounds the case: FLOP/s when its FLOPs are known,
    /// else bandwidth.
    pub peak_fraction: Option<f64>,
    /// Kernels whose FLOPs and bytes are both known, on an adapter with both peaks known.
    pub roofline: Option<Roofline>,
    pub baseline: Option<Baseline>,
    /// Further named results (bubble fractions, shares, dropped tokens, errors).
    pub metrics: BTreeMap<String, f64>,
    pub note: String,
    /// What the host spent per run over the samples: launches, CPU, context switches. Absent in
    /// reports from before it was counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostCost>,
}

impl CaseResult {
    /// How much work one run did ([`Work::amount`]; 1 where the case does not say), never 0:
    /// what a time is divided by when two runs did different amounts.
    pub fn work_amount(&self) -> f64 {
        self.work.map_or(1.0, |w| w.amount).max(f64::MIN_POSITIVE)
    }

    /// A case that did not produce samples.
    pub fn not_run(suite: &str, case: String, adapter: usize, status: Status, why: String) -> Self {
        Self {
            suite: suite.into(),
            case,
            adapter,
            status,
            reason: Some(why),
            work: None,
            stats: None,
            figure: None,
            peak_fraction: None,
            roofline: None,
            baseline: None,
            metrics: BTreeMap::new(),
            note: String::new(),
            host: None,
        }
    }

    /// A measured case: its figure, and its place against the adapter's peak when known.
    pub fn measured(
        suite: &str,
        case: String,
        adapter: &AdapterRecord,
        work: Work,
        stats: Stats,
        extras: super::harness::Extras,
    ) -> Self {
        let (unit, scale) = work.unit.figure();
        let (peak_fraction, roofline) = adapter.peak.as_ref().map_or((None, None), |p| {
            super::peak::place(&work, stats.median_s, p)
        });
        Self {
            suite: suite.into(),
            case,
            adapter: adapter.index,
            status: Status::Ok,
            reason: None,
            // A zero median (a timer coarser than the work) has no rate; JSON has no infinity.
            figure: (stats.median_s > 0.0).then(|| Figure {
                value: work.amount / stats.median_s * scale,
                unit: unit.into(),
            }),
            work: Some(work),
            stats: Some(stats),
            peak_fraction,
            roofline,
            baseline: None,
            metrics: extras.metrics,
            note: extras.note,
            host: extras.host,
        }
    }

    /// Whether the case gave numbers.
    pub fn is_ok(&self) -> bool {
        self.status == Status::Ok && self.stats.is_some()
    }
}

impl Report {
    /// Reads a report, refusing files that are not gangway bench reports of this schema version
    /// with a one-line error that says which.
    pub fn load(path: &Path) -> Result<Report> {
        let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
        Self::parse(&text).map_err(|reason| Error::BenchReport {
            path: path.to_path_buf(),
            reason,
        })
    }

    /// [`Report::load`] on text; the error is the reason alone.
    pub fn parse(text: &str) -> std::result::Result<Report, String> {
        Self::from_value(serde_json::from_str(text).map_err(|e| format!("malformed JSON: {e}"))?)
    }

    /// [`Report::parse`] on parsed JSON.
    pub fn from_value(value: serde_json::Value) -> std::result::Result<Report, String> {
        if value.get("schema").and_then(|s| s.as_str()) != Some(SCHEMA) {
            return Err(format!(
                "not a gangway bench report (no \"schema\": \"{SCHEMA}\"; files from before schema \
                 version 1 cannot be compared, rerun gangway bench --json)"
            ));
        }
        match value.get("schema_version").and_then(|v| v.as_u64()) {
            Some(v) if v == u64::from(SCHEMA_VERSION) => {}
            Some(v) => {
                return Err(format!(
                    "schema version {v}, but this gangway reads version {SCHEMA_VERSION}"
                ));
            }
            None => return Err("no schema_version".into()),
        }
        serde_json::from_value(value)
            .map_err(|e| format!("does not match schema version {SCHEMA_VERSION}: {e}"))
    }

    /// This schema as a JSON Schema document (what `schemas/bench-report.json` holds).
    pub fn json_schema() -> serde_json::Value {
        serde_json::to_value(schemars::schema_for!(Report)).unwrap_or_default()
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    pub fn adapter(&self, index: usize) -> Option<&AdapterRecord> {
        self.adapters.iter().find(|a| a.index == index)
    }

    /// The adapter label of a result (or its index when the report does not list it).
    pub fn adapter_label(&self, index: usize) -> String {
        self.adapter(index)
            .map_or_else(|| format!("adapter {index}"), AdapterRecord::label)
    }

    /// This report with only the results of the one adapter `pattern` picks ([`pick`]): its
    /// index, or a case-insensitive part of `name (backend)` (a number that is no adapter's
    /// index is read as a part of a name). None or several matching is an error naming the
    /// report's adapters.
    pub fn only_adapter(&self, pattern: &str) -> std::result::Result<Report, String> {
        let labels: Vec<(usize, String)> =
            self.adapters.iter().map(|a| (a.index, a.label())).collect();
        let matching: Vec<&AdapterRecord> = pick(pattern, &labels)
            .into_iter()
            .map(|k| &self.adapters[k])
            .collect();
        let labels = |v: &[&AdapterRecord]| {
            v.iter()
                .map(|a| format!("{} {}", a.index, a.label()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match matching[..] {
            [one] => Ok(Report {
                adapters: vec![one.clone()],
                results: self
                    .results
                    .iter()
                    .filter(|r| r.adapter == one.index)
                    .cloned()
                    .collect(),
                ..self.clone()
            }),
            [] => Err(format!(
                "no adapter matches {pattern:?}; the report has {}",
                labels(&self.adapters.iter().collect::<Vec<_>>())
            )),
            _ => Err(format!(
                "{pattern:?} matches several adapters ({}); be more specific",
                labels(&matching)
            )),
        }
    }

    /// Cases that failed.
    pub fn failures(&self) -> impl Iterator<Item = &CaseResult> {
        self.results.iter().filter(|r| r.status == Status::Failed)
    }

    /// The Markdown table: suite, case, adapter, timing, median, min, max, the derived figure,
    /// the fraction of peak, the speed-up over the case's baseline, the host's cost per run, and
    /// notes.
    pub fn table(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .results
            .iter()
            .map(|r| {
                let mut row = vec![
                    r.suite.clone(),
                    r.case.clone(),
                    self.adapter_label(r.adapter),
                ];
                match (&r.stats, r.status) {
                    (Some(s), Status::Ok) => row.extend([
                        s.timing.name().to_string(),
                        seconds(s.median_s),
                        seconds(s.min_s),
                        seconds(s.max_s),
                        r.figure
                            .as_ref()
                            .map_or("–".into(), |f| format!("{} {}", number(f.value), f.unit)),
                        peak_text(r),
                        r.baseline
                            .as_ref()
                            .map_or("–".into(), |b| format!("{:.2}× {}", b.speedup, b.case)),
                        r.host.as_ref().map_or("–".into(), HostCost::summary),
                        note_text(r),
                    ]),
                    _ => {
                        let status = match r.status {
                            Status::Skipped => "skipped",
                            _ => "FAILED",
                        };
                        row.push("–".into());
                        row.push(status.into());
                        row.extend(std::iter::repeat_n("–".to_string(), 6));
                        row.push(r.reason.clone().unwrap_or_default().replace('|', "/"));
                    }
                }
                row
            })
            .collect();
        crate::table::markdown_table(&TABLE_COLUMNS, &rows)
    }
}

fn peak_text(r: &CaseResult) -> String {
    match (&r.roofline, r.peak_fraction) {
        (Some(roof), _) => format!(
            "{:.1}% ({}-bound roofline)",
            roof.fraction * 100.0,
            match roof.bound {
                Bound::Compute => "compute",
                Bound::Memory => "memory",
            }
        ),
        (None, Some(f)) => format!("{:.1}%", f * 100.0),
        (None, None) => "–".into(),
    }
}

/// A result's note and its metrics (`bubble measured 0.18, ...`), as the table's note column shows
/// them.
pub fn note_text(r: &CaseResult) -> String {
    let metrics = r
        .metrics
        .iter()
        .map(|(k, v)| format!("{k} {}", number(*v)))
        .collect::<Vec<_>>()
        .join(", ");
    [r.note.as_str(), metrics.as_str()]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
        .replace('|', "/")
}

/// Which of `labels` (each adapter's index and `name (backend)`) `pattern` picks, as positions
/// in `labels`: the adapter of that index when `pattern` is a number some adapter has as its
/// index; otherwise every adapter whose label contains `pattern`, case-insensitively. So `0`
/// picks by index, and `4090`, `NVIDIA` or `lavapipe` by name.
pub fn pick(pattern: &str, labels: &[(usize, String)]) -> Vec<usize> {
    let by_index: Vec<usize> = pattern.trim().parse::<usize>().map_or_else(
        |_| Vec::new(),
        |i| (0..labels.len()).filter(|&k| labels[k].0 == i).collect(),
    );
    if !by_index.is_empty() {
        return by_index;
    }
    let p = pattern.to_lowercase();
    (0..labels.len())
        .filter(|&k| labels[k].1.to_lowercase().contains(&p))
        .collect()
}
