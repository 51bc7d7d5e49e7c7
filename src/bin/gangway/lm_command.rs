//! The Transformer's commands: `train lm` (its plan for the one training body,
//! `train_command.rs`: from fresh weights, a checkpoint it resumes, or given weights it fine-tunes
//! with `--init`, applying the training settings given beside it and naming the size flags it
//! ignores), `eval lm` (every byte after the first by default: `transformer::score`, saying how
//! many and at which capacity),
//! `generate` (its size flags bounded before the model loads), `export` and `import`, and its two comparisons: `eval moe-vs-dense`, and `eval
//! btm --arch transformer` (the generic `gangway::btm::experiment`).

use crate::cli::{
    ArchArg, EvalBtmArgs, EvalLmArgs, ExportArgs, GenerateArgs, ImportArgs, MoeVsDenseArgs,
    TrainLmArgs, TransformerArgs,
};
use crate::train_command::{Plan, train};
use crate::{corpus_of, first_devices, progress, write_json, write_out};
use anyhow::{Context, Result, bail};
use gangway::kernels::optim::AdamConfig;
use gangway::sched::Runtime;
use gangway::train::TrainOptions;
use gangway::transformer::generate::{Sampling, generate_on, generate_samples};
use gangway::transformer::score::score_text;
use gangway::transformer::{
    TransformerCheckpoint, TransformerConfig, TransformerParams, TransformerTrainer,
};
use std::io::Write;

impl TransformerArgs {
    fn config(&self) -> Result<TransformerConfig> {
        self.check_arch()?;
        let config = self.unchecked_config();
        config.validate()?;
        Ok(config)
    }

    fn check_arch(&self) -> Result<()> {
        if self.arch == ArchArg::Window {
            bail!(
                "the context-window MLP trains with `gangway train moe`; `train lm` trains the \
                 Transformer (--arch transformer)"
            );
        }
        Ok(())
    }

    /// The configuration the flags say, not validated (to compare with a file's).
    fn unchecked_config(&self) -> TransformerConfig {
        TransformerConfig {
            context: self.context,
            model: self.d_model,
            heads: self.heads,
            layers: self.layers,
            hidden: self.hidden,
            expert_hidden: self.expert_hidden,
            moe_every: self.moe_every,
            experts: self.experts,
            top_k: self.top_k,
            capacity_factor: crate::cli::capacity_factor(
                self.capacity_factor,
                self.experts,
                self.top_k,
            ),
            aux_alpha: self.aux_alpha,
            z_loss: self.z_loss,
            tied: self.tied,
            seed: self.seed,
            ..TransformerConfig::default()
        }
    }

    /// `file` with the training settings given on the command line (`given`: clap ids) in place
    /// of its own (the capacity factor's `dropless` made E/K for the file's E and K).
    fn training_settings(&self, file: &TransformerConfig, given: &[String]) -> TransformerConfig {
        let given = |id: &str| given.iter().any(|g| g == id);
        let mut c = *file;
        if given("capacity_factor") {
            c.capacity_factor =
                crate::cli::capacity_factor(self.capacity_factor, c.experts, c.top_k);
        }
        if given("aux_alpha") {
            c.aux_alpha = self.aux_alpha;
        }
        if given("z_loss") {
            c.z_loss = self.z_loss;
        }
        if given("seed") {
            c.seed = self.seed;
        }
        c
    }
}

/// The flags of a model's training settings (the rest of [`TransformerArgs`]' model flags are
/// its sizes): given beside `--init`, they apply to the weights given.
const TRAINING_FLAGS: &[&str] = &["capacity_factor", "aux_alpha", "z_loss", "seed"];

