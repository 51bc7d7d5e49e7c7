//! A training run of any [`StepModel`] on a corpus: batches, steps on the [`Trainer`] (its
//! routing groups dealt to the devices evenly, as given, or by their speeds measured on a copy
//! of the next batch: [`TrainOptions::balance`]), validation in bits per byte against the unigram
//! baseline ([`evaluate`]: every window picked, the last partial batch included, and the share
//! of router choices capacity dropped, routed with [`TrainOptions::eval_capacity`] where set),
//! periodic checkpoints. `gangway train moe`, `gangway train lm` and Branch-Train-Merge all
//! train through [`train`] and [`resume`], as runs of a client of the caller's runtime over its
//! devices (a job's mesh under `mpirun`).
//!
//! A batch is `batch` units drawn as context windows of [`StepModel::window`] bytes with the
//! byte after each ([`crate::data::Batches`]), which the model turns into its inputs and
//! targets ([`StepModel::batch_from`]). Step `n + 1` goes to the runtime before step `n` is
//! finished, unless step `n` evaluates or checkpoints.

use super::{Balance, Checkpoint, GroupSplit, Params, PendingStep, StepModel, StepStats, Trainer};
use crate::Mesh;
use crate::data::{Batches, Corpus, bits_per_byte, unigram_bits_per_byte};
use crate::kernels::optim::AdamConfig;
use crate::sched::{Client, DispatchMode};
use crate::{Error, Result};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// What a run does besides the model's own sizes.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub steps: u32,
    /// Batch units (the model's: windows, sequences) per step over all devices; a multiple of
    /// the routing groups.
    pub batch: usize,
    pub lr: f32,
    /// Fraction of every document held out for validation.
    pub valid_fraction: f64,
    /// Validation units scored at the end (and at each evaluation), spread evenly
    /// ([`StepModel::eval_windows`]).
    pub eval_units: usize,
    /// Evaluate every this many steps (0: only at the end).
    pub eval_every: u32,
    /// Save a resumable checkpoint (parameters and Adam's state) here every `checkpoint_every`
    /// steps and at the end.
    pub checkpoint: Option<PathBuf>,
    pub checkpoint_every: u32,
    /// Seeds the batches (the model has its own seed in its config).
    pub data_seed: u64,
    /// When set (by another thread), the run stops before its next step and finishes as if
    /// `steps` were the steps done so far (final evaluation and checkpoint included).
    pub stop: Option<Arc<AtomicBool>>,
    /// How the runtime dispatches each step.
    pub dispatch: DispatchMode,
    /// Routing groups per batch (`None`: one per device, or a resumed checkpoint's).
    pub groups: Option<usize>,
    /// How the groups are dealt to the devices.
    pub balance: Balance,
    /// The capacity factor validation routes with (`None`: the model's own; see
    /// [`Trainer::set_eval_capacity`]).
    pub eval_capacity: Option<f32>,
}

impl Default for TrainOptions {
    fn default() -> Self {
        Self {
            steps: 200,
            batch: 128,
            lr: 3e-3,
            valid_fraction: 0.1,
            eval_units: 4096,
            eval_every: 0,
            checkpoint: None,
            checkpoint_every: 100,
            data_seed: 1,
            stop: None,
            dispatch: DispatchMode::Parallel,
            groups: None,
            balance: Balance::Even,
            eval_capacity: None,
        }
    }
}

/// Reported after every step.
#[derive(Debug, Clone)]
pub struct Progress {
    pub stats: StepStats,
    /// This run's step, from 1 (`stats.step` counts from the start of training, resumes included).
    pub step: u32,
    /// Steps this run takes.
    pub steps: u32,
    /// Tokens per second over the run so far.
    pub tokens_per_s: f64,
    /// Validation bits per byte, when this step evaluated.
    pub valid_bpb: Option<f64>,
}

