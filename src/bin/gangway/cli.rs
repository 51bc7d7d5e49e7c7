//! The command line's definitions (clap derive), the live stream's in `cli/live.rs`, apart from
//! the command bodies (`main.rs` and the `*_command.rs` files beside it: bench, live, lm,
//! pipeline, plan, trace), so that the fuzz target `fuzz/fuzz_targets/cli.rs` parses arguments
//! with exactly these.

use clap::{Args, Parser, Subcommand};
use gangway::device::{parse_backends, parse_virtual_devices};
use gangway::pipeline::ScheduleKind;
use std::path::PathBuf;

// The live stream's flags and commands (`--live`, `watch`, `trace record`). The path is
// explicit so that the fuzz target, which includes this file by path, finds it too.
#[path = "cli/live.rs"]
mod live;
pub(crate) use live::{AttachArgs, LiveArgs, TraceSub, WatchArgs};

#[derive(Parser, Debug)]
#[command(
    name = "gangway",
    version,
    about = "Pathways-style sharded ML on every GPU, through WebGPU"
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) devices: DeviceArgs,
    /// Write a Chrome trace-event JSON of everything dispatched (open in Perfetto or
    /// chrome://tracing). Commands that dispatch nothing through the runtime write only the devices.
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) trace: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) live: LiveArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Args, Debug)]
pub(crate) struct DeviceArgs {
    /// Backends to search, e.g. `vulkan,gl` [default: $WGPU_BACKEND, else all]
    #[arg(long, global = true, value_parser = parse_backends_arg)]
    pub(crate) backends: Option<wgpu::Backends>,
    /// Devices to make from each adapter [default: $GANGWAY_VIRTUAL_DEVICES, else 1]
    #[arg(long, global = true, value_parser = parse_virtual_arg)]
    pub(crate) virtual_devices: Option<usize>,
}

pub(crate) fn parse_backends_arg(s: &str) -> Result<wgpu::Backends, String> {
    parse_backends(s).map_err(|e| e.to_string())
}

/// A capacity factor: a positive number, or `dropless` (E/K: every expert's slots hold a whole
/// routing group), kept as infinity until [`capacity_factor`] knows E and K.
pub(crate) fn parse_capacity_arg(s: &str) -> Result<f32, String> {
    if s.eq_ignore_ascii_case("dropless") {
        return Ok(f32::INFINITY);
    }
    match s.parse::<f32>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(f),
        _ => Err(format!(
            "a capacity factor is a positive number or `dropless`, got {s:?}"
        )),
    }
}

/// The factor `parse_capacity_arg` gave, with `dropless` made E/K.
pub(crate) fn capacity_factor(parsed: f32, experts: usize, top_k: usize) -> f32 {
    if parsed.is_infinite() {
        gangway::kernels::router::dropless_factor(experts, top_k)
    } else {
        parsed
    }
}

pub(crate) fn parse_virtual_arg(s: &str) -> Result<usize, String> {
    parse_virtual_devices("--virtual-devices", s).map_err(|e| e.to_string())
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// List every device: adapter, backend, type, driver, limits and features.
    Devices {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Also each adapter's compute limits and pipeline-cache file, and every kernel's needs
        /// against the limits (which kernels each device can run; `GANGWAY_LIMITS=webgpu` gives
        /// WebGPU's defaults).
        #[arg(long)]
        verbose: bool,
    },
    /// Run one expert-parallel MoE layer over every device and check it against a CPU reference.
    Demo(DemoArgs),
    /// Benchmark suites on every adapter (or those chosen): a Markdown table, and JSON with --json.
    /// Each adapter is split into 4 virtual devices (2 with --quick) for the multi-device cases,
    /// unless --virtual-devices or $GANGWAY_VIRTUAL_DEVICES says otherwise.
    /// `gangway bench compare old.json new.json` compares two runs.
    Bench(Box<BenchArgs>),
    /// Pipeline-parallel schedules: ASCII timeline, bubble (theory vs simulated), peak activations.
    Pipeline(PipelineArgs),
    /// Training.
    #[command(subcommand)]
    Train(TrainCommand),
    /// Evaluation.
    #[command(subcommand)]
    Eval(EvalCommand),
    /// Sum up a Chrome trace (gangway's, PyTorch's or JAX's profiler's, Perfetto's; .json.gz
    /// too) for a machine with no display: events by phase, processes and threads with their
    /// span, busy time and utilization, the names that took the most time, and for gangway's
    /// traces each device's kernels against transfers (with the bytes they moved, by kind and
    /// direction), each program's kernels per run, and the pipeline bubble.
    Trace(TraceArgs),
    /// Watch a job served with `--live`, from a terminal: its step, loss, tokens/s, each device's
    /// utilization and the events dropped, once a second; exits with the job's status when it ends.
    Watch(WatchArgs),
    /// Sample text from a trained Transformer (`train lm`'s checkpoint or exported weights): on the
    /// first device against a key/value cache, or on the host with `--host`.
    Generate(GenerateArgs),
    /// Write a Transformer's weights alone as safetensors (names, shapes and config documented in
    /// the book's Transformer guide, docs/src/guide/transformer.md), for PyTorch, JAX or Hugging
    /// Face tools.
    Export(ExportArgs),
    /// Read Transformer weights in safetensors (gangway's, or written elsewhere with --config),
    /// check them, and write them as a gangway weights file.
    Import(ImportArgs),
    /// Predict a run at scale (1024 devices by default: 128 hosts × 8) from costs measured here:
    /// the MoE step's time and exposed all-to-all share, and a pipeline's bubble, over the MPI
    /// link measured here and over the datacenter link given.
    Plan(PlanArgs),
}

