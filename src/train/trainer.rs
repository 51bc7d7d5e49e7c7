//! The one trainer: a [`StepModel`]'s parameters and Adam state as program variables on a gang of
//! devices, data- and expert-parallel, and one compiled step program per mode, batch and split,
//! submitted through the caller's client of the process's gang-scheduling
//! [`Runtime`](crate::sched::Runtime). The host only submits batches and reads back small
//! statistics; every kernel is a trace event of the runtime.
//!
//! - **Routing groups** (GShard): a batch of `U` units is `G` consecutive groups of `U / G`, each
//!   routed on its own. `G` is a multiple of the device count `D`; by default device `i` holds
//!   groups `i·G/D .. (i+1)·G/D` (its data shard) and runs one per *round*, so the all-to-alls
//!   of a round see one group per device, and any `D` dividing `G` and `E` gives the loss curve
//!   of one device with the same `G`.
//! - **Uneven devices** ([`GroupSplit`], [`Trainer::set_split`], [`Trainer::balance`]): device
//!   `i` may hold any `n_i ≥ 1` consecutive groups instead, say more on a fast adapter than on a
//!   slow one. A step then runs `max n_i` rounds; in a round where a device has no group its
//!   token-side kernels are idle shards of their nodes, while its experts serve the others. The
//!   groups and the losses are those of the even split; the gradients' sums add the groups in
//!   another order.
//! - **The mesh**: a [`crate::Mesh`] of one axis ([`crate::Mesh::line`] of a device list:
//!   experts split over all of them), or with axes `{data, expert}`: each of `data`
//!   rows (`mesh.sub("data", i)`) holds every expert once, the all-to-alls run within rows, and
//!   the expert gradients are all-reduced over `data` (GShard, DeepSpeed-MoE), for the models
//!   whose step supports it.
//! - **Dense parameters** are replicated: each device accumulates the gradients of its groups;
//!   after the last round they are all-reduced (summed in device order on every device), so every
//!   replica gets the same sum and the same Adam update. Every gradient is scaled by `1/G` once,
//!   after the sums.
//! - **Forward passes** ([`Trainer::forward`]: evaluation, Branch-Train-Merge's scores): the step
//!   without its backward, returning each row's loss and each router's statistics (what
//!   capacity dropped); they may route with a capacity factor of their own
//!   ([`Trainer::set_eval_capacity`]) while training steps keep the model's.

use super::layout::{ShardLayout, StatsLayout, check_gang, gather_read, unpack_grads};
use super::stats::ForwardPass;
use super::step_program::{DATA_AXIS, EXPERT_AXIS, Kind, Mode, expert_along};
use super::{
    Balanced, Checkpoint, GroupSplit, Params, StepModel, StepShape, StepStats, TrainState,
};
use crate::Mesh;
use crate::device::MeshDevice;
use crate::kernels::optim::{self, AdamConfig};
use crate::kernels::router::RoutingStats;
use crate::program::Variables;
use crate::program::{CompileOptions, Executable, HostData, Op};
use crate::sched::{Client, DispatchMode, RunHandle, RunOptions};
use crate::trace::{EventMeta, ns_since_epoch};
use crate::{Error, Result};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// How a run is submitted: whether it keeps its trace events, and whether its caller waits for
/// it at once (and so may drive it, [`crate::sched::Client::submit_and_drive`]).
#[derive(Debug, Clone, Copy)]
struct Submit {
    trace: bool,
    drive: bool,
}

/// A step submitted to the runtime and not yet finished ([`Trainer::submit_step`]).
#[derive(Debug)]
pub struct PendingStep {
    handle: RunHandle,
    started: Instant,
    units: usize,
    rows: usize,
    step: u32,
}

