//! A model's parameters: its tensors in [`StepModel::param_specs`] order. Gradients and Adam's
//! moments are the same type.

use super::StepModel;
use crate::{Error, Result};

/// Name, shape and fan-in of one parameter tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub fan_in: usize,
}

impl ParamSpec {
    pub fn new(name: String, shape: &[usize], fan_in: usize) -> Self {
        Self {
            name,
            shape: shape.to_vec(),
            fan_in,
        }
    }

    pub fn len(&self) -> usize {
        self.shape.iter().fold(1, |a, &b| a.saturating_mul(b))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Values of every parameter tensor of the model `config` names, in its
/// [`StepModel::param_specs`] order. The default is the default model with no tensors (what a
/// report read back from JSON holds: parameters are saved apart); [`Params::check`] fails on it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Params<M> {
    pub config: M,
    pub tensors: Vec<Vec<f32>>,
}

impl<M: StepModel> Params<M> {
    /// The model's first values ([`StepModel::init`]).
    pub fn init(config: M) -> Result<Self> {
        config.validate()?;
        let tensors = config.init()?;
        let out = Self { config, tensors };
        out.check()?;
        Ok(out)
    }

    /// All zeros (gradient accumulators, Adam moments).
    pub fn zeros(config: M) -> Result<Self> {
        config.validate()?;
        let tensors = config
            .param_specs()
            .iter()
            .map(|s| vec![0.0; s.len()])
            .collect();
        Ok(Self { config, tensors })
    }

    pub fn specs(&self) -> Vec<ParamSpec> {
        self.config.param_specs()
    }

    /// Scalars over all tensors.
    pub fn count(&self) -> usize {
        self.tensors.iter().map(Vec::len).sum()
    }

    /// The tensor at `index` (empty when out of range; [`Self::check`] rules that out).
    pub fn get(&self, index: usize) -> &[f32] {
        self.tensors.get(index).map_or(&[], Vec::as_slice)
    }

    /// Errors unless the config is valid and the tensors have exactly its count and sizes.
    pub fn check(&self) -> Result<()> {
        self.config.validate()?;
        let bad = |reason: String| Error::InvalidArgument {
            what: "model parameters",
            reason: format!("{}: {reason}", M::NAME),
        };
        let specs = self.specs();
        if specs.len() != self.tensors.len() {
            return Err(bad(format!(
                "{} tensors, the config has {}",
                self.tensors.len(),
                specs.len()
            )));
        }
        for (s, t) in specs.iter().zip(&self.tensors) {
            if s.len() != t.len() {
                return Err(bad(format!(
                    "{} has {} values, shape {:?} needs {}",
                    s.name,
                    t.len(),
                    s.shape,
                    s.len()
                )));
            }
        }
        Ok(())
    }
}