impl Progress {
    /// The step as live metrics (`crate::live`), as every trainer serves them: the loss and
    /// its parts, tokens/s, the learning rate `lr`, the dropped fraction, the step's seconds,
    /// each expert's load (labelled `expert`), and validation when the step evaluated.
    pub fn metrics(&self, lr: f32) -> Vec<crate::live::Metric> {
        use crate::live::Metric;
        let s = &self.stats;
        let step = u64::from(s.step);
        let mut out: Vec<Metric> = [
            ("train/loss", s.loss),
            ("train/ce", s.ce),
            ("train/aux_loss", s.aux),
            ("train/z_loss", s.z),
            ("train/tokens_per_s", self.tokens_per_s),
            ("train/lr", f64::from(lr)),
            ("train/dropped_fraction", s.dropped_fraction),
            ("train/step_seconds", s.seconds),
        ]
        .into_iter()
        .map(|(name, value)| Metric::now(name, value).at_step(step))
        .collect();
        out.extend(s.tokens_per_expert.iter().enumerate().map(|(e, &load)| {
            Metric::now("train/expert_load", load as f64)
                .at_step(step)
                .label("expert", e.to_string())
        }));
        if let Some(bpb) = self.valid_bpb {
            out.push(Metric::now("train/valid_bpb", bpb).at_step(step));
        }
        out
    }
}

/// The outcome of a run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(bound = "M: StepModel")]
pub struct TrainReport<M> {
    pub config: M,
    pub devices: usize,
    pub parameters: usize,
    /// Steps this run took, and the step the model is at (resumes included).
    pub steps: u32,
    #[serde(default)]
    pub last_step: u32,
    pub tokens: u64,
    pub seconds: f64,
    pub tokens_per_s: f64,
    /// Every step's loss (`ce + aux + z`).
    pub losses: Vec<f64>,
    /// Every step's cross-entropy (nats).
    #[serde(default)]
    pub ces: Vec<f64>,
    pub mean_dropped_fraction: f64,
    /// Every step's dropped fraction of the router's choices.
    #[serde(default)]
    pub dropped_fractions: Vec<f64>,
    /// Every step's spread of kept tokens over the experts ([`StepStats::expert_cv`]).
    #[serde(default)]
    pub expert_cvs: Vec<f64>,
    /// The mean of [`Self::expert_cvs`].
    #[serde(default)]
    pub mean_expert_cv: f64,
    /// `(step, validation bits per byte)` at every evaluation.
    #[serde(default)]
    pub valid: Vec<(u32, f64)>,
    /// The last evaluation's bits per byte.
    pub valid_bpb: f64,
    /// The last evaluation's share of router choices dropped by capacity (routed with
    /// [`TrainOptions::eval_capacity`] where set); absent for a dense model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_dropped_fraction: Option<f64>,
    /// A unigram byte model fit on the training split, scored on the same validation split.
    pub unigram_bpb: f64,
    /// Routing groups per device, in device order (`6,2`).
    #[serde(default)]
    pub split: String,
    /// The bytes of a training step's buffers on its largest device
    /// ([`crate::train::Trainer::step_buffer_bytes`]).
    #[serde(default)]
    pub step_buffer_bytes: u64,
    /// Seconds spent measuring the devices' speeds before training (`Balance::Measured`), not
    /// counted in `seconds`.
    #[serde(default)]
    pub calibration_seconds: f64,
    /// Each device's measured speed relative to the fastest (`Balance::Measured`; else empty).
    #[serde(default)]
    pub speeds: Vec<f64>,
    /// What balancing measured and chose, in words (empty unless `Balance::Measured`).
    #[serde(default)]
    pub balancing: String,
    /// The trained parameters (not in the JSON: [`Params::save`] writes them).
    #[serde(skip)]
    pub params: Params<M>,
}

