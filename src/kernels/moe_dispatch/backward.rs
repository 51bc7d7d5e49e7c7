//! The backward of dispatch and combine (`shaders/moe_dispatch_backward.wgsl`): the gates'
//! gradient ([`GateGrad`]), the slots' ([`CombineBackwardSlots`]) and the tokens' from the
//! slots' ([`DispatchBackward`], which may add the gradient reaching the same rows by another
//! path in its launch). Each takes the routing as the router's three outputs, its last
//! inputs; `*_reference`s are the plain-Rust forms.

use crate::device::Recorder;
use crate::kernels::Shader;
use crate::kernels::check::{self, dims2, expect, to_u32};
use crate::kernels::moe_dispatch::{gather_reference, scatter_reference, slots_of, tokens_of};
use crate::kernels::router::routing_dims;
use crate::kernels::router::{Route, RouterConfig, Routing};
use crate::kernels::router::{routed_tokens, routing_of};
use crate::kernels::{Kernel, Prepared, TensorType};
use crate::{DType, Result, Tensor};

/// `Params` of `moe_dispatch_backward.wgsl`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    tokens: u32,
    cols: u32,
    k: u32,
    capacity: u32,
}

impl Params {
    fn new(what: &'static str, [t, d, k, capacity]: [usize; 4]) -> Result<Self> {
        Ok(Self {
            tokens: to_u32(what, t)?,
            cols: to_u32(what, d)?,
            k: to_u32(what, k)?,
            capacity: to_u32(what, capacity)?,
        })
    }
}

pub const MOE_DISPATCH_BACKWARD: Shader = Shader {
    name: "moe_dispatch_backward",
    source: include_str!("../../../shaders/moe_dispatch_backward.wgsl"),
    common: crate::kernels::FLAT_COMMON,
    ..crate::kernels::SHADER
};

/// Records `d_gate[t·K + c] = dy[t] · slots[slot(t, c)]` (0 for dropped choices): `dy` `[T, d]`,
/// `slots` the expert outputs `[E·capacity, d]`, `d_gate` `[T, K]`.
fn encode_gate_grad(
    encoder: &mut impl Recorder,
    dy: &Tensor,
    slots: &Tensor,
    routing: &Routing,
    d_gate: &Tensor,
) -> Result<()> {
    const WHAT: &str = "gate_grad";
    let device = dy.device();
    let [t, k, cap] = routing_dims(WHAT, routing, device)?;
    let (_, d) = dims2(WHAT, dy)?;
    expect(WHAT, dy, device, DType::F32, &[t, d])?;
    expect(
        WHAT,
        slots,
        device,
        DType::F32,
        &[routing.config.experts * cap, d],
    )?;
    expect(WHAT, d_gate, device, DType::F32, &[t, k])?;
    let params = Params::new(WHAT, [t, d, k, cap])?;
    let bindings = [
        (10, &routing.routes),
        (11, dy.buffer()),
        (12, slots.buffer()),
        (13, d_gate.buffer()),
    ];
    MOE_DISPATCH_BACKWARD.encode_threads(encoder, device, WHAT, &params, &bindings, t * k)
}

/// Records `d_slots[slot(t, c)] = gate · dy[t]` for kept choices into `d_slots`
/// (`[E·capacity, d]`), cleared first so that slots no token filled are zero.
fn encode_combine_backward_slots(
    encoder: &mut impl Recorder,
    dy: &Tensor,
    routing: &Routing,
    d_slots: &Tensor,
) -> Result<()> {
    const WHAT: &str = "combine_backward_slots";
    let device = dy.device();
    let [t, k, cap] = routing_dims(WHAT, routing, device)?;
    let (_, d) = dims2(WHAT, dy)?;
    expect(WHAT, dy, device, DType::F32, &[t, d])?;
    expect(
        WHAT,
        d_slots,
        device,
        DType::F32,
        &[routing.config.experts * cap, d],
    )?;
    let params = Params::new(WHAT, [t, d, k, cap])?;
    encoder.clear_buffer(d_slots.buffer(), 0, None);
    let bindings = [
        (10, &routing.routes),
        (11, dy.buffer()),
        (14, d_slots.buffer()),
    ];
    MOE_DISPATCH_BACKWARD.encode_threads(encoder, device, WHAT, &params, &bindings, t * k * d)
}

