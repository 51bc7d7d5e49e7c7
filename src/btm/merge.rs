//! Parameter averaging: one model from several ELMs (Branch-Train-Merge's cheap merge, and the
//! start of a new branch).

use crate::train::{Params, StepModel};
use crate::{Error, Result};

/// The weighted average of `models` (weights normalised to sum 1; `None` = uniform): the first
/// model's config with the weighted mean of every tensor.
pub fn average<M: StepModel>(models: &[&Params<M>], weights: Option<&[f64]>) -> Result<Params<M>> {
    const WHAT: &str = "parameter averaging";
    let Some(first) = models.first() else {
        return Err(Error::InvalidArgument {
            what: WHAT,
            reason: "no models".into(),
        });
    };
    // The seed is where the models started, not part of their shape: their tensors' names and
    // shapes are.
    if models.iter().any(|m| m.specs() != first.specs()) {
        return Err(Error::InvalidArgument {
            what: WHAT,
            reason: "the models have different parameter shapes".into(),
        });
    }
    for m in models {
        m.check()?;
    }
    let uniform = vec![1.0; models.len()];
    let weights = weights.unwrap_or(&uniform);
    let total: f64 = weights.iter().sum();
    if weights.len() != models.len()
        || weights.iter().any(|w| !w.is_finite() || *w < 0.0)
        || total <= 0.0
    {
        return Err(Error::InvalidArgument {
            what: WHAT,
            reason: format!(
                "need {} non-negative weights with a positive sum, got {weights:?}",
                models.len()
            ),
        });
    }
    let mut out = (*first).clone();
    for (t, tensor) in out.tensors.iter_mut().enumerate() {
        for (i, v) in tensor.iter_mut().enumerate() {
            let sum: f64 = models
                .iter()
                .zip(weights)
                .map(|(m, w)| w * f64::from(m.tensors[t][i]))
                .sum();
            *v = (sum / total) as f32;
        }
    }
    out.check()?;
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::moe::{MoeLmConfig, MoeLmParams};

    fn model(seed: u64) -> MoeLmParams {
        MoeLmParams::init(MoeLmConfig {
            seed,
            ..MoeLmConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn averages_elementwise_with_weights() {
        let (a, b) = (model(1), model(2));
        let mid = average(&[&a, &b], None).unwrap();
        let skew = average(&[&a, &b], Some(&[3.0, 1.0])).unwrap();
        for t in 0..a.tensors.len() {
            for i in 0..a.tensors[t].len().min(50) {
                let (x, y) = (a.tensors[t][i], b.tensors[t][i]);
                assert!((mid.tensors[t][i] - (x + y) / 2.0).abs() < 1e-6);
                assert!((skew.tensors[t][i] - (0.75 * x + 0.25 * y)).abs() < 1e-6);
            }
        }
        assert_eq!(average(&[&a], None).unwrap(), a);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let a = model(1);
        let other = MoeLmParams::init(MoeLmConfig {
            experts: 8,
            ..MoeLmConfig::default()
        })
        .unwrap();
        assert!(average::<MoeLmConfig>(&[], None).is_err());
        assert!(average(&[&a, &other], None).is_err());
        assert!(average(&[&a, &a], Some(&[1.0])).is_err());
        assert!(average(&[&a, &a], Some(&[0.0, 0.0])).is_err());
        assert!(average(&[&a, &a], Some(&[-1.0, 2.0])).is_err());
    }
}
