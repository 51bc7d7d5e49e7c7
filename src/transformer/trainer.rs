//! The Transformer's GPU trainer: parameters and Adam state as program variables on a gang of
//! devices (expert tensors split over them, the rest replicated, as the MoE trainer lays them:
//! `ShardLayout`), and one compiled step program per mode and batch size (`step_program`)
//! submitted through the caller's client of the process's runtime.
//!
//! A batch is `B` sequences routed as `G` groups of `B/G`; device `i` holds groups
//! `i·G/D .. (i+1)·G/D` and runs one per round, so any `D` dividing `G` and `E` gives the loss
//! curve of one device with the same `G`. As in the MoE trainer, [`TransformerTrainer::set_split`]
//! may deal the groups unevenly instead (more to a faster device: [`GroupSplit`]), with the same
//! groups and losses.

use super::reference::check_batch;
use super::step_program::{self, StepShape};
use super::{TrainState, TransformerCheckpoint, TransformerConfig, TransformerParams};
use crate::device::{DeviceList, MeshDevice};
use crate::kernels::optim::{self, AdamConfig};
use crate::moe::trainer::step_program::{Kind, Mode};
use crate::moe::trainer::{
    Balanced, GroupSplit, ShardLayout, StatsLayout, check_gang, gather_read, unpack_grads,
};
use crate::program::{CompileOptions, Executable, HostData, Variables};
use crate::sched::{Client, DispatchMode, RunHandle, RunOptions};
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// What one [`TransformerTrainer::step`] did (losses are those of the parameters before the
/// update).
#[derive(Debug, Clone, PartialEq)]
pub struct TransformerStats {
    /// The step number, from 1.
    pub step: u32,
    /// `ce + aux + z`.
    pub loss: f64,
    /// Mean cross-entropy over the batch (nats).
    pub ce: f64,
    /// Load-balancing and z losses: summed over expert layers, averaged over groups.
    pub aux: f64,
    pub z: f64,
    /// Kept (token, choice) pairs per expert, summed over expert layers and groups.
    pub tokens_per_expert: Vec<usize>,
    /// Dropped choices over all of them (0 without expert layers).
    pub dropped_fraction: f64,
    /// Wall time of the step.
    pub seconds: f64,
}

fn invalid(reason: String) -> Error {
    Error::InvalidArgument {
        what: "transformer trainer",
        reason,
    }
}

/// The trainer.
pub struct TransformerTrainer {
    config: TransformerConfig,
    adam: AdamConfig,
    step: u32,
    groups: usize,
    /// How the groups are dealt to the devices (even unless [`TransformerTrainer::set_split`]
    /// said otherwise).
    split: GroupSplit,
    devices: Vec<MeshDevice>,
    /// The data axis of the `{data, expert}` mesh (1: one axis).
    data: usize,
    expert: Vec<bool>,
    variables: Variables,
    client: Client,
    /// Compiled programs by mode, batch sequences and split.
    programs: Mutex<HashMap<(Mode, usize, GroupSplit), Arc<Executable>>>,
}

impl TransformerTrainer {
    /// A trainer over `devices` (of `client`'s runtime) routing each batch in `groups` groups, a
    /// multiple of the device count; the experts must split evenly over the devices.
    pub fn new(
        client: &Client,
        devices: &(impl DeviceList + ?Sized),
        params: &TransformerParams,
        adam: AdamConfig,
        groups: usize,
    ) -> Result<Self> {
        Self::build(client, devices, params, None, adam, (groups, 1))
    }

    /// [`Self::new`] over a `{data: data, expert: D/data}` mesh of the devices (row-major): each
    /// data row holds every expert once, the expert all-to-alls run within rows, and the expert
    /// gradients are all-reduced over `data` (GShard, DeepSpeed-MoE). `data` = 1 is [`Self::new`].
    pub fn with_mesh(
        client: &Client,
        devices: &(impl DeviceList + ?Sized),
        params: &TransformerParams,
        adam: AdamConfig,
        groups: usize,
        data: usize,
    ) -> Result<Self> {
        Self::build(client, devices, params, None, adam, (groups, data))
    }

    /// A trainer continuing from `checkpoint`'s parameters and Adam state, on any devices that
    /// divide its groups and experts: the next step is its step + 1.
    pub fn resume(
        client: &Client,
        devices: &(impl DeviceList + ?Sized),
        checkpoint: &TransformerCheckpoint,
    ) -> Result<Self> {
        Self::resume_with_mesh(client, devices, checkpoint, 1)
    }

    /// [`Self::resume`] onto a `{data, expert}` mesh with `data` rows ([`Self::with_mesh`]): a
    /// checkpoint does not remember how its devices were laid out, only the groups.
    pub fn resume_with_mesh(
        client: &Client,
        devices: &(impl DeviceList + ?Sized),
        checkpoint: &TransformerCheckpoint,
        data: usize,
    ) -> Result<Self> {
        checkpoint.check()?;
        let Some(train) = &checkpoint.train else {
            return Err(invalid(
                "the file holds weights only, no optimizer state to resume".into(),
            ));
        };
        Self::build(
            client,
            devices,
            &checkpoint.params,
            Some(train),
            train.adam,
            (train.groups, data),
        )
    }

