//! Layer normalisation over the last dimension (`shaders/layer_norm.wgsl`), the pre-norm of a
//! Transformer block, and its backward:
//!
//! - [`LayerNorm`]: `(x [R, D], gamma [D], beta [D]) → (y [R, D], stats [R, 2])`, with
//!   `y = (x − mean)·rstd·gamma + beta`, `rstd = 1/√(var + eps)` (biased variance, as PyTorch's
//!   `nn.LayerNorm`), `stats` each row's `(mean, rstd)` for the backward;
//! - [`LayerNormBackward`]: `(x, gamma, stats, dy) → (dx [R, D], d_gamma [D], d_beta [D])`.
//!
//! Rows split over devices: `y`, `stats` and `dx` split like `x`, and `d_gamma`, `d_beta` (sums
//! over the rows) are partial sums over the axes that split them, to be all-reduced like any
//! weight gradient. Blocking forms [`layer_norm`] and [`layer_norm_backward`] run the same types
//! through [`super::eager`]; [`layer_norm_reference`] and [`layer_norm_backward_reference`] are
//! the plain-Rust references (in f64). f32 only.

use super::{Kernel, Prepared, TensorType, eager, node, sharding_rules};
use crate::device::Recorder;
use crate::kernels::Shader;
use crate::named_sharding::NamedSharding;
use crate::{DType, Device, Error, Result, Tensor};

pub const LAYER_NORM: Shader = Shader {
    name: "layer_norm",
    source: include_str!("../../shaders/layer_norm.wgsl"),
    ..crate::kernels::SHADER
};

/// PyTorch's default `eps`.
pub const DEFAULT_EPS: f32 = 1e-5;

#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    cols: u32,
    eps: f32,
    _pad: f32,
}

fn params(what: &'static str, rows: usize, cols: usize, eps: f32) -> Result<Params> {
    let u = |v: usize| {
        u32::try_from(v).map_err(|_| node::invalid(what, format!("{v} does not fit in u32")))
    };
    if !(eps.is_finite() && eps > 0.0) {
        return Err(node::invalid(
            what,
            format!("eps must be positive, got {eps}"),
        ));
    }
    if cols == 0 {
        return Err(node::invalid(what, "rows are empty".into()));
    }
    Ok(Params {
        rows: u(rows)?,
        cols: u(cols)?,
        eps,
        _pad: 0.0,
    })
}

fn expect(what: &'static str, t: &Tensor, device: &Device, shape: &[usize]) -> Result<()> {
    t.expect_device(what, device)?;
    t.expect_dtype(what, DType::F32)?;
    t.expect_shape(what, shape)
}

fn dims(what: &'static str, x: &Tensor) -> Result<(usize, usize)> {
    node::rows_cols(what, &TensorType::new(x.dtype(), x.shape()))
}

/// Records `entry` over `threads` threads (binding 0, the parameters, added here).
fn dispatch(
    encoder: &mut impl Recorder,
    device: &Device,
    entry: &'static str,
    p: &Params,
    bindings: &[(u32, &wgpu::Buffer)],
    threads: usize,
) -> Result<()> {
    let grid = super::grid_1d(device, entry, threads)?;
    LAYER_NORM.encode(encoder, device, entry, p, bindings, grid)
}

/// Records the forward into caller-allocated `y` `[R, D]` and `stats` `[R, 2]`.
pub fn encode_layer_norm(
    encoder: &mut impl Recorder,
    [x, gamma, beta]: [&Tensor; 3],
    [y, stats]: [&Tensor; 2],
    eps: f32,
) -> Result<()> {
    const WHAT: &str = "layer_norm";
    let device = x.device();
    let (rows, cols) = dims(WHAT, x)?;
    expect(WHAT, x, device, &[rows, cols])?;
    expect(WHAT, gamma, device, &[cols])?;
    expect(WHAT, beta, device, &[cols])?;
    expect(WHAT, y, device, &[rows, cols])?;
    expect(WHAT, stats, device, &[rows, 2])?;
    let p = params(WHAT, rows, cols, eps)?;
    let bindings = [
        (1, x.buffer()),
        (2, gamma.buffer()),
        (3, beta.buffer()),
        (4, y.buffer()),
        (5, stats.buffer()),
    ];
    dispatch(encoder, device, "layer_norm_forward", &p, &bindings, rows)
}

