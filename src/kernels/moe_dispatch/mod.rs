//! Dispatch (token order → expert-major `[experts × capacity, d]`) and combine (back, weighted by
//! the gates). Dropped choices get nothing from the experts. [`Dispatch`] and [`Combine`] are the
//! kernels (combine may add a residual connection as it stores); [`slots_of`] and [`tokens_of`]
//! type the routed kernels' outputs. Their backward is in [`backward`].

use super::check::{self, to_u32};
use super::router::{Route, Routing};
use super::router::{RouterConfig, routed_tokens, routing_of};
use crate::device::Recorder;
use crate::kernels::Shader;
use crate::kernels::{Kernel, Prepared, TensorType};
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

const WHAT: &str = "moe dispatch/combine";

fn params(routing: &Routing, d: usize) -> Result<Params> {
    Ok(Params {
        tokens: to_u32(WHAT, routing.tokens)?,
        k: to_u32(WHAT, routing.config.k)?,
        capacity: to_u32(WHAT, routing.capacity)?,
        d: to_u32(WHAT, d)?,
    })
}

/// Rows of the expert-major layout: `experts × capacity`.
fn expert_rows(routing: &Routing) -> usize {
    routing.config.experts * routing.capacity
}

fn grid(device: &crate::Device, d: usize, rows: usize) -> Result<[u32; 3]> {
    let max = device.info().limits.max_compute_workgroups_per_dimension as usize;
    Ok([
        to_u32(WHAT, d.div_ceil(64))?,
        to_u32(WHAT, rows.clamp(1, max.min(4096)))?,
        1,
    ])
}

/// One pass of `entry` from `src` to `dst`, reading `addend` (binding 4) where given.
#[allow(clippy::too_many_arguments)]
fn encode_pass(
    encoder: &mut impl Recorder,
    entry: &str,
    routing: &Routing,
    src: &Tensor,
    addend: Option<&Tensor>,
    dst: &Tensor,
    d: usize,
    rows: usize,
) -> Result<()> {
    let device = routing.device();
    for t in [src, dst].into_iter().chain(addend) {
        t.expect_device(WHAT, device)?;
        t.expect_dtype(WHAT, DType::F32)?;
    }
    let pipeline = MOE_DISPATCH.pipeline(device, DType::F32, entry)?;
    let uniform = device.uniform_buffer("moe dispatch params", &params(routing, d)?);
    let mut bindings = vec![
        (0, &uniform),
        (1, &routing.routes),
        (2, src.buffer()),
        (3, dst.buffer()),
    ];
    bindings.extend(addend.map(|a| (4, a.buffer())));
    device.encode_dispatch(encoder, entry, &pipeline, &bindings, grid(device, d, rows)?)
}

/// Records dispatch of `x` (`[tokens, d]`) into `out` (`[experts × capacity, d]`, cleared first).
fn encode_dispatch(
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
        None,
        out,
        d,
        routing.tokens * routing.config.k,
    )
}

/// Records combine of expert outputs `y` (`[experts × capacity, d]`) into `out` (`[tokens, d]`),
/// added to `addend` (`[tokens, d]`) where given.
fn encode_combine(
    encoder: &mut impl Recorder,
    y: &Tensor,
    routing: &Routing,
    addend: Option<&Tensor>,
    out: &Tensor,
) -> Result<()> {
    let d = y.shape().get(1).copied().unwrap_or(0);
    y.expect_shape("moe combine input", &[expert_rows(routing), d])?;
    out.expect_shape("moe combine output", &[routing.tokens, d])?;
    let entry = match addend {
        Some(a) => {
            a.expect_shape("moe combine addend", &[routing.tokens, d])?;
            "combine_add"
        }
        None => "combine",
    };
    encode_pass(encoder, entry, routing, y, addend, out, d, routing.tokens)
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

/// `(x [T, d], probs, routes, stats) → [E·capacity, d]`: each kept choice's token row in its
/// expert's slot, zeros where no kept token landed.
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
        encode_dispatch(rec, &x[0], &r, check::output(y, 0)?)
    }
}

/// `(y [E·capacity, d], probs, routes, stats[, addend [T, d]]) → [T, d]`: `y[t] = Σ_{kept
/// choices} gate · slot`, plus `addend[t]` where given (a residual connection, in the launch).
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
        encode_combine(rec, &x[0], &r, x.get(4), check::output(y, 0)?)
    }
}

/// The output of a `(rows [_, d], routing)` node in the slot layout: `[E·capacity, d]`.
pub(crate) fn slots_of(
    what: &'static str,
    config: &RouterConfig,
    inputs: &[TensorType],
) -> Result<Vec<TensorType>> {
    check::arity(what, inputs, 4)?;
    let t = routed_tokens(what, config, inputs, 1)?;
    let (_, d) = check::rows_cols(what, &inputs[0])?;
    Ok(vec![TensorType::f32(&[
        config.experts * config.capacity(t),
        d,
    ])])
}

/// The output of a `(rows [_, d], routing)` node in token order: `[T, d]`.
/// The output of a `(slots [_, d], routing[, addend [T, d]])` node in token order: `[T, d]`.
pub(crate) fn tokens_of(
    what: &'static str,
    config: &RouterConfig,
    inputs: &[TensorType],
) -> Result<Vec<TensorType>> {
    if inputs.len() != 5 {
        check::arity(what, inputs, 4)?;
    }
    let t = routed_tokens(what, config, inputs, 1)?;
    let (_, d) = check::rows_cols(what, &inputs[0])?;
    let out = TensorType::f32(&[t, d]);
    if let Some(addend) = inputs.get(4) {
        check::expect_type(what, addend, &out)?;
    }
    Ok(vec![out])
}

pub mod backward;
pub use backward::*;
