//! When `bench compare` calls a change: the rule, criterion.rs's in shape (a confidence interval
//! of the change plus a noise threshold it must clear), with a rank-based interval so that it
//! needs no assumption about how the samples are distributed.
//!
//! - **The interval.** For each case, the ratio `new / old` of the two runs' times is estimated
//!   from every pair of samples, one of each run: the `m · n` ratios `new_j / old_i`. The
//!   interval is the Hodges–Lehmann one that goes with the Mann–Whitney test (Hollander & Wolfe,
//!   *Nonparametric Statistical Methods*, §4.3): the k-th smallest and k-th largest of those
//!   ratios, k from the exact distribution of the Mann–Whitney U statistic (a normal
//!   approximation past 20 × 20 samples), so that it covers the true ratio with 95% confidence
//!   when each run's samples are independent draws of that run's time.
//! - **The threshold.** A change is called only when the whole interval lies beyond
//!   ±[`Rule::threshold`] (5% unless `--noise-threshold` says otherwise): what two identical runs
//!   on a shared machine differ by, which no run's own samples show.
//! - **Too few samples.** Fewer than [`MIN_SAMPLES`] a side are not judged: at 3 + 3 no interval
//!   reaches 95% at all, and at 4 + 4 it is the whole range of the samples, decided by one sample
//!   each side.
//! - **Spread.** Each side's median absolute deviation over its median ([`relative_mad`]), shown
//!   beside the verdict.

use serde::Serialize;

/// Fewest samples per side for a verdict.
pub const MIN_SAMPLES: usize = 5;

/// The confidence of the interval of the ratio.
pub const CONFIDENCE: f64 = 0.95;

/// The standard normal quantile of `1 - (1 - CONFIDENCE) / 2`.
const Z: f64 = 1.959_963_984_540_054;

/// The default noise threshold: changes under 5% are never called.
pub const DEFAULT_THRESHOLD: f64 = 0.05;

/// Up to this many sample pairs (`m · n`) the interval uses the exact distribution.
const EXACT_PAIRS: usize = 400;

/// How a change is called.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rule {
    /// The smallest change called, as a fraction (0.05 is 5%): the interval must lie wholly
    /// above `1 + threshold` (slower) or below `1 / (1 + threshold)` (faster).
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
    /// The interval reaches inside the threshold.
    NoChange,
    TooFewSamples,
}

/// The rule's reading of one case: its call and the interval of `new / old` it rests on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judgement {
    pub call: Call,
    pub interval: Option<[f64; 2]>,
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
            "FASTER or SLOWER only when the whole {:.0}% interval of new/old (rank-based, from \
             every pair of the two runs' samples) lies beyond ±{}% (the noise threshold); \
             otherwise no change. Fewer than {MIN_SAMPLES} samples a side: too few samples.",
            CONFIDENCE * 100.0,
            (self.threshold * 1000.0).round() / 10.0
        )
    }

    /// Judges `old` and `new` samples (seconds, scaled alike when the runs did different amounts
    /// of work).
    pub fn judge(&self, old: &[f64], new: &[f64]) -> Judgement {
        let usable = |s: &[f64]| s.iter().filter(|x| x.is_finite() && **x > 0.0).count();
        if usable(old) < MIN_SAMPLES || usable(new) < MIN_SAMPLES {
            return Judgement {
                call: Call::TooFewSamples,
                interval: None,
            };
        }
        let Some(interval) = ratio_interval(old, new) else {
            return Judgement {
                call: Call::TooFewSamples,
                interval: None,
            };
        };
        let up = 1.0 + self.threshold;
        let call = if interval[0] > up {
            Call::Slower
        } else if interval[1] < 1.0 / up {
            Call::Faster
        } else {
            Call::NoChange
        };
        Judgement {
            call,
            interval: Some(interval),
        }
    }
}

