//! Elementwise kernels (`shaders/elementwise.wgsl`): affine (optionally applied `repeat` times in one
//! dispatch, a fused chain), relu and GELU with their backwards, add, and a row sum. An
//! [`ElementwiseOp`] is itself the [`Kernel`] a program node holds (`ProgramBuilder::relu`, `add`,
//! `affine`, or `kernel` with any op); [`crate::kernels::eager`] runs one now, and [`reference`] is
//! its plain Rust.

use super::{Kernel, Prepared, TensorType, check, grid_1d};
use crate::device::Recorder;
use crate::kernels::Shader;
use crate::named_sharding::NamedSharding;
use crate::{DType, Device, Error, Result, Tensor};

pub const ELEMENTWISE: Shader = Shader {
    name: "elementwise",
    source: include_str!("../../shaders/elementwise.wgsl"),
    common: &[crate::kernels::GELU_COMMON],
    ..crate::kernels::SHADER
};

/// One elementwise computation over flat f32 arrays of equal length.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ElementwiseOp {
    /// `y = x * scale + shift`, applied `repeat` times.
    Affine {
        scale: f32,
        shift: f32,
        repeat: u32,
    },
    Relu,
    /// `y = z · (x > 0)`: the gradient `z` of a relu's output back through it, `x` the relu's
    /// output (or input: both are positive at the same places).
    ReluBackward,
    /// GELU in its tanh form, as GPT-2 and BERT use it (PyTorch's `gelu(x, approximate="tanh")`):
    /// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
    Gelu,
    /// `y = z · gelu'(x)`: the gradient `z` of GELU's output back to its input `x`.
    GeluBackward,
    /// `y = x + z`.
    Add,
    /// `y[i] = Σ_r x[r * len + i]` over `rows` rows.
    SumRows {
        rows: u32,
    },
}

impl ElementwiseOp {
    pub fn entry(&self) -> &'static str {
        match self {
            Self::Affine { .. } => "affine",
            Self::Relu => "relu",
            Self::ReluBackward => "relu_backward",
            Self::Gelu => "gelu",
            Self::GeluBackward => "gelu_backward",
            Self::Add => "add",
            Self::SumRows { .. } => "sum_rows",
        }
    }

    /// Inputs the op reads: `x`, and `z` for [`ElementwiseOp::Add`] and the backwards.
    pub fn inputs(&self) -> usize {
        if matches!(self, Self::Add | Self::ReluBackward | Self::GeluBackward) {
            2
        } else {
            1
        }
    }

    /// Elements of `x` the op reads per output element.
    pub fn input_len(&self, len: usize) -> usize {
        match *self {
            Self::SumRows { rows } => len * rows as usize,
            _ => len,
        }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    len: u32,
    repeat: u32,
    rows: u32,
    _pad: u32,
    scale: f32,
    shift: f32,
    _pad2: [f32; 2],
}

/// Records `op` writing `len` values to `y`.
fn encode(
    encoder: &mut impl Recorder,
    device: &Device,
    op: ElementwiseOp,
    x: &wgpu::Buffer,
    z: Option<&wgpu::Buffer>,
    y: &wgpu::Buffer,
    len: usize,
) -> Result<()> {
    let what = "elementwise";
    let need = |b: &wgpu::Buffer, n: usize, name: &str| {
        if b.size() < (n * 4) as u64 {
            Err(Error::InvalidArgument {
                what,
                reason: format!(
                    "{name} has {} bytes, {} needs {}",
                    b.size(),
                    op.entry(),
                    n * 4
                ),
            })
        } else {
            Ok(())
        }
    };
    need(x, op.input_len(len), "x")?;
    need(y, len, "y")?;
    let z = match (op.inputs(), z) {
        (2, Some(z)) => {
            need(z, len, "z")?;
            Some(z)
        }
        (2, None) => {
            return Err(Error::InvalidArgument {
                what,
                reason: format!("{} needs a second input", op.entry()),
            });
        }
        // Auto layouts hold only what an entry point uses: `z` is bound for two-input ops alone.
        _ => None,
    };
    let (scale, shift, repeat) = match op {
        ElementwiseOp::Affine {
            scale,
            shift,
            repeat,
        } => (scale, shift, repeat),
        _ => (1.0, 0.0, 1),
    };
    let rows = match op {
        ElementwiseOp::SumRows { rows } => rows,
        _ => 1,
    };
    let params = device.uniform_buffer(
        "elementwise params",
        &Params {
            len: check::to_u32(what, len)?,
            repeat,
            rows,
            _pad: 0,
            scale,
            shift,
            _pad2: [0.0; 2],
        },
    );
    let pipeline = ELEMENTWISE.pipeline(device, DType::F32, op.entry())?;
    let mut bindings = vec![(0, &params), (1, x), (2, y)];
    bindings.extend(z.map(|z| (3, z)));
    let grid = grid_1d(device, "elementwise", len)?;
    device.encode_dispatch(encoder, op.entry(), &pipeline, &bindings, grid)
}