/// The trainer of model `M`.
pub struct Trainer<M: StepModel> {
    config: M,
    adam: AdamConfig,
    step: u32,
    groups: usize,
    /// How the groups are dealt to the devices (even unless [`Trainer::set_split`] said
    /// otherwise).
    split: GroupSplit,
    /// The devices, as `{expert}` or `{data, expert}` ([`step_mesh`]).
    mesh: Mesh,
    /// Per parameter: whether it is an expert tensor (split over the expert axis).
    expert: Vec<bool>,
    variables: Variables,
    client: Client,
    dispatch: DispatchMode,
    /// Keep each step's trace events in its [`StepStats`].
    trace: bool,
    /// Compiled programs by mode, batch units and split.
    programs: Mutex<HashMap<(Mode, usize, GroupSplit), Arc<Executable>>>,
    /// The capacity factor forward passes (evaluation) route with, where not the model's own
    /// ([`Self::set_eval_capacity`]).
    eval_capacity: Option<f32>,
}

/// The trainer's layout of `mesh`: one axis (whatever its name) is `{expert}`, experts split
/// over all of its devices; `{data: A, expert: B}` is kept (`{data: 1, ...}` is one axis again);
/// any other layout is refused by name.
fn step_mesh(mesh: &Mesh) -> Result<Mesh> {
    let n = mesh.len();
    match mesh.shape().axes() {
        [_] => mesh.reshape(&[(EXPERT_AXIS, n)]),
        [(data, 1), (expert, _)] if data == DATA_AXIS && expert == EXPERT_AXIS => {
            mesh.reshape(&[(EXPERT_AXIS, n)])
        }
        [(data, _), (expert, _)] if data == DATA_AXIS && expert == EXPERT_AXIS => Ok(mesh.clone()),
        _ => Err(invalid(format!(
            "a trainer's mesh is one axis or {{{DATA_AXIS}, {EXPERT_AXIS}}}, not {}",
            mesh.shape()
        ))),
    }
}

fn invalid(reason: String) -> Error {
    Error::InvalidArgument {
        what: "trainer",
        reason,
    }
}

impl<M: StepModel> Trainer<M> {
    /// A trainer over `mesh` (devices of `client`'s runtime: one axis, [`Mesh::line`] of a
    /// device list, or axes `{data, expert}`, row-major) routing each batch in `groups`
    /// groups, a multiple of the device count; the experts must split evenly over a data row.
    /// Steps run as runs of `client`, so other clients of the runtime (another trainer, a live
    /// view) share the devices in gang order.
    pub fn new(
        client: &Client,
        mesh: &Mesh,
        params: &Params<M>,
        adam: AdamConfig,
        groups: usize,
    ) -> Result<Self> {
        Self::build(client, mesh, params, None, adam, groups)
    }

    /// A trainer continuing from `checkpoint`'s parameters and Adam state on any mesh (as
    /// [`Self::new`] takes) whose devices divide its groups and experts (a checkpoint
    /// does not remember how its devices were laid out, only the groups): the next step is its
    /// step + 1, and the steps are those of a run that never stopped.
    pub fn resume(client: &Client, mesh: &Mesh, checkpoint: &Checkpoint<M>) -> Result<Self> {
        checkpoint.check()?;
        let Some(train) = &checkpoint.train else {
            return Err(invalid(
                "the file holds weights only, no optimizer state to resume".into(),
            ));
        };
        Self::build(
            client,
            mesh,
            &checkpoint.params,
            Some(train),
            train.adam,
            train.groups,
        )
    }

    /// Downloads the parameters and Adam's state (expert tensors gathered from their devices):
    /// what [`Self::resume`] needs.
    pub fn checkpoint(&self) -> Result<Checkpoint<M>> {
        let out = Checkpoint {
            params: self.download(Kind::Param)?,
            train: Some(TrainState {
                m: self.download(Kind::M)?,
                v: self.download(Kind::V)?,
                step: self.step,
                adam: self.adam,
                groups: self.groups,
            }),
        };
        out.check()?;
        Ok(out)
    }

