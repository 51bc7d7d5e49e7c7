//! Losses (`shaders/loss.wgsl`): cross-entropy (per-row loss and the gradient of its mean), the row
//! logsumexp of the router's z-loss, and the gradient of the mean squared error. Each has an
//! `encode_*` form into a caller's encoder, a blocking form, a `*_reference` in plain Rust, and a
//! [`Kernel`] type for program nodes.

use crate::device::Recorder;
use crate::kernels::Shader;
use crate::kernels::embedding::check_ids;
use crate::kernels::flat::{Params, bad, dims2, encode, run, to_u32};
use crate::kernels::node::{self, expect};
use crate::kernels::{Kernel, Prepared, TensorType, eager};
use crate::{DType, Error, Result, Tensor};

pub const LOSS: Shader = Shader {
    name: "loss",
    source: include_str!("../../shaders/loss.wgsl"),
    common: crate::kernels::flat::FLAT_COMMON,
    ..crate::kernels::SHADER
};

/// Outputs of [`cross_entropy`].
#[derive(Debug)]
pub struct CrossEntropyOutputs {
    /// `[T]`: `logsumexp(logits[t]) − logits[t, y[t]]`.
    pub loss: Tensor,
    /// `[T, V]`: `(softmax(logits[t]) − onehot(y[t])) / T`, the gradient of the mean loss.
    pub d_logits: Tensor,
}

/// Records [`cross_entropy`] into caller-allocated `loss` `[T]` and `d_logits` `[T, V]`. Targets
/// `>= V` cannot be reported from a shader: their rows get loss 0 and gradient 0.
pub fn encode_cross_entropy(
    encoder: &mut impl Recorder,
    logits: &Tensor,
    targets: &Tensor,
    loss: &Tensor,
    d_logits: &Tensor,
) -> Result<()> {
    const WHAT: &str = "cross_entropy";
    let device = logits.device();
    let (t, v) = dims2(WHAT, logits)?;
    expect(WHAT, logits, device, DType::F32, &[t, v])?;
    expect(WHAT, targets, device, DType::U32, &[t])?;
    expect(WHAT, loss, device, DType::F32, &[t])?;
    expect(WHAT, d_logits, device, DType::F32, &[t, v])?;
    if v == 0 {
        return Err(bad(WHAT, "logits have no columns".into()));
    }
    let params = Params {
        rows: to_u32(WHAT, t)?,
        cols: to_u32(WHAT, v)?,
        alpha: 1.0 / t.max(1) as f32,
        ..Params::zeroed()
    };
    let bindings = [
        (6, logits.buffer()),
        (7, targets.buffer()),
        (8, loss.buffer()),
        (9, d_logits.buffer()),
    ];
    encode(encoder, device, &LOSS, WHAT, &params, &bindings, t)
}

/// Per-row cross-entropy of `logits` (`[T, V]`) against u32 `targets` (`[T]`) and the gradient
/// of its mean, numerically stable. Blocks.
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<CrossEntropyOutputs> {
    let (t, v) = dims2("cross_entropy", logits)?;
    let device = logits.device();
    let out = CrossEntropyOutputs {
        loss: Tensor::zeros(device, &[t], DType::F32)?,
        d_logits: Tensor::zeros(device, &[t, v], DType::F32)?,
    };
    run(device, "cross_entropy", |enc| {
        encode_cross_entropy(enc, logits, targets, &out.loss, &out.d_logits)
    })?;
    Ok(out)
}

/// Reference of [`cross_entropy`]: `(loss [T], d_logits [T, cols])`. Targets must be `< cols`.
pub fn cross_entropy_reference(
    logits: &[f32],
    targets: &[u32],
    cols: usize,
) -> Result<(Vec<f32>, Vec<f32>)> {
    const WHAT: &str = "cross_entropy_reference";
    if cols == 0 || logits.len() != targets.len() * cols {
        return Err(Error::ShapeMismatch {
            what: WHAT,
            expected: format!("{} logits", targets.len() * cols),
            got: format!("{} logits", logits.len()),
        });
    }
    check_ids(WHAT, targets, cols)?;
    let scale = 1.0 / targets.len().max(1) as f32;
    let mut loss = Vec::with_capacity(targets.len());
    let mut grad = Vec::with_capacity(logits.len());
    for (row, &y) in logits.chunks_exact(cols).zip(targets) {
        let (m, s) = max_and_sum(row);
        loss.push(m + s.ln() - row[y as usize]);
        grad.extend(row.iter().enumerate().map(|(j, &l)| {
            let onehot = if j == y as usize { 1.0 } else { 0.0 };
            scale * ((l - m).exp() / s - onehot)
        }));
    }
    Ok((loss, grad))
}

/// `(max, Σ exp(x − max))` of one row, the stable softmax's two numbers.
pub(crate) fn max_and_sum(row: &[f32]) -> (f32, f32) {
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    (m, row.iter().map(|&l| (l - m).exp()).sum())
}

