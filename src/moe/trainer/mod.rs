//! The GPU trainer of the MoE language model ([`super`]): forward, backward and Adam in WGSL,
//! data- and expert-parallel over a mesh of `D` devices, as one compiled program per step shape
//! (`step_program`) submitted through the caller's client of the process's gang-scheduling
//! [`Runtime`](crate::sched::Runtime). The host only submits batches and reads back small
//! statistics; every kernel is a trace event of the runtime.
//!
//! # Layout
//!
//! - **Routing groups** (GShard): a batch of `T` tokens is `G` consecutive groups of `T / G`, each
//!   routed on its own with capacity `RouterConfig::capacity(T / G)`; this is
//!   [`super::reference::forward_grouped`], which the trainer matches. `G` is a multiple of `D`;
//!   by default device `i` holds groups `i·G/D .. (i+1)·G/D` (its data shard), processed one
//!   *round* at a time: in round `j` every device runs its group `i·G/D + j` through the model, so
//!   the all-to-alls of a round see one group per device.
//! - **Uneven devices** ([`GroupSplit`], [`GpuTrainer::set_split`], [`GpuTrainer::balance`]):
//!   device `i` may hold any `n_i ≥ 1` consecutive groups instead, say more on a fast adapter
//!   than on a slow one. A step then runs `max n_i` rounds; in a round where a device has no
//!   group its token-side kernels are idle shards of their nodes (`Node::active`), and it sends
//!   zero slots, while its experts serve the other devices' tokens. The groups and the losses
//!   are those of the even split; the gradients' sums add the groups in another order.
//! - **Experts**: device `i` holds experts `i·E/D .. (i+1)·E/D` of every block (rows of `w1`,
//!   `w2`); `E` must be divisible by `D`. Slots reach them by a capacity-padded all-to-all and
//!   come back by the same all-to-all; in backward the slot gradients take the same route.
//! - **Dense parameters** (`embed`, `w_in`, `dense`, `router`, `w_out`) are replicated. Each
//!   device accumulates the gradients of its groups; after the last round they are packed and
//!   all-reduced (summed in device order on every device), so every replica gets the same sum and
//!   the same Adam update.
//! - **Scaling**: each group's backward is that of `CE_g + Σ_l (aux_{g,l} + z_{g,l})`, where the
//!   kernels already take the means over the group's tokens; the batch loss is the mean over
//!   groups, so every gradient is scaled by `1/G` once, after the sums: by Adam as it reads it
//!   (the bits a scaling kernel would store), or by a kernel where the gradients are the result.
//!
//! The host side every trainer over a gang shares (the Transformer's too) is here as well:
//! `check_gang`, `ShardLayout` (uploading parameters and moments, expert tensors cut by device),
//! `gather_read` and `unpack_grads` (reading them back), and `StatsLayout` (a step's statistics
//! packs).

mod checkpoint;
mod split;
pub(crate) mod step_program;

pub use checkpoint::TrainerCheckpoint;
pub use split::{Balance, Balanced, GroupSplit};

use super::reference::{RoutingStats, group_size};
use super::{MoeLmConfig, MoeLmParams, VOCAB};
use crate::device::{DeviceList, MeshDevice};
use crate::kernels::optim::{self, AdamConfig};
use crate::kernels::router::STAT_WORDS;
use crate::kernels::router::{ExpertStat, load_balancing_loss};
use crate::program::{CompileOptions, Executable, HostData, Op, Variables};
use crate::sched::{Client, DispatchMode, RunHandle, RunOptions};
use crate::trace::{Event, EventMeta, ns_since_epoch};
use crate::{DType, Error, Result, Tensor};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;
use step_program::{Kind, Mode, StepShape, m_var, param_var, shard_shapes, v_var};

