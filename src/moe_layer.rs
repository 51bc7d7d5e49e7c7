//! The main demo: one expert-parallel Mixture-of-Experts layer, forward, over every device.
//!
//! Each device routes its own tokens (router matmul, softmax, top-k, capacity), dispatches them,
//! sends them to the experts' devices by all-to-all, runs its local experts with one grouped
//! matmul, sends the results back by the reverse all-to-all and combines them by the gates. The
//! result is checked against a plain-Rust computation of the same layer.

use crate::collective::AllToAll;
use crate::kernels::matmul::{MatmulOptions, grouped_matmul, matmul};
use crate::kernels::moe_dispatch::{combine, dispatch};
use crate::kernels::router::{self, RouterConfig, route};
use crate::{DType, Device, Error, Result, Rng, Tensor};
use serde::Serialize;
use std::time::Instant;

/// Sizes of the demo layer.
#[derive(Debug, Clone, Copy)]
pub struct MoeLayerConfig {
    pub tokens_per_device: usize,
    pub d_model: usize,
    pub d_out: usize,
    /// Must be a multiple of the device count.
    pub experts: usize,
    pub router: RouterConfig,
    pub seed: u64,
}

/// What one run of the layer did.
#[derive(Debug, Clone, Serialize)]
pub struct MoeLayerReport {
    pub devices: Vec<String>,
    pub tokens: usize,
    pub experts: usize,
    pub capacity_per_device: usize,
    /// Tokens each expert processed, summed over sources.
    pub tokens_per_expert: Vec<usize>,
    /// Fraction of (token, choice) pairs dropped for capacity.
    pub dropped_fraction: f64,
    /// Switch load-balancing loss (α = 0.01), averaged over devices.
    pub aux_loss: f32,
    /// Largest |GPU − reference| over all outputs.
    pub max_abs_error: f32,
    pub seconds: f64,
}

/// Runs the layer once over `devices` (experts sharded evenly over them).
pub fn run_expert_parallel(devices: &[Device], cfg: &MoeLayerConfig) -> Result<MoeLayerReport> {
    let n = devices.len();
    if n == 0 || !cfg.experts.is_multiple_of(n) {
        return Err(Error::InvalidArgument {
            what: "moe layer",
            reason: format!("{} experts cannot be sharded over {n} devices", cfg.experts),
        });
    }
    let router_cfg = RouterConfig {
        experts: cfg.experts,
        ..cfg.router
    };
    router_cfg.validate()?;
    let (t, d, d_out, e_n) = (cfg.tokens_per_device, cfg.d_model, cfg.d_out, cfg.experts);
    let el = e_n / n;
    let mut rng = Rng::new(cfg.seed);
    let w_router: Vec<f32> = rng.vec(d * e_n);
    let w_experts: Vec<f32> = rng.vec(e_n * d * d_out).iter().map(|w| w * 0.5).collect();
    let xs: Vec<Vec<f32>> = (0..n).map(|_| rng.vec(t * d)).collect();

    let start = Instant::now();
    let mut routings = Vec::with_capacity(n);
    let (mut dispatched, mut counts) = (Vec::new(), Vec::new());
    let mut aux = 0.0;
    for (device, x_host) in devices.iter().zip(&xs) {
        let x = Tensor::from_f32(device, &[t, d], DType::F32, x_host)?;
        let wr = Tensor::from_f32(device, &[d, e_n], DType::F32, &w_router)?;
        let logits = matmul(&x, &wr, MatmulOptions::default())?;
        let routing = route(&logits, router_cfg)?;
        aux += router::load_balancing_loss(&routing.read_stats()?, 0.01) / n as f32;
        dispatched.push(dispatch(&x, &routing)?);
        counts.push(routing.kept_counts()?);
        routings.push(routing);
    }
    let capacity = routings[0].capacity;
    let (plan, batches) = AllToAll::forward(&dispatched, &counts, e_n, capacity)?;
    let mut expert_out = Vec::with_capacity(n);
    for (j, batch) in batches.iter().enumerate() {
        let w = &w_experts[j * el * d * d_out..(j + 1) * el * d * d_out];
        let w = Tensor::from_f32(&devices[j], &[el, d, d_out], DType::F32, w)?;
        expert_out.push(grouped_matmul(
            &batch.tokens,
            &w,
            &batch.offsets,
            MatmulOptions::default(),
        )?);
    }
    let returned = plan.reverse(&expert_out)?;
    let mut outputs = Vec::with_capacity(n);
    for (y, routing) in returned.iter().zip(&routings) {
        outputs.push(combine(y, routing)?.to_f32()?);
    }
    let seconds = start.elapsed().as_secs_f64();

    // Plain-Rust reference of the whole layer.
    let mut max_abs_error = 0.0f32;
    let mut dropped = 0;
    for (x_host, out) in xs.iter().zip(&outputs) {
        let logits = crate::kernels::matmul::reference(
            x_host,
            &w_router,
            &[0, t as u32],
            &crate::kernels::matmul::MatmulShape::plain(t, e_n, d, DType::F32),
        );
        let want = router::reference(&logits, t, router_cfg)?;
        dropped += want.dropped();
        for tok in 0..t {
            for j in 0..d_out {
                let mut acc = 0.0f32;
                for r in want.routes[tok * router_cfg.k..(tok + 1) * router_cfg.k].iter() {
                    if r.kept == 0 {
                        continue;
                    }
                    let e = r.expert as usize;
                    let dot: f32 = (0..d)
                        .map(|i| x_host[tok * d + i] * w_experts[(e * d + i) * d_out + j])
                        .sum();
                    acc += r.gate * dot;
                }
                max_abs_error = max_abs_error.max((acc - out[tok * d_out + j]).abs());
            }
        }
    }
    let tokens_per_expert = (0..e_n)
        .map(|e| plan.counts().iter().map(|c| c[e]).sum())
        .collect();
    Ok(MoeLayerReport {
        devices: devices.iter().map(Device::label).collect(),
        tokens: t * n,
        experts: e_n,
        capacity_per_device: capacity,
        tokens_per_expert,
        dropped_fraction: dropped as f64 / (t * n * router_cfg.k) as f64,
        aux_loss: aux,
        max_abs_error,
        seconds,
    })
}