/// Each model flag's clap id with the value `c` has for it.
fn flag_values(c: &TransformerConfig) -> [(&'static str, String); 14] {
    [
        ("layers", c.layers.to_string()),
        ("d_model", c.model.to_string()),
        ("heads", c.heads.to_string()),
        ("context", c.context.to_string()),
        ("hidden", c.hidden.to_string()),
        ("expert_hidden", c.expert_hidden.to_string()),
        ("moe_every", c.moe_every.to_string()),
        ("experts", c.experts.to_string()),
        ("top_k", c.top_k.to_string()),
        ("tied", c.tied.to_string()),
        ("capacity_factor", c.capacity_factor.to_string()),
        ("aux_alpha", c.aux_alpha.to_string()),
        ("z_loss", c.z_loss.to_string()),
        ("seed", c.seed.to_string()),
    ]
}

/// The flag as typed, from its clap id.
fn flag(id: &str) -> String {
    format!("--{}", id.replace('_', "-"))
}

/// `(flag, value, file's)` for each flag whose value in `new` differs from `file`'s, among
/// the flags `pick` keeps.
fn differences(
    new: &TransformerConfig,
    file: &TransformerConfig,
    pick: impl Fn(&str) -> bool,
) -> Vec<(String, String, String)> {
    flag_values(new)
        .into_iter()
        .zip(flag_values(file))
        .filter(|((id, value), (_, was))| pick(id) && value != was)
        .map(|((id, value), (_, was))| (flag(id), value, was))
        .collect()
}

/// One line for each model flag given on the command line (not in `keep`) whose value differs
/// from `file`'s: `ignored: --layers 4, the file has 2`. The capacity factor is compared as
/// the file's E and K make it.
fn given_model_flags(args: &TrainLmArgs, file: &TransformerConfig, keep: &[&str]) -> Vec<String> {
    let mut flags = args.model.unchecked_config();
    flags.capacity_factor =
        crate::cli::capacity_factor(args.model.capacity_factor, file.experts, file.top_k);
    let given = |id: &str| !keep.contains(&id) && args.given.iter().any(|g| g == id);
    differences(&flags, file, given)
        .into_iter()
        .map(|(flag, value, was)| format!("ignored: {flag} {value}, the file has {was}"))
        .collect()
}

/// `gangway train lm`: the Transformer, fresh, resumed (`--resume`, naming the flags the file
/// overrides), or fine-tuned from given weights (`--init`, applying the training settings given
/// beside them), through the one training command ([`crate::train_command::train`]).
pub(crate) fn train_lm(runtime: &Runtime, args: &TrainLmArgs) -> Result<()> {
    let shared = &args.train;
    let corpus = corpus_of(&shared.corpus)?;
    args.model.check_arch()?;
    let (start, checkpoint) = match (&shared.resume, &shared.init) {
        (Some(path), _) => {
            let checkpoint = TransformerCheckpoint::load(path)?;
            let file = *checkpoint.config();
            let mut ignored = given_model_flags(args, &file, &[]);
            if let Some(state) = &checkpoint.train {
                let given = |id: &str| args.given.iter().any(|g| g == id);
                if given("lr") && shared.lr != state.adam.lr {
                    ignored.push(format!(
                        "ignored: --lr {}, the file has {}",
                        shared.lr, state.adam.lr
                    ));
                }
                if let Some(groups) = shared.groups.filter(|&g| g != state.groups) {
                    ignored.push(format!(
                        "ignored: --groups {groups}, the file has {}",
                        state.groups
                    ));
                }
            }
            for line in ignored {
                eprintln!("{line} ({} continues with its own)", path.display());
            }
            (checkpoint.params.clone(), Some(checkpoint))
        }
        (None, Some(path)) => {
            let config = args.config.as_deref().map(config_file).transpose()?;
            let mut weights = TransformerCheckpoint::load_with(path, config)?;
            eprintln!(
                "starting from the weights in {}, with fresh optimizer state",
                path.display()
            );
            // Sizes are the weights'; how to train them is the command line's where it says.
            let file = weights.params.config;
            let applied = args.model.training_settings(&file, &args.given);
            for line in given_model_flags(args, &file, TRAINING_FLAGS) {
                eprintln!("{line} (the weights' own size is kept)");
            }
            for (flag, value, was) in
                differences(&applied, &file, |id| TRAINING_FLAGS.contains(&id))
            {
                eprintln!("{flag} {value}: applied (the file's setting was {was})");
            }
            applied.validate()?;
            weights.params.config = applied;
            (weights.params, None)
        }
        (None, None) => (TransformerParams::init(args.model.config()?)?, None),
    };
    let c = start.config;
    let groups = match checkpoint.as_ref().and_then(|k| k.train.as_ref()) {
        Some(t) => t.groups,
        None => shared.groups.unwrap_or(shared.devices),
    };
    let about = format!(
        "Transformer: {} parameters, {} layers of width {} ({} heads, context {}), {} expert \
         layers of {} experts (top-{}) over {} devices, {} routing groups; {} KiB of text in {:?}",
        start.count(),
        c.layers,
        c.model,
        c.heads,
        c.context,
        c.moe_layers(),
        c.experts,
        c.top_k,
        shared.devices,
        groups,
        corpus.len_bytes() >> 10,
        corpus.domains()
    );
    let opts = TrainOptions {
        steps: args.steps,
        batch: args.batch,
        eval_units: args.eval_sequences,
        eval_capacity: shared.eval_capacity.factor(c.experts, c.top_k),
        data_seed: c.seed.wrapping_add(1),
        groups: Some(groups),
        ..TrainOptions::default()
    };
    let plan = Plan {
        name: "train lm",
        start,
        checkpoint,
        about,
        routed: c.moe_layers() > 0,
        opts,
    };
    train(runtime, shared, &corpus, plan)
}

/// What `eval lm --json` prints.
#[derive(serde::Serialize)]
struct EvalReport {
    file: String,
    /// The file's length.
    bytes: usize,
    context: usize,
    /// Sequences of `context` bytes in the file, picked (at most --max-sequences, evenly
    /// spread), and scored.
    sequences: usize,
    sequences_picked: usize,
    sequences_scored: usize,
    /// Bytes predicted and scored: every byte after the first, unless --whole-windows or
    /// --max-sequences left some out.
    bytes_scored: usize,
    /// Of those, the bytes after the last whole sequence, scored by a window ending at the
    /// file's end (0 with --whole-windows).
    tail_bytes: usize,
    /// The capacity factor the expert layers scored with (the model's, or --eval-capacity's).
    capacity_factor: f32,
    /// Of the router choices of the bytes scored, the share that capacity dropped; absent for a
    /// dense model.
    #[serde(skip_serializing_if = "Option::is_none")]
    dropped_fraction: Option<f64>,
    nats_per_byte: f64,
    bits_per_byte: f64,
}

pub(crate) fn eval_lm(runtime: &Runtime, args: &EvalLmArgs) -> Result<()> {
    if args.max_sequences == 0 {
        bail!("--max-sequences must be at least 1: it is the most sequences of the file scored");
    }
    if args.batch == 0 {
        bail!("--batch must be at least 1: it is the sequences scored together");
    }
    let checkpoint = TransformerCheckpoint::load(&args.checkpoint)?;
    let bytes =
        std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let len = bytes.len();
    let context = checkpoint.config().context;
    let mesh = gangway::Mesh::line(&runtime.mesh()[..1]);
    let client = runtime.client("eval lm", 1);
    let adam = AdamConfig::new(1e-3);
    let params = &checkpoint.params;
    let c = params.config;
    let mut trainer = TransformerTrainer::new(&client, &mesh, params, adam, 1)?;
    trainer.set_eval_capacity(args.eval_capacity.factor(c.experts, c.top_k))?;
    let name = args.file.display().to_string();
    let score = score_text(
        &trainer,
        (&name, &bytes),
        args.max_sequences,
        args.batch,
        args.whole_windows,
    )?;
    let eval = score.evaluation;
    let report = EvalReport {
        file: name,
        bytes: len,
        context,
        sequences: eval.available,
        sequences_picked: eval.picked,
        sequences_scored: eval.scored,
        bytes_scored: eval.bytes,
        tail_bytes: score.tail_bytes,
        capacity_factor: trainer.eval_capacity().unwrap_or(c.capacity_factor),
        dropped_fraction: eval.dropped_fraction,
        nats_per_byte: eval.bits_per_byte * std::f64::consts::LN_2,
        bits_per_byte: eval.bits_per_byte,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let tail = match report.tail_bytes {
            0 => String::new(),
            n => format!(" and the last {n} bytes by a window ending at the file's end"),
        };
        println!(
            "{}: {:.4} nats per byte, {:.4} bits per byte ({} bytes scored in {} sequences{tail}, \
             context {context})",
            report.file,
            report.nats_per_byte,
            report.bits_per_byte,
            report.bytes_scored,
            report.sequences_scored,
        );
        if let Some(dropped) = report.dropped_fraction {
            println!(
                "router choices dropped by capacity: {:.2}% (capacity factor {})",
                dropped * 100.0,
                report.capacity_factor
            );
        }
        if report.sequences_picked < report.sequences {
            println!(
                "--max-sequences {}: {} of the file's {} sequences, evenly spaced from the first",
                args.max_sequences, report.sequences_picked, report.sequences
            );
        }
    }
    Ok(())
}

/// `generate`: on the runtime's first device (the samples decoded together against a
/// key/value cache), or with `runtime` `None` (`--host`) by the plain-Rust reference. A request
/// past what generation holds is refused before the model loads, naming the flags; a batch of
/// samples too large for the device is refused naming `--samples`.
pub(crate) fn generate_text(runtime: Option<&Runtime>, args: &GenerateArgs) -> Result<()> {
    use gangway::transformer::generate::{MAX_HELD_BYTES, max_new_bytes};
    let prompt = match &args.prompt_file {
        Some(path) => std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
        None => args.prompt.as_bytes().to_vec(),
    };
    let (bytes, seed, samples) = (args.max_bytes, args.seed, args.samples);
    if samples == 0 {
        bail!("--samples must be at least 1");
    }
    let most = max_new_bytes(prompt.len(), samples);
    if bytes > most {
        bail!(
            "--max-bytes {bytes} with --samples {samples}: generation holds at most \
             {MAX_HELD_BYTES} bytes of text at once, prompts included, so at most {most} bytes \
             a sample (fewer samples, or a shorter prompt, allow more)"
        );
    }
    let checkpoint = TransformerCheckpoint::load(&args.checkpoint)?;
    let sampling = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
    };
    let texts = match runtime {
        Some(runtime) => {
            let client = runtime.client("generate", 1);
            let device = &runtime.mesh()[0];
            generate_on(
                (&client, device),
                &checkpoint,
                &prompt,
                bytes,
                sampling,
                seed,
                samples,
            )
            .map_err(|e| match e {
                // The decoder's buffers grow with the samples decoded together.
                gangway::Error::LimitExceeded { .. } | gangway::Error::MemoryBudget { .. }
                    if samples > 1 =>
                {
                    anyhow::anyhow!(
                        "--samples {samples}: the samples are decoded together, and their \
                         buffers do not fit the device ({e}); ask for fewer"
                    )
                }
                e => e.into(),
            })?
        }
        None => generate_samples(&checkpoint, &prompt, bytes, sampling, seed, samples)?,
    };
    let mut stdout = std::io::stdout().lock();
    for (i, out) in texts.iter().enumerate() {
        if texts.len() > 1 {
            writeln!(stdout, "[sample {i}]")?;
        }
        stdout.write_all(&prompt)?;
        stdout.write_all(out)?;
        stdout.write_all(b"\n")?;
    }
    Ok(())
}

