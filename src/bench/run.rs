//! Runs suites on adapters into one [`Report`]: every suite's cases on every chosen adapter. A case
//! that fails (or panics) becomes a `failed` row with its reason, and the rest still run.
//!
//! Samples are taken in rounds where the suite allows it ([`Suite::in_rounds`]): every case of the
//! suite is prepared, then round r runs each case once (its warm-up runs before its first sample),
//! so a burst of load on a shared machine moves one sample of every case instead of all the
//! samples of one case (which no comparison of two runs could then tell from a change). The
//! training suites still run one case at a time.

use super::harness::{Sampler, slowdown};
use super::machine::utc_now;
use super::peak::peak_for;
use super::planned::Planned;
use super::report::{
    AdapterRecord, Baseline, Build, CaseResult, Machine, Report, SCHEMA, SCHEMA_VERSION, Settings,
    Status, pick,
};
use super::suite::{ROUNDS_BYTES, Suite, SuiteOptions};
use super::work::Sampling;
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

/// Groups devices by adapter and keeps those `patterns` choose ([`pick`]): an adapter index, or
/// a case-insensitive part of `name (backend)` (a number no adapter has as its index is read as a
/// part of a name). No patterns choose all. A pattern matching no
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
    let labels: Vec<(usize, String)> = adapters.iter().map(|a| (a.index, a.label())).collect();
    let mut chosen = vec![false; adapters.len()];
    for p in patterns {
        let picked = pick(p, &labels);
        if picked.is_empty() {
            let found: Vec<String> = labels.iter().map(|(i, l)| format!("{i} {l}")).collect();
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
        picked.into_iter().for_each(|k| chosen[k] = true);
    }
    let mut chosen = chosen.into_iter();
    adapters.retain(|_| chosen.next().unwrap_or(false));
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
    /// Round `round` (from 1) of `rounds` of a suite measured in rounds is starting: one sample
    /// of each of its prepared cases.
    Round {
        round: usize,
        rounds: usize,
        suite: &'a str,
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
            in_rounds: o
                .suites
                .iter()
                .filter(|s| s.in_rounds())
                .map(|s| s.name().to_string())
                .collect(),
            slowdown: slowdown()?,
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
        for group in groups(cases, suite.in_rounds()) {
            let from = index;
            let measured = measure_cases(suite.name(), group, rec, o.sampling, |step| match step {
                Step::Preparing(case) => {
                    index += 1;
                    progress(Progress::Started {
                        index,
                        total,
                        suite: suite.name(),
                        case,
                        adapter: &label,
                    });
                }
                Step::Round(round, rounds) => progress(Progress::Round {
                    round,
                    rounds,
                    suite: suite.name(),
                    adapter: &label,
                }),
            });
            for (k, (r, baseline)) in measured.into_iter().enumerate() {
                baselines.push((report.results.len(), baseline));
                report.results.push(r);
                progress(Progress::Finished {
                    index: from + k + 1,
                    total,
                    adapter: &label,
                    report: &report,
                });
            }
        }
        link_baselines(&mut report.results[first..], first, &baselines);
    }
    Ok(report)
}

/// The cases of one suite in the groups measured together: one group of cases holding at most
/// [`ROUNDS_BYTES`] between them when `in_rounds`, else each case alone.
fn groups(cases: Vec<Planned>, in_rounds: bool) -> Vec<Vec<Planned>> {
    let mut out: Vec<Vec<Planned>> = Vec::new();
    let mut bytes = 0.0;
    for case in cases {
        let b = match &case {
            Planned::Run(b) => b.work().bytes.unwrap_or(0.0),
            _ => 0.0,
        };
        match out.last_mut() {
            Some(last) if in_rounds && bytes + b <= ROUNDS_BYTES => {
                bytes += b;
                last.push(case);
            }
            _ => {
                bytes = b;
                out.push(vec![case]);
            }
        }
    }
    out
}

