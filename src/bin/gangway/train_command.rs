//! `gangway train moe` and `gangway train lm`: one command body for every model ([`train`]).
//! A model's command only works out its [`Plan`] (how the run starts: fresh, resumed from a
//! checkpoint, or from given weights; the line that describes the model; the options only it
//! decides); the flags every model shares ([`TrainArgs`]), the progress bar, the live metrics and
//! the report are the same for all. The MoE LM's plan is here ([`train_moe`]); the
//! Transformer's, which reads more kinds of files, is in `lm_command.rs`.

use crate::cli::{TrainArgs, TrainMoeArgs};
use crate::{corpus_of, finish_training, mesh_of, print_groups, progress, write_json};
use anyhow::Result;
use gangway::data::Corpus;
use gangway::moe::{MoeLmConfig, MoeLmParams};
use gangway::sched::Runtime;
use gangway::train::{Checkpoint, Params, Progress, StepModel, TrainOptions, resume, train as run};

/// How a model's run begins, as its command worked it out from the flags.
pub(crate) struct Plan<M: StepModel> {
    /// The runtime client's name: the command's.
    pub(crate) name: &'static str,
    /// The parameters a fresh run starts from (a resumed run's are its checkpoint's).
    pub(crate) start: Params<M>,
    /// The checkpoint a resumed run continues.
    pub(crate) checkpoint: Option<Checkpoint<M>>,
    /// The line that describes the model and its data, printed before the first step.
    pub(crate) about: String,
    /// Whether the model routes tokens to experts: its progress and its report then show the
    /// dropped fraction and the experts' spread.
    pub(crate) routed: bool,
    /// What only the model decides (its steps, its batch unit, evaluation size, data seed,
    /// groups, scoring capacity); [`train`] fills in the shared flags.
    pub(crate) opts: TrainOptions,
}

/// Trains `plan` on the first `--devices` devices laid out as `--mesh` says.
pub(crate) fn train<M: StepModel>(
    runtime: &Runtime,
    args: &TrainArgs,
    corpus: &Corpus,
    plan: Plan<M>,
) -> Result<()> {
    let devices = &mesh_of(runtime, args.devices, args.mesh.as_deref())?;
    eprintln!("{}", plan.about);
    let opts = TrainOptions {
        lr: args.lr,
        eval_every: args.eval_every,
        checkpoint: args.checkpoint.clone(),
        checkpoint_every: args.checkpoint_every,
        dispatch: args.dispatch.into(),
        balance: args.balance.clone(),
        ..plan.opts
    };
    let pb = progress::bar(u64::from(opts.steps));
    let show = |p: &Progress| {
        crate::live_command::training_step(p, args.lr);
        pb.set_position(u64::from(p.step));
        let mut message = format!(
            "(step {})  loss {:.3}  {:.0} tok/s",
            p.stats.step, p.stats.loss, p.tokens_per_s
        );
        if plan.routed {
            message += &format!(
                "  dropped {:.1}%  expert spread (cv) {:.2}",
                p.stats.dropped_fraction * 100.0,
                p.stats.expert_cv()
            );
        }
        pb.set_message(message);
        if let Some(b) = p.valid_bpb {
            progress::line(
                &pb,
                format!("step {}: valid {b:.3} bits per byte", p.stats.step),
            );
        }
    };
    let client = runtime.client(plan.name, 1);
    let report = match &plan.checkpoint {
        Some(c) => {
            eprintln!("resuming after step {}", c.step());
            resume(&client, devices, corpus, c, &opts, show)?
        }
        None => run(&client, devices, corpus, &plan.start, &opts, show)?,
    };
    pb.finish();
    let first = report.ces.first().copied().unwrap_or(f64::NAN);
    let last = report.ces.last().copied().unwrap_or(f64::NAN);
    println!(
        "{} steps (to step {}), {} tokens in {:.1} s ({:.0} tokens/s) on {} devices",
        report.steps,
        report.last_step,
        report.tokens,
        report.seconds,
        report.tokens_per_s,
        report.devices
    );
    print_groups(&report.split, &report.balancing, report.calibration_seconds);
    println!(
        "a step's buffers: {:.2} MiB on its largest device (parameters and Adam's moments apart)",
        report.step_buffer_bytes as f64 / (1u64 << 20) as f64
    );
    println!("training cross-entropy: {first:.3} → {last:.3} nats");
    if plan.routed {
        println!(
            "mean dropped fraction: {:.2}%; mean spread of kept tokens over the experts (cv): \
             {:.3}",
            report.mean_dropped_fraction * 100.0,
            report.mean_expert_cv
        );
    }
    finish_training(
        report.valid_bpb,
        report.unigram_bpb,
        args.checkpoint.as_deref(),
    );
    write_json(args.json.as_deref(), &report)?;
    Ok(())
}

/// `gangway train moe`: the MoE LM, fresh, resumed (`--resume`) or from a checkpoint's weights
/// (`--init`).
pub(crate) fn train_moe(runtime: &Runtime, args: &TrainMoeArgs) -> Result<()> {
    let shared = &args.train;
    let corpus = corpus_of(&shared.corpus)?;
    let checkpoint = shared
        .resume
        .as_deref()
        .map(Checkpoint::<MoeLmConfig>::load)
        .transpose()?;
    let start = match (&checkpoint, &shared.init) {
        (Some(c), _) => c.params.clone(),
        (None, Some(path)) => {
            eprintln!(
                "starting from the weights in {}, with fresh optimizer state",
                path.display()
            );
            Checkpoint::<MoeLmConfig>::load(path)?.params
        }
        (None, None) => MoeLmParams::init(args.model.config())?,
    };
    let c = start.config;
    let about = format!(
        "MoE LM: {} parameters, {} experts (top-{}, capacity factor {}) over {} devices; {} KiB \
         of text in {:?}",
        start.count(),
        c.experts,
        c.top_k,
        c.capacity_factor,
        shared.devices,
        corpus.len_bytes() >> 10,
        corpus.domains()
    );
    let opts = TrainOptions {
        steps: args.steps,
        batch: args.batch,
        eval_capacity: shared.eval_capacity.factor(c.experts, c.top_k),
        data_seed: args.model.seed.wrapping_add(1),
        groups: shared.groups,
        ..TrainOptions::default()
    };
    let plan = Plan {
        name: "train moe",
        start,
        checkpoint,
        about,
        routed: true,
        opts,
    };
    train(runtime, shared, &corpus, plan)
}