/// The [`CONFIDENCE`] interval of `new / old` from the two samples (positive, finite values
/// only), or `None` when they are too few for any interval to reach that confidence.
pub fn ratio_interval(old: &[f64], new: &[f64]) -> Option<[f64; 2]> {
    let logs = |s: &[f64]| -> Vec<f64> {
        s.iter()
            .filter(|x| x.is_finite() && **x > 0.0)
            .map(|x| x.ln())
            .collect()
    };
    let (o, n) = (logs(old), logs(new));
    let k = rank(o.len(), n.len())?;
    let mut d: Vec<f64> = n
        .iter()
        .flat_map(|b| o.iter().map(move |a| b - a))
        .collect();
    d.sort_by(f64::total_cmp);
    Some([d[k - 1].exp(), d[d.len() - k].exp()])
}

/// The k (from 1) of the interval `[d_(k), d_(mn+1-k)]` of sizes `m` and `n`: the largest with
/// `P(U <= k - 1) <= (1 - CONFIDENCE) / 2` under the Mann–Whitney null distribution. `None`
/// when even k = 1 does not reach the confidence.
fn rank(m: usize, n: usize) -> Option<usize> {
    if m == 0 || n == 0 {
        return None;
    }
    let pairs = m * n;
    let k = if pairs <= EXACT_PAIRS {
        exact_rank(m, n)
    } else {
        let mean = pairs as f64 / 2.0;
        let sd = (pairs as f64 * (m + n + 1) as f64 / 12.0).sqrt();
        (mean - Z * sd + 0.5).floor().max(0.0) as usize
    };
    (k >= 1 && k <= pairs.div_ceil(2)).then_some(k)
}

/// [`rank`] from the exact distribution: the smallest u with `P(U <= u) > alpha`.
fn exact_rank(m: usize, n: usize) -> usize {
    let alpha = (1.0 - CONFIDENCE) / 2.0;
    let mut cumulative = 0.0;
    for (u, pu) in mann_whitney(m, n).iter().enumerate() {
        cumulative += pu;
        if cumulative > alpha {
            return u;
        }
    }
    0
}

