//! Multi-head self-attention (`shaders/attention.wgsl`), FlashAttention-style: the forward keeps a
//! running max and sum over tiles of keys (online softmax), so the `T × T` scores never exist in
//! memory, and saves each row's logsumexp; the backward recomputes the probabilities from it
//! (FlashAttention-2): a pass for each row's `dO·O`, then `dQ` and `dK`, `dV` in one launch (the
//! grid's two layers of workgroups).
//!
//! - [`Attention`]: `(q, k, v) → (out, lse)`;
//! - [`AttentionBackward`]: `(q, k, v, out, lse, d_out) → (dq, dk, dv)`;
//! - [`AttentionNaive`]: the forward without tiling, three passes over the keys from storage: the
//!   bench's baseline.
//!
//! Queries, keys, values and outputs are `[B, T, H·Dh]` (a projection's `[B·T, H·Dh]` output
//! as it is: head `h` is columns `h·Dh..(h+1)·Dh`), the logsumexp `[B, T, H]`. Scores are
//! `scale · q·k` (`1/√Dh` by default), and with `causal` query `t` sees keys `0..=t`. Head
//! dimensions up to [`MAX_HEAD_DIM`]; any `T`. Batches split over devices like rows (the default
//! sharding rule: each sequence is whole on one device). With `seq: Some(T)` the nodes take and
//! give `[B·T, ·]` rows instead, viewed as `[B, T, ·]` without a copy ([`Tensor::view`]), as
//! the Transformer's step feeds them. They are f32, or f16 on a device with `shader-f16` (the
//! gradients in the inputs' type): f16 narrows storage only, every sum, the softmax statistics
//! and the logsumexp stay f32.
//!
//! [`super::eager`] runs them now ([`Attention::new`] takes the default scale, and
//! [`Attention::backward`] gives the matching backward); the plain-Rust references are computed in
//! f64 ([`attention_reference`], [`attention_backward_reference`]).

use super::check::{self, expect, to_u32};
use super::{Kernel, Prepared, TensorType};
use crate::device::Recorder;
use crate::kernels::Shader;
use crate::{DType, Error, Result, Tensor};

pub const ATTENTION: Shader = Shader {
    name: "attention",
    source: include_str!("../../shaders/attention.wgsl"),
    dtypes: crate::kernels::FLOATS,
    zero_workgroup_memory: false,
    ..crate::kernels::SHADER
};

/// The largest head dimension the kernels hold in registers and workgroup memory.
pub const MAX_HEAD_DIM: usize = 128;
/// Rows per workgroup of the tiled kernels, two per thread of 32 (`BLOCK_ROWS` in the shader).
const BLOCK_ROWS: usize = 64;

#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    head_dim: u32,
    causal: u32,
    _pad0: u32,
    scale: f32,
    _pad1: f32,
}

/// The sizes of one attention call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub head_dim: usize,
}

impl AttentionShape {
    /// The shape of `[B, T, H·Dh]` queries with `heads` heads, or why it is not one.
    pub fn of(what: &'static str, q: &[usize], heads: usize) -> Result<Self> {
        let &[batch, seq, width] = q else {
            return Err(check::invalid(
                what,
                format!("queries must be [batch, seq, heads·head_dim], got {q:?}"),
            ));
        };
        if heads == 0 || width % heads != 0 {
            return Err(check::invalid(
                what,
                format!("width {width} is not a multiple of {heads} heads"),
            ));
        }
        let head_dim = width / heads;
        if head_dim == 0 || head_dim > MAX_HEAD_DIM {
            return Err(check::invalid(
                what,
                format!("head dimension {head_dim} is outside 1..={MAX_HEAD_DIM}"),
            ));
        }
        Ok(Self {
            batch,
            seq,
            heads,
            head_dim,
        })
    }

    /// `[B, T, H·Dh]`.
    pub fn rows(&self) -> [usize; 3] {
        [self.batch, self.seq, self.heads * self.head_dim]
    }