/// What one [`GpuTrainer::step`] did (losses are those of the parameters before the update).
#[derive(Debug, Clone, PartialEq)]
pub struct StepStats {
    /// The step number, from 1.
    pub step: u32,
    /// `ce + aux + z`.
    pub loss: f64,
    /// Mean cross-entropy over the batch (nats).
    pub ce: f64,
    /// Load-balancing loss: summed over blocks, averaged over routing groups.
    pub aux: f64,
    /// Router z-loss: summed over blocks, averaged over routing groups.
    pub z: f64,
    /// Kept (token, choice) pairs per expert, summed over blocks and groups.
    pub tokens_per_expert: Vec<usize>,
    /// Dropped choices over all `T · K · L` choices.
    pub dropped_fraction: f64,
    /// Per block, as [`super::reference::forward_grouped`] reports it.
    pub blocks: Vec<RoutingStats>,
    /// Wall time of the step.
    pub seconds: f64,
    /// The step's trace events (kernels, transfers, waits, host encoding), when the trainer
    /// traces its steps ([`GpuTrainer::set_trace`]); times count from the process's trace epoch.
    pub trace: Vec<Event>,
}

impl StepStats {
    /// The spread of [`Self::tokens_per_expert`]: its standard deviation over its mean
    /// (coefficient of variation; 0 for an even split, and for no tokens at all). The seeds'
    /// warning about token imbalance in one number.
    pub fn expert_cv(&self) -> f64 {
        coefficient_of_variation(&self.tokens_per_expert)
    }
}