#[derive(Args, Debug)]
pub(crate) struct PlanArgs {
    /// A `gangway bench --json` report to take the measured costs from: the moe suite's
    /// `parallel` cases (step time, exposed share), the scaleout suite's exchanges (the link
    /// measured here) and the pipeline suite (op times). Give it again to take each from its own
    /// report (e.g. the scaleout suite's run under mpirun); a later report's case of the same
    /// name wins.
    #[arg(long, value_name = "REPORT.json")]
    pub(crate) report: Vec<PathBuf>,
    #[arg(long, default_value_t = 128)]
    pub(crate) hosts: usize,
    #[arg(long, default_value_t = 8)]
    pub(crate) devices_per_host: usize,
    /// Each device's bandwidth to its host's other devices, GB/s (NVLink 4: 900).
    #[arg(long, default_value_t = 900.0)]
    pub(crate) intra_gbs: f64,
    /// Each device's network bandwidth off its host, Gb/s (one 400 Gb/s NIC per device).
    #[arg(long, default_value_t = 400.0)]
    pub(crate) inter_gbps: f64,
    /// Fixed cost of one message between devices, µs.
    #[arg(long, default_value_t = 5.0)]
    pub(crate) latency_us: f64,
    /// How many times faster than the measured device the target devices compute.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) speedup: f64,
    /// Tokens each device routes per step at scale.
    #[arg(long, default_value_t = 32)]
    pub(crate) tokens_per_device: usize,
    /// One measured device's step time (ms) at the bench's 128 tokens, instead of a report's
    /// moe suite.
    #[arg(long)]
    pub(crate) step_ms: Option<f64>,
    /// With --step-ms: of the collectives' time, the share left exposed.
    #[arg(long)]
    pub(crate) exposed: Option<f64>,
    /// The pipeline: stages (each on its own host), microbatches, schedule.
    #[arg(long, default_value_t = 16)]
    pub(crate) stages: usize,
    #[arg(long, default_value_t = 64)]
    pub(crate) microbatches: usize,
    #[arg(long, value_enum, default_value = "1f1b")]
    pub(crate) schedule: ScheduleKind,
    /// Write the predictions as JSON here.
    #[arg(long, value_name = "PATH")]
    pub(crate) json: Option<PathBuf>,
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct TraceArgs {
    #[command(subcommand)]
    pub(crate) record: Option<TraceSub>,
    /// The trace file.
    #[arg(required = true)]
    pub(crate) file: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// How many names to list by total time.
    #[arg(long, default_value_t = 10)]
    pub(crate) top: usize,
}

#[derive(Subcommand, Debug)]
pub(crate) enum TrainCommand {
    /// A byte-level MoE language model, experts sharded over the devices (expert parallelism).
    Moe(TrainMoeArgs),
    /// A decoder-only byte-level Transformer, every --moe-every-th FFN a Switch/GShard expert
    /// layer, experts sharded over the devices.
    Lm(Box<TrainLmArgs>),
    /// Branch-Train-Merge: a seed LM, then one expert LM per domain, each on its own device.
    Btm(BtmArgs),
    /// Branch a new ELM, for a new domain, from the average of the ELMs `train btm` saved.
    BtmBranch(BtmBranchArgs),
}

#[derive(Args, Debug)]
pub(crate) struct BtmBranchArgs {
    /// The new domain's text (a directory or files); the ELM is named after the directory.
    #[arg(long, num_args = 1.., required = true)]
    pub(crate) domain: Vec<PathBuf>,
    /// Where `train btm` saved its ELMs; the new one is saved there too.
    #[arg(long, default_value = "btm-checkpoints")]
    pub(crate) checkpoint_dir: PathBuf,
    #[arg(long, default_value_t = 200)]
    pub(crate) branch_steps: u32,
    #[arg(long, default_value_t = 128)]
    pub(crate) batch: usize,
    #[arg(long, default_value_t = 3e-3)]
    pub(crate) lr: f32,
}

#[derive(Subcommand, Debug)]
pub(crate) enum EvalCommand {
    /// Per-domain validation bits per byte of the models `train btm` saved; with --arch
    /// transformer, the whole comparison with Transformer ELMs in one run (trained, then scored).
    Btm(EvalBtmArgs),
    /// Mean loss (nats and bits per byte) of a Transformer on a text file.
    Lm(EvalLmArgs),
    /// Switch vs T5 at small scale: the Transformer with every other FFN E experts (top-K)
    /// against the dense one of equal active parameters, same steps and batches, over several
    /// seeds and capacity factors; a Markdown table of validation bits/byte and tokens/s.
    MoeVsDense(MoeVsDenseArgs),
}

#[derive(Args, Debug)]
pub(crate) struct MoeVsDenseArgs {
    #[arg(long, default_value_t = 8)]
    pub(crate) experts: usize,
    #[arg(long, default_value_t = 2)]
    pub(crate) top_k: usize,
    /// Every FFN's hidden width; the experts are top-k times narrower (equal active parameters).
    #[arg(long, default_value_t = 256)]
    pub(crate) hidden: usize,
    #[arg(long, default_value_t = 2)]
    pub(crate) layers: usize,
    #[arg(long, default_value_t = 64)]
    pub(crate) d_model: usize,
    #[arg(long, default_value_t = 4)]
    pub(crate) heads: usize,
    #[arg(long, default_value_t = 64)]
    pub(crate) context: usize,
    /// Capacity factors the MoE model runs at. E/K or more is dropless: every expert's slots
    /// hold a whole group (`dropless` says so for any E and K; worst-case buffers: the expert
    /// matmuls skip the empty slots, the all-to-all, dispatch and activation still move them).
    #[arg(long, value_delimiter = ',', default_value = "1.0,1.25,2.0,dropless", value_parser = parse_capacity_arg)]
    pub(crate) capacities: Vec<f32>,
    #[arg(long, default_value_t = 3)]
    pub(crate) seeds: u64,
    #[arg(long, default_value_t = 300)]
    pub(crate) steps: u32,
    /// Sequences per step.
    #[arg(long, default_value_t = 8)]
    pub(crate) batch: usize,
    #[arg(long, default_value_t = 3e-3)]
    pub(crate) lr: f32,
    /// Devices each run trains on (the first N found).
    #[arg(long, default_value_t = 1)]
    pub(crate) devices: usize,
    /// Text files or directories [default: the bundled corpora, all domains].
    #[arg(long, num_args = 1..)]
    pub(crate) corpus: Vec<PathBuf>,
    /// Write every run's numbers as JSON here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub(crate) struct EvalBtmArgs {
    #[command(flatten)]
    pub(crate) btm: BtmArgs,
    /// The expert LMs' model: the context-window MLP `train btm` saved, or Transformers
    /// (`train lm`'s default model without experts) trained here.
    #[arg(long, value_enum, default_value = "window")]
    pub(crate) arch: ArchArg,
    /// With --arch transformer: sequences of 64 bytes per step (--batch counts windows).
    #[arg(long, default_value_t = 8)]
    pub(crate) sequences: usize,
}

/// `--arch`'s values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ArchArg {
    /// The decoder-only Transformer.
    Transformer,
    /// The context-window MLP of `train moe`: kept there (BTM's expert LMs and the benches use
    /// it); `train lm` refuses it with that pointer.
    Window,
}

