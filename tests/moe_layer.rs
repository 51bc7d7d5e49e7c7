//! The main demo's layer, end to end over virtual devices of each adapter, and over a mesh spanning
//! adapters and virtual devices.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Adapters, Span, case};
use gangway::kernels::router::RouterConfig;
use gangway::moe_layer::{MoeLayerConfig, run_expert_parallel};

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(adapters: expert_parallel_layer_matches_the_cpu_reference).span(Span::EachAndCross),
    ])
}

/// Two virtual devices of each adapter.
fn expert_parallel_layer_matches_the_cpu_reference(adapters: &Adapters) {
    let devices = &adapters.mesh(2);
    let experts = devices.len() * 2;
    let cfg = MoeLayerConfig {
        tokens_per_device: 37,
        d_model: 12,
        d_out: 20,
        experts,
        router: RouterConfig {
            experts,
            k: 2,
            capacity_factor: 1.0,
            normalize_gates: true,
        },
        seed: 9,
    };
    let (_runtime, client) = common::runtime_client(devices, "test");
    let report = run_expert_parallel(&client, devices, &cfg).unwrap();
    assert!(report.max_abs_error < 1e-4, "{report:?}");
    assert_eq!(report.tokens, 37 * devices.len());
    let processed: usize = report.tokens_per_expert.iter().sum();
    let kept = (1.0 - report.dropped_fraction) * (report.tokens * 2) as f64;
    assert_eq!(processed, kept.round() as usize);
}
