//! The router's backward (`shaders/router_backward.wgsl`): the gates', the load-balancing loss's
//! and the z-loss's gradients back to the router logits, as the [`RouterBackward`] kernel (its
//! last three inputs the routing; the gates' gradients given, or computed in its launch from the
//! layer output's gradient and the experts' outputs), with [`router_backward_reference`] in plain
//! Rust.

use super::routing_dims;
use crate::device::Recorder;
use crate::kernels::Shader;
use crate::kernels::check::{self, expect, invalid, to_u32};
use crate::kernels::loss::max_and_sum;
use crate::kernels::router::{ExpertStat, Route, RouterConfig, Routing};
use crate::kernels::router::{routed_tokens, routing_of};
use crate::kernels::{Kernel, Prepared, TensorType};
use crate::{DType, Result, Tensor};

/// `Params` of `router_backward.wgsl`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    tokens: u32,
    experts: u32,
    k: u32,
    normalize: u32,
    alpha: f32,
    z_loss: f32,
    cols: u32,
    capacity: u32,
}

pub const ROUTER_BACKWARD: Shader = Shader {
    name: "router_backward",
    source: include_str!("../../../shaders/router_backward.wgsl"),
    common: crate::kernels::FLAT_COMMON,
    ..crate::kernels::SHADER
};

/// Weights of the router's auxiliary losses.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RouterLoss {
    /// Load-balancing loss `alpha · E · Σ_i f_i · P_i`.
    pub alpha: f32,
    /// z-loss `z_loss · mean_t logsumexp(r[t])²`.
    pub z_loss: f32,
}

// ---- router backward ---------------------------------------------------------------------------

/// Where the router's backward gets the gates' gradients.
enum Gates<'a> {
    /// `d_gate` `[T, K]`, computed by [`crate::kernels::GateGrad`].
    Given(&'a Tensor),
    /// Computed in the launch, as `GateGrad` does, from the layer output's gradient `dy` (`[T,
    /// d]`) and the experts' outputs (`[E·capacity, d]`).
    Computed { dy: &'a Tensor, slots: &'a Tensor },
}

/// Records the router-logit gradient `d_logits` (`[T, E]`) from `logits` (`[T, E]`, what the
/// routing was computed from), the gates' gradients and the routing's routes and `f_i`.
fn encode_router_backward(
    encoder: &mut impl Recorder,
    logits: &Tensor,
    gates: Gates,
    routing: &Routing,
    loss: RouterLoss,
    d_logits: &Tensor,
) -> Result<()> {
    const WHAT: &str = "router_backward";
    let device = logits.device();
    let [t, k, capacity] = routing_dims(WHAT, routing, device)?;
    let e = routing.config.experts;
    expect(WHAT, logits, device, DType::F32, &[t, e])?;
    expect(WHAT, d_logits, device, DType::F32, &[t, e])?;
    let (entry, cols, gate_bindings) = match gates {
        Gates::Given(d_gate) => {
            expect(WHAT, d_gate, device, DType::F32, &[t, k])?;
            (WHAT, 0, vec![(17, d_gate.buffer())])
        }
        Gates::Computed { dy, slots } => {
            let (_, d) = check::dims2(WHAT, dy)?;
            expect(WHAT, dy, device, DType::F32, &[t, d])?;
            expect(WHAT, slots, device, DType::F32, &[e * capacity, d])?;
            let bindings = vec![(11, dy.buffer()), (12, slots.buffer())];
            ("gate_router_backward", d, bindings)
        }
    };
    if !(loss.alpha.is_finite() && loss.z_loss.is_finite()) {
        return Err(invalid(
            WHAT,
            format!("loss weights must be finite: {loss:?}"),
        ));
    }
    let params = Params {
        tokens: to_u32(WHAT, t)?,
        experts: to_u32(WHAT, e)?,
        k: to_u32(WHAT, k)?,
        normalize: u32::from(normalized(routing.config)),
        alpha: loss.alpha,
        z_loss: loss.z_loss,
        cols: to_u32(WHAT, cols)?,
        capacity: to_u32(WHAT, capacity)?,
    };
    let mut bindings = vec![
        (6, logits.buffer()),
        (10, &routing.routes),
        (18, &routing.stats),
        (19, d_logits.buffer()),
    ];
    bindings.extend(gate_bindings);
    ROUTER_BACKWARD.encode_threads(encoder, device, entry, &params, &bindings, t)
}

