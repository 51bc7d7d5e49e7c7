//! Optimizer steps and gradient accumulation, in place: one bias-corrected Adam step over any
//! number of tensors (`shaders/adam.wgsl`, up to eight a launch), one SGD step, and `acc += x`
//! (`shaders/optim.wgsl`). Each is a [`Kernel`] type whose first input is updated in place (run it
//! with [`crate::kernels::eager`] or as a program node), with a `*_reference` in plain Rust.

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
    _pad: [u32; 2],
}

pub const OPTIM: Shader = Shader {
    name: "optim",
    source: include_str!("../../shaders/optim.wgsl"),
    common: crate::kernels::FLAT_COMMON,
    ..crate::kernels::SHADER
};

/// The most tensors one Adam launch updates: build.rs writes `shaders/adam.wgsl` out for 1 to 8.
pub const ADAM_SLOTS: usize = 8;

/// `Params` of `adam.wgsl`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct AdamParams {
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    scale: f32,
    bias1: f32,
    bias2: f32,
    total: u32,
    ends: [u32; ADAM_SLOTS],
}

const fn adam_shader(name: &'static str, source: &'static str, slots: usize) -> Shader {
    Shader {
        name,
        source,
        common: crate::kernels::FLAT_COMMON,
        // Four storage buffers a tensor (parameter, gradient, two moments).
        chosen_by_limits: if 4 * slots > 8 {
            Some(
                "Adam over t tensors binds 4t storage buffers: a launch takes \
                 ⌊max_storage_buffers_per_shader_stage / 4⌋ tensors (2 under WebGPU's defaults)",
            )
        } else {
            None
        },
        ..crate::kernels::SHADER
    }
}

macro_rules! adam_shaders {
    ($($name:ident = $slots:literal),*) => {
        $(
            #[doc = concat!("Adam over ", $slots, " tensors a launch.")]
            pub const $name: Shader = adam_shader(
                concat!("adam_", $slots),
                include_str!(concat!(env!("OUT_DIR"), "/adam_", $slots, ".wgsl")),
                $slots,
            );
        )*
        /// The Adam shaders by slot count: `ADAM[t - 1]` updates `t` tensors.
        const ADAM: [Shader; ADAM_SLOTS] = [$($name),*];
    };
}

adam_shaders!(
    ADAM_1 = 1,
    ADAM_2 = 2,
    ADAM_3 = 3,
    ADAM_4 = 4,
    ADAM_5 = 5,
    ADAM_6 = 6,
    ADAM_7 = 7,
    ADAM_8 = 8
);

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

/// The tensors of an Adam node with `inputs` inputs: four each, and the bias corrections.
fn tensor_count(inputs: usize) -> Result<usize> {
    if inputs < 5 || !(inputs - 1).is_multiple_of(4) {
        return Err(invalid(
            WHAT,
            format!(
                "takes (param, m, v, grad) per tensor and the bias corrections: 4n + 1 inputs, got {inputs}"
            ),
        ));
    }
    Ok((inputs - 1) / 4)
}

/// Records one Adam step of every `(param, m, v, grad)` of `tensors` on `grad · grad_scale`,
/// whose bias corrections are read when the commands run, from `bias` (f32 `[2]`:
/// [`AdamConfig::bias`] of the step): one recording serves every step of a compiled training
/// program. As few launches as the device's storage-buffer limit allows (four buffers a tensor,
/// at most [`ADAM_SLOTS`] tensors a launch): one for a step's tensors on most adapters, two
/// tensors a launch within WebGPU's default 8 buffers.
fn encode_adam(
    encoder: &mut impl Recorder,
    tensors: &[[&Tensor; 4]],
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
    let device = bias.device();
    expect(WHAT, bias, device, DType::F32, &[2])?;
    check_tensors(tensors, device)?;
    let limit = device.info().limits.max_storage_buffers_per_shader_stage as usize;
    let slots = (limit / 4).clamp(1, ADAM_SLOTS);
    for chunk in tensors.chunks(slots) {
        let mut params = AdamParams {
            lr: config.lr,
            beta1: config.beta1,
            beta2: config.beta2,
            eps: config.eps,
            scale: grad_scale,
            bias1: 1.0,
            bias2: 1.0,
            ..AdamParams::default()
        };
        let mut bindings = Vec::with_capacity(4 * chunk.len());
        let mut total = 0usize;
        for (j, t) in chunk.iter().enumerate() {
            total += t[0].len();
            for (k, tensor) in t.iter().enumerate() {
                bindings.push((to_u32(WHAT, 4 * j + 1 + k)?, tensor.buffer()));
            }
            params.ends[j] = to_u32(WHAT, total)?;
        }
        params.total = to_u32(WHAT, total)?;
        for end in &mut params.ends[chunk.len()..] {
            *end = params.total;
        }
        let uniform = device.uniform_buffer(WHAT, &params);
        let at = std::mem::offset_of!(AdamParams, bias1) as u64;
        encoder.copy_buffer_to_buffer(bias.buffer(), 0, &uniform, at, 8);
        ADAM[chunk.len() - 1]
            .encode_threads_in(encoder, device, WHAT, &uniform, &bindings, total)?;
    }
    Ok(())
}

