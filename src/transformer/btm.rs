//! Branch-Train-Merge with Transformer expert LMs (`gangway eval btm --arch transformer`), the
//! paper's comparison at small scale, in one run:
//!
//! 1. a *seed* Transformer trained on every domain for `seed_steps`;
//! 2. one ELM per domain, a copy of the seed trained `branch_steps` on its domain alone, on its
//!    own device with no traffic between ELMs (ELM `i` on device `i mod n`; the branches train
//!    one after another here, where `train btm` steps them together);
//! 3. the same for a *random* split of the documents into as many parts;
//! 4. one dense Transformer trained from scratch for the same total steps (`seed + k·branch`).
//!
//! Each domain's validation split is then scored token by token, in sequences of `T` bytes, `T`
//! apart, by the dense model, the domain's own ELM, the ensemble of the domain ELMs and the
//! ensemble of the random-split ELMs. The ensemble is [`crate::btm::ensemble_bits_per_byte`]'s:
//! the domain posterior from each ELM's likelihood of the document's last `history` tokens,
//! with a cached prior. The models are dense Transformers (`moe_every = 0`), as the paper's are.

use super::training_run::{LmOptions, shifted_targets, train};
use super::{TransformerConfig, TransformerParams, TransformerTrainer};
use crate::btm::{EnsembleOptions, ensemble_bits_per_byte};
use crate::data::{Corpus, bits_per_byte};
use crate::device::{DeviceList, MeshDevice};
use crate::kernels::optim::AdamConfig;
use crate::sched::Runtime;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// How much to train and score.
#[derive(Debug, Clone)]
pub struct LmBtmOptions {
    pub config: TransformerConfig,
    pub seed_steps: u32,
    pub branch_steps: u32,
    /// Batch, validation split and evaluation sizes for every phase (its steps are set per
    /// phase).
    pub run: LmOptions,
    pub lr: f32,
    /// Validation sequences scored per document, from its start.
    pub eval_sequences_per_doc: usize,
    pub ensemble: EnsembleOptions,
    /// Seeds the random split.
    pub split_seed: u64,
}

impl LmBtmOptions {
    /// [`TransformerConfig::small`] without experts, 100 seed steps and 200 per branch of 8
    /// sequences: about a quarter of an hour on a 2-core machine with a software adapter.
    pub fn standard() -> Self {
        Self {
            config: TransformerConfig {
                moe_every: 0,
                ..TransformerConfig::small()
            },
            seed_steps: 100,
            branch_steps: 200,
            run: LmOptions {
                batch: 8,
                eval_sequences: 32,
                ..LmOptions::default()
            },
            lr: 3e-3,
            eval_sequences_per_doc: 16,
            ensemble: EnsembleOptions {
                history: 32,
                prior_windows: 256,
            },
            split_seed: 7,
        }
    }
}

/// One domain's validation bits per byte.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LmBtmRow {
    pub domain: String,
    /// Tokens scored.
    pub tokens: usize,
    pub dense: f64,
    pub own_elm: f64,
    pub ensemble: f64,
    pub random_ensemble: f64,
}

/// The comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LmBtmTable {
    pub config: TransformerConfig,
    pub seed_steps: u32,
    pub branch_steps: u32,
    pub dense_steps: u32,
    pub rows: Vec<LmBtmRow>,
}

impl LmBtmTable {
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "| domain | dense, same {} steps | own ELM | BTM ensemble | BTM on a random split |\n\
             | --- | --- | --- | --- | --- |\n",
            self.dense_steps
        );
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
                r.domain, r.dense, r.own_elm, r.ensemble, r.random_ensemble
            ));
        }
        out
    }
}

/// Trains `params` for `steps` on `corpus` on `device`: the trained parameters.
fn trained(
    runtime: &Runtime,
    device: &MeshDevice,
    params: &TransformerParams,
    corpus: &Corpus,
    steps: u32,
    opts: &LmBtmOptions,
) -> Result<TransformerParams> {
    let client = runtime.client("btm lm", 1);
    let one = std::slice::from_ref(device);
    let mut trainer = TransformerTrainer::new(&client, one, params, AdamConfig::new(opts.lr), 1)?;
    let run = LmOptions {
        steps,
        checkpoint: None,
        ..opts.run.clone()
    };
    train(&mut trainer, corpus, &run, &mut |_, _| {})?;
    trainer.params()
}

