//! The GPU trainer of the MoE language model against the plain-Rust reference: one device's
//! gradients and steps, 4 devices (expert- and data-parallel) against 1 device with the same
//! routing groups, capacity drops under forced imbalance, dropless routing under the same skew
//! moving only the routed rows, and bad inputs, on each adapter (its virtual devices for the
//! meshes).
#![allow(clippy::unwrap_used)]

mod common;

use common::moe::{batch, config};
use common::{Adapters, Span, case};
use gangway::kernels::optim::AdamConfig;
use gangway::kernels::router::{STAT_WORDS, dropless_factor};
use gangway::moe::{
    Adam, MoeLmConfig, MoeLmParams, MoeTrainer, forward_grouped, loss_and_grads_grouped,
};
use gangway::trace::{Direction, EventKind, TransferKind};
use gangway::train::{Checkpoint, GroupSplit, coefficient_of_variation};
use gangway::{Device, Mesh, Rng};
use std::time::Instant;

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(device: one_device_matches_the_reference),
        case!(adapters: four_devices_follow_one_device_with_four_groups),
        case!(adapters: a_data_by_expert_mesh_follows_one_device),
        case!(adapters: capacity_drops_match_the_reference_router),
        case!(adapters: a_skewed_router_dropless_moves_only_its_routed_rows),
        case!(device: bad_inputs_are_errors),
        case!(adapters: eight_devices_follow_one_device_with_eight_groups),
        case!(adapters: an_uneven_split_follows_one_device).span(Span::EachAndCross),
        case!(adapters: a_checkpointed_run_resumes_where_it_stopped),
        case!(host: the_spread_over_experts_is_a_coefficient_of_variation),
    ])
}

/// max |got − want| / max |want|.
fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-12);
    let err = got
        .iter()
        .zip(want)
        .fold(0.0f32, |m, (g, w)| m.max((g - w).abs()));
    f64::from(err / scale)
}

fn one_device_matches_the_reference(device: &Device) {
    let cfg = config();
    let params = MoeLmParams::init(cfg).unwrap();
    let mut rng = Rng::new(1);
    let (ctx, tgt) = batch(&cfg, 64, &mut rng);
    let adam = AdamConfig::new(0.01);
    let t0 = Instant::now();
    let (_runtime, client) = common::runtime_client(std::slice::from_ref(device), "test");
    for groups in [1, 2] {
        let trainer = MoeTrainer::new(
            &client,
            &Mesh::line(std::slice::from_ref(device)),
            &params,
            adam,
            groups,
        )
        .unwrap();
        let (want_fwd, want) = loss_and_grads_grouped(&params, &ctx, &tgt, groups).unwrap();
        let got = trainer.grads(&ctx, &tgt).unwrap();
        for (spec, (g, w)) in cfg
            .param_specs()
            .iter()
            .zip(got.tensors.iter().zip(&want.tensors))
        {
            let e = rel_err(g, w);
            assert!(e < 1e-4, "G={groups} {}: relative error {e}", spec.name);
        }
        let ce = trainer.eval(&ctx, &tgt).unwrap();
        assert!((ce - want_fwd.loss.cross_entropy).abs() < 1e-5 * want_fwd.loss.cross_entropy);
    }

    // Three Adam steps: the same losses, stats and parameters as the reference's.
    let mut trainer = MoeTrainer::new(
        &client,
        &Mesh::line(std::slice::from_ref(device)),
        &params,
        adam,
        1,
    )
    .unwrap();
    let mut ref_params = params.clone();
    let mut ref_adam = Adam::new(&params, adam).unwrap();
    for step in 1..=3u32 {
        let (ctx, tgt) = batch(&cfg, 64, &mut rng);
        let got = trainer.step(&ctx, &tgt).unwrap();
        let want = ref_adam
            .train_step_grouped(&mut ref_params, &ctx, &tgt, 1)
            .unwrap();
        assert_eq!(got.step, step);
        let rel = |a: f64, b: f64| (a - b).abs() / b.abs().max(1e-12);
        assert!(
            rel(got.loss, want.loss.total) < 1e-5,
            "{got:?} vs {:?}",
            want.loss
        );
        assert!(rel(got.ce, want.loss.cross_entropy) < 1e-5);
        assert!(rel(got.aux, want.loss.aux) < 1e-5);
        assert!(rel(got.z, want.loss.z) < 1e-4);
        assert_eq!(got.blocks.len(), cfg.blocks);
        for (g, w) in got.blocks.iter().zip(&want.stats) {
            assert_eq!(g.tokens_per_expert, w.tokens_per_expert);
            assert_eq!((g.dropped, g.capacity), (w.dropped, w.capacity));
        }
    }
    let got = trainer.params().unwrap();
    for (spec, (g, w)) in cfg
        .param_specs()
        .iter()
        .zip(got.tensors.iter().zip(&ref_params.tensors))
    {
        // Adam moves each value by about lr per step whatever the gradient's size: compare to lr.
        let err = g
            .iter()
            .zip(w)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            err < 0.05 * adam.lr,
            "{}: max |Δ| {err} after 3 steps",
            spec.name
        );
    }
    eprintln!(
        "one device vs reference: {:.2}s",
        t0.elapsed().as_secs_f64()
    );
}

