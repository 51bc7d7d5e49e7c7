//! The `gangway` command line: dispatch, the process's one runtime, the trace written for
//! `--trace` (streamed as the job runs by `trace_file.rs`, then written whole with its lanes'
//! [`Track`]s gathered over ranks), the job served with `--live` (`live_command.rs`, which also
//! holds `watch` and `trace record`), and the bodies of the commands without a module of their
//! own (`devices`, `demo`, BTM), with what they share (device selection, corpus loading, the
//! training summary, file writes). `train moe` and `train lm` share one body
//! (`train_command.rs`); `pipeline`, `bench`, `plan`, `trace` and the language-model commands
//! have modules of their own. Under `mpirun` (built with
//! the `mpi` feature) every rank runs the same command over the job's global mesh, after the
//! ranks agreed on their settings (`settings.rs`: a rank started with others ends the job);
//! rank 0 alone prints and writes files. `devices --verbose` adds each kernel's needs against
//! the adapters' limits.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether this process prints: the only one, or rank 0 of a job.
static PRINTS: AtomicBool = AtomicBool::new(true);

fn prints() -> bool {
    PRINTS.load(Ordering::Relaxed)
}

// The binary's printing goes through these: the other ranks of a job stay quiet (their errors,
// one line naming the rank, use `std::eprintln!`).
macro_rules! println {
    ($($t:tt)*) => { if $crate::prints() { ::std::println!($($t)*) } };
}
macro_rules! print {
    ($($t:tt)*) => { if $crate::prints() { ::std::print!($($t)*) } };
}
macro_rules! eprintln {
    ($($t:tt)*) => { if $crate::prints() { ::std::eprintln!($($t)*) } };
}

use anyhow::{Context, Result, bail};
use clap::{CommandFactory, FromArgMatches};
use gangway::Job;
use gangway::bench;
use gangway::kernels::router::RouterConfig;
use gangway::moe_layer::{MoeLayerConfig, run_expert_parallel};
use gangway::sched::{Runtime, RuntimeOptions};
use gangway::trace::{Tracer, Track};
use gangway::{Device, DiscoveryOptions, discover};

mod bench_command;
use bench_command::{bench_compare, bench_side_by_side, bench_suites};

mod cli;
use cli::*;
mod live_command;
mod lm_command;
mod pipeline_command;
use pipeline_command::pipeline;
mod plan_command;
mod progress;
mod settings;
mod trace_command;
mod trace_file;
mod train_command;

impl DeviceArgs {
    fn discover(&self) -> Result<Vec<Device>> {
        self.discover_with(None)
    }

    /// Discovery that splits each adapter into `split` devices unless the flag or the environment
    /// says otherwise (the multi-device benchmarks need several).
    fn discover_split(&self, split: usize) -> Result<Vec<Device>> {
        let set = std::env::var_os(gangway::device::VIRTUAL_DEVICES_ENV).is_some();
        self.discover_with((!set).then_some(split))
    }

    fn discover_with(&self, default_split: Option<usize>) -> Result<Vec<Device>> {
        let mut opts = DiscoveryOptions::from_env()?;
        if let Some(b) = self.backends {
            opts.backends = b;
        }
        if let Some(n) = self.virtual_devices.or(default_split) {
            opts.virtual_devices = n;
        }
        Ok(discover(&opts)?)
    }
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
            capacity_factor: cli::capacity_factor(self.capacity_factor, self.experts, self.top_k),
            blocks: self.blocks,
            aux_alpha: self.aux_alpha,
            z_loss: self.z_loss,
            normalize_gates: true,
            seed: self.seed,
        }
    }
}