/// Per validation corpus, the nats of every token `params` scores (per document, its first
/// `per_doc` sequences of `T`, `T` apart) and the document of each, in document order: one
/// trainer (one compiled program) for all of them.
fn token_nats(
    runtime: &Runtime,
    device: &MeshDevice,
    params: &TransformerParams,
    valid: &[Corpus],
    opts: &LmBtmOptions,
) -> Result<Vec<(Vec<f64>, Vec<usize>)>> {
    let t = params.config.context;
    let client = runtime.client("btm lm eval", 1);
    let one = std::slice::from_ref(device);
    let trainer = TransformerTrainer::new(&client, one, params, AdamConfig::new(opts.lr), 1)?;
    let score = |corpus: &Corpus| -> Result<(Vec<f64>, Vec<usize>)> {
        let (mut nats, mut docs) = (Vec::new(), Vec::new());
        for (i, doc) in corpus.documents().iter().enumerate() {
            let one_doc = Corpus::from_documents(vec![doc.clone()]);
            let Ok(windows) = one_doc.windows(t, t) else {
                continue; // shorter than a sequence
            };
            let seqs: Vec<_> = windows.take(opts.eval_sequences_per_doc).collect();
            for chunk in seqs.chunks(opts.run.batch.max(1)) {
                let tokens: Vec<u32> = chunk.iter().flat_map(|(w, _)| w.iter().copied()).collect();
                let next: Vec<u32> = chunk.iter().map(|(_, y)| *y).collect();
                let got = trainer.token_nats(&tokens, &shifted_targets(&tokens, &next, t))?;
                docs.extend(std::iter::repeat_n(i, got.len()));
                nats.extend(got);
            }
        }
        if nats.is_empty() {
            return Err(Error::InvalidArgument {
                what: "BTM evaluation",
                reason: format!("no validation document is longer than {t} bytes"),
            });
        }
        Ok((nats, docs))
    };
    valid.iter().map(score).collect()
}

fn mean_bpb(nats: &[f64]) -> f64 {
    bits_per_byte(nats.iter().sum::<f64>() / nats.len().max(1) as f64)
}

/// Runs the whole comparison on `devices` of `runtime`, reporting each phase through
/// `progress(phase, index)`.
pub fn run(
    runtime: &Runtime,
    devices: &(impl DeviceList + ?Sized),
    corpus: &Corpus,
    opts: &LmBtmOptions,
    progress: &mut dyn FnMut(&str, usize),
) -> Result<LmBtmTable> {
    let devices = devices.mesh_devices();
    let first = devices.first().ok_or_else(|| Error::InvalidArgument {
        what: "BTM",
        reason: "no devices".into(),
    })?;
    let domains = corpus.by_domain();
    let k = domains.len();
    if k < 2 {
        return Err(Error::InvalidArgument {
            what: "BTM",
            reason: format!("needs at least 2 domains, the corpus has {k}"),
        });
    }
    let init = TransformerParams::init(opts.config)?;
    progress("seed", 0);
    let seed = trained(runtime, first, &init, corpus, opts.seed_steps, opts)?;
    let random = corpus.random_split(k, opts.split_seed)?;
    let mut elms = Vec::with_capacity(k);
    let mut random_elms = Vec::with_capacity(k);
    for (i, ((_, part), random_part)) in domains.iter().zip(&random).enumerate() {
        let device = &devices[i % devices.len()];
        progress("branch", i);
        elms.push(trained(
            runtime,
            device,
            &seed,
            part,
            opts.branch_steps,
            opts,
        )?);
        progress("random branch", i);
        random_elms.push(trained(
            runtime,
            device,
            &seed,
            random_part,
            opts.branch_steps,
            opts,
        )?);
    }
    let dense_steps = opts.seed_steps + opts.branch_steps * k as u32;
    progress("dense", 0);
    let dense = trained(runtime, first, &init, corpus, dense_steps, opts)?;
    progress("evaluate", 0);
    let valid = domains
        .iter()
        .map(|(_, part)| Ok(part.split(opts.run.valid_fraction)?.valid))
        .collect::<Result<Vec<_>>>()?;
    // Every model scores every domain: [model][domain] → (nats, documents).
    let score = |p: &TransformerParams| token_nats(runtime, first, p, &valid, opts);
    let dense_scores = score(&dense)?;
    let elm_scores = elms.iter().map(score).collect::<Result<Vec<_>>>()?;
    let random_scores = random_elms.iter().map(score).collect::<Result<Vec<_>>>()?;
    let mut rows = Vec::with_capacity(k);
    for (i, (domain, _)) in domains.iter().enumerate() {
        let (dense_nats, docs) = &dense_scores[i];
        let of = |scores: &[Vec<(Vec<f64>, Vec<usize>)>]| -> Vec<Vec<f64>> {
            scores.iter().map(|m| m[i].0.clone()).collect()
        };
        let (elm_nats, random_nats) = (of(&elm_scores), of(&random_scores));
        let (ensemble, _) = ensemble_bits_per_byte(&elm_nats, docs, opts.ensemble)?;
        let (random_ensemble, _) = ensemble_bits_per_byte(&random_nats, docs, opts.ensemble)?;
        rows.push(LmBtmRow {
            domain: domain.clone(),
            tokens: docs.len(),
            dense: mean_bpb(dense_nats),
            own_elm: mean_bpb(&elm_nats[i]),
            ensemble,
            random_ensemble,
        });
    }
    Ok(LmBtmTable {
        config: opts.config,
        seed_steps: opts.seed_steps,
        branch_steps: opts.branch_steps,
        dense_steps,
        rows,
    })
}
