//! `gangway bench moe`: training-step throughput of the MoE language model ([`crate::moe`]) on
//! this machine's devices, in three sections (rows share one flat [`MoeBenchResult`]):
//!
//! - **`moe-vs-dense`**: tokens/s of a training step (forward, backward, all-reduce, Adam) of the
//!   MoE model against a dense model with the same *active* expert compute per token: the same
//!   config with `E = 1`, `K = 1` and `d_ff' = K · d_ff`, so each token does `K · 4 · d · d_ff`
//!   expert FLOPs forward in both. Both run the same trainer code, so the dense model still pays
//!   a (1-wide) router, dispatch and combine; the gap is what routing over `E` experts costs, not
//!   the speed of a hand-written dense MLP. Both use a capacity factor of `E / K`, which makes the
//!   capacity `T_g` (tokens per routing group): no choice can be dropped.
//! - **`experts`**: step time as `E` grows (1, 2, 4, 8, 16 by default) at fixed tokens, `K`,
//!   `d_ff` and capacity factor (Switch's claim: compute per token stays constant while parameters
//!   grow). Reports the parameter count and the step time relative to the first (`E = 1`) row.
//!   With `E = 1` and `K = 2` the model uses `K = 1` (top-2 of one expert is not defined); each row
//!   says its `K`. Drops (at the configured capacity factor) are reported, since dropped choices
//!   skip expert compute.
//! - **`all-to-all`**: the share of a step spent in the expert all-to-alls at 1, 2, 4, 8 devices
//!   (one routing group per device, `E` = the largest device count measured). Measured from the
//!   trainer's trace: the sum of the durations of its transfer-lane events named `all-to-all …`
//!   (forward, reverse, backward, backward reverse; the all-reduce is reported separately) on the
//!   device with the largest sum, divided by the step's wall time, medians over the timed steps.
//!   The trainer orchestrates every device from one host thread, so these spans are host wall
//!   time of the host-staged copies (they are recorded on every device alike). Device counts
//!   beyond those given are reported as skipped, with the reason. Virtual devices share one
//!   adapter, so their all-to-all is a copy within one GPU's memory through the host.
//!
//! Sections 1 and 2 run on the first device. Every timing is [`super::median_seconds`] of single
//! training steps after warm-up steps, on batches drawn from the bundled corpora (uniform random
//! bytes if they cannot be loaded; the `note` says which).

use super::median_seconds;
use crate::data::{Batches, Corpus};
use crate::kernels::lm_train::AdamConfig;
use crate::moe::{GpuTrainer, MoeLmConfig, MoeLmParams};
use crate::trace::{Lane, Tracer};
use crate::{Device, Error, Result, Rng};
use serde::Serialize;

/// Sizes and repetitions of the benchmark.
#[derive(Debug, Clone)]
pub struct MoeBenchOptions {
    /// The MoE model of `moe-vs-dense` and `all-to-all`, and the base of the `experts` sweep
    /// (its `experts` is replaced by each swept value).
    pub config: MoeLmConfig,
    /// Tokens per training step (`T`); must be divisible by every device count measured.
    pub tokens: usize,
    /// Expert counts of the `experts` section.
    pub experts: Vec<usize>,
    /// Device counts of the `all-to-all` section.
    pub devices: Vec<usize>,
    pub warmup: usize,
    pub reps: usize,
    pub seed: u64,
}

impl Default for MoeBenchOptions {
    fn default() -> Self {
        Self {
            config: MoeLmConfig {
                context: 8,
                embed: 16,
                model: 64,
                hidden: 128,
                experts: 8,
                top_k: 2,
                capacity_factor: 2.0,
                blocks: 2,
                aux_alpha: 0.01,
                z_loss: 0.001,
                normalize_gates: true,
                seed: 0,
            },
            tokens: 1024,
            experts: vec![1, 2, 4, 8, 16],
            devices: vec![1, 2, 4, 8],
            warmup: 2,
            reps: 5,
            seed: 0,
        }
    }
}

impl MoeBenchOptions {
    /// Tiny sizes and one repetition, for smoke tests.
    pub fn tiny() -> Self {
        let base = Self::default();
        Self {
            config: MoeLmConfig {
                context: 4,
                embed: 4,
                model: 16,
                hidden: 16,
                experts: 4,
                blocks: 1,
                ..base.config
            },
            tokens: 32,
            experts: vec![1, 2, 4],
            devices: vec![1, 2, 4, 8],
            warmup: 1,
            reps: 1,
            seed: 0,
        }
    }
}

