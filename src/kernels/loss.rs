//! Losses (`shaders/loss.wgsl`): cross-entropy (per-row loss and the gradient of its mean), also
//! with its row losses opening a statistics pack ([`CrossEntropyPack`]), the row logsumexp of the
//! router's z-loss, and the gradient of the mean squared error. Each is a [`Kernel`] type (run it
//! with [`crate::kernels::eager`] or as a program node) with a `*_reference` in plain Rust (the
//! pack's is the cross-entropy's and the inputs' words).

use crate::device::Recorder;
use crate::kernels::Shader;
use crate::kernels::check::{self, dims2, expect, invalid, to_u32};
use crate::kernels::embedding::check_ids;
use crate::kernels::sharding_rules;
use crate::kernels::{Kernel, Prepared, TensorType};
use crate::named_sharding::NamedSharding;
use crate::{DType, Error, Result, Tensor};

/// `Params` of `loss.wgsl`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    cols: u32,
    alpha: f32,
    _pad: u32,
    extra_len: [u32; 4],
}

impl Params {
    fn new(what: &'static str, rows: usize, cols: usize, alpha: f32) -> Result<Self> {
        Ok(Self {
            rows: to_u32(what, rows)?,
            cols: to_u32(what, cols)?,
            alpha,
            _pad: 0,
            extra_len: [0; 4],
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

/// Records [`CrossEntropyPack`]: the cross-entropy of `logits` against `targets` into `d_logits`,
/// its row losses (as their bits) into the first `T` words of `pack`, then each of `extras`' words.
fn encode_cross_entropy_pack(
    encoder: &mut impl Recorder,
    logits: &Tensor,
    targets: &Tensor,
    extras: &[Tensor],
    pack: &Tensor,
    d_logits: &Tensor,
) -> Result<()> {
    const WHAT: &str = "cross_entropy_pack";
    let device = logits.device();
    let (t, v) = dims2(WHAT, logits)?;
    expect(WHAT, logits, device, DType::F32, &[t, v])?;
    expect(WHAT, targets, device, DType::U32, &[t])?;
    expect(WHAT, d_logits, device, DType::F32, &[t, v])?;
    if v == 0 {
        return Err(invalid(WHAT, "logits have no columns".into()));
    }
    if extras.len() > CrossEntropyPack::MAX_EXTRAS {
        return Err(invalid(
            WHAT,
            format!(
                "{} inputs to pack, at most {}",
                extras.len(),
                CrossEntropyPack::MAX_EXTRAS
            ),
        ));
    }
    let mut params = Params::new(WHAT, t, v, 1.0 / t.max(1) as f32)?;
    let mut words = t;
    for (len, x) in params.extra_len.iter_mut().zip(extras) {
        if x.device().id() != device.id() || x.dtype().size() != 4 {
            return Err(invalid(
                WHAT,
                "packs 4-byte elements on the logits' device only".into(),
            ));
        }
        *len = to_u32(WHAT, x.len())?;
        words += x.len();
    }
    expect(WHAT, pack, device, DType::U32, &[words])?;
    let mut bindings = vec![
        (6, logits.buffer()),
        (7, targets.buffer()),
        (9, d_logits.buffer()),
        (10, pack.buffer()),
    ];
    // An absent input is bound to the targets (read-only, and never read: its length is 0).
    for k in 0..CrossEntropyPack::MAX_EXTRAS {
        let x = extras.get(k).map_or(targets.buffer(), Tensor::buffer);
        bindings.push((11 + k as u32, x));
    }
    // At least one thread, so that the inputs are copied when there are no rows.
    LOSS.encode_threads(encoder, device, WHAT, &params, &bindings, t.max(1))
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

/// `[logits [T, V], targets [T], extras…] → [pack [T + Σ extras] u32, d_logits [T, V]]`:
/// [`CrossEntropy`] whose row losses (their f32 bits) open a statistics pack, followed by the
/// words of up to [`Self::MAX_EXTRAS`] more inputs of 4-byte elements, as [`super::Pack`] would
/// lay them out: a step's statistics come back without a copy launch after the loss. The row
/// losses and the gradient are [`CrossEntropy`]'s bit for bit (the same WGSL function).
#[derive(Debug, Clone)]
pub struct CrossEntropyPack;

impl CrossEntropyPack {
    /// Inputs a launch packs after the row losses: with the loss's four buffers, WebGPU's default
    /// eight storage buffers per stage.
    pub const MAX_EXTRAS: usize = 4;
}

impl Kernel for CrossEntropyPack {
    fn kind(&self) -> &'static str {
        "cross_entropy_pack"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let extras = inputs.get(2..).unwrap_or_default();
        if inputs.len() < 2 || extras.len() > Self::MAX_EXTRAS {
            return Err(invalid(
                self.kind(),
                format!(
                    "takes logits, targets and at most {} inputs to pack, got {} inputs",
                    Self::MAX_EXTRAS,
                    inputs.len()
                ),
            ));
        }
        if extras.iter().any(|t| t.dtype.size() != 4) {
            return Err(invalid(self.kind(), "packs 4-byte elements only".into()));
        }
        let (t, v) = check::rows_cols(self.kind(), &inputs[0])?;
        let words = t + extras.iter().map(TensorType::len).sum::<usize>();
        Ok(vec![
            TensorType::new(DType::U32, &[words]),
            TensorType::f32(&[t, v]),
        ])
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let extras = x.get(2..).unwrap_or_default();
        let (Some(logits), Some(targets)) = (x.first(), x.get(1)) else {
            return Err(invalid(self.kind(), "needs logits and targets".into()));
        };
        encode_cross_entropy_pack(
            rec,
            logits,
            targets,
            extras,
            check::output(y, 0)?,
            check::output(y, 1)?,
        )
    }
    /// The pack lies as [`super::Pack`]'s of the row losses and the extra inputs; the gradient
    /// by rows, as [`CrossEntropy`]'s.
    fn shardings(&self, inputs: &[NamedSharding], outputs: &[TensorType]) -> sharding_rules::Rule {
        let (Some(loss_inputs), Some(pack), Some(d_logits)) =
            (inputs.get(..2), outputs.first(), outputs.get(1))
        else {
            return Err("needs logits and targets".into());
        };
        // `rows` reads only the outputs' ranks: the row losses are one-dimensional, as the pack.
        let ce = sharding_rules::rows(loss_inputs, &[pack.clone(), d_logits.clone()])?;
        let mut packed = vec![ce[0].clone()];
        packed.extend_from_slice(&inputs[2..]);
        let pack = sharding_rules::pack(&packed)?;
        Ok(vec![pack[0].clone(), ce[1].clone()])
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

/// The mean squared error of `y` against `target`, summed in f64: the loss whose gradient
/// [`MseGrad`] computes (0 for no values).
pub fn mse_reference(y: &[f32], target: &[f32]) -> f32 {
    let sum: f64 = y
        .iter()
        .zip(target)
        .map(|(&y, &t)| f64::from(y - t).powi(2))
        .sum();
    (sum / y.len().max(1) as f64) as f32
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
