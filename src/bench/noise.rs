//! When `bench compare` calls a change: each run's fastest sample stands for the run, and a
//! change is called only beyond a noise threshold that the two runs' own samples can raise.
//!
//! - **The estimate.** The ratio of the two runs' fastest samples, `min(new) / min(old)`. On a
//!   shared machine interference only adds time (another process's burst, a page fault, a
//!   preemption), so the fastest sample is the least disturbed, and it is the estimator that
//!   holds between identical runs: Chen & Revels, *Robust benchmarking in noisy environments*
//!   (2016), the rule of Julia's BenchmarkTools `judge`. Measured here
//!   (`docs/src/measurements/development-machine.md`, "Verdicts that hold"): under bursts of
//!   load, at 5 samples, a rank interval of the medians caught a real 20% slowdown in 29–42% of
//!   cases, the fastest samples in 83–99%, with at most 2.2% of identical cases flagged.
//! - **The noise threshold.** The larger of [`Rule::threshold`] (5% unless `--noise-threshold`
//!   says otherwise) and each run's own noise at its fast end: how far its two fastest samples
//!   lie apart. A run whose every sample was disturbed shows it there, and its
//!   change must clear that much before it is called.
//! - **Too few samples.** Fewer than [`MIN_SAMPLES`] a side are not judged: at 3 samples a run's
//!   fastest was itself disturbed often enough that identical runs under load were flagged in
//!   24% of cases (14% at 4, 3% at 5).
//! - **Spread.** Each side's median absolute deviation over its median ([`relative_mad`]), shown
//!   beside the verdict.

use serde::Serialize;

/// Fewest samples per side for a verdict.
pub const MIN_SAMPLES: usize = 5;

/// The default noise threshold: changes under 5% are never called.
pub const DEFAULT_THRESHOLD: f64 = 0.05;

/// How a change is called.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rule {
    /// The smallest change called, as a fraction (0.05 is 5%): the ratio must lie above
    /// `1 + t` (slower) or below `1 / (1 + t)` (faster), `t` this or the runs' own noise, the
    /// larger.
    pub threshold: f64,
}

impl Default for Rule {
    fn default() -> Self {
        Self {
            threshold: DEFAULT_THRESHOLD,
        }
    }
}

/// What the samples say about one case's change.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Call {
    Faster,
    Slower,
    /// The ratio lies inside the noise threshold.
    NoChange,
    TooFewSamples,
}

/// The rule's reading of one case: its call, the ratio of the fastest samples, and the noise
/// threshold it had to clear.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judgement {
    pub call: Call,
    /// `min(new) / min(old)`; `None` with too few samples.
    pub ratio: Option<f64>,
    /// The threshold applied: the rule's, or where larger a side's gap between its two fastest
    /// samples.
    pub noise: Option<f64>,
}

impl Rule {
    /// A threshold in percent, as `--noise-threshold` takes it: from 0 to 100.
    pub fn with_percent(percent: f64) -> Result<Self, String> {
        if percent.is_finite() && (0.0..=100.0).contains(&percent) {
            Ok(Self {
                threshold: percent / 100.0,
            })
        } else {
            Err(format!(
                "--noise-threshold takes a percentage from 0 to 100, got {percent}"
            ))
        }
    }

    /// The rule in one sentence, for the comparison's last line.
    pub fn describe(&self) -> String {
        format!(
            "new/old is the ratio of each run's fastest sample (the least disturbed); FASTER or \
             SLOWER only when it lies beyond ±{}% or beyond a run's own noise, the gap between \
             its two fastest samples, where larger; otherwise no change. Fewer than \
             {MIN_SAMPLES} samples a side: too few samples.",
            (self.threshold * 1000.0).round() / 10.0
        )
    }

    /// Judges `old` and `new` samples (seconds, scaled alike when the runs did different amounts
    /// of work). Samples that are not positive and finite (a failed run) do not count.
    pub fn judge(&self, old: &[f64], new: &[f64]) -> Judgement {
        let (o, n) = (usable(old), usable(new));
        if o.len() < MIN_SAMPLES || n.len() < MIN_SAMPLES {
            return Judgement {
                call: Call::TooFewSamples,
                ratio: None,
                noise: None,
            };
        }
        let ratio = n[0] / o[0];
        let noise = self.threshold.max(gap(&o)).max(gap(&n));
        let up = 1.0 + noise;
        let call = if ratio > up {
            Call::Slower
        } else if ratio < 1.0 / up {
            Call::Faster
        } else {
            Call::NoChange
        };
        Judgement {
            call,
            ratio: Some(ratio),
            noise: Some(noise),
        }
    }
}

/// The positive, finite samples, fastest first.
fn usable(samples: &[f64]) -> Vec<f64> {
    let mut s: Vec<f64> = samples
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    s.sort_by(f64::total_cmp);
    s
}

/// A run's noise at its fast end, from its samples sorted fastest first (at least two): how far
/// its second-fastest lies above its fastest, relative (0.02: 2%). Its fastest sample is known
/// to about this.
fn gap(sorted: &[f64]) -> f64 {
    sorted[1] / sorted[0] - 1.0
}

