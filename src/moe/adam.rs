//! Adam on the host for the reference model: [`crate::kernels::optim::adam_reference`] on every
//! parameter tensor, with the moments kept as [`MoeLmParams`] of the same shapes.

use super::MoeLmParams;
use super::reference::{Forward, GroupedForward, loss_and_grads, loss_and_grads_grouped};
use crate::Result;
use crate::kernels::optim::{AdamConfig, adam_reference};

/// Adam's state: the step count and both moments.
#[derive(Debug, Clone, PartialEq)]
pub struct Adam {
    pub config: AdamConfig,
    /// Steps taken; the next update uses `step + 1` for bias correction.
    pub step: u32,
    pub m: MoeLmParams,
    pub v: MoeLmParams,
}

impl Adam {
    /// Zero moments shaped like `params`.
    pub fn new(params: &MoeLmParams, config: AdamConfig) -> Result<Self> {
        Ok(Self {
            config,
            step: 0,
            m: MoeLmParams::zeros(params.config)?,
            v: MoeLmParams::zeros(params.config)?,
        })
    }

    /// One step on every tensor of `params` from `grads`.
    pub fn update(&mut self, params: &mut MoeLmParams, grads: &MoeLmParams) -> Result<()> {
        params.check()?;
        grads.check()?;
        if grads.config != params.config || self.m.config != params.config {
            return Err(crate::Error::InvalidArgument {
                what: "adam",
                reason: "parameters, gradients and moments belong to different configs".into(),
            });
        }
        let step = self.step + 1;
        let tensors = params
            .tensors
            .iter_mut()
            .zip(&mut self.m.tensors)
            .zip(&mut self.v.tensors)
            .zip(&grads.tensors);
        for (((p, m), v), g) in tensors {
            adam_reference(p, m, v, g, self.config, step)?;
        }
        self.step = step;
        Ok(())
    }

    /// Forward, backward and update on one batch; returns the forward (the loss before the step).
    pub fn train_step(
        &mut self,
        params: &mut MoeLmParams,
        contexts: &[u32],
        targets: &[u32],
    ) -> Result<Forward> {
        let (fwd, grads) = loss_and_grads(params, contexts, targets)?;
        self.update(params, &grads)?;
        Ok(fwd)
    }

    /// [`Self::train_step`] with the batch routed in `groups` groups.
    pub fn train_step_grouped(
        &mut self,
        params: &mut MoeLmParams,
        contexts: &[u32],
        targets: &[u32],
        groups: usize,
    ) -> Result<GroupedForward> {
        let (fwd, grads) = loss_and_grads_grouped(params, contexts, targets, groups)?;
        self.update(params, &grads)?;
        Ok(fwd)
    }
}
