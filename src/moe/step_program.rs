//! The MoE LM's training step as one compiled [`Program`]: every round's forward, the all-to-alls
//! there and back, the backward, the all-reduce of the replicated parameters' gradients and Adam,
//! as kernel, collective and in-place update nodes over the gang, built with
//! [`crate::train::step_program`]'s builder. The runtime runs it with parallel asynchronous
//! dispatch; the trainer only submits batches and reads back statistics.
//!
//! Expert parallelism keeps static shapes: each device holds `[E · capacity, d]` slots, and the
//! grouped matmuls run over fixed blocks of `capacity` rows per local expert and source, each
//! over its kept rows only; the all-to-alls move only the kept rows of each block, their counts
//! riding with them ([`super::exchange`], shared with the demo layer). D devices compute the bits one device computes with D groups: every matmul sums in an
//! order independent of M, and the expert weight gradient sums one slot block at a time. The
//! gang is one axis (GShard: device `i` routes its groups and holds experts `[i·E/D, (i+1)·E/D)`),
//! or a `{data, expert}` mesh whose rows each hold every expert once: the all-to-alls run within
//! rows and the expert gradients are all-reduced over `data` (their replicas add in another
//! order: f32 rounding).
//!
//! With an uneven [`crate::train::GroupSplit`] a device runs only the rounds it holds groups for:
//! in the others its token side is idle shards of their nodes (`ProgramBuilder::only_where`),
//! while its experts serve every round and its accumulators of expert gradients take every
//! round's part.
//!
//! The backward puts each linear layer's weight gradient after the next expert layer's send, the
//! expert layer orders its own backward the same way ([`MoeFfn::backward_rest`]), and the
//! replicated gradients final before the stem's and the embedding's backward start their
//! all-reduce there.

use super::ffn_program::{BackwardCall, ExpertActivation, MoeFfn, MoeFfnSaved, MoeFfnWeights};
use super::params::{BlockIndex, EMBED, W_IN};
use super::{MoeLmConfig, VOCAB};
use crate::Result;
use crate::kernels::matmul::Activation;
use crate::kernels::{ElementwiseOp, EmbedGather, EmbedGrad, Epilogue, TensorType};
use crate::program::{Program, Value};
use crate::train::StepShape;
use crate::train::step_program::{Builder, Mode};

/// Saved activations of one block on every device.
struct BlockAct {
    input: Value,
    dense: Value,
    /// The expert layer's, whose input is the block's `mid`.
    moe: MoeFfnSaved,
}

impl Builder<'_, StepShape<MoeLmConfig>> {
    /// Every block's expert layer (ReLU experts).
    fn ffn(&self) -> MoeFfn {
        let (cfg, s) = (&self.shape.config, self.shape);
        let (router, loss) = (cfg.router(), cfg.router_loss());
        MoeFfn::new(
            router,
            loss,
            s.expert_mesh(),
            s.group_units,
            cfg.model,
            ExpertActivation::Relu,
        )
    }

    fn moe_weights(&self, ix: &BlockIndex) -> MoeFfnWeights {
        MoeFfnWeights {
            router: self.params[ix.router],
            w1: self.params[ix.w1],
            w2: self.params[ix.w2],
        }
    }
}

