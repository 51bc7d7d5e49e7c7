//! Optimizer steps and gradient accumulation, in place (`shaders/optim.wgsl`): one bias-corrected
//! Adam step, one SGD step, and `acc += x`. Each is a [`Kernel`] type whose first input is updated
//! in place (run it with [`crate::kernels::eager`] or as a program node), with a `*_reference` in
//! plain Rust.

use crate::device::Recorder;
use crate::kernels::Shader;
use crate::kernels::check::{self, expect, invalid, to_u32};
use crate::kernels::{Kernel, Prepared, TensorType, sharding_rules};
use crate::named_sharding::NamedSharding;
use crate::{DType, Error, Result, Tensor};

/// `Params` of `optim.wgsl`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    len: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    scale: f32,
    bias1: f32,
    bias2: f32,
}

pub const OPTIM: Shader = Shader {
    name: "optim",
    source: include_str!("../../shaders/optim.wgsl"),
    common: crate::kernels::FLAT_COMMON,
    ..crate::kernels::SHADER
};

/// Adam hyper-parameters; no weight decay.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdamConfig {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
}

impl AdamConfig {
    /// β1 0.9, β2 0.999, ε 1e-8.
    pub fn new(lr: f32) -> Self {
        Self {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        }
    }

    fn validate(&self, step: u32) -> Result<()> {
        let ok = self.lr.is_finite()
            && (0.0..1.0).contains(&self.beta1)
            && (0.0..1.0).contains(&self.beta2)
            && self.eps.is_finite()
            && self.eps > 0.0;
        if !ok || step == 0 {
            return Err(Error::InvalidArgument {
                what: "adam",
                reason: format!(
                    "need a finite lr, betas in [0, 1), eps > 0 and step >= 1; got {self:?}, step {step}"
                ),
            });
        }
        Ok(())
    }

    /// `(1 / (1 − β1^step), 1 / (1 − β2^step))`, computed in f64 once for kernel and reference.
    pub fn bias(&self, step: u32) -> (f32, f32) {
        let c = |b: f32| (1.0 / (1.0 - f64::from(b).powf(f64::from(step)))) as f32;
        (c(self.beta1), c(self.beta2))
    }
}

// ---- Adam --------------------------------------------------------------------------------------

/// Records one Adam step on `grad · grad_scale` whose bias corrections are read when the commands
/// run, from `bias` (f32 `[2]`: [`AdamConfig::bias`] of the step): one recording serves every
/// step of a compiled training program.
#[allow(clippy::too_many_arguments)]
fn encode_adam_from(
    encoder: &mut impl Recorder,
    param: &Tensor,
    m: &Tensor,
    v: &Tensor,
    grad: &Tensor,
    config: AdamConfig,
    grad_scale: f32,
    bias: &Tensor,
) -> Result<()> {
    config.validate(1)?;
    if !grad_scale.is_finite() {
        return Err(invalid(
            WHAT,
            format!("the gradient's scale must be finite, got {grad_scale}"),
        ));
    }
    expect(WHAT, bias, param.device(), DType::F32, &[2])?;
    let params = checked_params(param, m, v, grad, config, (1.0, 1.0), grad_scale)?;
    let uniform = param.device().uniform_buffer(WHAT, &params);
    let at = std::mem::offset_of!(Params, bias1) as u64;
    encoder.copy_buffer_to_buffer(bias.buffer(), 0, &uniform, at, 8);
    let bindings = [
        (23, param.buffer()),
        (24, m.buffer()),
        (25, v.buffer()),
        (26, grad.buffer()),
    ];
    let device = param.device();
    OPTIM.encode_threads_in(encoder, device, WHAT, &uniform, &bindings, param.len())
}

const WHAT: &str = "adam";

/// Checks the four tensors (f32, one shape, one device, distinct buffers) and makes the step's
/// parameters with bias corrections `bias`, the gradient read as `grad · grad_scale`.
fn checked_params(
    param: &Tensor,
    m: &Tensor,
    v: &Tensor,
    grad: &Tensor,
    config: AdamConfig,
    (bias1, bias2): (f32, f32),
    grad_scale: f32,
) -> Result<Params> {
    for t in [param, m, v, grad] {
        expect(WHAT, t, param.device(), DType::F32, param.shape())?;
    }
    let buffers = [param.buffer(), m.buffer(), v.buffer(), grad.buffer()];
    for (i, a) in buffers.iter().enumerate() {
        if buffers[i + 1..].contains(a) {
            return Err(invalid(
                WHAT,
                "param, m, v and grad must be distinct".into(),
            ));
        }
    }
    Ok(Params {
        len: to_u32(WHAT, param.len())?,
        lr: config.lr,
        beta1: config.beta1,
        beta2: config.beta2,
        eps: config.eps,
        scale: grad_scale,
        bias1,
        bias2,
    })
}