impl<M: StepModel> TrainReport<M> {
    /// A report for parameters loaded from a file (no training happened in this process).
    pub fn loaded(params: &Params<M>) -> Self {
        Self {
            config: params.config,
            devices: 0,
            parameters: params.count(),
            steps: 0,
            last_step: 0,
            tokens: 0,
            seconds: 0.0,
            tokens_per_s: 0.0,
            losses: Vec::new(),
            ces: Vec::new(),
            mean_dropped_fraction: 0.0,
            dropped_fractions: Vec::new(),
            expert_cvs: Vec::new(),
            mean_expert_cv: 0.0,
            valid: Vec::new(),
            valid_bpb: f64::NAN,
            valid_dropped_fraction: None,
            unigram_bpb: f64::NAN,
            split: String::new(),
            step_buffer_bytes: 0,
            calibration_seconds: 0.0,
            speeds: Vec::new(),
            balancing: String::new(),
            params: params.clone(),
        }
    }
}

/// The mean of `xs` (0 for none).
fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

/// What [`evaluate`] scored.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Evaluation {
    /// Mean cross-entropy over the scored bytes, in bits per byte.
    pub bits_per_byte: f64,
    /// Evaluation windows (the Transformer's sequences) the text holds, and of those the ones
    /// picked (about the `units` asked for, evenly spaced).
    pub available: usize,
    pub picked: usize,
    /// Of those, the windows scored: all but fewer than one routing group's worth.
    pub scored: usize,
    /// Bytes predicted and scored (targets).
    pub bytes: usize,
    /// Of the router choices of those bytes (`bytes · K · expert layers`), the share capacity
    /// dropped at evaluation; `None` for a model without expert layers.
    pub dropped_fraction: Option<f64>,
}

/// Mean validation cross-entropy of the model's evaluation windows over `valid`
/// ([`StepModel::eval_windows`], about `units` of them), in batches of `batch` units, then the
/// windows left over as one smaller batch (each batch is routed in the trainer's groups, so a
/// left-over batch takes a multiple of them: fewer windows than the groups are left out, and
/// [`Evaluation::scored`] says so).
pub fn evaluate<M: StepModel>(
    trainer: &Trainer<M>,
    valid: &Corpus,
    units: usize,
    batch: usize,
) -> Result<Evaluation> {
    let cfg = *trainer.config();
    crate::data::check_batch("evaluate", cfg.window(), batch)?;
    let (picked, available) = cfg.eval_windows(valid, units)?;
    let groups = trainer.groups();
    let batch = batch.min(picked.len() / groups * groups);
    if batch == 0 {
        return Err(Error::InvalidArgument {
            what: "evaluate",
            reason: format!(
                "{} validation windows of {} bytes cannot fill one batch of {groups} routing groups",
                picked.len(),
                cfg.window()
            ),
        });
    }
    let full = picked.len() / batch * batch;
    let rest = (picked.len() - full) / groups * groups;
    let batches = picked[..full]
        .chunks(batch)
        .chain(Some(&picked[full..full + rest]).filter(|r| !r.is_empty()));
    let (mut nats, mut count, mut scored) = (0.0, 0usize, 0usize);
    let (mut dropped, mut choices) = (0usize, 0usize);
    for chunk in batches {
        let windows: Vec<u32> = chunk.iter().flat_map(|(w, _)| w.iter().copied()).collect();
        let next: Vec<u32> = chunk.iter().map(|(_, y)| *y).collect();
        let (inputs, targets) = cfg.batch_from(windows, next);
        let got = trainer.forward(&inputs, &targets)?;
        nats += got.nats.iter().sum::<f64>();
        count += got.nats.len();
        scored += chunk.len();
        dropped += got.dropped;
        choices += got.choices;
    }
    Ok(Evaluation {
        bits_per_byte: bits_per_byte(nats / count.max(1) as f64),
        available,
        picked: picked.len(),
        scored,
        bytes: count,
        dropped_fraction: (choices > 0).then(|| dropped as f64 / choices as f64),
    })
}

/// Trains fresh `start` parameters on `corpus` over `mesh`, as runs of `client` (the devices
/// must be its runtime's). Its steps go to the runtime's tracer when that is on.
pub fn train<M: StepModel>(
    client: &Client,
    mesh: &Mesh,
    corpus: &Corpus,
    start: &Params<M>,
    opts: &TrainOptions,
    progress: impl FnMut(&Progress),
) -> Result<TrainReport<M>> {
    run(client, mesh, corpus, Start::Fresh(start), opts, progress)
}

