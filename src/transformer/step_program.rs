//! The Transformer's step as one compiled [`Program`] over a gang of `D` devices: per round, every
//! device's routing group through the model ([`super`] documents it) and back, then every
//! model's step end ([`StepEnd`]: the all-reduce of the replicated gradients, started in the last
//! round before the embeddings' gradients for all but theirs, then `1/G` and Adam). Expert
//! layers are [`MoeFfn`] nodes with GELU experts, expert-parallel over the gang's one axis as in
//! the MoE trainer, or over the `expert` axis of a `{data, expert}` mesh, whose
//! expert gradients are then all-reduced over `data`; attention takes the projections' rows as
//! they are ([`Attention::seq`]), so each sequence stays whole on its device.
//!
//! Every kernel's summation order is independent of the rows a device holds, and the expert
//! weight gradients sum one slot block at a time, so with one axis `D` devices compute the bits
//! one device computes over the same `G` groups; with a data axis the expert gradients' replicas
//! add in another order (f32 rounding).
//!
//! With an uneven [`crate::train::GroupSplit`] a device runs only the rounds it holds groups
//! for: in the others its token side is idle shards of their nodes, while its experts serve every
//! round.
//!
//! Where an expert layer's backward comes next (after the head, when the last layer is one;
//! after a layer's attention, when the layer below is one), the backward puts those linear layers'
//! weight gradients off until that layer's slots are sent ([`Builder::linear_backward_put_off`]),
//! so devices compute them while the all-to-all travels; each is the same product, added in the
//! same order. Elsewhere they come soon, while their inputs are still in a CPU device's caches:
//! a dense FFN's two after w1's input gradient, the four projections' after v's. Weight gradients
//! that come together run two to a launch (the train step's paired weight gradients, with the
//! bits of its `Aᵀ·B` matmul): out with q, k with v, w2 with w1.
//!
//! The forward's pieces (`embed`, `attention_in`, `layer_rest`, `head`) are shared with
//! [`super::decoder`], which runs the same layers with cached attention. Residual adds, GELU (which
//! keeps its input for the backward) and GELU's backward are matmul epilogues; the two embedding
//! gradients are one launch.

use super::{FfnIndex, LayerIndex, TransformerConfig, VOCAB};
use crate::Result;
use crate::kernels::attention::default_scale;
use crate::kernels::matmul::{Activation, Epilogue};
use crate::kernels::{
    Attention, AttentionBackward, EmbedGather, EmbedGrad, LayerNorm, LayerNormBackward, TensorType,
};
use crate::moe::ffn_program::{
    BackwardCall, ExpertActivation, MoeFfn, MoeFfnSaved, MoeFfnWeights, Names,
};
use crate::program::{Program, Value};
use crate::train::StepShape;
use crate::train::step_program::{Builder, Mode};
use std::sync::Arc;

/// What one layer's backward needs.
struct LayerAct {
    input: Value,
    a: Value,
    ln1: Value,
    q: Value,
    k: Value,
    v: Value,
    o: Value,
    lse: Value,
    mid: Value,
    f: Value,
    ln2: Value,
    ffn: FfnAct,
}

pub(super) enum FfnAct {
    Dense { pre: Value, hidden: Value },
    Moe(MoeFfnSaved),
}

