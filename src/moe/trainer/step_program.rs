//! The MoE LM's training step as one compiled [`Program`]: every round's forward, the all-to-alls
//! there and back, the backward, the all-reduce of the replicated parameters' gradients and Adam,
//! as kernel, collective and in-place update nodes over the mesh's gang. The runtime runs it with
//! parallel asynchronous dispatch; the trainer only submits batches and reads back statistics.
//!
//! Expert parallelism is capacity-padded: each device sends every other device its
//! `[E/D · capacity, d]` block of slots, kept or not (empty slots are zero rows, which contribute
//! exact zeros to every sum), so every shape is static and the grouped matmuls run over fixed
//! groups of `D · capacity` rows per local expert ([`super::super::exchange`], shared with the
//! demo layer). D devices compute the bits one device computes with D groups: every matmul sums in
//! an order independent of M, and the expert weight gradient sums one slot block at a time.

use super::super::exchange::ExpertExchange;
use super::super::params::{EMBED, W_IN};
use super::super::{MoeLmConfig, VOCAB};
use crate::kernels::lm_train::AdamConfig;
use crate::kernels::matmul::MatmulVariant;
use crate::kernels::router::STAT_WORDS;
use crate::kernels::{
    Accumulate, Adam, Combine, CombineBackwardSlots, CrossEntropy, Dispatch, DispatchBackward,
    EmbedGather, EmbedGrad, ExpertWeightGrad, GateGrad, Kernel, Matmul, Pack, ReluBackward, Router,
    RouterBackward, RowLogsumexp, TensorType, Unpack,
};
use crate::program::{Program, ProgramBuilder, Value};
use crate::{DType, Result};
use std::sync::Arc;

/// What a compiled step computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Mode {
    /// Forward, backward, all-reduce and Adam; results: per round, the statistics pack.
    Train,
    /// Forward and backward, no update; result: every final gradient, packed.
    Grads,
    /// Forward only; results: per round, each token's loss.
    Forward,
    /// No step: every parameter's variable of this kind read back (result p: every shard of
    /// parameter p, one after another).
    Read(Kind),
}

/// The variables kept per parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    Param,
    /// Adam's first moment.
    M,
    /// Adam's second moment.
    V,
}

impl Kind {
    pub fn var(self, p: usize) -> String {
        match self {
            Kind::Param => param_var(p),
            Kind::M => m_var(p),
            Kind::V => v_var(p),
        }
    }
}

/// The shapes a step program is built for.
#[derive(Debug, Clone, Copy)]
pub(super) struct StepShape {
    pub config: MoeLmConfig,
    pub adam: AdamConfig,
    pub devices: usize,
    pub groups: usize,
    /// Tokens per routing group.
    pub group_tokens: usize,
}

impl StepShape {
    pub fn rounds(&self) -> usize {
        self.groups / self.devices
    }

    pub fn capacity(&self) -> usize {
        self.config.router().capacity(self.group_tokens)
    }

    /// Words of one round's statistics pack per device: row losses, then per block the
    /// router's expert stats and the row logsumexps of its logits.
    pub fn stats_words(&self) -> usize {
        let tg = self.group_tokens;
        tg + self.config.blocks * (self.config.experts * STAT_WORDS + tg)
    }
}

/// The variable names of parameter `p`, its first and its second moment.
/// The step program's one gang axis.
pub const EXPERT_AXIS: &str = "expert";

pub(super) fn param_var(p: usize) -> String {
    format!("param {p}")
}
pub(super) fn m_var(p: usize) -> String {
    format!("adam m {p}")
}
pub(super) fn v_var(p: usize) -> String {
    format!("adam v {p}")
}

/// Per-device shape of every parameter: expert tensors hold `E/D` experts.
pub(super) fn shard_shapes(cfg: &MoeLmConfig, expert: &[bool], devices: usize) -> Vec<Vec<usize>> {
    cfg.param_specs()
        .iter()
        .zip(expert)
        .map(|(spec, &is_expert)| {
            let mut shape = spec.shape.clone();
            if is_expert {
                shape[0] = cfg.experts / devices;
            }
            shape
        })
        .collect()
}

/// Every matmul of the step runs the vec4 kernels, forward (`A·B`) and backward (`A·Bᵀ`, `Aᵀ·B`),
/// or the tiled kernel where a shape's N or K is not a multiple of 4. Neither the choice nor any
/// kernel's summation order depends on M, and the expert weight gradient sums its slot blocks
/// one at a time, so D devices compute the bits 1 device computes over D groups.
const MATMUL: MatmulVariant = MatmulVariant::Vec4;

/// Saved activations of one block on every device.
struct BlockAct {
    input: Value,
    dense: Value,
    mid: Value,
    logits: Value,
    routing: [Value; 3],
    /// The experts' outputs back in the slot layout.
    expert_out: Value,
    /// The expert devices' token rows (expert-major) and hidden activations.
    tokens: Value,
    hidden: Value,
}

