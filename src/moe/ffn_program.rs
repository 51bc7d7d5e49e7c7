//! The Switch/GShard expert layer as program nodes, forward and backward: one way for every model
//! that has one (the window LM's blocks, [`crate::train::Trainer`], and the Transformer's MoE FFNs,
//! [`crate::transformer`]).
//!
//! Forward, on every device of the gang, for token rows `x [N, d]`:
//!
//! ```text
//! logits = x · W_r                        [N, E]
//! route (top-K, capacity, Switch priority), dispatch to slots [E·capacity, d]
//! all-to-all to the experts' devices (the kept rows only, super::exchange), each expert's kept
//! counts ahead of them
//! o = act(slots · W1[e]) · W2[e]          per local expert (grouped matmuls over the kept rows)
//! all-to-all back; y = Σ_kept gate · o    [N, d]   (dropped choices add nothing; plus the
//! caller's residual, in the combine's launch)
//! ```
//!
//! The backward follows the same route in reverse: the slots' gradients and the all-to-all to the
//! experts ([`MoeFfn::backward_send`]); then, in an order that lets devices compute while data
//! travels, the router's backward (with the load-balancing and z losses), the experts' input
//! gradients and the all-to-all back, the expert weight gradients (both in one launch, each
//! summed one slot block at a time, so the sum does not depend on how many devices send blocks),
//! and dispatch backward. It
//! returns the input gradient (and, where the caller names a relu under the layer, that relu's
//! backward of it, in the same launch) and the three weight gradients; the caller owns
//! accumulation over rounds. A pipeline schedule that splits the backward into B and W takes the same nodes in two
//! parts: [`MoeFfn::backward_input`] (everything but the weight gradients) and
//! [`MoeFfn::weight_grads`].
//!
//! The token side (router, dispatch, combine and their backward) runs on the shards the caller's
//! [`ProgramBuilder::only_where`] flags say; the expert side (the exchanges and the expert
//! matmuls between them) always runs on every device, since a device with no tokens this round
//! still serves the others' (it sends zero slots, which add exact zeros).
//!
//! The expert side skips empty slots (MegaBlocks' point, on static buffers): the router's kept
//! counts travel with the slots, the expert matmuls and weight gradients run over each slot
//! block's kept rows only ([`crate::kernels::matmul::Limits`]) and store zeros for the rest, and so
//! compute the bits they computed over every slot; and the four all-to-alls move only the kept
//! rows (the exchange is ragged, [`super::exchange::Kept`]: the router's statistics on the token
//! side, their exchanged copy on the expert side). So a capacity factor of `E/K` (every expert's
//! slots can hold the whole group: dropless) costs the expert matmuls and the exchanges what the
//! kept tokens cost, not what the slots cost; the buffers (slots, expert activations) and the
//! dispatch are still sized by the slots.

use super::exchange::{ExpertExchange, Kept, Moving};
use crate::kernels::matmul::{Activation, Epilogue, MatmulVariant, VariantChoice};
use crate::kernels::router::RouterConfig;
use crate::kernels::router::{RouterLoss, STAT_WORDS};
use crate::kernels::{
    Combine, CombineBackwardSlots, Dispatch, DispatchBackward, ExpertWeightGrad, Kernel, Matmul,
    RouterBackward, RouterLinear,
};
use crate::program::Gang;
use crate::program::{ProgramBuilder, Value};
use std::sync::Arc;

pub(crate) use crate::train::step_program::MATMUL;

/// The experts' hidden activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpertActivation {
    Relu,
    /// GELU, tanh form ([`crate::kernels::elementwise::ElementwiseOp::Gelu`]).
    Gelu,
}

/// One expert layer's settings.
#[derive(Debug, Clone, Copy)]
pub struct MoeFfn {
    pub router: RouterConfig,
    pub loss: RouterLoss,
    pub exchange: ExpertExchange,
    pub activation: ExpertActivation,
    pub matmul: MatmulVariant,
}

/// The layer's weights: the router `[d, E]`, and the local experts' `W1 [E/D, d, d_ff]` and
/// `W2 [E/D, d_ff, d]`.
#[derive(Debug, Clone, Copy)]
pub struct MoeFfnWeights {
    pub router: Value,
    pub w1: Value,
    pub w2: Value,
}