    fn build(
        client: &Client,
        mesh: &Mesh,
        params: &Params<M>,
        train: Option<&TrainState<M>>,
        adam: AdamConfig,
        groups: usize,
    ) -> Result<Self> {
        params.check()?;
        let cfg = params.config;
        let mesh = step_mesh(mesh)?;
        let n = mesh.len();
        check_gang(M::NAME, client, &mesh, groups)?;
        let along = expert_along(mesh.shape());
        if let Some(r) = cfg.routing()
            && !r.router.experts.is_multiple_of(along)
        {
            return Err(invalid(format!(
                "{} experts cannot be split evenly over the {along} devices of a data row",
                r.router.experts
            )));
        }
        // Checks the Adam settings now rather than at the first step.
        optim::adam_reference(&mut [], &mut [], &mut [], &[], adam, 1)?;
        let expert = cfg.expert_tensors();
        let split = GroupSplit::even(groups, n)?;
        let shapes = StepShape::new(cfg, adam, mesh.shape(), split.clone(), 0).shard_shapes();
        let names: Vec<String> = cfg.param_specs().into_iter().map(|s| s.name).collect();
        let layout = ShardLayout {
            devices: &mesh,
            expert_devices: along,
            shapes: &shapes,
            expert: &expert,
            names: &names,
        };
        let moments = train.map(|t| (&t.m.tensors[..], &t.v.tensors[..]));
        let variables = layout.variables(&params.tensors, moments)?;
        Ok(Self {
            config: cfg,
            adam,
            step: train.map_or(0, |t| t.step),
            groups,
            split,
            mesh,
            expert,
            variables,
            client: client.clone(),
            dispatch: DispatchMode::Parallel,
            trace: false,
            programs: Mutex::default(),
            eval_capacity: None,
        })
    }