/// A `{data: 2, expert: 2}` mesh of four virtual devices against one device with the same four
/// groups: the same routing and losses within rounding (the expert gradients' two replicas add in
/// another order), and parameters that stay together; axes the trainer does not know are refused.
fn a_data_by_expert_mesh_follows_one_device(adapters: &Adapters) {
    let devices = adapters.mesh(4);
    let cfg = config();
    let params = MoeLmParams::init(cfg).unwrap();
    let adam = AdamConfig::new(0.01);
    let (_runtime, client) = common::runtime_client(&devices[..4], "test");
    let grid = Mesh::new(&devices[..4], &[("data", 2), ("expert", 2)]).unwrap();
    let mut one = MoeTrainer::new(&client, &Mesh::line(&devices[..1]), &params, adam, 4).unwrap();
    let mut two_by_two = MoeTrainer::new(&client, &grid, &params, adam, 4).unwrap();
    let mut rng = Rng::new(5);
    for _ in 0..6 {
        let (ctx, tgt) = batch(&cfg, 64, &mut rng);
        let (a, b) = (
            one.step(&ctx, &tgt).unwrap(),
            two_by_two.step(&ctx, &tgt).unwrap(),
        );
        let rel = (a.loss - b.loss).abs() / a.loss;
        assert!(rel < 1e-5, "step {}: {} vs {}", a.step, a.loss, b.loss);
        assert_eq!(a.tokens_per_expert, b.tokens_per_expert, "step {}", a.step);
    }
    let (p1, p4) = (one.params().unwrap(), two_by_two.params().unwrap());
    for (spec, (a, b)) in cfg
        .param_specs()
        .iter()
        .zip(p1.tensors.iter().zip(&p4.tensors))
    {
        let err = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(err < 1e-3 * adam.lr, "{}: max |Δ| {err}", spec.name);
    }
    let stages = Mesh::new(&devices[..4], &[("stage", 4)]).unwrap();
    assert!(
        MoeTrainer::new(&client, &stages, &params, adam, 4).is_ok(),
        "one axis, any name"
    );
    let odd = Mesh::new(&devices[..4], &[("expert", 2), ("data", 2)]).unwrap();
    let e = MoeTrainer::new(&client, &odd, &params, adam, 4).unwrap_err();
    assert!(e.to_string().contains("data, expert"), "{e}");
}

