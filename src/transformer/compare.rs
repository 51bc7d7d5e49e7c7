//! The Switch-vs-T5 comparison at small scale (`gangway eval moe-vs-dense`): the Transformer with
//! every other FFN an expert layer (`E` experts, top-`K`, each expert `d_ff/K` wide) against the
//! dense Transformer whose FFNs are all `d_ff` wide, so both touch the same parameters per token
//! (equal *active* parameters, the router's `d·E` aside), trained for the same steps on the same batches, each over several
//! seeds; the MoE model at each capacity factor asked for. Every run reports validation bits per
//! byte, tokens per second and the dropped fraction of routing choices; the table gives each
//! model's mean ± sample standard deviation over the seeds.

use super::{TransformerConfig, TransformerParams};
use crate::Mesh;
use crate::data::Corpus;
use crate::kernels::optim::AdamConfig;
use crate::sched::Client;
use crate::train::{TrainOptions, train};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// What to compare.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// The MoE model (its experts `hidden / top_k` wide); its dense twin has `moe_every = 0`.
    pub moe: TransformerConfig,
    /// Capacity factors the MoE model runs at.
    pub capacities: Vec<f32>,
    /// Seeds per model (each seeds the parameters and the batches).
    pub seeds: u64,
    pub run: TrainOptions,
    pub lr: f32,
}

impl CompareOptions {
    /// Sizes for about 10 minutes on a 2-core machine with a software adapter: 2 layers of 64,
    /// 4 heads, T = 64, FFNs of 256, the MoE layer 8 experts of 128 (top-2),
    /// 300 steps of 8 sequences, 3 seeds, capacity factors 1.0, 1.25, 2.0 and 4.0 (E/K:
    /// dropless).
    pub fn standard() -> Self {
        Self {
            moe: TransformerConfig {
                experts: 8,
                top_k: 2,
                ..TransformerConfig::small()
            },
            capacities: vec![1.0, 1.25, 2.0, 4.0],
            seeds: 3,
            run: TrainOptions {
                steps: 300,
                batch: 8,
                eval_units: 128,
                ..TrainOptions::default()
            },
            lr: 3e-3,
        }
    }
}

/// Mean and sample standard deviation (0 for one value).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub mean: f64,
    pub std: f64,
}

impl Spread {
    pub fn of(xs: &[f64]) -> Self {
        let n = xs.len().max(1) as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = if xs.len() > 1 {
            xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        Self {
            mean,
            std: var.sqrt(),
        }
    }
}

/// One model's runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelRow {
    pub name: String,
    pub config: TransformerConfig,
    pub parameters: usize,
    /// Parameters one token's forward touches (the `K` of `E` experts of each expert layer).
    pub active_parameters: usize,
    /// Per seed.
    pub valid_bpb: Vec<f64>,
    pub tokens_per_s: Vec<f64>,
    /// Mean dropped fraction over each run's steps.
    pub dropped: Vec<f64>,
    pub bpb: Spread,
    pub speed: Spread,
}

/// The comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    pub steps: u32,
    pub batch: usize,
    pub seeds: u64,
    pub unigram_bpb: f64,
    pub rows: Vec<ModelRow>,
}

/// Parameters one token touches: all but the `E − K` experts it skips in each expert layer.
pub fn active_parameters(cfg: &TransformerConfig) -> usize {
    cfg.param_specs()
        .iter()
        .map(|s| {
            if s.name.contains(".moe.w") {
                s.len() / cfg.experts * cfg.top_k
            } else {
                s.len()
            }
        })
        .sum()
}

