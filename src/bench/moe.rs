//! The `moe` suite: training-step throughput of the MoE language model ([`crate::moe`]) on one
//! adapter's (virtual) devices, in four sections:
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
//! - **`parallel`**: tokens/s of `D = 4` of the adapter's (virtual) devices against `D = 1`, at
//!   `train moe`'s defaults (batch 128, one routing group per device). Both are traced; each row
//!   reports the overlap (the median share of a step's traced span during which two or more
//!   devices were busy with kernels or transfers, [`crate::trace::overlap_ns`]), the
//!   collectives' exposed share (`collectives exposed`: the most any device of the step sat idle,
//!   no kernel running, while its host waited on an all-to-all's or the all-reduce's data,
//!   [`crate::trace::exposed_wait_ns`], over the step's wall time), the bytes the all-to-alls and
//!   the all-reduce wrote to the devices per step (from each transfer's
//!   [`crate::trace::Moved`]; collectives are found by that kind, never by name), the bytes the
//!   all-to-alls read back beside the routed rows' bytes (every kept choice's row, in each of
//!   the four exchanges of a block: what a ragged exchange reads back and writes), and the five
//!   kernels with the
//!   largest share of the devices' time (`kernel share: …`, GPU-timestamped where the adapter has
//!   timestamps). `D=1 with D=4's 4 groups` routes the batch as the 4 devices do (the same
//!   model math; D = 1 uses one group), compared with `D=4`: the groups' cost apart from the
//!   devices'. On the run's first adapter, `D=4 over two adapters`
//!   also takes 2 devices of the next adapter chosen (a skip row says why when there is none),
//!   and two more rows route the same batch in 16 groups over those devices: dealt evenly, then
//!   balanced by each device's speed as measured on the first batch
//!   ([`crate::train::GroupSplit`]; the note gives the speeds, the split chosen and the
//!   timings it was chosen by).
//! - **`all-to-all`**: the share of a step spent in the expert all-to-alls at 1, 2, 4, 8 devices
//!   (one routing group per device, `E` = the largest device count measured). Measured from the
//!   runtime's trace: the sum of the durations of the transfer-lane events of the all-to-all
//!   nodes (forward, reverse, backward, backward reverse, and the kept counts' exchange; the
//!   all-reduce is reported separately) on the device with the largest sum, divided by the
//!   step's wall time, medians over every step (below). These are host-staged copies (read back, then written to each
//!   destination); virtual devices share one adapter, so their all-to-all is a copy within one
//!   GPU's memory through the host. Device counts beyond those given are reported as skipped,
//!   with the reason.
//!
//! Sections 1 and 2 run on the first device. Every sample is the host wall time of one training
//! step, on batches drawn from the bundled corpora (uniform random bytes if they cannot be loaded;
//! the note says which). The trace-derived shares are medians over every step, warm-up included.
//! FLOPs are the usual model estimate `6 · active parameters · tokens`.

use super::harness::{Blocking, BlockingRun, Extras};
use super::planned::Planned;
use super::work::{Work, WorkUnit};
use crate::data::{Batches, Corpus};
use crate::device::{DeviceList, MeshDevice};
use crate::kernels::optim::AdamConfig;
use crate::moe::{MoeLmConfig, MoeLmParams, MoeTrainer};
use crate::sched::Runtime;
use crate::trace::{self, BusyTime, Direction, EventKind, TransferKind};
use crate::{Device, Error, Mesh, Result, Rng};

/// Sizes of the suite.
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
    /// The model and tokens per step of the `parallel` section (`train moe`'s defaults).
    pub parallel: (MoeLmConfig, usize),
    pub seed: u64,
}

impl MoeBenchOptions {
    pub fn standard() -> Self {
        let config = MoeLmConfig {
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
        };
        Self {
            config,
            tokens: 1024,
            experts: vec![1, 2, 4, 8, 16],
            devices: vec![1, 2, 4, 8],
            // `train moe`'s defaults.
            parallel: (
                MoeLmConfig {
                    context: 16,
                    capacity_factor: 1.25,
                    blocks: 1,
                    z_loss: 0.0,
                    ..config
                },
                128,
            ),
            seed: 0,
        }
    }

    /// Tiny sizes, for smoke tests and `--quick`.
    pub fn quick() -> Self {
        let base = Self::standard();
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
            experts: vec![1, 4],
            devices: vec![1, 2],
            parallel: (
                MoeLmConfig {
                    context: 4,
                    embed: 4,
                    model: 16,
                    hidden: 16,
                    experts: 4,
                    blocks: 1,
                    ..base.config
                },
                32,
            ),
            seed: 0,
        }
    }
}