/// Records the backward into caller-allocated `dx` `[R, D]`, `d_gamma` and `d_beta` `[D]`.
pub fn encode_layer_norm_backward(
    encoder: &mut impl Recorder,
    [x, gamma, stats, dy]: [&Tensor; 4],
    [dx, d_gamma, d_beta]: [&Tensor; 3],
) -> Result<()> {
    const WHAT: &str = "layer_norm_backward";
    let device = x.device();
    let (rows, cols) = dims(WHAT, x)?;
    expect(WHAT, gamma, device, &[cols])?;
    expect(WHAT, stats, device, &[rows, 2])?;
    expect(WHAT, dy, device, &[rows, cols])?;
    expect(WHAT, dx, device, &[rows, cols])?;
    expect(WHAT, d_gamma, device, &[cols])?;
    expect(WHAT, d_beta, device, &[cols])?;
    // Any eps: the backward reads rstd from the stats.
    let p = params(WHAT, rows, cols, DEFAULT_EPS)?;
    dispatch(
        encoder,
        device,
        "layer_norm_backward_dx",
        &p,
        &[
            (1, x.buffer()),
            (2, gamma.buffer()),
            (6, stats.buffer()),
            (7, dy.buffer()),
            (8, dx.buffer()),
        ],
        rows,
    )?;
    dispatch(
        encoder,
        device,
        "layer_norm_backward_params",
        &p,
        &[
            (1, x.buffer()),
            (6, stats.buffer()),
            (7, dy.buffer()),
            (9, d_gamma.buffer()),
            (10, d_beta.buffer()),
        ],
        cols,
    )
}

/// `(y, stats)` of [`LayerNorm`]. Blocks.
pub fn layer_norm(x: &Tensor, gamma: &Tensor, beta: &Tensor, eps: f32) -> Result<[Tensor; 2]> {
    eager::run_n(&LayerNorm { eps }, &[x, gamma, beta])
}

/// `(dx, d_gamma, d_beta)` of [`LayerNormBackward`]. Blocks.
pub fn layer_norm_backward(
    x: &Tensor,
    gamma: &Tensor,
    stats: &Tensor,
    dy: &Tensor,
) -> Result<[Tensor; 3]> {
    eager::run_n(&LayerNormBackward, &[x, gamma, stats, dy])
}

fn check_reference(what: &'static str, cols: usize, x: &[f32], vectors: &[&[f32]]) -> Result<()> {
    let bad = |expected: String, got: usize| Error::ShapeMismatch {
        what,
        expected,
        got: format!("{got} values"),
    };
    if cols == 0 || !x.len().is_multiple_of(cols) {
        return Err(bad(format!("rows of {cols}"), x.len()));
    }
    match vectors.iter().find(|v| v.len() != cols) {
        Some(v) => Err(bad(format!("{cols} values"), v.len())),
        None => Ok(()),
    }
}

/// Mean and rstd of one row, in f64.
fn row_stats(row: &[f32], eps: f32) -> (f64, f64) {
    let n = row.len() as f64;
    let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = row
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / n;
    (mean, 1.0 / (var + f64::from(eps)).sqrt())
}

/// Reference of the forward: `(y, stats)`.
pub fn layer_norm_reference(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let cols = gamma.len();
    check_reference("layer_norm_reference", cols, x, &[beta])?;
    let mut y = Vec::with_capacity(x.len());
    let mut stats = Vec::with_capacity(2 * x.len() / cols);
    for row in x.chunks_exact(cols) {
        let (mean, rstd) = row_stats(row, eps);
        y.extend(row.iter().zip(gamma).zip(beta).map(|((&v, &g), &b)| {
            ((f64::from(v) - mean) * rstd * f64::from(g) + f64::from(b)) as f32
        }));
        stats.extend([mean as f32, rstd as f32]);
    }
    Ok((y, stats))
}