fn main() -> std::process::ExitCode {
    // The trace clock starts with the process. Ranks launched at different moments (over ssh,
    // say) then count from different epochs, and what puts their events on one axis (the live
    // forwarder's probes, the gathered trace's offsets) must align them, which the tests see.
    gangway::trace::process_epoch();
    quiet_on_closed_stdout();
    let command = Cli::command();
    let matches = command.clone().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Command::Train(TrainCommand::Lm(args)) = &mut cli.command {
        args.given = given_flags(&matches);
    }
    let job = match Job::from_env() {
        Ok(job) => job,
        Err(e) => {
            std::eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if job.size() > 1 {
        PRINTS.store(job.is_root(), Ordering::Relaxed);
        end_job_on_panic(&job);
    }
    // Ranks that would compute something else end the job before it runs (alone, there is
    // nothing to compare, and no corpus to read for it).
    let agreed = match job.size() {
        1 => Ok(()),
        _ => job.agree(&settings::of_command_line(&command, &matches)),
    };
    let result = agreed
        .map_err(anyhow::Error::from)
        .and_then(|()| run(cli, &job))
        .and_then(|()| Ok(job.finish()?));
    live_command::finish(&result, || match &result {
        Err(e) => one_line(e),
        Ok(()) => String::new(),
    });
    match result {
        // `gangway watch` ends with the job's own status.
        Err(e) if e.downcast_ref::<WatchedExit>().is_some() => {
            let code = e.downcast_ref::<WatchedExit>().map_or(1, |w| w.0);
            std::process::ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if job.size() > 1 => job.abort(&format!(
            "gangway rank {} ({}): error: {}",
            job.rank(),
            job.host(),
            one_line(&e)
        )),
        Err(e) => {
            std::eprintln!("error: {}", one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The ids of the innermost subcommand's flags that the command line (or the environment) gave,
/// as opposed to clap's defaults.
fn given_flags(matches: &clap::ArgMatches) -> Vec<String> {
    let mut m = matches;
    while let Some((_, sub)) = m.subcommand() {
        m = sub;
    }
    m.ids()
        .filter(|id| {
            matches!(
                m.value_source(id.as_str()),
                Some(
                    clap::parser::ValueSource::CommandLine | clap::parser::ValueSource::EnvVariable
                )
            )
        })
        .map(|id| id.as_str().to_owned())
        .collect()
}

/// A panic on any thread of a rank ends the whole job at once, with one line naming the rank:
/// the other ranks would otherwise wait for it until their timeouts.
/// `gangway … | head`: once the reader has gone, the next `println!` panics with a broken pipe.
/// End quietly with the status a shell gives a tool killed by SIGPIPE (128 + 13), as other Unix
/// tools do, instead of printing a panic (restoring SIGPIPE itself would need `unsafe`).
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

fn end_job_on_panic(job: &Job) {
    let job = job.clone();
    std::panic::set_hook(Box::new(move |info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        job.abort(&format!(
            "gangway rank {} ({}): panic{at}: {}",
            job.rank(),
            job.host(),
            what.replace('\n', " ")
        ));
    }));
}

/// An error and its causes on one line, each cause once (gangway's errors already show theirs).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line.replace('\n', " ")
}

/// The exit code of the job `gangway watch` watched, when not 0.
#[derive(Debug)]
struct WatchedExit(i32);

impl std::fmt::Display for WatchedExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the watched job ended with exit code {}", self.0)
    }
}

impl std::error::Error for WatchedExit {}

fn run(cli: Cli, job: &Job) -> Result<()> {
    // `--trace` keeps every event for the file; `--live` alone only streams them, and with
    // `--live-metrics-only` there is nothing to trace.
    let tracer = match (&cli.trace, &cli.live.live) {
        (Some(_), _) => Tracer::new(),
        (None, Some(_)) if !cli.live.live_metrics_only => Tracer::streaming(),
        (None, _) => Tracer::off(),
    };
    live_command::serve(&cli.live, &tracer, job)?;
    // Rank 0 writes the file; a pipeline writes its own view at the end (its stages, not the
    // devices), so it is not streamed.
    let streamed = cli
        .trace
        .as_deref()
        .filter(|_| prints() && !matches!(cli.command, Command::Pipeline(_)));
    if let Some(path) = streamed {
        trace_file::start(path, &tracer)?;
    }
    if streamed.is_some() || cli.live.live.is_some() {
        trace_file::on_interrupt();
    }
    let mut names: Vec<Track> = Vec::new();
    let mut discover = || -> Result<Vec<Device>> {
        let found = cli.devices.discover()?;
        names = found
            .iter()
            .map(|d| Track::device(d.id(), d.label()))
            .collect();
        live_command::set_devices(&found, &names, job);
        trace_file::set_tracks(&names);
        Ok(found)
    };
    // The commands that run work: the process's one runtime over every device found (and the
    // job's other ranks' devices), streaming every run's events to `tracer`.
    let mut runtime = |tracer: &Tracer| process_runtime(&discover()?, tracer, job);
    match &cli.command {
        Command::Devices { json, verbose } => {
            let local = cli.devices.discover()?;
            devices(&local, job, *json)?;
            if *verbose && !*json {
                kernel_needs(&local)?;
            }
        }
        Command::Demo(args) => demo(&runtime(&tracer)?, args)?,
        Command::Bench(args) => match &args.compare {
            Some(BenchSub::Compare {
                old,
                new,
                any_adapter,
                fail_on_slower,
                old_adapter,
                new_adapter,
                noise_threshold,
            }) => bench_compare(
                [(old, old_adapter.as_deref()), (new, new_adapter.as_deref())],
                *any_adapter,
                *fail_on_slower,
                *noise_threshold,
            )?,
            Some(BenchSub::SideBySide { reports, suites }) => bench_side_by_side(reports, suites)?,
            Some(BenchSub::Schema) => println!(
                "{}",
                serde_json::to_string_pretty(&bench::Report::json_schema())?
            ),
            None => {
                let split = if args.quick { 2 } else { 4 };
                let found = cli.devices.discover_split(split)?;
                names = found
                    .iter()
                    .map(|d| Track::device(d.id(), d.label()))
                    .collect();
                // The cases trace the runs they measure themselves (into `--trace`, if given).
                let runtime = process_runtime(&found, &Tracer::off(), job)?;
                bench_suites(&runtime, &found, args, &tracer)?
            }
        },
        Command::Train(TrainCommand::Moe(args)) => {
            train_command::train_moe(&runtime(&tracer)?, args)?
        }
        Command::Train(TrainCommand::Lm(args)) => lm_command::train_lm(&runtime(&tracer)?, args)?,
        Command::Eval(EvalCommand::Lm(args)) => lm_command::eval_lm(&runtime(&tracer)?, args)?,
        Command::Eval(EvalCommand::MoeVsDense(args)) => {
            lm_command::moe_vs_dense(&runtime(&tracer)?, args)?
        }
        Command::Generate(args) if args.host => lm_command::generate_text(None, args)?,
        Command::Generate(args) => lm_command::generate_text(Some(&runtime(&tracer)?), args)?,
        Command::Export(args) => lm_command::export(args)?,
        Command::Import(args) => lm_command::import(args)?,
        Command::Train(TrainCommand::Btm(args)) => train_btm(&runtime(&tracer)?, args)?,
        Command::Train(TrainCommand::BtmBranch(args)) => {
            train_btm_branch(&runtime(&tracer)?, args)?
        }
        Command::Eval(EvalCommand::Btm(args)) if args.arch == ArchArg::Transformer => {
            lm_command::btm_lm(&runtime(&tracer)?, args)?
        }
        Command::Eval(EvalCommand::Btm(args)) => eval_btm(&runtime(&tracer)?, &args.btm)?,
        Command::Trace(TraceArgs {
            record: Some(TraceSub::Record { attach, out, force }),
            ..
        }) => live_command::record(attach, out, *force)?,
        Command::Trace(args) => trace_command::trace(args)?,
        Command::Watch(args) => match live_command::watch(args)? {
            0 => {}
            code => return Err(WatchedExit(code).into()),
        },
        Command::Plan(args) => plan_command::plan(args)?,
        Command::Pipeline(args) => {
            // A run's trace is the pipeline's view (stages, F/B/W), written by `pipeline`.
            let runtime = if args.run {
                Some(runtime(&Tracer::off())?)
            } else {
                None
            };
            names = pipeline(args, runtime.as_ref(), &tracer)?;
        }
    }
    live_command::ranks_done(job);
    // The streamed file is closed whole before the export replaces it.
    trace_file::stop();
    if let Some(path) = &cli.trace {
        let events = tracer.take_events();
        // Under mpirun every rank's events, on rank 0's clock, one process per (rank, device);
        // a pipeline run's events are its stages' already, gathered by the run itself.
        let offsets = job.clock_offsets(5)?;
        let gathered = if matches!(cli.command, Command::Pipeline(_)) {
            Some((events, names))
        } else {
            job.gather_trace(events, &names, &offsets)?
        };
        if let Some((events, names)) = gathered.filter(|_| prints()) {
            write_out(
                path,
                gangway::trace::chrome::to_string(&events, &names).as_bytes(),
            )?;
            eprintln!("wrote {} events to {}", events.len(), path.display());
            for (rank, o) in offsets.iter().enumerate().skip(1) {
                eprintln!(
                    "rank {rank}'s trace clock: {:+.1} µs to rank 0's (trace epochs on the wall \
                     clock); measured around barriers it differs by {:+.1} µs ± {:.1} µs",
                    o.to_root_ns as f64 / 1e3,
                    o.skew_ns as f64 / 1e3,
                    o.uncertainty_ns as f64 / 1e3
                );
            }
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` all or nothing; in a job of several ranks rank 0 alone writes.
fn write_out(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    if prints() {
        gangway::fsutil::write_atomic(path, bytes)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The process's one runtime over every device found, as a part of `job`: every workload of a
/// command runs on it. `tracer` gets every run's events, as they happen.
fn process_runtime(devices: &[Device], tracer: &Tracer, job: &Job) -> Result<Runtime> {
    let runtime = Runtime::new(
        devices.to_vec(),
        RuntimeOptions {
            tracer: tracer.clone(),
            job: job.clone(),
            ..RuntimeOptions::default()
        },
    )?;
    live_command::join_mesh(runtime.mesh(), tracer, job)?;
    trace_file::quiet_on_interrupt(&runtime);
    Ok(runtime)
}

/// How a training command dealt its routing groups, and what balancing measured.
pub(crate) fn print_groups(split: &str, balancing: &str, seconds: f64) {
    if balancing.is_empty() {
        println!("routing groups per device: {split}");
    } else {
        println!("routing groups per device: {split} (balanced in {seconds:.1} s: {balancing})");
    }
}

/// A training command's last lines: validation against the unigram baseline, and where the
/// checkpoint is.
pub(crate) fn finish_training(
    valid_bpb: f64,
    unigram_bpb: f64,
    checkpoint: Option<&std::path::Path>,
) {
    println!(
        "validation: {valid_bpb:.3} bits per byte; unigram byte model of the training data: \
         {unigram_bpb:.3} ({:+.3})",
        valid_bpb - unigram_bpb
    );
    if let Some(path) = checkpoint {
        println!("checkpoint: {}", path.display());
    }
}

/// The first `n` devices of the runtime's mesh (under mpirun, every rank's, rank by rank).
pub(crate) fn first_devices(runtime: &Runtime, n: usize) -> Result<Vec<gangway::MeshDevice>> {
    let devices = runtime.mesh();
    if n == 0 || n > devices.len() {
        bail!(
            "--devices {n} but {} devices were found (try --virtual-devices {})",
            devices.len(),
            n.div_ceil(devices.len().max(1))
        );
    }
    Ok(devices[..n].to_vec())
}

/// The first `n` devices laid out as `--mesh` says (`data=2,expert=2`), or as one axis.
pub(crate) fn mesh_of(runtime: &Runtime, n: usize, axes: Option<&str>) -> Result<gangway::Mesh> {
    let devices = first_devices(runtime, n)?;
    let Some(text) = axes else {
        return Ok(gangway::Mesh::line(&devices));
    };
    let axes = gangway::MeshShape::parse_axes(text)?;
    let named: Vec<(&str, usize)> = axes.iter().map(|(a, n)| (a.as_str(), *n)).collect();
    Ok(gangway::Mesh::new(&devices, &named)?)
}

/// The text in `paths`, or the bundled corpora (every domain) when there are none.
pub(crate) fn corpus_of(paths: &[std::path::PathBuf]) -> Result<gangway::data::Corpus> {
    Ok(if paths.is_empty() {
        gangway::data::Corpus::bundled_all()?
    } else {
        gangway::data::Corpus::from_paths(paths)?
    })
}

fn btm_setup<D: Clone>(
    devices: &[D],
    args: &BtmArgs,
) -> Result<(
    Vec<D>,
    gangway::data::Corpus,
    gangway::btm::experiment::BtmOptions,
)> {
    use gangway::btm::{EnsembleOptions, experiment::BtmOptions};
    use gangway::train::TrainOptions;
    if args.devices == 0 || args.devices > devices.len() {
        bail!(
            "--devices {} but {} devices were found (try --virtual-devices)",
            args.devices,
            devices.len()
        );
    }
    let corpus = corpus_of(&args.domains)?;
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
        split_seed: 7,
    };
    Ok((devices[..args.devices].to_vec(), corpus, opts))
}

/// Scores every model on the runtime's first device, prints the table and writes `json`.
pub(crate) fn print_btm_eval<M: gangway::train::StepModel>(
    runtime: &Runtime,
    corpus: &gangway::data::Corpus,
    models: &gangway::btm::experiment::BtmModels<M>,
    opts: &gangway::btm::experiment::BtmOptions,
    json: Option<&std::path::Path>,
) -> Result<()> {
    use gangway::btm::experiment::{evaluate, table};
    if !runtime.job().is_root() {
        // Rank 0 scores on its device; the others are done.
        return Ok(());
    }
    let device = runtime.devices().first().context("no device")?;
    let scores = evaluate(
        &runtime.client("btm evaluation", 1),
        device,
        corpus,
        models,
        opts,
    )?;
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

fn train_btm(runtime: &Runtime, args: &BtmArgs) -> Result<()> {
    // Under mpirun: every rank's devices; ELM i trains on the i-th.
    let devices = runtime.mesh();
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
    let bars = progress::Bars::new();
    let domains = corpus.domains();
    let models = train_all(
        runtime,
        &gangway::Mesh::line(&devices),
        &corpus,
        &init,
        &opts,
        &args.checkpoint_dir,
        |phase, i, step| {
            let (task, len) = match phase {
                "seed" => ("seed".to_string(), opts.seed_steps),
                "dense" => (
                    "dense".to_string(),
                    opts.seed_steps + opts.branch_steps * domains.len() as u32,
                ),
                "branch" => (
                    format!("branch {}", domains.get(i).map_or("?", String::as_str)),
                    opts.branch_steps,
                ),
                _ => (format!("{phase} {i}"), opts.branch_steps),
            };
            bars.set(&task, u64::from(len), u64::from(step));
        },
    )?;
    let tokens: u64 = models.elms.iter().map(|e| e.report.tokens).sum();
    println!(
        "branch phase: {} ELMs, {tokens} tokens in {:.1} s ({:.0} tokens/s over {} devices)",
        models.elms.len(),
        models.branch_seconds,
        tokens as f64 / models.branch_seconds.max(1e-9),
        devices.len()
    );
    println!("checkpoints: {}", args.checkpoint_dir.display());
    print_btm_eval(runtime, &corpus, &models, &opts, args.json.as_deref())
}

fn train_btm_branch(runtime: &Runtime, args: &BtmBranchArgs) -> Result<()> {
    // Under mpirun the new branch trains on the mesh's first device (rank 0's).
    let devices = runtime.mesh();
    use gangway::btm::{average, branch, load_domain_elms, save_elms};
    use gangway::data::Corpus;
    use gangway::train::TrainOptions;
    let device = devices.first().context("no device")?;
    let elms = load_domain_elms::<gangway::moe::MoeLmConfig>(&args.checkpoint_dir)
        .with_context(|| format!("reading {}", args.checkpoint_dir.display()))?;
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
    let pb = progress::bar(u64::from(args.branch_steps));
    let new = branch(
        runtime,
        &gangway::Mesh::line(std::slice::from_ref(device)),
        &[(name, corpus)],
        &averaged,
        &opts,
        |_, s| pb.set_position(u64::from(s)),
    )?;
    pb.finish();
    if !prints() {
        return Ok(());
    }
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

fn eval_btm(runtime: &Runtime, args: &BtmArgs) -> Result<()> {
    use gangway::btm::experiment::load_all;
    let (_, corpus, opts) = btm_setup(runtime.devices(), args)?;
    let models = load_all::<gangway::moe::MoeLmConfig>(&args.checkpoint_dir, &corpus.domains())?;
    print_btm_eval(runtime, &corpus, &models, &opts, args.json.as_deref())
}

/// One device of a job's mesh, as `devices --json` prints it under mpirun.
#[derive(serde::Serialize)]
struct MeshEntry<'a> {
    rank: usize,
    host: &'a str,
    /// Its index among its rank's devices.
    local_index: usize,
    #[serde(flatten)]
    info: &'a gangway::DeviceInfo,
}

/// Every device: this process's, or under mpirun the job's global mesh, printed by rank 0 (with
/// each device's rank, host and local index).
fn devices(local: &[Device], job: &Job, json: bool) -> Result<()> {
    let mesh = job.mesh(local)?;
    let (host, hosts) = (job.host(), job.size() > 1);
    let entries: Vec<MeshEntry<'_>> = mesh
        .iter()
        .map(|d| match d {
            gangway::MeshDevice::Local(l) => MeshEntry {
                rank: job.rank(),
                host: &host,
                local_index: local.iter().position(|x| x == l).unwrap_or(0),
                info: l.info(),
            },
            gangway::MeshDevice::Remote(r) => MeshEntry {
                rank: r.rank,
                host: &r.host,
                local_index: r.index,
                info: &r.info,
            },
        })
        .collect();
    if json {
        if hosts {
            println!("{}", serde_json::to_string_pretty(&entries)?);
        } else {
            // One process: the device list as it always was.
            let infos: Vec<_> = entries.iter().map(|e| e.info).collect();
            println!("{}", serde_json::to_string_pretty(&infos)?);
        }
        return Ok(());
    }
    let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let i = e.info;
            let id = if hosts {
                format!("rank {} ({}) #{}", e.rank, e.host, i.id)
            } else {
                i.id.to_string()
            };
            vec![
                id,
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
        gangway::table::markdown_table(
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

/// Each adapter's compute limits and where its compiled pipelines are kept, then every kernel
/// entry point's needs against the limits.
fn kernel_needs(local: &[Device]) -> Result<()> {
    // One column per adapter: its virtual devices have its limits.
    let adapters: Vec<&Device> = local
        .iter()
        .filter(|d| d.info().virtual_index == 0)
        .collect();
    let rows: Vec<Vec<String>> = adapters
        .iter()
        .map(|d| {
            let l = &d.info().limits;
            let [x, y, z] = l.max_compute_workgroup_size;
            let pipelines = match (d.shares_pipelines(), d.pipeline_cache_file()) {
                (_, Some(file)) => file.display().to_string(),
                (true, None) => "shared by its devices, not kept".into(),
                (false, _) => "none on this backend".into(),
            };
            vec![
                d.info().adapter.to_string(),
                d.label(),
                l.max_storage_buffers_per_shader_stage.to_string(),
                l.max_compute_workgroup_storage_size.to_string(),
                l.max_compute_invocations_per_workgroup.to_string(),
                format!("{x}×{y}×{z}"),
                pipelines,
            ]
        })
        .collect();
    println!();
    print!(
        "{}",
        gangway::table::markdown_table(
            &[
                "adapter",
                "device",
                "storage buffers / stage",
                "workgroup memory (bytes)",
                "invocations",
                "workgroup size",
                "pipeline cache",
            ],
            &rows
        )
    );
    let mut header = vec![
        "shader".to_string(),
        "entry".to_string(),
        "storage buffers".to_string(),
        "workgroup memory".to_string(),
        "workgroup size".to_string(),
    ];
    header.extend(
        adapters
            .iter()
            .map(|d| format!("adapter {}", d.info().adapter)),
    );
    let mut rows = Vec::new();
    for shader in gangway::kernels::ALL_SHADERS {
        for (entry, needs) in shader.needs()? {
            let [x, y, z] = needs.workgroup_size;
            let mut row = vec![
                shader.name.to_string(),
                entry,
                needs.storage_buffers.to_string(),
                needs.workgroup_bytes.to_string(),
                format!("{x}×{y}×{z}"),
            ];
            row.extend(adapters.iter().map(|d| {
                match needs.over(&d.info().limits).first() {
                    None => "yes".to_string(),
                    // A variant its launcher takes only where the limits allow.
                    Some(_) if shader.chosen_by_limits.is_some() => "not taken".to_string(),
                    Some((limit, ..)) => format!("no: {limit}"),
                }
            }));
            rows.push(row);
        }
    }
    println!();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    print!("{}", gangway::table::markdown_table(&header, &rows));
    Ok(())
}

fn demo(runtime: &Runtime, args: &DemoArgs) -> Result<()> {
    let devices = runtime.devices();
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
            capacity_factor: cli::capacity_factor(args.capacity_factor, experts, args.top_k),
            normalize_gates: true,
        },
        seed: args.seed,
    };
    let report = run_expert_parallel(&runtime.client("moe layer", 1), devices, &cfg)?;
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

/// Writes `value` as pretty JSON to `path`, when one was given.
fn write_json(path: Option<&std::path::Path>, value: &impl serde::Serialize) -> Result<()> {
    if let Some(path) = path {
        write_out(path, serde_json::to_string_pretty(value)?.as_bytes())?;
    }
    Ok(())
}
