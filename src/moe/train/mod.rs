//! The GPU trainer of the MoE language model ([`super`]): forward, backward and Adam in WGSL,
//! data- and expert-parallel over a mesh of `D` devices. The host only orchestrates (launches,
//! all-to-all plans, host-staged copies) and reads back small statistics.
//!
//! # Layout
//!
//! - **Routing groups** (GShard): a batch of `T` tokens is `G` consecutive groups of `T / G`, each
//!   routed on its own with capacity `RouterConfig::capacity(T / G)`; this is
//!   [`super::reference::forward_grouped`], which the trainer matches. `G` is a multiple of `D`;
//!   device `i` holds groups `i·G/D .. (i+1)·G/D` (its data shard), processed one *round* at a
//!   time: in round `j` every device runs its group `i·G/D + j` through the model, so the
//!   all-to-alls of a round see one group per device.
//! - **Experts**: device `i` holds experts `i·E/D .. (i+1)·E/D` of every block (rows of `w1`,
//!   `w2`); `E` must be divisible by `D`. Tokens reach them by [`AllToAll::forward`] and come back
//!   by [`AllToAll::reverse`]; in backward the slot gradients take the same route (the plan is
//!   rebuilt from the same counts) and the token gradients come back by its reverse.
//! - **Dense parameters** (`embed`, `w_in`, `dense`, `router`, `w_out`) are replicated. Each
//!   device accumulates the gradients of its groups; after the last round they are all-reduced
//!   (host-staged: read back, uploaded to every device and summed there in device order with
//!   [`mlp::accumulate`]), so every replica gets the same sum and the same Adam update.
//! - **Scaling**: each group's backward is that of `CE_g + Σ_l (aux_{g,l} + z_{g,l})`, where the
//!   kernels already take the means over the group's tokens; the batch loss is the mean over
//!   groups, so every gradient is scaled by `1/G` once, after the sums.

mod checkpoint;

pub use checkpoint::TrainerCheckpoint;

use super::params::{EMBED, W_IN};
use super::reference::{RoutingStats, group_size};
use super::{MoeLmConfig, MoeLmParams, VOCAB};
use crate::collective::AllToAll;
use crate::kernels::elementwise::{self, ElementwiseOp};
use crate::kernels::lm_train::{self as lt, AdamConfig};
use crate::kernels::matmul::{MatmulOptions, MatmulVariant, VariantChoice, grouped_matmul};
use crate::kernels::mlp;
use crate::kernels::moe_dispatch::{combine, dispatch};
use crate::kernels::router::{self, Routing, load_balancing_loss};
use crate::trace::{EventMeta, SpanStart, Tracer};
use crate::{DType, Device, Error, Result, Tensor};
use std::time::Instant;

/// What one [`GpuTrainer::step`] did (losses are those of the parameters before the update).
#[derive(Debug, Clone, PartialEq)]
pub struct StepStats {
    /// The step number, from 1.
    pub step: u32,
    /// `ce + aux + z`.
    pub loss: f64,
    /// Mean cross-entropy over the batch (nats).
    pub ce: f64,
    /// Load-balancing loss: summed over blocks, averaged over routing groups.
    pub aux: f64,
    /// Router z-loss: summed over blocks, averaged over routing groups.
    pub z: f64,
    /// Kept (token, choice) pairs per expert, summed over blocks and groups.
    pub tokens_per_expert: Vec<usize>,
    /// Dropped choices over all `T · K · L` choices.
    pub dropped_fraction: f64,
    /// Per block, as [`super::reference::forward_grouped`] reports it.
    pub blocks: Vec<RoutingStats>,
    /// Wall time of the step.
    pub seconds: f64,
}

/// One device's share: every parameter tensor it holds, in parameter order (replicated tensors
/// whole, expert tensors as its `[E/D, ·, ·]` slice), Adam's moments and gradient accumulators.
struct Shard {
    device: Device,
    params: Vec<Tensor>,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    grads: Vec<Tensor>,
}

/// One block's activations on one device (its token group).
struct BlockAct {
    input: Tensor,
    dense: Tensor,
    mid: Tensor,
    logits: Tensor,
    routing: Routing,
    counts: Tensor,
    /// The experts' outputs back in this device's slot layout `[E·capacity, d]`.
    expert_out: Tensor,
}

