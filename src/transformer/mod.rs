//! A decoder-only, byte-level Transformer whose FFNs are, every `moe_every`-th layer, the
//! Switch/GShard expert layer: its definition, parameters ([`params`]), a plain-Rust reference of
//! its forward ([`mod@reference`]) and its training step as one compiled program on the runtime's
//! mesh (`step_program`): the config is a [`StepModel`], trained by the one
//! [`crate::train::Trainer`].
//!
//! Files are safetensors ([`crate::train::Checkpoint`]); it trains on a corpus through
//! [`crate::train::train`]; [`generate`] samples text from it, on the host or on a device with a
//! key/value cache ([`decoder`]); [`compare`] (Switch vs T5) and
//! Branch-Train-Merge ([`crate::btm`], generic over the model) are the seeds' two comparisons on
//! it. The step runs in f32:
//! the attention kernel's f16 storage ([`crate::kernels::attention`], on devices with
//! `shader-f16`) is built and tested but not chosen here. The expert layer may be dropless (a
//! capacity factor of E/K, so every expert's slots hold its whole group: `--capacity-factor
//! dropless`).
//!
//! # The model
//!
//! Vocabulary `V = 256` (bytes). A batch is `B` sequences of `T` byte ids `x[b][t]` (row-major
//! `[B, T]`) and their targets `y[b][t]`, the byte after each. Rows below are the `B·T` tokens,
//! sequence-major. Every matrix multiplies from the right (`x · W`, `W: [in, out]`).
//!
//! ```text
//! h = E[x] + P[t]                                  [B·T, d]   E: [V, d], P: [T, d]
//! for each layer l in 0..L:
//!   a = LN(h; γ1, β1)                                         LayerNorm over d
//!   q, k, v = a·Wq, a·Wk, a·Wv                     [B·T, d]   head j: columns j·Dh..(j+1)·Dh
//!   o[b, t, j] = Σ_{s ≤ t} softmax_s(q[b,t,j]·k[b,s,j] / √Dh) · v[b,s,j]     (causal)
//!   h = h + o·Wo
//!   f = LN(h; γ2, β2)
//!   h = h + FFN_l(f)
//!       dense layer:  gelu(f·W1)·W2                 W1: [d, d_ff], W2: [d_ff, d]
//!       MoE layer:    the expert layer of moe::ffn_program with GELU experts of width
//!                     d_e (expert_hidden, else d_ff):
//!                     router f·Wr [d, E], top-K, capacity, gates as crate::moe documents;
//!                     each kept choice adds gate · gelu(f·W1[e])·W2[e]
//! z = LN(h; γf, βf)
//! logits = z · W_head  (W_head: [d, V]), or z · Eᵀ when the head is tied
//! loss = mean_t CE(logits[t], y[t]) + mean_g Σ_{MoE l} (aux_{g,l} + z_{g,l})
//! ```
//!
//! - `LN(x; γ, β) = (x − mean) / √(var + eps) · γ + β`, the biased variance over the row
//!   (PyTorch's `LayerNorm(d, eps)`); `eps` is in the config.
//! - GELU is the tanh form (`gelu(x, approximate="tanh")`).
//! - There are no biases apart from the LayerNorms' `β`.
//! - Layer `l` is an MoE layer when `moe_every > 0` and `l % moe_every == moe_every − 1` (with
//!   2, layers 1, 3, …: every other FFN, as in Switch and GShard); `moe_every = 0` is a dense
//!   Transformer.
//! - aux and z are the window model's ([`crate::moe`]): `aux = α·E·Σ_i f_i·P_i` over the
//!   group's tokens, `z = β·mean lse(router logits)²`.
//!
//! **Routing groups** (GShard): a batch is routed as `G` groups of `B/G` whole sequences; a
//! device of a `D`-device gang holds `G/D` groups and runs one per round, so `D` devices compute
//! what one device computes with the same `G`. The gang is one axis (groups and experts), or a
//! `{data, expert}` [`crate::Mesh`] (given to [`crate::train::Trainer::new`]) whose rows each hold
//! every expert.

pub mod compare;
pub mod config_file;
pub mod decoder;
pub mod generate;
pub mod params;
pub mod reference;
pub mod score;
mod step_program;

pub use params::{FfnIndex, LayerIndex};

/// The Transformer's parameters (gradients and Adam's moments are the same type).
pub type TransformerParams = crate::train::Params<TransformerConfig>;
/// The Transformer's files: weights, or a training checkpoint.
pub type TransformerCheckpoint = crate::train::Checkpoint<TransformerConfig>;
/// The Transformer's trainer.
pub type TransformerTrainer = crate::train::Trainer<TransformerConfig>;

use crate::data::{Corpus, Window};
use crate::kernels::attention::MAX_HEAD_DIM;
use crate::kernels::router::RouterConfig;
use crate::kernels::router::RouterLoss;
use crate::program::{HostData, Program};
use crate::train::step_program::Mode;
use crate::train::{Batcher, ExpertRouting, LegacyFormats, ParamSpec, StepModel, StepShape};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

