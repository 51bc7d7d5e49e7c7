//! The router's backward (`shaders/router_backward.wgsl`): the gates', the load-balancing loss's
//! and the z-loss's gradients back to the router logits, as the [`RouterBackward`] kernel (its
//! last three inputs the routing), with [`router_backward_reference`] in plain Rust.

use crate::device::Recorder;
use crate::kernels::Shader;
use crate::kernels::check::{self, expect, invalid, routing_dims, to_u32};
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
    _pad: [u32; 2],
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

/// Records the router-logit gradient `d_logits` (`[T, E]`) from `logits` (`[T, E]`, what the
/// routing was computed from), `d_gate` (`[T, K]`) and the routing's routes and `f_i`.
fn encode_router_backward(
    encoder: &mut impl Recorder,
    logits: &Tensor,
    d_gate: &Tensor,
    routing: &Routing,
    loss: RouterLoss,
    d_logits: &Tensor,
) -> Result<()> {
    const WHAT: &str = "router_backward";
    let device = logits.device();
    let [t, k, _] = routing_dims(WHAT, routing, device)?;
    let e = routing.config.experts;
    expect(WHAT, logits, device, DType::F32, &[t, e])?;
    expect(WHAT, d_gate, device, DType::F32, &[t, k])?;
    expect(WHAT, d_logits, device, DType::F32, &[t, e])?;
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
        _pad: [0; 2],
    };
    let bindings = [
        (6, logits.buffer()),
        (10, &routing.routes),
        (17, d_gate.buffer()),
        (18, &routing.stats),
        (19, d_logits.buffer()),
    ];
    ROUTER_BACKWARD.encode_threads(encoder, device, WHAT, &params, &bindings, t)
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

/// `(logits, d_gate, routing) → d_logits [T, E]` as a program node.
#[derive(Debug, Clone)]
pub struct RouterBackward(pub RouterConfig, pub RouterLoss);

impl Kernel for RouterBackward {
    fn kind(&self) -> &'static str {
        "router_backward"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        check::arity(self.kind(), inputs, 5)?;
        let t = routed_tokens(self.kind(), &self.0, inputs, 2)?;
        Ok(vec![TensorType::f32(&[t, self.0.experts])])
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let r = routing_of(self.0, &x[2], &x[3], &x[4]);
        encode_router_backward(rec, &x[0], &x[1], &r, self.1, check::output(y, 0)?)
    }
}