/// The samples' median absolute deviation over their median: 0.02 when a typical sample is 2%
/// from the median. `None` for no samples.
pub fn relative_mad(samples: &[f64]) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    let median = crate::kernels::autotune::median(&mut s);
    let mut dev: Vec<f64> = samples.iter().map(|x| (x - median).abs()).collect();
    let mad = crate::kernels::autotune::median(&mut dev);
    (median > 0.0).then(|| mad / median)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator: no dependency, the same numbers every run.
    struct Lcg(u64);

    impl Lcg {
        fn uniform(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }

        /// Times of a run on a shared machine: `base`, each sample delayed by interference
        /// (exponential, `delay` on average, relative), and one sample in four hit by a burst
        /// of `burst` more.
        fn times(&mut self, n: usize, base: f64, delay: f64, burst: f64) -> Vec<f64> {
            (0..n)
                .map(|_| {
                    let d = -delay * self.uniform().ln();
                    let b = if self.uniform() < 0.25 { burst } else { 0.0 };
                    base * (1.0 + d + b)
                })
                .collect()
        }
    }

    #[test]
    fn identical_runs_are_no_change() {
        let mut g = Lcg(7);
        let rule = Rule::default();
        let mut flagged = 0;
        for _ in 0..200 {
            let (old, new) = (g.times(5, 1e-3, 0.01, 0.5), g.times(5, 1e-3, 0.01, 0.5));
            let j = rule.judge(&old, &new);
            assert!(j.noise.unwrap() >= 0.05);
            if j.call != Call::NoChange {
                flagged += 1;
            }
        }
        assert!(flagged <= 4, "{flagged} of 200 flagged");
    }

    #[test]
    fn a_20_percent_shift_is_flagged_either_way_through_bursts() {
        let mut g = Lcg(11);
        let rule = Rule::default();
        let (mut slower, mut faster) = (0, 0);
        for _ in 0..200 {
            let old = g.times(5, 1e-3, 0.01, 0.5);
            let new = g.times(5, 1.2e-3, 0.01, 0.5);
            slower += usize::from(rule.judge(&old, &new).call == Call::Slower);
            faster += usize::from(rule.judge(&new, &old).call == Call::Faster);
        }
        assert!(slower >= 190, "{slower} of 200 flagged slower");
        assert!(faster >= 190, "{faster} of 200 flagged faster");
        // The ratio is the fastest samples': a burst on every sample but one does not move it.
        let old = [1.0, 1.5, 1.5, 1.5, 1.01];
        let new = [1.2, 1.8, 1.8, 1.8, 1.21];
        let j = rule.judge(&old, &new);
        assert!((j.ratio.unwrap() - 1.2).abs() < 1e-12);
        assert_eq!(j.call, Call::Slower);
    }

    #[test]
    fn a_change_inside_the_threshold_is_not_called_however_certain() {
        let old = [1.00, 1.001, 1.002, 1.003, 1.004];
        let new = old.map(|x| x * 1.03);
        let j = Rule::default().judge(&old, &new);
        assert_eq!(j.call, Call::NoChange);
        assert_eq!(j.noise, Some(0.05));
        assert_eq!(
            Rule::with_percent(2.0).unwrap().judge(&old, &new).call,
            Call::Slower
        );
    }

    #[test]
    fn a_run_disturbed_throughout_raises_the_threshold() {
        // The new run's two fastest lie 30% apart: its fastest is not known to 20%.
        let old = [1.0, 1.01, 1.02, 1.01, 1.0];
        let new = [1.2, 1.56, 1.6, 1.7, 1.65];
        let j = Rule::default().judge(&old, &new);
        assert_eq!(j.call, Call::NoChange);
        assert!((j.noise.unwrap() - 0.3).abs() < 1e-9, "{j:?}");
        // Steady, the same fastest is a change.
        let steady = [1.2, 1.21, 1.22, 1.2, 1.21];
        assert_eq!(Rule::default().judge(&old, &steady).call, Call::Slower);
    }

    #[test]
    fn fewer_than_five_samples_are_too_few() {
        let j = Rule::default().judge(&[1.0, 1.0, 1.0], &[2.0, 2.0, 2.0]);
        assert_eq!(j.call, Call::TooFewSamples);
        assert_eq!(j.ratio, None);
        let j = Rule::default().judge(&[1.0; 4], &[2.0; 4]);
        assert_eq!(j.call, Call::TooFewSamples);
        // Failed samples (zero, NaN) do not count.
        let j = Rule::default().judge(&[1.0, 1.0, 1.0, 1.0, f64::NAN], &[2.0; 5]);
        assert_eq!(j.call, Call::TooFewSamples);
        let j = Rule::default().judge(&[1.0, 1.0, 1.0, 1.0, 0.0], &[2.0; 5]);
        assert_eq!(j.call, Call::TooFewSamples);
        assert_eq!(
            Rule::default().judge(&[1.0; 5], &[2.0; 5]).call,
            Call::Slower
        );
    }

    #[test]
    fn the_spread_is_the_relative_median_absolute_deviation() {
        assert_eq!(relative_mad(&[]), None);
        let s = relative_mad(&[1.0, 1.1, 0.9, 1.0, 2.0]).unwrap();
        assert!((s - 0.1).abs() < 1e-12, "{s}");
        assert_eq!(relative_mad(&[3.0; 5]), Some(0.0));
        assert!(Rule::with_percent(-1.0).is_err());
        assert!(Rule::with_percent(f64::NAN).is_err());
        assert!(Rule::default().describe().contains("±5%"));
    }
}