/// The Transformer's sizes (a checkpoint's own sizes win when resuming).
#[derive(Args, Debug, Clone)]
pub(crate) struct TransformerArgs {
    #[arg(long, value_enum, default_value = "transformer")]
    pub(crate) arch: ArchArg,
    #[arg(long, default_value_t = 2)]
    pub(crate) layers: usize,
    /// Width of the residual stream.
    #[arg(long, default_value_t = 64)]
    pub(crate) d_model: usize,
    #[arg(long, default_value_t = 4)]
    pub(crate) heads: usize,
    /// Bytes per sequence.
    #[arg(long, default_value_t = 64)]
    pub(crate) context: usize,
    /// Hidden width of a dense FFN (and of each expert unless --expert-hidden).
    #[arg(long, default_value_t = 256)]
    pub(crate) hidden: usize,
    /// Hidden width of each expert [default: --hidden].
    #[arg(long, default_value_t = 0)]
    pub(crate) expert_hidden: usize,
    /// Every N-th FFN is an expert layer (0: a dense Transformer).
    #[arg(long, default_value_t = 2)]
    pub(crate) moe_every: usize,
    #[arg(long, default_value_t = 4)]
    pub(crate) experts: usize,
    #[arg(long, default_value_t = 1)]
    pub(crate) top_k: usize,
    /// Slots per expert per routing group, as a multiple of an even share (k·T/E), or `dropless`
    /// (E/K: a whole group per expert, nothing dropped; the expert matmuls skip empty slots).
    #[arg(long, default_value_t = 1.25, value_parser = parse_capacity_arg)]
    pub(crate) capacity_factor: f32,
    /// Weight α of the load-balancing loss.
    #[arg(long, default_value_t = 0.01)]
    pub(crate) aux_alpha: f32,
    /// Weight of the router z-loss.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) z_loss: f32,
    /// Use the token embedding, transposed, as the output head.
    #[arg(long)]
    pub(crate) tied: bool,
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
}

#[derive(Args, Debug)]
pub(crate) struct TrainLmArgs {
    #[command(flatten)]
    pub(crate) model: TransformerArgs,
    #[arg(long, default_value_t = 200)]
    pub(crate) steps: u32,
    /// Sequences per step over all devices.
    #[arg(long, default_value_t = 8)]
    pub(crate) batch: usize,
    /// Validation sequences scored at each evaluation.
    #[arg(long, default_value_t = 64)]
    pub(crate) eval_sequences: usize,
    /// With --init: the Transformer configuration (JSON, as `gangway import --config` takes it)
    /// of a file without gangway's metadata.
    #[arg(long, value_name = "JSON", requires = "init")]
    pub(crate) config: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) train: TrainArgs,
    /// The ids of the flags given on the command line (not defaulted), filled in by `main` from
    /// clap's matches: with --init or --resume, a given flag is applied or reported as ignored.
    #[arg(skip)]
    pub(crate) given: Vec<String>,
}

