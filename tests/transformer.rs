//! The Transformer's GPU step program against its plain-Rust reference, on each adapter: the
//! forward's per-token losses (untied and tied heads, dense and MoE layers, a sequence length no
//! tile divides), every parameter tensor's gradient against central differences of the
//! reference's loss, two devices (expert- and data-parallel) against one with the same routing
//! groups, weights another tool wrote (NumPy, `scripts/foreign_weights.py`) fine-tuned from
//! their reference gradient, and bad inputs.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "transformer/generation.rs"]
mod generation;

use common::{Adapters, case};
use gangway::data::{Corpus, Document};
use gangway::kernels::optim::AdamConfig;
use gangway::train::{GroupSplit, TrainState};
use gangway::train::{TrainOptions, resume, train};
use gangway::transformer::decoder::Decoder;
use gangway::transformer::generate::{Sampling, generate, generate_on, generate_samples};
use gangway::transformer::reference::{ReferenceForward, forward, logits};
use gangway::transformer::{
    TransformerCheckpoint, TransformerConfig, TransformerParams, TransformerTrainer, VOCAB,
};
use gangway::{Device, Mesh, Rng};
use generation::{
    generation_is_deterministic_and_checked, generation_on_the_device_follows_the_host_reference,
    the_cache_gives_the_full_forwards_logits,
};

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(device: the_forward_matches_the_reference),
        case!(device: gradients_match_finite_differences),
        case!(adapters: two_devices_follow_one_device),
        case!(adapters: data_by_expert_meshes_follow_one_device),
        case!(adapters: uneven_splits_follow_one_device),
        case!(device: bad_inputs_are_errors),
        case!(host: bad_configs_are_errors),
        case!(adapters: a_resumed_run_takes_the_same_steps),
        case!(host: files_round_trip_and_damage_is_an_error),
        case!(device: exported_weights_give_the_same_logits),
        case!(device: weights_written_by_numpy_fine_tune),
        case!(host: generation_is_deterministic_and_checked),
        case!(device: the_cache_gives_the_full_forwards_logits),
        case!(device: generation_on_the_device_follows_the_host_reference),
        case!(device: moe_vs_dense_compares_equal_active_parameters),
        case!(adapters: btm_with_transformer_elms_scores_every_domain),
    ])
}

/// Two layers, the second an expert layer; `T = 5` (no tile divides it), two heads of 4.
fn tiny(tied: bool, top_k: usize) -> TransformerConfig {
    TransformerConfig {
        context: 5,
        model: 8,
        heads: 2,
        layers: 2,
        hidden: 12,
        // Experts narrower than the dense FFN: each width has its own path.
        expert_hidden: 6,
        moe_every: 2,
        experts: 2,
        top_k,
        capacity_factor: 1.0,
        // Large enough that a wrong aux or z gradient shows above the finite-difference noise.
        aux_alpha: 0.5,
        z_loss: 0.1,
        tied,
        seed: 3,
        ..TransformerConfig::default()
    }
}

/// Parameters with the LayerNorms' γ and β away from 1 and 0, and weights large enough that
/// attention is not uniform: every gradient path carries signal.
fn params(cfg: TransformerConfig) -> TransformerParams {
    let mut p = TransformerParams::init(cfg).unwrap();
    let mut rng = Rng::new(cfg.seed + 100);
    for (spec, t) in cfg.param_specs().iter().zip(&mut p.tensors) {
        let (base, spread) = if spec.name.ends_with(".weight") {
            (1.0, 0.3)
        } else if spec.name.ends_with(".bias") {
            (0.0, 0.3)
        } else {
            (0.0, 0.4)
        };
        for v in t.iter_mut() {
            *v = base + rng.symmetric() * spread;
        }
    }
    p
}

fn batch(cfg: &TransformerConfig, seqs: usize, rng: &mut Rng) -> (Vec<u32>, Vec<u32>) {
    let n = seqs * cfg.context;
    let tokens = (0..n).map(|_| rng.below(VOCAB) as u32).collect();
    let targets = (0..n).map(|_| rng.below(VOCAB) as u32).collect();
    (tokens, targets)
}