/// Records `out[t] = logsumexp(x[t])` for `x` `[T, N]`, `out` `[T]`.
pub fn encode_row_logsumexp(encoder: &mut impl Recorder, x: &Tensor, out: &Tensor) -> Result<()> {
    const WHAT: &str = "row_logsumexp";
    let device = x.device();
    let (t, n) = dims2(WHAT, x)?;
    expect(WHAT, x, device, DType::F32, &[t, n])?;
    expect(WHAT, out, device, DType::F32, &[t])?;
    if n == 0 {
        return Err(bad(WHAT, "rows are empty".into()));
    }
    let params = Params {
        rows: to_u32(WHAT, t)?,
        cols: to_u32(WHAT, n)?,
        ..Params::zeroed()
    };
    encode(
        encoder,
        device,
        &LOSS,
        WHAT,
        &params,
        &[(6, x.buffer()), (8, out.buffer())],
        t,
    )
}

/// `logsumexp` of each row of `x` (`[T, N]`): the router z-loss is `β · mean(lse²)`. Blocks.
pub fn row_logsumexp(x: &Tensor) -> Result<Tensor> {
    let (t, _) = dims2("row_logsumexp", x)?;
    let out = Tensor::zeros(x.device(), &[t], DType::F32)?;
    run(x.device(), "row_logsumexp", |enc| {
        encode_row_logsumexp(enc, x, &out)
    })?;
    Ok(out)
}

/// Reference of [`row_logsumexp`].
pub fn row_logsumexp_reference(x: &[f32], cols: usize) -> Vec<f32> {
    x.chunks_exact(cols.max(1))
        .map(|row| {
            let (m, s) = max_and_sum(row);
            m + s.ln()
        })
        .collect()
}

/// `(logits [T, V], targets u32 [T]) → (loss [T], d_logits [T, V])` as a program node.
#[derive(Debug, Clone)]
pub struct CrossEntropy;

impl Kernel for CrossEntropy {
    fn kind(&self) -> &'static str {
        "cross_entropy"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        node::arity(self.kind(), inputs, 2)?;
        let (t, v) = node::rows_cols(self.kind(), &inputs[0])?;
        Ok(vec![TensorType::f32(&[t]), TensorType::f32(&[t, v])])
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        encode_cross_entropy(rec, &x[0], &x[1], node::output(y, 0)?, node::output(y, 1)?)
    }
}

/// `x [T, N] → [T]` as a program node.
#[derive(Debug, Clone)]
pub struct RowLogsumexp;

impl Kernel for RowLogsumexp {
    fn kind(&self) -> &'static str {
        "row_logsumexp"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        node::arity(self.kind(), inputs, 1)?;
        let (t, _) = node::rows_cols(self.kind(), &inputs[0])?;
        Ok(vec![TensorType::f32(&[t])])
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        encode_row_logsumexp(rec, &x[0], node::output(y, 0)?)
    }
}

/// Records [`mse_grad`] into `out` (shaped like `y`).
pub fn encode_mse_grad(
    encoder: &mut impl Recorder,
    y: &Tensor,
    target: &Tensor,
    out: &Tensor,
) -> Result<()> {
    const WHAT: &str = "mse_grad";
    let device = y.device();
    expect(WHAT, y, device, DType::F32, y.shape())?;
    expect(WHAT, target, device, DType::F32, y.shape())?;
    expect(WHAT, out, device, DType::F32, y.shape())?;
    let params = Params {
        rows: to_u32(WHAT, y.len())?,
        alpha: mse_scale(y.len()),
        ..Params::zeroed()
    };
    let bindings = [(28, y.buffer()), (29, target.buffer()), (30, out.buffer())];
    encode(encoder, device, &LOSS, WHAT, &params, &bindings, y.len())
}

/// `2 (y − target) / n` with `n = y.len()`: the gradient of the mean squared error. Blocks.
pub fn mse_grad(y: &Tensor, target: &Tensor) -> Result<Tensor> {
    eager::run_one(&MseGrad, &[y, target])
}

fn mse_scale(n: usize) -> f32 {
    if n == 0 { 0.0 } else { 2.0 / n as f32 }
}

/// Reference of [`mse_grad`].
pub fn mse_grad_reference(y: &[f32], target: &[f32]) -> Vec<f32> {
    let scale = mse_scale(y.len());
    y.iter()
        .zip(target)
        .map(|(&y, &t)| scale * (y - t))
        .collect()
}

/// `(y, target) → 2 (y − target) / n` as a program node.
#[derive(Debug, Clone)]
pub struct MseGrad;

impl Kernel for MseGrad {
    fn kind(&self) -> &'static str {
        "mse_grad"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        node::arity(self.kind(), inputs, 2)?;
        Ok(vec![inputs[0].clone()])
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        encode_mse_grad(rec, &x[0], &x[1], node::output(y, 0)?)
    }
}
