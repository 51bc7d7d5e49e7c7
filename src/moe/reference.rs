//! The plain-Rust reference of the model (see [`super`]): forward with every activation kept, and
//! backward to a gradient for every parameter. Built only from the kernel references (matmul,
//! router, dispatch/combine, relu, add and the training kernels), so each step of a GPU
//! trainer can be compared with the step here that mirrors it.

use super::params::{EMBED, W_IN};
use super::{MoeLmConfig, MoeLmParams, VOCAB};
use crate::kernels::elementwise::{self, ElementwiseOp};
use crate::kernels::matmul::{self, MatmulShape};
use crate::kernels::moe_dispatch::{self, reference_combine, reference_dispatch};
use crate::kernels::optim::accumulate_reference;
pub use crate::kernels::router::RoutingStats;
use crate::kernels::router::{self, ReferenceRouting, load_balancing_loss};
use crate::kernels::{embedding, expert_grad, loss};
use crate::{DType, Error, Result};

/// The loss and its parts, summed over blocks (f64: sums of f32 terms).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossParts {
    /// `mean_t CE(logits[t], y[t])`.
    pub cross_entropy: f64,
    /// `Σ_l aux_alpha · E · Σ_i f_i · P_i`.
    pub aux: f64,
    /// `Σ_l z_loss · mean_t logsumexp(r[t])²`.
    pub z: f64,
    pub total: f64,
}

/// One block's activations (row-major, `T` tokens).
#[derive(Debug, Clone, PartialEq)]
pub struct BlockCache {
    /// `h0`, the block input `[T, d]`.
    pub input: Vec<f32>,
    /// `u = relu(h0 · W_d)` `[T, d]`.
    pub dense: Vec<f32>,
    /// `h1 = h0 + u` `[T, d]`: the router's and experts' input.
    pub mid: Vec<f32>,
    /// `r = h1 · W_r` `[T, E]`.
    pub router_logits: Vec<f32>,
    /// `logsumexp(r[t])` `[T]`.
    pub lse: Vec<f32>,
    /// Probabilities, routes, capacity and stats, as the router reference computes them.
    pub routing: ReferenceRouting,
    /// `dispatch(h1)` `[E·capacity, d]`.
    pub slots: Vec<f32>,
    /// `relu(slots · W1[e])` `[E·capacity, d_ff]`.
    pub expert_hidden: Vec<f32>,
    /// `expert_hidden · W2[e]` `[E·capacity, d]`.
    pub expert_out: Vec<f32>,
    /// `h2 = h1 + combine(expert_out)` `[T, d]`.
    pub output: Vec<f32>,
}

/// Everything the forward computed; [`backward`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Forward {
    pub tokens: usize,
    pub loss: LossParts,
    pub stats: Vec<RoutingStats>,
    /// `x` `[T, C·d_e]`.
    pub embedded: Vec<f32>,
    /// `relu(x · W_in)` `[T, d]`.
    pub stem: Vec<f32>,
    pub blocks: Vec<BlockCache>,
    /// `[T, V]`.
    pub logits: Vec<f32>,
    /// Per-example cross-entropy `[T]`.
    pub row_loss: Vec<f32>,
    /// `(softmax − onehot) / T` `[T, V]`.
    pub d_logits: Vec<f32>,
}

/// `op(A) · op(B)`, `[m, n]`, by the matmul reference.
fn mm(a: &[f32], b: &[f32], [m, n, k]: [usize; 3], trans_a: bool, trans_b: bool) -> Vec<f32> {
    let shape = MatmulShape {
        trans_a,
        trans_b,
        ..MatmulShape::plain(m, n, k, DType::F32)
    };
    matmul::reference(a, b, &[0, m as u32], &shape)
}

/// Per-expert `A_e · op(B[e])` over `experts` row blocks of `rows` rows: the grouped matmul.
fn grouped(
    a: &[f32],
    b: &[f32],
    experts: usize,
    rows: usize,
    [n, k]: [usize; 2],
    trans_b: bool,
) -> Vec<f32> {
    let offsets: Vec<u32> = (0..=experts).map(|e| (e * rows) as u32).collect();
    let shape = MatmulShape {
        groups: experts,
        max_group_rows: rows,
        trans_b,
        ..MatmulShape::plain(experts * rows, n, k, DType::F32)
    };
    matmul::reference(a, b, &offsets, &shape)
}

fn relu(x: &[f32]) -> Vec<f32> {
    elementwise::reference(ElementwiseOp::Relu, x, None)
}