/// Builds the step program for `shape` in `mode`. Arguments, per round: contexts (u32
/// `[group tokens, context]` per device), targets (u32 `[group tokens]`); then for training the
/// step's Adam bias corrections (f32 `[2]` per device).
pub(super) fn build(shape: &StepShape<MoeLmConfig>, mode: Mode) -> Result<Program> {
    let cfg = shape.config;
    let expert = &cfg.expert_tensors()[..];
    let mut x = Builder::begin("moe", shape, mode);
    if let Mode::Read(_) = mode {
        return x.read_back();
    }
    let _gang = x.gang.clone();
    let (tg, c) = (shape.group_units, cfg.context);
    let w_out = cfg.w_out_index();
    let input = TensorType::u32(&[tg, c]);
    let (inputs, bias) = x.batch_args(mode, input, TensorType::u32(&[tg]));
    let mut early = None;
    for (r, &(ctx, tgt)) in inputs.iter().enumerate() {
        let at = |what: &str| format!("r{r} {what}");
        // The token side of a round runs on the devices holding a group in it (all of them with
        // an even split); the expert layers serve every device.
        x.b.set_active(shape.split.active(r));
        // ---- forward
        let emb = x.k(&at("embed"), EmbedGather, &[ctx, x.params[EMBED]]);
        // Relus are their matmuls' epilogues: the backward needs only their outputs.
        let (relu, w_in) = (Epilogue::relu(), x.params[W_IN]);
        let stem = x.mm_then(&at("stem matmul"), emb, w_in, false, false, relu, &[]);
        let mut h = stem;
        let mut acts = Vec::with_capacity(cfg.blocks);
        for l in 0..cfg.blocks {
            let ix = cfg.block_index(l);
            let at = |what: &str| format!("r{r} b{l} {what}");
            let input = h;
            let w = x.params[ix.dense];
            // The residual sum is the dense matmul's epilogue, which keeps the relu's output
            // (for the backward's mask) beside it.
            let keep = Epilogue::relu().and_add().keeping();
            let [mid, dense] = x.mm_keeping(&at("dense matmul"), h, w, keep, &[h]);
            let ffn = x.ffn();
            let weights = x.moe_weights(&ix);
            let gang = x.gang.clone();
            // The residual connection is the combine's, in its launch.
            let (next, moe) = ffn.forward(&mut x.b, &gang, &at, (mid, Some(mid)), &weights);
            h = next;
            acts.push(BlockAct { input, dense, moe });
        }
        let last = h;
        let logits = x.mm(&at("output matmul"), last, x.params[w_out], false, false);
        let routers: Vec<_> = (acts.iter())
            .map(|a| (a.moe.routing[2], a.moe.lse))
            .collect();
        let d_logits = x.loss(&at, mode, logits, tgt, &routers);
        if mode == Mode::Forward {
            continue;
        }
        // ---- backward
        // Each layer's weight gradient waits until the next expert layer's slots are sent
        // (linear_backward_put_off), so devices compute it while they travel, and is computed
        // beside the router's (put off too) in one launch: the pairs are (output, router of the
        // last block), (dense of block l, router of block l - 1), ..., (dense of block 0, stem).
        let mut dh = x.linear_backward_put_off(true, &at, "output", w_out, last, d_logits);
        for l in (0..cfg.blocks).rev() {
            let ix = cfg.block_index(l);
            let at = |what: &str| format!("r{r} b{l} {what}");
            let a = &acts[l];
            let (input, dense, moe) = (a.input, a.dense, a.moe);
            let ffn = x.ffn();
            let weights = x.moe_weights(&ix);
            let gang = x.gang.clone();
            // The dense relu's backward of d_mid is taken in the launch that sums d_mid.
            let cx = BackwardCall {
                gang: &gang,
                at: &at,
                saved: &moe,
                weights: &weights,
                dy: dh,
                residual: Some(dh),
                relu_below: Some(dense),
            };
            let sent = ffn.backward_send(&mut x.b, &cx);
            let (d_mid, d_pre, (r_input, d_r), (w1, w2)) =
                ffn.backward_rest_router_later(&mut x.b, &cx, sent);
            // Every device computed its experts' gradients this round.
            let token_side = x.b.set_active(None);
            x.grad(ix.w2, &at("accumulate w2 grad"), w2);
            x.grad(ix.w1, &at("accumulate w1 grad"), w1);
            x.b.set_active(token_side);
            x.put_off_weight_grad(&at, "router", ix.router, r_input, d_r);
            x.weight_grads_now();
            // d_mid + the dense layer's input gradient, summed by its matmul; under the first
            // block, the stem relu's backward of that sum, taken as it stores.
            let (epilogue, operands) = match l {
                0 => (
                    Epilogue::add().and_backward_of(Activation::Relu),
                    vec![d_mid, stem],
                ),
                _ => (Epilogue::add(), vec![d_mid]),
            };
            let (put_off, w) = (true, ix.dense);
            dh =
                x.linear_backward_then(put_off, &at, "dense", w, input, d_pre, epilogue, &operands);
        }
        if r + 1 == inputs.len() {
            // Every replicated gradient but the stem's and the embedding's is final here.
            early = x.reduce_final_grads(mode, expert, &[W_IN, EMBED])?;
        }
        let d_pre = match cfg.blocks {
            0 => x.k(
                &at("stem relu backward"),
                ElementwiseOp::ReluBackward,
                &[stem, dh],
            ),
            _ => dh,
        };
        let d_x = x.linear_backward(&at, "stem", W_IN, emb, d_pre);
        let ge = x.k(&at("embed grad"), EmbedGrad::one(VOCAB), &[ctx, d_x]);
        x.grad(EMBED, &at("accumulate embed grad"), ge);
    }
    x.end(mode, bias, early)
}