/// What the backward needs from the forward.
#[derive(Debug, Clone, Copy)]
pub struct MoeFfnSaved {
    pub input: Value,
    pub logits: Value,
    /// The router's probabilities, routes and statistics.
    pub routing: [Value; 3],
    /// Each token's logsumexp of its router logits (the z-loss's statistic), from the router.
    pub lse: Value,
    /// The experts' outputs back in the slot layout.
    pub expert_out: Value,
    /// The expert devices' token rows (expert-major), and their hidden layer before and after
    /// the activation.
    pub tokens: Value,
    /// The router's per-expert records of the expert devices' slot blocks, in their order: the
    /// first word of each is the block's kept rows.
    pub live: Value,
    /// The hidden layer before the activation: for a relu (the matmul's epilogue), `hidden`.
    pub pre: Value,
    pub hidden: Value,
}

/// What a backward split in two ([`MoeFfn::backward_input`]) keeps for its weight gradients.
#[derive(Debug, Clone, Copy)]
pub struct MoeFfnDeferred {
    input: Value,
    /// The router logits' gradient.
    d_r: Value,
    hidden: Value,
    /// The expert outputs' gradient, arrived at the experts' devices.
    d_o: Value,
    tokens: Value,
    /// The expert hidden layer's gradient before the activation.
    d_pre: Value,
    live: Value,
}

/// The weight gradients of one round (partial: the caller sums them over rounds).
#[derive(Debug, Clone, Copy)]
pub struct MoeFfnGrads {
    pub router: Value,
    pub w1: Value,
    pub w2: Value,
}

impl MoeFfn {
    /// The layer over `devices` expert devices (the gang, or with `axis` each group along that
    /// gang axis) holding `E/D` experts each, routing groups of `group_tokens` rows of
    /// `row_words` values, with the step programs' matmul kernels.
    pub fn new(
        router: RouterConfig,
        loss: RouterLoss,
        (devices, axis): (usize, Option<&'static str>),
        group_tokens: usize,
        row_words: usize,
        activation: ExpertActivation,
    ) -> Self {
        Self {
            router,
            loss,
            exchange: ExpertExchange {
                devices,
                local_experts: router.experts / devices.max(1),
                capacity: router.capacity(group_tokens),
                row_words,
                axis,
            },
            activation,
            matmul: MATMUL,
        }
    }
}

/// Node names are `at(what)`.
pub type Names<'a> = &'a dyn Fn(&str) -> String;

/// One call of the layer's backward, as each of its parts takes it: where it runs, what the
/// forward saved, the weights, the output's gradient, and what the caller joins to the input's
/// gradient.
#[derive(Clone, Copy)]
pub struct BackwardCall<'a> {
    pub gang: &'a Gang,
    pub at: Names<'a>,
    pub saved: &'a MoeFfnSaved,
    pub weights: &'a MoeFfnWeights,
    /// The gradient of the layer's output.
    pub dy: Value,
    /// The residual stream's gradient, summed into the input's (`residual + dispatch grad +
    /// router input grad`, in that order).
    pub residual: Option<Value>,
    /// The output of a relu under the layer (whose output the layer's input summed): the input
    /// gradient's last launch also takes that relu's backward of the gradient
    /// ([`MoeFfn::backward_rest`]).
    pub relu_below: Option<Value>,
}

impl std::fmt::Debug for BackwardCall<'_> {
    /// Everything but the naming function.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackwardCall")
            .field("gang", &self.gang)
            .field("saved", self.saved)
            .field("weights", self.weights)
            .field("dy", &self.dy)
            .field("residual", &self.residual)
            .field("relu_below", &self.relu_below)
            .finish_non_exhaustive()
    }
}

impl MoeFfn {
    fn k(
        b: &mut ProgramBuilder,
        gang: &Gang,
        name: &str,
        op: impl Kernel + 'static,
        inputs: &[Value],
    ) -> Value {
        b.kernel1(name, gang, op, inputs)
    }

    fn matmul(&self, trans_a: bool, trans_b: bool, offsets: Option<Vec<u32>>) -> Matmul {
        Matmul {
            limits: None,
            trans_a,
            trans_b,
            offsets,
            choice: VariantChoice::SameSums(self.matmul),
            f16_accumulate: false,
            epilogue: Epilogue::NONE,
        }
    }

    /// A grouped matmul over the slot blocks (one per local expert and source), each over its
    /// kept rows (a third input: the blocks' router records).
    fn grouped(&self, trans_b: bool) -> Matmul {
        Matmul {
            limits: Some(STAT_WORDS),
            ..self.matmul(false, trans_b, Some(self.exchange.block_offsets()))
        }
    }

