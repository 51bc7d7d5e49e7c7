//! Runs suites on adapters into one [`Report`]: every suite's cases on every chosen adapter, each
//! case measured by [`measure`]. A case that fails (or panics) becomes a `failed` row with its
//! reason, and the rest still run.

use super::harness::{Sampling, measure};
use super::machine::utc_now;
use super::peak::peak_for;
use super::report::{
    AdapterRecord, Baseline, Build, CaseResult, Machine, Report, SCHEMA, SCHEMA_VERSION, Settings,
    Status, picks,
};
use super::suite::{Planned, Suite, SuiteOptions};
use crate::sched::Runtime;
use crate::{Device, Error, Result};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Everything a bench run needs besides the devices.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub suites: Vec<Suite>,
    pub sampling: Sampling,
    pub quick: bool,
    pub sizes: SuiteOptions,
    /// Override (or supply) every chosen adapter's peak.
    pub peak_gflops: Option<f64>,
    pub peak_gbps: Option<f64>,
    /// The command line, recorded in the report.
    pub command: Vec<String>,
}

impl BenchOptions {
    /// Every suite at its standard sizes: 2 warm-up runs, 5 samples.
    pub fn standard() -> Self {
        Self {
            suites: Suite::ALL.to_vec(),
            sampling: Sampling {
                warmup: 2,
                samples: 5,
            },
            quick: false,
            sizes: SuiteOptions::standard(),
            peak_gflops: None,
            peak_gbps: None,
            command: Vec::new(),
        }
    }

    /// Every suite at tiny sizes: 1 warm-up run, 3 samples.
    pub fn quick() -> Self {
        Self {
            sampling: Sampling {
                warmup: 1,
                samples: 3,
            },
            quick: true,
            sizes: SuiteOptions::quick(),
            ..Self::standard()
        }
    }
}

impl BenchOptions {
    /// Checks what would otherwise time nothing: no samples, a zero size, a peak that is not a
    /// positive number.
    pub fn validate(&self) -> Result<()> {
        let invalid = |reason: String| Error::InvalidArgument {
            what: "bench",
            reason,
        };
        if self.sampling.samples == 0 {
            return Err(invalid("--samples must be at least 1".into()));
        }
        for (name, peak) in [
            ("--peak-gflops", self.peak_gflops),
            ("--peak-gbps", self.peak_gbps),
        ] {
            if peak.is_some_and(|p| !(p.is_finite() && p > 0.0)) {
                return Err(invalid(format!("{name} must be a positive number")));
            }
        }
        self.sizes.validate()
    }
}

/// One adapter's devices (its virtual devices, in order).
#[derive(Debug, Clone)]
pub struct Adapter {
    pub index: usize,
    pub devices: Vec<Device>,
}

impl Adapter {
    pub fn label(&self) -> String {
        self.devices
            .first()
            .map(|d| format!("{} ({})", d.info().name, d.info().backend))
            .unwrap_or_default()
    }
}

/// Groups devices by adapter and keeps those `patterns` choose: an adapter index, or a
/// case-insensitive part of `name (backend)`. No patterns choose all. A pattern matching no
/// adapter is an error naming the adapters there are.
pub fn select_adapters(devices: &[Device], patterns: &[String]) -> Result<Vec<Adapter>> {
    let mut adapters: Vec<Adapter> = Vec::new();
    for d in devices {
        match adapters.iter_mut().find(|a| a.index == d.info().adapter) {
            Some(a) => a.devices.push(d.clone()),
            None => adapters.push(Adapter {
                index: d.info().adapter,
                devices: vec![d.clone()],
            }),
        }
    }
    if patterns.is_empty() {
        return Ok(adapters);
    }
    let matches = |a: &Adapter, p: &str| picks(p, a.index, &a.label());
    for p in patterns {
        if !adapters.iter().any(|a| matches(a, p)) {
            let found: Vec<String> = adapters
                .iter()
                .map(|a| format!("{} {}", a.index, a.label()))
                .collect();
            return Err(Error::InvalidArgument {
                what: "bench",
                reason: format!(
                    "no adapter matches {p:?}; found: {}",
                    if found.is_empty() {
                        "none".into()
                    } else {
                        found.join(", ")
                    }
                ),
            });
        }
    }
    adapters.retain(|a| patterns.iter().any(|p| matches(a, p)));
    Ok(adapters)
}

/// What the runner is doing, for progress display.
#[derive(Debug)]
pub enum Progress<'a> {
    Started {
        index: usize,
        total: usize,
        suite: &'a str,
        case: &'a str,
        adapter: &'a str,
    },
    /// A case is done: it is the last result of `report`, the report so far (to save partial
    /// results as they come).
    Finished {
        index: usize,
        total: usize,
        adapter: &'a str,
        report: &'a Report,
    },
}