/// Runs every model over every seed on `mesh` (one after another, seed by seed), reporting
/// each run as it ends through `progress(model, seed, valid_bpb)`.
pub fn moe_vs_dense(
    client: &Client,
    mesh: &Mesh,
    corpus: &Corpus,
    opts: &CompareOptions,
    progress: &mut dyn FnMut(&str, u64, f64),
) -> Result<Comparison> {
    if opts.seeds == 0 || opts.capacities.is_empty() {
        return Err(Error::InvalidArgument {
            what: "moe vs dense",
            reason: "needs at least one seed and one capacity factor".into(),
        });
    }
    let moe = TransformerConfig {
        expert_hidden: opts.moe.hidden / opts.moe.top_k.max(1),
        ..opts.moe
    };
    if moe.moe_layers() == 0 {
        return Err(Error::InvalidArgument {
            what: "moe vs dense",
            reason: "the MoE model has no expert layer (moe_every = 0)".into(),
        });
    }
    let dense = TransformerConfig {
        moe_every: 0,
        expert_hidden: 0,
        ..moe
    };
    let mut models = vec![(format!("dense d_ff={}", dense.hidden), dense)];
    for &c in &opts.capacities {
        let cfg = TransformerConfig {
            capacity_factor: c,
            ..moe
        };
        cfg.validate()?;
        // At E/K or more every expert's slots hold a whole group: nothing can be dropped.
        let dropless = c * moe.top_k as f32 >= moe.experts as f32;
        models.push((
            format!(
                "MoE E={} top-{} d_e={} capacity {c:?}{}",
                moe.experts,
                moe.top_k,
                moe.expert_width(),
                if dropless { " (dropless)" } else { "" }
            ),
            cfg,
        ));
    }
    let groups = mesh.len();
    let mut unigram_bpb = f64::NAN;
    // Seed by seed, every model in turn: a slow spell of a noisy machine then lands on every
    // model's runs alike, not on one model's row.
    type Runs = (Vec<f64>, Vec<f64>, Vec<f64>);
    let mut runs: Vec<Runs> = vec![Default::default(); models.len()];
    for seed in 0..opts.seeds {
        for ((name, cfg), (valid_bpb, tokens_per_s, dropped)) in models.iter().zip(&mut runs) {
            let cfg = TransformerConfig { seed, ..*cfg };
            let params = TransformerParams::init(cfg)?;
            let adam = AdamConfig::new(opts.lr);
            let run = TrainOptions {
                data_seed: seed + 1,
                checkpoint: None,
                lr: adam.lr,
                groups: Some(groups),
                ..opts.run.clone()
            };
            let report = train(client, mesh, corpus, &params, &run, |_| {})?;
            unigram_bpb = report.unigram_bpb;
            let d = &report.dropped_fractions;
            dropped.push(d.iter().sum::<f64>() / d.len().max(1) as f64);
            valid_bpb.push(report.valid_bpb);
            tokens_per_s.push(report.tokens_per_s);
            progress(name, seed, report.valid_bpb);
        }
    }
    let rows = models
        .into_iter()
        .zip(runs)
        .map(
            |((name, cfg), (valid_bpb, tokens_per_s, dropped))| ModelRow {
                name,
                config: cfg,
                parameters: cfg.param_specs().iter().map(|s| s.len()).sum(),
                active_parameters: active_parameters(&cfg),
                bpb: Spread::of(&valid_bpb),
                speed: Spread::of(&tokens_per_s),
                valid_bpb,
                tokens_per_s,
                dropped,
            },
        )
        .collect();
    Ok(Comparison {
        steps: opts.run.steps,
        batch: opts.run.batch,
        seeds: opts.seeds,
        unigram_bpb,
        rows,
    })
}

impl Comparison {
    /// The table in Markdown, each model against the dense one.
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| model | parameters | active | valid bits/byte | tokens/s | vs dense speed | dropped |\n\
             | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        let dense = self.rows.first().map_or(f64::NAN, |r| r.speed.mean);
        for r in &self.rows {
            let dropped = r.dropped.iter().sum::<f64>() / r.dropped.len().max(1) as f64;
            out.push_str(&format!(
                "| {} | {} | {} | {:.3} ± {:.3} | {:.0} ± {:.0} | {:.2}× | {:.1}% |\n",
                r.name,
                r.parameters,
                r.active_parameters,
                r.bpb.mean,
                r.bpb.std,
                r.speed.mean,
                r.speed.std,
                r.speed.mean / dense,
                dropped * 100.0
            ));
        }
        out.push_str(&format!(
            "\n{} steps of {} sequences, mean ± sample standard deviation over {} seeds; unigram \
             byte model: {:.3} bits/byte\n",
            self.steps, self.batch, self.seeds, self.unigram_bpb
        ));
        out
    }
}