/// Four virtual devices of the adapter.
fn four_devices_follow_one_device_with_four_groups(adapters: &Adapters) {
    let devices = adapters.mesh(4);
    let mesh = &devices[..4];
    let cfg = config();
    let params = MoeLmParams::init(cfg).unwrap();
    let adam = AdamConfig::new(0.01);
    let (_runtime, client) = common::runtime_client(mesh, "test");
    let mut one = MoeTrainer::new(&client, &Mesh::line(&mesh[..1]), &params, adam, 4).unwrap();
    let mut four = MoeTrainer::new(&client, &Mesh::line(mesh), &params, adam, mesh.len()).unwrap();
    assert_eq!(four.groups(), 4);
    four.set_trace(true);
    let mut events = Vec::new();
    let mut rng = Rng::new(2);
    let (mut t1, mut t4) = (0.0, 0.0);
    let mut curve = Vec::new();
    for _ in 0..20 {
        let (ctx, tgt) = batch(&cfg, 64, &mut rng);
        let a = one.step(&ctx, &tgt).unwrap();
        let b = four.step(&ctx, &tgt).unwrap();
        assert!(a.trace.is_empty(), "the 1-device trainer does not trace");
        events.extend(b.trace.iter().cloned());
        t1 += a.seconds;
        t4 += b.seconds;
        // The same bits: every kernel sums in an order that does not depend on how the rows are
        // split over devices, and the all-reduce adds the groups in the order one device
        // accumulates them.
        assert_eq!(
            a.loss.to_bits(),
            b.loss.to_bits(),
            "step {}: 1 device {} vs 4 devices {}",
            a.step,
            a.loss,
            b.loss
        );
        assert_eq!(a.tokens_per_expert, b.tokens_per_expert, "step {}", a.step);
        curve.push((a.loss, b.loss));
    }
    for (i, (a, b)) in curve.iter().enumerate().step_by(4) {
        eprintln!("step {:2}: 1 device {a:.6}  4 devices {b:.6}", i + 1);
    }
    eprintln!("20 steps: 1 device (4 groups) {t1:.2}s, 4 devices {t4:.2}s");
    assert!(curve[19].0 < curve[0].0, "the loss should fall: {curve:?}");
    let p1 = one.params().unwrap();
    let p4 = four.params().unwrap();
    for (spec, (a, b)) in cfg
        .param_specs()
        .iter()
        .zip(p1.tensors.iter().zip(&p4.tensors))
    {
        assert_eq!(a, b, "{}: 1 device vs 4 devices", spec.name);
    }
    // Every kernel of a step, its transfers and the stats became the step's events on every
    // device (by id: the GL adapter's do not start at 0).
    for device in mesh.iter().map(Device::id) {
        for (kind, name) in [
            (EventKind::Kernel, "r0 b0 router"),
            (EventKind::Kernel, "r0 b1 expert w1"),
            (EventKind::Kernel, "r0 b0 expert weight grads"),
            (EventKind::Transfer, "r0 b0 all-to-all forward"),
            (EventKind::Transfer, "r0 b1 all-to-all backward reverse"),
            (EventKind::Transfer, "all-reduce"),
        ] {
            assert!(
                events
                    .iter()
                    .any(|e| e.device == device && e.kind == kind && e.name.ends_with(name)),
                "no {kind:?} event {name:?} on device {device}"
            );
        }
        // One Adam node steps a bucket's tensors together (`adam embed, w_in`, say).
        assert!(
            events.iter().any(|e| e.device == device
                && e.kind == EventKind::Kernel
                && e.name.starts_with("adam ")
                && e.name.contains("embed")),
            "no Adam kernel event for the embedding on device {device}"
        );
        let steps = events
            .iter()
            .filter(|e| e.device == device && e.name.starts_with("step "))
            .count();
        assert_eq!(steps, 20);
    }
}

