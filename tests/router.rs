//! Router, dispatch and combine against the plain-Rust references on every adapter; the router
//! with its linear layer in its launch against the vec4 matmul and the router over its logits.

#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_close, case};
use gangway::kernels::eager;
use gangway::kernels::matmul::{Epilogue, MatmulVariant, VariantChoice};
use gangway::kernels::moe_dispatch::{reference_combine, reference_dispatch};
use gangway::kernels::router::{self, ExpertStat, Route, RouterConfig, load_balancing_loss};
use gangway::kernels::{
    Combine, Dispatch, ElementwiseOp, Matmul, Router, RouterLinear, RowLogsumexp,
};
use gangway::{DType, Device, Error, Rng, Tensor};
use proptest::prelude::*;

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(device: router_dispatch_combine_match_reference),
        case!(device: forced_imbalance_drops_exactly_what_the_reference_drops),
        case!(device: ties_pick_the_lowest_expert),
        case!(device: bad_router_input_is_a_typed_error),
        case!(device: the_router_linear_routes_the_vec4_matmuls_logits),
        case!(host: capacity_is_ceil_of_tokens_over_experts_times_factor),
    ])
}

fn config(experts: usize, k: usize, capacity_factor: f32) -> RouterConfig {
    RouterConfig {
        experts,
        k,
        capacity_factor,
        normalize_gates: true,
    }
}

/// Routes `logits` on `device`, checks every output against the reference, then checks dispatch
/// and combine of random activations. Returns the number of dropped choices.
fn check_routing(
    device: &Device,
    logits: &[f32],
    tokens: usize,
    cfg: RouterConfig,
    d: usize,
) -> usize {
    let want = router::reference(logits, tokens, cfg).unwrap();
    let t = Tensor::from_f32(device, &[tokens, cfg.experts], DType::F32, logits).unwrap();
    let [probs, routes, stats, lse] = eager::run_n(&Router(cfg), &[&t]).unwrap();
    let label = format!("{cfg:?} T={tokens} on {}", device.label());
    assert_eq!(cfg.capacity(tokens), want.capacity, "{label}: capacity");
    assert_close(&label, &probs.to_f32().unwrap(), &want.probs, 1e-5);
    // The logsumexps are RowLogsumexp's, bit for bit.
    let row_lse = eager::run_one(&RowLogsumexp, &[&t]).unwrap();
    assert_eq!(
        lse.to_f32().unwrap(),
        row_lse.to_f32().unwrap(),
        "{label}: logsumexp"
    );
    let routing = [&probs, &routes, &stats];
    let routes = Route::from_words(&routes.to_u32().unwrap());
    assert_eq!(routes.len(), tokens * cfg.k, "{label}: routes");
    for (i, (g, w)) in routes.iter().zip(&want.routes).enumerate() {
        assert_eq!(
            (g.expert, g.position, g.kept),
            (w.expert, w.position, w.kept),
            "{label}: route {i}"
        );
        assert!((g.gate - w.gate).abs() < 1e-5, "{label}: gate {i}");
    }
    let stats = ExpertStat::from_words(&stats.to_u32().unwrap());
    assert_eq!(stats.len(), cfg.experts, "{label}: stats");
    for (e, (g, w)) in stats.iter().zip(&want.stats).enumerate() {
        assert_eq!(
            (g.kept, g.demand),
            (w.kept, w.demand),
            "{label}: counts of expert {e}"
        );
        assert!((g.fraction - w.fraction).abs() < 1e-6, "{label}: f_{e}");
        assert!((g.mean_prob - w.mean_prob).abs() < 1e-5, "{label}: P_{e}");
    }
    assert!(
        (load_balancing_loss(&stats, 0.01) - load_balancing_loss(&want.stats, 0.01)).abs() < 1e-5
    );

    let mut rng = Rng::new(tokens as u64);
    let x_host = rng.vec(tokens * d);
    let x = Tensor::from_f32(device, &[tokens, d], DType::F32, &x_host).unwrap();
    let [probs, routes, stats] = routing;
    let dispatched = eager::run_one(&Dispatch(cfg), &[&x, probs, routes, stats]).unwrap();
    let want_dispatched =
        reference_dispatch(&x_host, &want.routes, cfg.k, cfg.experts, want.capacity, d);
    assert_eq!(
        dispatched.to_f32().unwrap(),
        want_dispatched,
        "{label}: dispatch"
    );
    let combined = eager::run_one(&Combine(cfg), &[&dispatched, probs, routes, stats]).unwrap();
    let want_combined = reference_combine(
        &want_dispatched,
        &want.routes,
        tokens,
        cfg.k,
        want.capacity,
        d,
    );
    assert_close(&label, &combined.to_f32().unwrap(), &want_combined, 1e-5);
    // With an addend (a residual connection), the bits of combine and then elementwise add.
    let addend = Tensor::from_f32(device, &[tokens, d], DType::F32, &rng.vec(tokens * d)).unwrap();
    let inputs = [&dispatched, probs, routes, stats, &addend];
    let fused = eager::run_one(&Combine(cfg), &inputs).unwrap();
    let apart = eager::run_one(&ElementwiseOp::Add, &[&addend, &combined]).unwrap();
    assert_eq!(
        fused.to_f32().unwrap(),
        apart.to_f32().unwrap(),
        "{label}: combine with an addend"
    );
    let wrong = Tensor::zeros(device, &[tokens + 1, d], DType::F32).unwrap();
    let inputs = [&dispatched, probs, routes, stats, &wrong];
    assert!(eager::run_one(&Combine(cfg), &inputs).is_err());
    want.dropped()
}

