//! A new model is a `StepModel` and nothing else: the dense MLP LM of `src/mlp_lm.rs` trains
//! through the one `Trainer`, on each adapter. Its first loss is its plain-Rust reference's, its
//! gradients are the reference loss's finite differences, two devices follow one device, training
//! lowers the loss, and a checkpoint resumes where it stopped.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Adapters, case};
use gangway::kernels::optim::AdamConfig;
use gangway::mlp_lm::{MlpLmConfig, MlpLmParams, VOCAB, reference_loss};
use gangway::train::{Checkpoint, Trainer};
use gangway::{Device, Rng};

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(device: it_matches_its_reference_and_finite_differences),
        case!(adapters: it_trains_on_two_devices_as_on_one_and_resumes),
    ])
}

/// Sizes that are not multiples of any tile.
fn config() -> MlpLmConfig {
    MlpLmConfig {
        context: 3,
        embed: 5,
        hidden: 13,
        seed: 4,
    }
}

fn batch(cfg: &MlpLmConfig, tokens: usize, rng: &mut Rng) -> (Vec<u32>, Vec<u32>) {
    // A learnable rule: the next byte is the sum of the context, mod 17.
    let ctx: Vec<u32> = (0..tokens * cfg.context)
        .map(|_| rng.below(17) as u32)
        .collect();
    let tgt = ctx
        .chunks(cfg.context)
        .map(|w| w.iter().sum::<u32>() % 17)
        .collect();
    (ctx, tgt)
}

fn it_matches_its_reference_and_finite_differences(device: &Device) {
    let cfg = config();
    let params = MlpLmParams::init(cfg).unwrap();
    let mut rng = Rng::new(1);
    let (ctx, tgt) = batch(&cfg, 22, &mut rng);
    let one = std::slice::from_ref(device);
    let (_runtime, client) = common::runtime_client(one, "test");
    let adam = AdamConfig::new(0.01);
    for groups in [1, 2] {
        let trainer =
            Trainer::new(&client, &gangway::Mesh::line(one), &params, adam, groups).unwrap();
        let want = reference_loss(&params, &ctx, &tgt).unwrap();
        let got = trainer.eval(&ctx, &tgt).unwrap();
        assert!(
            (got - want).abs() < 1e-5 * want,
            "G={groups}: {got} vs {want}"
        );
        let grads = trainer.grads(&ctx, &tgt).unwrap();
        // Central differences of the f64 reference at a few coordinates of every tensor.
        for (p, spec) in cfg_specs(&cfg).iter().enumerate() {
            for k in [0, spec.1 / 3, spec.1 - 1] {
                let h = 1e-3f32;
                let at = |delta: f32| {
                    let mut q = params.clone();
                    q.tensors[p][k] += delta;
                    reference_loss(&q, &ctx, &tgt).unwrap()
                };
                let fd = (at(h) - at(-h)) / f64::from(2.0 * h);
                let g = f64::from(grads.tensors[p][k]);
                assert!(
                    (g - fd).abs() < 2e-3 + 2e-2 * fd.abs(),
                    "G={groups} {}[{k}]: gradient {g}, finite difference {fd}",
                    spec.0
                );
            }
        }
    }
    let bad = vec![VOCAB as u32; cfg.context];
    let trainer = Trainer::new(&client, &gangway::Mesh::line(one), &params, adam, 1).unwrap();
    assert!(trainer.eval(&bad, &[0]).is_err());
    assert!(trainer.eval(&ctx[1..], &tgt).is_err());
}

fn cfg_specs(cfg: &MlpLmConfig) -> Vec<(String, usize)> {
    use gangway::train::StepModel;
    cfg.param_specs()
        .into_iter()
        .map(|s| {
            let n = s.len();
            (s.name, n)
        })
        .collect()
}

fn it_trains_on_two_devices_as_on_one_and_resumes(adapters: &Adapters) {
    let devices = adapters.mesh(2);
    let pair = &devices[..2];
    let cfg = config();
    let params = MlpLmParams::init(cfg).unwrap();
    let adam = AdamConfig::new(0.02);
    let (_runtime, client) = common::runtime_client(pair, "test");
    let mut one =
        Trainer::new(&client, &gangway::Mesh::line(&pair[..1]), &params, adam, 2).unwrap();
    let mut two = Trainer::new(&client, &gangway::Mesh::line(pair), &params, adam, 2).unwrap();
    let mut rng = Rng::new(3);
    let batches: Vec<_> = (0..12).map(|_| batch(&cfg, 32, &mut rng)).collect();
    let mut losses = Vec::new();
    for (i, (c, t)) in batches.iter().enumerate() {
        let a = one.step(c, t).unwrap();
        let b = two.step(c, t).unwrap();
        assert!(
            (a.loss - b.loss).abs() < 1e-5 * a.loss,
            "step {i}: {} vs {}",
            a.loss,
            b.loss
        );
        assert!(a.tokens_per_expert.is_empty() && a.dropped_fraction == 0.0);
        losses.push(a.loss);
    }
    let (first, last) = (losses[0], losses[losses.len() - 1]);
    assert!(last < 0.9 * first, "training lowers the loss: {losses:?}");

    // A checkpoint taken after 6 steps resumes on the pair and takes the same steps.
    let mut straight = Trainer::new(&client, &gangway::Mesh::line(pair), &params, adam, 2).unwrap();
    let want: Vec<f64> = batches
        .iter()
        .map(|(c, t)| straight.step(c, t).unwrap().loss)
        .collect();
    let mut first_half =
        Trainer::new(&client, &gangway::Mesh::line(pair), &params, adam, 2).unwrap();
    for (c, t) in &batches[..6] {
        first_half.step(c, t).unwrap();
    }
    let bytes = first_half.checkpoint().unwrap().to_bytes().unwrap();
    let loaded = Checkpoint::<MlpLmConfig>::from_bytes(&bytes).unwrap();
    let mut resumed = Trainer::resume(&client, &gangway::Mesh::line(pair), &loaded).unwrap();
    for (i, (c, t)) in batches[6..].iter().enumerate() {
        assert_eq!(
            resumed.step(c, t).unwrap().loss,
            want[6 + i],
            "step {}",
            7 + i
        );
    }
    // Another model's file is refused by name.
    let e = Checkpoint::<gangway::moe::MoeLmConfig>::from_bytes(&bytes)
        .unwrap_err()
        .to_string();
    assert!(e.contains("mlp-lm"), "{e}");
}