/// The adapter's device alone, and meshes of two and four of its virtual devices.
fn capacity_drops_match_the_reference_router(adapters: &Adapters) {
    let device = adapters.device().clone();
    let cfg = MoeLmConfig {
        capacity_factor: 1.0,
        ..config()
    };
    let mut params = MoeLmParams::init(cfg).unwrap();
    // Block 0's router sends nearly every token to expert 0 first (its input is non-negative).
    let router = cfg.block_index(0).router;
    for row in params.tensors[router].chunks_mut(cfg.experts) {
        row[0] = 1.0;
    }
    let mut rng = Rng::new(4);
    let (ctx, tgt) = batch(&cfg, 64, &mut rng);
    let adam = AdamConfig::new(0.01);
    let virt = adapters.mesh(4);
    let mut all = vec![device.clone()];
    all.extend(virt.iter().cloned());
    let (_runtime, client) = common::runtime_client(&all, "test");
    let mut meshes: Vec<(Vec<Device>, usize)> = vec![(vec![device.clone()], 1), (vec![device], 4)];
    meshes.push((virt[..4].to_vec(), 4));
    meshes.push((virt[..2].to_vec(), 2));
    for (mesh, groups) in meshes {
        let want = forward_grouped(&params, &ctx, &tgt, groups).unwrap();
        let mut trainer =
            MoeTrainer::new(&client, &Mesh::line(&mesh), &params, adam, groups).unwrap();
        let got = trainer.step(&ctx, &tgt).unwrap();
        let b0 = &got.blocks[0];
        assert!(
            b0.dropped >= 64 / 2,
            "the imbalance should drop many choices: {b0:?}"
        );
        assert_eq!(b0.tokens_per_expert[0], b0.capacity * groups, "{b0:?}");
        for (l, (g, w)) in got.blocks.iter().zip(&want.stats).enumerate() {
            assert_eq!(g.dropped, w.dropped, "{} devices, block {l}", mesh.len());
            assert_eq!(g.tokens_per_expert, w.tokens_per_expert, "block {l}");
            assert_eq!(g.capacity, w.capacity);
            assert!((g.dropped_fraction - w.dropped_fraction).abs() < 1e-12);
        }
        eprintln!(
            "{} device(s), {groups} groups: dropped per block {:?}, block 0 tokens/expert {:?}",
            mesh.len(),
            got.blocks.iter().map(|b| b.dropped).collect::<Vec<_>>(),
            b0.tokens_per_expert
        );
        let dropped: usize = want.stats.iter().map(|s| s.dropped).sum();
        let frac = dropped as f64 / (64 * cfg.top_k * cfg.blocks) as f64;
        assert!((got.dropped_fraction - frac).abs() < 1e-12);
        // The spread of kept tokens over the experts, from the reference's counts.
        let per_expert: Vec<usize> = (0..cfg.experts)
            .map(|e| want.stats.iter().map(|s| s.tokens_per_expert[e]).sum())
            .collect();
        assert!((got.expert_cv() - coefficient_of_variation(&per_expert)).abs() < 1e-12);
    }
}