pub use crate::moe::VOCAB;

/// Sizes and loss weights of the Transformer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TransformerConfig {
    /// `T`: bytes per sequence (and rows of the position table).
    pub context: usize,
    /// `d`: the residual stream width.
    pub model: usize,
    /// `H`: attention heads; `d / H` is the head width.
    pub heads: usize,
    /// `L`.
    pub layers: usize,
    /// `d_ff`: the hidden width of a dense FFN (and of each expert unless `expert_hidden` says).
    pub hidden: usize,
    /// Each expert's hidden width; 0: `hidden`. A top-2 MoE with experts half as wide as the
    /// dense FFNs touches as many parameters per token as the dense model.
    #[serde(default)]
    pub expert_hidden: usize,
    /// Every `moe_every`-th FFN is an expert layer; 0: none.
    pub moe_every: usize,
    /// `E`.
    pub experts: usize,
    /// `K`: 1 (Switch) or 2 (GShard).
    pub top_k: usize,
    /// Optional in a file (1.25): [`config_file`] lists the optional fields and their defaults.
    #[serde(default = "config_file::default_capacity_factor")]
    pub capacity_factor: f32,
    #[serde(default = "config_file::default_normalize_gates")]
    pub normalize_gates: bool,
    /// α of the load-balancing loss.
    #[serde(default = "config_file::default_aux_alpha")]
    pub aux_alpha: f32,
    /// β of the router z-loss.
    #[serde(default)]
    pub z_loss: f32,
    /// The output head is the token embedding, transposed.
    pub tied: bool,
    /// LayerNorm's epsilon.
    #[serde(default = "config_file::default_eps")]
    pub eps: f32,
    /// Seeds [`TransformerParams::init`] (and the order of training batches).
    #[serde(default)]
    pub seed: u64,
}

impl Default for TransformerConfig {
    fn default() -> Self {
        Self {
            context: 32,
            model: 64,
            heads: 4,
            layers: 2,
            hidden: 128,
            expert_hidden: 0,
            moe_every: 2,
            experts: 4,
            top_k: 1,
            capacity_factor: 1.25,
            normalize_gates: true,
            aux_alpha: 0.01,
            z_loss: 0.0,
            tied: false,
            eps: 1e-5,
            seed: 0,
        }
    }
}

impl TransformerConfig {
    /// `gangway train lm`'s default model: 2 layers of width 64, 4 heads, T = 64, FFNs of 256,
    /// the second an expert layer of 4 experts, top-1. The bench and the comparisons start here.
    pub fn small() -> Self {
        Self {
            context: 64,
            model: 64,
            heads: 4,
            layers: 2,
            hidden: 256,
            moe_every: 2,
            experts: 4,
            top_k: 1,
            ..Self::default()
        }
    }
}

/// The most layers a config may have.
pub const MAX_LAYERS: usize = 1024;

/// The most parameters a config may have: 2^30, 4 GiB of f32 (a training run holds four such
/// copies on the host).
pub const MAX_PARAMS: usize = 1 << 30;

impl TransformerConfig {
    /// Whether layer `l`'s FFN is an expert layer.
    pub fn is_moe(&self, l: usize) -> bool {
        self.moe_every > 0 && l % self.moe_every == self.moe_every - 1
    }

    /// The expert layers.
    pub fn moe_layers(&self) -> usize {
        (0..self.layers).filter(|&l| self.is_moe(l)).count()
    }

    /// Each expert's hidden width.
    pub fn expert_width(&self) -> usize {
        if self.expert_hidden == 0 {
            self.hidden
        } else {
            self.expert_hidden
        }
    }

    /// `d / H`.
    pub fn head_dim(&self) -> usize {
        self.model / self.heads.max(1)
    }

    /// The router of every expert layer.
    pub fn router(&self) -> RouterConfig {
        RouterConfig {
            experts: self.experts,
            k: self.top_k,
            capacity_factor: self.capacity_factor,
            normalize_gates: self.normalize_gates,
        }
    }

    /// The weights of the routers' auxiliary losses.
    pub fn router_loss(&self) -> RouterLoss {
        RouterLoss {
            alpha: self.aux_alpha,
            z_loss: self.z_loss,
        }
    }

