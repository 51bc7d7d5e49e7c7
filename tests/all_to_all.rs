//! All-to-all round trips across the virtual devices of each adapter and across virtual devices
//! spanning adapters: every token arrives exactly once at its expert's device, and comes back
//! bit-identical, under skewed routing too.

#![allow(clippy::unwrap_used)]

mod common;

use common::{Adapters, Span, case};
use gangway::collective::AllToAll;
use gangway::kernels::matmul::{MatmulOptions, grouped_matmul};
use gangway::{DType, Device, Error, Rng, Tensor};

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(adapters: mesh_spans_adapters_and_virtual_devices).span(Span::Cross),
        case!(adapters: uneven_random_routing_round_trips).span(Span::EachAndCross),
        case!(adapters: everything_to_one_expert_round_trips).span(Span::EachAndCross),
        case!(adapters: all_experts_empty_round_trips).span(Span::EachAndCross),
        case!(adapters: expert_batches_feed_the_grouped_matmul).span(Span::EachAndCross),
        case!(adapters: mismatched_inputs_are_typed_errors),
    ])
}

/// Builds per-source dispatch buffers where row `r` of expert `e` on source `s` holds a unique
/// tag, with `counts(s, e)` real rows per expert and zeros elsewhere.
fn sources(
    devices: &[Device],
    experts: usize,
    capacity: usize,
    d: usize,
    counts: impl Fn(usize, usize) -> usize,
) -> (Vec<Tensor>, Vec<Tensor>, Vec<Vec<f32>>) {
    let (mut xs, mut cs, mut hosts) = (vec![], vec![], vec![]);
    for (s, device) in devices.iter().enumerate() {
        let mut host = vec![0.0f32; experts * capacity * d];
        let mut c = vec![];
        for e in 0..experts {
            let n = counts(s, e);
            c.push(n as u32);
            for r in 0..n {
                for j in 0..d {
                    host[(e * capacity + r) * d + j] =
                        (s * 1_000_000 + e * 10_000 + r * 10 + j) as f32;
                }
            }
        }
        xs.push(Tensor::from_f32(device, &[experts * capacity, d], DType::F32, &host).unwrap());
        cs.push(Tensor::from_u32(device, &[experts], &c).unwrap());
        hosts.push(host);
    }
    (xs, cs, hosts)
}

fn round_trip(
    devices: &[Device],
    experts: usize,
    capacity: usize,
    d: usize,
    counts: impl Fn(usize, usize) -> usize + Copy,
) {
    let n = devices.len();
    let (xs, cs, hosts) = sources(devices, experts, capacity, d, counts);
    let (plan, batches) = AllToAll::forward(&xs, &cs, experts, capacity).unwrap();
    let el = experts / n;
    // Every token arrives exactly once, at its expert's device, grouped by expert then source.
    for (j, batch) in batches.iter().enumerate() {
        let got = batch.tokens.to_f32().unwrap();
        let mut want = Vec::new();
        for e in j * el..(j + 1) * el {
            for s in 0..n {
                for r in 0..counts(s, e) {
                    want.extend((0..d).map(|jj| (s * 1_000_000 + e * 10_000 + r * 10 + jj) as f32));
                }
            }
        }
        assert_eq!(got, want, "tokens received by {}", devices[j].label());
        let rows: usize = (j * el..(j + 1) * el)
            .map(|e| (0..n).map(|s| counts(s, e)).sum::<usize>())
            .sum();
        assert_eq!(*batch.offsets.last().unwrap() as usize, rows);
    }
    // ... and comes back bit-identical, with zeros in the unused capacity slots.
    let back = plan
        .reverse(&batches.iter().map(|b| b.tokens.clone()).collect::<Vec<_>>())
        .unwrap();
    for (s, t) in back.iter().enumerate() {
        let got = t.to_f32().unwrap();
        assert!(
            got.iter()
                .zip(&hosts[s])
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "round trip to {} is not bit-identical",
            devices[s].label()
        );
    }
}

/// Two virtual devices of every adapter.
fn mesh_spans_adapters_and_virtual_devices(adapters: &Adapters) {
    let devices = adapters.mesh(2);
    assert!(
        devices.len() >= 4,
        "need >= 4 virtual devices, found {}",
        devices.len()
    );
    let backends: std::collections::BTreeSet<_> =
        devices.iter().map(|d| d.info().backend.clone()).collect();
    assert!(
        backends.len() >= 2 || std::env::var("WGPU_BACKEND").is_ok(),
        "one backend only: {backends:?}"
    );
}

// The round trips run on two virtual devices of each adapter.

fn uneven_random_routing_round_trips(adapters: &Adapters) {
    let devices = &adapters.mesh(2);
    let n = devices.len();
    let mut rng = Rng::new(11);
    let table: Vec<usize> = (0..n * n * 2).map(|_| rng.below(6)).collect();
    round_trip(devices, n * 2, 5, 3, |s, e| table[s * n * 2 + e]);
}

fn everything_to_one_expert_round_trips(adapters: &Adapters) {
    let devices = &adapters.mesh(2);
    let n = devices.len();
    round_trip(devices, n, 9, 4, |_, e| if e == n - 1 { 9 } else { 0 });
}

fn all_experts_empty_round_trips(adapters: &Adapters) {
    let devices = &adapters.mesh(2);
    let n = devices.len();
    round_trip(devices, n * 2, 4, 2, |_, _| 0);
}

fn expert_batches_feed_the_grouped_matmul(adapters: &Adapters) {
    let devices = &adapters.mesh(2);
    let n = devices.len();
    let (experts, capacity, d, out) = (n, 6, 4, 8);
    let (xs, cs, _) = sources(devices, experts, capacity, d, |s, e| (s + e) % 4 + 1);
    let (plan, batches) = AllToAll::forward(&xs, &cs, experts, capacity).unwrap();
    let mut ys = Vec::new();
    for (j, batch) in batches.iter().enumerate() {
        let w =
            Tensor::from_f32(&devices[j], &[1, d, out], DType::F32, &vec![0.5; d * out]).unwrap();
        ys.push(
            grouped_matmul(&batch.tokens, &w, &batch.offsets, MatmulOptions::default()).unwrap(),
        );
    }
    let back = plan.reverse(&ys).unwrap();
    assert_eq!(back[0].shape(), &[experts * capacity, out]);
}

fn mismatched_inputs_are_typed_errors(adapters: &Adapters) {
    let devices = adapters.mesh(2);
    let (xs, cs, _) = sources(&devices[..2], 3, 2, 2, |_, _| 1);
    let err = AllToAll::forward(&xs, &cs, 3, 2).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let err = AllToAll::forward(&xs, &cs[..1], 3, 2).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
}