/// Continues a run saved by [`train`] (parameters, Adam's moments and the step count) for
/// `opts.steps` more steps; the batches continue where the saved run's stopped.
pub fn resume<M: StepModel>(
    client: &Client,
    mesh: &Mesh,
    corpus: &Corpus,
    checkpoint: &Checkpoint<M>,
    opts: &TrainOptions,
    progress: impl FnMut(&Progress),
) -> Result<TrainReport<M>> {
    run(
        client,
        mesh,
        corpus,
        Start::Resume(checkpoint),
        opts,
        progress,
    )
}

enum Start<'a, M> {
    Fresh(&'a Params<M>),
    Resume(&'a Checkpoint<M>),
}

fn run<M: StepModel>(
    client: &Client,
    mesh: &Mesh,
    corpus: &Corpus,
    start: Start<'_, M>,
    opts: &TrainOptions,
    mut progress: impl FnMut(&Progress),
) -> Result<TrainReport<M>> {
    let mut run = TrainingRun::new(client, mesh, corpus, start, opts)?;
    let mut pending = run.submit()?;
    while let Some(step) = pending {
        // Step n + 1 goes to the runtime before step n is finished (its batch drawn, its
        // commands recorded while the devices run step n), unless step n evaluates or
        // checkpoints: those must see step n's parameters, not step n + 1's.
        let next = if run.may_submit_ahead() {
            run.submit()?
        } else {
            None
        };
        run.finish(step, &mut progress)?;
        pending = match next {
            Some(n) => Some(n),
            None => run.submit()?,
        };
    }
    run.report()
}

/// A training run taken one step at a time: [`train`] drives one; Branch-Train-Merge drives one
/// per branch on a shared runtime, submitting every branch's step before finishing any.
pub struct TrainingRun<M: StepModel> {
    trainer: Trainer<M>,
    opts: TrainOptions,
    valid: Corpus,
    unigram_bpb: f64,
    batches: Batches<'static>,
    began: Instant,
    losses: Vec<f64>,
    ces: Vec<f64>,
    dropped: Vec<f64>,
    expert_cvs: Vec<f64>,
    valid_bpbs: Vec<(u32, f64)>,
    /// Steps finished by this run.
    done: u32,
    /// The trainer's step count when the run began (a resumed run continues it).
    first_step: u32,
    parameters: usize,
    calibration_seconds: f64,
    speeds: Vec<f64>,
    balancing: String,
}

impl<M: StepModel> std::fmt::Debug for TrainingRun<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrainingRun")
            .field("trainer", &self.trainer)
            .field("done", &self.done)
            .field("steps", &self.opts.steps)
            .finish()
    }
}

