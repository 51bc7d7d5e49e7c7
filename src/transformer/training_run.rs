//! A training run of the Transformer on a corpus (`gangway train lm`): random sequences of `T`
//! bytes with their next bytes as targets, steps on the GPU trainer, validation in bits per byte
//! against the unigram baseline, and resumable checkpoints (safetensors, [`super::checkpoint`]).
//!
//! A sequence is a context window of [`crate::data::Batches`] with the byte after it: its
//! targets are the window shifted by one. Evaluation walks the validation split in sequences of
//! `T` bytes, `T` apart, so every validation byte after the first of each document is scored
//! once, with as much context as its position in its sequence gives it.

use super::TransformerCheckpoint;
use super::TransformerTrainer;
use crate::data::{Batches, Corpus, bits_per_byte, unigram_bits_per_byte};
use crate::train::{Balance, GroupSplit, StepStats};
use crate::{Error, Result};
use std::path::PathBuf;
use std::time::Instant;

/// What a run does besides the model's sizes.
#[derive(Debug, Clone)]
pub struct LmOptions {
    pub steps: u32,
    /// Sequences per step over all devices; a multiple of the trainer's routing groups.
    pub batch: usize,
    /// Fraction of every document held out for validation.
    pub valid_fraction: f64,
    /// Validation sequences scored at each evaluation (at most; spread over the split).
    pub eval_sequences: usize,
    /// Evaluate every this many steps (0: only at the end).
    pub eval_every: u32,
    /// Save a resumable checkpoint here every `checkpoint_every` steps and at the end.
    pub checkpoint: Option<PathBuf>,
    pub checkpoint_every: u32,
    /// Seeds the batches; a resumed run skips the batches its first steps took.
    pub data_seed: u64,
    /// How the routing groups are dealt to the devices.
    pub balance: Balance,
}

impl Default for LmOptions {
    fn default() -> Self {
        Self {
            steps: 200,
            batch: 8,
            valid_fraction: 0.1,
            eval_sequences: 64,
            eval_every: 0,
            checkpoint: None,
            checkpoint_every: 100,
            data_seed: 1,
            balance: Balance::Even,
        }
    }
}

/// The outcome of a run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LmReport {
    pub config: super::TransformerConfig,
    pub devices: usize,
    pub parameters: usize,
    /// Steps this run took, and the step the model is at (resumes included).
    pub steps: u32,
    pub last_step: u32,
    pub tokens: u64,
    pub seconds: f64,
    pub tokens_per_s: f64,
    /// Every step's loss (`ce + aux + z`), cross-entropy (nats) and dropped fraction.
    pub losses: Vec<f64>,
    pub ces: Vec<f64>,
    pub dropped_fractions: Vec<f64>,
    /// `(step, validation bits per byte)` at every evaluation.
    pub valid: Vec<(u32, f64)>,
    /// The last evaluation's bits per byte.
    pub valid_bpb: f64,
    /// A unigram byte model fit on the training split, scored on the same validation split.
    pub unigram_bpb: f64,
    /// Routing groups per device, in device order (`6,2`).
    #[serde(default)]
    pub split: String,
    /// What balancing measured and chose, in words (empty unless `Balance::Measured`), and the
    /// seconds it took before training (not counted in `seconds`).
    #[serde(default)]
    pub balancing: String,
    #[serde(default)]
    pub calibration_seconds: f64,
}

/// The targets of sequences cut from context windows: each window shifted by one, then the byte
/// after it.
pub fn shifted_targets(inputs: &[u32], next: &[u32], seq: usize) -> Vec<u32> {
    inputs
        .chunks_exact(seq)
        .zip(next)
        .flat_map(|(w, &y)| w[1..].iter().copied().chain([y]))
        .collect()
}