fn router_dispatch_combine_match_reference(device: &Device) {
    proptest!(common::proptest_config(8), |(
        tokens in 1usize..600, experts in 2usize..12, k in 1usize..=2,
        capacity_factor in 0.5f32..2.0, d in 1usize..40, seed: u64,
    )| {
        let mut rng = Rng::new(seed);
        let logits: Vec<f32> = (0..tokens * experts).map(|_| rng.symmetric() * 3.0).collect();
        check_routing(device, &logits, tokens, config(experts, k, capacity_factor), d);
    });
}

fn forced_imbalance_drops_exactly_what_the_reference_drops(device: &Device) {
    // Capacity factor 1.0 and every token preferring expert 0: all but `capacity` first choices of
    // expert 0 are dropped; second choices spread over the rest.
    let (tokens, experts) = (300, 4);
    let mut rng = Rng::new(3);
    let logits: Vec<f32> = (0..tokens * experts)
        .map(|i| {
            if i % experts == 0 {
                5.0
            } else {
                rng.symmetric()
            }
        })
        .collect();
    for k in [1, 2] {
        let dropped = check_routing(device, &logits, tokens, config(experts, k, 1.0), 8);
        // Expert 0 keeps `capacity` of the 300 first choices (75 for top-1, 150 for top-2).
        let capacity = config(experts, k, 1.0).capacity(tokens);
        assert_eq!(capacity, 75 * k);
        assert!(dropped >= tokens - capacity, "k={k}: dropped {dropped}");
    }
}

fn ties_pick_the_lowest_expert(device: &Device) {
    let logits = vec![1.0f32; 7 * 5];
    check_routing(device, &logits, 7, config(5, 2, 1.0), 4);
}

fn bad_router_input_is_a_typed_error(device: &Device) {
    let logits = Tensor::zeros(device, &[10, 4], DType::F32).unwrap();
    for (cfg, why) in [
        (config(4, 3, 1.0), "k > 2"),
        (config(1, 2, 1.0), "k > experts"),
        (config(4, 1, 0.0), "capacity factor 0"),
        (config(5, 1, 1.0), "logits are not [tokens, 5]"),
    ] {
        let err = eager::run(&Router(cfg), &[&logits]).unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidArgument { .. } | Error::ShapeMismatch { .. }
            ),
            "{why}: {err}"
        );
    }
}