fn the_forward_matches_the_reference(device: &Device) {
    let (_runtime, client) = common::runtime_client(std::slice::from_ref(device), "test");
    let mut rng = Rng::new(1);
    for (tied, top_k, groups) in [(false, 1, 1), (true, 2, 2), (false, 2, 4)] {
        let cfg = tiny(tied, top_k);
        let p = params(cfg);
        let (tokens, targets) = batch(&cfg, 4, &mut rng);
        let adam = AdamConfig::new(0.01);
        let trainer = TransformerTrainer::new(
            &client,
            &Mesh::line(std::slice::from_ref(device)),
            &p,
            adam,
            groups,
        )
        .unwrap();
        let got = trainer.token_nats(&tokens, &targets).unwrap();
        let want = forward(&p, &tokens, &targets, groups).unwrap();
        let err = got
            .iter()
            .zip(&want.token_nats)
            .map(|(g, w)| (g - w).abs() / w.abs().max(1e-3))
            .fold(0.0, f64::max);
        assert!(
            err < 1e-4,
            "tied {tied}, top-{top_k}, G = {groups}: per-token loss off by {err:e} (relative)"
        );
        assert!(want.aux > 0.0, "the expert layer's aux loss is part of it");
    }
}

/// The reference's loss with `p` moved by `eps · dir` in tensor `t`.
fn moved_loss(
    p: &TransformerParams,
    t: usize,
    dir: &[f32],
    eps: f32,
    data: &Batch,
) -> ReferenceForward {
    let mut q = p.clone();
    for (v, d) in q.tensors[t].iter_mut().zip(dir) {
        *v += eps * d;
    }
    forward(&q, &data.0, &data.1, data.2).unwrap()
}

type Batch = (Vec<u32>, Vec<u32>, usize);

fn gradients_match_finite_differences(device: &Device) {
    let (_runtime, client) = common::runtime_client(std::slice::from_ref(device), "test");
    let mut rng = Rng::new(5);
    for tied in [false, true] {
        let cfg = tiny(tied, 2);
        let p = params(cfg);
        let (tokens, targets) = batch(&cfg, 4, &mut rng);
        let groups = 2;
        let trainer = TransformerTrainer::new(
            &client,
            &Mesh::line(std::slice::from_ref(device)),
            &p,
            AdamConfig::new(0.01),
            groups,
        )
        .unwrap();
        let grads = trainer.grads(&tokens, &targets).unwrap();
        let data = (tokens, targets, groups);
        assert_gradients_match(&p, &grads, &data, &mut rng, &format!("tied {tied}"));
    }
}

/// Each tensor's gradient in `grads` against the central difference of the reference's loss at
/// `p`, along a random direction: the sum over all its values carries far more signal than one
/// value's central difference does in f32.
fn assert_gradients_match(
    p: &TransformerParams,
    grads: &TransformerParams,
    data: &Batch,
    rng: &mut Rng,
    label: &str,
) {
    for (t, spec) in p.config.param_specs().iter().enumerate() {
        let dir: Vec<f32> = (0..spec.len()).map(|_| rng.symmetric()).collect();
        let want: f64 = grads.tensors[t]
            .iter()
            .zip(&dir)
            .map(|(g, d)| f64::from(*g) * f64::from(*d))
            .sum();
        let eps = 2e-3;
        let (plus, minus) = (
            moved_loss(p, t, &dir, eps, data),
            moved_loss(p, t, &dir, -eps, data),
        );
        // Routing is discrete: a difference across a changed route is not a derivative.
        if plus.kept != minus.kept || plus.dropped != minus.dropped {
            eprintln!("{label} {}: a route changed, skipped", spec.name);
            continue;
        }
        let fd = (plus.loss - minus.loss) / (2.0 * f64::from(eps));
        let err = (fd - want).abs();
        eprintln!(
            "{label} {:22} analytic {want:+.6e}  finite difference {fd:+.6e}",
            spec.name
        );
        assert!(
            err <= 0.02 * want.abs() + 2e-4,
            "{label} {}: analytic {want:e}, finite difference {fd:e}",
            spec.name
        );
    }
}

/// The value `scripts/foreign_weights.py` wrote at row-major `index` of tensor `name` (its
/// `value`, in f64 as NumPy computes it, then rounded to f32).
fn numpy_value(name: &str, index: usize) -> f32 {
    let phase = f64::from(name.bytes().map(u32::from).sum::<u32>() % 97) * 0.1;
    let wave = (0.37 * index as f64 + phase).sin();
    let v = if name.ends_with(".weight") {
        1.0 + 0.3 * wave
    } else if name.ends_with(".bias") {
        0.3 * wave
    } else {
        0.4 * wave
    };
    v as f32
}