/// One block's expert activations on one (expert) device.
struct ExpertAct {
    tokens: Tensor,
    offsets: Vec<u32>,
    hidden: Tensor,
}

/// One device's activations for its group of one round.
struct ShardAct {
    contexts: Tensor,
    x: Tensor,
    stem: Tensor,
    blocks: Vec<BlockAct>,
    last: Tensor,
    row_loss: Tensor,
    d_logits: Tensor,
}

/// A round's forward over every device.
struct RoundAct {
    shards: Vec<ShardAct>,
    /// `[block][device]`.
    experts: Vec<Vec<ExpertAct>>,
    capacity: usize,
}

/// Loss and routing sums of a round.
#[derive(Default)]
struct RoundSums {
    ce_sum: f64,
    aux_sum: f64,
    z_sum: f64,
    /// `[block][expert]` kept pairs.
    kept: Vec<Vec<usize>>,
    /// `[block]` dropped pairs.
    dropped: Vec<usize>,
    /// `[block]` aux and z sums over groups.
    block_aux: Vec<f64>,
    block_z: Vec<f64>,
}

/// The trainer: parameters, Adam state and gradients on the devices.
pub struct GpuTrainer {
    config: MoeLmConfig,
    adam: AdamConfig,
    step: u32,
    groups: usize,
    shards: Vec<Shard>,
    /// Per parameter: whether it is an expert tensor (sharded over devices).
    expert: Vec<bool>,
    tracer: Tracer,
}

fn invalid(what: &'static str, reason: String) -> Error {
    Error::InvalidArgument { what, reason }
}

const MM: MatmulOptions = MatmulOptions {
    trans_a: false,
    trans_b: false,
    // Fixed, not autotuned: every device (and run) sums in the same order.
    variant: VariantChoice::Fixed(MatmulVariant::Tiled),
};

/// `op(a) · op(b)`.
fn mm(a: &Tensor, b: &Tensor, trans_a: bool, trans_b: bool) -> Result<Tensor> {
    let rows = a.shape().get(usize::from(trans_a)).copied().unwrap_or(0);
    gmm(a, b, &[0, to_u32(rows)?], trans_a, trans_b)
}

/// Grouped `op(a) · op(b[g])` over row groups `offsets` (an empty `a` gives an empty result).
fn gmm(a: &Tensor, b: &Tensor, offsets: &[u32], trans_a: bool, trans_b: bool) -> Result<Tensor> {
    let rows = offsets.last().copied().unwrap_or(0) as usize;
    let options = MatmulOptions {
        trans_a,
        trans_b,
        ..MM
    };
    if rows == 0 && !trans_a {
        let n = match (b.shape(), trans_b) {
            ([_, n], false) | ([_, _, n], false) | ([n, _], true) | ([_, n, _], true) => *n,
            _ => 0,
        };
        return Tensor::zeros(a.device(), &[0, n], DType::F32);
    }
    grouped_matmul(a, b, offsets, options)
}

fn to_u32(v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| invalid("moe trainer", format!("{v} does not fit in u32")))
}

/// An elementwise op into a tensor shaped like `x`.
fn ew(op: ElementwiseOp, x: &Tensor, z: Option<&Tensor>) -> Result<Tensor> {
    elementwise::run(op, x, z)
}

fn relu(x: &Tensor) -> Result<Tensor> {
    ew(ElementwiseOp::Relu, x, None)
}

fn add(x: &Tensor, z: &Tensor) -> Result<Tensor> {
    ew(ElementwiseOp::Add, x, Some(z))
}

fn scale(x: &Tensor, s: f32) -> Result<Tensor> {
    ew(
        ElementwiseOp::Affine {
            scale: s,
            shift: 0.0,
            repeat: 1,
        },
        x,
        None,
    )
}

fn relu_backward(grad: &Tensor, act: &Tensor) -> Result<Tensor> {
    if grad.is_empty() {
        return Tensor::zeros(grad.device(), grad.shape(), DType::F32);
    }
    mlp::relu_backward(grad, act)
}

fn accumulate(acc: &Tensor, x: &Tensor) -> Result<()> {
    if acc.is_empty() {
        return Ok(());
    }
    mlp::accumulate(acc, x)
}

