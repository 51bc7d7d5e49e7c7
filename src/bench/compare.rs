//! `gangway bench compare old.json new.json`: each case's ratio of the two runs' fastest samples,
//! the noise threshold it had to clear, each side's spread, and a verdict called only beyond the
//! noise ([`noise`](super::noise) has the rule: the fastest samples' ratio beyond 5% or the runs'
//! own noise, the larger; fewer than 5 samples a side are not judged). Two reports pair by case on the adapters each
//! side names ([`Sides`]: by index, by name, or any, so two machines' GPUs compare), and each
//! suite gets the geometric mean of its ratios ([`Comparison::suite_means`]).

use super::format::{number, seconds};
use super::host::HostCost;
use super::noise::{Call, Rule, relative_mad};
use super::report::{CaseResult, Report, Stats, Status};
use serde::Serialize;
use std::collections::BTreeMap;

pub use super::noise::MIN_SAMPLES;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Faster,
    Slower,
    /// No change beyond the noise: the ratio lies inside the noise threshold.
    WithinNoise,
    /// Fewer than [`MIN_SAMPLES`] on a side: not judged.
    TooFewSamples,
    /// One side has no numbers (failed or skipped).
    NotMeasured,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Faster => "FASTER",
            Verdict::Slower => "SLOWER",
            Verdict::WithinNoise => "no change",
            Verdict::TooFewSamples => "too few samples",
            Verdict::NotMeasured => "not measured",
        }
    }
}

/// One case found in both reports.
#[derive(Debug, Clone, Serialize)]
pub struct CaseComparison {
    pub suite: String,
    pub case: String,
    pub adapter: String,
    /// Each side's fastest sample: the least disturbed, what the verdict compares.
    pub old_fastest_s: Option<f64>,
    pub new_fastest_s: Option<f64>,
    /// `new fastest / old fastest` (per unit of work when the two did different amounts): below
    /// 1 is faster.
    pub time_ratio: Option<f64>,
    /// The noise threshold the ratio had to clear (0.05: ±5%), where judged.
    pub noise: Option<f64>,
    /// Each side's spread: its samples' median absolute deviation over their median.
    pub old_spread: Option<f64>,
    pub new_spread: Option<f64>,
    pub verdict: Verdict,
    /// Why a side was not measured.
    pub note: String,
    /// The host's cost per run in each report, where counted.
    pub old_host: Option<HostCost>,
    pub new_host: Option<HostCost>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub cases: Vec<CaseComparison>,
    /// `suite / case / adapter` keys in only one report.
    pub only_old: Vec<String>,
    pub only_new: Vec<String>,
}

/// How results are paired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pairing {
    /// Same suite, case and adapter (name and backend): one machine, two versions.
    SameAdapter,
    /// Same suite and case, whatever the adapter: two machines. Each report must then hold each
    /// case once (narrow it with [`Report::only_adapter`]).
    AnyAdapter,
}

type Key = (String, String, String);

/// The columns of [`Comparison::table`].
pub const COMPARE_COLUMNS: [&str; 11] = [
    "suite",
    "case",
    "adapter",
    "old fastest",
    "new fastest",
    "new/old",
    "noise",
    "spread old / new",
    "verdict",
    "host per run, old -> new",
    "note",
];

/// Each side's spread (median absolute deviation over the median) as `±2.1% / ±3.4%`.
pub fn spreads(old: Option<f64>, new: Option<f64>) -> String {
    let one = |s: Option<f64>| s.map_or_else(|| "–".to_string(), |s| format!("±{:.1}%", s * 100.0));
    format!("{} / {}", one(old), one(new))
}

/// A noise threshold as `±5.0%`.
pub fn noise_text(noise: f64) -> String {
    format!("±{:.1}%", noise * 100.0)
}

fn keyed(report: &Report, pairing: Pairing) -> Result<BTreeMap<Key, usize>, String> {
    let mut map = BTreeMap::new();
    for (i, r) in report.results.iter().enumerate() {
        let adapter = match pairing {
            Pairing::SameAdapter => report.adapter_label(r.adapter),
            Pairing::AnyAdapter => String::new(),
        };
        if map
            .insert((r.suite.clone(), r.case.clone(), adapter), i)
            .is_some()
            && pairing == Pairing::AnyAdapter
        {
            return Err(format!(
                "{} / {} was measured on several adapters; pick one per report (--old-adapter, --new-adapter)",
                r.suite, r.case
            ));
        }
    }
    Ok(map)
}

