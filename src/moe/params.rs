//! The model's parameters: a flat, ordered list of named tensors, and their initialisation.
//!
//! Order (also the initialisation order and the checkpoint order), `L` blocks:
//!
//! | index        | name             | shape            | fan-in |
//! |--------------|------------------|------------------|--------|
//! | 0            | `embed`          | `[256, d_e]`     | 1      |
//! | 1            | `w_in`           | `[C·d_e, d]`     | C·d_e  |
//! | 2 + 4l       | `blocks.l.dense` | `[d, d]`         | d      |
//! | 3 + 4l       | `blocks.l.router`| `[d, E]`         | d      |
//! | 4 + 4l       | `blocks.l.w1`    | `[E, d, d_ff]`   | d      |
//! | 5 + 4l       | `blocks.l.w2`    | `[E, d_ff, d]`   | d_ff   |
//! | 2 + 4L       | `w_out`          | `[d, 256]`       | d      |
//!
//! Experts are stacked (`w1[e]` is one `[d, d_ff]` matrix), the layout grouped matmul takes; a
//! device holding experts `a..b` holds rows `a..b` of the first axis. Every value is drawn from
//! `Rng::new(seed)` in this order as `symmetric() · sqrt(3 / fan_in)` (variance `1 / fan_in`);
//! the embedding uses scale 1 (uniform in `[-1, 1)`), so `x · W_in` starts with variance 1/3.
//!
//! The parameters are a [`crate::train::Params`] of this config ([`super::MoeLmParams`]), saved
//! as safetensors by [`crate::train::Checkpoint`]; files of the format before it load through
//! [`super::legacy`].

use super::{MoeLmConfig, VOCAB};
use crate::Rng;
use crate::train::ParamSpec;

/// Initialisation scale of `spec`: `sqrt(3 / fan_in)`, 1 for the embedding.
fn scale(spec: &ParamSpec) -> f32 {
    if spec.name == "embed" {
        1.0
    } else {
        (3.0 / spec.fan_in.max(1) as f32).sqrt()
    }
}

/// Indices of one block's tensors in the flat list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockIndex {
    pub dense: usize,
    pub router: usize,
    pub w1: usize,
    pub w2: usize,
}

/// Index of `embed`.
pub const EMBED: usize = 0;
/// Index of `w_in`.
pub const W_IN: usize = 1;

impl MoeLmConfig {
    /// Every parameter tensor in order.
    pub fn param_specs(&self) -> Vec<ParamSpec> {
        let (c, de, d, ff, e) = (
            self.context,
            self.embed,
            self.model,
            self.hidden,
            self.experts,
        );
        let mut specs = vec![
            ParamSpec::new("embed".into(), &[VOCAB, de], 1),
            ParamSpec::new(
                "w_in".into(),
                &[c.saturating_mul(de), d],
                c.saturating_mul(de),
            ),
        ];
        for l in 0..self.blocks {
            specs.push(ParamSpec::new(format!("blocks.{l}.dense"), &[d, d], d));
            specs.push(ParamSpec::new(format!("blocks.{l}.router"), &[d, e], d));
            specs.push(ParamSpec::new(format!("blocks.{l}.w1"), &[e, d, ff], d));
            specs.push(ParamSpec::new(format!("blocks.{l}.w2"), &[e, ff, d], ff));
        }
        specs.push(ParamSpec::new("w_out".into(), &[d, VOCAB], d));
        specs
    }

    /// Where block `l`'s tensors are.
    pub fn block_index(&self, l: usize) -> BlockIndex {
        let base = 2 + 4 * l;
        BlockIndex {
            dense: base,
            router: base + 1,
            w1: base + 2,
            w2: base + 3,
        }
    }

    /// Index of `w_out`.
    pub fn w_out_index(&self) -> usize {
        2 + 4 * self.blocks
    }

    /// Per parameter: whether it is an expert tensor (every block's `w1` and `w2`).
    pub fn expert_tensors(&self) -> Vec<bool> {
        let mut expert = vec![false; 3 + 4 * self.blocks];
        for l in 0..self.blocks {
            let ix = self.block_index(l);
            expert[ix.w1] = true;
            expert[ix.w2] = true;
        }
        expert
    }

    /// Draws every tensor from `Rng::new(seed)`, in order (see the module docs).
    pub(crate) fn init_tensors(&self) -> Vec<Vec<f32>> {
        let mut rng = Rng::new(self.seed);
        self.param_specs()
            .iter()
            .map(|s| {
                let scale = scale(s);
                (0..s.len()).map(|_| rng.symmetric() * scale).collect()
            })
            .collect()
    }
}
