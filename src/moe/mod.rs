//! A small byte-level Mixture-of-Experts language model: its definition, parameters, and a
//! plain-Rust reference of training (forward, backward, Adam) that the GPU trainer must match.
//!
//! # The model
//!
//! Vocabulary `V = 256` (bytes). A batch is `T` examples: a context window `ctx[t][0..C]` of byte
//! ids (row-major `[T, C]`, as [`crate::data::Batches`] yields them) and the byte `y[t]` after it.
//!
//! ```text
//! x[t]  = concat_c E[ctx[t][c]]                    [T, C·d_e]   E: [V, d_e]
//! h     = relu(x · W_in)                           [T, d]       W_in: [C·d_e, d]
//! for each block l:
//!   h   = h + relu(h · W_d[l])                                   W_d: [d, d]
//!   r   = h · W_r[l];  p = softmax(r)              [T, E]       W_r: [d, E]
//!   route with the existing router (kernels::router): top-K by p, lowest index on ties,
//!   capacity = RouterConfig::capacity(T), Switch-priority positions, gates
//!   g = p[e_k], divided by p[e_1] + p[e_2] when K = 2 and normalize_gates (over both choices
//!   even when one is dropped, as shaders/router.wgsl does; K = 1 uses the raw probability)
//!   o_e(t) = relu(h[t] · W1[l][e]) · W2[l][e]                     W1: [E, d, d_ff], W2: [E, d_ff, d]
//!   h   = h + Σ_{kept k} g_k · o_{e_k}(t)          (dropped choices add nothing: residual only)
//! logits = h · W_out                               [T, V]       W_out: [d, V]
//! loss  = mean_t CE(logits[t], y[t]) + Σ_l aux_l + Σ_l z_l
//!   aux_l = aux_alpha · E · Σ_i f_i · P_i   (f_i: first-choice fraction, no gradient;
//!                                            P_i = mean_t p[t][i])
//!   z_l   = z_loss · mean_t logsumexp(r[t])²
//! ```
//!
//! There are no biases. Experts see their tokens in the dispatch layout `[E × capacity, d]`
//! (slot `e·capacity + position`); unfilled slots are zero rows and stay zero through the experts.
//!
//! **Routing groups** (GShard): a batch may be routed as `G` consecutive groups of `T / G` tokens,
//! each on its own (capacity `RouterConfig::capacity(T / G)`, its own `f_i`, `P_i`, aux and z);
//! the loss is then `mean_t CE + mean_g Σ_l aux_{g,l} + mean_g Σ_l z_{g,l}`. `G = 1` is the model
//! above ([`forward`]); [`forward_grouped`] / [`backward_grouped`] take `G`. Groups make a
//! data-parallel run on `D` devices (group per device) the same math as one device.
//!
//! Parameters, their order, names and initialisation are in [`params`]; the reference in
//! [`mod@reference`]; Adam in [`adam`]. The config is a [`StepModel`]: the one GPU trainer,
//! [`crate::train::Trainer`], trains it expert- and data-parallel over devices (its step program
//! is `step_program.rs`); a run of it on a corpus is [`crate::train::train`]. Files of the formats
//! before safetensors load through [`legacy`].

pub mod adam;
pub mod exchange;
pub mod ffn_program;
pub mod legacy;
pub mod params;
pub mod reference;
mod step_program;
#[cfg(test)]
mod tests;

pub use crate::train::ParamSpec;
pub use adam::Adam;
pub use reference::{
    BlockCache, Forward, GroupedForward, LossParts, RoutingStats, backward, backward_grouped,
    forward, forward_grouped, loss_and_grads, loss_and_grads_grouped,
};

/// The MoE LM's parameters (gradients and Adam's moments are the same type).
pub type MoeLmParams = crate::train::Params<MoeLmConfig>;
/// The MoE LM's trainer.
pub type MoeTrainer = crate::train::Trainer<MoeLmConfig>;

use crate::kernels::router::RouterConfig;
use crate::kernels::router::RouterLoss;
use crate::program::Program;
use crate::train::step_program::Mode;
use crate::train::{Batcher, Checkpoint, ExpertRouting, LegacyFormats, StepModel, StepShape};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// Bytes: the vocabulary of the model.
pub const VOCAB: usize = 256;

/// Sizes and loss weights of the model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MoeLmConfig {
    /// `C`: bytes of context per example.
    pub context: usize,
    /// `d_e`: embedding width per byte.
    pub embed: usize,
    /// `d`: the residual stream width.
    pub model: usize,
    /// `d_ff`: each expert's hidden width.
    pub hidden: usize,
    /// `E`.
    pub experts: usize,
    /// `K`: 1 (Switch) or 2 (GShard).
    pub top_k: usize,
    pub capacity_factor: f32,
    /// `L`: dense + MoE blocks.
    pub blocks: usize,
    /// α of the load-balancing loss.
    pub aux_alpha: f32,
    /// β of the router z-loss.
    pub z_loss: f32,
    pub normalize_gates: bool,
    /// Seeds [`MoeLmParams::init`].
    pub seed: u64,
}

