//! Layer normalisation over the last dimension (`shaders/layer_norm.wgsl`), the pre-norm of a
//! Transformer block, and its backward:
//!
//! - [`LayerNorm`]: `(x [R, D], gamma [D], beta [D]) → (y [R, D], stats [R, 2])`, with
//!   `y = (x − mean)·rstd·gamma + beta`, `rstd = 1/√(var + eps)` (biased variance, as PyTorch's
//!   `nn.LayerNorm`), `stats` each row's `(mean, rstd)` for the backward;
//! - [`LayerNormBackward`]: `(x, gamma, stats, dy[, addend]) → (dx [R, D], d_gamma [D],
//!   d_beta [D])`, in one launch; with an `addend` (a residual branch's gradient) `dx` is the
//!   norm's plus it.
//!
//! Rows split over devices: `y`, `stats` and `dx` split like `x`, and `d_gamma`, `d_beta` (sums
//! over the rows) are partial sums over the axes that split them, to be all-reduced like any
//! weight gradient. [`super::eager`] runs the same types now; [`layer_norm_reference`] and
//! [`layer_norm_backward_reference`] are the plain-Rust references (in f64). f32 only.

use super::{Kernel, Prepared, TensorType, check, sharding_rules};
use crate::device::Recorder;
use crate::kernels::Shader;
use crate::named_sharding::NamedSharding;
use crate::{DType, Error, Result, Tensor};

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
    if !(eps.is_finite() && eps > 0.0) {
        return Err(check::invalid(
            what,
            format!("eps must be positive, got {eps}"),
        ));
    }
    if cols == 0 {
        return Err(check::invalid(what, "rows are empty".into()));
    }
    Ok(Params {
        rows: check::to_u32(what, rows)?,
        cols: check::to_u32(what, cols)?,
        eps,
        _pad: 0.0,
    })
}

/// Records the forward into caller-allocated `y` `[R, D]` and `stats` `[R, 2]`.
fn encode_layer_norm(
    encoder: &mut impl Recorder,
    [x, gamma, beta]: [&Tensor; 3],
    [y, stats]: [&Tensor; 2],
    eps: f32,
) -> Result<()> {
    const WHAT: &str = "layer_norm";
    let device = x.device();
    let (rows, cols) = check::dims2(WHAT, x)?;
    check::expect(WHAT, x, device, DType::F32, &[rows, cols])?;
    check::expect(WHAT, gamma, device, DType::F32, &[cols])?;
    check::expect(WHAT, beta, device, DType::F32, &[cols])?;
    check::expect(WHAT, y, device, DType::F32, &[rows, cols])?;
    check::expect(WHAT, stats, device, DType::F32, &[rows, 2])?;
    let p = params(WHAT, rows, cols, eps)?;
    let bindings = [
        (1, x.buffer()),
        (2, gamma.buffer()),
        (3, beta.buffer()),
        (4, y.buffer()),
        (5, stats.buffer()),
    ];
    LAYER_NORM.encode_threads(encoder, device, "layer_norm_forward", &p, &bindings, rows)
}

/// Records the backward into caller-allocated `dx` `[R, D]`, `d_gamma` and `d_beta` `[D]`.
fn encode_layer_norm_backward(
    encoder: &mut impl Recorder,
    [x, gamma, stats, dy]: [&Tensor; 4],
    addend: Option<&Tensor>,
    [dx, d_gamma, d_beta]: [&Tensor; 3],
) -> Result<()> {
    const WHAT: &str = "layer_norm_backward";
    let device = x.device();
    let (rows, cols) = check::dims2(WHAT, x)?;
    check::expect(WHAT, gamma, device, DType::F32, &[cols])?;
    check::expect(WHAT, stats, device, DType::F32, &[rows, 2])?;
    check::expect(WHAT, dy, device, DType::F32, &[rows, cols])?;
    check::expect(WHAT, dx, device, DType::F32, &[rows, cols])?;
    check::expect(WHAT, d_gamma, device, DType::F32, &[cols])?;
    check::expect(WHAT, d_beta, device, DType::F32, &[cols])?;
    // Any eps: the backward reads rstd from the stats.
    let p = params(WHAT, rows, cols, DEFAULT_EPS)?;
    let mut bindings = vec![
        (1, x.buffer()),
        (2, gamma.buffer()),
        (6, stats.buffer()),
        (7, dy.buffer()),
        (8, dx.buffer()),
        (9, d_gamma.buffer()),
        (10, d_beta.buffer()),
    ];
    let entry = match addend {
        Some(a) => {
            check::expect(WHAT, a, device, DType::F32, &[rows, cols])?;
            bindings.push((11, a.buffer()));
            "layer_norm_backward_add"
        }
        None => WHAT,
    };
    // One launch: a thread per row of dx, then one per column of the parameters' gradients.
    LAYER_NORM.encode_threads(encoder, device, entry, &p, &bindings, rows + cols)
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
    let (rows, cols) = check::rows_cols(what, x)?;
    check::expect_type(what, x, &TensorType::f32(&[rows, cols]))?;
    let want = TensorType::f32(&[cols]);
    for t in vectors {
        check::expect_type(what, t, &want)?;
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
        check::arity(self.kind(), inputs, 3)?;
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
            [check::output(y, 0)?, check::output(y, 1)?],
            self.eps,
        )
    }
}

/// `(x, gamma, stats, dy[, addend]) → (dx [R, D], d_gamma [D], d_beta [D])` as a program node;
/// with an `addend` `[R, D]` (a residual branch's gradient), `dx` is the norm's plus it, in the
/// same launch.
#[derive(Debug, Clone)]
pub struct LayerNormBackward;

impl Kernel for LayerNormBackward {
    fn kind(&self) -> &'static str {
        "layer_norm_backward"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        if inputs.len() != 5 {
            check::arity(self.kind(), inputs, 4)?;
        }
        let (rows, cols) = row_types(self.kind(), &inputs[0], &[&inputs[1]])?;
        check::expect_type(self.kind(), &inputs[2], &TensorType::f32(&[rows, 2]))?;
        for row_input in &inputs[3..] {
            check::expect_type(self.kind(), row_input, &TensorType::f32(&[rows, cols]))?;
        }
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
            x.get(4),
            [
                check::output(y, 0)?,
                check::output(y, 1)?,
                check::output(y, 2)?,
            ],
        )
    }
}