fn show(k: &Key) -> String {
    if k.2.is_empty() {
        format!("{} / {}", k.0, k.1)
    } else {
        format!("{} / {} / {}", k.0, k.1, k.2)
    }
}

fn ok(r: &CaseResult) -> Option<&Stats> {
    r.stats.as_ref().filter(|_| r.status == Status::Ok)
}

/// Pairs the cases of two reports and judges each change by the default [`Rule`].
pub fn compare(old: &Report, new: &Report, pairing: Pairing) -> Result<Comparison, String> {
    compare_with(old, new, pairing, Rule::default())
}

/// Pairs the cases of two reports and judges each change by `rule`.
pub fn compare_with(
    old: &Report,
    new: &Report,
    pairing: Pairing,
    rule: Rule,
) -> Result<Comparison, String> {
    let (a, b) = (keyed(old, pairing)?, keyed(new, pairing)?);
    let mut cases = Vec::new();
    for (key, &i) in &a {
        let Some(&j) = b.get(key) else { continue };
        let (o, n) = (&old.results[i], &new.results[j]);
        let adapter = match pairing {
            Pairing::SameAdapter => key.2.clone(),
            // ASCII: the viewer's font has no arrow.
            Pairing::AnyAdapter => format!(
                "{} -> {}",
                old.adapter_label(o.adapter),
                new.adapter_label(n.adapter)
            ),
        };
        let (verdict, time_ratio, noise, note) = match (ok(o), ok(n)) {
            (Some(so), Some(sn)) => {
                // Different sizes (other --runs, --tokens, ...): compare time per unit of work.
                let (ao, an) = (o.work_amount(), n.work_amount());
                let same_work = (ao - an).abs() <= 1e-9 * ao.max(an);
                let (ko, kn) = if same_work {
                    (1.0, 1.0)
                } else {
                    (1.0 / ao, 1.0 / an)
                };
                let scaled =
                    |s: &Stats, k: f64| s.samples_s.iter().map(|x| x * k).collect::<Vec<_>>();
                let judgement = rule.judge(&scaled(so, ko), &scaled(sn, kn));
                let verdict = match judgement.call {
                    Call::Faster => Verdict::Faster,
                    Call::Slower => Verdict::Slower,
                    Call::NoChange => Verdict::WithinNoise,
                    Call::TooFewSamples => Verdict::TooFewSamples,
                };
                let mut notes = Vec::new();
                if so.timing != sn.timing {
                    notes.push(format!(
                        "timed by {} then {}",
                        so.timing.name(),
                        sn.timing.name()
                    ));
                }
                if !same_work {
                    notes.push(format!("work {ao} then {an}: compared per unit of work"));
                }
                (
                    verdict,
                    Some(sn.min_s * kn / (so.min_s * ko)),
                    judgement.noise,
                    notes.join("; "),
                )
            }
            _ => {
                let why = |r: &CaseResult, side: &str| {
                    (r.status != Status::Ok).then(|| {
                        format!(
                            "{side}: {:?} {}",
                            r.status,
                            r.reason.clone().unwrap_or_default()
                        )
                    })
                };
                let note = [why(o, "old"), why(n, "new")]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join("; ");
                (Verdict::NotMeasured, None, None, note)
            }
        };
        cases.push(CaseComparison {
            suite: key.0.clone(),
            case: key.1.clone(),
            adapter,
            old_fastest_s: ok(o).map(|s| s.min_s),
            new_fastest_s: ok(n).map(|s| s.min_s),
            time_ratio,
            noise,
            old_spread: ok(o).and_then(|s| relative_mad(&s.samples_s)),
            new_spread: ok(n).and_then(|s| relative_mad(&s.samples_s)),
            verdict,
            note,
            old_host: o.host,
            new_host: n.host,
        });
    }
    Ok(Comparison {
        cases,
        only_old: a.keys().filter(|k| !b.contains_key(*k)).map(show).collect(),
        only_new: b.keys().filter(|k| !a.contains_key(*k)).map(show).collect(),
    })
}