impl Default for MoeLmConfig {
    fn default() -> Self {
        Self {
            context: 8,
            embed: 16,
            model: 64,
            hidden: 128,
            experts: 4,
            top_k: 2,
            capacity_factor: 1.25,
            blocks: 2,
            aux_alpha: 0.01,
            z_loss: 0.0,
            normalize_gates: true,
            seed: 0,
        }
    }
}

impl MoeLmConfig {
    /// The router of every block.
    pub fn router(&self) -> RouterConfig {
        RouterConfig {
            experts: self.experts,
            k: self.top_k,
            capacity_factor: self.capacity_factor,
            normalize_gates: self.normalize_gates,
        }
    }

    /// The weights of the router's auxiliary losses.
    pub fn router_loss(&self) -> RouterLoss {
        RouterLoss {
            alpha: self.aux_alpha,
            z_loss: self.z_loss,
        }
    }

    /// Errors on zero sizes, a bad router setting or non-finite / negative loss weights.
    pub fn validate(&self) -> Result<()> {
        let sizes = [self.context, self.embed, self.model, self.hidden];
        if sizes.contains(&0) {
            return Err(Error::InvalidArgument {
                what: "moe lm config",
                reason: format!("context, embed, model and hidden must be positive: {self:?}"),
            });
        }
        let weights_ok = [self.aux_alpha, self.z_loss]
            .iter()
            .all(|w| w.is_finite() && *w >= 0.0);
        if !weights_ok {
            return Err(Error::InvalidArgument {
                what: "moe lm config",
                reason: format!(
                    "aux_alpha and z_loss must be finite and >= 0, got {} and {}",
                    self.aux_alpha, self.z_loss
                ),
            });
        }
        self.router().validate()?;
        // Untrusted configs (checkpoints) must not overflow sizes or allocate without bound: every
        // tensor must be indexable in u32, as the kernels index it.
        let (c, de, d, ff, e) = (
            self.context,
            self.embed,
            self.model,
            self.hidden,
            self.experts,
        );
        let shapes = [
            [VOCAB, de, 1],
            [c, de, d],
            [d, d, 1],
            [d, e, 1],
            [e, d, ff],
            [d, VOCAB, 1],
        ];
        let fits = shapes.iter().all(|s| {
            s.iter()
                .try_fold(1usize, |a, &b| a.checked_mul(b))
                .is_some_and(|n| n <= u32::MAX as usize)
        });
        if !fits || self.blocks > MAX_BLOCKS {
            return Err(Error::InvalidArgument {
                what: "moe lm config",
                reason: format!(
                    "sizes too large (each tensor under 2^32 values, at most {MAX_BLOCKS} blocks): {self:?}"
                ),
            });
        }
        Ok(())
    }
}

/// The most blocks a config may have.
pub const MAX_BLOCKS: usize = 1024;

/// A token is one row: its context window (`C` byte ids) and the byte after it.
impl StepModel for MoeLmConfig {
    const NAME: &'static str = "moe-lm";

    fn validate(&self) -> Result<()> {
        MoeLmConfig::validate(self)
    }

    fn with_capacity_factor(&self, factor: f32) -> Self {
        Self {
            capacity_factor: factor,
            ..*self
        }
    }

    fn param_specs(&self) -> Vec<ParamSpec> {
        MoeLmConfig::param_specs(self)
    }

    fn init(&self) -> Result<Vec<Vec<f32>>> {
        Ok(self.init_tensors())
    }

    fn expert_tensors(&self) -> Vec<bool> {
        MoeLmConfig::expert_tensors(self)
    }

    fn routing(&self) -> Option<ExpertRouting> {
        ExpertRouting::of(self.blocks, self.router(), self.router_loss())
    }

    fn build_step(shape: &StepShape<Self>, mode: Mode) -> Result<Program> {
        step_program::build(shape, mode)
    }
}

impl LegacyFormats for MoeLmConfig {
    fn read_legacy(bytes: &[u8]) -> Option<Result<Checkpoint<Self>>> {
        legacy::read(bytes)
    }
}

impl Batcher for MoeLmConfig {
    fn unit_rows(&self) -> usize {
        1
    }

    fn window(&self) -> usize {
        self.context
    }

    fn row_inputs(&self) -> usize {
        self.context
    }

    fn check_batch(&self, contexts: &[u32], targets: &[u32], groups: usize) -> Result<usize> {
        crate::train::check_window_batch("moe lm batch", self.context, contexts, targets, groups)
    }
}