impl GpuTrainer {
    /// A trainer over `devices` with one routing group per device.
    pub fn new(devices: &[Device], params: &MoeLmParams, adam: AdamConfig) -> Result<Self> {
        Self::with_groups(devices, params, adam, devices.len())
    }

    /// A trainer over `devices` routing each batch in `groups` groups (a multiple of the device
    /// count): the same math as [`super::Adam::train_step_grouped`] with `groups`.
    pub fn with_groups(
        devices: &[Device],
        params: &MoeLmParams,
        adam: AdamConfig,
        groups: usize,
    ) -> Result<Self> {
        Self::build(devices, params, None, adam, groups, 0)
    }

    /// A trainer continuing from `checkpoint` on `devices` (any count dividing both `E` and the
    /// checkpoint's groups): replicated tensors and their moments are uploaded to every device,
    /// expert tensors to their owners; the next step is `checkpoint.step + 1`.
    pub fn resume(devices: &[Device], checkpoint: &TrainerCheckpoint) -> Result<Self> {
        checkpoint.check()?;
        Self::build(
            devices,
            &checkpoint.params,
            Some((&checkpoint.m, &checkpoint.v)),
            checkpoint.adam,
            checkpoint.groups,
            checkpoint.step,
        )
    }

    /// Downloads everything [`Self::resume`] needs: parameters, Adam's moments (expert tensors
    /// gathered from their devices), the step, the Adam setting and the groups.
    pub fn checkpoint(&self) -> Result<TrainerCheckpoint> {
        let download =
            |which: fn(&Shard) -> &Vec<Tensor>| self.gather_all(|d, p| &which(&self.shards[d])[p]);
        let out = TrainerCheckpoint {
            params: download(|s| &s.params)?,
            m: download(|s| &s.m)?,
            v: download(|s| &s.v)?,
            step: self.step,
            adam: self.adam,
            groups: self.groups,
        };
        out.check()?;
        Ok(out)
    }

    fn build(
        devices: &[Device],
        params: &MoeLmParams,
        moments: Option<(&MoeLmParams, &MoeLmParams)>,
        adam: AdamConfig,
        groups: usize,
        step: u32,
    ) -> Result<Self> {
        const WHAT: &str = "moe trainer";
        params.check()?;
        let cfg = params.config;
        let n = devices.len();
        if n == 0 {
            return Err(invalid(WHAT, "no devices".into()));
        }
        if !cfg.experts.is_multiple_of(n) {
            return Err(invalid(
                WHAT,
                format!(
                    "{} experts cannot be split evenly over {n} devices",
                    cfg.experts
                ),
            ));
        }
        if groups == 0 || !groups.is_multiple_of(n) {
            return Err(invalid(
                WHAT,
                format!("{groups} routing groups cannot be split evenly over {n} devices"),
            ));
        }
        // Checks the Adam settings now rather than at the first step.
        lt::adam_reference(&mut [], &mut [], &mut [], &[], adam, 1)?;
        let specs = cfg.param_specs();
        let mut expert = vec![false; specs.len()];
        for l in 0..cfg.blocks {
            let ix = cfg.block_index(l);
            expert[ix.w1] = true;
            expert[ix.w2] = true;
        }
        let el = cfg.experts / n;
        let mut shards = Vec::with_capacity(n);
        for (i, device) in devices.iter().enumerate() {
            let mut shard = Shard {
                device: device.clone(),
                params: Vec::new(),
                m: Vec::new(),
                v: Vec::new(),
                grads: Vec::new(),
            };
            for (p, (spec, &is_expert)) in specs.iter().zip(&expert).enumerate() {
                let (shape, range) = if is_expert {
                    let per = spec.len() / cfg.experts;
                    let mut shape = spec.shape.clone();
                    shape[0] = el;
                    (shape, i * el * per..(i + 1) * el * per)
                } else {
                    (spec.shape.clone(), 0..spec.len())
                };
                let upload = |t: &MoeLmParams| -> Result<Tensor> {
                    let values = t.tensors.get(p).and_then(|v| v.get(range.clone()));
                    let values = values.ok_or_else(|| {
                        invalid(WHAT, format!("{} is shorter than its shape", spec.name))
                    })?;
                    Tensor::from_f32(device, &shape, DType::F32, values)
                };
                shard.params.push(upload(params)?);
                match moments {
                    Some((m, v)) => {
                        shard.m.push(upload(m)?);
                        shard.v.push(upload(v)?);
                    }
                    None => {
                        shard.m.push(Tensor::zeros(device, &shape, DType::F32)?);
                        shard.v.push(Tensor::zeros(device, &shape, DType::F32)?);
                    }
                }
                shard.grads.push(Tensor::zeros(device, &shape, DType::F32)?);
            }
            shards.push(shard);
        }
        Ok(Self {
            config: cfg,
            adam,
            step,
            groups,
            shards,
            expert,
            tracer: Tracer::off(),
        })
    }