    /// `[B, T, H]`.
    pub fn stats(&self) -> [usize; 3] {
        [self.batch, self.seq, self.heads]
    }

    /// Score pairs `(query, key)` that count: `T²` per head, about half with `causal`.
    pub fn pairs(&self, causal: bool) -> usize {
        let per_head = if causal {
            self.seq * (self.seq + 1) / 2
        } else {
            self.seq * self.seq
        };
        self.batch * self.heads * per_head
    }

    /// The forward's FLOPs: `q·k` and `p·v`, 2 multiply-adds each per pair and head dimension.
    pub fn forward_flops(&self, causal: bool) -> f64 {
        4.0 * self.pairs(causal) as f64 * self.head_dim as f64
    }

    /// The backward's FLOPs as FlashAttention counts them: 2.5× the forward's (five
    /// matmul-sized products against two; the recomputed scores are not counted).
    pub fn backward_flops(&self, causal: bool) -> f64 {
        2.5 * self.forward_flops(causal)
    }
}

/// `1/√Dh`, the usual score scale.
pub fn default_scale(head_dim: usize) -> f32 {
    1.0 / (head_dim.max(1) as f32).sqrt()
}

fn params(what: &'static str, s: &AttentionShape, causal: bool, scale: f32) -> Result<Params> {
    if !scale.is_finite() {
        return Err(check::invalid(
            what,
            format!("scale must be finite, got {scale}"),
        ));
    }
    Ok(Params {
        batch: to_u32(what, s.batch)?,
        seq: to_u32(what, s.seq)?,
        heads: to_u32(what, s.heads)?,
        head_dim: to_u32(what, s.head_dim)?,
        causal: u32::from(causal),
        _pad0: 0,
        scale,
        _pad1: 0.0,
    })
}

/// The storage type of queries, keys, values, outputs and gradients: f32, or f16 where the
/// device has `shader-f16` (sums and the logsumexp stay f32).
fn elem(what: &'static str, q: &Tensor) -> Result<DType> {
    let dtype = q.dtype();
    if dtype == DType::U32 {
        return Err(check::invalid(
            what,
            "takes f32 or f16 values, not u32".into(),
        ));
    }
    q.device().require(what, dtype)?;
    Ok(dtype)
}

/// One workgroup per `rows` rows of one (batch, head) pair.
fn row_grid(s: &AttentionShape, rows: usize) -> Result<[u32; 3]> {
    const WHAT: &str = "attention grid";
    Ok([
        to_u32(WHAT, s.seq.div_ceil(rows))?,
        to_u32(WHAT, s.batch * s.heads)?,
        1,
    ])
}

