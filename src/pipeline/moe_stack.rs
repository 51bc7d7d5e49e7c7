//! The MoE model a pipeline trains: a stack of residual Switch/GShard expert layers
//! (`h ← h + MoE(h)`, [`crate::moe::ffn_program::MoeFfn`]) with a mean-squared-error loss, where
//! every pipeline stage is a gang of devices: the stage's experts are split over its gang (expert
//! parallelism inside a stage) and each microbatch's rows too, one routing group per device. So
//! every layer's forward and backward carry an all-to-all over the stage's gang, which is what
//! DualPipe's F&B pairs hide: with overlap on ([`super::execute`]'s `overlap`), a device whose forward waits
//! for its all-to-all runs the paired backward meanwhile.
//!
//! The router and the experts are those of the MoE trainers (the same nodes), so a pipelined
//! step of any schedule takes the step of the same layers at one stage on one gang (the MoE
//! nodes' sums do not depend on how microbatches are interleaved; only the gradients' sums over
//! microbatches are added in another order). The router's parameter is replicated over a gang;
//! its per-device gradients are summed over the gang before the update.

use super::measure::RunReport;
use super::schedule::Schedule;
use super::stage_model::Microbatch;
use super::stage_model::{Grads, Param, StageModel};
use super::{Fold, ScheduleKind};
use crate::Mesh;
use crate::kernels::router::{RouterConfig, RouterLoss};
use crate::moe::ffn_program::{
    BackwardCall, ExpertActivation, MoeFfn, MoeFfnDeferred, MoeFfnSaved, MoeFfnWeights,
};
use crate::program::Gang;
use crate::program::{ProgramBuilder, Value};
use crate::sched::Client;
use crate::{Error, Result, Rng};

/// The stack's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeStackConfig {
    pub layers: usize,
    /// `d`: the residual stream's width.
    pub model: usize,
    /// `d_ff`: each expert's hidden width.
    pub hidden: usize,
    pub experts: usize,
    /// 1 (Switch) or 2 (GShard).
    pub top_k: usize,
    pub capacity_factor: f32,
    /// Devices per stage: the experts and each microbatch's rows are split over them.
    pub gang: usize,
    /// Rows per microbatch.
    pub rows: usize,
    pub seed: u64,
}

/// A stack of residual MoE layers and its weights (see the module docs).
#[derive(Debug, Clone)]
pub struct MoeStack {
    /// Checked by [`MoeStack::new`]: the layer nodes are built for it, so it cannot change.
    config: MoeStackConfig,
    weights: Vec<[Vec<f32>; 3]>,
    ffn: MoeFfn,
}

impl MoeStack {
    /// Weights uniform in `±1/√fan_in`, drawn from `config.seed`.
    pub fn new(config: MoeStackConfig) -> Result<Self> {
        let c = &config;
        let bad = |reason: String| Error::InvalidArgument {
            what: "MoE stack",
            reason,
        };
        if [c.layers, c.model, c.hidden, c.experts, c.gang, c.rows].contains(&0) {
            return Err(bad(format!("every size must be positive: {c:?}")));
        }
        if !(1..=2).contains(&c.top_k) || c.top_k > c.experts {
            return Err(bad(format!(
                "top-k must be 1 or 2 and at most the {} experts, got {}",
                c.experts, c.top_k
            )));
        }
        if !c.experts.is_multiple_of(c.gang) || !c.rows.is_multiple_of(c.gang) {
            return Err(bad(format!(
                "{} experts and {} rows per microbatch must split evenly over a stage's {} \
                 devices",
                c.experts, c.rows, c.gang
            )));
        }
        if !(c.capacity_factor.is_finite() && c.capacity_factor > 0.0) {
            return Err(bad(format!(
                "the capacity factor must be positive, got {}",
                c.capacity_factor
            )));
        }
        let mut rng = Rng::new(c.seed);
        let mut uniform = |len: usize, fan_in: usize| -> Vec<f32> {
            let scale = 1.0 / (fan_in as f32).sqrt();
            (0..len).map(|_| rng.symmetric() * scale).collect()
        };
        let (d, f, e) = (c.model, c.hidden, c.experts);
        let weights = (0..c.layers)
            .map(|_| {
                [
                    uniform(d * e, d),
                    uniform(e * d * f, d),
                    uniform(e * f * d, f),
                ]
            })
            .collect();
        let router = RouterConfig {
            experts: e,
            k: c.top_k,
            capacity_factor: c.capacity_factor,
            normalize_gates: c.top_k == 2,
        };
        let loss = RouterLoss {
            alpha: 0.01,
            z_loss: 0.001,
        };
        let ffn = MoeFfn::new(
            router,
            loss,
            (c.gang, None),
            c.rows / c.gang,
            d,
            ExpertActivation::Relu,
        );
        Ok(Self {
            config,
            weights,
            ffn,
        })
    }