    pub fn config(&self) -> &MoeLmConfig {
        &self.config
    }

    /// Routing groups per batch.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// Steps taken.
    pub fn steps(&self) -> u32 {
        self.step
    }

    pub fn devices(&self) -> Vec<Device> {
        self.shards.iter().map(|s| s.device.clone()).collect()
    }

    /// Records phases (forward, all-to-all, backward, all-reduce, adam) and per-step stats as
    /// trace events on each device (its mesh index); `None` turns tracing off.
    pub fn set_tracer(&mut self, tracer: Option<Tracer>) {
        self.tracer = tracer.unwrap_or_else(Tracer::off);
    }

    pub fn tracer(&self) -> Option<&Tracer> {
        self.tracer.is_on().then_some(&self.tracer)
    }

    /// Checks a batch; returns `T`.
    fn check_batch(&self, contexts: &[u32], targets: &[u32]) -> Result<usize> {
        const WHAT: &str = "moe trainer batch";
        let t = targets.len();
        let c = self.config.context;
        if t == 0 || contexts.len() != t * c {
            return Err(Error::ShapeMismatch {
                what: WHAT,
                expected: format!("T >= 1 targets and T × {c} context bytes"),
                got: format!("{t} targets, {} context bytes", contexts.len()),
            });
        }
        if let Some(bad) = contexts
            .iter()
            .chain(targets)
            .find(|&&v| v as usize >= VOCAB)
        {
            return Err(invalid(WHAT, format!("byte id {bad} is not below {VOCAB}")));
        }
        group_size(t, self.groups)?;
        Ok(t)
    }

    fn trace(&self, start: SpanStart, meta: fn(usize) -> EventMeta, name: &str, round: usize) {
        // On one device the exchanges and the all-reduce move nothing between devices (the
        // all-to-all copies on the GPU): no transfer events, so a trace shows none.
        if !self.tracer.is_on()
            || (self.shards.len() == 1 && meta(0).kind == crate::trace::EventKind::Transfer)
        {
            return;
        }
        let end = self.tracer.now_ns();
        for sh in &self.shards {
            self.tracer.record(
                meta(sh.device.id()).microbatch(round as u32),
                || name.to_string(),
                start.0,
                end,
            );
        }
    }