/// Issue 42's fine-tuning from another tool's weights: the fixture is NumPy's, written by
/// `scripts/foreign_weights.py` under the guide's names with no gangway metadata. It loads with
/// its config (each value where NumPy put it), step 1's gradient is the reference's at those
/// weights, and training from them lowers the loss.
fn weights_written_by_numpy_fine_tune(device: &Device) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/foreign");
    let config: TransformerConfig =
        serde_json::from_slice(&std::fs::read(format!("{dir}/tiny.config.json")).unwrap()).unwrap();
    let bytes = std::fs::read(format!("{dir}/tiny.safetensors")).unwrap();
    // Without its config it is not taken for a gangway file.
    let err = TransformerCheckpoint::from_bytes(&bytes).unwrap_err();
    assert!(err.to_string().contains("--config"), "{err}");
    let loaded = TransformerCheckpoint::from_bytes_with(&bytes, Some(config)).unwrap();
    assert!(loaded.train.is_none(), "weights, no optimizer state");
    let p = loaded.params;
    for (spec, t) in config.param_specs().iter().zip(&p.tensors) {
        for (i, &v) in t.iter().enumerate() {
            let want = numpy_value(&spec.name, i);
            assert!(
                (v - want).abs() <= 1e-6,
                "{}[{i}] = {v}, the script wrote {want}",
                spec.name
            );
        }
    }

    let (_runtime, client) = common::runtime_client(std::slice::from_ref(device), "test");
    let mut rng = Rng::new(42);
    let (tokens, targets) = batch(&config, 4, &mut rng);
    let groups = 2;
    let one = std::slice::from_ref(device);
    let mut trainer =
        TransformerTrainer::new(&client, &Mesh::line(one), &p, AdamConfig::new(0.01), groups)
            .unwrap();
    let grads = trainer.grads(&tokens, &targets).unwrap();
    let data = (tokens, targets, groups);
    assert_gradients_match(&p, &grads, &data, &mut rng, "numpy's weights");
    let want = forward(&p, &data.0, &data.1, groups).unwrap().loss;
    let mut losses = Vec::new();
    for _ in 0..8 {
        losses.push(trainer.step(&data.0, &data.1).unwrap().loss);
    }
    assert!(
        (losses[0] - want).abs() <= 1e-4 * want.abs(),
        "step 1's loss {} against the reference's {want} at the given weights",
        losses[0]
    );
    assert!(
        losses[7] < losses[0] - 0.1,
        "Adam from the given weights should lower the loss: {losses:?}"
    );
}

fn two_devices_follow_one_device(adapters: &Adapters) {
    let devices = adapters.mesh(2);
    let mesh = &devices[..2];
    let cfg = tiny(false, 2);
    let p = TransformerParams::init(cfg).unwrap();
    let adam = AdamConfig::new(0.01);
    let (_runtime, client) = common::runtime_client(mesh, "test");
    let mut one = TransformerTrainer::new(&client, &Mesh::line(&mesh[..1]), &p, adam, 2).unwrap();
    let mut two = TransformerTrainer::new(&client, &Mesh::line(mesh), &p, adam, 2).unwrap();
    let mut rng = Rng::new(9);
    let (tokens, targets) = batch(&cfg, 4, &mut rng);
    let mut losses = Vec::new();
    let mut first_kept = Vec::new();
    for _ in 0..8 {
        let a = one.step(&tokens, &targets).unwrap();
        let b = two.step(&tokens, &targets).unwrap();
        assert_eq!(
            a.loss.to_bits(),
            b.loss.to_bits(),
            "step {}: 1 device {} vs 2 devices {}",
            a.step,
            a.loss,
            b.loss
        );
        assert_eq!(a.tokens_per_expert, b.tokens_per_expert);
        if a.step == 1 {
            first_kept = a.tokens_per_expert.clone();
        }
        losses.push(a.loss);
    }
    eprintln!("losses on one batch: {losses:.4?}");
    assert!(
        losses[7] < losses[0] - 0.1,
        "Adam on one batch should lower its loss: {losses:?}"
    );
    let (p1, p2) = (one.params().unwrap(), two.params().unwrap());
    for (spec, (a, b)) in cfg
        .param_specs()
        .iter()
        .zip(p1.tensors.iter().zip(&p2.tensors))
    {
        assert_eq!(a, b, "{}: 1 device vs 2 devices", spec.name);
    }
    // The first step's loss is the reference's.
    let want = forward(&p, &tokens, &targets, 2).unwrap();
    assert!(
        (losses[0] - want.loss).abs() < 1e-5 * want.loss,
        "{} vs reference {}",
        losses[0],
        want.loss
    );
    let want_kept: Vec<usize> = (0..cfg.experts)
        .map(|e| want.kept.iter().map(|k| k[e]).sum())
        .collect();
    assert_eq!(
        first_kept, want_kept,
        "tokens per expert against the reference router"
    );
}

