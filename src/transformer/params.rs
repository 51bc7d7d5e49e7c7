//! The Transformer's parameters: a flat, ordered list of named tensors and their initialisation
//! (`init_tensors`, what its [`crate::train::StepModel::init`] draws; the values are a
//! [`super::TransformerParams`]).
//!
//! Order (also the initialisation order), `L` layers:
//!
//! | name                     | shape           | init                          |
//! |--------------------------|-----------------|-------------------------------|
//! | `tok_emb`                | `[256, d]`      | σ                             |
//! | `pos_emb`                | `[T, d]`        | σ                             |
//! | per layer `l`:           |                 |                               |
//! | `layers.l.ln1.weight`    | `[d]`           | 1                             |
//! | `layers.l.ln1.bias`      | `[d]`           | 0                             |
//! | `layers.l.attn.wq`, `wk`, `wv` | `[d, d]`  | σ                             |
//! | `layers.l.attn.wo`       | `[d, d]`        | σ / √(2L)                     |
//! | `layers.l.ln2.weight`    | `[d]`           | 1                             |
//! | `layers.l.ln2.bias`      | `[d]`           | 0                             |
//! | dense: `layers.l.ffn.w1` | `[d, d_ff]`     | σ                             |
//! | dense: `layers.l.ffn.w2` | `[d_ff, d]`     | σ / √(2L)                     |
//! | MoE: `layers.l.moe.router` | `[d, E]`      | σ                             |
//! | MoE: `layers.l.moe.w1`   | `[E, d, d_e]`   | σ                             |
//! | MoE: `layers.l.moe.w2`   | `[E, d_e, d]`   | σ / √(2L)                     |
//! | `ln_f.weight`, `ln_f.bias` | `[d]`         | 1, 0                          |
//! | `head` (untied only)     | `[d, 256]`      | σ                             |
//!
//! `d_e` is the experts' width ([`TransformerConfig::expert_width`]). `σ = 0.02` as in GPT-2,
//! with the residual projections scaled by `1/√(2L)`; a value with standard deviation `s` is
//! `Rng::new(seed).symmetric() · s·√3` (uniform), drawn in this order. Experts are stacked
//! (`w1[e]` is one `[d, d_ff]` matrix), the layout the grouped matmul takes; a device holding
//! experts `a..b` holds rows `a..b` of the first axis.

use super::{TransformerConfig, VOCAB};
use crate::Rng;
use crate::train::ParamSpec;

/// GPT-2's initialisation scale.
const SIGMA: f32 = 0.02;

/// Where one layer's FFN tensors are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnIndex {
    Dense { w1: usize, w2: usize },
    Moe { router: usize, w1: usize, w2: usize },
}

/// Indices of one layer's tensors in the flat list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerIndex {
    pub ln1: [usize; 2],
    pub wq: usize,
    pub wk: usize,
    pub wv: usize,
    pub wo: usize,
    pub ln2: [usize; 2],
    pub ffn: FfnIndex,
}

/// Index of `tok_emb`.
pub const TOK_EMB: usize = 0;
/// Index of `pos_emb`.
pub const POS_EMB: usize = 1;

/// How a tensor starts.
#[derive(Debug, Clone, Copy)]
enum Init {
    Uniform(f32),
    Ones,
    Zeros,
}