/// Measures one planned case into its result (failed, with the reason, when it errs or panics);
/// also returns the case's baseline, if it has one.
pub fn measure_case(
    suite: &str,
    case: Planned,
    adapter: &AdapterRecord,
    sampling: Sampling,
) -> (CaseResult, Option<String>) {
    let mut measured = measure_cases(suite, vec![case], adapter, sampling, |_| {});
    measured.remove(0)
}

/// A case on its way through [`measure_cases`].
enum State {
    Done(Box<CaseResult>),
    Live(Box<dyn super::Benchmark>, Sampler),
    Failed(Box<dyn super::Benchmark>, Error),
    /// Only while a live case is turned into a failed one.
    Taken,
}

/// Runs `f`, a panic becoming an error naming `name`.
fn guarded<T>(name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|p| Err(Error::panicked(name.to_string(), &*p)))
}

/// Where [`measure_cases`] is.
#[derive(Debug, Clone, Copy)]
pub enum Step<'a> {
    /// Preparing this case.
    Preparing(&'a str),
    /// Round `.0` (from 1) of `.1` is starting (told only when several cases are live).
    Round(usize, usize),
}

/// Measures `cases` together: each prepared (`step` is told its name first), then
/// `sampling.samples` rounds (`step` is told each, from 1, when more than one case is live),
/// each running every case that has not failed once, its first sample after its warm-up. One
/// case alone is the back-to-back loop. Returns each case's result and baseline, in order.
pub fn measure_cases(
    suite: &str,
    cases: Vec<Planned>,
    adapter: &AdapterRecord,
    sampling: Sampling,
    mut step: impl FnMut(Step<'_>),
) -> Vec<(CaseResult, Option<String>)> {
    let done = |case, status, why| {
        State::Done(Box::new(CaseResult::not_run(
            suite,
            case,
            adapter.index,
            status,
            why,
        )))
    };
    let mut states: Vec<State> = Vec::new();
    for case in cases {
        step(Step::Preparing(&case.case()));
        states.push(match case {
            Planned::Skip { case, reason } => done(case, Status::Skipped, reason),
            Planned::Failed { case, reason } => done(case, Status::Failed, reason),
            Planned::Run(mut bench) => {
                match guarded(&bench.case(), || Sampler::prepare(bench.as_mut(), sampling)) {
                    Ok(sampler) => State::Live(bench, sampler),
                    Err(e) => State::Failed(bench, e),
                }
            }
        });
    }
    let rounds = sampling.samples.max(1);
    let live = states
        .iter()
        .filter(|s| matches!(s, State::Live(..)))
        .count();
    for r in 1..=rounds {
        if live > 1 {
            step(Step::Round(r, rounds));
        }
        for state in &mut states {
            let State::Live(bench, sampler) = state else {
                continue;
            };
            if let Err(e) = guarded(&bench.case(), || sampler.sample(bench.as_mut())) {
                let taken = std::mem::replace(state, State::Taken);
                if let State::Live(bench, _) = taken {
                    *state = State::Failed(bench, e);
                }
            }
        }
    }
    let failed = |bench: Box<dyn super::Benchmark>, e: Error| {
        let r = CaseResult {
            work: Some(bench.work()),
            ..CaseResult::not_run(
                suite,
                bench.case(),
                adapter.index,
                Status::Failed,
                e.to_string(),
            )
        };
        (r, bench.baseline())
    };
    states
        .into_iter()
        .map(|state| match state {
            State::Done(r) => (*r, None),
            State::Taken => unreachable!("a case left taken"),
            State::Failed(bench, e) => failed(bench, e),
            State::Live(mut bench, sampler) => {
                match guarded(&bench.case(), || sampler.finish(bench.as_mut())) {
                    Ok((stats, extras)) => {
                        let r = CaseResult::measured(
                            suite,
                            bench.case(),
                            adapter,
                            bench.work(),
                            stats,
                            extras,
                        );
                        (r, bench.baseline())
                    }
                    Err(e) => failed(bench, e),
                }
            }
        })
        .collect()
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
    use crate::bench::harness::{Benchmark, Extras, Timed};
    use crate::bench::work::{Work, WorkUnit};

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

    /// Logs what it is asked to do into a shared list.
    struct Logged {
        name: &'static str,
        log: std::rc::Rc<std::cell::RefCell<Vec<String>>>,
        fail_at: Option<usize>,
        runs: usize,
    }

    impl Benchmark for Logged {
        fn case(&self) -> String {
            self.name.into()
        }
        fn work(&self) -> Work {
            Work::new(1.0, WorkUnit::Computation)
        }
        fn prepare(&mut self) -> Result<()> {
            self.log.borrow_mut().push(format!("prepare {}", self.name));
            Ok(())
        }
        fn run(&mut self) -> Result<()> {
            self.runs += 1;
            self.log
                .borrow_mut()
                .push(format!("{}{}", self.name, self.runs));
            if Some(self.runs) == self.fail_at {
                return Err(Error::DeviceLost {
                    device: "fake".into(),
                    reason: "test".into(),
                });
            }
            Ok(())
        }
        fn sync(&mut self) -> Result<Option<Timed>> {
            Ok(Some(Timed::gpu(self.runs as f64)))
        }
    }

    #[test]
    fn rounds_take_one_sample_of_each_case_in_turn() {
        let log = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let case = |name, fail_at| {
            Planned::Run(Box::new(Logged {
                name,
                log: log.clone(),
                fail_at,
                runs: 0,
            }))
        };
        let cases = vec![
            case("a", None),
            Planned::skip("s".into(), "not here".into()),
            case("b", Some(3)),
            case("c", None),
        ];
        let mut steps = Vec::new();
        let results = measure_cases("s", cases, &adapter(None), SAMPLING, |s| {
            steps.push(format!("{s:?}"))
        });
        // Every case prepared first; each case's 2 warm-up runs right before its first sample;
        // then one run of each case a round. b fails in round 1 (its third run) and drops out.
        assert_eq!(
            log.borrow().join(" "),
            "prepare a prepare b prepare c a1 a2 a3 b1 b2 b3 c1 c2 c3 a4 c4 a5 c5"
        );
        assert_eq!(steps.len(), 4 + 3, "{steps:?}");
        assert_eq!(steps[4], "Round(1, 3)");
        let names: Vec<(&str, Status)> = results
            .iter()
            .map(|(r, _)| (r.case.as_str(), r.status))
            .collect();
        assert_eq!(
            names,
            [
                ("a", Status::Ok),
                ("s", Status::Skipped),
                ("b", Status::Failed),
                ("c", Status::Ok)
            ]
        );
        // The samples are the runs after the warm-up.
        assert_eq!(
            results[0].0.stats.as_ref().unwrap().samples_s,
            [3.0, 4.0, 5.0]
        );
        assert!(results[2].0.reason.as_ref().unwrap().contains("was lost"));
    }

    #[test]
    fn suites_split_into_groups_by_their_bytes() {
        let big = |name: &'static str| {
            struct Big(&'static str);
            impl Benchmark for Big {
                fn case(&self) -> String {
                    self.0.into()
                }
                fn work(&self) -> Work {
                    Work::new(1.0, WorkUnit::Flop).with_bytes(0.6 * ROUNDS_BYTES)
                }
                fn prepare(&mut self) -> Result<()> {
                    Ok(())
                }
                fn run(&mut self) -> Result<()> {
                    Ok(())
                }
                fn sync(&mut self) -> Result<Option<Timed>> {
                    Ok(None)
                }
            }
            Planned::Run(Box::new(Big(name)))
        };
        let sizes = |g: Vec<Vec<Planned>>| g.iter().map(Vec::len).collect::<Vec<_>>();
        assert_eq!(
            sizes(groups(vec![big("a"), big("b"), big("c")], true)),
            [1, 1, 1]
        );
        let skip = || Planned::skip("s".into(), "not here".into());
        assert_eq!(sizes(groups(vec![skip(), big("a"), skip()], true)), [3]);
        assert_eq!(sizes(groups(vec![skip(), skip()], false)), [1, 1]);
    }
}