/// Mean cross-entropy in bits per byte of `corpus`, walked in sequences of `T` bytes, `T` apart
/// (at most `max_sequences`, spread evenly), in batches of `batch` (a multiple of the
/// trainer's groups; sequences that do not fill a last batch are left out, unless none would
/// be scored).
pub fn evaluate(
    trainer: &TransformerTrainer,
    corpus: &Corpus,
    max_sequences: usize,
    batch: usize,
) -> Result<f64> {
    let t = trainer.config().context;
    crate::data::check_batch("evaluate", t, batch)?;
    let all: Vec<(Vec<u32>, u32)> = corpus.windows(t, t)?.collect();
    let step = (all.len() / max_sequences.max(1)).max(1);
    let picked: Vec<&(Vec<u32>, u32)> = all.iter().step_by(step).take(max_sequences).collect();
    let batch = batch.min(picked.len() / trainer.groups() * trainer.groups());
    if batch == 0 {
        return Err(Error::InvalidArgument {
            what: "evaluate",
            reason: format!(
                "{} sequences of {t} bytes cannot fill one batch of {} routing groups",
                picked.len(),
                trainer.groups()
            ),
        });
    }
    let (mut nats, mut count) = (0.0, 0usize);
    for chunk in picked.chunks_exact(batch) {
        let tokens: Vec<u32> = chunk.iter().flat_map(|(w, _)| w.iter().copied()).collect();
        let next: Vec<u32> = chunk.iter().map(|(_, y)| *y).collect();
        let targets = shifted_targets(&tokens, &next, t);
        let got = trainer.token_nats(&tokens, &targets)?;
        nats += got.iter().sum::<f64>();
        count += got.len();
    }
    Ok(bits_per_byte(nats / count.max(1) as f64))
}

/// Trains `trainer` on `corpus` (split into training and validation parts), calling `on_step`
/// after every step with its statistics and, when it evaluated, the validation bits per byte.
pub fn train(
    trainer: &mut TransformerTrainer,
    corpus: &Corpus,
    opts: &LmOptions,
    on_step: &mut dyn FnMut(&StepStats, Option<f64>),
) -> Result<LmReport> {
    let cfg = *trainer.config();
    let t = cfg.context;
    if opts.batch == 0 || !opts.batch.is_multiple_of(trainer.groups()) {
        return Err(Error::InvalidArgument {
            what: "train lm",
            reason: format!(
                "a batch of {} sequences cannot be split into {} routing groups",
                opts.batch,
                trainer.groups()
            ),
        });
    }
    let split = corpus.split(opts.valid_fraction)?;
    let unigram_bpb = unigram_bits_per_byte(&split.train, &split.valid)?;
    let mut batches = Batches::new(&split.train, t, opts.batch, opts.data_seed)?;
    // A resumed run continues the stream where the saved run stopped.
    for _ in 0..trainer.steps() {
        batches.next();
    }
    let calibration = Instant::now();
    let balancing = match &opts.balance {
        Balance::Even => String::new(),
        Balance::Counts(counts) => {
            trainer.set_split(GroupSplit::from_counts(counts.clone())?)?;
            String::new()
        }
        Balance::Measured => {
            // On a copy of the next batch: the run's batches stay those of an even run.
            let (inputs, next) = batches
                .clone()
                .next()
                .ok_or_else(|| Error::InvalidArgument {
                    what: "train lm",
                    reason: "no training batch to measure the devices' speeds on".into(),
                })?;
            let targets = shifted_targets(&inputs, &next, t);
            trainer.balance(&inputs, &targets)?.to_string()
        }
    };
    let calibration_seconds = if balancing.is_empty() {
        0.0
    } else {
        calibration.elapsed().as_secs_f64()
    };
    let evaluate_now = |trainer: &TransformerTrainer| {
        evaluate(trainer, &split.valid, opts.eval_sequences, opts.batch)
    };
    let save = |trainer: &TransformerTrainer| -> Result<()> {
        match &opts.checkpoint {
            Some(path) => trainer.checkpoint()?.save(path),
            None => Ok(()),
        }
    };
    let start = Instant::now();
    let mut report = LmReport {
        config: cfg,
        devices: trainer.devices().len(),
        parameters: cfg.param_specs().iter().map(|s| s.len()).sum(),
        steps: 0,
        last_step: trainer.steps(),
        tokens: 0,
        seconds: 0.0,
        tokens_per_s: 0.0,
        losses: Vec::new(),
        ces: Vec::new(),
        dropped_fractions: Vec::new(),
        valid: Vec::new(),
        valid_bpb: f64::NAN,
        unigram_bpb,
        split: trainer.split().to_string(),
        balancing,
        calibration_seconds,
    };
    for i in 1..=opts.steps {
        let (inputs, next) = batches.next().ok_or_else(|| Error::InvalidArgument {
            what: "train lm",
            reason: "the batches ran out".into(),
        })?;
        let targets = shifted_targets(&inputs, &next, t);
        let stats = trainer.step(&inputs, &targets)?;
        report.losses.push(stats.loss);
        report.ces.push(stats.ce);
        report.dropped_fractions.push(stats.dropped_fraction);
        report.tokens += inputs.len() as u64;
        let last = i == opts.steps;
        let valid = if last || (opts.eval_every > 0 && i.is_multiple_of(opts.eval_every)) {
            let bpb = evaluate_now(trainer)?;
            report.valid.push((stats.step, bpb));
            report.valid_bpb = bpb;
            Some(bpb)
        } else {
            None
        };
        if last || (opts.checkpoint_every > 0 && i.is_multiple_of(opts.checkpoint_every)) {
            save(trainer)?;
        }
        on_step(&stats, valid);
    }
    if opts.steps == 0 {
        report.valid_bpb = evaluate_now(trainer)?;
        report.valid.push((trainer.steps(), report.valid_bpb));
    }
    report.steps = opts.steps;
    report.last_step = trainer.steps();
    report.seconds = start.elapsed().as_secs_f64();
    report.tokens_per_s = report.tokens as f64 / report.seconds.max(1e-9);
    Ok(report)
}