/// The flags every `train` command shares, whatever its model: where it runs, what it reads,
/// how it evaluates, checkpoints, resumes, starts from weights, reports and dispatches.
#[derive(Args, Debug)]
pub(crate) struct TrainArgs {
    /// Devices to use (the first N found; the experts are split over them).
    #[arg(long, default_value_t = 1)]
    pub(crate) devices: usize,
    /// Routing groups per batch [default: one per device, or the checkpoint's].
    #[arg(long)]
    pub(crate) groups: Option<usize>,
    /// The devices as a mesh of named axes, row-major: `data=A,expert=B` makes A rows that each
    /// hold every expert once (the all-to-alls run within rows, expert gradients are all-reduced
    /// over data) [default: one axis]
    #[arg(long, value_name = "AXES")]
    pub(crate) mesh: Option<String>,
    /// How the groups are dealt to the devices: `even`, `measured` (by each device's speed,
    /// timed on the first batch, if that runs faster), or groups per device (`6,2`). The
    /// groups, and so the losses, are those of an even split.
    #[arg(long, default_value = "even")]
    pub(crate) balance: gangway::train::Balance,
    #[arg(long, default_value_t = 3e-3)]
    pub(crate) lr: f32,
    /// Text files or directories to train on [default: the bundled corpora, all domains].
    #[arg(long, num_args = 1..)]
    pub(crate) corpus: Vec<PathBuf>,
    /// Evaluate validation bits per byte every N steps (0: only at the end).
    #[arg(long, default_value_t = 0)]
    pub(crate) eval_every: u32,
    #[command(flatten)]
    pub(crate) eval_capacity: EvalCapacityArg,
    /// Save a resumable checkpoint (safetensors) here every --checkpoint-every steps and at
    /// the end.
    #[arg(long)]
    pub(crate) checkpoint: Option<PathBuf>,
    #[arg(long, default_value_t = 100)]
    pub(crate) checkpoint_every: u32,
    /// Continue from this checkpoint (its model sizes, Adam setting and groups win over the
    /// flags).
    #[arg(long)]
    pub(crate) resume: Option<PathBuf>,
    /// Start from the weights in this file, with fresh optimizer state and the step count at 0:
    /// fine-tuning. A checkpoint (or for `train lm`, `gangway export`'s weights, or another
    /// tool's safetensors with --config). Its model sizes win over the flags.
    #[arg(long, value_name = "FILE", conflicts_with = "resume")]
    pub(crate) init: Option<PathBuf>,
    /// Write the report as JSON here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// How the runtime dispatches each step: parallel asynchronous dispatch (every command
    /// buffer recorded up front), or sequential (a node is prepared once its predecessor ran),
    /// to compare.
    #[arg(long, value_enum, default_value = "parallel")]
    pub(crate) dispatch: DispatchArg,
}

/// How an MoE model routes when it is scored (`eval lm`, and training's validation).
#[derive(Args, Debug, Clone, Copy)]
pub(crate) struct EvalCapacityArg {
    /// An MoE model's capacity factor while scoring, or `dropless` (E/K: nothing dropped, so the
    /// score does not depend on --batch) [default: the model's own, under which each batch is
    /// one routing group and drops depend on --batch].
    #[arg(long, value_parser = parse_capacity_arg, value_name = "FACTOR|dropless")]
    pub(crate) eval_capacity: Option<f32>,
}

impl EvalCapacityArg {
    /// The factor for a model of `experts` experts and top-`top_k` routing (`dropless` made E/K).
    pub(crate) fn factor(&self, experts: usize, top_k: usize) -> Option<f32> {
        self.eval_capacity
            .map(|parsed| capacity_factor(parsed, experts, top_k))
    }
}

#[derive(Args, Debug)]
pub(crate) struct EvalLmArgs {
    /// A `train lm` checkpoint or exported weights.
    #[arg(long)]
    pub(crate) checkpoint: PathBuf,
    /// The text to score.
    #[arg(long)]
    pub(crate) file: PathBuf,
    /// Sequences per batch.
    #[arg(long, default_value_t = 8)]
    pub(crate) batch: usize,
    /// Score at most this many sequences of the model's context, spread over the file (all of
    /// them when the file holds no more; then every byte after the first is scored).
    #[arg(long, default_value_t = 4096)]
    pub(crate) max_sequences: usize,
    /// Score whole sequences only, leaving out the bytes after the last one (fewer than the
    /// context), as gangway did before; by default a last window ending at the file's end scores
    /// them.
    #[arg(long)]
    pub(crate) whole_windows: bool,
    #[command(flatten)]
    pub(crate) eval_capacity: EvalCapacityArg,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args, Debug)]
