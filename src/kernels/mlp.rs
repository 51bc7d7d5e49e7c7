//! MLP training kernels (`shaders/mlp.wgsl`): what a training step needs beside matmul and relu.
//!
//! - [`relu_backward`]: `dx = dy * (act > 0)`;
//! - [`mse_grad`]: `dy = 2 (y − t) / n`, the gradient of `mean((y − t)²)` over the `n` values;
//! - [`accumulate`]: `acc += x`, in place (gradient accumulation over microbatches);
//! - [`sgd`]: `w -= lr · g`, in place.
//!
//! Each is also a [`Kernel`] type a program node holds ([`ReluBackward`], [`MseGrad`],
//! [`Accumulate`], [`Sgd`]); the blocking launchers check dtypes (f32), devices and shapes, then run
//! those same types through [`super::eager::run`]. Each has a plain-Rust reference of the same name
//! with `_reference`.

use super::{Kernel, Prepared, TensorType, node, sharding_rules};
use super::{MLP, eager, grid_1d};
use crate::device::Recorder;
use crate::named_sharding::NamedSharding;
use crate::{DType, Error, Result, Tensor};

#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    len: u32,
    _pad: u32,
    scale: f32,
    _pad2: f32,
}

/// Checks that `others` are f32 tensors on `first`'s device with its shape.
fn check(what: &'static str, first: &Tensor, others: &[&Tensor]) -> Result<()> {
    first.expect_dtype(what, DType::F32)?;
    for t in others {
        t.expect_device(what, first.device())?;
        t.expect_dtype(what, DType::F32)?;
        t.expect_shape(what, first.shape())?;
    }
    Ok(())
}

/// In-place kernels write `y` while reading `x`: one buffer cannot be both in one dispatch.
fn check_distinct(what: &'static str, y: &Tensor, x: &Tensor) -> Result<()> {
    if y.buffer() == x.buffer() {
        return Err(Error::InvalidArgument {
            what,
            reason: "the updated tensor and the input must be different buffers".into(),
        });
    }
    Ok(())
}

/// Records `entry` over `len` elements: `x` at binding 1, `z` (when the entry reads it) at 2, `y`
/// at 3.
fn encode_launch(
    encoder: &mut impl Recorder,
    entry: &'static str,
    scale: f32,
    x: &Tensor,
    z: Option<&Tensor>,
    y: &Tensor,
) -> Result<()> {
    let device = x.device();
    let len = x.len();
    let params = device.uniform_buffer(
        "mlp params",
        &Params {
            len: u32::try_from(len).map_err(|_| Error::InvalidArgument {
                what: entry,
                reason: format!("{len} elements exceed u32"),
            })?,
            _pad: 0,
            scale,
            _pad2: 0.0,
        },
    );
    let pipeline = MLP.pipeline(device, DType::F32, entry)?;
    // Auto layouts hold only what the entry point uses: `z` is bound only when it is read.
    let mut bindings = vec![(0, &params), (1, x.buffer()), (3, y.buffer())];
    bindings.extend(z.map(|z| (2, z.buffer())));
    device.encode_dispatch(
        encoder,
        entry,
        &pipeline,
        &bindings,
        grid_1d(device, entry, len)?,
    )
}

/// Records [`relu_backward`] into `out` (shaped like `grad`).
pub fn encode_relu_backward(
    encoder: &mut impl Recorder,
    grad: &Tensor,
    act: &Tensor,
    out: &Tensor,
) -> Result<()> {
    const WHAT: &str = "relu_backward";
    check(WHAT, grad, &[act, out])?;
    encode_launch(encoder, WHAT, 1.0, grad, Some(act), out)
}

/// Records [`mse_grad`] into `out` (shaped like `y`).
pub fn encode_mse_grad(
    encoder: &mut impl Recorder,
    y: &Tensor,
    target: &Tensor,
    out: &Tensor,
) -> Result<()> {
    const WHAT: &str = "mse_grad";
    check(WHAT, y, &[target, out])?;
    encode_launch(encoder, WHAT, mse_scale(y.len()), y, Some(target), out)
}

/// Records [`sgd`]: `w -= lr · g`.
pub fn encode_sgd(encoder: &mut impl Recorder, w: &Tensor, g: &Tensor, lr: f32) -> Result<()> {
    const WHAT: &str = "sgd";
    check(WHAT, w, &[g])?;
    check_distinct(WHAT, w, g)?;
    if !lr.is_finite() {
        return Err(Error::InvalidArgument {
            what: WHAT,
            reason: format!("learning rate must be finite, got {lr}"),
        });
    }
    encode_launch(encoder, WHAT, lr, g, None, w)
}

/// Records [`accumulate`]: `acc += x`.
pub fn encode_accumulate(encoder: &mut impl Recorder, acc: &Tensor, x: &Tensor) -> Result<()> {
    const WHAT: &str = "accumulate";
    check(WHAT, acc, &[x])?;
    check_distinct(WHAT, acc, x)?;
    encode_launch(encoder, WHAT, 1.0, x, None, acc)
}

