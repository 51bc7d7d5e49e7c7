//! The main demo: one expert-parallel Mixture-of-Experts layer, forward, over every device, as one
//! program on the runtime.
//!
//! Each device routes its own tokens (the router's logits, softmax, top-k, capacity, in the
//! router's launches) and dispatches them; the all-to-all ([`crate::moe::exchange`], the
//! training step's, kept rows only) sends them to the experts' devices; each device runs its
//! local experts with one grouped matmul over the kept rows; the reverse all-to-all brings the
//! results back and combine weights them by the gates. The result is checked against a
//! plain-Rust computation of the same layer.

use crate::kernels::matmul::{MatmulVariant, VariantChoice};
use crate::kernels::router::{self, ExpertStat, RouterConfig};
use crate::kernels::{Combine, Dispatch, Matmul, RouterLinear, TensorType};
use crate::moe::exchange::{ExpertExchange, Kept};
use crate::program::{CompileOptions, HostData, ProgramBuilder};
use crate::sched::{Client, RunOptions};
use crate::{DType, Device, Error, Result, Rng};
use serde::Serialize;
use std::sync::Arc;
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

/// Runs the layer once over `devices` (experts sharded evenly over them), as a program that
/// `client` submits.
pub fn run_expert_parallel(
    client: &Client,
    devices: &[Device],
    cfg: &MoeLayerConfig,
) -> Result<MoeLayerReport> {
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
    let capacity = router_cfg.capacity(t);
    let mut rng = Rng::new(cfg.seed);
    let w_router: Vec<f32> = rng.vec(d * e_n);
    let w_experts: Vec<f32> = rng.vec(e_n * d * d_out).iter().map(|w| w * 0.5).collect();
    let xs: Vec<Vec<f32>> = (0..n).map(|_| rng.vec(t * d)).collect();

    // The program: every device routes and dispatches its tokens, the slots go to the experts'
    // devices, the experts run as one grouped matmul per device, and the rows come back.
    let mut p = ProgramBuilder::new("moe layer");
    // One axis carries both the token groups and the experts, as in training.
    let gang = p.mesh(&(0..n).collect::<Vec<_>>(), &[("expert", n)]);
    let x = p.typed_arg(&gang, TensorType::f32(&[t, d]));
    let every = p.spec(&gang, &[&[], &[]], &[]);
    let wr = p.sharded_arg(&gang, TensorType::f32(&[d, e_n]), every);
    let we = p.typed_arg(&gang, TensorType::f32(&[el, d, d_out]));
    let matmul = |offsets| Matmul {
        limits: None,
        trans_a: false,
        trans_b: false,
        offsets,
        choice: VariantChoice::SameSums(MatmulVariant::Vec4),
        f16_accumulate: false,
        epilogue: crate::kernels::Epilogue::NONE,
    };
    // The router's linear layer is computed in the router's first launch.
    let [_logits, probs, routes, stats, _lse] = p.kernel(
        "router",
        &gang,
        Arc::new(RouterLinear(router_cfg)),
        &[x, wr],
    );
    let routing = [probs, routes, stats];
    let [slots] = p.kernel(
        "dispatch",
        &gang,
        Arc::new(Dispatch(router_cfg)),
        &[&[x][..], &routing].concat(),
    );
    let there = ExpertExchange {
        devices: n,
        local_experts: el,
        capacity,
        row_words: d,
        axis: None,
    };
    let back = ExpertExchange {
        row_words: d_out,
        ..there
    };
    // The kept counts go first; with them only the kept rows travel, and the grouped matmul
    // runs over each slot block's kept rows.
    let counts = there.per_expert(router::STAT_WORDS);
    let live = counts.to_experts(&mut p, "all-to-all kept counts", stats, None);
    let tokens = there.to_experts(&mut p, "all-to-all forward", slots, Some(Kept::sent(live)));
    let expert = Matmul {
        limits: Some(router::STAT_WORDS),
        ..matmul(Some(there.block_offsets()))
    };
    let [out] = p.kernel("experts", &gang, Arc::new(expert), &[tokens, we, live]);
    let returned = back.to_tokens(
        &mut p,
        "all-to-all reverse",
        out,
        Some(Kept::received(live)),
    );
    let [y] = p.kernel(
        "combine",
        &gang,
        Arc::new(Combine(router_cfg)),
        &[&[returned][..], &routing].concat(),
    );
    p.result(y);
    p.result(stats);
    let exec = Arc::new(p.build()?.compile(devices, CompileOptions::default())?);

    let start = Instant::now();
    let args: Vec<HostData> = vec![
        xs.concat().into(),
        w_router.repeat(n).into(),
        w_experts.clone().into(),
    ];
    let results = client.run_bytes(&exec, args, RunOptions::default())?;
    let seconds = start.elapsed().as_secs_f64();
    let (y, stats) = match results.as_slice() {
        [y, stats] => (
            bytemuck::pod_collect_to_vec::<u8, f32>(y),
            bytemuck::pod_collect_to_vec::<u8, ExpertStat>(stats),
        ),
        _ => {
            return Err(Error::InvalidArgument {
                what: "moe layer",
                reason: format!("the program returned {} results, not 2", results.len()),
            });
        }
    };
    if stats.len() != n * e_n || y.len() != n * t * d_out {
        return Err(Error::InvalidArgument {
            what: "moe layer",
            reason: format!(
                "the program returned {} outputs and {} expert statistics, not {} and {}",
                y.len(),
                stats.len(),
                n * t * d_out,
                n * e_n
            ),
        });
    }
    let outputs: Vec<&[f32]> = y.chunks(t * d_out).collect();
    let aux = stats
        .chunks(e_n)
        .map(|s| router::load_balancing_loss(s, 0.01))
        .sum::<f32>()
        / n as f32;
    let tokens_per_expert: Vec<usize> = (0..e_n)
        .map(|e| stats.chunks(e_n).map(|s| s[e].kept as usize).sum())
        .collect();

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