impl Builder<'_, StepShape<TransformerConfig>> {
    fn norm(&mut self, name: &str, x: Value, [g, b]: [usize; 2]) -> (Value, Value) {
        let eps = self.shape.config.eps;
        let (gamma, beta) = (self.params[g], self.params[b]);
        let [y, stats] = self.b.kernel(
            name,
            self.gang.clone(),
            Arc::new(LayerNorm { eps }),
            &[x, gamma, beta],
        );
        (y, stats)
    }

    /// LayerNorm's backward: adds its γ and β gradients, returns the input's, plus `residual`
    /// (the gradient reaching the same input around the norm's branch) where given, in the same
    /// launch.
    fn norm_backward(
        &mut self,
        name: &str,
        (x, stats, dy): (Value, Value, Value),
        residual: Option<Value>,
        [g, b]: [usize; 2],
    ) -> Value {
        let gamma = self.params[g];
        let mut inputs = vec![x, gamma, stats, dy];
        inputs.extend(residual);
        let [dx, dg, db] = self.b.kernel(
            name,
            self.gang.clone(),
            Arc::new(LayerNormBackward),
            &inputs,
        );
        self.grad(g, &format!("accumulate {name} γ"), dg);
        self.grad(b, &format!("accumulate {name} β"), db);
        dx
    }

    fn attention(&self) -> (usize, bool, f32, Option<usize>) {
        let c = &self.shape.config;
        (c.heads, true, default_scale(c.head_dim()), Some(c.context))
    }

    /// The expert layer for `rows` token rows, routed as one group.
    fn ffn(&self, rows: usize) -> MoeFfn {
        let (cfg, s) = (&self.shape.config, self.shape);
        let (router, loss) = (cfg.router(), cfg.router_loss());
        MoeFfn::new(
            router,
            loss,
            s.expert_mesh(),
            rows,
            cfg.model,
            ExpertActivation::Gelu,
        )
    }

    /// The token and position embeddings of `ids` at `positions`, gathered and added in one
    /// launch.
    pub(super) fn embed(&mut self, name: &str, ids: Value, positions: Value) -> Value {
        let (tok, pos) = (self.params[0], self.params[1]);
        self.k(name, EmbedGather, &[ids, tok, positions, pos])
    }

    /// A layer's attention inputs from the residual stream `h`: `[a, ln1, q, k, v]` (the norm,
    /// its statistics, the three projections).
    pub(super) fn attention_in(&mut self, at: Names, ix: &LayerIndex, h: Value) -> [Value; 5] {
        let (a, ln1) = self.norm(&at("ln1"), h, ix.ln1);
        let q = self.mm(&at("q"), a, self.params[ix.wq], false, false);
        let k = self.mm(&at("k"), a, self.params[ix.wk], false, false);
        let v = self.mm(&at("v"), a, self.params[ix.wv], false, false);
        [a, ln1, q, k, v]
    }

    /// The rest of a layer from its attention's output `o` over the residual stream `h`, the
    /// FFN routing `rows` token rows as one group: `(next h, mid, f, ln2, the FFN's saved
    /// values)`.
    pub(super) fn layer_rest(
        &mut self,
        at: Names,
        ix: &LayerIndex,
        (h, o): (Value, Value),
        rows: usize,
    ) -> (Value, [Value; 3], FfnAct) {
        let gang = self.gang.clone();
        // Residual connections are their matmuls' epilogues: h + o · Wo.
        let (add, wo) = (Epilogue::add(), self.params[ix.wo]);
        let mid = self.mm_then(&at("attention out"), o, wo, false, false, add, &[h]);
        let (f, ln2) = self.norm(&at("ln2"), mid, ix.ln2);
        let (next, ffn) = match ix.ffn {
            FfnIndex::Dense { w1, w2 } => {
                // GELU is the matmul's epilogue, which keeps its input for the backward.
                let (gelu, w1) = (Epilogue::gelu().keeping(), self.params[w1]);
                let [hidden, pre] = self.mm_keeping(&at("ffn w1"), f, w1, gelu, &[]);
                let w2 = self.params[w2];
                let h = self.mm_then(&at("ffn w2"), hidden, w2, false, false, add, &[mid]);
                (h, FfnAct::Dense { pre, hidden })
            }
            FfnIndex::Moe { router, w1, w2 } => {
                let ffn = self.ffn(rows);
                let w = MoeFfnWeights {
                    router: self.params[router],
                    w1: self.params[w1],
                    w2: self.params[w2],
                };
                // The residual connection is the combine's, in its launch.
                let (h, saved) = ffn.forward(&mut self.b, &gang, at, (f, Some(mid)), &w);
                (h, FfnAct::Moe(saved))
            }
        };
        (next, [mid, f, ln2], ffn)
    }

    /// The final norm and the head: `(z, its statistics, logits)`.
    pub(super) fn head(&mut self, at: Names, h: Value) -> [Value; 3] {
        let cfg = self.shape.config;
        let (z, ln_f) = self.norm(&at("ln_f"), h, cfg.final_norm_index());
        let logits = self.mm(
            &at("head"),
            z,
            self.params[cfg.head_index()],
            false,
            cfg.tied,
        );
        [z, ln_f, logits]
    }
}

