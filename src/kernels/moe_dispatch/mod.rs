//! Dispatch (token order → expert-major `[experts × capacity, d]`) and combine (back, weighted by
//! the gates). Dropped choices get nothing from the experts. [`Dispatch`] and [`Combine`] are the
//! program-node kernels; [`slots_of`] and [`tokens_of`] type the routed kernels' outputs. Their
//! backward is in [`backward`].

use super::eager;
use super::router::{Route, Routing};
use super::router::{RouterConfig, routed_tokens, routing_of};
use crate::device::Recorder;
use crate::kernels::Shader;
use crate::kernels::{Kernel, Prepared, TensorType, node};
use crate::{DType, Result, Tensor};

pub const MOE_DISPATCH: Shader = Shader {
    name: "moe_dispatch",
    source: include_str!("../../../shaders/moe_dispatch.wgsl"),
    ..crate::kernels::SHADER
};

#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    tokens: u32,
    k: u32,
    capacity: u32,
    d: u32,
}

fn params(routing: &Routing, d: usize) -> Params {
    Params {
        tokens: routing.tokens as u32,
        k: routing.config.k as u32,
        capacity: routing.capacity as u32,
        d: d as u32,
    }
}

/// Rows of the expert-major layout: `experts × capacity`.
pub fn expert_rows(routing: &Routing) -> usize {
    routing.config.experts * routing.capacity
}

fn grid(device: &crate::Device, d: usize, rows: usize) -> [u32; 3] {
    let max = device.info().limits.max_compute_workgroups_per_dimension as usize;
    [
        d.div_ceil(64) as u32,
        rows.clamp(1, max.min(4096)) as u32,
        1,
    ]
}

fn encode_pass(
    encoder: &mut impl Recorder,
    entry: &str,
    routing: &Routing,
    src: &Tensor,
    dst: &Tensor,
    d: usize,
    rows: usize,
) -> Result<()> {
    let device = routing.device();
    for t in [src, dst] {
        t.expect_device("moe dispatch/combine", device)?;
        t.expect_dtype("moe dispatch/combine", DType::F32)?;
    }
    let pipeline = MOE_DISPATCH.pipeline(device, DType::F32, entry)?;
    let uniform = device.uniform_buffer("moe dispatch params", &params(routing, d));
    device.encode_dispatch(
        encoder,
        entry,
        &pipeline,
        &[
            (0, &uniform),
            (1, &routing.routes),
            (2, src.buffer()),
            (3, dst.buffer()),
        ],
        grid(device, d, rows),
    )
}

/// Records dispatch of `x` (`[tokens, d]`) into `out` (`[experts × capacity, d]`, cleared first).
pub fn encode_dispatch(
    encoder: &mut impl Recorder,
    x: &Tensor,
    routing: &Routing,
    out: &Tensor,
) -> Result<()> {
    let d = x.shape().get(1).copied().unwrap_or(0);
    x.expect_shape("moe dispatch input", &[routing.tokens, d])?;
    out.expect_shape("moe dispatch output", &[expert_rows(routing), d])?;
    encoder.clear_buffer(out.buffer(), 0, None);
    encode_pass(
        encoder,
        "dispatch",
        routing,
        x,
        out,
        d,
        routing.tokens * routing.config.k,
    )
}

/// Records combine of expert outputs `y` (`[experts × capacity, d]`) into `out` (`[tokens, d]`).
pub fn encode_combine(
    encoder: &mut impl Recorder,
    y: &Tensor,
    routing: &Routing,
    out: &Tensor,
) -> Result<()> {
    let d = y.shape().get(1).copied().unwrap_or(0);
    y.expect_shape("moe combine input", &[expert_rows(routing), d])?;
    out.expect_shape("moe combine output", &[routing.tokens, d])?;
    encode_pass(encoder, "combine", routing, y, out, d, routing.tokens)
}

/// Dispatches `x` into a new expert-major tensor. Blocks.
pub fn dispatch(x: &Tensor, routing: &Routing) -> Result<Tensor> {
    let device = routing.device();
    let d = x.shape().get(1).copied().unwrap_or(0);
    let out = Tensor::zeros(device, &[expert_rows(routing), d], DType::F32)?;
    eager::submit_and_wait(device, "moe dispatch", |encoder| {
        encode_dispatch(encoder, x, routing, &out)
    })?;
    Ok(out)
}

