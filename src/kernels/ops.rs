//! Every kernel a training program needs, as one [`Kernel`] enum a program node can hold: output
//! types from input types, and preparing into the program's buffers through each kernel module's
//! own `encode_*` (recorded once into a [`Prepared`], replayed by every run).

use super::copy_blocks::{self, Block};
use super::lm_train::{self as lt, AdamConfig, RouterLoss};
use super::matmul::{self, MatmulArgs, MatmulOptions, MatmulVariant, VariantChoice};
use super::router::{self, ExpertStat, Route, RouterConfig, Routing};
use super::{Kernel, Prepared, TensorType, mlp, moe_dispatch, sharding_rules};
use crate::device::Recorder;
use crate::named_sharding::NamedSharding;
use crate::{DType, Error, Result, Tensor};

/// Words of one [`Route`] and of one [`ExpertStat`].
pub const ROUTE_WORDS: usize = std::mem::size_of::<Route>() / 4;
pub const STAT_WORDS: usize = std::mem::size_of::<ExpertStat>() / 4;

/// A kernel as a program node. Routing kernels take the router's three outputs (`probs`, `routes`,
/// `stats`) as their last three inputs.
#[derive(Debug, Clone)]
pub enum KernelOp {
    /// `op(a) · op(b)`; with `offsets`, grouped: rows `offsets[g]..offsets[g+1]` times `b[g]`.
    /// `variant` is used where it applies to the shape, else the tiled kernel: a choice fixed by
    /// the shape alone, so every device sums in the same order.
    Matmul {
        trans_a: bool,
        trans_b: bool,
        offsets: Option<Vec<u32>>,
        variant: MatmulVariant,
    },
    /// `(grad, act) → grad · (act > 0)`.
    ReluBackward,
    /// `(acc, x) → acc + x`, in place of `acc`.
    Accumulate,
    /// `(y, target) → 2 (y − target) / n`, the gradient of the mean squared error.
    MseGrad,
    /// `(w, g) → w − lr · g`, in place of `w`.
    Sgd { lr: f32 },
    /// `(contexts u32 [T, C], table [V, E]) → [T, C·E]`.
    EmbedGather,
    /// `(contexts, d_x [T, C·E]) → [vocab, E]`.
    EmbedGrad { vocab: usize },
    /// `(logits [T, V], targets u32 [T]) → (loss [T], d_logits [T, V])`.
    CrossEntropy,
    /// `x [T, N] → [T]`.
    RowLogsumexp,
    /// `logits [T, E] → (probs [T, E], routes u32, stats u32)`.
    Route(RouterConfig),
    /// `(x [T, d], routing) → [E·capacity, d]`.
    Dispatch(RouterConfig),
    /// `(y [E·capacity, d], routing) → [T, d]`.
    Combine(RouterConfig),
    /// `(dy [T, d], slots [E·capacity, d], routing) → d_gate [T, K]`.
    GateGrad(RouterConfig),
    /// `(dy [T, d], routing) → [E·capacity, d]`.
    CombineBackwardSlots(RouterConfig),
    /// `(d_slots [E·capacity, d], routing) → [T, d]`.
    DispatchBackward(RouterConfig),
    /// `(logits, d_gate, routing) → d_logits [T, E]`.
    RouterBackward(RouterConfig, RouterLoss),
    /// `(a [R, I], b [R, N]) → [G, I, N]`, per row group of static `offsets`, summed `block` rows
    /// at a time (0: a group at once; see [`lt::encode_expert_weight_grad`]).
    ExpertWeightGrad { offsets: Vec<u32>, block: usize },
    /// `(param, m, v, grad, bias [2]) → (param, m, v)`, in place; `bias` is the step's
    /// [`AdamConfig::bias`], given at run time.
    Adam(AdamConfig),
    /// `x → x` with blocks of `row_words`-word rows moved; every row of the output is written.
    Permute {
        blocks: Vec<Block>,
        row_words: usize,
    },
    /// Every input's words one after another, as one flat `dtype` value.
    Pack { dtype: DType },
    /// One flat value cut into values of `types` (4-byte elements).
    Unpack { types: Vec<TensorType> },
}

fn bad(what: &'static str, reason: String) -> Error {
    Error::InvalidArgument { what, reason }
}

fn arity(what: &'static str, inputs: &[TensorType], n: usize) -> Result<()> {
    if inputs.len() == n {
        Ok(())
    } else {
        Err(bad(what, format!("takes {n} inputs, got {}", inputs.len())))
    }
}

fn dims2(what: &'static str, t: &TensorType) -> Result<(usize, usize)> {
    match *t.shape.as_slice() {
        [r, c] => Ok((r, c)),
        _ => Err(bad(what, format!("needs a 2-d value, got {t}"))),
    }
}