struct Builder<'a> {
    b: ProgramBuilder,
    shape: &'a StepShape,
    gang: Vec<usize>,
    params: Vec<Value>,
    /// Gradient accumulators: made by the first contribution, added to in place after.
    grads: Vec<Option<Value>>,
}

impl Builder<'_> {
    fn k(&mut self, name: &str, op: impl Kernel + 'static, inputs: &[Value]) -> Value {
        let [v] = self
            .b
            .kernel(name, &self.gang.clone(), Arc::new(op), inputs);
        v
    }

    fn mm(&mut self, name: &str, a: Value, b: Value, trans_a: bool, trans_b: bool) -> Value {
        let op = Matmul {
            trans_a,
            trans_b,
            offsets: None,
            variant: MATMUL,
        };
        self.k(name, op, &[a, b])
    }

    fn exchange(&self) -> ExpertExchange {
        ExpertExchange {
            devices: self.shape.devices,
            local_experts: self.shape.config.experts / self.shape.devices,
            capacity: self.shape.capacity(),
            row_words: self.shape.config.model,
        }
    }

    fn send_to_experts(&mut self, name: &str, slots: Value) -> Value {
        let gang = self.gang.clone();
        self.exchange().to_experts(&mut self.b, &gang, name, slots)
    }

    fn send_to_tokens(&mut self, name: &str, rows: Value) -> Value {
        let gang = self.gang.clone();
        self.exchange().to_tokens(&mut self.b, &gang, name, rows)
    }

    fn gmm(&mut self, name: &str, a: Value, b: Value, trans_b: bool) -> Value {
        let op = Matmul {
            trans_a: false,
            trans_b,
            offsets: Some(self.exchange().expert_offsets()),
            variant: MATMUL,
        };
        self.k(name, op, &[a, b])
    }

    fn relu(&mut self, name: &str, x: Value) -> Value {
        let gang = self.gang.clone();
        self.b.relu(name, &gang, x)
    }

    fn add(&mut self, name: &str, x: Value, z: Value) -> Value {
        let gang = self.gang.clone();
        self.b.add(name, &gang, x, z)
    }

    fn accumulate(&mut self, name: &str, acc: Value, x: Value) -> Value {
        self.k(name, Accumulate, &[acc, x])
    }

    fn grad(&mut self, p: usize, name: &str, g: Value) {
        let next = match self.grads[p] {
            None => g,
            Some(acc) => self.accumulate(name, acc, g),
        };
        self.grads[p] = Some(next);
    }

    /// The backward of `y = x · W[p]` given `dy`: adds `xᵀ · dy` to W[p]'s gradient and returns
    /// `dy · W[p]ᵀ`. Nodes are named `at("<what> weight grad")`, `at("accumulate <what> grad")`
    /// and `at("<what> input grad")`.
    fn linear_backward(
        &mut self,
        at: &dyn Fn(&str) -> String,
        what: &str,
        p: usize,
        x: Value,
        dy: Value,
    ) -> Value {
        let g = self.mm(&at(&format!("{what} weight grad")), x, dy, true, false);
        self.grad(p, &at(&format!("accumulate {what} grad")), g);
        let w = self.params[p];
        self.mm(&at(&format!("{what} input grad")), dy, w, false, true)
    }
}