/// Dropless routing under a router that sends nearly every token to expert 0 first: nothing is
/// dropped, four devices follow one with the same groups bit for bit, and each step's
/// all-to-alls read back and write exactly the routed rows (every kept choice's row in the four
/// exchanges of each block) and the kept counts' own exchange, however skewed the load.
fn a_skewed_router_dropless_moves_only_its_routed_rows(adapters: &Adapters) {
    let cfg = MoeLmConfig {
        capacity_factor: dropless_factor(config().experts, config().top_k),
        ..config()
    };
    let mut params = MoeLmParams::init(cfg).unwrap();
    for l in 0..cfg.blocks {
        for row in params.tensors[cfg.block_index(l).router].chunks_mut(cfg.experts) {
            row[0] = 1.0;
        }
    }
    let devices = adapters.mesh(4);
    let (_runtime, client) = common::runtime_client(&devices[..4], "test");
    let adam = AdamConfig::new(0.01);
    let mut one = MoeTrainer::new(&client, &Mesh::line(&devices[..1]), &params, adam, 4).unwrap();
    let mut four = MoeTrainer::new(&client, &Mesh::line(&devices[..4]), &params, adam, 4).unwrap();
    four.set_trace(true);
    let mut rng = Rng::new(8);
    let tokens = 64;
    for _ in 0..3 {
        let (ctx, tgt) = batch(&cfg, tokens, &mut rng);
        let (a, b) = (
            one.step(&ctx, &tgt).unwrap(),
            four.step(&ctx, &tgt).unwrap(),
        );
        assert_eq!(a.loss.to_bits(), b.loss.to_bits(), "step {}", a.step);
        assert_eq!(a.tokens_per_expert, b.tokens_per_expert, "step {}", a.step);
        let b0 = &b.blocks[0];
        assert_eq!(b.dropped_fraction, 0.0, "dropless drops nothing: {b0:?}");
        assert!(
            b0.tokens_per_expert[0] * 10 >= tokens * 9,
            "expert 0 should hold nearly every token: {b0:?}"
        );
        let kept: usize = b.blocks.iter().flat_map(|s| &s.tokens_per_expert).sum();
        assert_eq!(kept, tokens * cfg.top_k * cfg.blocks);
        let rows = kept * cfg.model * 4 * 4;
        let counts = cfg.blocks * 4 * cfg.experts * STAT_WORDS * 4;
        for direction in [Direction::In, Direction::Out] {
            let moved: u64 = (b.trace.iter())
                .filter_map(|e| e.moved)
                .filter(|m| m.kind == TransferKind::AllToAll && m.direction == direction)
                .map(|m| m.bytes)
                .sum();
            assert_eq!(
                moved,
                (rows + counts) as u64,
                "{direction:?}, step {}",
                b.step
            );
        }
    }
}

fn bad_inputs_are_errors(device: &Device) {
    let cfg = config();
    let params = MoeLmParams::init(cfg).unwrap();
    let adam = AdamConfig::new(0.01);
    let one = std::slice::from_ref(device);
    // Experts not divisible by the devices, groups not by the devices, no devices, bad Adam.
    let (_runtime, client) = common::runtime_client(one, "test");
    let three = vec![device.clone(), device.clone(), device.clone()];
    assert!(MoeTrainer::new(&client, &Mesh::line(&three), &params, adam, three.len()).is_err());
    assert!(MoeTrainer::new(&client, &Mesh::line(&three[..2]), &params, adam, 3).is_err());
    assert!(MoeTrainer::new(&client, &Mesh::line(one), &params, adam, 0).is_err());
    assert!(
        MoeTrainer::new(
            &client,
            &Mesh::line(&Vec::<Device>::new()),
            &params,
            adam,
            0
        )
        .is_err()
    );
    assert!(
        MoeTrainer::new(
            &client,
            &Mesh::line(one),
            &params,
            AdamConfig::new(f32::NAN),
            one.len()
        )
        .is_err()
    );
    let mut broken = params.clone();
    broken.tensors[1].pop();
    assert!(MoeTrainer::new(&client, &Mesh::line(one), &broken, adam, one.len()).is_err());

    let mut trainer = MoeTrainer::new(&client, &Mesh::line(one), &params, adam, 4).unwrap();
    let mut rng = Rng::new(5);
    let (ctx, tgt) = batch(&cfg, 64, &mut rng);
    let mut bad_ctx = ctx.clone();
    bad_ctx[3] = 256;
    let mut bad_tgt = tgt.clone();
    bad_tgt[0] = 1000;
    let cases: Vec<(&[u32], &[u32])> = vec![
        (&bad_ctx, &tgt),
        (&ctx, &bad_tgt),
        (&ctx[..ctx.len() - 1], &tgt),
        (&ctx[..62 * 8], &tgt[..62]), // 62 tokens are not 4 equal groups
        (&[], &[]),
    ];
    for (c, t) in cases {
        assert!(trainer.step(c, t).is_err());
        assert!(trainer.eval(c, t).is_err());
        assert!(trainer.grads(c, t).is_err());
    }
    // Nothing was applied: the first good step is step 1.
    assert_eq!(trainer.steps(), 0);
    assert_eq!(trainer.step(&ctx, &tgt).unwrap().step, 1);
}