    pub fn config(&self) -> &MoeStackConfig {
        &self.config
    }

    /// Per layer: the router `[d, E]`, `W1 [E, d, d_ff]` and `W2 [E, d_ff, d]`.
    pub fn weights(&self) -> &[[Vec<f32>; 3]] {
        &self.weights
    }

    /// `microbatches` microbatches of random inputs and targets, drawn from `seed`.
    pub fn batch(&self, microbatches: usize, seed: u64) -> Vec<Microbatch> {
        let mut rng = Rng::new(seed);
        let len = self.config.rows * self.config.model;
        (0..microbatches)
            .map(|_| Microbatch {
                input: rng.vec(len),
                target: rng.vec(len),
            })
            .collect()
    }

    /// The same step at one stage on the first gang: what every pipelined step must equal.
    pub fn reference_step(
        &self,
        client: &Client,
        mesh: &Mesh,
        batch: &[Microbatch],
        lr: f32,
    ) -> Result<RunReport> {
        let schedule = Schedule::new(ScheduleKind::GPipe, 1, batch.len(), 1)?;
        super::execute(
            client,
            &schedule,
            mesh,
            self,
            batch,
            lr,
            Fold::OnePerStage,
            false,
        )
    }

    fn weights_of(w: &[Value]) -> MoeFfnWeights {
        MoeFfnWeights {
            router: w[0],
            w1: w[1],
            w2: w[2],
        }
    }
}

impl StageModel for MoeStack {
    type Saved = MoeFfnSaved;
    type Kept = MoeFfnDeferred;

    fn layers(&self) -> usize {
        self.config.layers
    }

    fn gang(&self) -> usize {
        self.config.gang
    }

    fn width(&self, _: usize) -> usize {
        self.config.model
    }

    fn rows(&self, mb: &Microbatch) -> Result<usize> {
        let (rows, d) = (self.config.rows, self.config.model);
        for (what, got) in [
            ("MoE microbatch input", mb.input.len()),
            ("MoE microbatch target", mb.target.len()),
        ] {
            if got != rows * d {
                return Err(Error::ShapeMismatch {
                    what,
                    expected: format!("{rows} rows × {d} = {} values", rows * d),
                    got: format!("{got} values"),
                });
            }
        }
        Ok(rows)
    }

    fn params(&self, _: usize) -> Vec<Param> {
        let (d, f, e) = (self.config.model, self.config.hidden, self.config.experts);
        vec![
            Param {
                name: "router",
                shape: vec![d, e],
                experts: false,
            },
            Param {
                name: "w1",
                shape: vec![e, d, f],
                experts: true,
            },
            Param {
                name: "w2",
                shape: vec![e, f, d],
                experts: true,
            },
        ]
    }

    fn initial(&self, layer: usize) -> Vec<&[f32]> {
        self.weights[layer].iter().map(Vec::as_slice).collect()
    }

    fn forward(
        &self,
        b: &mut ProgramBuilder,
        gang: &Gang,
        layer: usize,
        w: &[Value],
        h: Value,
    ) -> (Value, MoeFfnSaved) {
        let at = |what: &str| format!("L{layer} {what}");
        // The residual connection is the combine's, in its launch.
        self.ffn
            .forward(b, gang, &at, (h, Some(h)), &Self::weights_of(w))
    }

    fn backward(
        &self,
        b: &mut ProgramBuilder,
        gang: &Gang,
        layer: usize,
        w: &[Value],
        saved: MoeFfnSaved,
        dy: Value,
        split: bool,
    ) -> (Option<Value>, Grads<MoeFfnDeferred>) {
        let at = |what: &str| format!("L{layer} {what}");
        let w = Self::weights_of(w);
        // The residual's gradient is dy itself: the layer's input gradient adds to it.
        let cx = BackwardCall {
            gang,
            at: &at,
            saved: &saved,
            weights: &w,
            dy,
            residual: Some(dy),
            relu_below: None,
        };
        if split {
            let (dx, kept) = self.ffn.backward_input(b, &cx);
            (Some(dx), Grads::Later(kept))
        } else {
            let (dx, g) = self.ffn.backward(b, &cx);
            (Some(dx), Grads::Now(vec![g.router, g.w1, g.w2]))
        }
    }

    fn weight_grads(
        &self,
        b: &mut ProgramBuilder,
        gang: &Gang,
        layer: usize,
        kept: MoeFfnDeferred,
    ) -> Vec<Value> {
        let at = |what: &str| format!("L{layer} {what}");
        let g = self.ffn.weight_grads(b, gang, &at, &kept);
        vec![g.router, g.w1, g.w2]
    }
}