fn record(adapter: &Adapter, o: &BenchOptions) -> AdapterRecord {
    let info = adapter.devices[0].info();
    AdapterRecord {
        index: adapter.index,
        name: info.name.clone(),
        backend: info.backend.clone(),
        device_type: info.device_type.clone(),
        driver: info.driver.clone(),
        driver_info: info.driver_info.clone(),
        virtual_devices: adapter.devices.len(),
        timestamp_query: info.features.timestamp_query,
        peak: peak_for(&info.name, o.peak_gflops, o.peak_gbps),
    }
}

/// Runs every chosen suite on every adapter, in that order, on `runtime` (whose devices the
/// adapters' are). Invalid options ([`BenchOptions::validate`]) are an error before anything
/// runs.
pub fn run(
    runtime: &Runtime,
    adapters: &[Adapter],
    o: &BenchOptions,
    mut progress: impl FnMut(Progress<'_>),
) -> Result<Report> {
    o.validate()?;
    let records: Vec<AdapterRecord> = adapters.iter().map(|a| record(a, o)).collect();
    let mut report = Report {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        gangway: Build::current(),
        timestamp: utc_now(),
        machine: Machine::current(),
        settings: Settings {
            suites: o.suites.iter().map(|s| s.name().to_string()).collect(),
            quick: o.quick,
            sampling: o.sampling,
            command: o.command.clone(),
        },
        adapters: records.clone(),
        results: Vec::new(),
    };
    // Plan everything first, so progress knows the total.
    let mut plans = Vec::new();
    let later: Vec<Device> = adapters
        .iter()
        .skip(1)
        .flat_map(|a| a.devices.iter().cloned())
        .collect();
    for (i, (adapter, rec)) in adapters.iter().zip(&records).enumerate() {
        let elsewhere = (i == 0).then_some(later.as_slice());
        for &suite in &o.suites {
            let planned = catch_unwind(AssertUnwindSafe(|| {
                suite.plan(runtime, &adapter.devices, elsewhere, &o.sizes)
            }))
            .unwrap_or_else(|p| Err(Error::panicked(format!("planning {}", suite.name()), &*p)));
            plans.push((adapter, rec, suite, planned));
        }
    }
    let total: usize = plans
        .iter()
        .map(|(_, _, _, p)| p.as_ref().map_or(1, Vec::len))
        .sum();
    let mut index = 0;
    for (adapter, rec, suite, planned) in plans {
        let label = adapter.label();
        let first = report.results.len();
        let cases = planned.unwrap_or_else(|e| {
            vec![Planned::Failed {
                case: "(all cases)".into(),
                reason: e.to_string(),
            }]
        });
        let mut baselines = Vec::new();
        for case in cases {
            index += 1;
            let name = case.case();
            progress(Progress::Started {
                index,
                total,
                suite: suite.name(),
                case: &name,
                adapter: &label,
            });
            let (r, baseline) = measure_case(suite.name(), case, rec, o.sampling);
            baselines.push((report.results.len(), baseline));
            report.results.push(r);
            progress(Progress::Finished {
                index,
                total,
                adapter: &label,
                report: &report,
            });
        }
        link_baselines(&mut report.results[first..], first, &baselines);
    }
    Ok(report)
}

/// Measures one planned case into its result (failed, with the reason, when it errs or panics);
/// also returns the case's baseline, if it has one.
pub fn measure_case(
    suite: &str,
    case: Planned,
    adapter: &AdapterRecord,
    sampling: Sampling,
) -> (CaseResult, Option<String>) {
    let mut bench = match case {
        Planned::Skip { case, reason } => {
            let r = CaseResult::not_run(suite, case, adapter.index, Status::Skipped, reason);
            return (r, None);
        }
        Planned::Failed { case, reason } => {
            let r = CaseResult::not_run(suite, case, adapter.index, Status::Failed, reason);
            return (r, None);
        }
        Planned::Run(bench) => bench,
    };
    let name = bench.case();
    let measured = catch_unwind(AssertUnwindSafe(|| measure(bench.as_mut(), sampling)))
        .unwrap_or_else(|p| Err(Error::panicked(name.clone(), &*p)));
    let result = match measured {
        Ok((stats, extras)) => {
            CaseResult::measured(suite, name, adapter, bench.work(), stats, extras)
        }
        Err(e) => CaseResult {
            work: Some(bench.work()),
            ..CaseResult::not_run(suite, name, adapter.index, Status::Failed, e.to_string())
        },
    };
    (result, bench.baseline())
}

/// Fills each case's speed-up over its baseline (same suite, adapter and run).
fn link_baselines(results: &mut [CaseResult], first: usize, baselines: &[(usize, Option<String>)]) {
    for (at, baseline) in baselines {
        let Some(name) = baseline else { continue };
        // Work per median second: cases of one suite may do different amounts of the same
        // unit (a decode of 8 sequences against one), and then their rates compare.
        let rate = |r: &CaseResult| {
            let amount = r.work.map_or(1.0, |w| w.amount);
            r.stats.as_ref().map(|s| amount / s.median_s)
        };
        let base = results
            .iter()
            .find(|r| &r.case == name && r.is_ok())
            .and_then(rate);
        let this = &mut results[at - first];
        if let (Some(base), Some(rate)) = (base, rate(this)) {
            this.baseline = Some(Baseline {
                case: name.clone(),
                speedup: rate / base,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::harness::{Benchmark, Extras, Timed, Work, WorkUnit};

    /// Counts its runs; fails or panics on request.
    struct Fake {
        fail: Option<&'static str>,
        runs: usize,
    }

    impl Benchmark for Fake {
        fn case(&self) -> String {
            "fake".into()
        }
        fn work(&self) -> Work {
            Work::new(1e9, WorkUnit::Flop).with_bytes(1e9)
        }
        fn prepare(&mut self) -> Result<()> {
            Ok(())
        }
        fn run(&mut self) -> Result<()> {
            self.runs += 1;
            match self.fail {
                Some("error") => Err(Error::DeviceLost {
                    device: "fake".into(),
                    reason: "test".into(),
                }),
                Some(_) => panic!("boom"),
                None => Ok(()),
            }
        }
        fn sync(&mut self) -> Result<Option<Timed>> {
            Ok(Some(Timed::gpu(0.5 * self.runs as f64)))
        }
        fn extras(&mut self) -> Result<Extras> {
            let mut e = Extras::default();
            e.metrics.insert("runs".into(), self.runs as f64);
            Ok(e)
        }
    }

    fn adapter(peak: Option<crate::bench::report::Peak>) -> AdapterRecord {
        AdapterRecord {
            peak,
            ..AdapterRecord::fake(3, "fake")
        }
    }

    fn case(fail: Option<&'static str>) -> Planned {
        Planned::Run(Box::new(Fake { fail, runs: 0 }))
    }

    const SAMPLING: Sampling = Sampling {
        warmup: 2,
        samples: 3,
    };

    #[test]
    fn samples_follow_warmup_and_give_the_figure_and_the_roofline() {
        let peak = crate::bench::report::Peak {
            gflops: Some(10.0),
            gbps: Some(100.0),
            source: "test".into(),
        };
        let (r, _) = measure_case("s", case(None), &adapter(Some(peak)), SAMPLING);
        assert_eq!(r.status, Status::Ok);
        let s = r.stats.as_ref().unwrap();
        // Runs 3, 4, 5 are timed: 1.5, 2.0 and 2.5 s by the fake GPU clock.
        assert_eq!(s.samples_s, vec![1.5, 2.0, 2.5]);
        assert_eq!((s.min_s, s.median_s, s.max_s), (1.5, 2.0, 2.5));
        assert_eq!(s.timing, crate::bench::report::Timing::Gpu);
        assert_eq!(r.figure.as_ref().unwrap().unit, "GFLOP/s");
        assert!((r.figure.as_ref().unwrap().value - 0.5).abs() < 1e-12);
        assert!((r.peak_fraction.unwrap() - 0.05).abs() < 1e-12);
        assert_eq!(r.metrics["runs"], 5.0);
        assert_eq!(r.adapter, 3);
    }

    #[test]
    fn errors_and_panics_become_failed_rows_with_the_reason() {
        let (r, _) = measure_case("s", case(Some("error")), &adapter(None), SAMPLING);
        assert_eq!(r.status, Status::Failed);
        assert!(r.reason.as_ref().unwrap().contains("was lost"), "{r:?}");
        let (r, _) = measure_case("s", case(Some("panic")), &adapter(None), SAMPLING);
        assert_eq!(r.status, Status::Failed);
        assert_eq!(r.reason.as_deref(), Some("fake panicked: boom"));
        let skip = Planned::skip("x".into(), "too few devices".into());
        let (r, _) = measure_case("s", skip, &adapter(None), SAMPLING);
        assert_eq!(r.status, Status::Skipped);
        assert!(r.stats.is_none());
    }
}
