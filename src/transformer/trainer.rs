//! The Transformer's GPU trainer: parameters and Adam state as program variables on a gang of
//! devices (expert tensors split over them, the rest replicated, as the MoE trainer lays them:
//! `ShardLayout`), and one compiled step program per mode and batch size (`step_program`)
//! submitted through the caller's client of the process's runtime.
//!
//! A batch is `B` sequences routed as `G` groups of `B/G`; device `i` holds groups
//! `i·G/D .. (i+1)·G/D` and runs one per round, so any `D` dividing `G` and `E` gives the loss
//! curve of one device with the same `G`.

use super::reference::check_batch;
use super::step_program::{self, StepShape};
use super::{TrainState, TransformerCheckpoint, TransformerConfig, TransformerParams};
use crate::device::{DeviceList, MeshDevice};
use crate::kernels::lm_train::{self as lt, AdamConfig};
use crate::moe::trainer::step_program::{Kind, Mode};
use crate::moe::trainer::{ShardLayout, StatsLayout, check_gang, gather_read, unpack_grads};
use crate::program::{CompileOptions, Executable, HostData, Variables};
use crate::sched::{Client, DispatchMode, RunOptions};
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
    devices: Vec<MeshDevice>,
    /// The data axis of the `{data, expert}` mesh (1: one axis).
    data: usize,
    expert: Vec<bool>,
    variables: Variables,
    client: Client,
    /// Compiled programs by mode and batch sequences.
    programs: Mutex<HashMap<(Mode, usize), Arc<Executable>>>,
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
        lt::adam_reference(&mut [], &mut [], &mut [], &[], adam, 1)?;
        let expert = cfg.expert_tensors();
        let shape = StepShape {
            config: cfg,
            adam,
            devices: n,
            data,
            groups,
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

    fn shape(&self, batch: usize) -> StepShape {
        StepShape {
            config: self.config,
            adam: self.adam,
            devices: self.devices.len(),
            data: self.data,
            groups: self.groups,
            group_seqs: batch / self.groups,
        }
    }

    /// The program of `mode` for batches of `batch` sequences, compiled on first use.
    fn program(&self, mode: Mode, batch: usize) -> Result<Arc<Executable>> {
        let mut programs = self.programs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = programs.get(&(mode, batch)) {
            return Ok(p.clone());
        }
        let program = step_program::build(&self.shape(batch), mode)?;
        let exec = Arc::new(program.compile_with(
            &self.devices,
            CompileOptions::default(),
            &self.variables,
        )?);
        programs.insert((mode, batch), exec.clone());
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
        let batch = check_batch(&self.config, tokens, targets, self.groups)?;
        let exec = self.program(mode, batch)?;
        let d = self.devices.len();
        let rounds = self.groups / d;
        let n = self.shape(batch).rows();
        let t = self.config.context;
        let positions: Vec<u32> = (0..d * n).map(|i| (i % t) as u32).collect();
        let mut args: Vec<HostData> = vec![positions.into()];
        for r in 0..rounds {
            // Device i, round r holds group i · rounds + r.
            let rows = |x: &[u32]| -> Vec<u32> {
                (0..d)
                    .flat_map(|i| x[(i * rounds + r) * n..(i * rounds + r + 1) * n].iter())
                    .copied()
                    .collect()
            };
            args.push(rows(tokens).into());
            args.push(rows(targets).into());
        }
        if let Some((b1, b2)) = bias {
            args.push([b1, b2].repeat(d).into());
        }
        let opts = RunOptions {
            mode: DispatchMode::Parallel,
            ..RunOptions::default()
        };
        self.client.submit(&exec, args, opts)?.wait_bytes()
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
            rows: self.shape(batch).rows(),
            layers: cfg.moe_layers(),
            router: cfg.router(),
            aux_alpha: cfg.aux_alpha,
            z_loss: cfg.z_loss,
        };
        let sums = layout.sums(&results)?;
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
        let n = self.shape(batch).rows();
        let rounds = self.groups / self.devices.len();
        let mut out = vec![0.0f64; tokens.len()];
        for (round, bytes) in results.iter().enumerate() {
            let rows: Vec<f32> = bytemuck::pod_collect_to_vec(bytes);
            for (i, device) in rows.chunks(n).enumerate() {
                let g = i * rounds + round;
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
        let shapes = self.shape(self.groups).shard_shapes();
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
        let exec = self.program(Mode::Read(kind), 0)?;
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