/// Whether the router renormalised the gates: top-2 only, as `shaders/router.wgsl` does. Gates
/// are normalised over both choices even when one is dropped.
fn normalized(config: RouterConfig) -> bool {
    config.normalize_gates && config.k == 2
}

/// Reference of [`RouterBackward`]: `[T, E]` from `logits` `[T, E]`, the routes and stats of
/// the routing and `d_gate` `[T·K]`.
pub fn router_backward_reference(
    logits: &[f32],
    routes: &[Route],
    stats: &[ExpertStat],
    d_gate: &[f32],
    config: RouterConfig,
    loss: RouterLoss,
) -> Vec<f32> {
    let (e_n, k) = (config.experts, config.k);
    let tokens = logits.len() / e_n.max(1);
    let n = tokens as f32;
    let aux = loss.alpha * e_n as f32 / n;
    let mut out = Vec::with_capacity(logits.len());
    for (t, row) in logits.chunks_exact(e_n).enumerate() {
        let (m, s) = max_and_sum(row);
        let lse = m + s.ln();
        let prob = |j: usize| (row[j] - m).exp() / s;
        let g = |c: usize| {
            let tc = t * k + c;
            if routes[tc].kept != 0 {
                d_gate[tc]
            } else {
                0.0
            }
        };
        let mut dp: Vec<f32> = stats.iter().map(|st| aux * st.fraction).collect();
        let e1 = routes[t * k].expert as usize;
        if k == 2 {
            let e2 = routes[t * k + 1].expert as usize;
            let (g1, g2) = (g(0), g(1));
            if normalized(config) {
                let (p1, p2) = (prob(e1), prob(e2));
                let sum = p1 + p2;
                dp[e1] += p2 * (g1 - g2) / (sum * sum);
                dp[e2] += p1 * (g2 - g1) / (sum * sum);
            } else {
                dp[e1] += g1;
                dp[e2] += g2;
            }
        } else {
            dp[e1] += g(0);
        }
        let dot: f32 = (0..e_n).map(|j| prob(j) * dp[j]).sum();
        let z = 2.0 * loss.z_loss * lse / n;
        out.extend((0..e_n).map(|j| prob(j) * (dp[j] - dot) + z * prob(j)));
    }
    out
}

/// `(logits, d_gate, routing) → d_logits [T, E]` as a program node; or `(logits, dy [T, d],
/// expert outputs [E·capacity, d], routing)`, the gates' gradients computed in the same launch
/// with [`crate::kernels::GateGrad`]'s bits (one launch instead of two).
#[derive(Debug, Clone)]
pub struct RouterBackward(pub RouterConfig, pub RouterLoss);

impl Kernel for RouterBackward {
    fn kind(&self) -> &'static str {
        "router_backward"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        if inputs.len() != 6 {
            check::arity(self.kind(), inputs, 5)?;
        }
        let t = routed_tokens(self.kind(), &self.0, inputs, inputs.len() - 3)?;
        Ok(vec![TensorType::f32(&[t, self.0.experts])])
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let (gates, at) = match x {
            [_, d_gate, _, _, _] => (Gates::Given(d_gate), 2),
            [_, dy, slots, ..] => (Gates::Computed { dy, slots }, 3),
            _ => return Err(invalid(self.kind(), format!("{} inputs", x.len()))),
        };
        let r = routing_of(self.0, &x[at], &x[at + 1], &x[at + 2]);
        encode_router_backward(rec, &x[0], gates, &r, self.1, check::output(y, 0)?)
    }
}