/// `P(U = u)` for u = 0..=m·n, U the Mann–Whitney statistic of samples of `m` and `n` under the
/// null hypothesis (every ordering equally likely), by the recurrence
/// `p(m, n, u) = m/(m+n) p(m-1, n, u-n) + n/(m+n) p(m, n-1, u)`.
fn mann_whitney(m: usize, n: usize) -> Vec<f64> {
    // table[i][j] is the distribution for sizes i and j.
    let mut table: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); n + 1]; m + 1];
    for i in 0..=m {
        for j in 0..=n {
            table[i][j] = if i == 0 || j == 0 {
                vec![1.0]
            } else {
                let total = (i + j) as f64;
                let mut p = vec![0.0; i * j + 1];
                for (u, x) in table[i - 1][j].iter().enumerate() {
                    p[u + j] += x * i as f64 / total;
                }
                for (u, x) in table[i][j - 1].iter().enumerate() {
                    p[u] += x * j as f64 / total;
                }
                p
            };
        }
    }
    std::mem::take(&mut table[m][n])
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

        /// Log-normal-ish times around `median`, spread about `spread` (relative).
        fn times(&mut self, n: usize, median: f64, spread: f64) -> Vec<f64> {
            (0..n)
                .map(|_| {
                    // Sum of 4 uniforms: roughly normal, mean 2, sd 0.577.
                    let z = ((0..4).map(|_| self.uniform()).sum::<f64>() - 2.0) / 0.577;
                    median * (spread * z).exp()
                })
                .collect()
        }
    }

    #[test]
    fn the_exact_distribution_is_mann_whitneys() {
        // 3 + 3: 20 orderings; U = 0 in one of them.
        let p = mann_whitney(3, 3);
        assert_eq!(p.len(), 10);
        assert!((p[0] - 1.0 / 20.0).abs() < 1e-12);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // Symmetric.
        for u in 0..p.len() {
            assert!((p[u] - p[p.len() - 1 - u]).abs() < 1e-12);
        }
        // The tables' critical values (two-sided 0.05): U <= 2 at 5 + 5, U <= 13 at 8 + 8,
        // U <= 37 at 12 + 12; so k is one more.
        assert_eq!(rank(5, 5), Some(3));
        assert_eq!(rank(8, 8), Some(14));
        assert_eq!(rank(12, 12), Some(38));
        // 3 + 3 cannot reach 95% (the least two-sided p is 0.1); 4 + 4 just can (2/70).
        assert_eq!(rank(3, 3), None);
        assert_eq!(rank(4, 4), Some(1));
        // The normal approximation past 20 × 20 is within one of the exact rank.
        for (m, n) in [(21, 21), (30, 30), (25, 40)] {
            let (approx, exact) = (rank(m, n).unwrap(), exact_rank(m, n));
            assert!(
                approx.abs_diff(exact) <= 1,
                "{m} + {n}: {approx} vs {exact}"
            );
        }
    }

    #[test]
    fn identical_distributions_are_no_change() {
        let mut g = Lcg(7);
        let rule = Rule::default();
        let mut flagged = 0;
        for _ in 0..200 {
            let (old, new) = (g.times(5, 1e-3, 0.05), g.times(5, 1e-3, 0.05));
            let j = rule.judge(&old, &new);
            let [lo, hi] = j.interval.unwrap();
            assert!(lo <= hi);
            if j.call != Call::NoChange {
                flagged += 1;
            }
        }
        // Both the interval (95%) and the threshold (5%) must be beaten: almost never.
        assert!(flagged <= 2, "{flagged} of 200 flagged");
    }

    #[test]
    fn a_20_percent_shift_is_flagged_either_way() {
        let mut g = Lcg(11);
        let rule = Rule::default();
        let (mut slower, mut faster) = (0, 0);
        for _ in 0..200 {
            let old = g.times(5, 1e-3, 0.03);
            let new: Vec<f64> = g.times(5, 1e-3, 0.03).iter().map(|x| x * 1.2).collect();
            slower += usize::from(rule.judge(&old, &new).call == Call::Slower);
            faster += usize::from(rule.judge(&new, &old).call == Call::Faster);
        }
        assert!(slower >= 190, "{slower} of 200 flagged slower");
        assert!(faster >= 190, "{faster} of 200 flagged faster");
        // The interval brackets the shift.
        let old = g.times(10, 1e-3, 0.03);
        let new: Vec<f64> = g.times(10, 1e-3, 0.03).iter().map(|x| x * 1.2).collect();
        let [lo, hi] = rule.judge(&old, &new).interval.unwrap();
        assert!(lo < 1.2 && 1.2 < hi, "[{lo}, {hi}]");
    }

    #[test]
    fn a_change_inside_the_threshold_is_not_called_however_certain() {
        let old = [1.00, 1.001, 1.002, 1.003, 1.004];
        let new = old.map(|x| x * 1.03);
        let j = Rule::default().judge(&old, &new);
        assert_eq!(j.call, Call::NoChange);
        let [lo, hi] = j.interval.unwrap();
        assert!(lo > 1.0 && hi < 1.05, "[{lo}, {hi}]");
        assert_eq!(
            Rule::with_percent(2.0).unwrap().judge(&old, &new).call,
            Call::Slower
        );
    }

    #[test]
    fn three_samples_are_too_few() {
        let j = Rule::default().judge(&[1.0, 1.0, 1.0], &[2.0, 2.0, 2.0]);
        assert_eq!(j.call, Call::TooFewSamples);
        assert_eq!(j.interval, None);
        // Four a side: still too few (the interval would be the samples' whole range).
        let j = Rule::default().judge(&[1.0; 4], &[2.0; 4]);
        assert_eq!(j.call, Call::TooFewSamples);
        // Failed samples (zero, NaN) do not count.
        let j = Rule::default().judge(&[1.0, 1.0, 1.0, 1.0, f64::NAN], &[2.0; 5]);
        assert_eq!(j.call, Call::TooFewSamples);
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