    /// Errors on zero sizes, heads that do not divide `d` or are wider than the attention kernel
    /// holds, a bad router, non-finite weights, or tensors too large to index in u32.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Error::InvalidArgument {
            what: "transformer config",
            reason,
        };
        let sizes = [
            self.context,
            self.model,
            self.heads,
            self.layers,
            self.hidden,
        ];
        if sizes.contains(&0) {
            return Err(bad(format!(
                "context, model, heads, layers and hidden must be positive: {self:?}"
            )));
        }
        if !self.model.is_multiple_of(self.heads) || self.head_dim() > MAX_HEAD_DIM {
            return Err(bad(format!(
                "{} heads must divide the width {} into heads of at most {MAX_HEAD_DIM}",
                self.heads, self.model
            )));
        }
        let weights_ok = [self.aux_alpha, self.z_loss]
            .iter()
            .all(|w| w.is_finite() && *w >= 0.0);
        if !(weights_ok && self.eps.is_finite() && self.eps > 0.0) {
            return Err(bad(format!(
                "aux_alpha and z_loss must be finite and >= 0, eps finite and > 0: {self:?}"
            )));
        }
        if self.moe_layers() > 0 {
            self.router().validate()?;
        }
        let (t, d, ff, e) = (self.context, self.model, self.hidden, self.experts.max(1));
        let shapes = [
            [VOCAB, d, 1],
            [t, d, 1],
            [d, d, 1],
            [1, d, ff],
            [e, d, self.expert_width()],
            [d, VOCAB, 1],
        ];
        let fits = shapes.iter().all(|s| {
            s.iter()
                .try_fold(1usize, |a, &b| a.checked_mul(b))
                .is_some_and(|n| n <= u32::MAX as usize)
        });
        if !fits || self.layers > MAX_LAYERS {
            return Err(bad(format!(
                "sizes too large (each tensor under 2^32 values, at most {MAX_LAYERS} layers): {self:?}"
            )));
        }
        // Each tensor fits u32 and there are at most 11 per layer, so the sum cannot overflow.
        let params: usize = self
            .param_specs()
            .iter()
            .map(|s| s.shape.iter().product::<usize>())
            .sum();
        if params > MAX_PARAMS {
            return Err(bad(format!(
                "{params} parameters are more than the {MAX_PARAMS} a model may have (its f32 \
                 weights, gradients and Adam's moments are held on the host): {self:?}"
            )));
        }
        Ok(())
    }
}

/// A batch unit is one sequence of `T` token rows; each row's input is its byte.
impl StepModel for TransformerConfig {
    const NAME: &'static str = "transformer";

    fn validate(&self) -> Result<()> {
        TransformerConfig::validate(self)
    }

    fn with_capacity_factor(&self, factor: f32) -> Self {
        Self {
            capacity_factor: factor,
            ..*self
        }
    }

    fn param_specs(&self) -> Vec<ParamSpec> {
        TransformerConfig::param_specs(self)
    }

    fn init(&self) -> Result<Vec<Vec<f32>>> {
        Ok(self.init_tensors())
    }

    fn expert_tensors(&self) -> Vec<bool> {
        TransformerConfig::expert_tensors(self)
    }

    fn routing(&self) -> Option<ExpertRouting> {
        ExpertRouting::of(self.moe_layers(), self.router(), self.router_loss())
    }

    fn build_step(shape: &StepShape<Self>, mode: Mode) -> Result<Program> {
        step_program::build(shape, mode)
    }

    /// Every device's rows' positions in their sequences.
    fn leading_args(&self, devices: usize, rows: usize) -> Vec<HostData> {
        let t = self.context;
        let positions: Vec<u32> = (0..devices * rows).map(|i| (i % t) as u32).collect();
        vec![positions.into()]
    }
}

/// No older formats: the Transformer's first files were safetensors.
impl LegacyFormats for TransformerConfig {}

impl Batcher for TransformerConfig {
    fn unit_rows(&self) -> usize {
        self.context
    }

    fn row_inputs(&self) -> usize {
        1
    }

    fn window(&self) -> usize {
        self.context
    }

    /// A sequence is a window; its targets are the window shifted by one, then the byte after
    /// it.
    fn batch_from(&self, windows: Vec<u32>, next: Vec<u32>) -> (Vec<u32>, Vec<u32>) {
        let targets = generate::shifted_targets(&windows, &next, self.context);
        (windows, targets)
    }

    /// Sequences of `T` bytes, `T` apart: at most `n`, the first of every `⌊available / n⌋`-th
    /// (so with fewer than `2n` available, simply the first `n`). With every sequence picked,
    /// each validation byte after the first of each document is scored once, with as much
    /// context as its position in its sequence gives it, up to the last whole sequence
    /// (`transformer::score` scores the bytes after it for `eval lm`).
    fn eval_windows(&self, valid: &Corpus, n: usize) -> Result<(Vec<Window>, usize)> {
        let t = self.context;
        let all: Vec<(Vec<u32>, u32)> = valid.windows(t, t)?.collect();
        let (count, step) = (all.len(), (all.len() / n.max(1)).max(1));
        Ok((all.into_iter().step_by(step).take(n).collect(), count))
    }

    fn check_batch(&self, tokens: &[u32], targets: &[u32], groups: usize) -> Result<usize> {
        reference::check_batch(self, tokens, targets, groups)
    }
}