fn routing(config: RouterConfig, probs: &Tensor, routes: &Tensor, stats: &Tensor) -> Routing {
    let tokens = probs.shape().first().copied().unwrap_or(0);
    Routing {
        tokens,
        config,
        capacity: config.capacity(tokens),
        probs: probs.clone(),
        routes: routes.buffer().clone(),
        stats: stats.buffer().clone(),
    }
}

/// Tokens of a routing given as inputs `at..at + 3`, checked.
fn routed_tokens(
    what: &'static str,
    config: &RouterConfig,
    inputs: &[TensorType],
    at: usize,
) -> Result<usize> {
    let (t, e) = dims2(what, &inputs[at])?;
    if e != config.experts
        || inputs[at + 1] != TensorType::u32(&[t * config.k * ROUTE_WORDS])
        || inputs[at + 2] != TensorType::u32(&[e * STAT_WORDS])
    {
        return Err(bad(
            what,
            "the routing inputs do not match the router".into(),
        ));
    }
    Ok(t)
}

impl KernelOp {
    fn matmul_offsets(offsets: &Option<Vec<u32>>, m: usize) -> Vec<u32> {
        offsets.clone().unwrap_or_else(|| vec![0, m as u32])
    }
}

impl Kernel for KernelOp {
    fn kind(&self) -> &'static str {
        match self {
            Self::Matmul { offsets: None, .. } => "matmul",
            Self::Matmul { .. } => "grouped_matmul",
            Self::ReluBackward => "relu_backward",
            Self::Accumulate => "accumulate",
            Self::MseGrad => "mse_grad",
            Self::Sgd { .. } => "sgd",
            Self::EmbedGather => "embed_gather",
            Self::EmbedGrad { .. } => "embed_grad",
            Self::CrossEntropy => "cross_entropy",
            Self::RowLogsumexp => "row_logsumexp",
            Self::Route(_) => "router",
            Self::Dispatch(_) => "dispatch",
            Self::Combine(_) => "combine",
            Self::GateGrad(_) => "gate_grad",
            Self::CombineBackwardSlots(_) => "combine_backward_slots",
            Self::DispatchBackward(_) => "dispatch_backward",
            Self::RouterBackward(..) => "router_backward",
            Self::ExpertWeightGrad { .. } => "expert_weight_grad",
            Self::Adam(_) => "adam",
            Self::Permute { .. } => "permute",
            Self::Pack { .. } => "pack",
            Self::Unpack { .. } => "unpack",
        }
    }

    fn transposed(&self) -> bool {
        // The expert weight gradient is a transposed product too (aᵀ·b per group).
        matches!(
            self,
            Self::Matmul { trans_a: true, .. }
                | Self::Matmul { trans_b: true, .. }
                | Self::ExpertWeightGrad { .. }
        )
    }

    fn shardings(&self, inputs: &[NamedSharding], outputs: &[TensorType]) -> sharding_rules::Rule {
        match self {
            Self::Matmul {
                trans_a, trans_b, ..
            } => sharding_rules::matmul(inputs, *trans_a, *trans_b),
            Self::EmbedGrad { .. } => sharding_rules::embed_grad(inputs, outputs),
            Self::Accumulate | Self::Sgd { .. } => sharding_rules::in_place(inputs, 1, 0),
            // (param, m, v, grad) alike; the bias corrections are the step's constants.
            Self::Adam(_) => sharding_rules::in_place(inputs, 3, 1),
            Self::Pack { .. } => sharding_rules::pack(inputs),
            Self::Unpack { .. } => sharding_rules::unpack(inputs, outputs),
            _ => sharding_rules::rows(inputs, outputs),
        }
    }

    fn in_place(&self) -> Vec<(usize, usize)> {
        match self {
            Self::Accumulate | Self::Sgd { .. } => vec![(0, 0)],
            Self::Adam(_) => vec![(0, 0), (1, 1), (2, 2)],
            _ => Vec::new(),
        }
    }

    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let what = self.kind();
        let f32s = |shape: &[usize]| TensorType::f32(shape);
        Ok(match self {
            Self::Matmul {
                trans_a, trans_b, ..
            } => {
                arity(what, inputs, 2)?;
                let (r, c) = dims2(what, &inputs[0])?;
                let (m, k) = if *trans_a { (c, r) } else { (r, c) };
                let (kb, n) = match (inputs[1].shape.as_slice(), trans_b) {
                    ([k, n], false) | ([_, k, n], false) | ([n, k], true) | ([_, n, k], true) => {
                        (*k, *n)
                    }
                    _ => return Err(bad(what, format!("b is {}", inputs[1]))),
                };
                if k != kb {
                    return Err(bad(
                        what,
                        format!("inner dimensions differ: {} · {}", inputs[0], inputs[1]),
                    ));
                }
                // f32, or f16 where the adapter has it (the kernel checks at prepare).
                let dtype = inputs[0].dtype;
                if dtype != inputs[1].dtype || dtype == DType::U32 {
                    return Err(bad(
                        what,
                        format!(
                            "needs two f32 or two f16 operands: {} · {}",
                            inputs[0], inputs[1]
                        ),
                    ));
                }
                vec![TensorType::new(dtype, &[m, n])]
            }
            Self::ReluBackward => {
                arity(what, inputs, 2)?;
                vec![inputs[0].clone()]
            }
            Self::MseGrad => {
                arity(what, inputs, 2)?;
                vec![inputs[0].clone()]
            }
            Self::Accumulate | Self::Sgd { .. } => {
                arity(what, inputs, 2)?;
                if inputs[0] != inputs[1] {
                    return Err(bad(what, format!("{} += {}", inputs[0], inputs[1])));
                }
                vec![inputs[0].clone()]
            }
            Self::EmbedGather => {
                arity(what, inputs, 2)?;
                let (t, c) = dims2(what, &inputs[0])?;
                let (_, e) = dims2(what, &inputs[1])?;
                vec![f32s(&[t, c * e])]
            }
            Self::EmbedGrad { vocab } => {
                arity(what, inputs, 2)?;
                let (_, c) = dims2(what, &inputs[0])?;
                let (_, w) = dims2(what, &inputs[1])?;
                if c == 0 || !w.is_multiple_of(c) {
                    return Err(bad(what, format!("width {w} for context {c}")));
                }
                vec![f32s(&[*vocab, w / c])]
            }
            Self::CrossEntropy => {
                arity(what, inputs, 2)?;
                let (t, v) = dims2(what, &inputs[0])?;
                vec![f32s(&[t]), f32s(&[t, v])]
            }
            Self::RowLogsumexp => {
                arity(what, inputs, 1)?;
                let (t, _) = dims2(what, &inputs[0])?;
                vec![f32s(&[t])]
            }
            Self::Route(cfg) => {
                arity(what, inputs, 1)?;
                let (t, e) = dims2(what, &inputs[0])?;
                if e != cfg.experts {
                    return Err(bad(what, format!("{e} logits for {} experts", cfg.experts)));
                }
                vec![
                    f32s(&[t, e]),
                    TensorType::u32(&[t * cfg.k * ROUTE_WORDS]),
                    TensorType::u32(&[e * STAT_WORDS]),
                ]
            }
            Self::Dispatch(cfg) | Self::CombineBackwardSlots(cfg) => {
                arity(what, inputs, 4)?;
                let t = routed_tokens(what, cfg, inputs, 1)?;
                let (_, d) = dims2(what, &inputs[0])?;
                vec![f32s(&[cfg.experts * cfg.capacity(t), d])]
            }
            Self::Combine(cfg) | Self::DispatchBackward(cfg) => {
                arity(what, inputs, 4)?;
                let t = routed_tokens(what, cfg, inputs, 1)?;
                let (_, d) = dims2(what, &inputs[0])?;
                vec![f32s(&[t, d])]
            }
            Self::GateGrad(cfg) => {
                arity(what, inputs, 5)?;
                let t = routed_tokens(what, cfg, inputs, 2)?;
                vec![f32s(&[t, cfg.k])]
            }
            Self::RouterBackward(cfg, _) => {
                arity(what, inputs, 5)?;
                let t = routed_tokens(what, cfg, inputs, 2)?;
                vec![f32s(&[t, cfg.experts])]
            }
            Self::ExpertWeightGrad { offsets, .. } => {
                arity(what, inputs, 2)?;
                let (_, i) = dims2(what, &inputs[0])?;
                let (_, n) = dims2(what, &inputs[1])?;
                vec![f32s(&[offsets.len().saturating_sub(1), i, n])]
            }
            Self::Adam(_) => {
                arity(what, inputs, 5)?;
                inputs[..3].to_vec()
            }
            Self::Permute { .. } => {
                arity(what, inputs, 1)?;
                vec![inputs[0].clone()]
            }
            Self::Pack { dtype } => {
                if inputs.iter().any(|t| t.dtype.size() != 4) || dtype.size() != 4 {
                    return Err(bad(what, "packs 4-byte elements only".into()));
                }
                vec![TensorType::new(
                    *dtype,
                    &[inputs.iter().map(TensorType::len).sum()],
                )]
            }
            Self::Unpack { types } => {
                arity(what, inputs, 1)?;
                let total: usize = types.iter().map(TensorType::len).sum();
                if inputs[0].len() != total || types.iter().any(|t| t.dtype.size() != 4) {
                    return Err(bad(what, format!("{} into {total} words", inputs[0])));
                }
                types.clone()
            }
        })
    }

    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let out = |i: usize| {
            y.get(i)
                .ok_or_else(|| bad("kernel node", format!("no output {i}")))
        };
        match self {
            Self::Matmul {
                trans_a,
                trans_b,
                offsets,
                variant,
            } => {
                let c = out(0)?;
                let m = c.shape().first().copied().unwrap_or(0);
                let offsets = Self::matmul_offsets(offsets, m);
                let groups = offsets.len().saturating_sub(1);
                let max_group_rows = matmul::check_offsets(&offsets, groups, m)?;
                let offsets_t = Tensor::from_u32(c.device(), &[offsets.len()], &offsets)?;
                let mut args = MatmulArgs {
                    a: &x[0],
                    b: &x[1],
                    c,
                    offsets: &offsets_t,
                    max_group_rows,
                    options: MatmulOptions {
                        trans_a: *trans_a,
                        trans_b: *trans_b,
                        variant: VariantChoice::Fixed(*variant),
                    },
                };
                if !variant.supports(&matmul::check_args(&args)?) {
                    args.options.variant = VariantChoice::Fixed(MatmulVariant::Tiled);
                }
                matmul::encode(rec, &args)?;
            }
            Self::ReluBackward => mlp::encode_relu_backward(rec, &x[0], &x[1], out(0)?)?,
            Self::Accumulate => mlp::encode_accumulate(rec, &x[0], &x[1])?,
            Self::MseGrad => mlp::encode_mse_grad(rec, &x[0], &x[1], out(0)?)?,
            Self::Sgd { lr } => mlp::encode_sgd(rec, &x[0], &x[1], *lr)?,
            Self::EmbedGather => lt::encode_embed_gather(rec, &x[0], &x[1], out(0)?)?,
            Self::EmbedGrad { .. } => lt::encode_embed_grad(rec, &x[0], &x[1], out(0)?)?,
            Self::CrossEntropy => lt::encode_cross_entropy(rec, &x[0], &x[1], out(0)?, out(1)?)?,
            Self::RowLogsumexp => lt::encode_row_logsumexp(rec, &x[0], out(0)?)?,
            Self::Route(cfg) => {
                let r = routing(*cfg, out(0)?, out(1)?, out(2)?);
                router::encode_into(rec, &x[0], &r)?;
            }
            Self::Dispatch(cfg) => {
                let r = routing(*cfg, &x[1], &x[2], &x[3]);
                moe_dispatch::encode_dispatch(rec, &x[0], &r, out(0)?)?;
            }
            Self::Combine(cfg) => {
                let r = routing(*cfg, &x[1], &x[2], &x[3]);
                moe_dispatch::encode_combine(rec, &x[0], &r, out(0)?)?;
            }
            Self::GateGrad(cfg) => {
                let r = routing(*cfg, &x[2], &x[3], &x[4]);
                lt::encode_gate_grad(rec, &x[0], &x[1], &r, out(0)?)?;
            }
            Self::CombineBackwardSlots(cfg) => {
                let r = routing(*cfg, &x[1], &x[2], &x[3]);
                lt::encode_combine_backward_slots(rec, &x[0], &r, out(0)?)?;
            }
            Self::DispatchBackward(cfg) => {
                let r = routing(*cfg, &x[1], &x[2], &x[3]);
                lt::encode_dispatch_backward(rec, &x[0], &r, out(0)?)?;
            }
            Self::RouterBackward(cfg, loss) => {
                let r = routing(*cfg, &x[2], &x[3], &x[4]);
                lt::encode_router_backward(rec, &x[0], &x[1], &r, *loss, out(0)?)?;
            }
            Self::ExpertWeightGrad { offsets, block } => {
                let c = out(0)?;
                let offsets_t = Tensor::from_u32(c.device(), &[offsets.len()], offsets)?;
                lt::encode_expert_weight_grad(rec, &x[0], &x[1], &offsets_t, *block, c)?;
            }
            Self::Adam(cfg) => lt::encode_adam_from(rec, &x[0], &x[1], &x[2], &x[3], *cfg, &x[4])?,
            Self::Permute { blocks, row_words } => {
                let o = out(0)?;
                copy_blocks::encode(
                    rec,
                    o.device(),
                    blocks,
                    *row_words,
                    x[0].buffer(),
                    o.buffer(),
                )?;
            }
            Self::Pack { .. } => {
                let o = out(0)?;
                let mut at = 0;
                for t in x.iter().filter(|t| t.bytes() > 0) {
                    rec.copy_buffer_to_buffer(t.buffer(), 0, o.buffer(), at, t.bytes());
                    at += t.bytes();
                }
            }
            Self::Unpack { .. } => {
                let mut at = 0;
                for t in y.iter().filter(|t| t.bytes() > 0) {
                    rec.copy_buffer_to_buffer(x[0].buffer(), at, t.buffer(), 0, t.bytes());
                    at += t.bytes();
                }
            }
        }
        Ok(())
    }
}