/// Eight virtual devices of the adapter.
fn eight_devices_follow_one_device_with_eight_groups(adapters: &Adapters) {
    let devices = adapters.mesh(8);
    let cfg = MoeLmConfig {
        experts: 8,
        top_k: 1,
        ..config()
    };
    let params = MoeLmParams::init(cfg).unwrap();
    let adam = AdamConfig::new(0.01);
    let (_runtime, client) = common::runtime_client(&devices[..8], "test");
    let mut one = MoeTrainer::new(&client, &Mesh::line(&devices[..1]), &params, adam, 8).unwrap();
    let mut eight = MoeTrainer::new(&client, &Mesh::line(&devices[..8]), &params, adam, 8).unwrap();
    let mut rng = Rng::new(6);
    for _ in 0..3 {
        let (ctx, tgt) = batch(&cfg, 64, &mut rng);
        let a = one.step(&ctx, &tgt).unwrap();
        let b = eight.step(&ctx, &tgt).unwrap();
        assert_eq!(a.loss.to_bits(), b.loss.to_bits(), "{a:?} vs {b:?}");
        for (x, y) in a.blocks.iter().zip(&b.blocks) {
            assert_eq!(x.tokens_per_expert, y.tokens_per_expert);
            assert_eq!((x.dropped, x.capacity), (y.dropped, y.capacity));
            assert_eq!(x.aux_loss.to_bits(), y.aux_loss.to_bits());
        }
    }
    let (ctx, tgt) = batch(&cfg, 64, &mut rng);
    let (ea, eb) = (
        one.eval(&ctx, &tgt).unwrap(),
        eight.eval(&ctx, &tgt).unwrap(),
    );
    assert_eq!(ea.to_bits(), eb.to_bits(), "{ea} vs {eb}");
}

