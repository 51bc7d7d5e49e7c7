//! What a training step, and a forward pass, report.

use crate::kernels::router::RoutingStats;
use crate::trace::Event;

/// What one [`super::Trainer::step`] did (losses are those of the parameters before the update).
#[derive(Debug, Clone, PartialEq)]
pub struct StepStats {
    /// The step number, from 1.
    pub step: u32,
    /// `ce + aux + z`.
    pub loss: f64,
    /// Mean cross-entropy over the batch's token rows (nats).
    pub ce: f64,
    /// Load-balancing loss: summed over expert layers, averaged over routing groups.
    pub aux: f64,
    /// Router z-loss: summed over expert layers, averaged over routing groups.
    pub z: f64,
    /// Kept (token, choice) pairs per expert, summed over expert layers and groups (empty for a
    /// dense model).
    pub tokens_per_expert: Vec<usize>,
    /// Dropped choices over all `rows · K · expert layers` choices (0 for a dense model).
    pub dropped_fraction: f64,
    /// Per expert layer, as [`crate::moe::reference::forward_grouped`] reports it for the MoE LM.
    pub blocks: Vec<RoutingStats>,
    /// Wall time of the step.
    pub seconds: f64,
    /// The step's trace events (kernels, transfers, waits, host encoding), when the trainer
    /// traces its steps ([`super::Trainer::set_trace`]); times count from the process's trace
    /// epoch.
    pub trace: Vec<Event>,
}

/// What one forward pass of a batch gave ([`super::Trainer::forward`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardPass {
    /// Every token row's cross-entropy (nats), in batch order.
    pub nats: Vec<f64>,
    /// Router choices dropped by capacity, of `choices` (`rows · K · expert layers`; 0 for a
    /// dense model).
    pub dropped: usize,
    pub choices: usize,
}

impl StepStats {
    /// The spread of [`Self::tokens_per_expert`]: its standard deviation over its mean
    /// (coefficient of variation; 0 for an even split, and for no tokens at all). The seeds'
    /// warning about token imbalance in one number.
    pub fn expert_cv(&self) -> f64 {
        coefficient_of_variation(&self.tokens_per_expert)
    }
}

/// Standard deviation over mean of `counts` (population form); 0 when the mean is 0.
pub fn coefficient_of_variation(counts: &[usize]) -> f64 {
    let n = counts.len().max(1) as f64;
    let mean = counts.iter().sum::<usize>() as f64 / n;
    if mean == 0.0 {
        return 0.0;
    }
    let var = counts
        .iter()
        .map(|&c| (c as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    var.sqrt() / mean
}
