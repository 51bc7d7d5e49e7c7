//! The `gangway` command line.

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use gangway::bench::{self, matmul as mm_bench};
use gangway::device::{parse_backends, parse_virtual_devices};
use gangway::kernels::matmul::MatmulVariant;
use gangway::kernels::router::RouterConfig;
use gangway::moe_layer::{MoeLayerConfig, run_expert_parallel};
use gangway::pipeline::ScheduleKind;
use gangway::trace::Tracer;
use gangway::{DType, Device, DiscoveryOptions, discover};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "gangway",
    version,
    about = "Pathways-style sharded ML on every GPU, through WebGPU"
)]
struct Cli {
    #[command(flatten)]
    devices: DeviceArgs,
    /// Write a Chrome trace-event JSON of everything dispatched (open in Perfetto or
    /// chrome://tracing). Commands that dispatch nothing through the runtime write only the devices.
    #[arg(long, global = true, value_name = "PATH")]
    trace: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug)]
struct DeviceArgs {
    /// Backends to search, e.g. `vulkan,gl` [default: $WGPU_BACKEND, else all]
    #[arg(long, global = true, value_parser = parse_backends_arg)]
    backends: Option<wgpu::Backends>,
    /// Devices to make from each adapter [default: $GANGWAY_VIRTUAL_DEVICES, else 1]
    #[arg(long, global = true, value_parser = parse_virtual_arg)]
    virtual_devices: Option<usize>,
}

fn parse_backends_arg(s: &str) -> Result<wgpu::Backends, String> {
    parse_backends(s).map_err(|e| e.to_string())
}

fn parse_virtual_arg(s: &str) -> Result<usize, String> {
    parse_virtual_devices("--virtual-devices", s).map_err(|e| e.to_string())
}