/// The gradient `grad` of a relu's output back through it, `act` its output.
fn relu_backward_reference(grad: &[f32], act: &[f32]) -> Vec<f32> {
    elementwise::reference(ElementwiseOp::ReluBackward, act, Some(grad))
}

fn add(x: &[f32], z: &[f32]) -> Vec<f32> {
    elementwise::reference(ElementwiseOp::Add, x, Some(z))
}

/// Checks the batch against the config: `contexts` `[T, C]`, `targets` `[T]`, `T ≥ 1`.
fn check_batch(config: &MoeLmConfig, contexts: &[u32], targets: &[u32]) -> Result<usize> {
    let t = targets.len();
    if t == 0 || contexts.len() != t * config.context {
        return Err(Error::ShapeMismatch {
            what: "moe lm batch",
            expected: format!("T >= 1 targets and T × {} context bytes", config.context),
            got: format!("{t} targets, {} context bytes", contexts.len()),
        });
    }
    Ok(t)
}

/// Runs the model on a batch (`contexts` `[T, C]` byte ids, `targets` `[T]`).
pub fn forward(params: &MoeLmParams, contexts: &[u32], targets: &[u32]) -> Result<Forward> {
    params.check()?;
    let cfg = params.config;
    let t = check_batch(&cfg, contexts, targets)?;
    let (c, de, d, ff, e) = (cfg.context, cfg.embed, cfg.model, cfg.hidden, cfg.experts);
    let router_cfg = cfg.router();

    let embedded = embedding::embed_gather_reference(contexts, params.get(EMBED), de)?;
    let stem = relu(&mm(
        &embedded,
        params.get(W_IN),
        [t, d, c * de],
        false,
        false,
    ));
    let mut h = stem.clone();
    let mut blocks = Vec::with_capacity(cfg.blocks);
    let mut stats = Vec::with_capacity(cfg.blocks);
    let (mut aux_total, mut z_total) = (0.0f64, 0.0f64);
    for l in 0..cfg.blocks {
        let ix = cfg.block_index(l);
        let input = std::mem::take(&mut h);
        let dense = relu(&mm(&input, params.get(ix.dense), [t, d, d], false, false));
        let mid = add(&input, &dense);
        let router_logits = mm(&mid, params.get(ix.router), [t, e, d], false, false);
        let routing = router::reference(&router_logits, t, router_cfg)?;
        let cap = routing.capacity;
        let lse = loss::row_logsumexp_reference(&router_logits, e);
        let slots = reference_dispatch(&mid, &routing.routes, cfg.top_k, e, cap, d);
        let expert_hidden = relu(&grouped(&slots, params.get(ix.w1), e, cap, [ff, d], false));
        let expert_out = grouped(&expert_hidden, params.get(ix.w2), e, cap, [d, ff], false);
        let combined = reference_combine(&expert_out, &routing.routes, t, cfg.top_k, cap, d);
        let output = add(&mid, &combined);

        let aux_loss = load_balancing_loss(&routing.stats, cfg.aux_alpha);
        let z = f64::from(cfg.z_loss) * lse.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>()
            / t as f64;
        aux_total += f64::from(aux_loss);
        z_total += z;
        stats.push(RoutingStats {
            capacity: cap,
            tokens_per_expert: routing.stats.iter().map(|s| s.kept as usize).collect(),
            dropped: routing.dropped(),
            dropped_fraction: routing.dropped() as f64 / (t * cfg.top_k) as f64,
            aux_loss,
            z_loss: z as f32,
        });
        h = output.clone();
        blocks.push(BlockCache {
            input,
            dense,
            mid,
            router_logits,
            lse,
            routing,
            slots,
            expert_hidden,
            expert_out,
            output,
        });
    }
    let logits = mm(
        &h,
        params.get(cfg.w_out_index()),
        [t, VOCAB, d],
        false,
        false,
    );
    let (row_loss, d_logits) = loss::cross_entropy_reference(&logits, targets, VOCAB)?;
    let cross_entropy = row_loss.iter().map(|&v| f64::from(v)).sum::<f64>() / t as f64;
    Ok(Forward {
        tokens: t,
        loss: LossParts {
            cross_entropy,
            aux: aux_total,
            z: z_total,
            total: cross_entropy + aux_total + z_total,
        },
        stats,
        embedded,
        stem,
        blocks,
        logits,
        row_loss,
        d_logits,
    })
}