/// `{data: 2, expert: 2}` and `{data: 4, expert: 1}` meshes of four devices against one device
/// with the same four groups. The expert gradients of a data row's replicas are summed by an
/// all-reduce over `data`, in another order than one device adds its rounds, so the losses agree
/// to f32 rounding, not bit for bit; routing is discrete and must agree exactly.
fn data_by_expert_meshes_follow_one_device(adapters: &Adapters) {
    let devices = adapters.mesh(4);
    let mesh = &devices[..4];
    let cfg = TransformerConfig {
        experts: 4,
        ..tiny(false, 2)
    };
    let p = TransformerParams::init(cfg).unwrap();
    let adam = AdamConfig::new(0.01);
    let (_runtime, client) = common::runtime_client(mesh, "test");
    let mut rng = Rng::new(12);
    let batches: Vec<_> = (0..5).map(|_| batch(&cfg, 8, &mut rng)).collect();
    let mut one = TransformerTrainer::new(&client, &Mesh::line(&mesh[..1]), &p, adam, 4).unwrap();
    let want: Vec<_> = batches
        .iter()
        .map(|(x, y)| one.step(x, y).unwrap())
        .collect();
    let want_params = one.params().unwrap();
    for data in [2, 4] {
        let grid = Mesh::new(mesh, &[("data", data), ("expert", 4 / data)]).unwrap();
        let mut t = TransformerTrainer::new(&client, &grid, &p, adam, 4).unwrap();
        for ((x, y), w) in batches.iter().zip(&want) {
            let got = t.step(x, y).unwrap();
            let rel = (got.loss - w.loss).abs() / w.loss;
            assert!(
                rel < 1e-5,
                "data {data}, step {}: {} vs {}",
                w.step,
                got.loss,
                w.loss
            );
            assert_eq!(got.tokens_per_expert, w.tokens_per_expert, "data {data}");
        }
        let got = t.params().unwrap();
        for (spec, (a, b)) in cfg
            .param_specs()
            .iter()
            .zip(got.tensors.iter().zip(&want_params.tensors))
        {
            let err = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
            assert!(
                err < 1e-3 * adam.lr,
                "data {data} {}: max |Δ| {err}",
                spec.name
            );
        }
        eprintln!("data {data} × expert {}: follows one device", 4 / data);
    }
    // Experts that a data row cannot split, a data axis that does not divide the devices, and
    // axes a trainer does not know.
    let odd = TransformerParams::init(TransformerConfig { experts: 3, ..cfg }).unwrap();
    let grid = Mesh::new(mesh, &[("data", 2), ("expert", 2)]).unwrap();
    assert!(TransformerTrainer::new(&client, &grid, &odd, adam, 4).is_err());
    assert!(Mesh::new(mesh, &[("data", 3), ("expert", 1)]).is_err());
    let stages = Mesh::new(mesh, &[("stage", 2), ("expert", 2)]).unwrap();
    let e = TransformerTrainer::new(&client, &stages, &p, adam, 4).unwrap_err();
    assert!(e.to_string().contains("stage"), "{e}");
}

/// Routing groups dealt unevenly (more to some devices than others, `GroupSplit`), on one axis
/// and on a `{data: 2, expert: 2}` mesh, against one device with the same groups: the same
/// routing, losses within rounding (the gradients add the groups in another order), and a
/// balanced split that keeps the trainer's groups.
fn uneven_splits_follow_one_device(adapters: &Adapters) {
    let devices = adapters.mesh(4);
    let mesh = &devices[..4];
    let cfg = TransformerConfig {
        experts: 4,
        ..tiny(false, 2)
    };
    let p = TransformerParams::init(cfg).unwrap();
    let adam = AdamConfig::new(0.01);
    let (_runtime, client) = common::runtime_client(mesh, "test");
    for (n, data, groups, counts) in [(2, 1, 4, vec![3, 1]), (4, 2, 8, vec![1, 3, 2, 2])] {
        let mut rng = Rng::new(13);
        let batches: Vec<_> = (0..4).map(|_| batch(&cfg, 8, &mut rng)).collect();
        let mut one =
            TransformerTrainer::new(&client, &Mesh::line(&mesh[..1]), &p, adam, groups).unwrap();
        let grid = Mesh::new(&mesh[..n], &[("data", data), ("expert", n / data)]).unwrap();
        let mut t = TransformerTrainer::new(&client, &grid, &p, adam, groups).unwrap();
        let balanced = t.balance(&batches[0].0, &batches[0].1).unwrap();
        assert_eq!(balanced.split.groups(), groups, "{balanced}");
        t.set_split(GroupSplit::from_counts(counts.clone()).unwrap())
            .unwrap();
        for (x, y) in &batches {
            let (w, got) = (one.step(x, y).unwrap(), t.step(x, y).unwrap());
            let rel = (got.loss - w.loss).abs() / w.loss;
            assert!(
                rel < 1e-5,
                "{counts:?}, step {}: {} vs {}",
                w.step,
                got.loss,
                w.loss
            );
            assert_eq!(got.tokens_per_expert, w.tokens_per_expert, "{counts:?}");
            assert_eq!(got.dropped_fraction, w.dropped_fraction, "{counts:?}");
        }
        let (x, y) = batch(&cfg, 8, &mut rng);
        let (a, b) = (
            one.token_nats(&x, &y).unwrap(),
            t.token_nats(&x, &y).unwrap(),
        );
        let err = a
            .iter()
            .zip(&b)
            .fold(0f64, |m, (x, y)| m.max((x - y).abs()));
        assert!(err < 1e-4, "{counts:?}: per-token nats differ by {err}");
        let (pa, pb) = (one.params().unwrap(), t.params().unwrap());
        for (spec, (a, b)) in cfg
            .param_specs()
            .iter()
            .zip(pa.tensors.iter().zip(&pb.tensors))
        {
            let err = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
            assert!(
                err < 1e-3 * adam.lr,
                "{counts:?} {}: max |Δ| {err}",
                spec.name
            );
        }
    }
}