/// `grad * (act > 0)`: the gradient through a relu, given the gradient of its output and its
/// output (or input: both are positive at the same places).
pub fn relu_backward(grad: &Tensor, act: &Tensor) -> Result<Tensor> {
    const WHAT: &str = "relu_backward";
    check(WHAT, grad, &[act])?;
    eager::run_one(&ReluBackward, &[grad, act])
}

/// `2 (y − target) / n` with `n = y.len()`: the gradient of the mean squared error.
pub fn mse_grad(y: &Tensor, target: &Tensor) -> Result<Tensor> {
    const WHAT: &str = "mse_grad";
    check(WHAT, y, &[target])?;
    eager::run_one(&MseGrad, &[y, target])
}

/// `acc += x`, in place.
pub fn accumulate(acc: &Tensor, x: &Tensor) -> Result<()> {
    const WHAT: &str = "accumulate";
    check(WHAT, acc, &[x])?;
    check_distinct(WHAT, acc, x)?;
    eager::run(&Accumulate, &[acc, x]).map(drop)
}

/// `w -= lr * g`, in place: one SGD step.
pub fn sgd(w: &Tensor, g: &Tensor, lr: f32) -> Result<()> {
    const WHAT: &str = "sgd";
    check(WHAT, w, &[g])?;
    check_distinct(WHAT, w, g)?;
    if !lr.is_finite() {
        return Err(Error::InvalidArgument {
            what: WHAT,
            reason: format!("learning rate must be finite, got {lr}"),
        });
    }
    eager::run(&Sgd { lr }, &[w, g]).map(drop)
}

fn mse_scale(n: usize) -> f32 {
    if n == 0 { 0.0 } else { 2.0 / n as f32 }
}

/// Reference of [`relu_backward`].
pub fn relu_backward_reference(grad: &[f32], act: &[f32]) -> Vec<f32> {
    grad.iter()
        .zip(act)
        .map(|(&g, &a)| if a > 0.0 { g } else { 0.0 })
        .collect()
}

/// Reference of [`mse_grad`].
pub fn mse_grad_reference(y: &[f32], target: &[f32]) -> Vec<f32> {
    let scale = mse_scale(y.len());
    y.iter()
        .zip(target)
        .map(|(&y, &t)| scale * (y - t))
        .collect()
}

/// Reference of [`accumulate`].
pub fn accumulate_reference(acc: &mut [f32], x: &[f32]) {
    acc.iter_mut().zip(x).for_each(|(a, &x)| *a += x);
}

/// Reference of [`sgd`].
pub fn sgd_reference(w: &mut [f32], g: &[f32], lr: f32) {
    w.iter_mut().zip(g).for_each(|(w, &g)| *w -= lr * g);
}

/// `(grad, act) → grad · (act > 0)` as a program node.
#[derive(Debug, Clone)]
pub struct ReluBackward;

impl Kernel for ReluBackward {
    fn kind(&self) -> &'static str {
        "relu_backward"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        node::arity(self.kind(), inputs, 2)?;
        Ok(vec![inputs[0].clone()])
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        encode_relu_backward(rec, &x[0], &x[1], node::output(y, 0)?)
    }
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

/// The type of `a += b` / `a -= lr · b` in place: both the same.
fn same_pair(what: &'static str, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
    node::arity(what, inputs, 2)?;
    if inputs[0] != inputs[1] {
        return Err(node::invalid(
            what,
            format!("{} += {}", inputs[0], inputs[1]),
        ));
    }
    Ok(vec![inputs[0].clone()])
}

/// `(acc, x) → acc + x`, in place of `acc`, as a program node.
#[derive(Debug, Clone)]
pub struct Accumulate;

impl Kernel for Accumulate {
    fn kind(&self) -> &'static str {
        "accumulate"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        same_pair(self.kind(), inputs)
    }
    fn in_place(&self) -> Vec<(usize, usize)> {
        vec![(0, 0)]
    }
    fn shardings(&self, inputs: &[NamedSharding], _: &[TensorType]) -> sharding_rules::Rule {
        sharding_rules::in_place(inputs, 1, 0)
    }
    fn prepare(&self, x: &[Tensor], _: &[Tensor], rec: &mut Prepared) -> Result<()> {
        encode_accumulate(rec, &x[0], &x[1])
    }
}

/// `(w, g) → w − lr · g`, in place of `w`, as a program node.
#[derive(Debug, Clone)]
pub struct Sgd {
    pub lr: f32,
}

impl Kernel for Sgd {
    fn kind(&self) -> &'static str {
        "sgd"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        same_pair(self.kind(), inputs)
    }
    fn in_place(&self) -> Vec<(usize, usize)> {
        vec![(0, 0)]
    }
    fn shardings(&self, inputs: &[NamedSharding], _: &[TensorType]) -> sharding_rules::Rule {
        sharding_rules::in_place(inputs, 1, 0)
    }
    fn prepare(&self, x: &[Tensor], _: &[Tensor], rec: &mut Prepared) -> Result<()> {
        encode_sgd(rec, &x[0], &x[1], self.lr)
    }
}