/// The plain-Rust reference.
pub fn reference(op: ElementwiseOp, x: &[f32], z: Option<&[f32]>) -> Vec<f32> {
    match op {
        ElementwiseOp::Affine {
            scale,
            shift,
            repeat,
        } => x
            .iter()
            .map(|&v| (0..repeat).fold(v, |v, _| v * scale + shift))
            .collect(),
        ElementwiseOp::Relu => x.iter().map(|&v| v.max(0.0)).collect(),
        ElementwiseOp::ReluBackward => x
            .iter()
            .zip(z.unwrap_or(&[]))
            .map(|(&v, &g)| if v > 0.0 { g } else { 0.0 })
            .collect(),
        ElementwiseOp::Gelu => x.iter().map(|&v| gelu_reference(v as f64) as f32).collect(),
        ElementwiseOp::GeluBackward => x
            .iter()
            .zip(z.unwrap_or(&[]))
            .map(|(&v, &g)| (gelu_grad_reference(v as f64) * g as f64) as f32)
            .collect(),
        ElementwiseOp::Add => x.iter().zip(z.unwrap_or(&[])).map(|(a, b)| a + b).collect(),
        ElementwiseOp::SumRows { rows } => {
            let len = x.len() / (rows.max(1) as usize);
            (0..len)
                .map(|i| (0..rows as usize).map(|r| x[r * len + i]).sum())
                .collect()
        }
    }
}

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

/// GELU (tanh form) in f64.
pub fn gelu_reference(x: f64) -> f64 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh())
}

/// GELU's derivative (tanh form) in f64.
pub fn gelu_grad_reference(x: f64) -> f64 {
    let u = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x);
    let t = u.tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x)
}

impl Kernel for ElementwiseOp {
    fn kind(&self) -> &'static str {
        self.entry()
    }

    /// f32 inputs of one length; the output keeps the first input's shape (a row sum is flat).
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let what = self.entry();
        check::arity(what, inputs, self.inputs())?;
        if let Some(t) = inputs.iter().find(|t| t.dtype != DType::F32) {
            return Err(Error::DTypeMismatch {
                what,
                expected: DType::F32,
                got: t.dtype,
            });
        }
        let len = inputs[0].len();
        if let Some(t) = inputs.iter().find(|t| t.len() != len) {
            return Err(Error::ShapeMismatch {
                what,
                expected: format!("{len} values, as {}", inputs[0]),
                got: format!("{t}"),
            });
        }
        Ok(vec![match *self {
            Self::SumRows { rows } => {
                if rows == 0 || !len.is_multiple_of(rows as usize) {
                    return Err(check::invalid(what, format!("{len} values in {rows} rows")));
                }
                TensorType::f32(&[len / rows as usize])
            }
            _ => inputs[0].clone(),
        }])
    }

    /// Inputs laid out alike, and so is the output. Only sums and scalings are linear, so only
    /// they may take partial sums.
    fn shardings(&self, inputs: &[NamedSharding], _: &[TensorType]) -> super::sharding_rules::Rule {
        let first = inputs.first().ok_or("no inputs")?;
        if let Some(other) = inputs.iter().find(|s| *s != first) {
            return Err(format!("inputs laid out differently: {first} and {other}"));
        }
        let linear = match *self {
            Self::Add => true,
            Self::Affine { shift, .. } => shift == 0.0,
            _ => false,
        };
        if !linear && !first.partial().is_empty() {
            return Err(format!(
                "a nonlinear kernel over partial sums ({first}); all-reduce them first"
            ));
        }
        Ok(vec![first.clone()])
    }

    fn computations(&self) -> usize {
        match *self {
            Self::Affine { repeat, .. } => repeat as usize,
            _ => 1,
        }
    }

    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let out = check::output(y, 0)?;
        encode(
            rec,
            out.device(),
            *self,
            x[0].buffer(),
            x.get(1).map(Tensor::buffer),
            out.buffer(),
            out.len(),
        )
    }
}