const WHAT: &str = "adam";

/// Checks each `(param, m, v, grad)`: f32, one shape, on `device`; and every buffer distinct
/// (one launch may update them all).
fn check_tensors(tensors: &[[&Tensor; 4]], device: &crate::Device) -> Result<()> {
    if tensors.is_empty() {
        return Err(invalid(WHAT, "no tensors to update".into()));
    }
    let mut seen: Vec<&wgpu::Buffer> = Vec::with_capacity(4 * tensors.len());
    for t in tensors {
        for x in t {
            expect(WHAT, x, device, DType::F32, t[0].shape())?;
            // A step's few dozen buffers: a scan is cheap (a buffer is no hash key).
            if seen.contains(&x.buffer()) {
                return Err(invalid(
                    WHAT,
                    "every param, m, v and grad must be a buffer of its own".into(),
                ));
            }
            seen.push(x.buffer());
        }
    }
    Ok(())
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

/// `(param, m, v, grad) × n, bias [2] → (param, m, v) × n`, in place, as a program node: one
/// Adam step of `n ≥ 1` tensors, each element's the same as one tensor's alone, in as few
/// launches as the device allows (eight tensors a launch where it has 32 storage buffers a
/// stage, two within WebGPU's default 8). `bias` is the step's [`AdamConfig::bias`], given at
/// run time. The step reads the gradient as
/// `grad · grad_scale` (a training step's `1/G` over its routing groups): the product a separate
/// scaling kernel would have stored, rounded once, without that kernel's launch and its pass
/// over the gradient on every device.
#[derive(Debug, Clone)]
pub struct Adam {
    pub config: AdamConfig,
    pub grad_scale: f32,
    /// The tensors the node updates (n above).
    pub tensors: usize,
}

impl Adam {
    /// The step of one tensor on its gradient as it is.
    pub fn new(config: AdamConfig) -> Self {
        Self {
            config,
            grad_scale: 1.0,
            tensors: 1,
        }
    }
}

impl Kernel for Adam {
    fn kind(&self) -> &'static str {
        "adam"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let n = tensor_count(inputs.len())?;
        if n != self.tensors {
            return Err(invalid(
                WHAT,
                format!("a node of {} tensors got {n}", self.tensors),
            ));
        }
        let mut out = Vec::with_capacity(3 * n);
        for t in inputs[..4 * n].chunks_exact(4) {
            for x in t {
                check::expect_type(WHAT, x, &TensorType::f32(&t[0].shape))?;
            }
            out.extend_from_slice(&t[..3]);
        }
        check::expect_type(WHAT, &inputs[4 * n], &TensorType::f32(&[2]))?;
        Ok(out)
    }
    fn in_place(&self) -> Vec<(usize, usize)> {
        (0..self.tensors)
            .flat_map(|j| (0..3).map(move |k| (3 * j + k, 4 * j + k)))
            .collect()
    }
    /// Each (param, m, v, grad) alike; the bias corrections are the step's constants.
    fn shardings(&self, inputs: &[NamedSharding], _: &[TensorType]) -> sharding_rules::Rule {
        let n = tensor_count(inputs.len()).map_err(|e| e.to_string())?;
        let bias = &inputs[4 * n..];
        let mut out = Vec::with_capacity(3 * n);
        for t in inputs[..4 * n].chunks_exact(4) {
            let quad: Vec<NamedSharding> = t.iter().chain(bias).cloned().collect();
            out.extend(sharding_rules::in_place(&quad, 3, 1)?);
        }
        Ok(out)
    }
    fn prepare(&self, x: &[Tensor], _: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let n = tensor_count(x.len())?;
        let tensors: Vec<[&Tensor; 4]> = x[..4 * n]
            .chunks_exact(4)
            .map(|t| [&t[0], &t[1], &t[2], &t[3]])
            .collect();
        encode_adam(rec, &tensors, self.config, self.grad_scale, &x[4 * n])
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