/// The host's cost per run, old -> new: launches, gangway's CPU, context switches (all, and
/// gangway's own) and GPU objects created (where either created any), each where both reports
/// counted it. ASCII arrows: the viewer's font has no `→`.
pub fn host_change(old: Option<&HostCost>, new: Option<&HostCost>) -> String {
    let (Some(o), Some(n)) = (old, new) else {
        return "–".into();
    };
    let mut parts = vec![format!(
        "launches {} -> {}",
        number(o.launches),
        number(n.launches)
    )];
    if let (Some(a), Some(b)) = (o.runtime_cpu_s, n.runtime_cpu_s) {
        parts.push(format!("runtime CPU {} -> {}", seconds(a), seconds(b)));
    }
    if let (Some(a), Some(b)) = (o.switches(), n.switches()) {
        parts.push(format!("switches {} -> {}", number(a), number(b)));
    }
    if let (Some(a), Some(b)) = (o.runtime_switches, n.runtime_switches) {
        parts.push(format!("gangway's {} -> {}", number(a), number(b)));
    }
    if let (Some(a), Some(b)) = (o.gpu_objects, n.gpu_objects)
        && (a > 0.0 || b > 0.0)
    {
        parts.push(format!("GPU objects {} -> {}", number(a), number(b)));
    }
    parts.join(", ")
}

/// Which adapter each side of a comparison takes, and how the two sides' cases pair: what
/// `bench compare`'s flags say, and the viewer's choices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sides {
    /// The old report's adapter: an index, or part of its name ([`Report::only_adapter`]);
    /// `None` takes them all.
    pub old_adapter: Option<String>,
    pub new_adapter: Option<String>,
    /// Pair by suite and case alone, whatever the adapters (two machines).
    pub any_adapter: bool,
}

impl Sides {
    /// Narrows each report to its adapter, pairs their cases ([`Self::pairing`]) and judges
    /// each change by `rule`.
    pub fn compare(
        &self,
        old: &Report,
        new: &Report,
        rule: Rule,
    ) -> Result<(Comparison, Pairing), String> {
        let narrow = |r: &Report, pick: &Option<String>, side: &str| match pick {
            Some(p) => r.only_adapter(p).map_err(|e| format!("{side}: {e}")),
            None => Ok(r.clone()),
        };
        let (old, new) = (
            narrow(old, &self.old_adapter, "old")?,
            narrow(new, &self.new_adapter, "new")?,
        );
        let pairing = self.pairing(&old, &new);
        Ok((compare_with(&old, &new, pairing, rule)?, pairing))
    }

    /// How the (narrowed) reports pair: by adapter when they share one (one machine, two
    /// versions) unless told otherwise; by suite and case alone when asked, when each side was
    /// narrowed to one adapter, or when the two hold one adapter each and not the same one (two
    /// machines).
    pub fn pairing(&self, old: &Report, new: &Report) -> Pairing {
        let labels = |r: &Report| -> Vec<String> { r.adapters.iter().map(|a| a.label()).collect() };
        let (a, b) = (labels(old), labels(new));
        let shared = a.iter().any(|l| b.contains(l));
        let narrowed = self.old_adapter.is_some() && self.new_adapter.is_some();
        if self.any_adapter || narrowed || (!shared && a.len() == 1 && b.len() == 1) {
            Pairing::AnyAdapter
        } else {
            Pairing::SameAdapter
        }
    }
}

impl Pairing {
    /// What the pairing means, for a line above a comparison.
    pub fn describe(self) -> &'static str {
        match self {
            Pairing::SameAdapter => "paired by suite, case and adapter",
            Pairing::AnyAdapter => "paired by suite and case, across adapters",
        }
    }
}

/// One suite's cases in a comparison, summed up as the field compares GPUs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SuiteMean {
    pub suite: String,
    /// The geometric mean of the suite's `new/old` time ratios: below 1 is faster.
    pub time_ratio: f64,
    /// The cases it is over: those both sides measured.
    pub cases: usize,
}

impl Comparison {
    /// Per suite, in order of first appearance: the geometric mean of its cases' time ratios.
    pub fn suite_means(&self) -> Vec<SuiteMean> {
        let mut means: Vec<(String, f64, usize)> = Vec::new();
        for c in &self.cases {
            let Some(r) = c.time_ratio.filter(|r| r.is_finite() && *r > 0.0) else {
                continue;
            };
            match means.iter_mut().find(|(s, _, _)| *s == c.suite) {
                Some((_, logs, n)) => {
                    *logs += r.ln();
                    *n += 1;
                }
                None => means.push((c.suite.clone(), r.ln(), 1)),
            }
        }
        means
            .into_iter()
            .map(|(suite, logs, cases)| SuiteMean {
                suite,
                time_ratio: (logs / cases as f64).exp(),
                cases,
            })
            .collect()
    }