impl<M: StepModel> TrainingRun<M> {
    fn new(
        client: &Client,
        mesh: &Mesh,
        corpus: &Corpus,
        start: Start<'_, M>,
        opts: &TrainOptions,
    ) -> Result<Self> {
        let (start, resumed_from, prior_steps) = match start {
            Start::Fresh(p) => (p, None, 0),
            Start::Resume(c) => {
                let t = c.train.as_ref().ok_or_else(|| Error::InvalidArgument {
                    what: "train",
                    reason: "the file holds weights only, no optimizer state to resume".into(),
                })?;
                (&c.params, Some((c, t.groups)), t.step)
            }
        };
        let config: M = start.config;
        let groups = match resumed_from {
            Some((_, groups)) => groups,
            None => opts.groups.unwrap_or(mesh.len()),
        };
        if opts.batch == 0 || groups == 0 || !opts.batch.is_multiple_of(groups) {
            return Err(Error::InvalidArgument {
                what: "train",
                reason: format!(
                    "a batch of {} units cannot be split into {groups} routing groups",
                    opts.batch
                ),
            });
        }
        let split = corpus.split(opts.valid_fraction)?;
        let unigram_bpb = unigram_bits_per_byte(&split.train, &split.valid)?;
        let adam = AdamConfig::new(opts.lr);
        let mut trainer = match (resumed_from, opts.groups) {
            (Some((_, groups)), Some(g)) if g != groups => {
                return Err(Error::InvalidArgument {
                    what: "train",
                    reason: format!("the checkpoint routes in {groups} groups, not {g}"),
                });
            }
            (Some((c, _)), _) => Trainer::resume(client, mesh, c)?,
            (None, _) => Trainer::new(client, mesh, start, adam, groups)?,
        };
        trainer.set_dispatch(opts.dispatch);
        trainer.set_eval_capacity(opts.eval_capacity)?;
        // The run ends with an evaluation: a validation part too short for one batch of it is
        // an error now, not after the last step.
        let (picked, _) = config.eval_windows(&split.valid, opts.eval_units)?;
        if picked.len() < trainer.groups() {
            return Err(Error::InvalidArgument {
                what: "train",
                reason: format!(
                    "the validation part holds {} evaluation windows of {} bytes, fewer than \
                     the {} routing groups one evaluation batch needs: give more text",
                    picked.len(),
                    config.window(),
                    trainer.groups()
                ),
            });
        }
        let mut batches = Batches::owned(split.train, config.window(), opts.batch, opts.data_seed)?;
        // The saved run drew its steps' batches: draw past them so the data continues, not
        // repeats.
        for _ in 0..prior_steps {
            batches.next();
        }
        let calibration = Instant::now();
        let mut speeds = Vec::new();
        let mut balancing = String::new();
        match &opts.balance {
            Balance::Even => {}
            Balance::Counts(counts) => {
                trainer.set_split(GroupSplit::from_counts(counts.clone())?)?
            }
            Balance::Measured => {
                // On a copy of the next batch: the run's batches stay those of an even run.
                let (windows, next) =
                    batches
                        .clone()
                        .next()
                        .ok_or_else(|| Error::InvalidArgument {
                            what: "train",
                            reason: "no training batch to measure the devices' speeds on".into(),
                        })?;
                let (inputs, targets) = config.batch_from(windows, next);
                let balanced = trainer.balance(&inputs, &targets)?;
                speeds = GroupSplit::relative(&balanced.speeds);
                balancing = balanced.to_string();
            }
        }
        let calibration_seconds = if speeds.is_empty() {
            0.0
        } else {
            calibration.elapsed().as_secs_f64()
        };
        Ok(Self {
            first_step: trainer.steps(),
            trainer,
            opts: opts.clone(),
            valid: split.valid,
            unigram_bpb,
            batches,
            began: Instant::now(),
            losses: Vec::new(),
            ces: Vec::new(),
            dropped: Vec::new(),
            expert_cvs: Vec::new(),
            valid_bpbs: Vec::new(),
            done: 0,
            parameters: start.count(),
            calibration_seconds,
            speeds,
            balancing,
        })
    }

    /// A fresh run of `start` whose trainer submits through `client`.
    pub fn fresh(
        client: &Client,
        mesh: &Mesh,
        corpus: &Corpus,
        start: &Params<M>,
        opts: &TrainOptions,
    ) -> Result<Self> {
        Self::new(client, mesh, corpus, Start::Fresh(start), opts)
    }