impl DeviceArgs {
    fn discover(&self) -> Result<Vec<Device>> {
        let mut opts = DiscoveryOptions::from_env()?;
        if let Some(b) = self.backends {
            opts.backends = b;
        }
        if let Some(n) = self.virtual_devices {
            opts.virtual_devices = n;
        }
        Ok(discover(&opts)?)
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List every device: adapter, backend, type, driver, limits and features.
    Devices {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run one expert-parallel MoE layer over every device and check it against a CPU reference.
    Demo(DemoArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Pipeline-parallel schedules: ASCII timeline, bubble (theory vs simulated), peak activations.
    Pipeline(PipelineArgs),
    /// Training.
    #[command(subcommand)]
    Train(TrainCommand),
    /// Evaluation.
    #[command(subcommand)]
    Eval(EvalCommand),
}

#[derive(Subcommand, Debug)]
enum TrainCommand {
    /// A byte-level MoE language model, experts sharded over the devices (expert parallelism).
    Moe(TrainMoeArgs),
    /// Branch-Train-Merge: a seed LM, then one expert LM per domain, each on its own device.
    Btm(BtmArgs),
    /// Branch a new ELM, for a new domain, from the average of the ELMs `train btm` saved.
    BtmBranch(BtmBranchArgs),
}

#[derive(Args, Debug)]
struct BtmBranchArgs {
    /// The new domain's text (a directory or files); the ELM is named after the directory.
    #[arg(long, num_args = 1.., required = true)]
    domain: Vec<PathBuf>,
    /// Where `train btm` saved its ELMs; the new one is saved there too.
    #[arg(long, default_value = "btm-checkpoints")]
    checkpoint_dir: PathBuf,
    #[arg(long, default_value_t = 200)]
    branch_steps: u32,
    #[arg(long, default_value_t = 128)]
    batch: usize,
    #[arg(long, default_value_t = 3e-3)]
    lr: f32,
}

#[derive(Subcommand, Debug)]
enum EvalCommand {
    /// Per-domain validation bits per byte of the models `train btm` saved.
    Btm(BtmArgs),
}

/// The model's sizes (a checkpoint's own sizes win when resuming).
#[derive(Args, Debug, Clone)]
struct ModelArgs {
    #[arg(long, default_value_t = 8)]
    experts: usize,
    #[arg(long, default_value_t = 2)]
    top_k: usize,
    #[arg(long, default_value_t = 1.25)]
    capacity_factor: f32,
    /// Bytes of context per token.
    #[arg(long, default_value_t = 16)]
    context: usize,
    #[arg(long, default_value_t = 16)]
    embed: usize,
    /// Width of the residual stream.
    #[arg(long, default_value_t = 64)]
    model: usize,
    /// Hidden width of each expert.
    #[arg(long, default_value_t = 128)]
    hidden: usize,
    #[arg(long, default_value_t = 1)]
    blocks: usize,
    /// Weight α of the load-balancing loss.
    #[arg(long, default_value_t = 0.01)]
    aux_alpha: f32,
    /// Weight of the router z-loss.
    #[arg(long, default_value_t = 0.0)]
    z_loss: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl ModelArgs {
    fn config(&self) -> gangway::moe::MoeLmConfig {
        gangway::moe::MoeLmConfig {
            context: self.context,
            embed: self.embed,
            model: self.model,
            hidden: self.hidden,
            experts: self.experts,
            top_k: self.top_k,
            capacity_factor: self.capacity_factor,
            blocks: self.blocks,
            aux_alpha: self.aux_alpha,
            z_loss: self.z_loss,
            normalize_gates: true,
            seed: self.seed,
        }
    }
}

#[derive(Args, Debug)]
struct BtmArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// One directory of text per domain [default: the bundled corpora].
    #[arg(long, num_args = 1..)]
    domains: Vec<PathBuf>,
    /// Devices to branch on (the first N found; ELMs beyond N share devices).
    #[arg(long, default_value_t = 1)]
    devices: usize,
    #[arg(long, default_value_t = 100)]
    seed_steps: u32,
    #[arg(long, default_value_t = 200)]
    branch_steps: u32,
    /// Tokens per step.
    #[arg(long, default_value_t = 128)]
    batch: usize,
    #[arg(long, default_value_t = 3e-3)]
    lr: f32,
    /// Validation windows scored per document.
    #[arg(long, default_value_t = 256)]
    eval_windows: usize,
    /// Where the seed, every ELM and the baselines are saved (and loaded by `eval btm`).
    #[arg(long, default_value = "btm-checkpoints")]
    checkpoint_dir: PathBuf,
    /// Write the evaluation as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct TrainMoeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Devices to use (the first N found; the experts are split over them).
    #[arg(long, default_value_t = 1)]
    devices: usize,
    #[arg(long, default_value_t = 300)]
    steps: u32,
    /// Tokens per step over all devices.
    #[arg(long, default_value_t = 128)]
    batch: usize,
    #[arg(long, default_value_t = 3e-3)]
    lr: f32,
    /// Text files or directories to train on [default: the bundled corpora, all domains].
    #[arg(long, num_args = 1..)]
    corpus: Vec<PathBuf>,
    /// Evaluate validation bits per byte every N steps (0: only at the end).
    #[arg(long, default_value_t = 0)]
    eval_every: u32,
    /// Save a checkpoint here every --checkpoint-every steps and at the end.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    #[arg(long, default_value_t = 100)]
    checkpoint_every: u32,
    /// Continue from this checkpoint (its model sizes win over the flags).
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct PipelineArgs {
    /// gpipe, 1f1b, interleaved or zb-h1.
    #[arg(long, default_value = "1f1b")]
    schedule: ScheduleKind,
    #[arg(long, default_value_t = 4)]
    stages: usize,
    #[arg(long, default_value_t = 8)]
    microbatches: usize,
    /// Model chunks per device (interleaved only).
    #[arg(long, default_value_t = 2)]
    chunks: usize,
    /// Simulate with the cost model (the default).
    #[arg(long, conflicts_with = "run")]
    simulate: bool,
    /// Run a pipelined MLP training step on the devices and measure the bubble.
    #[arg(long)]
    run: bool,
    /// Cost-model times per op, in microseconds: forward, backward (input grad), weight grad.
    #[arg(long, value_delimiter = ',', default_values_t = [100.0, 100.0, 100.0])]
    costs_us: Vec<f64>,
    /// Columns of the ASCII timeline.
    #[arg(long, default_value_t = 100)]
    width: usize,
}

#[derive(Args, Debug)]
struct DemoArgs {
    #[arg(long, default_value_t = 256)]
    tokens_per_device: usize,
    /// Experts (rounded up to a multiple of the device count).
    #[arg(long, default_value_t = 8)]
    experts: usize,
    #[arg(long, default_value_t = 2)]
    top_k: usize,
    #[arg(long, default_value_t = 1.25)]
    capacity_factor: f32,
    #[arg(long, default_value_t = 64)]
    d_model: usize,
    #[arg(long, default_value_t = 128)]
    d_out: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// GFLOP/s of every matmul variant on every adapter.
    Matmul(MatmulBenchArgs),
    /// Pathways' dispatch micro-benchmarks: chains, granularity, shares, tracing cost.
    Dispatch(DispatchBenchArgs),
    /// Every pipeline schedule on real devices: step time, throughput, bubble measured vs simulated.
    Pipeline(PipelineBenchArgs),
    /// MoE training steps: MoE vs dense, step time as experts grow, all-to-all share per device count.
    Moe(MoeBenchArgs),
    /// Branch-Train-Merge's branch phase: tokens/s on N devices against 1.
    Btm(BtmArgs),
}

#[derive(Args, Debug)]
struct MoeBenchArgs {
    /// Tokens per training step.
    #[arg(long, default_value_t = 1024)]
    tokens: usize,
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4, 8, 16])]
    experts: Vec<usize>,
    /// Device counts of the all-to-all section (needs that many devices; see --virtual-devices).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4, 8])]
    devices: Vec<usize>,
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct PipelineBenchArgs {
    #[arg(long, default_value_t = 4)]
    stages: usize,
    #[arg(long, value_delimiter = ',', default_values_t = [4, 8, 16])]
    microbatches: Vec<usize>,
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct DispatchBenchArgs {
    /// Longest chain (one device per stage; capped at the device count, see --virtual-devices).
    #[arg(long, default_value_t = 8)]
    max_stages: usize,
    /// Runs per timed repetition.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct MatmulBenchArgs {
    /// Square sizes to run (a tall-skinny expert shape is always added).
    #[arg(long, value_delimiter = ',', default_values_t = [256, 512, 1024])]
    sizes: Vec<usize>,
    /// Variants to run: naive, tiled, vec4.
    #[arg(long, value_delimiter = ',', default_values_t = ["naive".to_string(), "tiled".into(), "vec4".into()])]
    variants: Vec<String>,
    #[arg(long, value_enum, default_value = "f32")]
    dtype: DTypeArg,
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum DTypeArg {
    F32,
    F16,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let tracer = if cli.trace.is_some() {
        Tracer::new()
    } else {
        Tracer::off()
    };
    let mut names: Vec<(usize, String)> = Vec::new();
    let mut discover = || -> Result<Vec<Device>> {
        let found = cli.devices.discover()?;
        names = found.iter().map(|d| (d.id(), d.label())).collect();
        Ok(found)
    };
    match &cli.command {
        Command::Devices { json } => devices(&discover()?, *json)?,
        Command::Demo(args) => demo(&discover()?, args)?,
        Command::Bench(BenchCommand::Matmul(args)) => bench_matmul(&discover()?, args)?,
        Command::Bench(BenchCommand::Dispatch(args)) => {
            bench_dispatch(&discover()?, args, &tracer)?
        }
        Command::Bench(BenchCommand::Pipeline(args)) => bench_pipeline(&discover()?, args)?,
        Command::Train(TrainCommand::Moe(args)) => train_moe(&discover()?, args, &tracer)?,
        Command::Bench(BenchCommand::Moe(args)) => bench_moe(&discover()?, args)?,
        Command::Bench(BenchCommand::Btm(args)) => bench_btm(&discover()?, args)?,
        Command::Train(TrainCommand::Btm(args)) => train_btm(&discover()?, args, &tracer)?,
        Command::Train(TrainCommand::BtmBranch(args)) => train_btm_branch(&discover()?, args)?,
        Command::Eval(EvalCommand::Btm(args)) => eval_btm(&discover()?, args)?,
        Command::Pipeline(args) => {
            let devices = if args.run { discover()? } else { Vec::new() };
            names = pipeline(args, &devices, &tracer)?;
        }
    }
    if let Some(path) = &cli.trace {
        let events = tracer.take_events();
        std::fs::write(path, gangway::trace::chrome::to_string(&events, &names))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {} events to {}", events.len(), path.display());
    }
    Ok(())
}

fn bench_dispatch(devices: &[Device], args: &DispatchBenchArgs, tracer: &Tracer) -> Result<()> {
    use gangway::bench::dispatch::{self as db, DispatchBenchOptions};
    let o = DispatchBenchOptions {
        max_stages: args.max_stages,
        runs: args.runs,
        warmup: args.warmup,
        reps: args.reps,
    };
    if devices.len() < args.max_stages {
        eprintln!(
            "note: {} devices, so chains stop at {} stages (try --virtual-devices {})",
            devices.len(),
            devices.len(),
            args.max_stages.div_ceil(devices.len().max(1)) * 2
        );
    }
    let show = |r: &db::DispatchResult| {
        eprintln!(
            "{} {} {}: {:.0} computations/s {}",
            r.suite, r.case, r.mode, r.computations_per_s, r.note
        )
    };
    let mut results = db::chain_suite(devices, &o, show)?;
    results.extend(db::granularity_suite(devices, &o, show)?);
    results.extend(db::shares_suite(devices, &o, show)?);
    results.extend(db::tracing_suite(devices, &o, tracer, show)?);
    print!("{}", db::table(&results));
    write_json(args.json.as_deref(), &results)?;
    Ok(())
}

fn train_moe(devices: &[Device], args: &TrainMoeArgs, tracer: &Tracer) -> Result<()> {
    use gangway::data::Corpus;
    use gangway::moe::training::{TrainOptions, resume, train};
    use gangway::moe::{MoeLmParams, TrainerCheckpoint};
    if args.devices == 0 || args.devices > devices.len() {
        bail!(
            "--devices {} but {} devices were found (try --virtual-devices {})",
            args.devices,
            devices.len(),
            args.devices.div_ceil(devices.len().max(1))
        );
    }
    let devices = &devices[..args.devices];
    let corpus = if args.corpus.is_empty() {
        Corpus::bundled_all()?
    } else {
        Corpus::from_paths(&args.corpus)?
    };
    let checkpoint = args
        .resume
        .as_deref()
        .map(TrainerCheckpoint::load)
        .transpose()?;
    let start = match &checkpoint {
        Some(c) => c.params.clone(),
        None => MoeLmParams::init(args.model.config())?,
    };
    let c = start.config;
    eprintln!(
        "MoE LM: {} parameters, {} experts (top-{}, capacity factor {}) over {} devices; {} KiB of text in {:?}",
        start.count(),
        c.experts,
        c.top_k,
        c.capacity_factor,
        devices.len(),
        corpus.len_bytes() >> 10,
        corpus.domains()
    );
    let opts = TrainOptions {
        steps: args.steps,
        batch: args.batch,
        lr: args.lr,
        eval_every: args.eval_every,
        checkpoint: args.checkpoint.clone(),
        checkpoint_every: args.checkpoint_every,
        data_seed: args.model.seed.wrapping_add(1),
        ..TrainOptions::default()
    };
    let show = |p: &gangway::moe::training::Progress| {
        const WIDTH: usize = 30;
        let done = ((p.step as usize * WIDTH) / p.steps.max(1) as usize).min(WIDTH);
        let eval = p
            .valid_bpb
            .map(|b| format!("  valid {b:.3} bpb"))
            .unwrap_or_default();
        eprint!(
            "\r[{}{}] {}/{} (step {})  loss {:.3}  {:.0} tok/s  dropped {:.1}%{eval}   ",
            "#".repeat(done),
            "-".repeat(WIDTH - done),
            p.step,
            p.steps,
            p.stats.step,
            p.stats.loss,
            p.tokens_per_s,
            p.stats.dropped_fraction * 100.0
        );
        if p.valid_bpb.is_some() {
            eprintln!();
        }
    };
    let tracer = tracer.is_on().then(|| tracer.clone());
    let report = match &checkpoint {
        Some(c) => {
            eprintln!("resuming after step {}", c.step);
            resume(devices, &corpus, c, &opts, tracer, show)?
        }
        None => train(devices, &corpus, &start, &opts, tracer, show)?,
    };
    eprintln!();
    let first = report.losses.first().copied().unwrap_or(f64::NAN);
    let last = report.losses.last().copied().unwrap_or(f64::NAN);
    println!(
        "{} steps, {} tokens in {:.1} s ({:.0} tokens/s) on {} devices",
        report.steps, report.tokens, report.seconds, report.tokens_per_s, report.devices
    );
    println!("training cross-entropy: {first:.3} → {last:.3} nats");
    println!(
        "mean dropped fraction: {:.2}%",
        report.mean_dropped_fraction * 100.0
    );
    println!(
        "validation: {:.3} bits per byte; unigram byte model of the training data: {:.3} ({:+.3})",
        report.valid_bpb,
        report.unigram_bpb,
        report.valid_bpb - report.unigram_bpb
    );
    if let Some(path) = &args.checkpoint {
        println!("checkpoint: {}", path.display());
    }
    write_json(args.json.as_deref(), &report)?;
    Ok(())
}

fn btm_setup(
    devices: &[Device],
    args: &BtmArgs,
) -> Result<(
    Vec<Device>,
    gangway::data::Corpus,
    gangway::btm::experiment::BtmOptions,
)> {
    use gangway::btm::{EnsembleOptions, experiment::BtmOptions};
    use gangway::data::Corpus;
    use gangway::moe::training::TrainOptions;
    if args.devices == 0 || args.devices > devices.len() {
        bail!(
            "--devices {} but {} devices were found (try --virtual-devices)",
            args.devices,
            devices.len()
        );
    }
    let corpus = if args.domains.is_empty() {
        Corpus::bundled_all()?
    } else {
        Corpus::from_paths(&args.domains)?
    };
    let opts = BtmOptions {
        seed_steps: args.seed_steps,
        branch_steps: args.branch_steps,
        train: TrainOptions {
            batch: args.batch,
            lr: args.lr,
            data_seed: args.model.seed.wrapping_add(1),
            ..TrainOptions::default()
        },
        eval_windows_per_doc: args.eval_windows,
        ensemble: EnsembleOptions::default(),
    };
    Ok((devices[..args.devices].to_vec(), corpus, opts))
}

fn print_btm_eval(
    device: &Device,
    corpus: &gangway::data::Corpus,
    models: &gangway::btm::experiment::BtmModels,
    opts: &gangway::btm::experiment::BtmOptions,
    json: Option<&std::path::Path>,
) -> Result<()> {
    use gangway::btm::experiment::{evaluate, table};
    let scores = evaluate(device, corpus, models, opts)?;
    print!("{}", table(&scores));
    let wins = scores
        .iter()
        .filter(|s| s.ensemble < s.random_split_ensemble)
        .count();
    println!(
        "domain split beats random split on {wins} of {} domains (the paper finds it does)",
        scores.len()
    );
    write_json(json, &scores)?;
    Ok(())
}

fn train_btm(devices: &[Device], args: &BtmArgs, tracer: &Tracer) -> Result<()> {
    use gangway::btm::experiment::train_all;
    use gangway::moe::MoeLmParams;
    let (devices, corpus, opts) = btm_setup(devices, args)?;
    let init = MoeLmParams::init(args.model.config())?;
    eprintln!(
        "BTM over domains {:?} on {} devices: seed {} steps, branch {} steps per domain",
        corpus.domains(),
        devices.len(),
        opts.seed_steps,
        opts.branch_steps
    );
    let models = train_all(
        &devices,
        &corpus,
        &init,
        &opts,
        &args.checkpoint_dir,
        tracer.is_on().then(|| tracer.clone()),
        |phase, i, step| eprint!("\r{phase} {i}: step {step}      "),
    )?;
    eprintln!();
    let tokens: u64 = models.elms.iter().map(|e| e.report.tokens).sum();
    println!(
        "branch phase: {} ELMs, {tokens} tokens in {:.1} s ({:.0} tokens/s over {} devices)",
        models.elms.len(),
        models.branch_seconds,
        tokens as f64 / models.branch_seconds.max(1e-9),
        devices.len()
    );
    println!("checkpoints: {}", args.checkpoint_dir.display());
    print_btm_eval(&devices[0], &corpus, &models, &opts, args.json.as_deref())
}

fn bench_btm(devices: &[Device], args: &BtmArgs) -> Result<()> {
    use gangway::bench::btm;
    use gangway::moe::MoeLmParams;
    use gangway::moe::training::TrainOptions;
    let (devices, corpus, opts) = btm_setup(devices, args)?;
    let domains = corpus.by_domain();
    let seed = MoeLmParams::init(args.model.config())?;
    let train = TrainOptions {
        steps: args.branch_steps,
        ..opts.train
    };
    let results = btm::run(&devices, &domains, &seed, &train, &[devices.len()], |r| {
        eprintln!(
            "{} devices: {:.0} tokens/s ({:.2}× one device)",
            r.devices, r.tokens_per_s, r.speedup
        )
    })?;
    print!("{}", btm::table(&results));
    write_json(args.json.as_deref(), &results)?;
    Ok(())
}

fn train_btm_branch(devices: &[Device], args: &BtmBranchArgs) -> Result<()> {
    use gangway::btm::{average, branch, save_elms};
    use gangway::data::Corpus;
    use gangway::moe::MoeLmParams;
    use gangway::moe::training::TrainOptions;
    let device = devices.first().context("no device")?;
    let mut elms = Vec::new();
    for entry in std::fs::read_dir(&args.checkpoint_dir)
        .with_context(|| format!("reading {}", args.checkpoint_dir.display()))?
    {
        let name = entry?.file_name().to_string_lossy().to_string();
        if let Some(domain) = name
            .strip_prefix("elm-")
            .and_then(|n| n.strip_suffix(".ckpt"))
            .filter(|d| !d.starts_with("random"))
        {
            elms.push((
                domain.to_string(),
                MoeLmParams::load(&args.checkpoint_dir.join(&name))?,
            ));
        }
    }
    if elms.is_empty() {
        bail!(
            "no ELMs in {} (run `gangway train btm` first)",
            args.checkpoint_dir.display()
        );
    }
    let averaged = average(&elms.iter().map(|(_, p)| p).collect::<Vec<_>>(), None)?;
    let corpus = Corpus::from_paths(&args.domain)?;
    let name = corpus.domains().join("+");
    eprintln!(
        "branching {name:?} from the average of {:?}",
        elms.iter().map(|(d, _)| d).collect::<Vec<_>>()
    );
    let opts = TrainOptions {
        steps: args.branch_steps,
        batch: args.batch,
        lr: args.lr,
        ..TrainOptions::default()
    };
    let new = branch(
        std::slice::from_ref(device),
        &[(name, corpus)],
        &averaged,
        &opts,
        None,
        |_, s| eprint!("\rstep {s}   "),
    )?;
    eprintln!();
    let paths = save_elms(&args.checkpoint_dir, &new)?;
    for (e, path) in new.iter().zip(&paths) {
        println!(
            "ELM {:?}: validation {:.3} bits per byte (unigram {:.3}), saved to {}",
            e.domain,
            e.report.valid_bpb,
            e.report.unigram_bpb,
            path.display()
        );
    }
    Ok(())
}

fn eval_btm(devices: &[Device], args: &BtmArgs) -> Result<()> {
    use gangway::btm::experiment::load_all;
    let (devices, corpus, opts) = btm_setup(devices, args)?;
    let models = load_all(&args.checkpoint_dir, &corpus.domains())?;
    print_btm_eval(&devices[0], &corpus, &models, &opts, args.json.as_deref())
}

fn bench_moe(devices: &[Device], args: &MoeBenchArgs) -> Result<()> {
    use gangway::bench::moe as mb;
    let o = mb::MoeBenchOptions {
        tokens: args.tokens,
        experts: args.experts.clone(),
        devices: args.devices.clone(),
        warmup: args.warmup,
        reps: args.reps,
        ..mb::MoeBenchOptions::default()
    };
    let results = mb::run(devices, &o, |r| {
        eprintln!("{} {}: {:.2} ms", r.section, r.case, r.step_s * 1e3)
    })?;
    print!("{}", mb::table(&results));
    write_json(args.json.as_deref(), &results)?;
    Ok(())
}

fn bench_pipeline(devices: &[Device], args: &PipelineBenchArgs) -> Result<()> {
    use gangway::bench::pipeline as pb;
    let results = pb::run(
        devices,
        args.stages,
        &args.microbatches,
        args.warmup,
        args.reps,
        |r| {
            eprintln!(
                "{} p={} m={}: {:.2} ms, bubble {:.1}% measured / {:.1}% simulated",
                r.schedule,
                r.stages,
                r.microbatches,
                r.step_ms,
                r.bubble_measured * 100.0,
                r.bubble_simulated * 100.0
            )
        },
    )?;
    print!("{}", pb::table(&results));
    write_json(args.json.as_deref(), &results)?;
    Ok(())
}

/// Runs one pipelined training step on the devices and prints measured beside simulated.
fn pipeline_run(
    args: &PipelineArgs,
    devices: &[Device],
    tracer: &Tracer,
) -> Result<Vec<(usize, String)>> {
    use gangway::pipeline::timeline;
    let (r, report) = gangway::bench::pipeline::run_case(
        devices,
        args.schedule,
        args.stages,
        args.microbatches,
        args.chunks,
        tracer,
    )?;
    let chunks = r.chunks;
    println!(
        "{} on {} devices, {} microbatches{}: one MLP training step ({} layers of {}, {} rows per microbatch)",
        args.schedule.name(),
        args.stages,
        args.microbatches,
        if chunks > 1 {
            format!(", {chunks} chunks per device")
        } else {
            String::new()
        },
        (args.stages * chunks).max(8),
        gangway::bench::pipeline::WIDTH,
        gangway::bench::pipeline::ROWS,
    );
    for (_, name) in &report.device_names {
        println!("  {name}");
    }
    let start = report
        .events
        .iter()
        .filter(|e| e.lane == gangway::trace::Lane::Compute)
        .map(|e| e.start_ns)
        .min()
        .unwrap_or(0);
    println!("measured:");
    print!(
        "{}",
        timeline(
            &report.events,
            args.stages,
            start..start + report.makespan_ns,
            args.width
        )
    );
    println!("simulated with this run's op times:");
    print!("{}", report.simulated.timeline(args.width));
    println!(
        "bubble: {:.1}% measured, {:.1}% simulated, {:.1}% textbook",
        r.bubble_measured * 100.0,
        r.bubble_simulated * 100.0,
        r.bubble_textbook * 100.0
    );
    let c = &report.measured;
    println!(
        "step {:.2} ms; mean op µs F {:.0} B {:.0} W {:.0}, transfer {:.0}",
        r.step_ms,
        c.forward_ns as f64 / 1e3,
        c.backward_ns as f64 / 1e3,
        c.weight_grad_ns as f64 / 1e3,
        c.latency_ns as f64 / 1e3
    );
    println!("peak activations per stage: {:?}", r.peak_activations);
    println!(
        "max |pipelined − single-device| weight: {:.1e}",
        r.max_weight_error
    );
    if r.max_weight_error > 1e-3 {
        bail!("the pipelined step differs from the single-device step");
    }
    Ok(report.device_names)
}

/// Simulates (or runs) one schedule; returns the trace's process names (one per stage).
fn pipeline(
    args: &PipelineArgs,
    devices: &[Device],
    tracer: &Tracer,
) -> Result<Vec<(usize, String)>> {
    use gangway::pipeline::{Costs, Schedule, bubble_formula, simulate, validate};
    if args.run {
        return pipeline_run(args, devices, tracer);
    }
    let chunks = if args.schedule == ScheduleKind::Interleaved {
        args.chunks
    } else {
        1
    };
    let schedule = Schedule::new(args.schedule, args.stages, args.microbatches, chunks)?;
    let validation = validate(&schedule)?;
    let [f, b, w] = match args.costs_us[..] {
        [f, b, w] if [f, b, w].iter().all(|c| c.is_finite() && *c >= 0.0) => [f, b, w],
        _ => bail!("--costs-us takes three non-negative numbers: forward,backward,weight-grad"),
    };
    let ns = |us: f64| (us * 1e3).round() as u64;
    let sim = simulate(&schedule, &Costs::compute_only(ns(f), ns(b), ns(w)))?;
    println!(
        "{} on {} stages, {} microbatches{} (simulated, F/B/W = {f}/{b}/{w} µs)",
        args.schedule.name(),
        args.stages,
        args.microbatches,
        if chunks > 1 {
            format!(", {chunks} chunks per device")
        } else {
            String::new()
        }
    );
    print!("{}", sim.timeline(args.width));
    println!(
        "bubble: {:.1}% of total time (textbook {:.1}%{})",
        sim.bubble_fraction * 100.0,
        bubble_formula(args.schedule, args.stages, args.microbatches, chunks) * 100.0,
        if args.schedule == ScheduleKind::ZbH1 {
            ", which assumes F = B = W"
        } else {
            ""
        }
    );
    println!("makespan: {:.3} ms", sim.makespan_ns as f64 / 1e6);
    println!(
        "peak activations per stage: {:?}",
        validation.peak_activations
    );
    for e in &sim.events {
        tracer.emit(e.clone());
    }
    Ok((0..args.stages)
        .map(|s| (s, format!("stage {s}")))
        .collect())
}

fn devices(devices: &[Device], json: bool) -> Result<()> {
    if json {
        let infos: Vec<_> = devices.iter().map(Device::info).collect();
        println!("{}", serde_json::to_string_pretty(&infos)?);
        return Ok(());
    }
    let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
    let rows: Vec<Vec<String>> = devices
        .iter()
        .map(|d| {
            let i = d.info();
            vec![
                i.id.to_string(),
                format!("{}/{}", i.adapter, i.virtual_index),
                i.name.clone(),
                i.backend.clone(),
                i.device_type.clone(),
                format!("{} {}", i.driver, i.driver_info).trim().to_string(),
                format!("{} MiB", i.limits.max_storage_buffer_binding_size >> 20),
                format!("{} KiB", i.limits.max_compute_workgroup_storage_size >> 10),
                yes(i.features.timestamp_query),
                yes(i.features.shader_f16),
                yes(i.features.subgroups),
            ]
        })
        .collect();
    print!(
        "{}",
        bench::markdown_table(
            &[
                "id",
                "adapter/virtual",
                "name",
                "backend",
                "type",
                "driver",
                "max binding",
                "workgroup mem",
                "timestamps",
                "f16",
                "subgroups",
            ],
            &rows
        )
    );
    Ok(())
}

fn demo(devices: &[Device], args: &DemoArgs) -> Result<()> {
    let n = devices.len();
    let experts = args.experts.div_ceil(n) * n;
    let cfg = MoeLayerConfig {
        tokens_per_device: args.tokens_per_device,
        d_model: args.d_model,
        d_out: args.d_out,
        experts,
        router: RouterConfig {
            experts,
            k: args.top_k,
            capacity_factor: args.capacity_factor,
            normalize_gates: true,
        },
        seed: args.seed,
    };
    let report = run_expert_parallel(devices, &cfg)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("expert-parallel MoE layer over {n} devices:");
        for d in &report.devices {
            println!("  {d}");
        }
        println!(
            "{} tokens, {} experts, top-{}, capacity {} per expert per device",
            report.tokens, report.experts, args.top_k, report.capacity_per_device
        );
        println!("tokens per expert: {:?}", report.tokens_per_expert);
        println!(
            "dropped: {:.2}%   aux loss: {:.4}   time: {:.3} s",
            report.dropped_fraction * 100.0,
            report.aux_loss,
            report.seconds
        );
        println!("max |GPU - CPU reference|: {:.2e}", report.max_abs_error);
    }
    if report.max_abs_error > 1e-3 {
        bail!(
            "the GPU result differs from the CPU reference by {}",
            report.max_abs_error
        );
    }
    Ok(())
}

fn bench_matmul(devices: &[Device], args: &MatmulBenchArgs) -> Result<()> {
    let mut variants = args
        .variants
        .iter()
        .map(|v| MatmulVariant::from_name(v).with_context(|| format!("unknown variant {v:?}")))
        .collect::<Result<Vec<_>>>()?;
    variants.sort();
    let dtype = match args.dtype {
        DTypeArg::F32 => DType::F32,
        DTypeArg::F16 => DType::F16,
    };
    // One device per adapter: virtual devices of one adapter share its hardware.
    let adapters: Vec<Device> = devices
        .iter()
        .filter(|d| d.info().virtual_index == 0)
        .cloned()
        .collect();
    let cases = mm_bench::standard_cases(dtype, &args.sizes);
    let results = mm_bench::run(&adapters, &cases, &variants, args.warmup, args.reps, |r| {
        eprintln!(
            "{} ({}) {} {}: {:.2} GFLOP/s",
            r.adapter,
            r.backend,
            r.case,
            r.variant.name(),
            r.gflops
        );
    })?;
    print!("{}", mm_bench::table(&results));
    write_json(args.json.as_deref(), &results)?;
    Ok(())
}

/// Writes `value` as pretty JSON to `path`, when one was given.
fn write_json(path: Option<&std::path::Path>, value: &impl serde::Serialize) -> Result<()> {
    if let Some(path) = path {
        std::fs::write(path, serde_json::to_string_pretty(value)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