/// Reference of the backward: `(dx, d_gamma, d_beta)` for the output gradient `dy`.
pub fn layer_norm_backward_reference(
    x: &[f32],
    gamma: &[f32],
    dy: &[f32],
    eps: f32,
) -> Result<[Vec<f32>; 3]> {
    let cols = gamma.len();
    check_reference("layer_norm_backward_reference", cols, x, &[])?;
    if dy.len() != x.len() {
        return Err(Error::ShapeMismatch {
            what: "layer_norm_backward_reference",
            expected: format!("{} values", x.len()),
            got: format!("{} values", dy.len()),
        });
    }
    let n = cols as f64;
    let mut dx = Vec::with_capacity(x.len());
    let (mut dg, mut db) = (vec![0f64; cols], vec![0f64; cols]);
    for (row, drow) in x.chunks_exact(cols).zip(dy.chunks_exact(cols)) {
        let (mean, rstd) = row_stats(row, eps);
        let xhat: Vec<f64> = row.iter().map(|&v| (f64::from(v) - mean) * rstd).collect();
        let g: Vec<f64> = drow
            .iter()
            .zip(gamma)
            .map(|(&d, &w)| f64::from(d) * f64::from(w))
            .collect();
        let g_mean = g.iter().sum::<f64>() / n;
        let gx_mean = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / n;
        dx.extend(
            g.iter()
                .zip(&xhat)
                .map(|(&gi, &xi)| (rstd * (gi - g_mean - xi * gx_mean)) as f32),
        );
        for c in 0..cols {
            dg[c] += f64::from(drow[c]) * xhat[c];
            db[c] += f64::from(drow[c]);
        }
    }
    let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect();
    Ok([dx, f(dg), f(db)])
}

/// `x [R, D]` and the `[D]` vectors that go with it.
fn row_types(
    what: &'static str,
    x: &TensorType,
    vectors: &[&TensorType],
) -> Result<(usize, usize)> {
    let (rows, cols) = node::rows_cols(what, x)?;
    node::expect_type(what, x, &TensorType::f32(&[rows, cols]))?;
    let want = TensorType::f32(&[cols]);
    for t in vectors {
        node::expect_type(what, t, &want)?;
    }
    Ok((rows, cols))
}

/// `(x [R, D], gamma [D], beta [D]) → (y [R, D], stats [R, 2])` as a program node.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    pub eps: f32,
}

impl Kernel for LayerNorm {
    fn kind(&self) -> &'static str {
        "layer_norm"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        node::arity(self.kind(), inputs, 3)?;
        let (rows, cols) = row_types(self.kind(), &inputs[0], &[&inputs[1], &inputs[2]])?;
        Ok(vec![
            TensorType::f32(&[rows, cols]),
            TensorType::f32(&[rows, 2]),
        ])
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        encode_layer_norm(
            rec,
            [&x[0], &x[1], &x[2]],
            [node::output(y, 0)?, node::output(y, 1)?],
            self.eps,
        )
    }
}

/// `(x, gamma, stats, dy) → (dx [R, D], d_gamma [D], d_beta [D])` as a program node.
#[derive(Debug, Clone)]
pub struct LayerNormBackward;

impl Kernel for LayerNormBackward {
    fn kind(&self) -> &'static str {
        "layer_norm_backward"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        node::arity(self.kind(), inputs, 4)?;
        let (rows, cols) = row_types(self.kind(), &inputs[0], &[&inputs[1]])?;
        node::expect_type(self.kind(), &inputs[2], &TensorType::f32(&[rows, 2]))?;
        node::expect_type(self.kind(), &inputs[3], &TensorType::f32(&[rows, cols]))?;
        let vector = TensorType::f32(&[cols]);
        Ok(vec![TensorType::f32(&[rows, cols]), vector.clone(), vector])
    }
    /// `dx` splits like the rows; the parameter gradients sum over the rows, so they are partial
    /// over the axes that split them.
    fn shardings(&self, inputs: &[NamedSharding], outputs: &[TensorType]) -> sharding_rules::Rule {
        sharding_rules::rows_then_sums(inputs, outputs, 1)
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        encode_layer_norm_backward(
            rec,
            [&x[0], &x[1], &x[2], &x[3]],
            [
                node::output(y, 0)?,
                node::output(y, 1)?,
                node::output(y, 2)?,
            ],
        )
    }
}