pub(crate) fn export(args: &ExportArgs) -> Result<()> {
    let checkpoint = TransformerCheckpoint::load(&args.checkpoint)?;
    let weights = checkpoint.weights();
    write_out(&args.out, &weights.to_bytes()?)?;
    println!(
        "{}: {} tensors, {} parameters",
        args.out.display(),
        weights.config().param_specs().len(),
        weights.params.count()
    );
    Ok(())
}

/// A Transformer configuration from its JSON file.
fn config_file(path: &std::path::Path) -> Result<TransformerConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    TransformerConfig::from_json(&text)
        .with_context(|| format!("{} is not a Transformer configuration", path.display()))
}

pub(crate) fn import(args: &ImportArgs) -> Result<()> {
    let config = args.config.as_deref().map(config_file).transpose()?;
    let weights = TransformerCheckpoint::load_with(&args.weights, config)?.weights();
    write_out(&args.out, &weights.to_bytes()?)?;
    println!(
        "{}: {} tensors, {} parameters, checked",
        args.out.display(),
        weights.config().param_specs().len(),
        weights.params.count()
    );
    Ok(())
}

pub(crate) fn moe_vs_dense(runtime: &Runtime, args: &MoeVsDenseArgs) -> Result<()> {
    use gangway::transformer::compare::{CompareOptions, moe_vs_dense};
    let devices = &first_devices(runtime, args.devices)?[..];
    let corpus = corpus_of(&args.corpus)?;
    let standard = CompareOptions::standard();
    let opts = CompareOptions {
        moe: TransformerConfig {
            experts: args.experts,
            top_k: args.top_k,
            hidden: args.hidden,
            layers: args.layers,
            model: args.d_model,
            heads: args.heads,
            context: args.context,
            ..standard.moe
        },
        capacities: args
            .capacities
            .iter()
            .map(|&c| crate::cli::capacity_factor(c, args.experts, args.top_k))
            .collect(),
        seeds: args.seeds,
        run: TrainOptions {
            steps: args.steps,
            batch: args.batch,
            ..standard.run
        },
        lr: args.lr,
    };
    opts.moe.validate()?;
    let runs = (1 + opts.capacities.len()) as u64 * opts.seeds;
    let pb = progress::bar(runs);
    let client = runtime.client("eval moe-vs-dense", 1);
    let table = moe_vs_dense(
        &client,
        &gangway::Mesh::line(devices),
        &corpus,
        &opts,
        &mut |name, seed, bpb| {
            pb.inc(1);
            progress::line(&pb, format!("{name}, seed {seed}: {bpb:.3} bits per byte"));
        },
    )?;
    pb.finish();
    print!("{}", table.markdown());
    write_json(args.json.as_deref(), &table)?;
    Ok(())
}