/// One measured (or skipped) case.
#[derive(Debug, Clone, Serialize)]
pub struct MoeBenchResult {
    /// `moe-vs-dense`, `experts` or `all-to-all`.
    pub section: &'static str,
    pub case: String,
    pub devices: usize,
    pub experts: usize,
    pub top_k: usize,
    /// `d_ff` of each expert.
    pub hidden: usize,
    pub capacity_factor: f32,
    /// Tokens per step.
    pub tokens: usize,
    pub groups: usize,
    /// Every parameter.
    pub params: usize,
    /// Parameters one token touches: all non-expert tensors plus `K` experts per block.
    pub active_params: usize,
    /// Median wall time of one training step (0 when skipped).
    pub step_s: f64,
    pub tokens_per_s: f64,
    /// Dropped choices of the last timed step.
    pub dropped_fraction: f64,
    /// `moe-vs-dense`: tokens/s relative to the dense row; `experts`: step time relative to the
    /// first row; `all-to-all`: step time relative to 1 device. 0 when skipped.
    pub ratio: f64,
    /// `all-to-all` only: median all-to-all seconds per step (see the module docs).
    pub all_to_all_s: Option<f64>,
    /// `all-to-all` only: median of all-to-all seconds / step wall time.
    pub all_to_all_share: Option<f64>,
    /// `all-to-all` only: median all-reduce seconds / step wall time.
    pub all_reduce_share: Option<f64>,
    /// Why the case was not measured.
    pub skipped: Option<String>,
    pub note: String,
}

fn invalid(reason: String) -> Error {
    Error::InvalidArgument {
        what: "bench moe",
        reason,
    }
}

/// Training batches: from the bundled corpora, or uniform random bytes when they cannot be read.
struct Data {
    batches: Vec<(Vec<u32>, Vec<u32>)>,
    source: &'static str,
}

impl Data {
    fn new(context: usize, tokens: usize, count: usize, seed: u64) -> Self {
        let corpus = Corpus::bundled_all().ok();
        if let Some(batches) = corpus
            .as_ref()
            .and_then(|c| Batches::new(c, context, tokens, seed).ok())
        {
            return Self {
                batches: batches.take(count).collect(),
                source: "bundled corpora",
            };
        }
        let mut rng = Rng::new(seed);
        let batches = (0..count)
            .map(|_| {
                let ctx = (0..tokens * context)
                    .map(|_| (rng.next_u64() % 256) as u32)
                    .collect();
                let tgt = (0..tokens).map(|_| (rng.next_u64() % 256) as u32).collect();
                (ctx, tgt)
            })
            .collect();
        Self {
            batches,
            source: "random bytes",
        }
    }

    fn get(&self, i: usize) -> Result<&(Vec<u32>, Vec<u32>)> {
        match self.batches.len() {
            0 => Err(invalid("no batches".into())),
            n => self
                .batches
                .get(i % n)
                .ok_or_else(|| invalid("no batches".into())),
        }
    }
}

/// Parameters one token touches (all non-expert tensors, `K` of the `E` experts per block).
fn active_params(cfg: &MoeLmConfig) -> usize {
    let total: usize = cfg.param_specs().iter().map(|s| s.len()).sum();
    let per_expert = 2 * cfg.model * cfg.hidden;
    total - cfg.blocks * cfg.experts.saturating_sub(cfg.top_k) * per_expert
}

/// What one measured configuration gave.
struct Measured {
    step_s: f64,
    dropped_fraction: f64,
    all_to_all_s: f64,
    all_to_all_share: f64,
    all_reduce_share: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    crate::kernels::autotune::median(&mut v)
}

/// Times single training steps of `cfg` on `devices` with `groups` routing groups; with `traced`
/// also the all-to-all and all-reduce shares of each step.
fn measure(
    devices: &[Device],
    cfg: MoeLmConfig,
    groups: usize,
    data: &Data,
    o: &MoeBenchOptions,
    traced: bool,
) -> Result<Measured> {
    let params = MoeLmParams::init(cfg)?;
    let mut trainer = GpuTrainer::with_groups(devices, &params, AdamConfig::new(1e-3), groups)?;
    let tracer = Tracer::new();
    if traced {
        trainer.set_tracer(Some(tracer.clone()));
    }
    let mut i = 0usize;
    let mut dropped = 0.0;
    let mut shares = Vec::new();
    let mut a2a = Vec::new();
    let mut reduce = Vec::new();
    let mut timed = 0usize;
    let step_s = median_seconds(o.warmup, o.reps, || {
        let (ctx, tgt) = data.get(i)?;
        i += 1;
        let _ = tracer.take_events();
        let stats = trainer.step(ctx, tgt)?;
        dropped = stats.dropped_fraction;
        timed += 1;
        if traced && timed > o.warmup {
            let events = tracer.take_events();
            let sum = |device: usize, prefix: &str| -> f64 {
                events
                    .iter()
                    .filter(|e| {
                        e.device == device && e.lane == Lane::Transfer && e.name.starts_with(prefix)
                    })
                    .map(|e| e.duration_ns() as f64 * 1e-9)
                    .sum()
            };
            let slowest = |prefix: &str| {
                (0..devices.len())
                    .map(|d| sum(d, prefix))
                    .fold(0.0f64, f64::max)
            };
            let (all_to_all, all_reduce) = (slowest("all-to-all"), slowest("all-reduce"));
            let wall = stats.seconds.max(1e-12);
            a2a.push(all_to_all);
            shares.push(all_to_all / wall);
            reduce.push(all_reduce / wall);
        }
        Ok(())
    })?;
    Ok(Measured {
        step_s,
        dropped_fraction: dropped,
        all_to_all_s: median(a2a),
        all_to_all_share: median(shares),
        all_reduce_share: median(reduce),
    })
}