impl TransformerConfig {
    /// Every parameter tensor in order, with how it starts.
    fn layout(&self) -> Vec<(ParamSpec, Init)> {
        let (t, d, ff, e) = (self.context, self.model, self.hidden, self.experts);
        let residual = SIGMA / (2.0 * self.layers.max(1) as f32).sqrt();
        let spec = |name: String, shape: &[usize], init: Init| {
            let fan_in = if shape.len() > 1 {
                shape[shape.len() - 2]
            } else {
                1
            };
            let spec = ParamSpec {
                name,
                shape: shape.to_vec(),
                fan_in,
            };
            (spec, init)
        };
        let mut out = vec![
            spec("tok_emb".into(), &[VOCAB, d], Init::Uniform(SIGMA)),
            spec("pos_emb".into(), &[t, d], Init::Uniform(SIGMA)),
        ];
        for l in 0..self.layers {
            let p = |what: &str| format!("layers.{l}.{what}");
            out.push(spec(p("ln1.weight"), &[d], Init::Ones));
            out.push(spec(p("ln1.bias"), &[d], Init::Zeros));
            for w in ["wq", "wk", "wv"] {
                out.push(spec(p(&format!("attn.{w}")), &[d, d], Init::Uniform(SIGMA)));
            }
            out.push(spec(p("attn.wo"), &[d, d], Init::Uniform(residual)));
            out.push(spec(p("ln2.weight"), &[d], Init::Ones));
            out.push(spec(p("ln2.bias"), &[d], Init::Zeros));
            if self.is_moe(l) {
                out.push(spec(p("moe.router"), &[d, e], Init::Uniform(SIGMA)));
                let fe = self.expert_width();
                out.push(spec(p("moe.w1"), &[e, d, fe], Init::Uniform(SIGMA)));
                out.push(spec(p("moe.w2"), &[e, fe, d], Init::Uniform(residual)));
            } else {
                out.push(spec(p("ffn.w1"), &[d, ff], Init::Uniform(SIGMA)));
                out.push(spec(p("ffn.w2"), &[ff, d], Init::Uniform(residual)));
            }
        }
        out.push(spec("ln_f.weight".into(), &[d], Init::Ones));
        out.push(spec("ln_f.bias".into(), &[d], Init::Zeros));
        if !self.tied {
            out.push(spec("head".into(), &[d, VOCAB], Init::Uniform(SIGMA)));
        }
        out
    }

    /// Every parameter tensor in order.
    pub fn param_specs(&self) -> Vec<ParamSpec> {
        self.layout().into_iter().map(|(s, _)| s).collect()
    }

    /// Where layer `l`'s tensors are.
    pub fn layer_index(&self, l: usize) -> LayerIndex {
        let base = 2 + (0..l).map(|i| self.layer_tensors(i)).sum::<usize>();
        let ffn = if self.is_moe(l) {
            FfnIndex::Moe {
                router: base + 8,
                w1: base + 9,
                w2: base + 10,
            }
        } else {
            FfnIndex::Dense {
                w1: base + 8,
                w2: base + 9,
            }
        };
        LayerIndex {
            ln1: [base, base + 1],
            wq: base + 2,
            wk: base + 3,
            wv: base + 4,
            wo: base + 5,
            ln2: [base + 6, base + 7],
            ffn,
        }
    }

    fn layer_tensors(&self, l: usize) -> usize {
        if self.is_moe(l) { 11 } else { 10 }
    }

    /// Indices of `ln_f.weight` and `ln_f.bias`.
    pub fn final_norm_index(&self) -> [usize; 2] {
        let base = 2
            + (0..self.layers)
                .map(|l| self.layer_tensors(l))
                .sum::<usize>();
        [base, base + 1]
    }

    /// Index of the output head: `head`, or `tok_emb` when tied.
    pub fn head_index(&self) -> usize {
        if self.tied {
            TOK_EMB
        } else {
            self.final_norm_index()[1] + 1
        }
    }

    /// Per parameter: whether it is an expert tensor (split over the devices by its first axis).
    pub fn expert_tensors(&self) -> Vec<bool> {
        let mut out = vec![false; self.param_specs().len()];
        for l in 0..self.layers {
            if let FfnIndex::Moe { w1, w2, .. } = self.layer_index(l).ffn {
                out[w1] = true;
                out[w2] = true;
            }
        }
        out
    }

    /// Draws every tensor from `Rng::new(seed)`, in order (see the module docs).
    pub(crate) fn init_tensors(&self) -> Vec<Vec<f32>> {
        let mut rng = Rng::new(self.seed);
        self.layout()
            .iter()
            .map(|(s, init)| match *init {
                Init::Uniform(std) => {
                    let a = std * 3f32.sqrt();
                    (0..s.len()).map(|_| rng.symmetric() * a).collect()
                }
                Init::Ones => vec![1.0; s.len()],
                Init::Zeros => vec![0.0; s.len()],
            })
            .collect()
    }
}