fn bad_inputs_are_errors(device: &Device) {
    let (_runtime, client) = common::runtime_client(std::slice::from_ref(device), "test");
    let cfg = tiny(false, 1);
    let p = TransformerParams::init(cfg).unwrap();
    let adam = AdamConfig::new(0.01);
    let mut trainer = TransformerTrainer::new(
        &client,
        &Mesh::line(std::slice::from_ref(device)),
        &p,
        adam,
        2,
    )
    .unwrap();
    let mut rng = Rng::new(2);
    let (tokens, targets) = batch(&cfg, 4, &mut rng);
    // Not whole sequences, fewer targets, a byte id of 256, 3 sequences in 2 groups.
    let errors = [
        trainer.step(&tokens[..7], &targets[..7]).unwrap_err(),
        trainer.step(&tokens, &targets[..5]).unwrap_err(),
        trainer
            .step(&[vec![256], tokens[1..].to_vec()].concat(), &targets)
            .unwrap_err(),
        trainer.step(&tokens[..15], &targets[..15]).unwrap_err(),
    ];
    for e in errors {
        eprintln!("{e}");
    }
    assert_eq!(trainer.steps(), 0, "a refused batch is no step");
    // Groups that the devices do not divide, no devices, a wrong tensor.
    assert!(
        TransformerTrainer::new(
            &client,
            &Mesh::line(std::slice::from_ref(device)),
            &p,
            adam,
            0
        )
        .is_err()
    );
    let none: &[Device] = &[];
    assert!(TransformerTrainer::new(&client, &Mesh::line(none), &p, adam, 1).is_err());
    let mut short = p.clone();
    short.tensors[3].pop();
    assert!(
        TransformerTrainer::new(
            &client,
            &Mesh::line(std::slice::from_ref(device)),
            &short,
            adam,
            1
        )
        .is_err()
    );
}

fn bad_configs_are_errors() {
    let ok = tiny(false, 1);
    ok.validate().unwrap();
    for (what, cfg) in [
        (
            "heads that do not divide d",
            TransformerConfig { heads: 3, ..ok },
        ),
        (
            "a head wider than 128",
            TransformerConfig {
                model: 260,
                heads: 2,
                ..ok
            },
        ),
        ("no context", TransformerConfig { context: 0, ..ok }),
        ("top-3", TransformerConfig { top_k: 3, ..ok }),
        (
            "a NaN weight",
            TransformerConfig {
                aux_alpha: f32::NAN,
                ..ok
            },
        ),
        (
            "a huge table",
            TransformerConfig {
                context: 1 << 40,
                ..ok
            },
        ),
    ] {
        let e = cfg.validate().unwrap_err();
        eprintln!("{what}: {e}");
        assert!(TransformerParams::init(cfg).is_err(), "{what}");
    }
    // Names, order and the tied head.
    let names: Vec<String> = ok.param_specs().into_iter().map(|s| s.name).collect();
    assert_eq!(names[0], "tok_emb");
    assert_eq!(names.last().unwrap(), "head");
    assert!(names.contains(&"layers.1.moe.w1".to_string()));
    assert!(names.contains(&"layers.0.ffn.w1".to_string()));
    let tied = tiny(true, 1);
    assert_eq!(tied.param_specs().len(), names.len() - 1);
    assert_eq!(tied.head_index(), 0);
    assert_eq!(ok.expert_tensors().iter().filter(|&&e| e).count(), 2);
}

