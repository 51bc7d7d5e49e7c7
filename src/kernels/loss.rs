//! Losses (`shaders/loss.wgsl`): cross-entropy (per-row loss and the gradient of its mean), the row
//! logsumexp of the router's z-loss, and the gradient of the mean squared error. Each is a
//! [`Kernel`] type (run it with [`crate::kernels::eager`] or as a program node) with a
//! `*_reference` in plain Rust.

use crate::device::Recorder;
use crate::kernels::Shader;
use crate::kernels::check::{self, dims2, expect, invalid, to_u32};
use crate::kernels::embedding::check_ids;
use crate::kernels::{Kernel, Prepared, TensorType};
use crate::{DType, Error, Result, Tensor};

/// `Params` of `loss.wgsl`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    cols: u32,
    alpha: f32,
    _pad: u32,
}

impl Params {
    fn new(what: &'static str, rows: usize, cols: usize, alpha: f32) -> Result<Self> {
        Ok(Self {
            rows: to_u32(what, rows)?,
            cols: to_u32(what, cols)?,
            alpha,
            _pad: 0,
        })
    }
}

pub const LOSS: Shader = Shader {
    name: "loss",
    source: include_str!("../../shaders/loss.wgsl"),
    common: crate::kernels::FLAT_COMMON,
    ..crate::kernels::SHADER
};

/// Records [`CrossEntropy`] into `loss` `[T]` and `d_logits` `[T, V]`. Targets `>= V` cannot be
/// reported from a shader: their rows get loss 0 and gradient 0.
fn encode_cross_entropy(
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
        return Err(invalid(WHAT, "logits have no columns".into()));
    }
    let params = Params::new(WHAT, t, v, 1.0 / t.max(1) as f32)?;
    let bindings = [
        (6, logits.buffer()),
        (7, targets.buffer()),
        (8, loss.buffer()),
        (9, d_logits.buffer()),
    ];
    LOSS.encode_threads(encoder, device, WHAT, &params, &bindings, t)
}

/// Reference of [`CrossEntropy`]: `(loss [T], d_logits [T, cols])`. Targets must be `< cols`.
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
fn encode_row_logsumexp(encoder: &mut impl Recorder, x: &Tensor, out: &Tensor) -> Result<()> {
    const WHAT: &str = "row_logsumexp";
    let device = x.device();
    let (t, n) = dims2(WHAT, x)?;
    expect(WHAT, x, device, DType::F32, &[t, n])?;
    expect(WHAT, out, device, DType::F32, &[t])?;
    if n == 0 {
        return Err(invalid(WHAT, "rows are empty".into()));
    }
    let params = Params::new(WHAT, t, n, 0.0)?;
    LOSS.encode_threads(
        encoder,
        device,
        WHAT,
        &params,
        &[(6, x.buffer()), (8, out.buffer())],
        t,
    )
}

/// Reference of [`RowLogsumexp`].
pub fn row_logsumexp_reference(x: &[f32], cols: usize) -> Vec<f32> {
    x.chunks_exact(cols.max(1))
        .map(|row| {
            let (m, s) = max_and_sum(row);
            m + s.ln()
        })
        .collect()
}

/// `(logits [T, V], targets u32 [T]) → (loss [T], d_logits [T, V])`: per-row cross-entropy,
/// numerically stable, `logsumexp(logits[t]) − logits[t, y[t]]`, and the gradient of its mean,
/// `(softmax(logits[t]) − onehot(y[t])) / T`.
#[derive(Debug, Clone)]
pub struct CrossEntropy;

impl Kernel for CrossEntropy {
    fn kind(&self) -> &'static str {
        "cross_entropy"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        check::arity(self.kind(), inputs, 2)?;
        let (t, v) = check::rows_cols(self.kind(), &inputs[0])?;
        Ok(vec![TensorType::f32(&[t]), TensorType::f32(&[t, v])])
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        encode_cross_entropy(
            rec,
            &x[0],
            &x[1],
            check::output(y, 0)?,
            check::output(y, 1)?,
        )
    }
}

/// `x [T, N] → [T]`: the `logsumexp` of each row (the router z-loss is `β · mean(lse²)`).
#[derive(Debug, Clone)]
pub struct RowLogsumexp;

impl Kernel for RowLogsumexp {
    fn kind(&self) -> &'static str {
        "row_logsumexp"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        check::arity(self.kind(), inputs, 1)?;
        let (t, _) = check::rows_cols(self.kind(), &inputs[0])?;
        Ok(vec![TensorType::f32(&[t])])
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        encode_row_logsumexp(rec, &x[0], check::output(y, 0)?)
    }
}

/// Records [`MseGrad`] into `out` (shaped like `y`).
fn encode_mse_grad(
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
    let params = Params::new(WHAT, y.len(), 0, mse_scale(y.len()))?;
    let bindings = [(28, y.buffer()), (29, target.buffer()), (30, out.buffer())];
    LOSS.encode_threads(encoder, device, WHAT, &params, &bindings, y.len())
}

fn mse_scale(n: usize) -> f32 {
    if n == 0 { 0.0 } else { 2.0 / n as f32 }
}

/// Reference of [`MseGrad`].
pub fn mse_grad_reference(y: &[f32], target: &[f32]) -> Vec<f32> {
    let scale = mse_scale(y.len());
    y.iter()
        .zip(target)
        .map(|(&y, &t)| scale * (y - t))
        .collect()
}

/// `(y, target) → 2 (y − target) / n` with `n = y.len()`: the gradient of the mean squared
/// error.
#[derive(Debug, Clone)]
pub struct MseGrad;

impl Kernel for MseGrad {
    fn kind(&self) -> &'static str {
        "mse_grad"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        check::arity(self.kind(), inputs, 2)?;
        Ok(vec![inputs[0].clone()])
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        encode_mse_grad(rec, &x[0], &x[1], check::output(y, 0)?)
    }
}