fn invalid(reason: String) -> Error {
    Error::InvalidArgument {
        what: "bench moe",
        reason,
    }
}

/// Training batches: from the bundled corpora, or uniform random bytes when they cannot be read.
pub(super) struct Data {
    batches: Vec<(Vec<u32>, Vec<u32>)>,
    source: &'static str,
}

impl Data {
    pub(super) fn new(context: usize, tokens: usize, count: usize, seed: u64) -> Self {
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

    pub(super) fn get(&self, i: usize) -> Result<&(Vec<u32>, Vec<u32>)> {
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
pub(super) fn active_params(cfg: &MoeLmConfig) -> usize {
    let total = params(cfg);
    let per_expert = 2 * cfg.model * cfg.hidden;
    total - cfg.blocks * cfg.experts.saturating_sub(cfg.top_k) * per_expert
}

/// Batches cycled through by the timed steps.
const BATCHES: usize = 8;

/// One model's training steps on some devices.
pub(super) struct TrainStep {
    config: MoeLmConfig,
    trainer: MoeTrainer,
    data: Data,
    /// Ids of the devices trained on (trace events name devices by id).
    devices: Vec<usize>,
    /// Traces the steps to measure the all-to-all and all-reduce shares.
    traced: bool,
    step: usize,
    dropped: f64,
    all_to_all_shares: Vec<f64>,
    all_reduce_shares: Vec<f64>,
    /// Per step: the bytes the all-to-alls and the all-reduces wrote to their devices, every
    /// device together.
    all_to_all_bytes: Vec<f64>,
    all_reduce_bytes: Vec<f64>,
    /// Per step: the bytes the all-to-alls read back from their devices, and the bytes of the
    /// rows routed: every kept choice's row in each of a block's four exchanges (forward,
    /// reverse and their backward).
    all_to_all_staged: Vec<f64>,
    routed_bytes: Vec<f64>,
    /// Per step: the largest share of the step a device sat idle waiting on a collective.
    exposed_shares: Vec<f64>,
    /// Per step: the share of its traced span during which 2 or more devices were busy.
    overlap_shares: Vec<f64>,
    /// GPU time per kernel (node name without its round and block), summed over devices and
    /// steps, and the steps' traced spans times the device count.
    kernel_ns: std::collections::BTreeMap<String, f64>,
    device_wall_ns: f64,
    /// For a case over several adapters: which devices, for the note.
    across: Option<String>,
}

/// A kernel node's name without its round and block (`r0 b1 expert w1` → `expert w1`).
fn kernel_name(node: &str) -> String {
    node.split(' ')
        .skip_while(|w| {
            let mut c = w.chars();
            matches!(c.next(), Some('r' | 'b')) && c.as_str().parse::<u32>().is_ok()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl BlockingRun for TrainStep {
    fn run(&mut self) -> Result<()> {
        let (ctx, tgt) = self.data.get(self.step)?;
        self.step += 1;
        let stats = self.trainer.step(ctx, tgt)?;
        self.dropped = stats.dropped_fraction;
        if self.traced {
            let events = &stats.trace;
            let of = |kind: TransferKind| {
                events
                    .iter()
                    .filter_map(move |e| Some((e, e.moved.filter(|m| m.kind == kind)?)))
            };
            let slowest = |kind: TransferKind| {
                let on = |device: usize| -> f64 {
                    of(kind)
                        .filter(|(e, _)| e.device == device)
                        .map(|(e, _)| e.duration_ns() as f64 * 1e-9)
                        .sum()
                };
                self.devices.iter().map(|&d| on(d)).fold(0.0f64, f64::max)
            };
            let moved = |kind: TransferKind, direction: Direction| -> f64 {
                let bytes: u64 = of(kind)
                    .filter(|(_, m)| m.direction == direction)
                    .map(|(_, m)| m.bytes)
                    .sum();
                bytes as f64
            };
            let written = |kind: TransferKind| moved(kind, Direction::In);
            let wall = stats.seconds.max(1e-12);
            self.all_to_all_shares
                .push(slowest(TransferKind::AllToAll) / wall);
            self.all_reduce_shares
                .push(slowest(TransferKind::AllReduce) / wall);
            self.all_to_all_bytes.push(written(TransferKind::AllToAll));
            self.all_reduce_bytes.push(written(TransferKind::AllReduce));
            self.all_to_all_staged
                .push(moved(TransferKind::AllToAll, Direction::Out));
            let kept: usize = (stats.blocks.iter())
                .flat_map(|b| &b.tokens_per_expert)
                .sum();
            let row = (self.config.model * 4) as f64;
            let exchanged = if self.devices.len() > 1 { 4.0 } else { 0.0 };
            self.routed_bytes.push(kept as f64 * row * exchanged);
            let collective = |n: &str| n.contains("all_to_all") || n.contains("all_reduce");
            let exposed = self
                .devices
                .iter()
                .map(|&d| trace::exposed_wait_ns(events, d, collective))
                .max()
                .unwrap_or(0);
            self.exposed_shares.push(exposed as f64 * 1e-9 / wall);
            let window = trace::span(events).unwrap_or(0..1);
            let busy: Vec<BusyTime> = self
                .devices
                .iter()
                .map(|&d| BusyTime::of(events, d))
                .collect();
            let span_ns = (window.end - window.start).max(1) as f64;
            self.overlap_shares
                .push(trace::overlap_ns(&busy, window, 2) as f64 / span_ns);
            for e in events.iter().filter(|e| e.kind == EventKind::Kernel) {
                *self.kernel_ns.entry(kernel_name(&e.name)).or_default() += e.duration_ns() as f64;
            }
            self.device_wall_ns += span_ns * self.devices.len() as f64;
        }
        Ok(())
    }

    fn extras(&mut self) -> Result<Extras> {
        let cfg = self.config;
        let mut e = Extras {
            note: match &self.across {
                Some(on) => format!("devices: {on}; data: {}", self.data.source),
                None => format!("data: {}", self.data.source),
            },
            ..Extras::default()
        };
        let m = &mut e.metrics;
        m.insert("dropped".into(), self.dropped);
        m.insert("params".into(), params(&cfg) as f64);
        m.insert("active params".into(), active_params(&cfg) as f64);
        if self.traced {
            let median = |v: &mut Vec<f64>| crate::kernels::autotune::median(v);
            m.insert(
                "all-to-all share".into(),
                median(&mut self.all_to_all_shares),
            );
            m.insert(
                "all-reduce share".into(),
                median(&mut self.all_reduce_shares),
            );
            m.insert(
                "all-to-all bytes per step".into(),
                median(&mut self.all_to_all_bytes),
            );
            m.insert(
                "all-reduce bytes per step".into(),
                median(&mut self.all_reduce_bytes),
            );
            m.insert(
                "all-to-all bytes read back per step".into(),
                median(&mut self.all_to_all_staged),
            );
            m.insert(
                "routed rows' bytes per step".into(),
                median(&mut self.routed_bytes),
            );
            m.insert(
                "collectives exposed".into(),
                median(&mut self.exposed_shares),
            );
            m.insert(
                "overlap (2+ devices busy)".into(),
                median(&mut self.overlap_shares),
            );
            // Where a step's device time goes: the five biggest kernels, from GPU timestamps
            // where the adapter has them, those running transposed matmuls marked.
            let transposed: std::collections::BTreeSet<String> = self
                .trainer
                .transposed_kernels()
                .iter()
                .map(|n| kernel_name(n))
                .collect();
            let mut kernels: Vec<(&String, &f64)> = self.kernel_ns.iter().collect();
            kernels.sort_by(|a, b| b.1.total_cmp(a.1));
            let wall = self.device_wall_ns.max(1.0);
            for (name, ns) in kernels.into_iter().take(5) {
                let mark = if transposed.contains(name) {
                    " (transposed)"
                } else {
                    ""
                };
                m.insert(format!("kernel share: {name}{mark}"), ns / wall);
            }
            if !transposed.is_empty() {
                let t: Vec<&str> = transposed.iter().map(String::as_str).collect();
                e.note
                    .push_str(&format!("; transposed matmuls: {}", t.join(", ")));
            }
        }
        Ok(e)
    }
}

fn params(cfg: &MoeLmConfig) -> usize {
    cfg.param_specs().iter().map(|s| s.len()).sum()
}

/// A case training `cfg` on `devices` (of `runtime`'s mesh: in a job, other ranks' too) with one
/// routing group per device.
pub(super) fn train_case<D: DeviceList + ?Sized>(
    runtime: &Runtime,
    name: String,
    devices: &D,
    cfg: MoeLmConfig,
    o: &MoeBenchOptions,
    traced: bool,
) -> Blocking<impl FnOnce() -> Result<TrainStep> + use<D>, TrainStep> {
    dealt_case(runtime, name, devices, cfg, o, traced, Deal::default())
}

/// How a case deals its routing groups to its devices.
#[derive(Debug, Clone, Copy)]
pub(super) struct Deal {
    pub groups_per_device: usize,
    /// By the devices' speeds, measured on the first batch before timing, if that runs faster
    /// ([`MoeTrainer::balance`]); else evenly.
    pub measured: bool,
}

impl Default for Deal {
    fn default() -> Self {
        Self {
            groups_per_device: 1,
            measured: false,
        }
    }
}

/// [`train_case`] with its groups dealt as `deal` says.
fn dealt_case<D: DeviceList + ?Sized>(
    runtime: &Runtime,
    name: String,
    devices: &D,
    cfg: MoeLmConfig,
    o: &MoeBenchOptions,
    traced: bool,
    deal: Deal,
) -> Blocking<impl FnOnce() -> Result<TrainStep> + use<D>, TrainStep> {
    let devices = devices.mesh_devices();
    let client = runtime.client("bench moe", 1);
    let (tokens, seed) = (o.tokens, o.seed);
    // A case over more than one adapter says which devices it used.
    let adapters: Vec<usize> = devices.iter().map(|d| d.info().adapter).collect();
    let across = adapters.windows(2).any(|w| w[0] != w[1]).then(|| {
        let labels: Vec<String> = devices.iter().map(MeshDevice::label).collect();
        labels.join(", ")
    });
    let work = Work::new(tokens as f64, WorkUnit::Token)
        .with_flops(6.0 * (active_params(&cfg) * tokens) as f64);
    Blocking::new(name, work, move || {
        let init = MoeLmParams::init(cfg)?;
        let groups = deal.groups_per_device * devices.len();
        let mut trainer = MoeTrainer::new(
            &client,
            &Mesh::line(&devices),
            &init,
            AdamConfig::new(1e-3),
            groups,
        )?;
        trainer.set_trace(traced);
        let data = Data::new(cfg.context, tokens, BATCHES, seed);
        let mut across = across;
        if deal.measured {
            let (ctx, tgt) = data.get(0)?;
            let dealt = trainer.balance(ctx, tgt)?.to_string();
            across = Some(match across {
                Some(on) => format!("{on}; {dealt}"),
                None => dealt,
            });
        }
        Ok(TrainStep {
            config: cfg,
            trainer,
            data,
            // This process's devices: the trace has their events.
            devices: devices
                .iter()
                .filter_map(MeshDevice::local)
                .map(Device::id)
                .collect(),
            traced,
            step: 0,
            dropped: 0.0,
            all_to_all_shares: Vec::new(),
            all_to_all_bytes: Vec::new(),
            all_reduce_bytes: Vec::new(),
            all_to_all_staged: Vec::new(),
            routed_bytes: Vec::new(),
            all_reduce_shares: Vec::new(),
            exposed_shares: Vec::new(),
            overlap_shares: Vec::new(),
            kernel_ns: Default::default(),
            device_wall_ns: 0.0,
            across,
        })
    })
}

/// Every section's cases on one adapter's devices (see the module docs). `elsewhere`, given for
/// the first adapter of a run only, holds the other chosen adapters' devices, for the case over
/// two adapters.
pub fn plan(
    runtime: &Runtime,
    devices: &[Device],
    elsewhere: Option<&[Device]>,
    o: &MoeBenchOptions,
) -> Result<Vec<Planned>> {
    o.config.validate()?;
    let one = &devices[..1];
    let mut out: Vec<Planned> = Vec::new();

    // MoE against a dense model with the same active expert compute per token.
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
    let dense_name = format!("moe-vs-dense: dense d_ff={}", dense.hidden);
    out.push(Planned::Run(Box::new(train_case(
        runtime,
        dense_name.clone(),
        one,
        dense,
        o,
        false,
    ))));
    out.push(Planned::Run(Box::new(
        train_case(
            runtime,
            format!(
                "moe-vs-dense: moe E={} K={} d_ff={}",
                moe.experts, moe.top_k, moe.hidden
            ),
            one,
            moe,
            o,
            false,
        )
        .compared_to(dense_name),
    )));

    // Step time as experts grow, at fixed tokens.
    let mut first = None;
    for &e in &o.experts {
        let cfg = MoeLmConfig {
            experts: e,
            top_k: o.config.top_k.min(e),
            ..o.config
        };
        let name = format!("experts: E={e} K={}", cfg.top_k);
        let bench = train_case(runtime, name.clone(), one, cfg, o, false);
        out.push(Planned::Run(Box::new(match &first {
            Some(f) => bench.compared_to(String::clone(f)),
            None => bench,
        })));
        first.get_or_insert(name);
    }

    // Devices overlapping: D = 4 against D = 1 at `train moe`'s defaults, one routing group
    // per device, with the overlap and the biggest kernels from the trace.
    let (cfg, tokens) = o.parallel;
    let base_name = "parallel: D=1".to_string();
    let sized = MoeBenchOptions {
        tokens,
        ..o.clone()
    };
    out.push(Planned::Run(Box::new(train_case(
        runtime,
        base_name.clone(),
        one,
        cfg,
        &sized,
        true,
    ))));
    let name = "parallel: D=4 on one adapter".to_string();
    if devices.len() < 4 || !cfg.experts.is_multiple_of(4) || !tokens.is_multiple_of(4) {
        out.push(Planned::skip(
            name,
            format!(
                "needs 4 devices (the adapter has {}; raise --virtual-devices) and experts and tokens divisible by 4",
                devices.len()
            ),
        ));
    } else {
        out.push(Planned::Run(Box::new(
            train_case(runtime, name.clone(), &devices[..4], cfg, &sized, true)
                .compared_to(base_name.clone()),
        )));
        // One device routing the batch as D=4 does, in 4 groups (the same model math): what the
        // groups cost apart from the devices. D=4 against D=1 mixes both.
        let deal = Deal {
            groups_per_device: 4,
            measured: false,
        };
        let same = "parallel: D=1 with D=4's 4 groups".to_string();
        out.push(Planned::Run(Box::new(
            dealt_case(runtime, same, one, cfg, &sized, false, deal).compared_to(name),
        )));
    }
    // The same over two adapters: 2 devices of this one and 2 of the next adapter chosen.
    if let Some(elsewhere) = elsewhere {
        let name = "parallel: D=4 over two adapters".to_string();
        let second: Vec<Device> = elsewhere
            .iter()
            .filter(|d| Some(d.info().adapter) == elsewhere.first().map(|f| f.info().adapter))
            .take(2)
            .cloned()
            .collect();
        if devices.len() < 2 || second.len() < 2 {
            out.push(Planned::skip(
                name,
                format!(
                    "needs 2 devices of each of two adapters (this one has {}, the next {})",
                    devices.len(),
                    second.len()
                ),
            ));
        } else if !cfg.experts.is_multiple_of(4) || !tokens.is_multiple_of(4) {
            out.push(Planned::skip(
                name,
                "needs experts and tokens divisible by 4".into(),
            ));
        } else {
            let four: Vec<Device> = devices[..2].iter().chain(&second).cloned().collect();
            out.push(Planned::Run(Box::new(
                train_case(runtime, name, &four, cfg, &sized, true).compared_to(base_name),
            )));
            // Four groups per device, dealt evenly, then by measured speed (the same groups and
            // losses): what balancing buys over adapters of different speeds.
            let even_name = "parallel: D=4 over two adapters, 4 groups each".to_string();
            if tokens.is_multiple_of(16) {
                let deal = Deal {
                    groups_per_device: 4,
                    measured: false,
                };
                let even = dealt_case(runtime, even_name.clone(), &four, cfg, &sized, true, deal);
                out.push(Planned::Run(Box::new(even)));
                let deal = Deal {
                    measured: true,
                    ..deal
                };
                let name = "parallel: D=4 over two adapters, 16 groups balanced".to_string();
                let measured = dealt_case(runtime, name, &four, cfg, &sized, true, deal);
                out.push(Planned::Run(Box::new(measured.compared_to(even_name))));
            } else {
                out.push(Planned::skip(
                    even_name,
                    "needs tokens divisible by 16 groups".into(),
                ));
            }
        }
    }

    // The all-to-all share of a step at each device count.
    let experts = o.devices.iter().copied().max().unwrap_or(1).max(1);
    let cfg = MoeLmConfig {
        experts,
        top_k: o.config.top_k.min(experts),
        ..o.config
    };
    let mut first = None;
    for &n in &o.devices {
        let name = format!("all-to-all: D={n} E={experts}");
        let reason = if n == 0 || n > devices.len() {
            Some(format!(
                "needs {n} devices, the adapter has {} (raise --virtual-devices)",
                devices.len()
            ))
        } else if !o.tokens.is_multiple_of(n) || !experts.is_multiple_of(n) {
            Some(format!(
                "{} tokens or {experts} experts do not split over {n} devices",
                o.tokens
            ))
        } else {
            None
        };
        if let Some(reason) = reason {
            out.push(Planned::skip(name, reason));
            continue;
        }
        let bench = train_case(runtime, name.clone(), &devices[..n], cfg, o, true);
        out.push(Planned::Run(Box::new(match &first {
            Some(f) => bench.compared_to(String::clone(f)),
            None => bench,
        })));
        first.get_or_insert(name);
    }
    Ok(out)
}