    /// [`Self::suite_means`] in one line: `matmul 0.512× (20 cases), moe 1.01× (6 cases)`.
    pub fn suite_means_line(&self) -> String {
        self.suite_means()
            .iter()
            .map(|m| {
                format!(
                    "{} {:.3}× ({} case{})",
                    m.suite,
                    m.time_ratio,
                    m.cases,
                    if m.cases == 1 { "" } else { "s" }
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The Markdown table, then the cases found in one report only.
    pub fn table(&self) -> String {
        let dash = || "–".to_string();
        let rows: Vec<Vec<String>> = self
            .cases
            .iter()
            .map(|c| {
                vec![
                    c.suite.clone(),
                    c.case.clone(),
                    c.adapter.clone(),
                    c.old_fastest_s.map_or_else(dash, seconds),
                    c.new_fastest_s.map_or_else(dash, seconds),
                    c.time_ratio.map_or_else(dash, |r| format!("{r:.3}×")),
                    c.noise.map_or_else(dash, noise_text),
                    spreads(c.old_spread, c.new_spread),
                    c.verdict.name().to_string(),
                    host_change(c.old_host.as_ref(), c.new_host.as_ref()),
                    c.note.replace('|', "/"),
                ]
            })
            .collect();
        let mut out = crate::table::markdown_table(&COMPARE_COLUMNS, &rows);
        for (which, keys) in [("old", &self.only_old), ("new", &self.only_new)] {
            if !keys.is_empty() {
                out.push_str(&format!("\nonly in {which}: {}\n", keys.join(", ")));
            }
        }
        out
    }

    pub fn count(&self, verdict: Verdict) -> usize {
        self.cases.iter().filter(|c| c.verdict == verdict).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::{AdapterRecord, Build, Machine, Settings, Timing};
    use crate::bench::work::{Sampling, Work, WorkUnit};

    fn report(adapter: &str, cases: &[(&str, &[f64])]) -> Report {
        Report {
            schema: crate::bench::report::SCHEMA.into(),
            schema_version: crate::bench::report::SCHEMA_VERSION,
            gangway: Build::current(),
            timestamp: "2026-11-30T00:00:00Z".into(),
            machine: Machine::current(),
            settings: Settings {
                suites: vec!["matmul".into()],
                quick: true,
                sampling: Sampling {
                    warmup: 0,
                    samples: 3,
                },
                command: Vec::new(),
                in_rounds: Vec::new(),
                slowdown: None,
            },
            adapters: vec![AdapterRecord::fake(0, adapter)],
            results: cases
                .iter()
                .map(|(case, samples)| {
                    let mut r = CaseResult::not_run(
                        "matmul",
                        case.to_string(),
                        0,
                        Status::Ok,
                        String::new(),
                    );
                    r.reason = None;
                    r.stats = Some(Stats::new(Timing::Gpu, 0, samples.to_vec()));
                    r
                })
                .collect(),
        }
    }

    fn verdicts(c: &Comparison) -> Vec<(String, Verdict)> {
        c.cases
            .iter()
            .map(|c| (c.case.clone(), c.verdict))
            .collect()
    }

    #[test]
    fn changes_beyond_the_noise_are_flagged_and_others_are_not() {
        let base: &[f64] = &[1.0, 1.02, 0.98, 1.01, 0.99];
        let times = |k: f64| base.iter().map(|x| x * k).collect::<Vec<_>>();
        let (slow, fast, small) = (times(1.25), times(0.8), times(1.03));
        let old = report(
            "gpu",
            &[
                ("same", base),
                ("slower", base),
                ("faster", base),
                ("small", base),
                ("noisy", &[1.0, 2.0, 0.5, 1.5, 0.7]),
                ("few", &[1.0, 1.0, 1.0]),
                ("gone", base),
            ],
        );
        let new = report(
            "gpu",
            &[
                ("same", &[1.01, 0.99, 1.0, 1.02, 0.98]),
                ("slower", &slow),
                ("faster", &fast),
                ("small", &small),
                // 1.2× the fastest, but the two fastest lie 40% (old) and 50% (new) apart.
                ("noisy", &[0.6, 1.9, 1.4, 0.9, 1.2]),
                ("few", &[2.0, 2.0, 2.0]),
                ("added", base),
            ],
        );
        let c = compare(&old, &new, Pairing::SameAdapter).unwrap();
        let v = verdicts(&c);
        let get = |n: &str| v.iter().find(|(c, _)| c == n).map(|(_, v)| *v);
        assert_eq!(get("same"), Some(Verdict::WithinNoise));
        assert_eq!(get("slower"), Some(Verdict::Slower));
        assert_eq!(get("faster"), Some(Verdict::Faster));
        // 3%: certain, but under the 5% threshold.
        assert_eq!(get("small"), Some(Verdict::WithinNoise));
        assert_eq!(get("noisy"), Some(Verdict::WithinNoise));
        assert_eq!(get("few"), Some(Verdict::TooFewSamples));
        assert_eq!(c.only_old, vec!["matmul / gone / gpu (vulkan)"]);
        assert_eq!(c.only_new, vec!["matmul / added / gpu (vulkan)"]);
        let slower = c.cases.iter().find(|c| c.case == "slower").unwrap();
        assert!((slower.time_ratio.unwrap() - 1.25).abs() < 1e-9);
        assert_eq!(slower.noise, Some(0.05));
        let noisy = c.cases.iter().find(|c| c.case == "noisy").unwrap();
        assert!((noisy.time_ratio.unwrap() - 1.2).abs() < 1e-9);
        assert!((noisy.noise.unwrap() - 0.5).abs() < 1e-9);
        assert!((slower.old_spread.unwrap() - 0.01).abs() < 1e-9);
        let few = c.cases.iter().find(|c| c.case == "few").unwrap();
        assert_eq!(few.noise, None);
        assert!((few.time_ratio.unwrap() - 2.0).abs() < 1e-9);
        let table = c.table();
        assert!(table.contains("| SLOWER |"), "{table}");
        assert!(table.contains("| too few samples |"), "{table}");
        assert!(table.contains("| ±1.0% / ±1.0% |"), "{table}");
        // A threshold above the change: not called.
        let lax = Rule::with_percent(30.0).unwrap();
        let lax = compare_with(&old, &new, Pairing::SameAdapter, lax).unwrap();
        let slower = lax.cases.iter().find(|c| c.case == "slower").unwrap();
        assert_eq!(slower.verdict, Verdict::WithinNoise);
    }

    #[test]
    fn other_adapters_pair_only_when_asked() {
        let old = report("gpu a", &[("x", &[1.0; 5])]);
        let new = report("gpu b", &[("x", &[3.0; 5])]);
        let same = compare(&old, &new, Pairing::SameAdapter).unwrap();
        assert!(same.cases.is_empty());
        let any = compare(&old, &new, Pairing::AnyAdapter).unwrap();
        assert_eq!(verdicts(&any), vec![("x".to_string(), Verdict::Slower)]);
        assert!(
            any.cases[0]
                .adapter
                .contains("gpu a (vulkan) -> gpu b (vulkan)")
        );
    }

    #[test]
    fn adapters_are_picked_by_index_else_by_name() {
        let mut r = report("NVIDIA GeForce RTX 4090", &[("x", &[1.0; 5])]);
        r.adapters
            .push(AdapterRecord::fake(1, "llvmpipe (LLVM 15.0.6, 256 bits)"));
        r.adapters.push(AdapterRecord::fake(2, "lavapipe"));
        let mut other = r.results[0].clone();
        other.adapter = 1;
        r.results.push(other);
        let name = |p: &str| r.only_adapter(p).map(|o| o.adapters[0].name.clone());
        assert_eq!(name("0").unwrap(), "NVIDIA GeForce RTX 4090");
        assert_eq!(name("1").unwrap(), "llvmpipe (LLVM 15.0.6, 256 bits)");
        // Not an index here: a part of a name, any case.
        assert_eq!(name("4090").unwrap(), "NVIDIA GeForce RTX 4090");
        assert_eq!(name("nvidia").unwrap(), "NVIDIA GeForce RTX 4090");
        assert_eq!(name("LAVAPIPE").unwrap(), "lavapipe");
        assert_eq!(r.only_adapter("1").unwrap().results.len(), 1);
        // 15 is no index, and part of one name.
        assert_eq!(name("15").unwrap(), "llvmpipe (LLVM 15.0.6, 256 bits)");
        let ambiguous = name("pipe").unwrap_err();
        assert!(ambiguous.contains("several adapters"), "{ambiguous}");
        assert!(ambiguous.contains("1 llvmpipe") && ambiguous.contains("2 lavapipe"));
        let none = name("radeon").unwrap_err();
        assert!(none.contains("no adapter matches \"radeon\""), "{none}");
        assert!(
            none.contains("0 NVIDIA GeForce RTX 4090 (vulkan)"),
            "{none}"
        );
    }

    #[test]
    fn different_amounts_of_work_compare_per_unit() {
        let mut old = report("gpu", &[("x", &[1.0, 1.1, 0.9, 1.05, 0.95])]);
        let mut new = report("gpu", &[("x", &[2.0, 2.2, 1.8, 2.1, 1.9])]);
        old.results[0].work = Some(Work::new(10.0, WorkUnit::Computation));
        new.results[0].work = Some(Work::new(20.0, WorkUnit::Computation));
        let c = compare(&old, &new, Pairing::SameAdapter).unwrap();
        assert_eq!(c.cases[0].verdict, Verdict::WithinNoise);
        assert!((c.cases[0].time_ratio.unwrap() - 1.0).abs() < 1e-9);
        assert!(c.cases[0].note.contains("per unit of work"));
    }

    #[test]
    fn failed_cases_are_not_judged() {
        let old = report("gpu", &[("x", &[1.0, 1.0, 1.0])]);
        let mut new = report("gpu", &[("x", &[1.0, 1.0, 1.0])]);
        new.results[0].status = Status::Failed;
        new.results[0].reason = Some("device lost".into());
        let c = compare(&old, &new, Pairing::SameAdapter).unwrap();
        assert_eq!(c.cases[0].verdict, Verdict::NotMeasured);
        assert!(c.cases[0].note.contains("device lost"));
    }

    /// Two machines: one report of two adapters, the other of one by another name.
    fn two_machines() -> (Report, Report) {
        let five = |t: f64| [t, t * 1.01, t * 0.99, t * 1.02, t * 0.98];
        let mut old = report("llvmpipe", &[("a", &five(2.0)), ("b", &five(8.0))]);
        let mut second = report("lavapipe", &[("a", &five(9.0)), ("b", &five(9.0))]);
        second.adapters[0].index = 1;
        for r in &mut second.results {
            r.adapter = 1;
        }
        old.adapters.extend(second.adapters);
        old.results.extend(second.results);
        let new = report(
            "NVIDIA GeForce RTX 4090",
            &[("a", &five(1.0)), ("b", &five(2.0))],
        );
        (old, new)
    }

    #[test]
    fn two_machines_pair_by_case_once_each_side_has_one_adapter() {
        let (old, new) = two_machines();
        let rule = Rule::default();
        // Nothing chosen: the old report has two adapters, no pairing by case is possible.
        let (c, pairing) = Sides::default().compare(&old, &new, rule).unwrap();
        assert_eq!((pairing, c.cases.len()), (Pairing::SameAdapter, 0));
        assert_eq!((c.only_old.len(), c.only_new.len()), (4, 2));
        // The old side narrowed by name: one adapter each, so by case.
        let sides = Sides {
            old_adapter: Some("llvm".into()),
            ..Sides::default()
        };
        let (c, pairing) = sides.compare(&old, &new, rule).unwrap();
        assert_eq!(pairing, Pairing::AnyAdapter);
        assert_eq!(c.cases.len(), 2);
        assert_eq!(
            c.cases[0].adapter,
            "llvmpipe (vulkan) -> NVIDIA GeForce RTX 4090 (vulkan)"
        );
        let means = c.suite_means();
        assert_eq!((means.len(), means[0].cases), (1, 2));
        // a: 1/2, b: 2/8: the geometric mean of 0.5 and 0.25.
        assert!((means[0].time_ratio - (0.5f64 * 0.25).sqrt()).abs() < 1e-2);
        assert!(
            c.suite_means_line().starts_with("matmul 0.35"),
            "{}",
            c.suite_means_line()
        );
        // By index on both sides, and a name that matches nothing is an error naming the side.
        let sides = Sides {
            old_adapter: Some("1".into()),
            new_adapter: Some("4090".into()),
            any_adapter: false,
        };
        let (c, _) = sides.compare(&old, &new, rule).unwrap();
        assert!(
            c.cases[0].adapter.starts_with("lavapipe"),
            "{:?}",
            c.cases[0]
        );
        let sides = Sides {
            new_adapter: Some("radeon".into()),
            ..Sides::default()
        };
        let e = sides.compare(&old, &new, rule).unwrap_err();
        assert!(e.starts_with("new: no adapter matches"), "{e}");
        // One machine: a shared adapter pairs by adapter.
        let (c, pairing) = Sides::default().compare(&old, &old, rule).unwrap();
        assert_eq!((pairing, c.cases.len()), (Pairing::SameAdapter, 4));
    }
}