    /// The experts' two weight gradients over slot blocks of one source each, each over its kept
    /// rows, in one launch.
    fn weight_grads_kernel(&self) -> ExpertWeightGrad {
        ExpertWeightGrad {
            offsets: self.exchange.expert_offsets(),
            block: self.exchange.capacity,
            limits: Some(STAT_WORDS),
            axis: self.exchange.axis,
            paired: true,
        }
    }

    /// `y [N, d]` for token rows `x [N, d]`, added to `residual` (`[N, d]`) where the caller
    /// has one (in the combine's launch, with the one f32 add a separate add would make), and
    /// what the backward needs.
    pub fn forward(
        &self,
        b: &mut ProgramBuilder,
        gang: &Gang,
        at: Names,
        (x, residual): (Value, Option<Value>),
        w: &MoeFfnWeights,
    ) -> (Value, MoeFfnSaved) {
        // The router's linear layer is computed in the router's first launch.
        let [logits, probs, routes, stats, lse] = b.kernel(
            &at("router"),
            gang,
            Arc::new(RouterLinear(self.router)),
            &[x, w.router],
        );
        // The expert side runs on every device, whichever hold tokens this round. The kept
        // counts go first: they travel while the token side dispatches.
        let counts = self.exchange.per_expert(STAT_WORDS);
        let live = b.only_where(None, |b| {
            counts.send_to_experts(b, &at("all-to-all kept counts"), stats, None)
        });
        let slots = Self::k(
            b,
            gang,
            &at("dispatch"),
            Dispatch(self.router),
            &[x, probs, routes, stats],
        );
        let (tokens, live, pre, hidden, expert_out) = b.only_where(None, |b| {
            // The counts' exchange went first: its output says which rows move.
            let live = counts.arrived(live);
            let moving = self.exchange.send_to_experts(
                b,
                &at("all-to-all forward"),
                slots,
                Some(Kept::sent(live)),
            );
            let tokens = self.exchange.arrived(moving);
            // The activation is the matmul's epilogue: a relu's backward needs only its output;
            // GELU's backward needs its input, which the matmul keeps as a second output.
            let epilogue = match self.activation {
                ExpertActivation::Relu => Epilogue::relu(),
                ExpertActivation::Gelu => Epilogue::gelu().keeping(),
            };
            let op = Arc::new(Matmul {
                epilogue,
                ..self.grouped(false)
            });
            let (name, inputs) = (at("expert w1"), [tokens, w.w1, live]);
            let (pre, hidden) = match self.activation {
                ExpertActivation::Relu => {
                    let [hidden] = b.kernel(&name, gang, op, &inputs);
                    (hidden, hidden)
                }
                ExpertActivation::Gelu => {
                    let [hidden, pre] = b.kernel(&name, gang, op, &inputs);
                    (pre, hidden)
                }
            };
            let out = Self::k(
                b,
                gang,
                &at("expert w2"),
                self.grouped(false),
                &[hidden, w.w2, live],
            );
            let reverse = at("all-to-all reverse");
            let expert_out = self
                .exchange
                .to_tokens(b, &reverse, out, Some(Kept::received(live)));
            (tokens, live, pre, hidden, expert_out)
        });
        let mut inputs = vec![expert_out, probs, routes, stats];
        inputs.extend(residual);
        let y = Self::k(b, gang, &at("combine"), Combine(self.router), &inputs);
        let saved = MoeFfnSaved {
            input: x,
            logits,
            routing: [probs, routes, stats],
            lse,
            expert_out,
            tokens,
            live,
            pre,
            hidden,
        };
        (y, saved)
    }

    /// The gradient of the layer's input given its output's (`cx.dy`), with `cx.residual` added
    /// where the caller has one, and the weight gradients: [`Self::backward_send`], then
    /// [`Self::backward_rest`].
    pub fn backward(&self, b: &mut ProgramBuilder, cx: &BackwardCall<'_>) -> (Value, MoeFfnGrads) {
        let sent = self.backward_send(b, cx);
        let (dx, _, grads) = self.backward_rest(b, cx, sent);
        (dx, grads)
    }