fn row(
    section: &'static str,
    case: String,
    cfg: &MoeLmConfig,
    devices: usize,
    tokens: usize,
    m: &Measured,
    note: String,
) -> MoeBenchResult {
    MoeBenchResult {
        section,
        case,
        devices,
        experts: cfg.experts,
        top_k: cfg.top_k,
        hidden: cfg.hidden,
        capacity_factor: cfg.capacity_factor,
        tokens,
        groups: devices,
        params: cfg.param_specs().iter().map(|s| s.len()).sum(),
        active_params: active_params(cfg),
        step_s: m.step_s,
        tokens_per_s: tokens as f64 / m.step_s.max(1e-12),
        dropped_fraction: m.dropped_fraction,
        ratio: 1.0,
        all_to_all_s: None,
        all_to_all_share: None,
        all_reduce_share: None,
        skipped: None,
        note,
    }
}

fn first(devices: &[Device]) -> Result<&[Device]> {
    if devices.is_empty() {
        return Err(invalid("no devices".into()));
    }
    Ok(&devices[..1])
}

fn check(o: &MoeBenchOptions) -> Result<()> {
    if o.tokens == 0 || o.reps == 0 {
        return Err(invalid(format!(
            "tokens and reps must be positive, got {} and {}",
            o.tokens, o.reps
        )));
    }
    o.config.validate()
}

/// The MoE model against a dense one with the same active expert compute per token, on the first
/// device (see the module docs).
pub fn moe_vs_dense(devices: &[Device], o: &MoeBenchOptions) -> Result<Vec<MoeBenchResult>> {
    check(o)?;
    let one = first(devices)?;
    let base = o.config;
    let moe = MoeLmConfig {
        capacity_factor: base.experts as f32 / base.top_k as f32,
        ..base
    };
    let dense = MoeLmConfig {
        experts: 1,
        top_k: 1,
        hidden: base.hidden * base.top_k,
        capacity_factor: 1.0,
        ..base
    };
    let data = Data::new(base.context, o.tokens, o.warmup + o.reps, o.seed);
    let d = measure(one, dense, 1, &data, o, false)?;
    let m = measure(one, moe, 1, &data, o, false)?;
    let note = format!(
        "capacity factor E/K: nothing dropped; data: {}",
        data.source
    );
    let dense_row = row(
        "moe-vs-dense",
        format!("dense d_ff={}", dense.hidden),
        &dense,
        1,
        o.tokens,
        &d,
        note.clone(),
    );
    let mut moe_row = row(
        "moe-vs-dense",
        format!("moe E={} K={} d_ff={}", moe.experts, moe.top_k, moe.hidden),
        &moe,
        1,
        o.tokens,
        &m,
        note,
    );
    moe_row.ratio = moe_row.tokens_per_s / dense_row.tokens_per_s.max(1e-12);
    Ok(vec![dense_row, moe_row])
}

/// Step time as the number of experts grows, at fixed tokens, on the first device.
pub fn experts_sweep(devices: &[Device], o: &MoeBenchOptions) -> Result<Vec<MoeBenchResult>> {
    check(o)?;
    let one = first(devices)?;
    let data = Data::new(o.config.context, o.tokens, o.warmup + o.reps, o.seed);
    let mut out: Vec<MoeBenchResult> = Vec::new();
    for &e in &o.experts {
        let cfg = MoeLmConfig {
            experts: e,
            top_k: o.config.top_k.min(e),
            ..o.config
        };
        let m = measure(one, cfg, 1, &data, o, false)?;
        let mut r = row(
            "experts",
            format!("E={e} K={}", cfg.top_k),
            &cfg,
            1,
            o.tokens,
            &m,
            format!("data: {}", data.source),
        );
        r.ratio = out
            .first()
            .map_or(1.0, |base| r.step_s / base.step_s.max(1e-12));
        out.push(r);
    }
    Ok(out)
}