/// 2 virtual devices of the adapter → 4; groups stay 4.
fn a_checkpointed_run_resumes_where_it_stopped(adapters: &Adapters) {
    let devices = adapters.mesh(4);
    let (before, after) = (&devices[..2], &devices[..4]);
    let t0 = Instant::now();
    let cfg = config();
    let params = MoeLmParams::init(cfg).unwrap();
    let adam = AdamConfig::new(0.01);
    let mut rng = Rng::new(7);
    let batches: Vec<_> = (0..6).map(|_| batch(&cfg, 64, &mut rng)).collect();

    let (_runtime, client) = common::runtime_client(after, "test");
    let mut straight = MoeTrainer::new(&client, &Mesh::line(before), &params, adam, 4).unwrap();
    let want: Vec<f64> = batches
        .iter()
        .map(|(c, t)| straight.step(c, t).unwrap().loss)
        .collect();
    let want_params = straight.params().unwrap();

    let mut first = MoeTrainer::new(&client, &Mesh::line(before), &params, adam, 4).unwrap();
    for (c, t) in &batches[..3] {
        first.step(c, t).unwrap();
    }
    let ckpt = first.checkpoint().unwrap();
    let state = ckpt.train.as_ref().unwrap();
    assert_eq!((state.step, state.groups, state.adam), (3, 4, adam));
    assert!(state.v.tensors.iter().flatten().any(|&x| x > 0.0));
    let dir = common::scratch_path("ckpt", &devices[0]);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run.gwckpt");
    ckpt.save(&path).unwrap();
    let loaded = Checkpoint::<MoeLmConfig>::load(&path).unwrap();
    assert_eq!(loaded, ckpt);

    for (mesh, exact) in [(before, true), (after, before.len() == after.len())] {
        let mut resumed = MoeTrainer::resume(&client, &Mesh::line(mesh), &loaded).unwrap();
        assert_eq!((resumed.steps(), resumed.groups()), (3, 4));
        for (i, (c, t)) in batches[3..].iter().enumerate() {
            let got = resumed.step(c, t).unwrap();
            assert_eq!(got.step as usize, 4 + i);
            let rel = (got.loss - want[3 + i]).abs() / want[3 + i];
            assert!(
                rel < 1e-5,
                "{} → {} devices, step {}: {} vs {}",
                before.len(),
                mesh.len(),
                got.step,
                got.loss,
                want[3 + i]
            );
        }
        let got = resumed.params().unwrap();
        for (spec, (a, b)) in cfg
            .param_specs()
            .iter()
            .zip(got.tensors.iter().zip(&want_params.tensors))
        {
            if exact {
                assert_eq!(a, b, "{}: resumed on the same mesh", spec.name);
            } else {
                let err = a
                    .iter()
                    .zip(b)
                    .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
                assert!(err < 1e-3 * adam.lr, "{}: max |Δ| {err}", spec.name);
            }
        }
    }

    // Damaged files and unusable meshes are errors, not panics.
    let bytes = std::fs::read(&path).unwrap();
    let mut bad_magic = bytes.clone();
    bad_magic[0] ^= 0xff;
    let mut bad_header = bytes.clone();
    bad_header[17] ^= 0x20; // inside the JSON header
    let mut trailing = bytes.clone();
    trailing.push(0);
    let mut nan = bytes.clone();
    let last = nan.len() - 4;
    nan[last..].copy_from_slice(&f32::NAN.to_le_bytes());
    let mut bad_version = bytes.clone();
    bad_version[8] = 9;
    let cases = [
        bad_magic,
        bad_header,
        trailing,
        nan,
        bad_version,
        bytes[..bytes.len() - 1].to_vec(),
        bytes[..bytes.len() / 2].to_vec(),
        bytes[..10].to_vec(),
        Vec::new(),
    ];
    for (i, case) in cases.iter().enumerate() {
        assert!(
            Checkpoint::<MoeLmConfig>::from_bytes(case).is_err(),
            "damaged case {i}"
        );
    }
    let corrupt = dir.join("corrupt.gwckpt");
    std::fs::write(&corrupt, &bytes[..bytes.len() - 7]).unwrap();
    assert!(Checkpoint::<MoeLmConfig>::load(&corrupt).is_err());
    assert!(Checkpoint::<MoeLmConfig>::load(&dir.join("missing.gwckpt")).is_err());
    let three = vec![before[0].clone(); 3];
    assert!(MoeTrainer::resume(&client, &Mesh::line(&three), &loaded).is_err());
    // Weights alone hold nothing to resume.
    let weights = Checkpoint::<MoeLmConfig>::from_bytes(&params.to_bytes().unwrap()).unwrap();
    assert!(MoeTrainer::resume(&client, &Mesh::line(before), &weights).is_err());
    let mut mismatched = loaded.clone();
    mismatched.train.as_mut().unwrap().m.tensors[0].pop();
    assert!(MoeTrainer::resume(&client, &Mesh::line(before), &mismatched).is_err());
    assert!(mismatched.to_bytes().is_err());
    std::fs::remove_dir_all(&dir).unwrap();
    eprintln!(
        "checkpoint resume ({} → {} devices): {:.2}s",
        before.len(),
        after.len(),
        t0.elapsed().as_secs_f64()
    );
}

fn the_spread_over_experts_is_a_coefficient_of_variation() {
    assert_eq!(coefficient_of_variation(&[4, 4, 4, 4]), 0.0);
    assert_eq!(coefficient_of_variation(&[]), 0.0);
    assert_eq!(coefficient_of_variation(&[0, 0]), 0.0);
    // All on one of four experts: std = mean · √3.
    let cv = coefficient_of_variation(&[8, 0, 0, 0]);
    assert!((cv - 3f64.sqrt()).abs() < 1e-12, "{cv}");
    let cv = coefficient_of_variation(&[1, 3]);
    assert!((cv - 0.5).abs() < 1e-12, "{cv}");
}