pub(crate) struct GenerateArgs {
    /// A `train lm` checkpoint or exported weights.
    #[arg(long)]
    pub(crate) checkpoint: PathBuf,
    /// The text to continue (an empty prompt starts the model after a newline).
    #[arg(long, default_value = "", conflicts_with = "prompt_file")]
    pub(crate) prompt: String,
    /// Read the prompt's bytes from this file, as they are: any bytes, UTF-8 or not.
    #[arg(long, value_name = "FILE")]
    pub(crate) prompt_file: Option<PathBuf>,
    /// 0 takes the most likely byte each time.
    #[arg(long, default_value_t = 0.8)]
    pub(crate) temperature: f32,
    /// Draw only from the K most likely bytes [default: all 256].
    #[arg(long, value_name = "K")]
    pub(crate) top_k: Option<usize>,
    /// Draw only from the fewest most likely bytes whose probabilities reach P, in (0, 1]
    /// (after --top-k) [default: 1].
    #[arg(long, value_name = "P")]
    pub(crate) top_p: Option<f32>,
    /// Bytes to draw after the prompt, for each sample (at most what keeps every sample's text
    /// within 64 MiB in all; more is refused, naming the most).
    #[arg(long, default_value_t = 200)]
    pub(crate) max_bytes: usize,
    /// Texts to draw after the prompt, sample i with seed --seed + i, each printed under a
    /// `[sample i]` line when more than one.
    #[arg(long, default_value_t = 1)]
    pub(crate) samples: usize,
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Compute the logits with the plain-Rust reference on the host (a whole forward per byte)
    /// instead of on the first device with a key/value cache; the bytes are the same.
    #[arg(long)]
    pub(crate) host: bool,
}

#[derive(Args, Debug)]
pub(crate) struct ExportArgs {
    /// A `train lm` checkpoint.
    #[arg(long)]
    pub(crate) checkpoint: PathBuf,
    #[arg(long)]
    pub(crate) out: PathBuf,
}

#[derive(Args, Debug)]
pub(crate) struct ImportArgs {
    /// Weights in safetensors, named and shaped as the book's Transformer guide documents.
    #[arg(long)]
    pub(crate) weights: PathBuf,
    /// The model's configuration as JSON (the `gangway.config` metadata's form), for files
    /// written without gangway's metadata.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    #[arg(long)]
    pub(crate) out: PathBuf,
}

/// The model's sizes (a checkpoint's own sizes win when resuming).
#[derive(Args, Debug, Clone)]
pub(crate) struct ModelArgs {
    #[arg(long, default_value_t = 8)]
    pub(crate) experts: usize,
    #[arg(long, default_value_t = 2)]
    pub(crate) top_k: usize,
    /// Slots per expert per routing group, as a multiple of an even share (k·T/E), or `dropless`
    /// (E/K: a whole group per expert, nothing dropped; the expert matmuls skip empty slots).
    #[arg(long, default_value_t = 1.25, value_parser = parse_capacity_arg)]
    pub(crate) capacity_factor: f32,
    /// Bytes of context per token.
    #[arg(long, default_value_t = 16)]
    pub(crate) context: usize,
    #[arg(long, default_value_t = 16)]
    pub(crate) embed: usize,
    /// Width of the residual stream.
    #[arg(long, default_value_t = 64)]
    pub(crate) model: usize,
    /// Hidden width of each expert.
    #[arg(long, default_value_t = 128)]
    pub(crate) hidden: usize,
    #[arg(long, default_value_t = 1)]
    pub(crate) blocks: usize,
    /// Weight α of the load-balancing loss.
    #[arg(long, default_value_t = 0.01)]
    pub(crate) aux_alpha: f32,
    /// Weight of the router z-loss.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) z_loss: f32,
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
}

#[derive(Args, Debug)]
pub(crate) struct BtmArgs {
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// One directory of text per domain [default: the bundled corpora].
    #[arg(long, num_args = 1..)]
    pub(crate) domains: Vec<PathBuf>,
    /// Devices to branch on (the first N found; ELMs beyond N share devices).
    #[arg(long, default_value_t = 1)]
    pub(crate) devices: usize,
    #[arg(long, default_value_t = 100)]
    pub(crate) seed_steps: u32,
    #[arg(long, default_value_t = 200)]
    pub(crate) branch_steps: u32,
    /// Tokens per step.
    #[arg(long, default_value_t = 128)]
    pub(crate) batch: usize,
    #[arg(long, default_value_t = 3e-3)]
    pub(crate) lr: f32,
    /// Validation windows scored per document.
    #[arg(long, default_value_t = 256)]
    pub(crate) eval_windows: usize,
    /// Where the seed, every ELM and the baselines are saved (and loaded by `eval btm`).
    #[arg(long, default_value = "btm-checkpoints")]
    pub(crate) checkpoint_dir: PathBuf,
    /// Write the evaluation as JSON here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub(crate) struct TrainMoeArgs {
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    #[arg(long, default_value_t = 300)]
    pub(crate) steps: u32,
    /// Tokens per step over all devices.
    #[arg(long, default_value_t = 128)]
    pub(crate) batch: usize,
    #[command(flatten)]
    pub(crate) train: TrainArgs,
}

/// `--dispatch`'s values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub(crate) enum DispatchArg {
    Parallel,
    Sequential,
}

impl From<DispatchArg> for gangway::sched::DispatchMode {
    fn from(d: DispatchArg) -> Self {
        match d {
            DispatchArg::Parallel => Self::Parallel,
            DispatchArg::Sequential => Self::Sequential,
        }
    }
}