/// The all-to-all share of a step at each device count of `o.devices` (one routing group per
/// device, `E` = the largest count); counts beyond `devices.len()` are skipped rows.
pub fn all_to_all_share(devices: &[Device], o: &MoeBenchOptions) -> Result<Vec<MoeBenchResult>> {
    check(o)?;
    let experts = o.devices.iter().copied().max().unwrap_or(1).max(1);
    let cfg = MoeLmConfig {
        experts,
        top_k: o.config.top_k.min(experts),
        ..o.config
    };
    let data = Data::new(cfg.context, o.tokens, o.warmup + o.reps, o.seed);
    let mut out: Vec<MoeBenchResult> = Vec::new();
    let mut base_step = None;
    for &n in &o.devices {
        let case = format!("D={n} E={experts}");
        let reason = if n == 0 || n > devices.len() {
            Some(format!("{} device(s) available", devices.len()))
        } else if !o.tokens.is_multiple_of(n) || !experts.is_multiple_of(n) {
            Some(format!(
                "{} tokens or {experts} experts do not split over {n} devices",
                o.tokens
            ))
        } else {
            None
        };
        if let Some(reason) = reason {
            let zero = Measured {
                step_s: 0.0,
                dropped_fraction: 0.0,
                all_to_all_s: 0.0,
                all_to_all_share: 0.0,
                all_reduce_share: 0.0,
            };
            let mut r = row("all-to-all", case, &cfg, n, o.tokens, &zero, String::new());
            r.tokens_per_s = 0.0;
            r.ratio = 0.0;
            r.skipped = Some(reason);
            out.push(r);
            continue;
        }
        let m = measure(&devices[..n], cfg, n, &data, o, true)?;
        let mut r = row(
            "all-to-all",
            case,
            &cfg,
            n,
            o.tokens,
            &m,
            format!(
                "shares: Σ transfer-lane spans (slowest device) / step wall; data: {}",
                data.source
            ),
        );
        let base = *base_step.get_or_insert(m.step_s);
        r.ratio = m.step_s / f64::max(base, 1e-12);
        r.all_to_all_s = Some(m.all_to_all_s);
        r.all_to_all_share = Some(m.all_to_all_share);
        r.all_reduce_share = Some(m.all_reduce_share);
        out.push(r);
    }
    Ok(out)
}

/// Every section, in order; `progress` sees each row as it is done.
pub fn run(
    devices: &[Device],
    o: &MoeBenchOptions,
    mut progress: impl FnMut(&MoeBenchResult),
) -> Result<Vec<MoeBenchResult>> {
    let mut out = Vec::new();
    for section in [moe_vs_dense, experts_sweep, all_to_all_share] {
        for r in section(devices, o)? {
            progress(&r);
            out.push(r);
        }
    }
    Ok(out)
}

/// One Markdown table of every row, with a `section` column.
pub fn table(results: &[MoeBenchResult]) -> String {
    let pct = |x: Option<f64>| x.map_or_else(|| "–".to_string(), |v| format!("{:.1}%", v * 100.0));
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            let measured = r.skipped.is_none();
            let num = |s: String| if measured { s } else { "–".to_string() };
            vec![
                r.section.to_string(),
                r.case.clone(),
                r.devices.to_string(),
                format!("{}/{}", r.experts, r.top_k),
                r.hidden.to_string(),
                format!("{}", r.capacity_factor),
                r.tokens.to_string(),
                r.params.to_string(),
                r.active_params.to_string(),
                num(format!("{:.2}", r.step_s * 1e3)),
                num(format!("{:.0}", r.tokens_per_s)),
                num(format!("{:.3}", r.dropped_fraction)),
                num(format!("{:.2}", r.ratio)),
                pct(r.all_to_all_share),
                pct(r.all_reduce_share),
                r.skipped
                    .as_ref()
                    .map_or_else(|| r.note.clone(), |s| format!("skipped: {s}")),
            ]
        })
        .collect();
    super::markdown_table(
        &[
            "section",
            "case",
            "D",
            "E/K",
            "d_ff",
            "cf",
            "tokens",
            "params",
            "active params",
            "step ms",
            "tokens/s",
            "dropped",
            "ratio",
            "all-to-all",
            "all-reduce",
            "note",
        ],
        &rows,
    )
}