    /// Forward of round `round` on every device.
    fn forward_round(&self, contexts: &[u32], targets: &[u32], round: usize) -> Result<RoundAct> {
        let cfg = &self.config;
        let (c, e) = (cfg.context, cfg.experts);
        let per_device = self.groups / self.shards.len();
        let tg = targets.len() / self.groups;
        let mut acts = Vec::with_capacity(self.shards.len());
        let mut h = Vec::with_capacity(self.shards.len());
        for (i, sh) in self.shards.iter().enumerate() {
            let g = i * per_device + round;
            let ctx = Tensor::from_u32(
                &sh.device,
                &[tg, c],
                &contexts[g * tg * c..(g + 1) * tg * c],
            )?;
            let x = lt::embed_gather(&ctx, &sh.params[EMBED])?;
            let stem = relu(&mm(&x, &sh.params[W_IN], false, false)?)?;
            h.push(stem.clone());
            acts.push((ctx, x, stem, Vec::with_capacity(cfg.blocks)));
        }
        let mut experts = Vec::with_capacity(cfg.blocks);
        let mut capacity = 0;
        for l in 0..cfg.blocks {
            let ix = cfg.block_index(l);
            let mut slots = Vec::with_capacity(self.shards.len());
            let mut counts = Vec::with_capacity(self.shards.len());
            let mut blocks = Vec::with_capacity(self.shards.len());
            for (sh, input) in self.shards.iter().zip(&h) {
                let dense = relu(&mm(input, &sh.params[ix.dense], false, false)?)?;
                let mid = add(input, &dense)?;
                let logits = mm(&mid, &sh.params[ix.router], false, false)?;
                let routing = router::route(&logits, cfg.router())?;
                capacity = routing.capacity;
                slots.push(dispatch(&mid, &routing)?);
                counts.push(routing.kept_counts()?);
                blocks.push((input.clone(), dense, mid, logits, routing));
            }
            let span = self.tracer.span();
            let (plan, batches) = AllToAll::forward(&slots, &counts, e, capacity)?;
            self.trace(span, EventMeta::transfer, "all-to-all forward", round);
            let mut outs = Vec::with_capacity(batches.len());
            let mut block_experts = Vec::with_capacity(batches.len());
            for (sh, batch) in self.shards.iter().zip(batches) {
                let hidden = relu(&gmm(
                    &batch.tokens,
                    &sh.params[ix.w1],
                    &batch.offsets,
                    false,
                    false,
                )?)?;
                outs.push(gmm(
                    &hidden,
                    &sh.params[ix.w2],
                    &batch.offsets,
                    false,
                    false,
                )?);
                block_experts.push(ExpertAct {
                    tokens: batch.tokens,
                    offsets: batch.offsets,
                    hidden,
                });
            }
            let span = self.tracer.span();
            let returned = plan.reverse(&outs)?;
            self.trace(span, EventMeta::transfer, "all-to-all reverse", round);
            for (i, ((input, dense, mid, logits, routing), expert_out)) in
                blocks.into_iter().zip(returned).enumerate()
            {
                h[i] = add(&mid, &combine(&expert_out, &routing)?)?;
                acts[i].3.push(BlockAct {
                    input,
                    dense,
                    mid,
                    logits,
                    routing,
                    counts: counts[i].clone(),
                    expert_out,
                });
            }
            experts.push(block_experts);
        }
        let w_out = cfg.w_out_index();
        let mut shards = Vec::with_capacity(acts.len());
        for (i, ((contexts, x, stem, blocks), last)) in acts.into_iter().zip(h).enumerate() {
            let sh = &self.shards[i];
            let g = i * per_device + round;
            let tgt = Tensor::from_u32(&sh.device, &[tg], &targets[g * tg..(g + 1) * tg])?;
            let logits = mm(&last, &sh.params[w_out], false, false)?;
            let ce = lt::cross_entropy(&logits, &tgt)?;
            shards.push(ShardAct {
                contexts,
                x,
                stem,
                blocks,
                last,
                row_loss: ce.loss,
                d_logits: ce.d_logits,
            });
        }
        Ok(RoundAct {
            shards,
            experts,
            capacity,
        })
    }

    /// Losses and routing counts of a round, read back.
    fn round_sums(&self, act: &RoundAct, sums: &mut RoundSums) -> Result<()> {
        let cfg = &self.config;
        let blocks = cfg.blocks;
        sums.kept.resize(blocks, vec![0; cfg.experts]);
        sums.dropped.resize(blocks, 0);
        sums.block_aux.resize(blocks, 0.0);
        sums.block_z.resize(blocks, 0.0);
        for sh in &act.shards {
            let rows = sh.row_loss.to_f32()?;
            sums.ce_sum += rows.iter().map(|&v| f64::from(v)).sum::<f64>();
            let tg = rows.len();
            for (l, b) in sh.blocks.iter().enumerate() {
                let stats = b.routing.read_stats()?;
                let kept: usize = stats.iter().map(|s| s.kept as usize).sum();
                for (acc, s) in sums.kept[l].iter_mut().zip(&stats) {
                    *acc += s.kept as usize;
                }
                sums.dropped[l] += (tg * cfg.top_k).saturating_sub(kept);
                let aux = f64::from(load_balancing_loss(&stats, cfg.aux_alpha));
                let lse = lt::row_logsumexp(&b.logits)?.to_f32()?;
                let z = f64::from(cfg.z_loss)
                    * lse.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>()
                    / tg as f64;
                sums.aux_sum += aux;
                sums.z_sum += z;
                sums.block_aux[l] += f64::from(aux as f32);
                sums.block_z[l] += f64::from(z as f32);
            }
        }
        Ok(())
    }