/// The gradient of `forward.loss.total` with respect to every parameter, in parameter order.
pub fn backward(params: &MoeLmParams, contexts: &[u32], forward: &Forward) -> Result<MoeLmParams> {
    params.check()?;
    let cfg = params.config;
    let t = forward.tokens;
    if contexts.len() != t * cfg.context || forward.blocks.len() != cfg.blocks {
        return Err(Error::InvalidArgument {
            what: "moe lm backward",
            reason: "the forward does not belong to this batch and config".into(),
        });
    }
    let (c, de, d, ff, e, k) = (
        cfg.context,
        cfg.embed,
        cfg.model,
        cfg.hidden,
        cfg.experts,
        cfg.top_k,
    );
    let mut grads = MoeLmParams::zeros(cfg)?;

    let last = forward.blocks.last().map_or(&forward.stem, |b| &b.output);
    let w_out = cfg.w_out_index();
    grads.tensors[w_out] = mm(last, &forward.d_logits, [d, VOCAB, t], true, false);
    let mut dh = mm(
        &forward.d_logits,
        params.get(w_out),
        [t, d, VOCAB],
        false,
        true,
    );

    for (l, b) in forward.blocks.iter().enumerate().rev() {
        let ix = cfg.block_index(l);
        let cap = b.routing.capacity;
        let routes = &b.routing.routes;
        // MoE: h2 = h1 + combine(o).
        let mut d_mid = dh.clone();
        let d_gate = moe_dispatch::gate_grad_reference(&dh, &b.expert_out, routes, k, cap, d);
        let d_out = moe_dispatch::combine_backward_slots_reference(&dh, routes, k, e, cap, d);
        let offsets: Vec<u32> = (0..=e).map(|g| (g * cap) as u32).collect();
        grads.tensors[ix.w2] =
            expert_grad::expert_weight_grad_reference(&b.expert_hidden, &d_out, &offsets, ff, d);
        let d_hidden = relu_backward_reference(
            &grouped(&d_out, params.get(ix.w2), e, cap, [ff, d], true),
            &b.expert_hidden,
        );
        grads.tensors[ix.w1] =
            expert_grad::expert_weight_grad_reference(&b.slots, &d_hidden, &offsets, d, ff);
        let d_slots = grouped(&d_hidden, params.get(ix.w1), e, cap, [d, ff], true);
        accumulate_reference(
            &mut d_mid,
            &moe_dispatch::dispatch_backward_reference(&d_slots, routes, t, k, cap, d),
        );
        // Router: gates, aux loss and z-loss back to r = h1 · W_r.
        let d_r = router::router_backward_reference(
            &b.router_logits,
            routes,
            &b.routing.stats,
            &d_gate,
            cfg.router(),
            cfg.router_loss(),
        );
        grads.tensors[ix.router] = mm(&b.mid, &d_r, [d, e, t], true, false);
        accumulate_reference(
            &mut d_mid,
            &mm(&d_r, params.get(ix.router), [t, d, e], false, true),
        );
        // Dense: h1 = h0 + relu(h0 · W_d).
        let d_pre = relu_backward_reference(&d_mid, &b.dense);
        grads.tensors[ix.dense] = mm(&b.input, &d_pre, [d, d, t], true, false);
        accumulate_reference(
            &mut d_mid,
            &mm(&d_pre, params.get(ix.dense), [t, d, d], false, true),
        );
        dh = d_mid;
    }

    let d_pre = relu_backward_reference(&dh, &forward.stem);
    grads.tensors[W_IN] = mm(&forward.embedded, &d_pre, [c * de, d, t], true, false);
    let d_x = mm(&d_pre, params.get(W_IN), [t, c * de, d], false, true);
    grads.tensors[EMBED] = embedding::embed_grad_reference(contexts, &d_x, VOCAB, de)?;
    Ok(grads)
}

/// Forward and backward: `(forward, gradients)`.
pub fn loss_and_grads(
    params: &MoeLmParams,
    contexts: &[u32],
    targets: &[u32],
) -> Result<(Forward, MoeLmParams)> {
    let fwd = forward(params, contexts, targets)?;
    let grads = backward(params, contexts, &fwd)?;
    Ok((fwd, grads))
}

/// A forward over `G` routing groups (GShard): the batch's `T` tokens are `G` consecutive groups
/// of `T / G`, each routed on its own (capacity `RouterConfig::capacity(T / G)`). Every other part
/// of the model is per token, so each group is an independent [`forward`] of its sub-batch; the
/// loss is `mean_t CE + mean_g Σ_l aux_{g,l} + mean_g Σ_l z_{g,l}` (CE is the mean over all `T`
/// because the groups are equally large). `G = 1` is exactly [`forward`].
#[derive(Debug, Clone, PartialEq)]
pub struct GroupedForward {
    /// One [`forward`] per group, in token order.
    pub groups: Vec<Forward>,
    /// The loss of the whole batch (means over groups).
    pub loss: LossParts,
    /// Per block, over all groups: capacity per group, kept pairs per expert and dropped pairs
    /// summed, `dropped_fraction` over all `T · K` choices, aux and z losses averaged.
    pub stats: Vec<RoutingStats>,
}