#[derive(Args, Debug)]
pub(crate) struct PipelineArgs {
    /// gpipe, 1f1b, eager-1f1b, interleaved, bfs (looped BFS), zb-h1, zb-v, dualpipe or
    /// dualpipev.
    #[arg(long, default_value = "1f1b")]
    pub(crate) schedule: ScheduleKind,
    #[arg(long, default_value_t = 4)]
    pub(crate) stages: usize,
    #[arg(long, default_value_t = 8)]
    pub(crate) microbatches: usize,
    /// Model chunks per device (interleaved and bfs; zb-v, dualpipe and dualpipev always use 2).
    #[arg(long, default_value_t = 2)]
    pub(crate) chunks: usize,
    /// Simulate with the cost model (the default).
    #[arg(long, conflicts_with = "run")]
    pub(crate) simulate: bool,
    /// Run a pipelined MLP training step on the devices and measure the bubble.
    #[arg(long)]
    pub(crate) run: bool,
    /// With --run: train a stack of residual MoE layers instead of the MLP, each stage on a pair
    /// of devices (the stage's experts and each microbatch's rows split over the pair, so every
    /// layer has an all-to-all), and report how long devices waited on the all-to-alls and how
    /// much of that no compute hid. DualPipe(V)'s F&B pairs run overlapped (see --no-overlap).
    /// With --devices D, the stages fold onto D pairs.
    #[arg(long, requires = "run")]
    pub(crate) moe: bool,
    /// With --moe: run each F&B pair as its F and then its B, not overlapped.
    #[arg(long, requires = "moe")]
    pub(crate) no_overlap: bool,
    /// Cost-model times, in microseconds, of one microbatch through a device's whole model
    /// share: forward, backward (input grad), weight grad, comma separated. Schedules with
    /// several chunk ops per microbatch (interleaved, bfs: v; zb-v, dualpipev: 2) run each at
    /// that fraction; schedules that do not split the backward run W inside B.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "100,100,100",
        value_name = "F,B,W"
    )]
    pub(crate) costs_us: Vec<f64>,
    /// Take F, B, W and the transfer time from a pipelined run's trace (`gangway --trace FILE
    /// pipeline --run ...`): the mean of each op, per device's model share as --costs-us gives
    /// them, and the mean transfer as the latency (--latency-us, --link and --bandwidth-gbs still
    /// override it). ZB-V is planned for them, and --run runs what was planned.
    #[arg(long, value_name = "TRACE", conflicts_with = "costs_us")]
    pub(crate) costs_from: Option<std::path::PathBuf>,
    /// The link between stages as a preset (its latency and one direction's bandwidth): nvlink4,
    /// pcie4, pcie5, infiniband-ndr, ethernet100g, ethernet10g. --latency-us and
    /// --bandwidth-gbs override its figures.
    #[arg(long, value_name = "LINK")]
    pub(crate) link: Option<gangway::pipeline::Link>,
    /// Uneven stages (simulation only): each op of stage i takes the i-th factor times the
    /// costs above, one factor per stage, e.g. 1,1,2,1 for a stage with twice the layers or a
    /// device half as fast.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "K,K,...",
        conflicts_with = "run"
    )]
    pub(crate) stage_costs: Vec<f64>,
    /// More stages than devices: run the stages on this many devices, several stages to a device
    /// (see --fold). A device runs one op at a time, whichever of its stages' next ops can start
    /// first; a hand-off between two of its stages is free. With --run, the first D devices.
    #[arg(long, value_name = "D")]
    pub(crate) devices: Option<usize>,
    /// How --devices places the stages: blocks (consecutive stages share a device: 0,1 | 2,3)
    /// or round-robin (stage s on device s mod D: 0,2 | 1,3, as Megatron places chunks).
    #[arg(long, value_enum, default_value = "blocks", requires = "devices")]
    pub(crate) fold: FoldArg,
    /// Fixed cost of each activation or gradient transfer between stages, µs [default: the
    /// link's, else 0].
    #[arg(long, value_name = "US")]
    pub(crate) latency_us: Option<f64>,
    /// Link bandwidth between stages, GB/s (with --activation-kib) [default: the link's, else
    /// unlimited].
    #[arg(long, value_name = "GBS")]
    pub(crate) bandwidth_gbs: Option<f64>,
    /// Size of one microbatch's activation (and gradient) at a stage boundary, KiB.
    #[arg(long, default_value_t = 1024.0, value_name = "KIB")]
    pub(crate) activation_kib: f64,
    /// overlap: transfers run beside compute and only a late receive waits; wait: a send holds
    /// its stage until the data has arrived (synchronous point-to-point).
    #[arg(long, value_enum, default_value = "overlap")]
    pub(crate) comm: CommArg,
    /// Each F and B chunk's own communication (an MoE all-to-all), µs per device's model share:
    /// paid in full by an F or B alone, hidden under the partner's compute in DualPipe's
    /// overlapped F&B pairs (a pair costs max(F + B, 2 · all-to-all)).
    #[arg(long, default_value_t = 0.0, value_name = "US")]
    pub(crate) all_to_all_us: f64,
    /// Columns of the ASCII timeline.
    #[arg(long, default_value_t = 100)]
    pub(crate) width: usize,
    /// Every schedule (or those of --schedules) at the same stages, microbatches and costs: a
    /// table, and with --svg the stacked figure. A schedule that cannot take the shape is named
    /// and left out.
    #[arg(long, conflicts_with = "run")]
    pub(crate) compare: bool,
    /// Also the shortest schedule of the schedule's family there is under these costs (one
    /// chunk a stage with B and W split, up to 4 stages and 6 microbatches; two chunks in a V
    /// with B and W split, or two looped with whole backwards, up to 4 and 4; one device per
    /// stage; a branch and bound proven optimal), and the schedule's gap to it. `--compare`
    /// shows each schedule's gap to its family's optimum whenever the setting is that small.
    #[arg(long, conflicts_with = "run")]
    pub(crate) optimal: bool,
    /// At most this many activations held by a stage (microbatches between their F and W):
    /// the memory `--schedule zb-auto` plans under [default: the stages, ZB-H1's and 1F1B's],
    /// and with --optimal the memory the search keeps to [default: as many as the
    /// microbatches; a two-chunk search keeps to twice it in chunk activations]. With
    /// --compare, both.
    #[arg(long, value_name = "K")]
    pub(crate) memory_limit: Option<usize>,
    /// The schedules --compare stacks, comma separated (default: all fourteen).
    #[arg(
        long,
        value_delimiter = ',',
        requires = "compare",
        value_name = "KINDS"
    )]
    pub(crate) schedules: Vec<ScheduleKind>,
    /// Write the textbook figure of the simulation as SVG here (with --compare, every schedule
    /// on one time axis).
    #[arg(long, value_name = "PATH", conflicts_with = "run")]
    pub(crate) svg: Option<PathBuf>,
    /// The figure's look: projector (light, large type, for slides) or screen (dark).
    #[arg(long, value_enum, default_value = "projector")]
    pub(crate) theme: ThemeArg,
    /// The figure's width in pixels (wider when its columns need it).
    #[arg(long, default_value_t = 1600.0, value_name = "PX")]
    pub(crate) svg_width: f32,
}