    /// Backward of a round: adds every gradient into the accumulators of its device.
    fn backward_round(&self, act: &RoundAct, round: usize) -> Result<()> {
        let cfg = &self.config;
        let e = cfg.experts;
        let w_out = cfg.w_out_index();
        let mut dh = Vec::with_capacity(self.shards.len());
        for (sh, a) in self.shards.iter().zip(&act.shards) {
            accumulate(&sh.grads[w_out], &mm(&a.last, &a.d_logits, true, false)?)?;
            dh.push(mm(&a.d_logits, &sh.params[w_out], false, true)?);
        }
        for l in (0..cfg.blocks).rev() {
            let ix = cfg.block_index(l);
            let mut d_gates = Vec::with_capacity(dh.len());
            let mut d_out = Vec::with_capacity(dh.len());
            let mut counts = Vec::with_capacity(dh.len());
            for (a, dy) in act.shards.iter().zip(&dh) {
                let b = &a.blocks[l];
                d_gates.push(lt::gate_grad(dy, &b.expert_out, &b.routing)?);
                d_out.push(lt::combine_backward_slots(dy, &b.routing)?);
                counts.push(b.counts.clone());
            }
            let span = self.tracer.span();
            let (plan, batches) = AllToAll::forward(&d_out, &counts, e, act.capacity)?;
            self.trace(span, EventMeta::transfer, "all-to-all backward", round);
            let mut d_tokens = Vec::with_capacity(batches.len());
            for ((sh, ex), batch) in self.shards.iter().zip(&act.experts[l]).zip(batches) {
                let offsets = &ex.offsets;
                if batch.offsets != *offsets {
                    return Err(invalid(
                        "moe trainer",
                        "the backward all-to-all plan differs from the forward one".into(),
                    ));
                }
                let d_o = &batch.tokens;
                accumulate(
                    &sh.grads[ix.w2],
                    &lt::expert_weight_grad(&ex.hidden, d_o, offsets)?,
                )?;
                let d_hidden = relu_backward(
                    &gmm(d_o, &sh.params[ix.w2], offsets, false, true)?,
                    &ex.hidden,
                )?;
                accumulate(
                    &sh.grads[ix.w1],
                    &lt::expert_weight_grad(&ex.tokens, &d_hidden, offsets)?,
                )?;
                d_tokens.push(gmm(&d_hidden, &sh.params[ix.w1], offsets, false, true)?);
            }
            let span = self.tracer.span();
            let d_slots = plan.reverse(&d_tokens)?;
            self.trace(
                span,
                EventMeta::transfer,
                "all-to-all backward reverse",
                round,
            );
            for (i, (sh, a)) in self.shards.iter().zip(&act.shards).enumerate() {
                let b = &a.blocks[l];
                let d_mid = &dh[i];
                accumulate(d_mid, &lt::dispatch_backward(&d_slots[i], &b.routing)?)?;
                let d_r =
                    lt::router_backward(&b.logits, &d_gates[i], &b.routing, cfg.router_loss())?;
                accumulate(&sh.grads[ix.router], &mm(&b.mid, &d_r, true, false)?)?;
                accumulate(d_mid, &mm(&d_r, &sh.params[ix.router], false, true)?)?;
                let d_pre = relu_backward(d_mid, &b.dense)?;
                accumulate(&sh.grads[ix.dense], &mm(&b.input, &d_pre, true, false)?)?;
                accumulate(d_mid, &mm(&d_pre, &sh.params[ix.dense], false, true)?)?;
            }
        }
        for ((sh, a), dy) in self.shards.iter().zip(&act.shards).zip(&dh) {
            let d_pre = relu_backward(dy, &a.stem)?;
            accumulate(&sh.grads[W_IN], &mm(&a.x, &d_pre, true, false)?)?;
            let d_x = mm(&d_pre, &sh.params[W_IN], false, true)?;
            accumulate(&sh.grads[EMBED], &lt::embed_grad(&a.contexts, &d_x, VOCAB)?)?;
        }
        Ok(())
    }