/// Standard deviation over mean of `counts` (population form); 0 when the mean is 0.
pub fn coefficient_of_variation(counts: &[usize]) -> f64 {
    let n = counts.len().max(1) as f64;
    let mean = counts.iter().sum::<usize>() as f64 / n;
    if mean == 0.0 {
        return 0.0;
    }
    let var = counts
        .iter()
        .map(|&c| (c as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    var.sqrt() / mean
}

/// Loss and routing sums of a step's rounds.
#[derive(Default)]
pub(crate) struct RoundSums {
    pub ce_sum: f64,
    pub aux_sum: f64,
    pub z_sum: f64,
    /// `[block][expert]` kept pairs.
    pub kept: Vec<Vec<usize>>,
    /// `[block]` dropped pairs.
    pub dropped: Vec<usize>,
    /// `[block]` aux and z sums over groups.
    pub block_aux: Vec<f64>,
    pub block_z: Vec<f64>,
}

/// What a step program's statistics pack holds per round and device: `rows` row losses, then per
/// expert layer the router's expert statistics and the row logsumexps of its logits.
pub(crate) struct StatsLayout {
    pub rows: usize,
    /// Expert layers.
    pub layers: usize,
    pub router: crate::kernels::router::RouterConfig,
    pub aux_alpha: f32,
    pub z_loss: f32,
}

impl StatsLayout {
    /// Words of one pack.
    pub fn words(&self) -> usize {
        self.rows + self.layers * (self.router.experts * STAT_WORDS + self.rows)
    }

    /// The sums over every round's packs (each a device's pack after another), but for the packs
    /// of devices `split` leaves idle in a round.
    pub fn sums(&self, results: &[Vec<u8>], split: &GroupSplit) -> Result<RoundSums> {
        let (layers, experts, tg) = (self.layers, self.router.experts, self.rows);
        let mut sums = RoundSums {
            kept: vec![vec![0; experts]; layers],
            dropped: vec![0; layers],
            block_aux: vec![0.0; layers],
            block_z: vec![0.0; layers],
            ..RoundSums::default()
        };
        let short = || invalid("trainer", "a statistics pack is short".into());
        for (r, round) in results.iter().enumerate() {
            for (i, device) in round.chunks(self.words() * 4).enumerate() {
                if split.group(i, r).is_none() {
                    continue;
                }
                let f32s = |at: usize, n: usize| -> Result<Vec<f32>> {
                    let b = device.get(at * 4..(at + n) * 4).ok_or_else(short)?;
                    Ok(bytemuck::pod_collect_to_vec(b))
                };
                let rows = f32s(0, tg)?;
                sums.ce_sum += rows.iter().map(|&v| f64::from(v)).sum::<f64>();
                let mut at = tg;
                for l in 0..layers {
                    let n = experts * STAT_WORDS;
                    let b = device.get(at * 4..(at + n) * 4).ok_or_else(short)?;
                    let stats: Vec<ExpertStat> = bytemuck::pod_collect_to_vec(b);
                    let lse = f32s(at + n, tg)?;
                    at += n + tg;
                    let kept: usize = stats.iter().map(|s| s.kept as usize).sum();
                    for (acc, s) in sums.kept[l].iter_mut().zip(&stats) {
                        *acc += s.kept as usize;
                    }
                    sums.dropped[l] += (tg * self.router.k).saturating_sub(kept);
                    let aux = f64::from(load_balancing_loss(&stats, self.aux_alpha));
                    let z = f64::from(self.z_loss)
                        * lse.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>()
                        / tg as f64;
                    sums.aux_sum += aux;
                    sums.z_sum += z;
                    sums.block_aux[l] += f64::from(aux as f32);
                    sums.block_z[l] += f64::from(z as f32);
                }
            }
        }
        Ok(sums)
    }
}

/// A step submitted to the runtime and not yet finished ([`GpuTrainer::submit_step`]).
#[derive(Debug)]
pub struct PendingStep {
    handle: RunHandle,
    started: Instant,
    tokens: usize,
    step: u32,
}

/// The trainer: parameters and Adam state as program variables on the devices, and the compiled
/// step programs.
pub struct GpuTrainer {
    config: MoeLmConfig,
    adam: AdamConfig,
    step: u32,
    groups: usize,
    /// How the groups are dealt to the devices (even unless [`GpuTrainer::set_split`] said
    /// otherwise).
    split: GroupSplit,
    devices: Vec<MeshDevice>,
    /// Per parameter: whether it is an expert tensor (sharded over devices).
    expert: Vec<bool>,
    variables: Variables,
    client: Client,
    dispatch: DispatchMode,
    /// Keep each step's trace events in its [`StepStats`].
    trace: bool,
    /// Compiled programs by mode, batch tokens and split.
    programs: Mutex<HashMap<(Mode, usize, GroupSplit), Arc<Executable>>>,
}

fn invalid(what: &'static str, reason: String) -> Error {
    Error::InvalidArgument { what, reason }
}

impl GpuTrainer {
    /// A trainer over `devices` (devices of `client`'s runtime) with one routing group per
    /// device. Steps run as runs of `client`, so other clients of the runtime (another trainer, a
    /// live view) share the devices in gang order.
    pub fn new(
        client: &Client,
        devices: &(impl DeviceList + ?Sized),
        params: &MoeLmParams,
        adam: AdamConfig,
    ) -> Result<Self> {
        let devices = devices.mesh_devices();
        let groups = devices.len();
        Self::build(client, devices, params, None, adam, groups, 0)
    }

    /// A trainer over `devices` routing each batch in `groups` groups (a multiple of the device
    /// count): the same math as [`super::Adam::train_step_grouped`] with `groups`.
    pub fn with_groups(
        client: &Client,
        devices: &(impl DeviceList + ?Sized),
        params: &MoeLmParams,
        adam: AdamConfig,
        groups: usize,
    ) -> Result<Self> {
        Self::build(
            client,
            devices.mesh_devices(),
            params,
            None,
            adam,
            groups,
            0,
        )
    }

    /// A trainer continuing from `checkpoint` on `devices` (any count dividing both `E` and the
    /// checkpoint's groups): replicated tensors and their moments are uploaded to every device,
    /// expert tensors to their owners; the next step is `checkpoint.step + 1`.
    pub fn resume(
        client: &Client,
        devices: &(impl DeviceList + ?Sized),
        checkpoint: &TrainerCheckpoint,
    ) -> Result<Self> {
        checkpoint.check()?;
        Self::build(
            client,
            devices.mesh_devices(),
            &checkpoint.params,
            Some((&checkpoint.m, &checkpoint.v)),
            checkpoint.adam,
            checkpoint.groups,
            checkpoint.step,
        )
    }

    /// Downloads everything [`Self::resume`] needs: parameters, Adam's moments (expert tensors
    /// gathered from their devices), the step, the Adam setting and the groups.
    pub fn checkpoint(&self) -> Result<TrainerCheckpoint> {
        let out = TrainerCheckpoint {
            params: self.download(Kind::Param)?,
            m: self.download(Kind::M)?,
            v: self.download(Kind::V)?,
            step: self.step,
            adam: self.adam,
            groups: self.groups,
        };
        out.check()?;
        Ok(out)
    }

    fn build(
        client: &Client,
        devices: Vec<MeshDevice>,
        params: &MoeLmParams,
        moments: Option<(&MoeLmParams, &MoeLmParams)>,
        adam: AdamConfig,
        groups: usize,
        step: u32,
    ) -> Result<Self> {
        const WHAT: &str = "moe trainer";
        params.check()?;
        let cfg = params.config;
        let n = devices.len();
        check_gang(WHAT, client, &devices, Some(cfg.experts), groups)?;
        // Checks the Adam settings now rather than at the first step.
        optim::adam_reference(&mut [], &mut [], &mut [], &[], adam, 1)?;
        let specs = cfg.param_specs();
        let mut expert = vec![false; specs.len()];
        for l in 0..cfg.blocks {
            let ix = cfg.block_index(l);
            expert[ix.w1] = true;
            expert[ix.w2] = true;
        }
        let shapes = shard_shapes(&cfg, &expert, n);
        let names: Vec<String> = specs.into_iter().map(|s| s.name).collect();
        let layout = ShardLayout {
            devices: &devices,
            expert_devices: n,
            shapes: &shapes,
            expert: &expert,
            names: &names,
        };
        let variables = layout.variables(
            &params.tensors,
            moments.map(|(m, v)| (&m.tensors[..], &v.tensors[..])),
        )?;
        Ok(Self {
            config: cfg,
            adam,
            step,
            groups,
            split: GroupSplit::even(groups, n)?,
            devices,
            expert,
            variables,
            client: client.clone(),
            dispatch: DispatchMode::Parallel,
            trace: false,
            programs: Mutex::default(),
        })
    }

    pub fn config(&self) -> &MoeLmConfig {
        &self.config
    }

    /// Routing groups per batch.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// How the routing groups are dealt to the devices.
    pub fn split(&self) -> &GroupSplit {
        &self.split
    }

    /// Deals the routing groups to the devices as `split` says from the next step on (see
    /// [`GroupSplit`]): the same groups and losses, with the token side's work where the devices'
    /// speeds put it.
    pub fn set_split(&mut self, split: GroupSplit) -> Result<()> {
        split.check_fits(self.groups, self.devices.len())?;
        self.split = split;
        Ok(())
    }

    /// Deals the groups by the devices' speeds, if that runs faster: measures each device's
    /// speed on a batch (traced gradient passes with an even split, no update: its busy time),
    /// then times gradient passes with the even split and with the split those speeds ask for,
    /// and keeps the faster ([`GroupSplit::choose`]). Every device must be this process's
    /// (another rank's device leaves no events here).
    pub fn balance(&mut self, contexts: &[u32], targets: &[u32]) -> Result<Balanced> {
        let balanced = GroupSplit::balance(&self.devices, self.groups, |split, traced| {
            self.submit(Mode::Grads, contexts, targets, None, split, traced)
        })?;
        self.set_split(balanced.split.clone())?;
        Ok(balanced)
    }

    /// Steps taken.
    pub fn steps(&self) -> u32 {
        self.step
    }

    /// The devices the trainer is spread over (in a job of several ranks, some are other
    /// ranks').
    pub fn devices(&self) -> &[MeshDevice] {
        &self.devices
    }

    /// The client the steps run as.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// How the runtime dispatches each step (parallel by default).
    pub fn set_dispatch(&mut self, mode: DispatchMode) {
        self.dispatch = mode;
    }

    /// Keep every step's trace events (kernels GPU-timestamped where the adapter can) in its
    /// [`StepStats::trace`]. Whether or not it is on, steps also go to the runtime's own tracer
    /// when that is on, with a statistics event per device and step.
    pub fn set_trace(&mut self, on: bool) {
        self.trace = on;
    }

    /// The names of the compiled programs' kernel nodes that run transposed matmuls (`xᵀ·dy`,
    /// `dy·wᵀ`, expert weight gradients): benches name them, since on some adapters transposed
    /// operands cannot use the fastest matmul kernel.
    pub fn transposed_kernels(&self) -> BTreeSet<String> {
        let programs = self.programs.lock().unwrap_or_else(PoisonError::into_inner);
        programs
            .values()
            .flat_map(|exec| exec.program().nodes())
            .filter(|n| matches!(&n.op, Op::Kernel(k) if k.0.transposed()))
            .map(|n| n.name.clone())
            .collect()
    }

    /// Checks a batch; returns `T`.
    fn check_batch(&self, contexts: &[u32], targets: &[u32]) -> Result<usize> {
        const WHAT: &str = "moe trainer batch";
        let t = targets.len();
        let c = self.config.context;
        if t == 0 || contexts.len() != t * c {
            return Err(Error::ShapeMismatch {
                what: WHAT,
                expected: format!("T >= 1 targets and T × {c} context bytes"),
                got: format!("{t} targets, {} context bytes", contexts.len()),
            });
        }
        if let Some(bad) = contexts
            .iter()
            .chain(targets)
            .find(|&&v| v as usize >= VOCAB)
        {
            return Err(invalid(WHAT, format!("byte id {bad} is not below {VOCAB}")));
        }
        group_size(t, self.groups)?;
        Ok(t)
    }

    /// The program of `mode` for batches of `tokens` dealt as `split`, compiled on first use.
    fn program(&self, mode: Mode, tokens: usize, split: &GroupSplit) -> Result<Arc<Executable>> {
        let mut programs = self.programs.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (mode, tokens, split.clone());
        if let Some(p) = programs.get(&key) {
            return Ok(p.clone());
        }
        let shape = StepShape {
            config: self.config,
            adam: self.adam,
            split: split.clone(),
            group_tokens: tokens / self.groups,
        };
        let program = step_program::build(&shape, &self.expert, mode)?;
        // Two training steps may be in flight (the next one submitted while this one runs).
        let opts = CompileOptions {
            in_flight: if mode == Mode::Train { 2 } else { 1 },
            ..CompileOptions::default()
        };
        let exec = Arc::new(program.compile_with(&self.devices, opts, &self.variables)?);
        programs.insert(key, exec.clone());
        Ok(exec)
    }

    /// Runs `mode` on a batch: the results' bytes.
    fn run(
        &self,
        mode: Mode,
        contexts: &[u32],
        targets: &[u32],
        bias: Option<(f32, f32)>,
    ) -> Result<Vec<Vec<u8>>> {
        let trace = self.trace && mode == Mode::Train;
        self.submit(mode, contexts, targets, bias, &self.split, trace)?
            .wait_bytes()
    }

    /// Submits `mode` on a batch, dealt as `split`, to the runtime.
    fn submit(
        &self,
        mode: Mode,
        contexts: &[u32],
        targets: &[u32],
        bias: Option<(f32, f32)>,
        split: &GroupSplit,
        trace: bool,
    ) -> Result<RunHandle> {
        let t = self.check_batch(contexts, targets)?;
        let exec = self.program(mode, t, split)?;
        let (d, c) = (self.devices.len(), self.config.context);
        let rounds = split.rounds();
        let tg = t / self.groups;
        let mut args: Vec<HostData> = Vec::with_capacity(2 * rounds + 1);
        for r in 0..rounds {
            // A device idle in this round gets zeros, which nothing reads.
            let mut ctx = vec![0u32; d * tg * c];
            let mut tgt = vec![0u32; d * tg];
            for i in 0..d {
                if let Some(g) = split.group(i, r) {
                    ctx[i * tg * c..(i + 1) * tg * c]
                        .copy_from_slice(&contexts[g * tg * c..(g + 1) * tg * c]);
                    tgt[i * tg..(i + 1) * tg].copy_from_slice(&targets[g * tg..(g + 1) * tg]);
                }
            }
            args.push(ctx.into());
            args.push(tgt.into());
        }
        if let Some((b1, b2)) = bias {
            args.push([b1, b2].repeat(d).into());
        }
        let opts = RunOptions {
            mode: self.dispatch,
            microbatch: None,
            trace,
        };
        self.client.submit(&exec, args, opts)
    }

    /// The gradient of the batch loss with respect to every parameter (what [`Self::step`]
    /// would apply), downloaded; no update.
    pub fn grads(&self, contexts: &[u32], targets: &[u32]) -> Result<MoeLmParams> {
        let results = self.run(Mode::Grads, contexts, targets, None)?;
        let shapes = shard_shapes(&self.config, &self.expert, self.devices.len());
        let tensors = unpack_grads(&results, &shapes, &self.expert, self.devices.len())?;
        let out = MoeLmParams {
            config: self.config,
            tensors,
        };
        out.check()?;
        Ok(out)
    }

    /// Variable `kind` of every parameter, gathered: replicated ones from device 0, expert ones
    /// from every device in order. Read back by a program (results reach every rank, so this works
    /// the same when some of the devices are other ranks').
    fn download(&self, kind: Kind) -> Result<MoeLmParams> {
        let exec = self.program(Mode::Read(kind), 0, &self.split)?;
        let opts = RunOptions {
            mode: self.dispatch,
            ..RunOptions::default()
        };
        let results = self.client.run(&exec, Vec::<Vec<f32>>::new(), opts)?;
        let n = self.devices.len();
        let tensors = gather_read(results, &self.expert, n, n);
        let out = MoeLmParams {
            config: self.config,
            tensors,
        };
        out.check()?;
        Ok(out)
    }

    /// Loss and routing sums from a training step's per-round statistics packs.
    fn sums(&self, results: &[Vec<u8>], tg: usize) -> Result<RoundSums> {
        let cfg = &self.config;
        let layout = StatsLayout {
            rows: tg,
            layers: cfg.blocks,
            router: cfg.router(),
            aux_alpha: cfg.aux_alpha,
            z_loss: cfg.z_loss,
        };
        layout.sums(results, &self.split)
    }

    /// One training step on a batch (`contexts` `[T, C]`, `targets` `[T]`, byte ids).
    pub fn step(&mut self, contexts: &[u32], targets: &[u32]) -> Result<StepStats> {
        let pending = self.submit_step(contexts, targets)?;
        self.finish_step(pending)
    }

    /// Submits a training step and returns at once: several trainers sharing a runtime submit
    /// their steps, then finish them, and the gang scheduler interleaves their work. The step
    /// counts as taken from here on.
    pub fn submit_step(&mut self, contexts: &[u32], targets: &[u32]) -> Result<PendingStep> {
        let started = Instant::now();
        let tokens = self.check_batch(contexts, targets)?;
        let step = self.step + 1;
        let bias = Some(self.adam.bias(step));
        let handle = self.submit(
            Mode::Train,
            contexts,
            targets,
            bias,
            &self.split,
            self.trace,
        )?;
        self.step = step;
        Ok(PendingStep {
            handle,
            started,
            tokens,
            step,
        })
    }

    /// Waits for a submitted step; its statistics.
    pub fn finish_step(&mut self, pending: PendingStep) -> Result<StepStats> {
        let PendingStep {
            handle,
            started: start,
            tokens: t,
            step,
        } = pending;
        let (results, mut trace) = handle.wait_traced()?;
        let cfg = self.config;
        let tg = t / self.groups;
        let sums = self.sums(&results, tg)?;

        let n = self.groups as f64;
        let (ce, aux, z) = (sums.ce_sum / t as f64, sums.aux_sum / n, sums.z_sum / n);
        let blocks: Vec<RoutingStats> = (0..cfg.blocks)
            .map(|l| RoutingStats {
                capacity: cfg.router().capacity(tg),
                tokens_per_expert: sums.kept[l].clone(),
                dropped: sums.dropped[l],
                dropped_fraction: sums.dropped[l] as f64 / (t * cfg.top_k) as f64,
                aux_loss: (sums.block_aux[l] / n) as f32,
                z_loss: (sums.block_z[l] / n) as f32,
            })
            .collect();
        let dropped: usize = sums.dropped.iter().sum();
        let stats = StepStats {
            step,
            loss: ce + aux + z,
            ce,
            aux,
            z,
            tokens_per_expert: (0..cfg.experts)
                .map(|e| sums.kept.iter().map(|k| k[e]).sum())
                .collect(),
            dropped_fraction: dropped as f64 / (t * cfg.top_k * cfg.blocks.max(1)) as f64,
            blocks,
            seconds: start.elapsed().as_secs_f64(),
            trace: Vec::new(),
        };
        let process = self.client.tracer();
        if process.is_on() || self.trace {
            let (begin, now) = (ns_since_epoch(start), ns_since_epoch(Instant::now()));
            let name = format!(
                "step {step}: loss {:.5} ce {:.5} aux {:.5} z {:.5} dropped {:.4} tokens/expert {:?} \
                 (cv {:.3})",
                stats.loss,
                stats.ce,
                stats.aux,
                stats.z,
                stats.dropped_fraction,
                stats.tokens_per_expert,
                stats.expert_cv()
            );
            for device in self.devices.iter().filter_map(MeshDevice::local) {
                let e = EventMeta::host_encode(device.id()).event(name.clone(), begin, now);
                process.emit_with(|| e.clone());
                if self.trace {
                    trace.push(e);
                }
            }
        }
        Ok(StepStats { trace, ..stats })
    }

    /// Mean cross-entropy (nats) of the current parameters on a batch, forward only (routed in
    /// the trainer's groups, as in training).
    pub fn eval(&self, contexts: &[u32], targets: &[u32]) -> Result<f64> {
        let nats = self.token_nats(contexts, targets)?;
        Ok(nats.iter().sum::<f64>() / nats.len().max(1) as f64)
    }

    /// Cross-entropy (nats) of every token of a batch, in batch order, forward only: what
    /// Branch-Train-Merge's ensemble weighs.
    pub fn token_nats(&self, contexts: &[u32], targets: &[u32]) -> Result<Vec<f64>> {
        let results = self.run(Mode::Forward, contexts, targets, None)?;
        let t = targets.len();
        let tg = t / self.groups;
        let mut out = vec![0.0f64; t];
        for (round, bytes) in results.iter().enumerate() {
            let rows: Vec<f32> = bytemuck::pod_collect_to_vec(bytes);
            for (i, device) in rows.chunks(tg).enumerate() {
                let Some(g) = self.split.group(i, round) else {
                    continue;
                };
                for (k, &v) in device.iter().enumerate() {
                    out[g * tg + k] = f64::from(v);
                }
            }
        }
        Ok(out)
    }

    /// Downloads the parameters (expert tensors gathered from their devices).
    pub fn params(&self) -> Result<MoeLmParams> {
        self.download(Kind::Param)
    }
}

/// Errors unless `devices` are some, all `client`'s, split `experts` (when the model has expert
/// layers) and `groups` evenly: what every trainer over a gang needs.
pub(crate) fn check_gang(
    what: &'static str,
    client: &Client,
    devices: &[MeshDevice],
    experts: Option<usize>,
    groups: usize,
) -> Result<()> {
    let n = devices.len();
    if n == 0 {
        return Err(invalid(what, "no devices".into()));
    }
    if let Some(d) = devices.iter().find(|d| !client.mesh().contains(d)) {
        return Err(invalid(
            what,
            format!("device {} is not in the client's runtime", d.label()),
        ));
    }
    if let Some(e) = experts.filter(|e| !e.is_multiple_of(n)) {
        return Err(invalid(
            what,
            format!("{e} experts cannot be split evenly over {n} devices"),
        ));
    }
    if groups == 0 || !groups.is_multiple_of(n) {
        return Err(invalid(
            what,
            format!("{groups} routing groups cannot be split evenly over {n} devices"),
        ));
    }
    Ok(())
}

/// Adam's first and second moments, one vector per parameter.
pub(crate) type Moments<'a> = (&'a [Vec<f32>], &'a [Vec<f32>]);

/// How a model's parameters lie on a gang: per-device shapes, and which tensors are split by their
/// first axis (experts) rather than replicated. Shared by every trainer of the step programs.
pub(crate) struct ShardLayout<'a> {
    pub devices: &'a [MeshDevice],
    /// Devices along the expert axis: device `i` holds expert shard `i mod expert_devices` (all
    /// of them, with one axis).
    pub expert_devices: usize,
    pub shapes: &'a [Vec<usize>],
    pub expert: &'a [bool],
    pub names: &'a [String],
}

impl ShardLayout<'_> {
    /// This process's shards of `values` (other ranks upload theirs): replicated tensors whole on
    /// every device, expert tensors cut by their first axis in device order; `None`: zeros.
    fn shards(&self, p: usize, values: Option<&[f32]>) -> Result<Vec<Option<Tensor>>> {
        let shape = &self.shapes[p];
        let per_device: usize = shape.iter().product();
        self.devices
            .iter()
            .enumerate()
            .map(|(i, device)| {
                let Some(device) = device.local() else {
                    return Ok(None);
                };
                let Some(values) = values else {
                    return Tensor::zeros(device, shape, DType::F32).map(Some);
                };
                let shard = i % self.expert_devices.max(1);
                let start = if self.expert[p] {
                    shard * per_device
                } else {
                    0
                };
                let part = values.get(start..start + per_device).ok_or_else(|| {
                    invalid(
                        "trainer upload",
                        format!("{} is shorter than its shape", self.names[p]),
                    )
                })?;
                Tensor::from_f32(device, shape, DType::F32, part).map(Some)
            })
            .collect()
    }

    /// The step programs' variables: every parameter, and Adam's two moments (`moments`, or
    /// zeros).
    pub fn variables(&self, params: &[Vec<f32>], moments: Option<Moments>) -> Result<Variables> {
        let mut variables = Variables::new();
        for p in 0..self.shapes.len() {
            let values = params.get(p).map(Vec::as_slice).unwrap_or_default();
            variables.insert_shards(param_var(p), self.shards(p, Some(values))?);
            let (m, v) = match moments {
                Some((m, v)) => (m.get(p), v.get(p)),
                None => (None, None),
            };
            let (m, v) = (m.map(Vec::as_slice), v.map(Vec::as_slice));
            if moments.is_some() && (m.is_none() || v.is_none()) {
                return Err(invalid(
                    "trainer upload",
                    format!("the moments lack {}", self.names[p]),
                ));
            }
            variables.insert_shards(m_var(p), self.shards(p, m)?);
            variables.insert_shards(v_var(p), self.shards(p, v)?);
        }
        Ok(variables)
    }
}