/// Reference of [`Adam`] at step `step` (from 1), in place.
pub fn adam_reference(
    param: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    grad: &[f32],
    config: AdamConfig,
    step: u32,
) -> Result<()> {
    config.validate(step)?;
    let n = param.len();
    if m.len() != n || v.len() != n || grad.len() != n {
        return Err(Error::ShapeMismatch {
            what: "adam_reference",
            expected: format!("{n} values in m, v and grad"),
            got: format!("{}, {}, {}", m.len(), v.len(), grad.len()),
        });
    }
    let (bias1, bias2) = config.bias(step);
    let AdamConfig {
        lr,
        beta1,
        beta2,
        eps,
    } = config;
    for i in 0..n {
        let g = grad[i];
        m[i] = beta1 * m[i] + (1.0 - beta1) * g;
        v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
        param[i] -= lr * (m[i] * bias1) / ((v[i] * bias2).sqrt() + eps);
    }
    Ok(())
}

/// `(param, m, v, grad, bias [2]) → (param, m, v)`, in place, as a program node; `bias` is the
/// step's [`AdamConfig::bias`], given at run time. The step reads the gradient as
/// `grad · grad_scale` (a training step's `1/G` over its routing groups): the product a separate
/// scaling kernel would have stored, rounded once, without that kernel's launch and its pass
/// over the gradient on every device.
#[derive(Debug, Clone)]
pub struct Adam {
    pub config: AdamConfig,
    pub grad_scale: f32,
}

impl Adam {
    /// The step on the gradient as it is.
    pub fn new(config: AdamConfig) -> Self {
        Self {
            config,
            grad_scale: 1.0,
        }
    }
}

impl Kernel for Adam {
    fn kind(&self) -> &'static str {
        "adam"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        check::arity(self.kind(), inputs, 5)?;
        Ok(inputs[..3].to_vec())
    }
    fn in_place(&self) -> Vec<(usize, usize)> {
        vec![(0, 0), (1, 1), (2, 2)]
    }
    /// (param, m, v, grad) alike; the bias corrections are the step's constants.
    fn shardings(&self, inputs: &[NamedSharding], _: &[TensorType]) -> sharding_rules::Rule {
        sharding_rules::in_place(inputs, 3, 1)
    }
    fn prepare(&self, x: &[Tensor], _: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let (config, scale) = (self.config, self.grad_scale);
        encode_adam_from(rec, &x[0], &x[1], &x[2], &x[3], config, scale, &x[4])
    }
}

/// Checks an in-place update of `w` by `g`: f32 tensors of one shape on one device, and two
/// different buffers (one buffer cannot be read and written in one dispatch).
fn check_update(what: &'static str, w: &Tensor, g: &Tensor) -> Result<()> {
    expect(what, w, w.device(), DType::F32, w.shape())?;
    expect(what, g, w.device(), DType::F32, w.shape())?;
    if w.buffer() == g.buffer() {
        return Err(invalid(
            what,
            "the updated tensor and the input must be different buffers".into(),
        ));
    }
    Ok(())
}

/// Records `entry` (`sgd`: `w -= lr · g`; `accumulate`: `w += g`) over `w`.
fn encode_update(
    encoder: &mut impl Recorder,
    entry: &'static str,
    w: &Tensor,
    g: &Tensor,
    lr: f32,
) -> Result<()> {
    check_update(entry, w, g)?;
    let params = Params {
        len: to_u32(entry, w.len())?,
        lr,
        ..Params::default()
    };
    let bindings = [(23, w.buffer()), (26, g.buffer())];
    OPTIM.encode_threads(encoder, w.device(), entry, &params, &bindings, w.len())
}

/// Records [`Sgd`]: `w -= lr · g`.
fn encode_sgd(encoder: &mut impl Recorder, w: &Tensor, g: &Tensor, lr: f32) -> Result<()> {
    if !lr.is_finite() {
        return Err(invalid(
            "sgd",
            format!("learning rate must be finite, got {lr}"),
        ));
    }
    encode_update(encoder, "sgd", w, g, lr)
}

/// Records [`Accumulate`]: `acc += x`.
fn encode_accumulate(encoder: &mut impl Recorder, acc: &Tensor, x: &Tensor) -> Result<()> {
    encode_update(encoder, "accumulate", acc, x, 0.0)
}

/// Reference of [`Accumulate`].
pub fn accumulate_reference(acc: &mut [f32], x: &[f32]) {
    acc.iter_mut().zip(x).for_each(|(a, &x)| *a += x);
}

/// Reference of [`Sgd`].
pub fn sgd_reference(w: &mut [f32], g: &[f32], lr: f32) {
    w.iter_mut().zip(g).for_each(|(w, &g)| *w -= lr * g);
}

/// The type of `a += b` / `a -= lr · b` in place: both the same.
fn same_pair(what: &'static str, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
    check::arity(what, inputs, 2)?;
    check::expect_type(what, &inputs[0], &TensorType::f32(&inputs[0].shape))?;
    check::expect_type(what, &inputs[1], &inputs[0])?;
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