/// Combines expert outputs into a new `[tokens, d]` tensor. Blocks.
pub fn combine(y: &Tensor, routing: &Routing) -> Result<Tensor> {
    let device = routing.device();
    let d = y.shape().get(1).copied().unwrap_or(0);
    let out = Tensor::zeros(device, &[routing.tokens, d], DType::F32)?;
    eager::submit_and_wait(device, "moe combine", |encoder| {
        encode_combine(encoder, y, routing, &out)
    })?;
    Ok(out)
}

/// Reference dispatch: `[experts × capacity, d]`, zeros where no kept token landed.
pub fn reference_dispatch(
    x: &[f32],
    routes: &[Route],
    k: usize,
    experts: usize,
    capacity: usize,
    d: usize,
) -> Vec<f32> {
    scatter_reference(x, routes, k, experts * capacity, capacity, d, |_| 1.0)
}

/// Reference combine: `y[t] = Σ_{kept choices} gate · slot`.
pub fn reference_combine(
    y: &[f32],
    routes: &[Route],
    tokens: usize,
    k: usize,
    capacity: usize,
    d: usize,
) -> Vec<f32> {
    gather_reference(y, routes, tokens, k, capacity, d, |r| r.gate)
}

/// Token rows to their slots (`[slots, d]`), scaled by `weight` of the choice; zeros elsewhere.
/// Dispatch (weight 1) and the backward of combine (weight = gate) are this.
pub fn scatter_reference(
    x: &[f32],
    routes: &[Route],
    k: usize,
    slots: usize,
    capacity: usize,
    d: usize,
    weight: impl Fn(&Route) -> f32,
) -> Vec<f32> {
    let mut out = vec![0.0; slots * d];
    for (tc, r) in routes.iter().enumerate().filter(|(_, r)| r.kept != 0) {
        let (t, s, w) = (tc / k, r.slot(capacity), weight(r));
        for j in 0..d {
            out[s * d + j] = w * x[t * d + j];
        }
    }
    out
}

/// Each token's kept slots summed back into its row (`[tokens, d]`), scaled by `weight`.
/// Combine (weight = gate) and the backward of dispatch (weight 1) are this.
pub fn gather_reference(
    slots: &[f32],
    routes: &[Route],
    tokens: usize,
    k: usize,
    capacity: usize,
    d: usize,
    weight: impl Fn(&Route) -> f32,
) -> Vec<f32> {
    let mut out = vec![0.0; tokens * d];
    for (tc, r) in routes.iter().enumerate().filter(|(_, r)| r.kept != 0) {
        let (t, s, w) = (tc / k, r.slot(capacity), weight(r));
        for j in 0..d {
            out[t * d + j] += w * slots[s * d + j];
        }
    }
    out
}

/// `(x [T, d], routing) → [E·capacity, d]` as a program node.
#[derive(Debug, Clone)]
pub struct Dispatch(pub RouterConfig);

impl Kernel for Dispatch {
    fn kind(&self) -> &'static str {
        "dispatch"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        slots_of(self.kind(), &self.0, inputs)
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let r = routing_of(self.0, &x[1], &x[2], &x[3]);
        encode_dispatch(rec, &x[0], &r, node::output(y, 0)?)
    }
}

/// `(y [E·capacity, d], routing) → [T, d]` as a program node.
#[derive(Debug, Clone)]
pub struct Combine(pub RouterConfig);

impl Kernel for Combine {
    fn kind(&self) -> &'static str {
        "combine"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        tokens_of(self.kind(), &self.0, inputs)
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let r = routing_of(self.0, &x[1], &x[2], &x[3]);
        encode_combine(rec, &x[0], &r, node::output(y, 0)?)
    }
}

/// The output of a `(rows [_, d], routing)` node in the slot layout: `[E·capacity, d]`.
pub(crate) fn slots_of(
    what: &'static str,
    config: &RouterConfig,
    inputs: &[TensorType],
) -> Result<Vec<TensorType>> {
    node::arity(what, inputs, 4)?;
    let t = routed_tokens(what, config, inputs, 1)?;
    let (_, d) = node::rows_cols(what, &inputs[0])?;
    Ok(vec![TensorType::f32(&[
        config.experts * config.capacity(t),
        d,
    ])])
}

/// The output of a `(rows [_, d], routing)` node in token order: `[T, d]`.
pub(crate) fn tokens_of(
    what: &'static str,
    config: &RouterConfig,
    inputs: &[TensorType],
) -> Result<Vec<TensorType>> {
    node::arity(what, inputs, 4)?;
    let t = routed_tokens(what, config, inputs, 1)?;
    let (_, d) = node::rows_cols(what, &inputs[0])?;
    Ok(vec![TensorType::f32(&[t, d])])
}

pub mod backward;
pub use backward::*;