/// The shader's specialisation: vec4s per head row, and rows per tile (as many as fill the
/// workgroup memory a 128-wide head's 16 rows take, up to 32: fewer barriers and tile loads
/// per key for narrower heads).
fn specialisation(s: &AttentionShape) -> [(&'static str, u32); 2] {
    // head_dim ≤ MAX_HEAD_DIM, checked with the shape.
    let d4 = s.head_dim.div_ceil(4) as u32;
    [("D4", d4), ("TILE", (512 / d4).min(32))]
}

/// Checks `q`, `k`, `v` (alike) and gives their shape.
fn qkv_shape(
    what: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
) -> Result<AttentionShape> {
    let s = AttentionShape::of(what, q.shape(), heads)?;
    let dtype = elem(what, q)?;
    for t in [q, k, v] {
        expect(what, t, q.device(), dtype, &s.rows())?;
    }
    Ok(s)
}

/// Records the tiled forward (or, with `naive`, the baseline) into caller-allocated `out`
/// `[B, T, H·Dh]` and `lse` `[B, T, H]`.
#[allow(clippy::too_many_arguments)]
fn encode_attention(
    encoder: &mut impl Recorder,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    out: &Tensor,
    lse: &Tensor,
    heads: usize,
    causal: bool,
    scale: f32,
    naive: bool,
) -> Result<()> {
    let what = if naive {
        "attention_naive"
    } else {
        "attention_forward"
    };
    let device = q.device();
    let s = qkv_shape(what, q, k, v, heads)?;
    let dtype = q.dtype();
    expect(what, out, device, dtype, &s.rows())?;
    expect(what, lse, device, DType::F32, &s.stats())?;
    let p = params(what, &s, causal, scale)?;
    // The naive kernel's workgroups are 64 threads of one row each.
    let grid = row_grid(&s, if naive { 64 } else { BLOCK_ROWS })?;
    let bindings = [
        (1, q.buffer()),
        (2, k.buffer()),
        (3, v.buffer()),
        (4, out.buffer()),
        (5, lse.buffer()),
    ];
    ATTENTION.encode_specialised(
        encoder,
        device,
        dtype,
        what,
        &specialisation(&s),
        &p,
        &bindings,
        grid,
    )
}

/// Records the backward into caller-allocated `dq`, `dk`, `dv` (shaped like `q`), given the
/// forward's `out` and `lse` and the output's gradient `d_out`. Three dispatches: each query
/// row's `(lse, Σ dO·O)` into a scratch buffer, then `dQ`, then `dK` and `dV`.
#[allow(clippy::too_many_arguments)]
fn encode_attention_backward(
    encoder: &mut impl Recorder,
    [q, k, v, out, lse, d_out]: [&Tensor; 6],
    grads: [&Tensor; 3],
    heads: usize,
    causal: bool,
    scale: f32,
) -> Result<()> {
    const WHAT: &str = "attention_backward";
    let device = q.device();
    let s = qkv_shape(WHAT, q, k, v, heads)?;
    let dtype = q.dtype();
    expect(WHAT, out, device, dtype, &s.rows())?;
    expect(WHAT, d_out, device, dtype, &s.rows())?;
    expect(WHAT, lse, device, DType::F32, &s.stats())?;
    for g in grads {
        expect(WHAT, g, device, dtype, &s.rows())?;
    }
    let [dq, dk, dv] = grads;
    if grads.iter().any(|g| {
        [q, k, v, out, lse, d_out]
            .iter()
            .any(|i| i.buffer() == g.buffer())
    }) || dq.buffer() == dk.buffer()
        || dq.buffer() == dv.buffer()
        || dk.buffer() == dv.buffer()
    {
        return Err(check::invalid(
            WHAT,
            "the gradients must be distinct buffers, apart from the inputs".into(),
        ));
    }
    let p = params(WHAT, &s, causal, scale)?;
    let consts = specialisation(&s);
    let rows = s.batch * s.seq * s.heads;
    let stats = Tensor::zeros(device, &[rows, 2], DType::F32)?;
    ATTENTION.encode_specialised(
        encoder,
        device,
        dtype,
        "attention_backward_delta",
        &consts,
        &p,
        &[
            (6, out.buffer()),
            (7, d_out.buffer()),
            (8, lse.buffer()),
            (9, stats.buffer()),
        ],
        super::grid_1d(device, "attention_backward_delta", rows)?,
    )?;
    // dQ (the grid's first z layer) and dK, dV (its second) in one launch.
    let [x, y, _] = row_grid(&s, BLOCK_ROWS)?;
    ATTENTION.encode_specialised(
        encoder,
        device,
        dtype,
        "attention_backward_grads",
        &consts,
        &p,
        &[
            (1, q.buffer()),
            (2, k.buffer()),
            (3, v.buffer()),
            (7, d_out.buffer()),
            (10, stats.buffer()),
            (11, dq.buffer()),
            (12, dk.buffer()),
            (13, dv.buffer()),
        ],
        [x, y, 2],
    )
}

/// Checks the reference's slices against `s`.
fn check_reference(what: &'static str, s: &AttentionShape, slices: &[&[f32]]) -> Result<()> {
    let want = s.rows().iter().product::<usize>();
    match slices.iter().find(|x| x.len() != want) {
        Some(x) => Err(Error::ShapeMismatch {
            what,
            expected: format!("{want} values"),
            got: format!("{} values", x.len()),
        }),
        None => Ok(()),
    }
}

/// Scores, probabilities and the logsumexp of query `t` of head `(b, h)`, in f64.
struct RowSoftmax {
    probs: Vec<f64>,
    lse: f64,
}

fn row_softmax(
    s: &AttentionShape,
    q: &[f32],
    k: &[f32],
    (b, h, t): (usize, usize, usize),
    causal: bool,
    scale: f32,
) -> RowSoftmax {
    let at = |i: usize| ((b * s.seq + i) * s.heads + h) * s.head_dim;
    let keys = if causal { t + 1 } else { s.seq };
    let qa = at(t);
    let scores: Vec<f64> = (0..keys)
        .map(|j| {
            let ka = at(j);
            let dot: f64 = (0..s.head_dim)
                .map(|c| f64::from(q[qa + c]) * f64::from(k[ka + c]))
                .sum();
            dot * f64::from(scale)
        })
        .collect();
    let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = scores.iter().map(|&x| (x - m).exp()).sum();
    RowSoftmax {
        probs: scores.iter().map(|&x| (x - m).exp() / sum).collect(),
        lse: m + sum.ln(),
    }
}

/// Reference of the forward: `(out [B, T, H·Dh], lse [B, T, H])`, computed in f64.
pub fn attention_reference(
    s: &AttentionShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    causal: bool,
    scale: f32,
) -> Result<(Vec<f32>, Vec<f32>)> {
    check_reference("attention_reference", s, &[q, k, v])?;
    let mut out = vec![0f32; q.len()];
    let mut lse = vec![0f32; s.stats().iter().product()];
    for b in 0..s.batch {
        for t in 0..s.seq {
            for h in 0..s.heads {
                let row = row_softmax(s, q, k, (b, h, t), causal, scale);
                let at = |i: usize| ((b * s.seq + i) * s.heads + h) * s.head_dim;
                for c in 0..s.head_dim {
                    let acc: f64 = row
                        .probs
                        .iter()
                        .enumerate()
                        .map(|(j, &pj)| pj * f64::from(v[at(j) + c]))
                        .sum();
                    out[at(t) + c] = acc as f32;
                }
                lse[(b * s.seq + t) * s.heads + h] = row.lse as f32;
            }
        }
    }
    Ok((out, lse))
}

/// Reference of the backward: `(dq, dk, dv)` for the output gradient `d_out`, in f64.
pub fn attention_backward_reference(
    s: &AttentionShape,
    [q, k, v, d_out]: [&[f32]; 4],
    causal: bool,
    scale: f32,
) -> Result<[Vec<f32>; 3]> {
    check_reference("attention_backward_reference", s, &[q, k, v, d_out])?;
    let n = q.len();
    let (mut dq, mut dk, mut dv) = (vec![0f64; n], vec![0f64; n], vec![0f64; n]);
    for b in 0..s.batch {
        for h in 0..s.heads {
            let at = |i: usize| ((b * s.seq + i) * s.heads + h) * s.head_dim;
            for t in 0..s.seq {
                let row = row_softmax(s, q, k, (b, h, t), causal, scale);
                let (qa, d) = (at(t), s.head_dim);
                // dP[j] = dO[t]·V[j]; dS[j] = P[j] (dP[j] − Σ_i P[i] dP[i]).
                let dp: Vec<f64> = (0..row.probs.len())
                    .map(|j| {
                        (0..d)
                            .map(|c| f64::from(d_out[qa + c]) * f64::from(v[at(j) + c]))
                            .sum()
                    })
                    .collect();
                let delta: f64 = row.probs.iter().zip(&dp).map(|(p, g)| p * g).sum();
                for (j, (&pj, &dpj)) in row.probs.iter().zip(&dp).enumerate() {
                    let ds = pj * (dpj - delta) * f64::from(scale);
                    let ka = at(j);
                    for c in 0..d {
                        dq[qa + c] += ds * f64::from(k[ka + c]);
                        dk[ka + c] += ds * f64::from(q[qa + c]);
                        dv[ka + c] += pj * f64::from(d_out[qa + c]);
                    }
                }
            }
        }
    }
    let f = |x: Vec<f64>| x.into_iter().map(|x| x as f32).collect();
    Ok([f(dq), f(dk), f(dv)])
}

/// The types of `(q, k, v)` and their shape.
fn forward_types(
    what: &'static str,
    inputs: &[TensorType],
    heads: usize,
) -> Result<AttentionShape> {
    check::arity(what, inputs, 3)?;
    let s = AttentionShape::of(what, &inputs[0].shape, heads)?;
    let dtype = inputs[0].dtype;
    if dtype == DType::U32 {
        return Err(check::invalid(
            what,
            "takes f32 or f16 values, not u32".into(),
        ));
    }
    expect_types(what, inputs, &TensorType::new(dtype, &s.rows()))?;
    Ok(s)
}

/// `[B·T, W]` types as `[B, T, W]` when `seq` is `Some(T)`; else as they are.
fn as_sequences(
    what: &'static str,
    seq: Option<usize>,
    types: &[TensorType],
) -> Result<Vec<TensorType>> {
    let Some(t) = seq else {
        return Ok(types.to_vec());
    };
    types
        .iter()
        .map(|ty| match ty.shape[..] {
            [rows, width] if t > 0 && rows % t == 0 => Ok(TensorType {
                shape: vec![rows / t, t, width],
                ..ty.clone()
            }),
            _ => Err(check::invalid(
                what,
                format!(
                    "with seq = {t}, inputs must be [batch·{t}, width], got {:?}",
                    ty.shape
                ),
            )),
        })
        .collect()
}

/// `[B, T, W]` types as `[B·T, W]` when `seq` is set: outputs in the caller's form.
fn as_rows(seq: Option<usize>, types: Vec<TensorType>) -> Vec<TensorType> {
    if seq.is_none() {
        return types;
    }
    types
        .into_iter()
        .map(|ty| match ty.shape[..] {
            [b, t, w] => TensorType {
                shape: vec![b * t, w],
                ..ty
            },
            _ => ty,
        })
        .collect()
}

/// The tensors as the kernels take them: `[B·T, W]` viewed as `[B, T, W]` when `seq` is set.
fn viewed(what: &'static str, seq: Option<usize>, tensors: &[Tensor]) -> Result<Vec<Tensor>> {
    let Some(t) = seq else {
        return Ok(tensors.to_vec());
    };
    tensors
        .iter()
        .map(|x| match x.shape() {
            &[rows, width] if t > 0 && rows % t == 0 => x.view(&[rows / t, t, width]),
            other => Err(check::invalid(
                what,
                format!("with seq = {t}, tensors must be [batch·{t}, width], got {other:?}"),
            )),
        })
        .collect()
}

/// Each of `inputs` is `want`: a typed error naming the first that is not.
fn expect_types(what: &'static str, inputs: &[TensorType], want: &TensorType) -> Result<()> {
    inputs
        .iter()
        .try_for_each(|t| check::expect_type(what, t, want))
}

/// `(q, k, v) [B, T, H·Dh] → (out [B, T, H·Dh], lse [B, T, H])`, tiled, as a program node.
///
/// With `seq: Some(T)` the node takes rows of sequences instead, `[B·T, H·Dh]` (a projection's
/// output as it is; `B` is the shard's rows over `T`) and gives `out [B·T, H·Dh]`,
/// `lse [B·T, H]`: the same buffers seen through [`Tensor::view`], no copy.
#[derive(Debug, Clone)]
pub struct Attention {
    pub heads: usize,
    pub causal: bool,
    pub scale: f32,
    pub seq: Option<usize>,
}

impl Attention {
    /// `heads` heads of width `head_dim` over `[B, T, H·Dh]` values, with the default scale
    /// `1/√Dh`.
    pub fn new(heads: usize, head_dim: usize, causal: bool) -> Self {
        Self {
            heads,
            causal,
            scale: default_scale(head_dim),
            seq: None,
        }
    }

    /// The backward of this forward.
    pub fn backward(&self) -> AttentionBackward {
        AttentionBackward {
            heads: self.heads,
            causal: self.causal,
            scale: self.scale,
            seq: self.seq,
        }
    }
}

impl Kernel for Attention {
    fn kind(&self) -> &'static str {
        "attention"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let inputs = as_sequences(self.kind(), self.seq, inputs)?;
        let s = forward_types(self.kind(), &inputs, self.heads)?;
        Ok(as_rows(
            self.seq,
            vec![
                TensorType::new(inputs[0].dtype, &s.rows()),
                TensorType::f32(&s.stats()),
            ],
        ))
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let x = viewed(self.kind(), self.seq, x)?;
        let y = viewed(self.kind(), self.seq, y)?;
        let (out, lse) = (check::output(&y, 0)?, check::output(&y, 1)?);
        encode_attention(
            rec,
            &x[0],
            &x[1],
            &x[2],
            out,
            lse,
            self.heads,
            self.causal,
            self.scale,
            false,
        )
    }
}