/// Bytes sampled after `prompt`, one at a time from the logits of the last `T` bytes (the
/// reference forward on the host: one sequence is far too little work to pay for a GPU round
/// trip per byte at these sizes). `temperature` 0 takes the most likely byte.
pub fn generate(
    checkpoint: &TransformerCheckpoint,
    prompt: &[u8],
    max_bytes: usize,
    temperature: f32,
    seed: u64,
) -> Result<Vec<u8>> {
    if !(temperature.is_finite() && temperature >= 0.0) {
        return Err(Error::InvalidArgument {
            what: "generate",
            reason: format!("temperature must be finite and >= 0, got {temperature}"),
        });
    }
    let params = &checkpoint.params;
    let t = params.config.context;
    let mut rng = crate::Rng::new(seed);
    let mut text: Vec<u32> = prompt.iter().map(|&b| u32::from(b)).collect();
    if text.is_empty() {
        // Start from a newline, as a document would.
        text.push(u32::from(b'\n'));
    }
    let mut out = Vec::with_capacity(max_bytes);
    for _ in 0..max_bytes {
        let window = &text[text.len().saturating_sub(t)..];
        let logits = super::reference::logits(params, window)?;
        let row = &logits[(window.len() - 1) * super::VOCAB..];
        let byte = sample(row, temperature, &mut rng);
        out.push(byte as u8);
        text.push(byte);
    }
    Ok(out)
}

/// A draw from `softmax(row / temperature)`, or the argmax at temperature 0.
fn sample(row: &[f32], temperature: f32, rng: &mut crate::Rng) -> u32 {
    let argmax = row
        .iter()
        .enumerate()
        .fold(0, |best, (i, &v)| if v > row[best] { i } else { best });
    if temperature == 0.0 {
        return argmax as u32;
    }
    let m = f64::from(row[argmax]);
    let weights: Vec<f64> = row
        .iter()
        .map(|&v| ((f64::from(v) - m) / f64::from(temperature)).exp())
        .collect();
    let mut r = f64::from(rng.unit()) * weights.iter().sum::<f64>();
    for (i, w) in weights.iter().enumerate() {
        r -= w;
        if r <= 0.0 {
            return i as u32;
        }
    }
    argmax as u32
}