/// [`RouterLinear`] computes `x · w` in its first launch: the logits have the vec4 matmul's bits
/// where it takes the shape (its sums, four products at a time) and the reference's values
/// where it does not (a width no multiple of 4), and the routing is the router's over them, bit
/// for bit. Weights of another width are a shape error.
fn the_router_linear_routes_the_vec4_matmuls_logits(device: &Device) {
    let bits = |t: &Tensor| -> Vec<u32> {
        match t.dtype() {
            DType::U32 => t.to_u32().unwrap(),
            _ => t.to_f32().unwrap().iter().map(|v| v.to_bits()).collect(),
        }
    };
    for (tokens, d, cfg) in [
        (37, 16, config(8, 2, 1.25)),
        (300, 12, config(4, 1, 1.0)),
        (5, 6, config(3, 1, 2.0)),
    ] {
        let label = format!("{cfg:?} T={tokens} d={d} on {}", device.label());
        let mut rng = Rng::new(tokens as u64 + d as u64);
        let (xs, ws) = (rng.vec(tokens * d), rng.vec(d * cfg.experts));
        let x = Tensor::from_f32(device, &[tokens, d], DType::F32, &xs).unwrap();
        let w = Tensor::from_f32(device, &[d, cfg.experts], DType::F32, &ws).unwrap();
        let outs: [Tensor; 5] = eager::run_n(&RouterLinear(cfg), &[&x, &w]).unwrap();
        let logits = &outs[0];
        let vec4 = Matmul {
            limits: None,
            trans_a: false,
            trans_b: false,
            offsets: None,
            choice: VariantChoice::Fixed(MatmulVariant::Vec4),
            f16_accumulate: false,
            epilogue: Epilogue::NONE,
        };
        match eager::run_one(&vec4, &[&x, &w]) {
            Ok(want) => assert_eq!(bits(logits), bits(&want), "{label}: logits"),
            Err(_) => {
                let want: Vec<f32> = (0..tokens * cfg.experts)
                    .map(|i| {
                        let (t, e) = (i / cfg.experts, i % cfg.experts);
                        (0..d)
                            .map(|k| xs[t * d + k] * ws[k * cfg.experts + e])
                            .sum()
                    })
                    .collect();
                assert_close(&label, &logits.to_f32().unwrap(), &want, 1e-5);
            }
        }
        let routed: [Tensor; 4] = eager::run_n(&Router(cfg), &[logits]).unwrap();
        for (k, (got, want)) in outs[1..].iter().zip(&routed).enumerate() {
            assert_eq!(bits(got), bits(want), "{label}: routing output {k}");
        }
    }
    let x = Tensor::zeros(device, &[4, 8], DType::F32).unwrap();
    let w = Tensor::zeros(device, &[6, 4], DType::F32).unwrap();
    let err = eager::run(&RouterLinear(config(4, 1, 1.0)), &[&x, &w]).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
}

fn capacity_is_ceil_of_tokens_over_experts_times_factor() {
    assert_eq!(config(8, 1, 1.25).capacity(100), 16); // 15.625
    assert_eq!(config(4, 1, 1.0).capacity(300), 75);
    assert_eq!(config(3, 1, 1.0).capacity(10), 4);
    assert_eq!(config(10, 1, 1.1).capacity(100), 11);
    assert_eq!(config(8, 2, 1.25).capacity(100), 32); // k × 15.625
    // A factor past E/k (dropless) gives no slot that could never fill.
    assert_eq!(config(8, 2, 8.0).capacity(100), 100);
    assert_eq!(config(8, 2, 4.0).capacity(100), 100);
    assert_eq!(config(4, 1, 10.0).capacity(7), 7);
}