    /// Sums the replicated parameters' gradients over devices (host-staged) and scales every
    /// gradient by `1/G`; returns the final gradients per device, in parameter order.
    fn reduce_grads(&self) -> Result<Vec<Vec<Tensor>>> {
        let s = 1.0 / self.groups as f32;
        let n = self.shards.len();
        let mut out: Vec<Vec<Tensor>> = (0..n).map(|_| Vec::new()).collect();
        for (p, &is_expert) in self.expert.iter().enumerate() {
            let summed: Vec<Tensor> = if is_expert || n == 1 {
                self.shards.iter().map(|sh| sh.grads[p].clone()).collect()
            } else {
                let host = self
                    .shards
                    .iter()
                    .map(|sh| sh.grads[p].to_f32())
                    .collect::<Result<Vec<_>>>()?;
                let mut sums = Vec::with_capacity(n);
                for sh in &self.shards {
                    let shape = sh.grads[p].shape();
                    let acc = Tensor::from_f32(&sh.device, shape, DType::F32, &host[0])?;
                    for peer in &host[1..] {
                        let x = Tensor::from_f32(&sh.device, shape, DType::F32, peer)?;
                        accumulate(&acc, &x)?;
                    }
                    sums.push(acc);
                }
                sums
            };
            for (list, g) in out.iter_mut().zip(summed) {
                list.push(if self.groups > 1 { scale(&g, s)? } else { g });
            }
        }
        Ok(out)
    }

    /// Forward and backward of every round, then the all-reduce: the loss sums and each
    /// device's final gradients.
    fn compute(&self, contexts: &[u32], targets: &[u32]) -> Result<(RoundSums, Vec<Vec<Tensor>>)> {
        for sh in &self.shards {
            let mut encoder = sh.device.encoder("moe trainer zero grads");
            for g in &sh.grads {
                encoder.clear_buffer(g.buffer(), 0, None);
            }
            sh.device.submit(encoder);
        }
        let rounds = self.groups / self.shards.len();
        let mut sums = RoundSums::default();
        for round in 0..rounds {
            let span = self.tracer.span();
            let act = self.forward_round(contexts, targets, round)?;
            self.round_sums(&act, &mut sums)?;
            self.trace(span, EventMeta::host_encode, "forward", round);
            let span = self.tracer.span();
            self.backward_round(&act, round)?;
            self.trace(span, EventMeta::host_encode, "backward", round);
        }
        let span = self.tracer.span();
        let grads = self.reduce_grads()?;
        self.trace(span, EventMeta::transfer, "all-reduce", 0);
        Ok((sums, grads))
    }

    /// The gradient of the batch loss with respect to every parameter (what [`Self::step`]
    /// would apply), downloaded; no update.
    pub fn grads(&self, contexts: &[u32], targets: &[u32]) -> Result<MoeLmParams> {
        self.check_batch(contexts, targets)?;
        let (_, grads) = self.compute(contexts, targets)?;
        self.gather_all(|d, p| &grads[d][p])
    }

