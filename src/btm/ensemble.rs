//! The domain-posterior ensemble of Branch-Train-Merge:
//! `p(x_t | x_<t) = Σ_j p(x_t | x_<t, D=j) · p(D=j | x_<t)`, with the posterior from Bayes' rule
//! over each ELM's likelihood of the last `history` bytes of the document and a cached prior.
//!
//! The prior is cached once: the mean posterior (under a uniform prior) over the first
//! `prior_windows` windows scored, then held fixed for every window, as the paper caches it from
//! a small held-out sample.

use crate::{Error, Result};

#[derive(Debug, Clone, Copy)]
pub struct EnsembleOptions {
    /// Bytes of the document's recent past the posterior conditions on.
    pub history: usize,
    /// Windows used to estimate the cached prior.
    pub prior_windows: usize,
}

impl Default for EnsembleOptions {
    fn default() -> Self {
        Self {
            history: 32,
            prior_windows: 256,
        }
    }
}

/// Log-sum-exp of `xs`.
fn logsumexp(xs: &[f64]) -> f64 {
    let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !m.is_finite() {
        return m;
    }
    m + xs.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
}

/// Posterior weights (log) per window, under `log_prior`, from the running history sums.
fn posteriors(
    nats: &[Vec<f64>],
    docs: &[usize],
    history: usize,
    log_prior: &[f64],
) -> Vec<Vec<f64>> {
    let models = nats.len();
    let n = docs.len();
    let mut out = Vec::with_capacity(n);
    let mut sums = vec![0.0f64; models];
    let mut start = 0usize;
    for i in 0..n {
        if i > 0 && docs[i] != docs[i - 1] {
            sums.iter_mut().for_each(|s| *s = 0.0);
            start = i;
        }
        // Windows start..i are this document's past; keep only the last `history` of them.
        if i - start > history {
            let old = i - history - 1;
            for j in 0..models {
                sums[j] -= nats[j][old];
            }
        }
        let logw: Vec<f64> = (0..models).map(|j| log_prior[j] - sums[j]).collect();
        let z = logsumexp(&logw);
        out.push(logw.iter().map(|w| w - z).collect());
        for j in 0..models {
            sums[j] += nats[j][i];
        }
    }
    out
}

/// Bits per byte of the ensemble over windows whose per-model nats are `nats[j][i]` and whose
/// documents are `docs[i]` (windows in document order). Also returns the cached prior.
pub fn ensemble_bits_per_byte(
    nats: &[Vec<f64>],
    docs: &[usize],
    opts: EnsembleOptions,
) -> Result<(f64, Vec<f64>)> {
    let models = nats.len();
    if models == 0 || docs.is_empty() || nats.iter().any(|v| v.len() != docs.len()) {
        return Err(Error::InvalidArgument {
            what: "BTM ensemble",
            reason: format!(
                "{} models and {} windows with per-model lengths {:?}",
                models,
                docs.len(),
                nats.iter().map(Vec::len).collect::<Vec<_>>()
            ),
        });
    }
    let uniform = vec![-(models as f64).ln(); models];
    let calib = opts.prior_windows.clamp(1, docs.len());
    let early = posteriors(
        &nats.iter().map(|v| v[..calib].to_vec()).collect::<Vec<_>>(),
        &docs[..calib],
        opts.history,
        &uniform,
    );
    let prior: Vec<f64> = (0..models)
        .map(|j| early.iter().map(|p| p[j].exp()).sum::<f64>() / calib as f64)
        .collect();
    let log_prior: Vec<f64> = prior.iter().map(|p| p.max(1e-12).ln()).collect();
    let post = posteriors(nats, docs, opts.history, &log_prior);
    let mut bits = 0.0;
    for (i, p) in post.iter().enumerate() {
        let terms: Vec<f64> = (0..models).map(|j| p[j] - nats[j][i]).collect();
        bits -= logsumexp(&terms) / std::f64::consts::LN_2;
    }
    Ok((bits / docs.len() as f64, prior))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn one_model_is_itself_and_the_right_expert_wins() {
        let nats = vec![vec![0.5; 10]];
        let (bpb, prior) =
            ensemble_bits_per_byte(&nats, &[0; 10], EnsembleOptions::default()).unwrap();
        assert!((bpb - 0.5 / std::f64::consts::LN_2).abs() < 1e-12);
        assert_eq!(prior, vec![1.0]);
        // Document 0 suits model 0, document 1 model 1: after a little history the ensemble is
        // nearly as good as the right expert, far better than the average of the two.
        let (good, bad) = (0.2, 3.0);
        let docs: Vec<usize> = (0..400).map(|i| i / 200).collect();
        let m0: Vec<f64> = docs
            .iter()
            .map(|&d| if d == 0 { good } else { bad })
            .collect();
        let m1: Vec<f64> = docs
            .iter()
            .map(|&d| if d == 1 { good } else { bad })
            .collect();
        let opts = EnsembleOptions {
            history: 8,
            prior_windows: 400,
        };
        let (bpb, prior) = ensemble_bits_per_byte(&[m0, m1], &docs, opts).unwrap();
        let oracle = good / std::f64::consts::LN_2;
        assert!(bpb < oracle * 1.2, "{bpb} vs oracle {oracle}");
        assert!((prior[0] - 0.5).abs() < 0.05, "{prior:?}");
    }

    #[test]
    fn mismatched_inputs_are_errors() {
        assert!(ensemble_bits_per_byte(&[], &[0], EnsembleOptions::default()).is_err());
        assert!(ensemble_bits_per_byte(&[vec![1.0]], &[0, 0], EnsembleOptions::default()).is_err());
    }
}
