//! A training run of the MoE LM on a corpus: batches, steps on the GPU trainer (its routing
//! groups dealt to the devices evenly, as given, or by their speeds measured on a copy of the
//! first batch: [`TrainOptions::balance`]), validation in bits per byte against the unigram
//! baseline, periodic checkpoints. `gangway train moe` and
//! Branch-Train-Merge both train through [`train`], as runs of a client of the caller's runtime
//! over its devices (a job's mesh under `mpirun`).

use super::{MoeLmConfig, MoeLmParams, MoeTrainer};
use crate::data::{Batches, Corpus, bits_per_byte, unigram_bits_per_byte};
use crate::device::DeviceList;
use crate::kernels::optim::AdamConfig;
use crate::sched::{Client, DispatchMode};
use crate::train::{Balance, Checkpoint, GroupSplit, PendingStep, StepStats};
use crate::{Error, Result};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// What a run does besides the model's own sizes.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub steps: u32,
    /// Tokens (windows) per step over all devices; a multiple of the device count.
    pub batch: usize,
    pub lr: f32,
    /// Fraction of every document held out for validation.
    pub valid_fraction: f64,
    /// Validation windows scored at the end (and at each evaluation), spread evenly.
    pub eval_windows: usize,
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
}

impl Default for TrainOptions {
    fn default() -> Self {
        Self {
            steps: 200,
            batch: 128,
            lr: 3e-3,
            valid_fraction: 0.1,
            eval_windows: 4096,
            eval_every: 0,
            checkpoint: None,
            checkpoint_every: 100,
            data_seed: 1,
            stop: None,
            dispatch: DispatchMode::Parallel,
            groups: None,
            balance: Balance::Even,
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

/// The outcome of a run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TrainReport {
    pub devices: usize,
    pub steps: u32,
    pub tokens: u64,
    pub seconds: f64,
    pub tokens_per_s: f64,
    /// Cross-entropy (nats) of every step's batch.
    pub losses: Vec<f64>,
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
    pub valid_bpb: f64,
    /// A unigram byte model fit on the training split, scored on the same validation split.
    pub unigram_bpb: f64,
    pub parameters: usize,
    /// Routing groups per device, in device order (`6,2`).
    #[serde(default)]
    pub split: String,
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
    /// The trained parameters (not in the JSON: [`MoeLmParams::save`] writes them).
    #[serde(skip)]
    pub params: MoeLmParams,
}

impl TrainReport {
    /// A report for parameters loaded from a checkpoint (no training happened in this process).
    pub fn loaded(params: &MoeLmParams) -> Self {
        Self {
            devices: 0,
            steps: 0,
            tokens: 0,
            seconds: 0.0,
            tokens_per_s: 0.0,
            losses: Vec::new(),
            mean_dropped_fraction: 0.0,
            dropped_fractions: Vec::new(),
            expert_cvs: Vec::new(),
            mean_expert_cv: 0.0,
            valid_bpb: f64::NAN,
            unigram_bpb: f64::NAN,
            parameters: params.count(),
            split: String::new(),
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

/// Mean validation cross-entropy in bits per byte over `windows` windows spread over `valid`,
/// in batches of `batch` (windows that do not fill a last batch are left out).
pub fn evaluate(trainer: &MoeTrainer, valid: &Corpus, windows: usize, batch: usize) -> Result<f64> {
    let context = trainer.config().context;
    crate::data::check_batch("evaluate", context, batch)?;
    let total = valid.window_count(context);
    let stride = (total / windows.max(1)).max(1);
    let mut ctx = Vec::with_capacity(batch * context);
    let mut tgt = Vec::with_capacity(batch);
    let (mut nats, mut scored) = (0.0, 0usize);
    for (inputs, target) in valid.windows(context, stride)? {
        ctx.extend_from_slice(&inputs);
        tgt.push(target);
        if tgt.len() == batch {
            nats += trainer.eval(&ctx, &tgt)? * batch as f64;
            scored += batch;
            ctx.clear();
            tgt.clear();
        }
    }
    if scored == 0 {
        return Err(Error::InvalidArgument {
            what: "evaluate",
            reason: format!(
                "{} of the validation split's {total} windows of {context} bytes were to be scored, fewer than one batch of {batch}",
                windows.min(total)
            ),
        });
    }
    Ok(bits_per_byte(nats / scored as f64))
}

/// Trains fresh `start` parameters on `corpus` over `devices`, as runs of `client` (the devices
/// must be its runtime's). Its steps go to the runtime's tracer when that is on.
pub fn train(
    client: &Client,
    devices: &(impl DeviceList + ?Sized),
    corpus: &Corpus,
    start: &MoeLmParams,
    opts: &TrainOptions,
    progress: impl FnMut(&Progress),
) -> Result<TrainReport> {
    run(client, devices, corpus, Start::Fresh(start), opts, progress)
}

/// Continues a run saved by [`train`] (parameters, Adam's moments and the step count) for
/// `opts.steps` more steps; the batches continue where the saved run's stopped.
pub fn resume(
    client: &Client,
    devices: &(impl DeviceList + ?Sized),
    corpus: &Corpus,
    checkpoint: &Checkpoint<MoeLmConfig>,
    opts: &TrainOptions,
    progress: impl FnMut(&Progress),
) -> Result<TrainReport> {
    run(
        client,
        devices,
        corpus,
        Start::Resume(checkpoint),
        opts,
        progress,
    )
}

enum Start<'a> {
    Fresh(&'a MoeLmParams),
    Resume(&'a Checkpoint<MoeLmConfig>),
}

fn run(
    client: &Client,
    devices: &(impl DeviceList + ?Sized),
    corpus: &Corpus,
    start: Start<'_>,
    opts: &TrainOptions,
    mut progress: impl FnMut(&Progress),
) -> Result<TrainReport> {
    let mut run = TrainingRun::new(client, devices, corpus, start, opts)?;
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
pub struct TrainingRun {
    trainer: MoeTrainer,
    opts: TrainOptions,
    valid: Corpus,
    unigram_bpb: f64,
    batches: Batches<'static>,
    began: Instant,
    losses: Vec<f64>,
    dropped: Vec<f64>,
    expert_cvs: Vec<f64>,
    /// Steps finished by this run.
    done: u32,
    /// The trainer's step count when the run began (a resumed run continues it).
    first_step: u32,
    parameters: usize,
    calibration_seconds: f64,
    speeds: Vec<f64>,
    balancing: String,
}

impl std::fmt::Debug for TrainingRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrainingRun")
            .field("trainer", &self.trainer)
            .field("done", &self.done)
            .field("steps", &self.opts.steps)
            .finish()
    }
}

impl TrainingRun {
    fn new(
        client: &Client,
        devices: &(impl DeviceList + ?Sized),
        corpus: &Corpus,
        start: Start<'_>,
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
        let config: MoeLmConfig = start.config;
        let devices = devices.mesh_devices();
        if opts.batch == 0 || !opts.batch.is_multiple_of(devices.len().max(1)) {
            return Err(Error::InvalidArgument {
                what: "train",
                reason: format!(
                    "a batch of {} tokens cannot be split over {} devices",
                    opts.batch,
                    devices.len()
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
            (Some((c, _)), _) => MoeTrainer::resume(client, &devices, c, 1)?,
            (None, Some(g)) => MoeTrainer::new(client, &devices, start, adam, g)?,
            (None, None) => MoeTrainer::new(client, &devices, start, adam, devices.len())?,
        };
        trainer.set_dispatch(opts.dispatch);
        let mut batches = Batches::owned(split.train, config.context, opts.batch, opts.data_seed)?;
        let calibration = Instant::now();
        let mut speeds = Vec::new();
        let mut balancing = String::new();
        match &opts.balance {
            Balance::Even => {}
            Balance::Counts(counts) => {
                trainer.set_split(GroupSplit::from_counts(counts.clone())?)?
            }
            Balance::Measured => {
                // On a copy of the first batch: the run's batches stay those of an even run.
                let (ctx, tgt) = batches
                    .clone()
                    .next()
                    .ok_or_else(|| Error::InvalidArgument {
                        what: "train",
                        reason: "no training batch to measure the devices' speeds on".into(),
                    })?;
                let balanced = trainer.balance(&ctx, &tgt)?;
                speeds = GroupSplit::relative(&balanced.speeds);
                balancing = balanced.to_string();
            }
        }
        let calibration_seconds = if speeds.is_empty() {
            0.0
        } else {
            calibration.elapsed().as_secs_f64()
        };
        // The saved run drew `done` batches: draw past them so the data continues, not repeats.
        for _ in 0..prior_steps {
            batches.next();
        }
        Ok(Self {
            first_step: trainer.steps(),
            trainer,
            opts: opts.clone(),
            valid: split.valid,
            unigram_bpb,
            batches,
            began: Instant::now(),
            losses: Vec::new(),
            dropped: Vec::new(),
            expert_cvs: Vec::new(),
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
        devices: &(impl DeviceList + ?Sized),
        corpus: &Corpus,
        start: &MoeLmParams,
        opts: &TrainOptions,
    ) -> Result<Self> {
        Self::new(client, devices, corpus, Start::Fresh(start), opts)
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
        let (ctx, tgt) = self.batches.next().ok_or_else(|| Error::InvalidArgument {
            what: "train",
            reason: "the batches ran out".into(),
        })?;
        self.trainer.submit_step(&ctx, &tgt).map(Some)
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
        self.losses.push(stats.ce);
        self.dropped.push(stats.dropped_fraction);
        self.expert_cvs.push(stats.expert_cv());
        let valid_bpb = if opts.eval_every > 0 && step.is_multiple_of(opts.eval_every) {
            Some(evaluate(
                &self.trainer,
                &self.valid,
                opts.eval_windows,
                opts.batch,
            )?)
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
        let tokens = u64::from(step) * opts.batch as u64;
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
    pub fn report(self) -> Result<TrainReport> {
        let opts = &self.opts;
        let seconds = self.began.elapsed().as_secs_f64();
        let valid_bpb = evaluate(&self.trainer, &self.valid, opts.eval_windows, opts.batch)?;
        let params = self.trainer.params()?;
        if let Some(path) = &opts.checkpoint {
            let checkpoint = self.trainer.checkpoint()?;
            if self.trainer.client().job().is_root() {
                checkpoint.save(path)?;
            }
        }
        let done = self.done;
        let tokens = u64::from(done) * opts.batch as u64;
        Ok(TrainReport {
            devices: self.trainer.devices().len(),
            steps: done,
            tokens,
            seconds,
            tokens_per_s: tokens as f64 / seconds.max(1e-9),
            mean_dropped_fraction: mean(&self.dropped),
            mean_expert_cv: mean(&self.expert_cvs),
            dropped_fractions: self.dropped,
            expert_cvs: self.expert_cvs,
            losses: self.losses,
            valid_bpb,
            unigram_bpb: self.unigram_bpb,
            parameters: self.parameters,
            split: self.trainer.split().to_string(),
            calibration_seconds: self.calibration_seconds,
            speeds: self.speeds,
            balancing: self.balancing,
            params,
        })
    }
}