    /// The backward's first part: the slots' gradients, on their way to the experts' devices
    /// (for [`Self::backward_rest`]). A caller
    /// that has work independent of the layer (a weight gradient of the layer above) puts it
    /// between this and [`Self::backward_rest`], where devices run it while the slots travel.
    pub fn backward_send(&self, b: &mut ProgramBuilder, cx: &BackwardCall<'_>) -> Moving {
        let BackwardCall {
            gang,
            at,
            saved: s,
            dy,
            ..
        } = *cx;
        let [probs, routes, stats] = s.routing;
        let d_out = Self::k(
            b,
            gang,
            &at("combine backward"),
            CombineBackwardSlots(self.router),
            &[dy, probs, routes, stats],
        );
        b.only_where(None, |b| {
            self.exchange.send_to_experts(
                b,
                &at("all-to-all backward"),
                d_out,
                Some(Kept::sent(s.live)),
            )
        })
    }

    /// The rest of the backward after [`Self::backward_send`]. The order is the one that hides
    /// the exchanges: a device's worker runs later nodes while one waits for other devices' data,
    /// up to the first node that needs that data. So the router's backward (which needs only
    /// `dy`) comes while the slots travel to the experts, and the expert weight gradients while
    /// the input gradients travel back; the inputs' gradients, which the exchanges wait on, come
    /// first on each side.
    ///
    /// With `relu_below`, the output of a relu under the layer (whose output the layer's input
    /// summed), the input gradient's last launch also takes that relu's backward of the gradient:
    /// the second value returned (`dx` itself without one).
    pub fn backward_rest(
        &self,
        b: &mut ProgramBuilder,
        cx: &BackwardCall<'_>,
        sent: Moving,
    ) -> (Value, Value, MoeFfnGrads) {
        let (dx, masked, _, router, experts) = self.backward_inner(b, cx, sent, Defer::Nothing);
        let (Some(router), Some((w1, w2))) = (router, experts) else {
            unreachable!("a backward deferring nothing computes every weight gradient")
        };
        (dx, masked, MoeFfnGrads { router, w1, w2 })
    }

    /// [`Self::backward_rest`] leaving the router's weight gradient to the caller: in its place,
    /// its factors `(input, d_r)` (the gradient is `inputᵀ · d_r`), so that a step can put it
    /// off and compute it beside another layer's (a step's paired weight gradients).
    /// Returns `(dx, below, (input, d_r), (dW1, dW2))`.
    pub fn backward_rest_router_later(
        &self,
        b: &mut ProgramBuilder,
        cx: &BackwardCall<'_>,
        sent: Moving,
    ) -> (Value, Value, (Value, Value), (Value, Value)) {
        let (dx, masked, kept, _, experts) = self.backward_inner(b, cx, sent, Defer::Router);
        let Some(experts) = experts else {
            unreachable!("a backward deferring the router's gradient computes the experts'")
        };
        (dx, masked, (kept.input, kept.d_r), experts)
    }

    /// The backward without the weight gradients, for a schedule that splits the backward into
    /// B (the input gradient, on the critical path) and W ([`Self::weight_grads`] of what this
    /// keeps, later): the same nodes as [`Self::backward`] but the three weight-gradient ones.
    pub fn backward_input(
        &self,
        b: &mut ProgramBuilder,
        cx: &BackwardCall<'_>,
    ) -> (Value, MoeFfnDeferred) {
        let sent = self.backward_send(b, cx);
        let (dx, _, kept, _, _) = self.backward_inner(b, cx, sent, Defer::All);
        (dx, kept)
    }

    /// The weight gradients of a backward whose [`Self::backward_input`] kept `d`: the router's,
    /// and the experts' over their slot blocks (the bits [`Self::backward`] computes).
    pub fn weight_grads(
        &self,
        b: &mut ProgramBuilder,
        gang: &Gang,
        at: Names,
        d: &MoeFfnDeferred,
    ) -> MoeFfnGrads {
        let router = Self::k(
            b,
            gang,
            &at("router weight grad"),
            self.matmul(true, false, None),
            &[d.input, d.d_r],
        );
        let (w1, w2) = b.only_where(None, |b| self.expert_weight_grads(b, gang, at, d));
        MoeFfnGrads { router, w1, w2 }
    }

    /// `(dW1, dW2)` of the local experts (every device runs them, see the module docs).
    fn expert_weight_grads(
        &self,
        b: &mut ProgramBuilder,
        gang: &Gang,
        at: Names,
        d: &MoeFfnDeferred,
    ) -> (Value, Value) {
        // dW2 first, as the products' order has been: hidden · d_o, then tokens · d_pre.
        let [gw2, gw1] = b.kernel(
            &at("expert weight grads"),
            gang,
            Arc::new(self.weight_grads_kernel()),
            &[d.hidden, d.d_o, d.tokens, d.d_pre, d.live],
        );
        (gw1, gw2)
    }