    /// Downloads the parameters and Adam's state: what [`Self::resume`] needs.
    pub fn checkpoint(&self) -> Result<TransformerCheckpoint> {
        let out = TransformerCheckpoint {
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
        devices: &(impl DeviceList + ?Sized),
        params: &TransformerParams,
        train: Option<&TrainState>,
        adam: AdamConfig,
        (groups, data): (usize, usize),
    ) -> Result<Self> {
        params.check()?;
        let cfg = params.config;
        let devices = devices.mesh_devices();
        let n = devices.len();
        if data == 0 || !n.is_multiple_of(data) {
            return Err(invalid(format!(
                "a data axis of {data} does not divide {n} devices"
            )));
        }
        check_gang("transformer trainer", client, &devices, None, groups)?;
        let along = n / data;
        if cfg.moe_layers() > 0 && !cfg.experts.is_multiple_of(along) {
            return Err(invalid(format!(
                "{} experts cannot be split evenly over the {along} devices of a data row",
                cfg.experts
            )));
        }
        // Checks the Adam settings now rather than at the first step.
        optim::adam_reference(&mut [], &mut [], &mut [], &[], adam, 1)?;
        let expert = cfg.expert_tensors();
        let split = GroupSplit::even(groups, n)?;
        let shape = StepShape {
            config: cfg,
            adam,
            devices: n,
            data,
            split: split.clone(),
            group_seqs: 1,
        };
        let shapes = shape.shard_shapes();
        let names: Vec<String> = cfg.param_specs().into_iter().map(|s| s.name).collect();
        let layout = ShardLayout {
            devices: &devices,
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
            devices,
            data,
            expert,
            variables,
            client: client.clone(),
            programs: Mutex::default(),
        })
    }