    /// Submits the next step, or `None` once the run has taken its steps or was stopped.
    pub fn submit(&mut self) -> Result<Option<PendingStep>> {
        let stopped = self
            .opts
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed));
        // Steps taken by the trainer so far, finished or in flight.
        let taken = self.trainer.steps() - self.first_step;
        if stopped || taken >= self.opts.steps {
            return Ok(None);
        }
        let (windows, next) = self.batches.next().ok_or_else(|| Error::InvalidArgument {
            what: "train",
            reason: "the batches ran out".into(),
        })?;
        let (inputs, targets) = self.trainer.config().batch_from(windows, next);
        self.trainer.submit_step(&inputs, &targets).map(Some)
    }

    /// Whether the step after the one in flight may be submitted before that one is finished:
    /// there is one, and finishing the one in flight neither evaluates nor checkpoints.
    fn may_submit_ahead(&self) -> bool {
        let o = &self.opts;
        let in_flight = self.done + 1;
        let due = |every: u32| every > 0 && in_flight.is_multiple_of(every);
        in_flight < o.steps
            && !due(o.eval_every)
            && !(o.checkpoint.is_some() && due(o.checkpoint_every))
    }

    /// Finishes a submitted step: statistics, evaluation and checkpoint when due, progress.
    pub fn finish(
        &mut self,
        pending: PendingStep,
        progress: &mut impl FnMut(&Progress),
    ) -> Result<()> {
        let opts = &self.opts;
        let stats = self.trainer.finish_step(pending)?;
        let step = self.done + 1;
        self.losses.push(stats.loss);
        self.ces.push(stats.ce);
        self.dropped.push(stats.dropped_fraction);
        self.expert_cvs.push(stats.expert_cv());
        let valid_bpb = if opts.eval_every > 0 && step.is_multiple_of(opts.eval_every) {
            let eval = evaluate(&self.trainer, &self.valid, opts.eval_units, opts.batch)?;
            let bpb = eval.bits_per_byte;
            self.valid_bpbs.push((stats.step, bpb));
            Some(bpb)
        } else {
            None
        };
        if let Some(path) = &opts.checkpoint
            && opts.checkpoint_every > 0
            && step.is_multiple_of(opts.checkpoint_every)
        {
            // Every rank takes part in reading the state back; rank 0 writes it.
            let checkpoint = self.trainer.checkpoint()?;
            if self.trainer.client().job().is_root() {
                checkpoint.save(path)?;
            }
        }
        let tokens = u64::from(step) * self.batch_rows();
        progress(&Progress {
            stats,
            step,
            steps: opts.steps,
            tokens_per_s: tokens as f64 / self.began.elapsed().as_secs_f64(),
            valid_bpb,
        });
        self.done = step;
        Ok(())
    }

    /// The final evaluation, checkpoint and report.
    /// Token rows a step trains on.
    fn batch_rows(&self) -> u64 {
        (self.opts.batch * self.trainer.config().unit_rows()) as u64
    }

    pub fn report(mut self) -> Result<TrainReport<M>> {
        let opts = &self.opts;
        let seconds = self.began.elapsed().as_secs_f64();
        // The trained state is saved before anything else can fail.
        if let Some(path) = &opts.checkpoint {
            let checkpoint = self.trainer.checkpoint()?;
            if self.trainer.client().job().is_root() {
                checkpoint.save(path)?;
            }
        }
        let last = evaluate(&self.trainer, &self.valid, opts.eval_units, opts.batch)?;
        let valid_bpb = last.bits_per_byte;
        let last_step = self.trainer.steps();
        if self.valid_bpbs.last().map(|v| v.0) != Some(last_step) {
            self.valid_bpbs.push((last_step, valid_bpb));
        }
        let params = self.trainer.params()?;
        let done = self.done;
        let tokens = u64::from(done) * self.batch_rows();
        Ok(TrainReport {
            config: *self.trainer.config(),
            devices: self.trainer.mesh().len(),
            steps: done,
            last_step,
            tokens,
            seconds,
            tokens_per_s: tokens as f64 / seconds.max(1e-9),
            mean_dropped_fraction: mean(&self.dropped),
            mean_expert_cv: mean(&self.expert_cvs),
            dropped_fractions: self.dropped,
            expert_cvs: self.expert_cvs,
            losses: self.losses,
            ces: self.ces,
            valid: self.valid_bpbs,
            valid_bpb,
            valid_dropped_fraction: last.dropped_fraction,
            unigram_bpb: self.unigram_bpb,
            parameters: self.parameters,
            split: self.trainer.split().to_string(),
            step_buffer_bytes: self.trainer.step_buffer_bytes(),
            calibration_seconds: self.calibration_seconds,
            speeds: self.speeds,
            balancing: self.balancing,
            params,
        })
    }
}