/// Builds the step program for `shape` in `mode`. Arguments, per round: contexts (u32
/// `[group tokens, context]` per device), targets (u32 `[group tokens]`); then for training the
/// step's Adam bias corrections (f32 `[2]` per device).
pub(super) fn build(shape: &StepShape, expert: &[bool], mode: Mode) -> Result<Program> {
    let cfg = shape.config;
    let gang: Vec<usize> = (0..shape.devices).collect();
    let name = match mode {
        Mode::Train => "moe train step",
        Mode::Grads => "moe gradients",
        Mode::Forward => "moe forward",
        Mode::Read(_) => "moe read variables",
    };
    let mut x = Builder {
        b: ProgramBuilder::new(name),
        shape,
        gang: gang.clone(),
        params: Vec::new(),
        grads: vec![None; expert.len()],
    };
    // One axis carries both the token groups and the experts (GShard): device i routes group i
    // and holds experts [i·E/D, (i+1)·E/D).
    x.b.mesh(&gang, &[(EXPERT_AXIS, shape.devices)]);
    let shapes = shard_shapes(&cfg, expert, shape.devices);
    let kind = match mode {
        Mode::Read(kind) => kind,
        _ => Kind::Param,
    };
    for (p, s) in shapes.iter().enumerate() {
        let ty = TensorType::f32(s);
        let v = if expert[p] {
            let mut dims: Vec<&[&str]> = vec![&[]; s.len()];
            dims[0] = &[EXPERT_AXIS];
            let split = x.b.spec(&gang, &dims, &[]);
            x.b.sharded_variable(&kind.var(p), &gang, ty, split)
        } else {
            x.b.variable(&kind.var(p), &gang, ty)
        };
        x.params.push(v);
    }
    if let Mode::Read(_) = mode {
        for &v in &x.params.clone() {
            x.b.result(v);
        }
        return x.b.build();
    }
    let (tg, c) = (shape.group_tokens, cfg.context);
    let router = cfg.router();
    let w_out = cfg.w_out_index();
    let inputs: Vec<(Value, Value)> = (0..shape.rounds())
        .map(|_| {
            let ctx = x.b.typed_arg(&gang, TensorType::u32(&[tg, c]));
            let tgt = x.b.typed_arg(&gang, TensorType::u32(&[tg]));
            (ctx, tgt)
        })
        .collect();
    let bias = (mode == Mode::Train).then(|| {
        let every = x.b.spec(&gang, &[&[]], &[]);
        x.b.sharded_arg(&gang, TensorType::f32(&[2]), every)
    });
    for (r, &(ctx, tgt)) in inputs.iter().enumerate() {
        let at = |what: &str| format!("r{r} {what}");
        // ---- forward
        let emb = x.k(&at("embed"), EmbedGather, &[ctx, x.params[EMBED]]);
        let pre = x.mm(&at("stem matmul"), emb, x.params[W_IN], false, false);
        let stem = x.relu(&at("stem relu"), pre);
        let mut h = stem;
        let mut acts = Vec::with_capacity(cfg.blocks);
        for l in 0..cfg.blocks {
            let ix = cfg.block_index(l);
            let at = |what: &str| format!("r{r} b{l} {what}");
            let input = h;
            let pre = x.mm(&at("dense matmul"), h, x.params[ix.dense], false, false);
            let dense = x.relu(&at("dense relu"), pre);
            let mid = x.add(&at("residual"), h, dense);
            let logits = x.mm(&at("router matmul"), mid, x.params[ix.router], false, false);
            let [probs, routes, stats] =
                x.b.kernel(&at("router"), &gang, Arc::new(Router(router)), &[logits]);
            let routing = [probs, routes, stats];
            let slots = x.k(
                &at("dispatch"),
                Dispatch(router),
                &[mid, probs, routes, stats],
            );
            let tokens = x.send_to_experts(&at("all-to-all forward"), slots);
            let pre = x.gmm(&at("expert w1"), tokens, x.params[ix.w1], false);
            let hidden = x.relu(&at("expert relu"), pre);
            let out = x.gmm(&at("expert w2"), hidden, x.params[ix.w2], false);
            let expert_out = x.send_to_tokens(&at("all-to-all reverse"), out);
            let combined = x.k(
                &at("combine"),
                Combine(router),
                &[expert_out, probs, routes, stats],
            );
            h = x.add(&at("combine residual"), mid, combined);
            acts.push(BlockAct {
                input,
                dense,
                mid,
                logits,
                routing,
                expert_out,
                tokens,
                hidden,
            });
        }
        let last = h;
        let logits = x.mm(&at("output matmul"), last, x.params[w_out], false, false);
        let [row_loss, d_logits] = x.b.kernel(
            &at("cross-entropy"),
            &gang,
            Arc::new(CrossEntropy),
            &[logits, tgt],
        );
        match mode {
            Mode::Forward => {
                x.b.result(row_loss);
                continue;
            }
            Mode::Train => {
                let mut pack = vec![row_loss];
                for (l, a) in acts.iter().enumerate() {
                    let lse = x.k(&format!("r{r} b{l} logsumexp"), RowLogsumexp, &[a.logits]);
                    pack.extend([a.routing[2], lse]);
                }
                let stats = x.k(&at("stats"), Pack { dtype: DType::U32 }, &pack);
                x.b.result(stats);
            }
            Mode::Grads | Mode::Read(_) => {}
        }
        // ---- backward
        let mut dh = x.linear_backward(&at, "output", w_out, last, d_logits);
        for l in (0..cfg.blocks).rev() {
            let ix = cfg.block_index(l);
            let at = |what: &str| format!("r{r} b{l} {what}");
            let a = &acts[l];
            let [probs, routes, stats] = a.routing;
            let (input, dense, mid, logits, expert_out, tokens, hidden) = (
                a.input,
                a.dense,
                a.mid,
                a.logits,
                a.expert_out,
                a.tokens,
                a.hidden,
            );
            let d_gate = x.k(
                &at("gate grad"),
                GateGrad(router),
                &[dh, expert_out, probs, routes, stats],
            );
            let d_out = x.k(
                &at("combine backward"),
                CombineBackwardSlots(router),
                &[dh, probs, routes, stats],
            );
            let d_o = x.send_to_experts(&at("all-to-all backward"), d_out);
            let offsets = x.exchange().expert_offsets();
            let gw2 = x.k(
                &at("expert w2 grad"),
                ExpertWeightGrad {
                    offsets: offsets.clone(),
                    block: x.shape.capacity(),
                },
                &[hidden, d_o],
            );
            x.grad(ix.w2, &at("accumulate w2 grad"), gw2);
            let d_h = x.gmm(&at("expert w2 input grad"), d_o, x.params[ix.w2], true);
            let d_hidden = x.k(&at("expert relu backward"), ReluBackward, &[d_h, hidden]);
            let gw1 = x.k(
                &at("expert w1 grad"),
                ExpertWeightGrad {
                    offsets,
                    block: x.shape.capacity(),
                },
                &[tokens, d_hidden],
            );
            x.grad(ix.w1, &at("accumulate w1 grad"), gw1);
            let d_tok = x.gmm(&at("expert w1 input grad"), d_hidden, x.params[ix.w1], true);
            let d_slots = x.send_to_tokens(&at("all-to-all backward reverse"), d_tok);
            let d_disp = x.k(
                &at("dispatch backward"),
                DispatchBackward(router),
                &[d_slots, probs, routes, stats],
            );
            let mut d_mid = x.accumulate(&at("accumulate dispatch grad"), dh, d_disp);
            let d_r = x.k(
                &at("router backward"),
                RouterBackward(router, cfg.router_loss()),
                &[logits, d_gate, probs, routes, stats],
            );
            let back = x.linear_backward(&at, "router", ix.router, mid, d_r);
            d_mid = x.accumulate(&at("accumulate router input grad"), d_mid, back);
            let d_pre = x.k(&at("dense relu backward"), ReluBackward, &[d_mid, dense]);
            let back = x.linear_backward(&at, "dense", ix.dense, input, d_pre);
            dh = x.accumulate(&at("accumulate dense input grad"), d_mid, back);
        }
        let d_pre = x.k(&at("stem relu backward"), ReluBackward, &[dh, stem]);
        let d_x = x.linear_backward(&at, "stem", W_IN, emb, d_pre);
        let ge = x.k(&at("embed grad"), EmbedGrad { vocab: VOCAB }, &[ctx, d_x]);
        x.grad(EMBED, &at("accumulate embed grad"), ge);
    }
    if mode == Mode::Forward {
        return x.b.build();
    }
    // ---- the replicated parameters' gradients, summed over devices in device order
    let mut grads: Vec<Value> = x
        .grads
        .iter()
        .map(|g| {
            g.ok_or_else(|| crate::Error::InvalidArgument {
                what: "moe step program",
                reason: "a parameter gets no gradient (no rounds)".into(),
            })
        })
        .collect::<Result<_>>()?;
    if shape.devices > 1 {
        let dense: Vec<usize> = (0..grads.len()).filter(|&p| !expert[p]).collect();
        let types: Vec<TensorType> = dense.iter().map(|&p| x.b.ty(grads[p])).collect();
        let parts: Vec<Value> = dense.iter().map(|&p| grads[p]).collect();
        let packed = x.k("pack dense grads", Pack { dtype: DType::F32 }, &parts);
        let summed = x.b.all_reduce("all-reduce", packed);
        let unpacked = x.b.kernels(
            "unpack dense grads",
            &gang,
            Arc::new(Unpack { types }),
            &[summed],
        );
        for (&p, v) in dense.iter().zip(unpacked) {
            grads[p] = v;
        }
    }
    if shape.groups > 1 {
        let s = 1.0 / shape.groups as f32;
        for g in &mut grads {
            *g = x.b.affine("scale grad", &gang, *g, s, 0.0);
        }
    }
    match mode {
        Mode::Grads => {
            let packed = x.k("pack grads", Pack { dtype: DType::F32 }, &grads);
            x.b.result(packed);
        }
        Mode::Train => {
            let Some(bias) = bias else {
                return x.b.build();
            };
            for (p, &g) in grads.iter().enumerate() {
                // The moments lie as their parameter does.
                let (ty, laid) = (TensorType::f32(&shapes[p]), x.b.sharding(x.params[p]));
                let m =
                    x.b.sharded_variable(&m_var(p), &gang, ty.clone(), laid.clone());
                let v = x.b.sharded_variable(&v_var(p), &gang, ty, laid);
                let [_, _, _] = x.b.kernel(
                    &format!("adam {}", cfg.param_specs()[p].name),
                    &gang,
                    Arc::new(Adam(shape.adam)),
                    &[x.params[p], m, v, g, bias],
                );
            }
        }
        Mode::Forward | Mode::Read(_) => {}
    }
    x.b.build()
}