    pub fn config(&self) -> &TransformerConfig {
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

    /// Devices the trainer is spread over.
    pub fn devices(&self) -> usize {
        self.devices.len()
    }

    /// How the routing groups are dealt to the devices.
    pub fn split(&self) -> &GroupSplit {
        &self.split
    }

    /// Deals the routing groups as `split` says from the next step on (see [`GroupSplit`]): the
    /// same groups and losses, with the token side's work where the devices' speeds put it.
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
    pub fn balance(&mut self, tokens: &[u32], targets: &[u32]) -> Result<Balanced> {
        let balanced = GroupSplit::balance(&self.devices, self.groups, |split, traced| {
            self.submit(Mode::Grads, tokens, targets, None, split, traced)
        })?;
        self.set_split(balanced.split.clone())?;
        Ok(balanced)
    }

    fn shape(&self, batch: usize, split: &GroupSplit) -> StepShape {
        StepShape {
            config: self.config,
            adam: self.adam,
            devices: self.devices.len(),
            data: self.data,
            split: split.clone(),
            group_seqs: batch / self.groups,
        }
    }

    /// Token rows of one routing group of a batch of `batch` sequences.
    fn group_rows(&self, batch: usize) -> usize {
        batch / self.groups * self.config.context
    }

    /// The program of `mode` for batches of `batch` sequences dealt as `split`, compiled on
    /// first use.
    fn program(&self, mode: Mode, batch: usize, split: &GroupSplit) -> Result<Arc<Executable>> {
        let mut programs = self.programs.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (mode, batch, split.clone());
        if let Some(p) = programs.get(&key) {
            return Ok(p.clone());
        }
        let program = step_program::build(&self.shape(batch, split), mode)?;
        let exec = Arc::new(program.compile_with(
            &self.devices,
            CompileOptions::default(),
            &self.variables,
        )?);
        programs.insert(key, exec.clone());
        Ok(exec)
    }

    /// Runs `mode` on a batch: the results' bytes.
    fn run(
        &self,
        mode: Mode,
        tokens: &[u32],
        targets: &[u32],
        bias: Option<(f32, f32)>,
    ) -> Result<Vec<Vec<u8>>> {
        self.submit(mode, tokens, targets, bias, &self.split, false)?
            .wait_bytes()
    }

    /// Submits `mode` on a batch, dealt as `split`, to the runtime.
    fn submit(
        &self,
        mode: Mode,
        tokens: &[u32],
        targets: &[u32],
        bias: Option<(f32, f32)>,
        split: &GroupSplit,
        trace: bool,
    ) -> Result<RunHandle> {
        let batch = check_batch(&self.config, tokens, targets, self.groups)?;
        let exec = self.program(mode, batch, split)?;
        let d = self.devices.len();
        let n = self.group_rows(batch);
        let t = self.config.context;
        let positions: Vec<u32> = (0..d * n).map(|i| (i % t) as u32).collect();
        let mut args: Vec<HostData> = vec![positions.into()];
        for r in 0..split.rounds() {
            // A device idle in this round gets zeros, which nothing reads.
            let rows = |x: &[u32]| -> Vec<u32> {
                let mut out = vec![0u32; d * n];
                for i in 0..d {
                    if let Some(g) = split.group(i, r) {
                        out[i * n..(i + 1) * n].copy_from_slice(&x[g * n..(g + 1) * n]);
                    }
                }
                out
            };
            args.push(rows(tokens).into());
            args.push(rows(targets).into());
        }
        if let Some((b1, b2)) = bias {
            args.push([b1, b2].repeat(d).into());
        }
        let opts = RunOptions {
            mode: DispatchMode::Parallel,
            microbatch: None,
            trace,
        };
        self.client.submit(&exec, args, opts)
    }

    /// One training step on a batch (`tokens`, `targets`: `[B, T]` byte ids).
    pub fn step(&mut self, tokens: &[u32], targets: &[u32]) -> Result<TransformerStats> {
        let start = Instant::now();
        let step = self.step + 1;
        let results = self.run(Mode::Train, tokens, targets, Some(self.adam.bias(step)))?;
        self.step = step;
        let cfg = self.config;
        let batch = tokens.len() / cfg.context;
        let layout = StatsLayout {
            rows: self.group_rows(batch),
            layers: cfg.moe_layers(),
            router: cfg.router(),
            aux_alpha: cfg.aux_alpha,
            z_loss: cfg.z_loss,
        };
        let sums = layout.sums(&results, &self.split)?;
        let g = self.groups as f64;
        let tokens_n = tokens.len();
        let (ce, aux, z) = (
            sums.ce_sum / tokens_n as f64,
            sums.aux_sum / g,
            sums.z_sum / g,
        );
        let choices = tokens_n * cfg.top_k * cfg.moe_layers();
        let dropped: usize = sums.dropped.iter().sum();
        let kept = (0..cfg.experts)
            .map(|e| sums.kept.iter().map(|k| k[e]).sum())
            .collect();
        Ok(TransformerStats {
            step,
            loss: ce + aux + z,
            ce,
            aux,
            z,
            tokens_per_expert: kept,
            dropped_fraction: if choices == 0 {
                0.0
            } else {
                dropped as f64 / choices as f64
            },
            seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// Cross-entropy (nats) of every token of a batch, in batch order, forward only (routed in
    /// the trainer's groups, as in training).
    pub fn token_nats(&self, tokens: &[u32], targets: &[u32]) -> Result<Vec<f64>> {
        let results = self.run(Mode::Forward, tokens, targets, None)?;
        let batch = tokens.len() / self.config.context;
        let n = self.group_rows(batch);
        let mut out = vec![0.0f64; tokens.len()];
        for (round, bytes) in results.iter().enumerate() {
            let rows: Vec<f32> = bytemuck::pod_collect_to_vec(bytes);
            for (i, device) in rows.chunks(n).enumerate() {
                let Some(g) = self.split.group(i, round) else {
                    continue;
                };
                for (k, &v) in device.iter().enumerate() {
                    out[g * n + k] = f64::from(v);
                }
            }
        }
        Ok(out)
    }

    /// The gradient of the batch loss with respect to every parameter (what [`Self::step`]
    /// would apply), downloaded; no update.
    pub fn grads(&self, tokens: &[u32], targets: &[u32]) -> Result<TransformerParams> {
        let results = self.run(Mode::Grads, tokens, targets, None)?;
        let shapes = self.shape(self.groups, &self.split).shard_shapes();
        let along = self.devices.len() / self.data;
        let tensors = unpack_grads(&results, &shapes, &self.expert, along)?;
        let out = TransformerParams {
            config: self.config,
            tensors,
        };
        out.check()?;
        Ok(out)
    }

    /// Downloads the parameters (expert tensors gathered from their devices).
    pub fn params(&self) -> Result<TransformerParams> {
        self.download(Kind::Param)
    }

    /// Variable `kind` of every parameter, gathered.
    fn download(&self, kind: Kind) -> Result<TransformerParams> {
        let exec = self.program(Mode::Read(kind), 0, &self.split)?;
        let results = self
            .client
            .run(&exec, Vec::<Vec<f32>>::new(), RunOptions::default())?;
        let out = TransformerParams {
            config: self.config,
            tensors: gather_read(
                results,
                &self.expert,
                self.devices.len(),
                self.devices.len() / self.data,
            ),
        };
        out.check()?;
        Ok(out)
    }
}

impl std::fmt::Debug for TransformerTrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransformerTrainer")
            .field("config", &self.config)
            .field("step", &self.step)
            .field("groups", &self.groups)
            .field("devices", &self.devices.len())
            .finish()
    }
}