/// Branch-Train-Merge with dense Transformer ELMs, the paper's comparison at small scale in one
/// run: the same experiment as `train btm` (`gangway::btm::experiment`), trained and then scored.
pub(crate) fn btm_lm(runtime: &Runtime, args: &EvalBtmArgs) -> Result<()> {
    use gangway::btm::EnsembleOptions;
    use gangway::btm::experiment::{BtmOptions, train_all};
    let b = &args.btm;
    let devices = &first_devices(runtime, b.devices)?[..];
    let corpus = corpus_of(&b.domains)?;
    // The paper's ELMs are dense.
    let config = TransformerConfig {
        moe_every: 0,
        seed: b.model.seed,
        ..TransformerConfig::small()
    };
    let opts = BtmOptions {
        seed_steps: b.seed_steps,
        branch_steps: b.branch_steps,
        train: TrainOptions {
            batch: args.sequences,
            lr: b.lr,
            eval_units: 32,
            ..TrainOptions::default()
        },
        eval_windows_per_doc: 16,
        ensemble: EnsembleOptions::default(),
        split_seed: 7,
    };
    eprintln!(
        "BTM with Transformer ELMs over {:?}: seed {} steps, {} per branch, {} sequences of {} \
         bytes per step, on {} devices",
        corpus.domains(),
        opts.seed_steps,
        opts.branch_steps,
        opts.train.batch,
        config.context,
        devices.len()
    );
    let init = TransformerParams::init(config)?;
    let models = train_all(
        runtime,
        &gangway::Mesh::line(devices),
        &corpus,
        &init,
        &opts,
        &b.checkpoint_dir,
        |phase, i, step| {
            if step == 1 {
                eprintln!("{phase} {i}");
            }
        },
    )?;
    crate::print_btm_eval(runtime, &corpus, &models, &opts, b.json.as_deref())
}