/// Two devices (virtual devices of one adapter, or one of each adapter) dealt 6 and 2 of 8
/// routing groups, against one device with the 8 groups: the same routing and losses (the
/// forward of a group is the same bits wherever it runs; the gradient sums add the groups in
/// another order, so later steps agree to rounding), the same per-token losses, and the second
/// device's token side idle in the rounds it has no group, while its experts serve every round.
fn an_uneven_split_follows_one_device(adapters: &Adapters) {
    let devices = adapters.mesh(2);
    let pair = &devices[..2];
    let cfg = config();
    let params = MoeLmParams::init(cfg).unwrap();
    let adam = AdamConfig::new(0.01);
    let (_runtime, client) = common::runtime_client(pair, "test");
    let mut one = MoeTrainer::new(&client, &Mesh::line(&pair[..1]), &params, adam, 8).unwrap();
    let mut two = MoeTrainer::new(&client, &Mesh::line(pair), &params, adam, 8).unwrap();
    assert!(two.split().is_even());
    let mut rng = Rng::new(9);
    let (ctx, tgt) = batch(&cfg, 64, &mut rng);
    let balanced = two.balance(&ctx, &tgt).unwrap();
    assert!(
        balanced.speeds.iter().all(|s| s.is_finite() && *s > 0.0),
        "{balanced:?}"
    );
    assert_eq!(two.split(), &balanced.split);
    let err = two
        .set_split(GroupSplit::from_counts(vec![6, 1]).unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("7 groups"), "{err}");
    two.set_split(GroupSplit::from_counts(vec![6, 2]).unwrap())
        .unwrap();
    two.set_trace(true);
    let mut events = Vec::new();
    for step in 0..6 {
        let (ctx, tgt) = batch(&cfg, 64, &mut rng);
        let a = one.step(&ctx, &tgt).unwrap();
        let b = two.step(&ctx, &tgt).unwrap();
        events.extend(b.trace.iter().cloned());
        if step == 0 {
            assert_eq!(a.loss.to_bits(), b.loss.to_bits(), "{a:?} vs {b:?}");
        }
        let rel = ((a.loss - b.loss) / a.loss).abs();
        assert!(rel < 1e-5, "step {}: {} vs {}", a.step, a.loss, b.loss);
        assert_eq!(a.tokens_per_expert, b.tokens_per_expert, "step {}", a.step);
        assert!((a.dropped_fraction - b.dropped_fraction).abs() < 1e-12);
    }
    let (p1, p2) = (one.params().unwrap(), two.params().unwrap());
    for (spec, (a, b)) in cfg
        .param_specs()
        .iter()
        .zip(p1.tensors.iter().zip(&p2.tensors))
    {
        let scale = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let err = a
            .iter()
            .zip(b)
            .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(err <= 1e-3 * 0.01 + 1e-6 * scale, "{}: {err}", spec.name);
    }
    let (ctx, tgt) = batch(&cfg, 64, &mut rng);
    let (na, nb) = (
        one.token_nats(&ctx, &tgt).unwrap(),
        two.token_nats(&ctx, &tgt).unwrap(),
    );
    assert!(
        rel_err(
            &na.iter().map(|&v| v as f32).collect::<Vec<_>>(),
            &nb.iter().map(|&v| v as f32).collect::<Vec<_>>()
        ) < 1e-5
    );
    // Device 1 holds groups 6 and 7: rounds 0 and 1 only, but it serves every round's experts.
    let on = |device: &Device, name: &str| {
        events
            .iter()
            .filter(|e| e.device == device.id() && e.kind == EventKind::Kernel)
            .filter(|e| e.name.ends_with(name))
            .count()
    };
    for round in 0..6 {
        let router = format!("r{round} b0 router");
        assert_eq!(on(&pair[0], &router), 6, "{router} on device 0");
        let want = if round < 2 { 6 } else { 0 };
        assert_eq!(on(&pair[1], &router), want, "{router} on device 1");
        assert_eq!(on(&pair[1], &format!("r{round} b0 expert w1")), 6);
    }
}