/// [`Attention`] without tiling: the bench's baseline.
#[derive(Debug, Clone)]
pub struct AttentionNaive(pub Attention);

impl Kernel for AttentionNaive {
    fn kind(&self) -> &'static str {
        "attention_naive"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        self.0.outputs(inputs)
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let x = viewed(self.kind(), self.0.seq, x)?;
        let y = viewed(self.kind(), self.0.seq, y)?;
        let (a, out, lse) = (&self.0, check::output(&y, 0)?, check::output(&y, 1)?);
        encode_attention(
            rec, &x[0], &x[1], &x[2], out, lse, a.heads, a.causal, a.scale, true,
        )
    }
}

/// `(q, k, v, out, lse, d_out) → (dq, dk, dv)` as a program node (`seq` as [`Attention`]'s).
#[derive(Debug, Clone)]
pub struct AttentionBackward {
    pub heads: usize,
    pub causal: bool,
    pub scale: f32,
    pub seq: Option<usize>,
}

impl Kernel for AttentionBackward {
    fn kind(&self) -> &'static str {
        "attention_backward"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        check::arity(self.kind(), inputs, 6)?;
        let inputs = as_sequences(self.kind(), self.seq, inputs)?;
        let s = forward_types(self.kind(), &inputs[..3], self.heads)?;
        let rows = TensorType::new(inputs[0].dtype, &s.rows());
        let stats = TensorType::f32(&s.stats());
        expect_types(self.kind(), &inputs[3..4], &rows)?;
        expect_types(self.kind(), &inputs[4..5], &stats)?;
        expect_types(self.kind(), &inputs[5..], &rows)?;
        Ok(as_rows(self.seq, vec![rows.clone(), rows.clone(), rows]))
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let x = viewed(self.kind(), self.seq, x)?;
        let y = viewed(self.kind(), self.seq, y)?;
        let y = &y[..];
        let [q, k, v, out, lse, d_out] = &x[..] else {
            return Err(check::invalid(
                self.kind(),
                format!("takes 6 inputs, got {}", x.len()),
            ));
        };
        encode_attention_backward(
            rec,
            [q, k, v, out, lse, d_out],
            [
                check::output(y, 0)?,
                check::output(y, 1)?,
                check::output(y, 2)?,
            ],
            self.heads,
            self.causal,
            self.scale,
        )
    }
}