    /// Forward passes ([`Self::forward`], and so evaluation) route with capacity factor `factor`
    /// instead of the model's (`None`: the model's own); training steps keep the model's. An MoE
    /// model's score depends on it: with `experts / top_k` nothing is dropped, and the score no
    /// longer depends on how evaluation batches the text.
    pub fn set_eval_capacity(&mut self, factor: Option<f32>) -> Result<()> {
        if let Some(f) = factor {
            self.config.with_capacity_factor(f).validate()?;
        }
        self.eval_capacity = factor;
        self.programs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(mode, ..), _| *mode != Mode::Forward);
        Ok(())
    }

    /// The capacity factor forward passes route with, where set apart from the model's.
    pub fn eval_capacity(&self) -> Option<f32> {
        self.eval_capacity
    }

    /// The step's shape for batches of `group_units` a routing group dealt as `split`.
    fn shape(&self, config: M, split: &GroupSplit, group_units: usize) -> StepShape<M> {
        StepShape::new(
            config,
            self.adam,
            self.mesh.shape(),
            split.clone(),
            group_units,
        )
    }

    pub fn config(&self) -> &M {
        &self.config
    }

    /// Steps taken.
    pub fn steps(&self) -> u32 {
        self.step
    }

    /// Routing groups per batch.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// The data axis of the mesh (1: one axis).
    pub fn data(&self) -> usize {
        self.mesh.shape().size(DATA_AXIS).unwrap_or(1)
    }

    /// The devices the trainer is spread over (in a job of several ranks, some are other
    /// ranks'), as `{expert}` or `{data, expert}`.
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    /// The client the steps run as.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// How the routing groups are dealt to the devices.
    pub fn split(&self) -> &GroupSplit {
        &self.split
    }

    /// Deals the routing groups to the devices as `split` says from the next step on (see
    /// [`GroupSplit`]): the same groups and losses, with the token side's work where the devices'
    /// speeds put it.
    pub fn set_split(&mut self, split: GroupSplit) -> Result<()> {
        split.check_fits(self.groups, self.mesh.len())?;
        self.split = split;
        Ok(())
    }

    /// Deals the groups by the devices' speeds, if that runs faster: measures each device's
    /// speed on a batch (traced gradient passes with an even split, no update: its busy time),
    /// then times gradient passes with the even split and with the split those speeds ask for,
    /// and keeps the faster ([`GroupSplit::choose`]). Every device must be this process's
    /// (another rank's device leaves no events here).
    pub fn balance(&mut self, inputs: &[u32], targets: &[u32]) -> Result<Balanced> {
        let balanced = GroupSplit::balance(&self.mesh, self.groups, |split, traced| {
            let how = Submit {
                trace: traced,
                drive: false,
            };
            self.submit(Mode::Grads, inputs, targets, None, split, how)
                .map(|(handle, _)| handle)
        })?;
        self.set_split(balanced.split.clone())?;
        Ok(balanced)
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

    /// The bytes of a training step's buffers on its largest device (its activations, slots,
    /// gradients and staging, for every step it holds in flight; not the parameters or Adam's
    /// moments), over the training programs compiled so far; 0 before the first step.
    pub fn step_buffer_bytes(&self) -> u64 {
        let programs = self.programs.lock().unwrap_or_else(PoisonError::into_inner);
        (programs.iter())
            .filter(|((mode, ..), _)| *mode == Mode::Train)
            .flat_map(|(_, exec)| exec.buffer_bytes())
            .max()
            .unwrap_or(0)
    }

    /// Token rows of one routing group of a batch of `units`.
    fn group_rows(&self, units: usize) -> usize {
        units / self.groups * self.config.unit_rows()
    }

    /// The program of `mode` for batches of `units` dealt as `split`, compiled on first use.
    fn program(&self, mode: Mode, units: usize, split: &GroupSplit) -> Result<Arc<Executable>> {
        let mut programs = self.programs.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (mode, units, split.clone());
        if let Some(p) = programs.get(&key) {
            return Ok(p.clone());
        }
        let config = match (mode, self.eval_capacity) {
            (Mode::Forward, Some(factor)) => self.config.with_capacity_factor(factor),
            _ => self.config,
        };
        let shape = self.shape(config, split, units / self.groups);
        let program = M::build_step(&shape, mode)?;
        // Two training steps may be in flight (the next one submitted while this one runs).
        let opts = CompileOptions {
            in_flight: if mode == Mode::Train { 2 } else { 1 },
            ..CompileOptions::default()
        };
        let exec = Arc::new(program.compile_with(&self.mesh, opts, &self.variables)?);
        programs.insert(key, exec.clone());
        Ok(exec)
    }

    /// Runs `mode` on a batch: the results' bytes and the batch's units.
    fn run(
        &self,
        mode: Mode,
        inputs: &[u32],
        targets: &[u32],
        bias: Option<(f32, f32)>,
    ) -> Result<(Vec<Vec<u8>>, usize)> {
        let how = Submit {
            trace: self.trace && mode == Mode::Train,
            drive: true,
        };
        let (handle, units) = self.submit(mode, inputs, targets, bias, &self.split, how)?;
        Ok((handle.wait_bytes()?, units))
    }

    /// Checks a batch and submits `mode` on it, dealt as `split`, to the runtime; returns the
    /// run and the batch's units.
    fn submit(
        &self,
        mode: Mode,
        inputs: &[u32],
        targets: &[u32],
        bias: Option<(f32, f32)>,
        split: &GroupSplit,
        how: Submit,
    ) -> Result<(RunHandle, usize)> {
        let units = self.config.check_batch(inputs, targets, self.groups)?;
        let exec = self.program(mode, units, split)?;
        let d = self.mesh.len();
        let rows = self.group_rows(units);
        let words = self.config.row_inputs();
        let mut args: Vec<HostData> = self.config.leading_args(d, rows);
        for r in 0..split.rounds() {
            // A device idle in this round gets zeros, which nothing reads.
            let deal = |x: &[u32], per_row: usize| -> Vec<u32> {
                let n = rows * per_row;
                let mut out = vec![0u32; d * n];
                for i in 0..d {
                    if let Some(g) = split.group(i, r) {
                        out[i * n..(i + 1) * n].copy_from_slice(&x[g * n..(g + 1) * n]);
                    }
                }
                out
            };
            args.push(deal(inputs, words).into());
            args.push(deal(targets, 1).into());
        }
        if let Some((b1, b2)) = bias {
            args.push([b1, b2].repeat(d).into());
        }
        let opts = RunOptions {
            mode: self.dispatch,
            microbatch: None,
            trace: how.trace,
        };
        let handle = if how.drive {
            self.client.submit_and_drive(&exec, args, opts)?
        } else {
            self.client.submit(&exec, args, opts)?
        };
        Ok((handle, units))
    }

    /// One training step on a batch (`inputs`: [`StepModel::row_inputs`] words per token row,
    /// `targets`: one per row).
    pub fn step(&mut self, inputs: &[u32], targets: &[u32]) -> Result<StepStats> {
        let pending = self.submit_step_as(inputs, targets, true)?;
        self.finish_step(pending)
    }

    /// Submits a training step and returns at once: several trainers sharing a runtime submit
    /// their steps, then finish them, and the gang scheduler interleaves their work. The step
    /// counts as taken from here on.
    pub fn submit_step(&mut self, inputs: &[u32], targets: &[u32]) -> Result<PendingStep> {
        self.submit_step_as(inputs, targets, false)
    }

    /// [`Self::submit_step`]; `drive`: the caller waits for it at once, and may run it itself
    /// ([`crate::sched::Client::submit_and_drive`]).
    fn submit_step_as(
        &mut self,
        inputs: &[u32],
        targets: &[u32],
        drive: bool,
    ) -> Result<PendingStep> {
        let started = Instant::now();
        let step = self.step + 1;
        let bias = Some(self.adam.bias(step));
        let how = Submit {
            trace: self.trace,
            drive,
        };
        let (handle, units) = self.submit(Mode::Train, inputs, targets, bias, &self.split, how)?;
        self.step = step;
        Ok(PendingStep {
            handle,
            started,
            units,
            rows: targets.len(),
            step,
        })
    }

    /// Waits for a submitted step; its statistics.
    pub fn finish_step(&mut self, pending: PendingStep) -> Result<StepStats> {
        let PendingStep {
            handle,
            started,
            units,
            rows,
            step,
        } = pending;
        let (results, mut trace) = handle.wait_traced()?;
        let cfg = self.config;
        let routing = cfg.routing();
        let group_rows = self.group_rows(units);
        let layers = routing.map_or(0, |r| r.layers);
        let sums = self
            .stats_layout(group_rows, Mode::Train)
            .sums(&results, &self.split)?;
        let g = self.groups as f64;
        let (ce, aux, z) = (sums.ce_sum / rows as f64, sums.aux_sum / g, sums.z_sum / g);
        // A dense model has no expert layer: none of these is read then.
        let (k, experts) = routing.map_or((0, 0), |r| (r.router.k, r.router.experts));
        let blocks: Vec<RoutingStats> = (0..layers)
            .map(|l| RoutingStats {
                capacity: routing.map_or(0, |r| r.router.capacity(group_rows)),
                tokens_per_expert: sums.kept[l].clone(),
                dropped: sums.dropped[l],
                dropped_fraction: sums.dropped[l] as f64 / (rows * k) as f64,
                aux_loss: (sums.block_aux[l] / g) as f32,
                z_loss: (sums.block_z[l] / g) as f32,
            })
            .collect();
        let choices = rows * k * layers;
        let dropped: usize = sums.dropped.iter().sum();
        let tokens_per_expert = if layers == 0 {
            Vec::new()
        } else {
            (0..experts)
                .map(|e| sums.kept.iter().map(|k| k[e]).sum())
                .collect()
        };
        let stats = StepStats {
            step,
            loss: ce + aux + z,
            ce,
            aux,
            z,
            tokens_per_expert,
            dropped_fraction: if choices == 0 {
                0.0
            } else {
                dropped as f64 / choices as f64
            },
            blocks,
            seconds: started.elapsed().as_secs_f64(),
            trace: Vec::new(),
        };
        let process = self.client.tracer();
        if process.is_on() || self.trace {
            let (begin, now) = (ns_since_epoch(started), ns_since_epoch(Instant::now()));
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
            for device in self.mesh.iter().filter_map(MeshDevice::local) {
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
    pub fn eval(&self, inputs: &[u32], targets: &[u32]) -> Result<f64> {
        let nats = self.token_nats(inputs, targets)?;
        Ok(nats.iter().sum::<f64>() / nats.len().max(1) as f64)
    }

    /// Cross-entropy (nats) of every token row of a batch, in batch order, forward only (routed
    /// in the trainer's groups, as in training): what Branch-Train-Merge's ensemble weighs.
    pub fn token_nats(&self, inputs: &[u32], targets: &[u32]) -> Result<Vec<f64>> {
        Ok(self.forward(inputs, targets)?.nats)
    }

    /// A forward pass of a batch (routed in the trainer's groups, as in training): every token
    /// row's cross-entropy in batch order, and the router choices capacity dropped.
    pub fn forward(&self, inputs: &[u32], targets: &[u32]) -> Result<ForwardPass> {
        let (results, units) = self.run(Mode::Forward, inputs, targets, None)?;
        let n = self.group_rows(units);
        let layout = self.stats_layout(n, Mode::Forward);
        let mut nats = vec![0.0f64; targets.len()];
        let sums = layout.sums_with(&results, &self.split, |g, rows| {
            for (k, &v) in rows.iter().enumerate() {
                if let Some(o) = nats.get_mut(g * n + k) {
                    *o = f64::from(v);
                }
            }
        })?;
        Ok(ForwardPass {
            choices: targets.len() * self.config.routing().map_or(0, |r| r.router.k * r.layers),
            dropped: sums.dropped.iter().sum(),
            nats,
        })
    }

    /// How a round's statistics pack lies in a `mode` program, at `rows` token rows a routing
    /// group.
    fn stats_layout(&self, rows: usize, mode: Mode) -> StatsLayout {
        StatsLayout {
            rows,
            routing: self.config.routing(),
            logsumexps: mode == Mode::Train,
        }
    }

    /// The gradient of the batch loss with respect to every parameter (what [`Self::step`]
    /// would apply), downloaded; no update.
    pub fn grads(&self, inputs: &[u32], targets: &[u32]) -> Result<Params<M>> {
        let (results, _) = self.run(Mode::Grads, inputs, targets, None)?;
        let shapes = self.shard_shapes();
        let along = expert_along(self.mesh.shape());
        let tensors = unpack_grads(&results, &shapes, &self.expert, along)?;
        let out = Params {
            config: self.config,
            tensors,
        };
        out.check()?;
        Ok(out)
    }

    /// Downloads the parameters (expert tensors gathered from their devices).
    pub fn params(&self) -> Result<Params<M>> {
        self.download(Kind::Param)
    }

    fn shard_shapes(&self) -> Vec<Vec<usize>> {
        self.shape(self.config, &self.split, 0).shard_shapes()
    }

    /// Variable `kind` of every parameter, gathered: replicated ones from device 0, expert ones
    /// from the devices of the first data row in order. Read back by a program (results reach
    /// every rank, so this works the same when some of the devices are other ranks').
    fn download(&self, kind: Kind) -> Result<Params<M>> {
        let exec = self.program(Mode::Read(kind), 0, &self.split)?;
        let opts = RunOptions {
            mode: self.dispatch,
            ..RunOptions::default()
        };
        let results = self.client.run(&exec, Vec::<Vec<f32>>::new(), opts)?;
        let out = Params {
            config: self.config,
            tensors: gather_read(
                results,
                &self.expert,
                self.mesh.len(),
                expert_along(self.mesh.shape()),
            ),
        };
        out.check()?;
        Ok(out)
    }
}

impl<M: StepModel> std::fmt::Debug for Trainer<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("model", &M::NAME)
            .field("config", &self.config)
            .field("adam", &self.adam)
            .field("step", &self.step)
            .field("groups", &self.groups)
            .field("mesh", &self.mesh.shape().to_string())
            .field("split", &self.split.to_string())
            .field(
                "devices",
                &self.mesh.iter().map(MeshDevice::label).collect::<Vec<_>>(),
            )
            .field("tracing", &self.trace)
            .finish()
    }
}