/// Records `d_x[t] = Σ_{kept c} d_slots[slot(t, c)]` (`d_slots` `[E·capacity, d]`, `d_x` `[T, d]`),
/// added to `addend` (`[T, d]`) where given.
fn encode_dispatch_backward(
    encoder: &mut impl Recorder,
    d_slots: &Tensor,
    routing: &Routing,
    addend: Option<&Tensor>,
    d_x: &Tensor,
) -> Result<()> {
    const WHAT: &str = "dispatch_backward";
    let device = d_slots.device();
    let [t, k, cap] = routing_dims(WHAT, routing, device)?;
    let (_, d) = dims2(WHAT, d_slots)?;
    expect(
        WHAT,
        d_slots,
        device,
        DType::F32,
        &[routing.config.experts * cap, d],
    )?;
    expect(WHAT, d_x, device, DType::F32, &[t, d])?;
    let params = Params::new(WHAT, [t, d, k, cap])?;
    let mut bindings = vec![
        (10, &routing.routes),
        (15, d_slots.buffer()),
        (16, d_x.buffer()),
    ];
    let entry = match addend {
        Some(a) => {
            expect(WHAT, a, device, DType::F32, &[t, d])?;
            bindings.push((17, a.buffer()));
            "dispatch_backward_add"
        }
        None => WHAT,
    };
    MOE_DISPATCH_BACKWARD.encode_threads(encoder, device, entry, &params, &bindings, t * d)
}

/// Reference of [`GateGrad`]: `[T·K]`.
pub fn gate_grad_reference(
    dy: &[f32],
    slots: &[f32],
    routes: &[Route],
    k: usize,
    capacity: usize,
    d: usize,
) -> Vec<f32> {
    routes
        .iter()
        .enumerate()
        .map(|(tc, r)| {
            if r.kept == 0 {
                return 0.0;
            }
            let (t, s) = (tc / k, r.slot(capacity));
            dy[t * d..(t + 1) * d]
                .iter()
                .zip(&slots[s * d..(s + 1) * d])
                .map(|(a, b)| a * b)
                .sum()
        })
        .collect()
}

/// Reference of [`CombineBackwardSlots`]: `[experts·capacity, d]`.
pub fn combine_backward_slots_reference(
    dy: &[f32],
    routes: &[Route],
    k: usize,
    experts: usize,
    capacity: usize,
    d: usize,
) -> Vec<f32> {
    scatter_reference(dy, routes, k, experts * capacity, capacity, d, |r| r.gate)
}

/// Reference of [`DispatchBackward`]: `[tokens, d]`.
pub fn dispatch_backward_reference(
    d_slots: &[f32],
    routes: &[Route],
    tokens: usize,
    k: usize,
    capacity: usize,
    d: usize,
) -> Vec<f32> {
    gather_reference(d_slots, routes, tokens, k, capacity, d, |_| 1.0)
}

/// `(dy [T, d], slots [E·capacity, d], routing) → d_gate [T, K]` as a program node.
#[derive(Debug, Clone)]
pub struct GateGrad(pub RouterConfig);

impl Kernel for GateGrad {
    fn kind(&self) -> &'static str {
        "gate_grad"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        check::arity(self.kind(), inputs, 5)?;
        let t = routed_tokens(self.kind(), &self.0, inputs, 2)?;
        Ok(vec![TensorType::f32(&[t, self.0.k])])
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let r = routing_of(self.0, &x[2], &x[3], &x[4]);
        encode_gate_grad(rec, &x[0], &x[1], &r, check::output(y, 0)?)
    }
}

/// `(dy [T, d], routing) → [E·capacity, d]` as a program node.
#[derive(Debug, Clone)]
pub struct CombineBackwardSlots(pub RouterConfig);

impl Kernel for CombineBackwardSlots {
    fn kind(&self) -> &'static str {
        "combine_backward_slots"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        slots_of(self.kind(), &self.0, inputs)
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let r = routing_of(self.0, &x[1], &x[2], &x[3]);
        encode_combine_backward_slots(rec, &x[0], &r, check::output(y, 0)?)
    }
}

/// `(d_slots [E·capacity, d], routing[, addend [T, d]]) → [T, d]` as a program node: with an
/// addend (the gradient reaching the same rows by another path), the two summed in the launch.
#[derive(Debug, Clone)]
pub struct DispatchBackward(pub RouterConfig);

impl Kernel for DispatchBackward {
    fn kind(&self) -> &'static str {
        "dispatch_backward"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        tokens_of(self.kind(), &self.0, inputs)
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let r = routing_of(self.0, &x[1], &x[2], &x[3]);
        encode_dispatch_backward(rec, &x[0], &r, x.get(4), check::output(y, 0)?)
    }
}
