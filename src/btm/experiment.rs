//! The whole Branch-Train-Merge comparison: train (seed, domain ELMs, random-split ELMs, and a
//! dense model with the same total steps), save every model, and evaluate them per domain.

use super::{
    Elm, EnsembleOptions, average, branch, ensemble_bits_per_byte, save_elms, validation_windows,
    window_nats,
};
use crate::Mesh;
use crate::data::{Corpus, bits_per_byte};
use crate::sched::{Client, Runtime};
use crate::train::{Params, StepModel, TrainOptions, train};
use crate::{Device, Error, Result};
use serde::Serialize;
use std::path::Path;

/// How much to train.
#[derive(Debug, Clone)]
pub struct BtmOptions {
    pub seed_steps: u32,
    pub branch_steps: u32,
    /// Everything else (batch, learning rate, validation split) for every phase.
    pub train: TrainOptions,
    /// Validation windows scored per document, from its start ([`validation_windows`]).
    pub eval_windows_per_doc: usize,
    pub ensemble: EnsembleOptions,
    /// Seeds the random split of the documents.
    pub split_seed: u64,
}

/// Every model of one BTM comparison.
#[derive(Debug, Clone)]
pub struct BtmModels<M: StepModel> {
    pub seed: Params<M>,
    pub elms: Vec<Elm<M>>,
    pub random_elms: Vec<Elm<M>>,
    pub dense: Params<M>,
    /// Wall time of the domain branch phase.
    pub branch_seconds: f64,
}

/// `domains` as `(name, corpus)`, in name order.
pub fn domains_of(corpus: &Corpus) -> Vec<(String, Corpus)> {
    corpus.by_domain()
}

fn with_steps(opts: &TrainOptions, steps: u32) -> TrainOptions {
    TrainOptions {
        steps,
        checkpoint: None,
        ..opts.clone()
    }
}

/// Seed, branch (by domain and by random split) and the dense baseline, on `devices` of
/// `runtime`'s mesh; saves them under `dir`. In a job of several ranks every rank calls it: the
/// seed and the dense model train on the first device (its rank computes, the others get the
/// results), each rank trains the ELMs of its own devices, and rank 0 saves.
pub fn train_all<M: StepModel>(
    runtime: &Runtime,
    mesh: &Mesh,
    corpus: &Corpus,
    init: &Params<M>,
    opts: &BtmOptions,
    dir: &Path,
    progress: impl Fn(&str, usize, u32) + Sync,
) -> Result<BtmModels<M>> {
    let first = mesh.first().ok_or_else(|| Error::InvalidArgument {
        what: "BTM",
        reason: "no devices".into(),
    })?;
    let domains = domains_of(corpus);
    let k = domains.len();
    if k < 2 {
        return Err(Error::InvalidArgument {
            what: "BTM",
            reason: format!("needs at least 2 domains, the corpus has {k}"),
        });
    }
    let one = &Mesh::line(std::slice::from_ref(first));
    let client = runtime.client("btm seed and dense", 1);
    let seed = train(
        &client,
        one,
        corpus,
        init,
        &with_steps(&opts.train, opts.seed_steps),
        |p| progress("seed", 0, p.stats.step),
    )?
    .params;
    let branch_opts = with_steps(&opts.train, opts.branch_steps);
    let start = std::time::Instant::now();
    let elms = branch(runtime, mesh, &domains, &seed, &branch_opts, |i, s| {
        progress("branch", i, s)
    })?;
    let branch_seconds = start.elapsed().as_secs_f64();
    let random: Vec<(String, Corpus)> = corpus
        .random_split(k, opts.split_seed)?
        .into_iter()
        .enumerate()
        .map(|(i, c)| (format!("random{i}"), c))
        .collect();
    let random_elms = branch(runtime, mesh, &random, &seed, &branch_opts, |i, s| {
        progress("random", i, s)
    })?;
    let total = opts.seed_steps + opts.branch_steps * k as u32;
    let dense = train(
        &client,
        one,
        corpus,
        init,
        &with_steps(&opts.train, total),
        |p| progress("dense", 0, p.stats.step),
    )?
    .params;
    if runtime.job().is_root() {
        save_elms(dir, &elms)?;
        save_elms(dir, &random_elms)?;
        seed.save(&dir.join("seed.ckpt"))?;
        dense.save(&dir.join("dense.ckpt"))?;
    }
    Ok(BtmModels {
        seed,
        elms,
        random_elms,
        dense,
        branch_seconds,
    })
}

