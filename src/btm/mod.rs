//! Branch-Train-Merge (Li et al. 2022): expert LMs (ELMs), one per data domain, trained with no
//! communication at all, then merged.
//!
//! 1. *Seed*: one LM trained on every domain together.
//! 2. *Branch*: a copy of the seed per domain, each trained on its own domain on its own device,
//!    concurrently. The trainers are single-device, so nothing crosses devices.
//! 3. *Merge*: the domain-posterior ensemble ([`ensemble`]) or parameter averaging ([`average`]);
//!    either can seed a new branch for a new domain.
//!
//! Every phase trains through [`crate::moe::training::train`]: there is one trainer.

pub mod ensemble;
pub mod experiment;
mod merge;

pub use ensemble::{EnsembleOptions, ensemble_bits_per_byte};
pub use merge::average;

use crate::data::Corpus;
use crate::kernels::lm_train::AdamConfig;
use crate::moe::training::{TrainOptions, TrainReport, train};
use crate::moe::{GpuTrainer, MoeLmParams};
use crate::trace::Tracer;
use crate::{Device, Error, Result};
use std::path::{Path, PathBuf};

/// One context window (byte ids) and the byte after it.
pub type Window = (Vec<u32>, u32);

/// One expert LM: its domain, parameters and how its branch training went.
#[derive(Debug, Clone)]
pub struct Elm {
    pub domain: String,
    pub params: MoeLmParams,
    pub report: TrainReport,
}

/// Trains one ELM per `(domain, corpus)` from `seed`, concurrently: ELM i on `devices[i % n]`
/// (ELMs sharing a device run one after another on it). `progress(i, step)` reports each step.
pub fn branch(
    devices: &[Device],
    domains: &[(String, Corpus)],
    seed: &MoeLmParams,
    opts: &TrainOptions,
    tracer: Option<Tracer>,
    progress: impl Fn(usize, u32) + Sync,
) -> Result<Vec<Elm>> {
    if devices.is_empty() || domains.is_empty() {
        return Err(Error::InvalidArgument {
            what: "BTM branch",
            reason: format!("{} devices for {} domains", devices.len(), domains.len()),
        });
    }
    let n = devices.len();
    let progress = &progress;
    let results: Vec<Result<Vec<(usize, Elm)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n.min(domains.len()))
            .map(|d| {
                let tracer = tracer.clone();
                s.spawn(move || {
                    let mut out = Vec::new();
                    for (i, (domain, corpus)) in domains.iter().enumerate().skip(d).step_by(n) {
                        let report = train(
                            &devices[d..d + 1],
                            corpus,
                            seed,
                            opts,
                            tracer.clone(),
                            |p| progress(i, p.stats.step),
                        )?;
                        out.push((
                            i,
                            Elm {
                                domain: domain.clone(),
                                params: report.params.clone(),
                                report,
                            },
                        ));
                    }
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|p| Err(Error::panicked("a BTM branch thread", &*p)))
            })
            .collect()
    });
    let mut elms: Vec<(usize, Elm)> = Vec::new();
    for r in results {
        elms.extend(r?);
    }
    elms.sort_by_key(|(i, _)| *i);
    Ok(elms.into_iter().map(|(_, e)| e).collect())
}

/// Per-window nats of `params` on `windows` (each `(context bytes, target)`), on `device`, in
/// batches of `batch` (the last batch is padded by repeating its final window; the padding's
/// scores are dropped).
pub fn window_nats(
    device: &Device,
    params: &MoeLmParams,
    windows: &[Window],
    batch: usize,
) -> Result<Vec<f64>> {
    crate::data::check_batch("window_nats", params.config.context, batch)?;
    let trainer = GpuTrainer::with_groups(
        std::slice::from_ref(device),
        params,
        AdamConfig::new(1e-3),
        1,
    )?;
    let mut out = Vec::with_capacity(windows.len());
    for chunk in windows.chunks(batch.max(1)) {
        let mut ctx = Vec::with_capacity(batch * params.config.context);
        let mut tgt = Vec::with_capacity(batch);
        for i in 0..batch {
            let (c, t) = &chunk[i.min(chunk.len() - 1)];
            ctx.extend_from_slice(c);
            tgt.push(*t);
        }
        let nats = trainer.token_nats(&ctx, &tgt)?;
        out.extend_from_slice(&nats[..chunk.len()]);
    }
    Ok(out)
}

/// The validation windows of `valid`, at most `per_doc` consecutive ones from the start of each
/// document, with the index of the document each comes from.
pub fn validation_windows(
    valid: &Corpus,
    context: usize,
    per_doc: usize,
) -> Result<(Vec<Window>, Vec<usize>)> {
    let mut windows = Vec::new();
    let mut docs = Vec::new();
    for (i, doc) in valid.documents().iter().enumerate() {
        let one = Corpus::from_documents(vec![doc.clone()]);
        let Ok(iter) = one.windows(context, 1) else {
            continue; // shorter than the context
        };
        for w in iter.take(per_doc) {
            windows.push(w);
            docs.push(i);
        }
    }
    if windows.is_empty() {
        return Err(Error::InvalidArgument {
            what: "BTM evaluation",
            reason: format!("no validation document is longer than {context} bytes"),
        });
    }
    Ok((windows, docs))
}

/// Saves every ELM as `<dir>/elm-<domain>.ckpt`.
pub fn save_elms(dir: &Path, elms: &[Elm]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    elms.iter()
        .map(|e| {
            let path = dir.join(format!("elm-{}.ckpt", e.domain));
            e.params.save(&path)?;
            Ok(path)
        })
        .collect()
}