/// `--fold`'s values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FoldArg {
    Blocks,
    RoundRobin,
}

impl PipelineArgs {
    /// Where the stages run: one device per stage, or folded onto --devices.
    pub(crate) fn fold(&self) -> gangway::pipeline::Fold {
        use gangway::pipeline::Fold;
        match (self.devices, self.fold) {
            (None, _) => Fold::OnePerStage,
            (Some(devices), FoldArg::Blocks) => Fold::Blocks { devices },
            (Some(devices), FoldArg::RoundRobin) => Fold::RoundRobin { devices },
        }
    }
}

/// `--comm`'s values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommArg {
    Overlap,
    Wait,
}

/// `--theme`'s values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub(crate) enum ThemeArg {
    Projector,
    Screen,
}

impl From<ThemeArg> for gangway::pipeline::Theme {
    fn from(t: ThemeArg) -> Self {
        match t {
            ThemeArg::Projector => Self::Projector,
            ThemeArg::Screen => Self::Screen,
        }
    }
}

#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    #[arg(long, default_value_t = 256)]
    pub(crate) tokens_per_device: usize,
    /// Experts (rounded up to a multiple of the device count).
    #[arg(long, default_value_t = 8)]
    pub(crate) experts: usize,
    #[arg(long, default_value_t = 2)]
    pub(crate) top_k: usize,
    /// Slots per expert per routing group, as a multiple of an even share (k·T/E), or `dropless`
    /// (E/K: a whole group per expert, nothing dropped; the expert matmuls skip empty slots).
    #[arg(long, default_value_t = 1.25, value_parser = parse_capacity_arg)]
    pub(crate) capacity_factor: f32,
    #[arg(long, default_value_t = 64)]
    pub(crate) d_model: usize,
    #[arg(long, default_value_t = 128)]
    pub(crate) d_out: usize,
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `gangway bench`: suites, or `compare`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct BenchArgs {
    #[command(subcommand)]
    pub(crate) compare: Option<BenchSub>,
    /// Suites to run [default: all]: matmul, attention, memory, dispatch, pipeline, moe,
    /// transformer, generate, btm, scaleout.
    #[arg(value_name = "SUITE")]
    pub(crate) suites: Vec<String>,
    /// Adapters to run on, by index or part of `name (backend)` (a number that is no adapter's
    /// index is read as part of a name) [default: every adapter].
    #[arg(long, value_delimiter = ',')]
    pub(crate) adapters: Vec<String>,
    /// Every suite on tiny sizes (well under a minute), 1 warm-up run and 3 samples.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Write the report (schema `gangway-bench` version 1) here.
    #[arg(long, value_name = "PATH")]
    pub(crate) json: Option<PathBuf>,
    /// Write the Markdown table here too.
    #[arg(long, value_name = "PATH")]
    pub(crate) markdown: Option<PathBuf>,
    /// Untimed runs per case [default: 2, --quick 1].
    #[arg(long)]
    pub(crate) warmup: Option<usize>,
    /// Timed runs per case, taken in rounds across the cases of matmul, attention, memory and
    /// dispatch [default: 5, --quick 3; `bench compare` judges 5 or more].
    #[arg(long)]
    pub(crate) samples: Option<usize>,
    /// The adapters' FP32 peak, GFLOP/s (overrides the built-in table).
    #[arg(long)]
    pub(crate) peak_gflops: Option<f64>,
    /// The adapters' memory bandwidth, GB/s (overrides the built-in table).
    #[arg(long)]
    pub(crate) peak_gbps: Option<f64>,
    /// matmul: square sizes [default: 256,512,1024; --quick 64,100].
    #[arg(long, value_delimiter = ',', help_heading = "Suite sizes")]
    pub(crate) matmul_sizes: Option<Vec<usize>>,
    /// matmul: variants [default: naive,tiled,vec4,subgroup,transpose; subgroup only where the adapter has subgroups, transpose only for `Aᵀ·B` and `Aᵀ·Bᵀ`].
    #[arg(long, value_delimiter = ',', help_heading = "Suite sizes")]
    pub(crate) variants: Option<Vec<String>>,
    /// matmul and attention: element type (attention: of its storage; its sums stay f32).
    #[arg(long, value_enum, default_value = "f32", help_heading = "Suite sizes")]
    pub(crate) dtype: DTypeArg,
    /// attention: context lengths [default: 128,256,512,1024,2048; --quick 64,100].
    #[arg(long, value_delimiter = ',', help_heading = "Suite sizes")]
    pub(crate) contexts: Option<Vec<usize>>,
    /// memory: elements per stream [default: 1048576,16777216; --quick 65536,100003].
    #[arg(long, value_delimiter = ',', help_heading = "Suite sizes")]
    pub(crate) stream_sizes: Option<Vec<usize>>,
    /// dispatch: longest chain, capped at the adapter's devices [default: 8; --quick 2].
    #[arg(long, help_heading = "Suite sizes")]
    pub(crate) max_stages: Option<usize>,
    /// dispatch: runs per sample [default: 20; --quick 4].
    #[arg(long, help_heading = "Suite sizes")]
    pub(crate) runs: Option<usize>,
    /// pipeline: stages (devices) [default: 4; --quick 2].
    #[arg(long, help_heading = "Suite sizes")]
    pub(crate) stages: Option<usize>,
    /// pipeline: microbatch counts [default: 4,8,16; --quick 4].
    #[arg(long, value_delimiter = ',', help_heading = "Suite sizes")]
    pub(crate) microbatches: Option<Vec<usize>>,
    /// moe: tokens per training step [default: 1024; --quick 32].
    #[arg(long, help_heading = "Suite sizes")]
    pub(crate) tokens: Option<usize>,
    /// moe: expert counts of the experts sweep [default: 1,2,4,8,16; --quick 1,4].
    #[arg(long, value_delimiter = ',', help_heading = "Suite sizes")]
    pub(crate) experts: Option<Vec<usize>>,
    /// moe: device counts of the all-to-all section [default: 1,2,4,8; --quick 1,2].
    #[arg(long, value_delimiter = ',', help_heading = "Suite sizes")]
    pub(crate) devices: Option<Vec<usize>>,
    /// btm: training steps per ELM [default: 20; --quick 2].
    #[arg(long, help_heading = "Suite sizes")]
    pub(crate) branch_steps: Option<u32>,
    /// scaleout: bytes each rank sends every other rank per exchange
    /// [default: 1024,20480,165888,4194304; --quick 1024,65536].
    #[arg(long, value_delimiter = ',', help_heading = "Suite sizes")]
    pub(crate) exchange_sizes: Option<Vec<usize>>,
}