/// Loads what [`train_all`] saved: the ELMs of `domain_names` and `k` random-split ELMs.
pub fn load_all<M: StepModel>(dir: &Path, domain_names: &[String]) -> Result<BtmModels<M>> {
    let load = |name: &str| Params::<M>::load(&dir.join(name));
    let elm = |domain: String| -> Result<Elm<M>> {
        let params = Params::<M>::load(&super::elm_path(dir, &domain))?;
        Ok(Elm {
            report: crate::train::TrainReport::loaded(&params),
            domain,
            params,
        })
    };
    Ok(BtmModels {
        seed: load("seed.ckpt")?,
        dense: load("dense.ckpt")?,
        elms: domain_names
            .iter()
            .cloned()
            .map(elm)
            .collect::<Result<_>>()?,
        random_elms: (0..domain_names.len())
            .map(|i| elm(format!("random{i}")))
            .collect::<Result<_>>()?,
        branch_seconds: 0.0,
    })
}

/// Validation bits per byte on one domain.
#[derive(Debug, Clone, Serialize)]
pub struct DomainScores {
    pub domain: String,
    /// Validation windows scored (each of the model's unit rows).
    pub windows: usize,
    pub dense: f64,
    /// The ELM trained on this domain, alone.
    pub own_elm: f64,
    pub ensemble: f64,
    pub averaged: f64,
    /// The ensemble of ELMs trained on a random split of the same data.
    pub random_split_ensemble: f64,
    /// The cached domain prior of the ensemble, in ELM order.
    pub prior: Vec<f64>,
}

/// Scores every model on each domain's validation split, on `device` (one of `client`'s runtime).
pub fn evaluate<M: StepModel>(
    client: &Client,
    device: &Device,
    corpus: &Corpus,
    models: &BtmModels<M>,
    opts: &BtmOptions,
) -> Result<Vec<DomainScores>> {
    let cfg = models.seed.config;
    let averaged = average(
        &models.elms.iter().map(|e| &e.params).collect::<Vec<_>>(),
        None,
    )?;
    let batch = opts.train.batch;
    let mean_bpb = |nats: &[f64]| bits_per_byte(nats.iter().sum::<f64>() / nats.len() as f64);
    let mut out = Vec::new();
    for (name, domain) in domains_of(corpus) {
        let valid = domain.split(opts.train.valid_fraction)?.valid;
        let (windows, docs) = validation_windows(&valid, &cfg, opts.eval_windows_per_doc)?;
        // The ensemble weighs token rows: each window's document, once per row.
        let rows = cfg.unit_rows();
        let docs: Vec<usize> = docs
            .iter()
            .flat_map(|&d| std::iter::repeat_n(d, rows))
            .collect();
        let nats = |p: &Params<M>| window_nats(client, device, p, &windows, batch);
        let elm_nats = models
            .elms
            .iter()
            .map(|e| nats(&e.params))
            .collect::<Result<Vec<_>>>()?;
        let random_nats = models
            .random_elms
            .iter()
            .map(|e| nats(&e.params))
            .collect::<Result<Vec<_>>>()?;
        let own = models
            .elms
            .iter()
            .position(|e| e.domain == name)
            .ok_or_else(|| Error::InvalidArgument {
                what: "BTM evaluation",
                reason: format!("no ELM for domain {name:?}"),
            })?;
        let (ensemble, prior) = ensemble_bits_per_byte(&elm_nats, &docs, opts.ensemble)?;
        let (random_split_ensemble, _) =
            ensemble_bits_per_byte(&random_nats, &docs, opts.ensemble)?;
        out.push(DomainScores {
            windows: windows.len(),
            dense: mean_bpb(&nats(&models.dense)?),
            own_elm: mean_bpb(&elm_nats[own]),
            ensemble,
            averaged: mean_bpb(&nats(&averaged)?),
            random_split_ensemble,
            prior,
            domain: name,
        });
    }
    Ok(out)
}

/// The per-domain table.
pub fn table(scores: &[DomainScores]) -> String {
    let rows: Vec<Vec<String>> = scores
        .iter()
        .map(|s| {
            vec![
                s.domain.clone(),
                format!("{:.3}", s.dense),
                format!("{:.3}", s.own_elm),
                format!("{:.3}", s.ensemble),
                format!("{:.3}", s.averaged),
                format!("{:.3}", s.random_split_ensemble),
            ]
        })
        .collect();
    crate::table::markdown_table(
        &[
            "domain (valid bits/byte)",
            "dense, same steps",
            "own ELM",
            "BTM ensemble",
            "averaged ELMs",
            "BTM on a random split",
        ],
        &rows,
    )
}