/// A small corpus of two documents of pseudo-text.
fn corpus() -> Corpus {
    let mut rng = Rng::new(17);
    let words = [
        "the ", "cat ", "sat ", "on ", "a ", "mat. ", "and ", "then ",
    ];
    let doc = |rng: &mut Rng| -> Vec<u8> {
        (0..600)
            .flat_map(|_| words[rng.below(words.len())].bytes())
            .collect()
    };
    Corpus::from_documents(vec![
        Document::new("toy", "a", doc(&mut rng)),
        Document::new("toy", "b", doc(&mut rng)),
    ])
}

/// Four steps straight, against two steps, a checkpoint, and two more steps from it on two
/// devices: the same losses, bit for bit, and the same parameters.
fn a_resumed_run_takes_the_same_steps(adapters: &Adapters) {
    let mesh = adapters.mesh(2);
    let (device, mesh) = (&mesh[0], &mesh[..2]);
    let (_runtime, client) = common::runtime_client(mesh, "test");
    let cfg = TransformerConfig {
        context: 12,
        ..tiny(false, 1)
    };
    let p = TransformerParams::init(cfg).unwrap();
    let adam = AdamConfig::new(0.01);
    let text = corpus();
    let path = common::scratch_path("transformer-resume.safetensors", device);
    let opts = |steps| TrainOptions {
        steps,
        batch: 4,
        lr: adam.lr,
        eval_units: 8,
        groups: Some(2),
        checkpoint: Some(path.clone()),
        checkpoint_every: 100,
        ..TrainOptions::default()
    };
    let one = std::slice::from_ref(device);
    let whole = train(&client, &Mesh::line(one), &text, &p, &opts(4), |_| {}).unwrap();
    let half = train(&client, &Mesh::line(one), &text, &p, &opts(2), |_| {}).unwrap();
    let saved = TransformerCheckpoint::load(&path).unwrap();
    assert_eq!(saved.train.as_ref().unwrap().step, 2);
    let resumed = TransformerTrainer::resume(&client, &Mesh::line(mesh), &saved).unwrap();
    // Onto a mesh whose rows hold one device each: data 2 × expert 1.
    let grid = Mesh::new(mesh, &[("data", 2), ("expert", 1)]).unwrap();
    let on_grid = TransformerTrainer::resume(&client, &grid, &saved).unwrap();
    assert_eq!(on_grid.steps(), 2);
    let (x, y) = batch(&cfg, 4, &mut Rng::new(1));
    assert_eq!(
        on_grid.token_nats(&x, &y).unwrap(),
        resumed.token_nats(&x, &y).unwrap(),
        "the same weights score the same on either layout"
    );
    assert_eq!(resumed.steps(), 2);
    let rest = resume(&client, &Mesh::line(mesh), &text, &saved, &opts(2), |_| {}).unwrap();
    let joined: Vec<f64> = half.losses.iter().chain(&rest.losses).copied().collect();
    assert_eq!(
        whole.losses.iter().map(|l| l.to_bits()).collect::<Vec<_>>(),
        joined.iter().map(|l| l.to_bits()).collect::<Vec<_>>(),
        "{:?} vs {joined:?}",
        whole.losses
    );
    assert_eq!(rest.last_step, 4);
    assert_eq!(whole.params, rest.params);
    assert!(whole.valid_bpb.is_finite() && whole.unigram_bpb.is_finite());
    let _ = std::fs::remove_file(&path);
}

