//! Branch-Train-Merge (Li et al. 2022): expert LMs (ELMs), one per data domain, trained with no
//! communication at all, then merged.
//!
//! 1. *Seed*: one LM trained on every domain together.
//! 2. *Branch*: a copy of the seed per domain, each trained on its own domain on its own device,
//!    concurrently, as its own client of the process's one runtime. The trainers are
//!    single-device, so nothing crosses devices; under `mpirun` each rank trains the ELMs of its
//!    own devices with no traffic between ranks, and the trained ELMs are shared afterwards.
//! 3. *Merge*: the domain-posterior ensemble ([`ensemble`]) or parameter averaging ([`average`]);
//!    either can seed a new branch for a new domain.
//!
//! Every phase is generic over the model ([`StepModel`]): the MoE LM (`gangway train btm`) and
//! the dense Transformer (`gangway eval btm --arch transformer`) run the same code, trained
//! through [`crate::train::train`] and scored through the one trainer's token losses.

pub mod ensemble;
pub mod experiment;
mod merge;

pub use ensemble::{EnsembleOptions, ensemble_bits_per_byte};
pub use merge::average;

use crate::Mesh;
use crate::data::Corpus;
use crate::kernels::optim::AdamConfig;
use crate::sched::{Client, Runtime};
use crate::train::{Params, StepModel, TrainOptions, TrainReport, Trainer, TrainingRun};
use crate::{Device, Error, Result};
use std::path::{Path, PathBuf};

pub use crate::data::Window;

/// One expert LM: its domain, parameters and how its branch training went.
#[derive(Debug, Clone)]
pub struct Elm<M: StepModel> {
    pub domain: String,
    pub params: Params<M>,
    pub report: TrainReport<M>,
}