/// A gradient program's one result (every device's pack of its per-device gradients, one after
/// another) as whole tensors: replicated ones from device 0, expert ones gathered from the first
/// `expert_devices` devices (one of each expert shard) in order.
pub(crate) fn unpack_grads(
    results: &[Vec<u8>],
    shapes: &[Vec<usize>],
    expert: &[bool],
    expert_devices: usize,
) -> Result<Vec<Vec<f32>>> {
    let words: Vec<f32> = bytemuck::pod_collect_to_vec(results.first().map_or(&[][..], |v| v));
    let per_device: usize = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
    let mut tensors = vec![Vec::new(); shapes.len()];
    for d in 0..expert_devices {
        let mut at = d * per_device;
        for (p, s) in shapes.iter().enumerate() {
            let len: usize = s.iter().product();
            let part = words
                .get(at..at + len)
                .ok_or_else(|| invalid("trainer", "the gradient pack is short".into()))?;
            if d == 0 || expert[p] {
                tensors[p].extend_from_slice(part);
            }
            at += len;
        }
    }
    Ok(tensors)
}

/// A read program's results as whole tensors (every device's shard comes one after another):
/// replicated ones from device 0, expert ones from the first `expert_devices` devices, which
/// hold one of each expert shard in order.
pub(crate) fn gather_read(
    results: Vec<Vec<f32>>,
    expert: &[bool],
    devices: usize,
    expert_devices: usize,
) -> Vec<Vec<f32>> {
    results
        .into_iter()
        .enumerate()
        .map(|(p, mut all)| {
            let shard = all.len() / devices.max(1);
            let keep = if expert.get(p).copied().unwrap_or(false) {
                shard * expert_devices
            } else {
                shard
            };
            all.truncate(keep);
            all
        })
        .collect()
}

impl std::fmt::Debug for GpuTrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuTrainer")
            .field("config", &self.config)
            .field("adam", &self.adam)
            .field("step", &self.step)
            .field("groups", &self.groups)
            .field("split", &self.split.to_string())
            .field(
                "devices",
                &self
                    .devices
                    .iter()
                    .map(MeshDevice::label)
                    .collect::<Vec<_>>(),
            )
            .field("tracing", &self.trace)
            .finish()
    }
}