/// Checks `groups` against a batch of `tokens`; returns the group size.
pub fn group_size(tokens: usize, groups: usize) -> Result<usize> {
    if groups == 0 || tokens == 0 || !tokens.is_multiple_of(groups) {
        return Err(Error::InvalidArgument {
            what: "moe lm routing groups",
            reason: format!("{tokens} tokens cannot be split into {groups} equal routing groups"),
        });
    }
    Ok(tokens / groups)
}

/// Runs the model on a batch routed in `groups` groups (see [`GroupedForward`]).
pub fn forward_grouped(
    params: &MoeLmParams,
    contexts: &[u32],
    targets: &[u32],
    groups: usize,
) -> Result<GroupedForward> {
    params.check()?;
    let cfg = params.config;
    let t = check_batch(&cfg, contexts, targets)?;
    let tg = group_size(t, groups)?;
    let c = cfg.context;
    let fwds = (0..groups)
        .map(|g| {
            forward(
                params,
                &contexts[g * tg * c..(g + 1) * tg * c],
                &targets[g * tg..(g + 1) * tg],
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let n = groups as f64;
    let mean = |f: &dyn Fn(&Forward) -> f64| fwds.iter().map(f).sum::<f64>() / n;
    let cross_entropy = mean(&|f| f.loss.cross_entropy);
    let aux = mean(&|f| f.loss.aux);
    let z = mean(&|f| f.loss.z);
    let stats = (0..cfg.blocks)
        .map(|l| {
            let per: Vec<&RoutingStats> = fwds.iter().map(|f| &f.stats[l]).collect();
            let dropped = per.iter().map(|s| s.dropped).sum::<usize>();
            RoutingStats {
                capacity: per[0].capacity,
                tokens_per_expert: (0..cfg.experts)
                    .map(|e| per.iter().map(|s| s.tokens_per_expert[e]).sum())
                    .collect(),
                dropped,
                dropped_fraction: dropped as f64 / (t * cfg.top_k) as f64,
                aux_loss: (per.iter().map(|s| f64::from(s.aux_loss)).sum::<f64>() / n) as f32,
                z_loss: (per.iter().map(|s| f64::from(s.z_loss)).sum::<f64>() / n) as f32,
            }
        })
        .collect();
    Ok(GroupedForward {
        groups: fwds,
        loss: LossParts {
            cross_entropy,
            aux,
            z,
            total: cross_entropy + aux + z,
        },
        stats,
    })
}

/// The gradient of `forward.loss.total`: `(1/G) Σ_g` of each group's [`backward`], summed in
/// group order, then scaled by `1/G` in f32 (the order and rounding the GPU trainer uses).
pub fn backward_grouped(
    params: &MoeLmParams,
    contexts: &[u32],
    forward: &GroupedForward,
) -> Result<MoeLmParams> {
    let cfg = params.config;
    let groups = forward.groups.len();
    let t: usize = forward.groups.iter().map(|f| f.tokens).sum();
    let tg = group_size(t, groups)?;
    if contexts.len() != t * cfg.context {
        return Err(Error::InvalidArgument {
            what: "moe lm backward",
            reason: "the forward does not belong to this batch and config".into(),
        });
    }
    let c = cfg.context;
    let mut total = MoeLmParams::zeros(cfg)?;
    for (g, f) in forward.groups.iter().enumerate() {
        if f.tokens != tg {
            return Err(Error::InvalidArgument {
                what: "moe lm backward",
                reason: "routing groups of different sizes".into(),
            });
        }
        let grads = backward(params, &contexts[g * tg * c..(g + 1) * tg * c], f)?;
        for (acc, x) in total.tensors.iter_mut().zip(&grads.tensors) {
            accumulate_reference(acc, x);
        }
    }
    let scale = 1.0 / groups as f32;
    if groups > 1 {
        for v in total.tensors.iter_mut().flatten() {
            *v *= scale;
        }
    }
    Ok(total)
}

/// [`forward_grouped`] and [`backward_grouped`].
pub fn loss_and_grads_grouped(
    params: &MoeLmParams,
    contexts: &[u32],
    targets: &[u32],
    groups: usize,
) -> Result<(GroupedForward, MoeLmParams)> {
    let fwd = forward_grouped(params, contexts, targets, groups)?;
    let grads = backward_grouped(params, contexts, &fwd)?;
    Ok((fwd, grads))
}