/// Trains one ELM per `(domain, corpus)` from `seed`, concurrently: ELM i on `devices[i % n]`.
/// Every ELM is its own client of `runtime` (the devices must be in its mesh); each round submits
/// every branch's next step before finishing any, and the gang scheduler interleaves them (ELMs
/// sharing a device take turns on it). `progress(i, step)` reports each step. The steps are traced
/// by the runtime's tracer when it is on.
///
/// In a job of several ranks each rank trains the ELMs of its own devices, with no traffic at all
/// while they train, and the trained ELMs are then shared so every rank returns all of them.
pub fn branch<M: StepModel>(
    runtime: &Runtime,
    mesh: &Mesh,
    domains: &[(String, Corpus)],
    seed: &Params<M>,
    opts: &TrainOptions,
    progress: impl Fn(usize, u32) + Sync,
) -> Result<Vec<Elm<M>>> {
    let devices = mesh.devices();
    if devices.is_empty() || domains.is_empty() {
        return Err(Error::InvalidArgument {
            what: "BTM branch",
            reason: format!("{} devices for {} domains", devices.len(), domains.len()),
        });
    }
    let n = devices.len().min(domains.len());
    // This rank's branches: those whose device is its own.
    let mut runs = domains
        .iter()
        .enumerate()
        .filter(|(i, _)| devices[i % n].is_local())
        .map(|(i, (domain, corpus))| {
            // This rank's work alone: the other ranks neither submit nor hear of it.
            let client = runtime.local_client(&format!("elm {domain}"), 1);
            TrainingRun::fresh(
                &client,
                &Mesh::line(&devices[i % n..i % n + 1]),
                corpus,
                seed,
                opts,
            )
            .map(|run| (i, run))
        })
        .collect::<Result<Vec<_>>>()?;
    loop {
        let pending = runs
            .iter_mut()
            .map(|(_, run)| run.submit())
            .collect::<Result<Vec<_>>>()?;
        if pending.iter().all(Option::is_none) {
            break;
        }
        for ((i, run), step) in runs.iter_mut().zip(pending) {
            if let Some(step) = step {
                run.finish(step, &mut |p| progress(*i, p.stats.step))?;
            }
        }
    }
    let mine = runs
        .into_iter()
        .map(|(i, run)| {
            let report = run.report()?;
            Ok(SharedElm {
                index: i,
                params: report.params.to_bytes()?,
                report,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    // Every rank's ELMs, in domain order.
    let mut all: Vec<SharedElm<M>> = runtime
        .job()
        .all_gather(&mine)?
        .into_iter()
        .flatten()
        .collect();
    all.sort_by_key(|e| e.index);
    all.into_iter()
        .map(|e| {
            let params = Params::<M>::from_bytes(&e.params)?;
            let domain = domains
                .get(e.index)
                .map(|(d, _)| d.clone())
                .ok_or_else(|| Error::Job {
                    rank: 0,
                    reason: format!("shared ELM {} of {} domains", e.index, domains.len()),
                })?;
            Ok(Elm {
                domain,
                report: TrainReport {
                    params: params.clone(),
                    ..e.report
                },
                params,
            })
        })
        .collect()
}

/// A trained ELM as the ranks of a job share it.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(bound = "M: StepModel")]
struct SharedElm<M> {
    index: usize,
    /// [`Params::to_bytes`].
    params: Vec<u8>,
    report: TrainReport<M>,
}

/// The nats of every token row of `windows` (each a window of the model's [`StepModel::window`]
/// bytes and the byte after it, made a batch unit by [`StepModel::batch_from`]: its
/// [`StepModel::unit_rows`] rows), scored by `params` on `device` (one of `client`'s runtime) in
/// batches of `batch` units. The last batch is padded by repeating its final window, so one
/// program serves every batch; the padding's scores are dropped.
pub fn window_nats<M: StepModel>(
    client: &Client,
    device: &Device,
    params: &Params<M>,
    windows: &[Window],
    batch: usize,
) -> Result<Vec<f64>> {
    let cfg = params.config;
    crate::data::check_batch("window_nats", cfg.window(), batch)?;
    let one = std::slice::from_ref(device);
    let trainer = Trainer::new(client, &Mesh::line(one), params, AdamConfig::new(1e-3), 1)?;
    let rows = cfg.unit_rows();
    let mut out = Vec::with_capacity(windows.len() * rows);
    for chunk in windows.chunks(batch.max(1)) {
        let mut ctx = Vec::with_capacity(batch * cfg.window());
        let mut next = Vec::with_capacity(batch);
        for i in 0..batch {
            let (c, t) = &chunk[i.min(chunk.len() - 1)];
            ctx.extend_from_slice(c);
            next.push(*t);
        }
        let (inputs, targets) = cfg.batch_from(ctx, next);
        let nats = trainer.token_nats(&inputs, &targets)?;
        out.extend_from_slice(&nats[..chunk.len() * rows]);
    }
    Ok(out)
}

/// The validation windows of `valid` for `config`: per document at most `per_doc` windows of
/// [`StepModel::window`] bytes from its start, [`StepModel::unit_rows`] apart (consecutive
/// windows for a model whose unit is one row, whole sequences one after another for the
/// Transformer), with the index of the document each comes from.
pub fn validation_windows<M: StepModel>(
    valid: &Corpus,
    config: &M,
    per_doc: usize,
) -> Result<(Vec<Window>, Vec<usize>)> {
    let (window, stride) = (config.window(), config.unit_rows());
    let mut windows = Vec::new();
    let mut docs = Vec::new();
    for (i, doc) in valid.documents().iter().enumerate() {
        let one = Corpus::from_documents(vec![doc.clone()]);
        let Ok(iter) = one.windows(window, stride) else {
            continue; // shorter than the window
        };
        for w in iter.take(per_doc) {
            windows.push(w);
            docs.push(i);
        }
    }
    if windows.is_empty() {
        return Err(Error::InvalidArgument {
            what: "BTM evaluation",
            reason: format!("no validation document is longer than {window} bytes"),
        });
    }
    Ok((windows, docs))
}

/// Where the ELM of `domain` is saved in `dir`: `<dir>/elm-<domain>.ckpt`. The one place that
/// knows the naming.
pub fn elm_path(dir: &Path, domain: &str) -> PathBuf {
    dir.join(format!("elm-{domain}.ckpt"))
}

/// The domain an ELM checkpoint's file name says (`elm-<domain>.ckpt`), if it is one.
fn elm_domain(file_name: &str) -> Option<&str> {
    file_name
        .strip_prefix("elm-")
        .and_then(|n| n.strip_suffix(".ckpt"))
}

/// Saves every ELM as [`elm_path`].
pub fn save_elms<M: StepModel>(dir: &Path, elms: &[Elm<M>]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    elms.iter()
        .map(|e| {
            let path = elm_path(dir, &e.domain);
            e.params.save(&path)?;
            Ok(path)
        })
        .collect()
}

/// Every domain ELM saved in `dir` (random-split ELMs, `elm-random…`, left out), by domain name.
pub fn load_domain_elms<M: StepModel>(dir: &Path) -> Result<Vec<(String, Params<M>)>> {
    let mut elms = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(Error::io(dir))? {
        let name = entry.map_err(Error::io(dir))?.file_name();
        let name = name.to_string_lossy();
        if let Some(domain) = elm_domain(&name).filter(|d| !d.starts_with("random")) {
            elms.push((domain.to_string(), Params::load(&dir.join(&*name))?));
        }
    }
    elms.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(elms)
}