fn files_round_trip_and_damage_is_an_error() {
    let cfg = tiny(false, 2);
    let p = params(cfg);
    let mut rng = Rng::new(4);
    let noise = |rng: &mut Rng, scale: f32| TransformerParams {
        config: cfg,
        tensors: p
            .tensors
            .iter()
            .map(|t| t.iter().map(|_| rng.unit() * scale).collect())
            .collect(),
    };
    let ck = TransformerCheckpoint {
        params: p.clone(),
        train: Some(TrainState {
            m: noise(&mut rng, 0.1),
            v: noise(&mut rng, 0.01),
            step: 7,
            adam: AdamConfig::new(0.02),
            groups: 2,
        }),
    };
    let bytes = ck.to_bytes().unwrap();
    assert_eq!(TransformerCheckpoint::from_bytes(&bytes).unwrap(), ck);
    let weights = ck.weights().to_bytes().unwrap();
    assert_eq!(
        TransformerCheckpoint::from_bytes(&weights).unwrap(),
        ck.weights()
    );
    // Every truncation, and flipped bytes anywhere, are errors, never panics.
    for cut in (0..bytes.len()).step_by(97) {
        assert!(
            TransformerCheckpoint::from_bytes(&bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    let header = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize + 8;
    for at in [header + 3, header + 1000, bytes.len() - 1] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x40;
        let e = TransformerCheckpoint::from_bytes(&bad).unwrap_err();
        assert!(e.to_string().contains("CRC-32"), "byte {at}: {e}");
    }
    // A flip in the header may leave it readable (a metadata value nothing reads): no panic,
    // and what loads is still checked whole.
    for at in (8..header).step_by(7) {
        let mut bad = bytes.clone();
        bad[at] ^= 0x40;
        if let Ok(c) = TransformerCheckpoint::from_bytes(&bad) {
            c.check().unwrap();
        }
    }
    // Weights that do not fit the config are refused, and a foreign file needs a config.
    let other = TransformerConfig { hidden: 13, ..cfg };
    let e = TransformerCheckpoint::from_bytes_with(&weights, Some(other)).unwrap_err();
    eprintln!("{e}");
    let plain = safetensors::serialize(
        vec![(
            "tok_emb",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1], &[0u8; 4][..])
                .unwrap(),
        )],
        None,
    )
    .unwrap();
    let e = TransformerCheckpoint::from_bytes(&plain).unwrap_err();
    assert!(e.to_string().contains("gangway.config"), "{e}");
    // Negative second moments are refused on save.
    let mut neg = ck.clone();
    neg.train.as_mut().unwrap().v.tensors[0][0] = -1.0;
    assert!(neg.to_bytes().is_err());
}

/// Export, import, and the same logits on the host and the same losses on the GPU.
fn exported_weights_give_the_same_logits(device: &Device) {
    let cfg = tiny(true, 2);
    let p = params(cfg);
    let ck = TransformerCheckpoint {
        params: p.clone(),
        train: None,
    };
    let path = common::scratch_path("transformer-export.safetensors", device);
    ck.save(&path).unwrap();
    let back = TransformerCheckpoint::load(&path).unwrap();
    let ids: Vec<u32> = (0..cfg.context as u32).map(|i| i * 37 % 256).collect();
    assert_eq!(
        logits(&p, &ids).unwrap(),
        logits(&back.params, &ids).unwrap()
    );
    let (_runtime, client) = common::runtime_client(std::slice::from_ref(device), "test");
    let adam = AdamConfig::new(0.01);
    let one = std::slice::from_ref(device);
    let mut rng = Rng::new(8);
    let (tokens, targets) = batch(&cfg, 2, &mut rng);
    let a = TransformerTrainer::new(&client, &Mesh::line(one), &p, adam, 1).unwrap();
    let b = TransformerTrainer::new(&client, &Mesh::line(one), &back.params, adam, 1).unwrap();
    assert_eq!(
        a.token_nats(&tokens, &targets).unwrap(),
        b.token_nats(&tokens, &targets).unwrap()
    );
    // The host's logits of one sequence give the GPU's per-token losses.
    let one_seq = &tokens[..cfg.context];
    let host = logits(&p, one_seq).unwrap();
    let gpu = a.token_nats(one_seq, &targets[..cfg.context]).unwrap();
    for (t, row) in host.chunks_exact(VOCAB).enumerate() {
        let want = common::cross_entropy(row, targets[t] as usize);
        assert!(
            (gpu[t] - want).abs() < 1e-4 * want.abs().max(1.0),
            "token {t}"
        );
    }
    let _ = std::fs::remove_file(&path);
}