#[derive(Subcommand, Debug)]
pub(crate) enum BenchSub {
    /// Each case's ratio between two reports, of each run's fastest sample (the least disturbed),
    /// with each side's spread; FASTER or SLOWER only when it lies beyond ±5% or beyond a run's
    /// own noise, the larger (fewer than 5 samples a side: too few samples).
    Compare {
        old: PathBuf,
        new: PathBuf,
        /// Pair cases by suite and case alone, whatever the adapter (two machines; each report
        /// must then hold each case once: pick one adapter with --old-adapter / --new-adapter).
        /// Without it, cases pair by adapter when the reports share one, and by case alone when
        /// each side has (or was narrowed to) one adapter.
        #[arg(long)]
        any_adapter: bool,
        /// Exit with status 1 when a case is SLOWER (beyond the noise).
        #[arg(long)]
        fail_on_slower: bool,
        /// Only this adapter of the old report: its index, or a case-insensitive part of
        /// `name (backend)` (a number that is no adapter's index, like 4090, is read as a name).
        #[arg(long, value_name = "ADAPTER")]
        old_adapter: Option<String>,
        /// Only this adapter of the new report.
        #[arg(long, value_name = "ADAPTER")]
        new_adapter: Option<String>,
        /// The noise threshold, in percent: a change is FASTER or SLOWER only when its ratio lies
        /// beyond it, and beyond each run's own noise, the gap between its two fastest samples
        /// (from 0 to 100).
        #[arg(long, value_name = "PERCENT", default_value_t = 5.0)]
        noise_threshold: f64,
    },
    /// Several reports side by side, one column per machine and adapter: each case's fastest
    /// sample, its time over the first column's, and per suite the geometric mean of those.
    SideBySide {
        /// Two or more reports; the first one's first adapter is the column the others are
        /// measured against.
        #[arg(num_args = 2.., required = true)]
        reports: Vec<PathBuf>,
        /// Only these suites [default: all].
        #[arg(long, value_delimiter = ',')]
        suites: Vec<String>,
    },
    /// Print the JSON Schema of the report `--json` writes.
    Schema,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub(crate) enum DTypeArg {
    F32,
    F16,
}