    /// [`Self::backward_rest`]'s nodes, without the weight gradients `defer` names (`None`):
    /// `(dx, below, what the deferred ones need, the router's, the experts')`.
    fn backward_inner(
        &self,
        b: &mut ProgramBuilder,
        cx: &BackwardCall<'_>,
        sent: Moving,
        defer: Defer,
    ) -> (
        Value,
        Value,
        MoeFfnDeferred,
        Option<Value>,
        Option<(Value, Value)>,
    ) {
        let BackwardCall {
            gang,
            at,
            saved: s,
            weights: w,
            dy,
            residual,
            relu_below,
        } = *cx;
        let [probs, routes, stats] = s.routing;
        // The gates' gradients are computed in the router backward's launch.
        let d_r = Self::k(
            b,
            gang,
            &at("router backward"),
            RouterBackward(self.router, self.loss),
            &[s.logits, dy, s.expert_out, probs, routes, stats],
        );
        let g_router = (defer == Defer::Nothing).then(|| {
            Self::k(
                b,
                gang,
                &at("router weight grad"),
                self.matmul(true, false, None),
                &[s.input, d_r],
            )
        });
        // The expert side runs on every device, whichever hold tokens this round.
        let (kept, expert_grads, d_slots) = b.only_where(None, |b| {
            let d_o = self.exchange.arrived(sent);
            let input_grad = at("expert w2 input grad");
            // The activation's backward is the input gradient's epilogue: a relu's reads its
            // output, GELU's its input.
            let (epilogue, saved) = match self.activation {
                ExpertActivation::Relu => (Epilogue::backward_of(Activation::Relu), s.hidden),
                ExpertActivation::Gelu => (Epilogue::backward_of(Activation::Gelu), s.pre),
            };
            let op = Matmul {
                epilogue,
                ..self.grouped(true)
            };
            let d_pre = Self::k(b, gang, &input_grad, op, &[d_o, w.w2, s.live, saved]);
            let d_tok = Self::k(
                b,
                gang,
                &at("expert w1 input grad"),
                self.grouped(true),
                &[d_pre, w.w1, s.live],
            );
            let d_slots = self.exchange.to_tokens(
                b,
                &at("all-to-all backward reverse"),
                d_tok,
                Some(Kept::received(s.live)),
            );
            let kept = MoeFfnDeferred {
                input: s.input,
                d_r,
                hidden: s.hidden,
                d_o,
                tokens: s.tokens,
                d_pre,
                live: s.live,
            };
            let grads = (defer != Defer::All).then(|| self.expert_weight_grads(b, gang, at, &kept));
            (kept, grads, d_slots)
        });
        // The residual stream's gradient joins the dispatch's backward in its launch.
        let mut inputs = vec![d_slots, probs, routes, stats];
        inputs.extend(residual);
        let name = at("dispatch backward");
        let dx = Self::k(b, gang, &name, DispatchBackward(self.router), &inputs);
        // dx + the router's input gradient, summed by its matmul as it stores; with a relu below,
        // its backward of the sum as well, in the same launch.
        let name = at("router input grad");
        let epilogue = match relu_below {
            None => Epilogue::add(),
            Some(_) => Epilogue::add().and_backward_of(Activation::Relu).keeping(),
        };
        let add = Matmul {
            epilogue,
            ..self.matmul(false, true, None)
        };
        let mut inputs = vec![d_r, w.router, dx];
        inputs.extend(relu_below);
        let (dx, masked) = match relu_below {
            None => {
                let dx = Self::k(b, gang, &name, add, &inputs);
                (dx, dx)
            }
            Some(_) => {
                let [masked, sum] = b.kernel(&name, gang, Arc::new(add), &inputs);
                (sum, masked)
            }
        };
        (dx, masked, kept, g_router, expert_grads)
    }
}

/// Which weight gradients a backward leaves out (to be computed later from what it keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Defer {
    Nothing,
    /// The router's: the caller computes it ([`MoeFfn::backward_rest_router_later`]).
    Router,
    /// All three ([`MoeFfn::backward_input`], then [`MoeFfn::weight_grads`]).
    All,
}