fn moe_vs_dense_compares_equal_active_parameters(device: &Device) {
    use gangway::transformer::compare::{CompareOptions, active_parameters, moe_vs_dense};
    let (_runtime, client) = common::runtime_client(std::slice::from_ref(device), "test");
    let opts = CompareOptions {
        moe: TransformerConfig {
            context: 12,
            experts: 4,
            top_k: 2,
            ..tiny(false, 2)
        },
        capacities: vec![1.0, 2.0],
        seeds: 2,
        run: TrainOptions {
            steps: 2,
            batch: 4,
            eval_units: 8,
            ..TrainOptions::default()
        },
        lr: 0.01,
    };
    let mut runs = 0;
    let table = moe_vs_dense(
        &client,
        &Mesh::line(std::slice::from_ref(device)),
        &corpus(),
        &opts,
        &mut |_, _, bpb| {
            assert!(bpb.is_finite());
            runs += 1;
        },
    )
    .unwrap();
    assert_eq!(runs, 6);
    let [dense, low, high] = &table.rows[..] else {
        panic!("three models: {:?}", table.rows);
    };
    // Equal active parameters but for the routers' d·E.
    let routers = opts.moe.moe_layers() * opts.moe.model * opts.moe.experts;
    assert_eq!(low.active_parameters, dense.active_parameters + routers);
    assert_eq!(low.active_parameters, active_parameters(&low.config));
    assert!(low.parameters > dense.parameters);
    assert_eq!(low.config.expert_width(), opts.moe.hidden / 2);
    assert_eq!(dense.dropped, [0.0, 0.0]);
    // More capacity drops fewer choices.
    let mean = |r: &[f64]| r.iter().sum::<f64>() / r.len() as f64;
    assert!(
        mean(&high.dropped) <= mean(&low.dropped),
        "{:?} vs {:?}",
        high.dropped,
        low.dropped
    );
    for r in &table.rows {
        assert_eq!(r.valid_bpb.len(), 2);
        assert!(r.bpb.std >= 0.0 && r.speed.mean > 0.0);
    }
    let md = table.markdown();
    eprintln!("{md}");
    let rows = md
        .lines()
        .filter(|l| l.starts_with("| ") && l.matches(" ± ").count() == 2);
    assert_eq!(rows.count(), 3, "{md}");
    assert!(md.contains("capacity 2.0"), "{md}");
    serde_json::to_string(&table).unwrap();
    let none = CompareOptions {
        seeds: 0,
        ..opts.clone()
    };
    assert!(
        moe_vs_dense(
            &client,
            &Mesh::line(std::slice::from_ref(device)),
            &corpus(),
            &none,
            &mut |_, _, _| {}
        )
        .is_err()
    );
}

fn btm_with_transformer_elms_scores_every_domain(adapters: &Adapters) {
    use gangway::btm::EnsembleOptions;
    use gangway::btm::experiment::{BtmOptions, evaluate, train_all};
    let mesh = adapters.mesh(2);
    let mesh = &mesh[..2];
    let (runtime, client) = common::runtime_client(mesh, "test");
    // Two domains that differ: words, and digits.
    let mut rng = Rng::new(3);
    let mut docs = corpus().documents().to_vec();
    for name in ["x", "y"] {
        let digits: Vec<u8> = (0..2000).map(|_| b'0' + rng.below(10) as u8).collect();
        docs.push(Document::new("digits", name, digits));
    }
    let text = Corpus::from_documents(docs);
    let config = TransformerConfig {
        context: 12,
        moe_every: 0,
        ..tiny(false, 1)
    };
    let opts = BtmOptions {
        seed_steps: 2,
        branch_steps: 3,
        train: TrainOptions {
            batch: 2,
            eval_units: 4,
            ..TrainOptions::default()
        },
        eval_windows_per_doc: 3,
        ensemble: EnsembleOptions::default(),
        split_seed: 7,
    };
    let dir = common::scratch_path("transformer-btm", &mesh[0]);
    let phases = std::sync::Mutex::new(Vec::new());
    let init = TransformerParams::init(config).unwrap();
    let models = train_all(
        &runtime,
        &Mesh::line(mesh),
        &text,
        &init,
        &opts,
        &dir,
        |p, i, _| phases.lock().unwrap().push(format!("{p} {i}")),
    )
    .unwrap();
    let scores = evaluate(&client, &mesh[0], &text, &models, &opts).unwrap();
    let mut domains: Vec<&str> = scores.iter().map(|r| r.domain.as_str()).collect();
    domains.sort_unstable();
    assert_eq!(domains, ["digits", "toy"]);
    for r in &scores {
        for v in [
            r.dense,
            r.own_elm,
            r.ensemble,
            r.averaged,
            r.random_split_ensemble,
        ] {
            assert!(v.is_finite() && v > 0.0, "{r:?}");
        }
        // Two documents of up to 3 sequences each (the validation parts are short).
        assert!(r.windows > 0 && r.windows <= 2 * 3, "{r:?}");
    }
    let phases = phases.into_inner().unwrap();
    assert!(phases.contains(&"random 1".to_string()), "{phases:?}");
    // One domain is no comparison.
    let one = Corpus::from_documents(corpus().documents().to_vec());
    assert!(
        train_all(
            &runtime,
            &Mesh::line(mesh),
            &one,
            &init,
            &opts,
            &dir,
            |_, _, _| {}
        )
        .is_err()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