    /// Every parameter-shaped tensor `tensor(device, param)`, gathered into one checked set:
    /// replicated ones from device 0, expert ones from every device in order.
    fn gather_all<'a>(
        &'a self,
        tensor: impl Fn(usize, usize) -> &'a Tensor,
    ) -> Result<MoeLmParams> {
        let tensors = self
            .expert
            .iter()
            .enumerate()
            .map(|(p, &is_expert)| self.gather(is_expert, |d| tensor(d, p)))
            .collect::<Result<Vec<_>>>()?;
        let out = MoeLmParams {
            config: self.config,
            tensors,
        };
        out.check()?;
        Ok(out)
    }

    /// Parameter `p`'s values: device 0's replica, or every device's expert rows in order.
    fn gather<'a>(
        &'a self,
        is_expert: bool,
        tensor: impl Fn(usize) -> &'a Tensor,
    ) -> Result<Vec<f32>> {
        if self.shards.is_empty() {
            return Err(invalid("moe trainer", "no devices".into()));
        }
        if !is_expert {
            return tensor(0).to_f32();
        }
        let mut all = Vec::new();
        for d in 0..self.shards.len() {
            all.extend(tensor(d).to_f32()?);
        }
        Ok(all)
    }

    /// One training step on a batch (`contexts` `[T, C]`, `targets` `[T]`, byte ids).
    pub fn step(&mut self, contexts: &[u32], targets: &[u32]) -> Result<StepStats> {
        let start = Instant::now();
        let t = self.check_batch(contexts, targets)?;
        let cfg = self.config;
        let (sums, grads) = self.compute(contexts, targets)?;
        let span = self.tracer.span();
        let step = self.step + 1;
        for (sh, g) in self.shards.iter().zip(&grads) {
            let mut encoder = sh.device.encoder("moe trainer adam");
            for (((p, m), v), g) in sh.params.iter().zip(&sh.m).zip(&sh.v).zip(g) {
                lt::encode_adam(&mut encoder, p, m, v, g, self.adam, step)?;
            }
            sh.device.submit(encoder);
        }
        for sh in &self.shards {
            sh.device.wait()?;
        }
        self.step = step;
        self.trace(span, EventMeta::host_encode, "adam", 0);

        let n = self.groups as f64;
        let (ce, aux, z) = (sums.ce_sum / t as f64, sums.aux_sum / n, sums.z_sum / n);
        let tg = t / self.groups;
        let blocks: Vec<RoutingStats> = (0..cfg.blocks)
            .map(|l| RoutingStats {
                capacity: cfg.router().capacity(tg),
                tokens_per_expert: sums.kept[l].clone(),
                dropped: sums.dropped[l],
                dropped_fraction: sums.dropped[l] as f64 / (t * cfg.top_k) as f64,
                aux_loss: (sums.block_aux[l] / n) as f32,
                z_loss: (sums.block_z[l] / n) as f32,
            })
            .collect();
        let dropped: usize = sums.dropped.iter().sum();
        let stats = StepStats {
            step,
            loss: ce + aux + z,
            ce,
            aux,
            z,
            tokens_per_expert: (0..cfg.experts)
                .map(|e| sums.kept.iter().map(|k| k[e]).sum())
                .collect(),
            dropped_fraction: dropped as f64 / (t * cfg.top_k * cfg.blocks.max(1)) as f64,
            blocks,
            seconds: start.elapsed().as_secs_f64(),
        };
        if self.tracer.is_on() {
            let now = self.tracer.now_ns();
            let begin = self.tracer.ns_at(start);
            for sh in &self.shards {
                self.tracer.record(
                    EventMeta::host_encode(sh.device.id()),
                    || {
                        format!(
                            "step {step}: loss {:.5} ce {:.5} aux {:.5} z {:.5} dropped {:.4} tokens/expert {:?}",
                            stats.loss, stats.ce, stats.aux, stats.z, stats.dropped_fraction,
                            stats.tokens_per_expert
                        )
                    },
                    begin,
                    now,
                );
            }
        }
        Ok(stats)
    }

    /// Mean cross-entropy (nats) of the current parameters on a batch, forward only (routed in
    /// the trainer's groups, as in training).
    pub fn eval(&self, contexts: &[u32], targets: &[u32]) -> Result<f64> {
        let nats = self.token_nats(contexts, targets)?;
        Ok(nats.iter().sum::<f64>() / nats.len().max(1) as f64)
    }

    /// Cross-entropy (nats) of every token of a batch, in batch order, forward only: what
    /// Branch-Train-Merge's ensemble weighs.
    pub fn token_nats(&self, contexts: &[u32], targets: &[u32]) -> Result<Vec<f64>> {
        let t = self.check_batch(contexts, targets)?;
        let per_device = self.groups / self.shards.len();
        let tg = t / self.groups;
        let mut out = vec![0.0f64; t];
        for round in 0..per_device {
            let act = self.forward_round(contexts, targets, round)?;
            for (i, sh) in act.shards.iter().enumerate() {
                // Device i, round r holds group i · (groups / devices) + r.
                let g = i * per_device + round;
                for (k, v) in sh.row_loss.to_f32()?.into_iter().enumerate().take(tg) {
                    out[g * tg + k] = f64::from(v);
                }
            }
        }
        Ok(out)
    }

    /// Downloads the parameters (expert tensors gathered from their devices).
    pub fn params(&self) -> Result<MoeLmParams> {
        self.gather_all(|d, p| &self.shards[d].params[p])
    }
}

impl std::fmt::Debug for GpuTrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuTrainer")
            .field("config", &self.config)
            .field("adam", &self.adam)
            .field("step", &self.step)
            .field("groups", &self.groups)
            .field(
                "devices",
                &self
                    .shards
                    .iter()
                    .map(|s| s.device.label())
                    .collect::<Vec<_>>(),
            )
            .field("tracing", &self.tracer.is_on())
            .finish()
    }
}