/// Builds the step program for `shape` in `mode`. Arguments: the positions (u32 `[rows, 1]`
/// per device, `t mod T`), then per round the token ids (u32 `[rows, 1]`) and targets (u32
/// `[rows]`); then for training the step's Adam bias corrections (f32 `[2]` per device).
pub(super) fn build(shape: &StepShape<TransformerConfig>, mode: Mode) -> Result<Program> {
    let cfg = shape.config;
    let expert = cfg.expert_tensors();
    let mut x = Builder::begin("transformer", shape, mode);
    if let Mode::Read(_) = mode {
        return x.read_back();
    }
    let gang = x.gang.clone();
    let n = shape.rows();
    let positions = x.b.typed_arg(&gang, TensorType::u32(&[n, 1]));
    let (inputs, bias) = x.batch_args(mode, TensorType::u32(&[n, 1]), TensorType::u32(&[n]));
    let (heads, causal, scale, seq) = x.attention();
    let [gf, bf] = cfg.final_norm_index();
    let head = cfg.head_index();
    let mut early = None;
    for (r, &(ids, tgt)) in inputs.iter().enumerate() {
        let at = |what: &str| format!("r{r} {what}");
        // The token side of a round runs on the devices holding a group in it; the expert
        // layers serve every device.
        x.b.set_active(shape.split.active(r));
        // ---- forward
        let mut h = x.embed(&at("embeddings"), ids, positions);
        let mut acts = Vec::with_capacity(cfg.layers);
        for l in 0..cfg.layers {
            let ix = cfg.layer_index(l);
            let at = |what: &str| format!("r{r} l{l} {what}");
            let input = h;
            let [a, ln1, q, k, v] = x.attention_in(&at, &ix, h);
            let attn = Attention {
                heads,
                causal,
                scale,
                seq,
            };
            let [o, lse] =
                x.b.kernel(&at("attention"), &gang, Arc::new(attn), &[q, k, v]);
            let (next, [mid, f, ln2], ffn) = x.layer_rest(&at, &ix, (h, o), n);
            h = next;
            acts.push(LayerAct {
                input,
                a,
                ln1,
                q,
                k,
                v,
                o,
                lse,
                mid,
                f,
                ln2,
                ffn,
            });
        }
        let last = h;
        let [z, ln_f, logits] = x.head(&at, last);
        let routers: Vec<_> = (acts.iter())
            .filter_map(|a| match &a.ffn {
                FfnAct::Moe(s) => Some((s.routing[2], s.lse)),
                FfnAct::Dense { .. } => None,
            })
            .collect();
        let d_logits = x.loss(&at, mode, logits, tgt, &routers);
        if mode == Mode::Forward {
            continue;
        }
        // ---- backward
        let dz = if cfg.tied {
            // logits = z · Eᵀ: dE += d_logitsᵀ · z, dz = d_logits · E.
            let g = x.mm(&at("head weight grad"), d_logits, z, true, false);
            x.grad(head, &at("accumulate head grad"), g);
            x.mm(
                &at("head input grad"),
                d_logits,
                x.params[head],
                false,
                false,
            )
        } else {
            // Put off only where an expert layer's send comes next: over a longer stretch the
            // product loses its inputs from the caches of a CPU-backed device.
            let next_sends = cfg.is_moe(cfg.layers - 1);
            x.linear_backward_put_off(next_sends, &at, "head", head, z, d_logits)
        };
        let mut dh = x.norm_backward(&at("ln_f backward"), (last, ln_f, dz), None, [gf, bf]);
        for l in (0..cfg.layers).rev() {
            let ix = cfg.layer_index(l);
            let at = |what: &str| format!("r{r} l{l} {what}");
            let a = &acts[l];
            let df = match (&a.ffn, ix.ffn) {
                (FfnAct::Dense { pre, hidden }, FfnIndex::Dense { w1, w2 }) => {
                    let (pre, hidden) = (*pre, *hidden);
                    // GELU's backward is the input gradient's epilogue. The two weight
                    // gradients are one launch, after w1's input gradient.
                    let gelu = Epilogue::backward_of(Activation::Gelu);
                    let d_pre =
                        x.linear_backward_then(true, &at, "ffn w2", w2, hidden, dh, gelu, &[pre]);
                    x.linear_backward(&at, "ffn w1", w1, a.f, d_pre)
                }
                (FfnAct::Moe(saved), FfnIndex::Moe { router, w1, w2 }) => {
                    let ffn = x.ffn(n);
                    let w = MoeFfnWeights {
                        router: x.params[router],
                        w1: x.params[w1],
                        w2: x.params[w2],
                    };
                    let cx = BackwardCall {
                        gang: &gang,
                        at: &at,
                        saved,
                        weights: &w,
                        dy: dh,
                        residual: None,
                        relu_below: None,
                    };
                    let sent = ffn.backward_send(&mut x.b, &cx);
                    x.weight_grads_now();
                    let (df, _, g) = ffn.backward_rest(&mut x.b, &cx, sent);
                    // Every device computed its experts' gradients this round.
                    let token_side = x.b.set_active(None);
                    x.grad(w2, &at("accumulate w2 grad"), g.w2);
                    x.grad(w1, &at("accumulate w1 grad"), g.w1);
                    x.b.set_active(token_side);
                    x.grad(router, &at("accumulate router grad"), g.router);
                    df
                }
                _ => unreachable!("a layer's activations follow its index"),
            };
            // The FFN's residual gradient joins the norm's in its launch.
            let d_mid = x.norm_backward(&at("ln2 backward"), (a.mid, a.ln2, df), Some(dh), ix.ln2);
            // The next send is layer l − 1's, when its FFN is an expert layer. The four
            // projections' weight gradients wait at least for v's input gradient: they are two
            // launches of two (out with q, k with v).
            let next_sends = l > 0 && cfg.is_moe(l - 1);
            let d_o = x.linear_backward_put_off(true, &at, "attention out", ix.wo, a.o, d_mid);
            let back = AttentionBackward {
                heads,
                causal,
                scale,
                seq,
            };
            let [dq, dk, dv] = x.b.kernel(
                &at("attention backward"),
                &gang,
                Arc::new(back),
                &[a.q, a.k, a.v, a.o, a.lse, d_o],
            );
            // The q, k and v input gradients summed by the k and v matmuls as they store.
            let mut da = x.linear_backward_put_off(true, &at, "q", ix.wq, a.a, dq);
            let add = Epilogue::add();
            da = x.linear_backward_then(true, &at, "k", ix.wk, a.a, dk, add, &[da]);
            da = x.linear_backward_then(next_sends, &at, "v", ix.wv, a.a, dv, add, &[da]);
            dh = x.norm_backward(
                &at("ln1 backward"),
                (a.input, a.ln1, da),
                Some(d_mid),
                ix.ln1,
            );
        }
        if r + 1 == inputs.len() {
            // Every replicated gradient but the embeddings' is final here: its sum travels
            // while the embedding gradients run.
            early = x.reduce_final_grads(mode, &expert, &[0, 1])?;
        }
        x.weight_grads_now();
        // Both tables' gradients in one launch.
        let grads = EmbedGrad {
            vocab: VOCAB,
            second: Some(cfg.context),
        };
        let name = at("embedding grads");
        let [g_tok, g_pos] =
            x.b.kernel(&name, &gang, Arc::new(grads), &[ids, dh, positions]);
        x.grad(0, &at("accumulate token embedding grad"), g_tok);
        x.grad(1, &at("accumulate position embedding grad"), g_pos);
    }
    x.end(mode, bias, early)
}
