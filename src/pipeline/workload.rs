//! The pipeline's training workloads: the MLP it trains (one layer per virtual stage at least),
//! its batch, and one checked step of a schedule on devices ([`run_case`]) with what it
//! measured ([`PipelineResult`]); and the MoE stack on pairs of devices ([`PreparedMoeCase`]),
//! checked against one stage. `gangway pipeline --run [--moe]`, `gangway bench pipeline` and the
//! viewer's "Run on devices" all run these.

use serde::Serialize;

use super::{
    Costs, Fold, Microbatch, Mlp, MlpConfig, MoeStack, MoeStackConfig, RunReport, Schedule,
    ScheduleKind, bubble_formula,
};
use super::{execute, validate};
use crate::Mesh;
use crate::sched::Client;
use crate::{Error, Result, Rng};

/// Width of every hidden layer of the benchmark MLP.
pub const WIDTH: usize = 128;
/// Rows (samples) per microbatch.
pub const ROWS: usize = 32;
/// The step's learning rate.
const LR: f32 = 0.01;

/// The MLP the benchmark trains: `max(8, p·v)` layers of [`WIDTH`], so every virtual stage has one.
pub fn model(stages: usize, chunks: usize, seed: u64) -> Result<Mlp> {
    Mlp::new(&MlpConfig {
        widths: vec![WIDTH; layers(stages, chunks) + 1],
        seed,
    })
}

/// Layers of the benchmark MLP on `stages` devices with `chunks` chunks each.
pub fn layers(stages: usize, chunks: usize) -> usize {
    (stages * chunks).max(8)
}

pub fn batch(model: &Mlp, microbatches: usize, seed: u64) -> Vec<Microbatch> {
    let mut rng = Rng::new(seed);
    let (input, output) = (model.widths[0], model.widths[model.widths.len() - 1]);
    (0..microbatches)
        .map(|_| Microbatch {
            input: rng.vec(ROWS * input),
            target: rng.vec(ROWS * output),
        })
        .collect()
}

/// One measured (schedule, p, m).
#[derive(Debug, Clone, Serialize)]
pub struct PipelineResult {
    pub schedule: &'static str,
    pub stages: usize,
    /// Devices the stages ran on: `stages` unless folded.
    pub devices: usize,
    pub microbatches: usize,
    pub chunks: usize,
    pub step_ms: f64,
    pub samples_per_s: f64,
    pub bubble_measured: f64,
    /// The simulator with this run's own mean op and transfer times.
    pub bubble_simulated: f64,
    /// The published formula at `F = B = W` with free transfers and a device per stage; `None`
    /// where it has no closed form (ZB-V).
    pub bubble_textbook: Option<f64>,
    /// Per stage (per device when folded: its stages together, in the order of the simulation
    /// under the run's op times), in chunk activations.
    pub peak_activations: Vec<usize>,
    /// Largest |pipelined − single-device reference| weight after the step.
    pub max_weight_error: f32,
    /// The measured mean op times (µs, per chunk op) and the stage boundary's activation
    /// (bytes): what `gangway plan` feeds its pipeline model.
    pub forward_us: f64,
    pub backward_us: f64,
    pub weight_grad_us: f64,
    pub activation_bytes: u64,
}

/// One schedule's training step, ready to run: the model, the batch, and the single-device
/// reference step to check the pipelined one against.
#[derive(Debug)]
pub struct PreparedCase {
    schedule: Schedule,
    peak_activations: Vec<usize>,
    mlp: Mlp,
    data: Vec<Microbatch>,
    reference: Vec<Vec<f32>>,
}

impl PreparedCase {
    /// Builds and validates the schedule, planned for `costs` (one chunk op's) where given
    /// ([`Schedule::for_costs`]), and computes the reference step (on the host).
    pub fn new(
        kind: ScheduleKind,
        stages: usize,
        microbatches: usize,
        chunks: usize,
        costs: Option<&Costs>,
    ) -> Result<Self> {
        let chunks = kind.chunks(chunks);
        Self::of(match costs {
            Some(costs) => Schedule::for_costs(kind, stages, microbatches, chunks, costs)?,
            None => Schedule::new(kind, stages, microbatches, chunks)?,
        })
    }

    /// [`Self::new`] for a schedule planned already (`zb-auto` under a memory limit, say).
    pub fn of(schedule: Schedule) -> Result<Self> {
        let peak_activations = validate(&schedule)?.peak_activations;
        let (stages, chunks, microbatches) =
            (schedule.stages, schedule.chunks, schedule.microbatches);
        let mlp = model(stages, chunks, 7)?;
        let data = batch(&mlp, microbatches, 11);
        let reference = mlp.reference_step(&data, LR)?.weights;
        Ok(Self {
            schedule,
            peak_activations,
            mlp,
            data,
            reference,
        })
    }

    /// Runs the step on the first `stages` devices of `mesh` (the first `d` with stages folded onto `d`),
    /// as a run of `client`; its weights are compared with the reference.
    pub fn run(
        &self,
        client: &Client,
        mesh: &Mesh,
        fold: Fold,
    ) -> Result<(PipelineResult, RunReport)> {
        let s = &self.schedule;
        fold.devices_of(s.stages)?;
        let d = fold.device_count(s.stages);
        if mesh.len() < d {
            return Err(Error::InvalidArgument {
                what: "pipeline run",
                reason: format!(
                    "{} stages on {d} devices need {d}, {} found (split each adapter into more virtual devices: `DiscoveryOptions::virtual_devices`, $GANGWAY_VIRTUAL_DEVICES)",
                    s.stages,
                    mesh.len()
                ),
            });
        }
        let report = execute(client, s, mesh, &self.mlp, &self.data, LR, fold, false)?;
        let max_weight_error = max_difference(&report.weights, &self.reference);
        let step_s = report.makespan_ns as f64 / 1e9;
        Ok((
            PipelineResult {
                schedule: s.kind.name(),
                stages: s.stages,
                devices: d,
                microbatches: s.microbatches,
                chunks: s.chunks,
                step_ms: step_s * 1e3,
                samples_per_s: (s.microbatches * ROWS) as f64 / step_s,
                bubble_measured: report.measured_bubble,
                bubble_simulated: report.simulated.bubble_fraction,
                bubble_textbook: bubble_formula(s.kind, s.stages, s.microbatches, s.chunks),
                peak_activations: if fold.shares(s.stages) {
                    report.simulated.peak_activations.clone()
                } else {
                    self.peak_activations.clone()
                },
                max_weight_error,
                forward_us: report.measured.forward_ns as f64 / 1e3,
                backward_us: report.measured.backward_ns as f64 / 1e3,
                weight_grad_us: report.measured.weight_grad_ns as f64 / 1e3,
                activation_bytes: report.measured.activation_bytes,
            },
            report,
        ))
    }
}

/// Runs one training step of `kind` on the first `stages` devices (or as `fold` places them),
/// as a run of `client`, and checks it against the single-device reference
/// ([`PreparedCase::new`] then [`PreparedCase::run`], which also plan for given costs).
pub fn run_case(
    client: &Client,
    mesh: &Mesh,
    kind: ScheduleKind,
    stages: usize,
    microbatches: usize,
    chunks: usize,
    fold: Fold,
) -> Result<(PipelineResult, RunReport)> {
    PreparedCase::new(kind, stages, microbatches, chunks, None)?.run(client, mesh, fold)
}

/// The largest |a − b| over two sets of weights (NaN when either has one).
fn max_difference(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, |m, d| {
            if d.is_nan() || m.is_nan() {
                f32::NAN
            } else {
                m.max(d)
            }
        })
}

/// The MoE stack the CLI and the bench train at `virtual_stages` (at least 4 layers, one per
/// virtual stage): d = 64, 4 experts of 128, top-2, capacity factor 1.25, 64 rows per
/// microbatch, each stage a pair of devices.
pub fn moe_config(virtual_stages: usize) -> MoeStackConfig {
    MoeStackConfig {
        layers: virtual_stages.max(4),
        model: 64,
        hidden: 128,
        experts: 4,
        top_k: 2,
        capacity_factor: 1.25,
        gang: 2,
        rows: 64,
        seed: 21,
    }
}

/// One schedule's MoE step, ready to run: the stack, the batch, and the weights of the same
/// step at one stage on the first pair (computed on devices, once).
#[derive(Debug)]
pub struct PreparedMoeCase {
    schedule: Schedule,
    stack: MoeStack,
    batch: Vec<Microbatch>,
    reference: Vec<Vec<f32>>,
}

impl PreparedMoeCase {
    /// Builds the schedule (with `chunks` per stage where the kind takes them) and the stack, and
    /// runs the one-stage step on the first pair of `mesh`, as a run of `client`.
    pub fn new(
        client: &Client,
        mesh: &Mesh,
        kind: ScheduleKind,
        stages: usize,
        microbatches: usize,
        chunks: usize,
    ) -> Result<Self> {
        let schedule = Schedule::new(kind, stages, microbatches, kind.chunks(chunks))?;
        let stack = MoeStack::new(moe_config(schedule.virtual_stages()))?;
        let batch = stack.batch(microbatches, 5);
        let reference = stack.reference_step(client, mesh, &batch, LR)?.weights;
        Ok(Self {
            schedule,
            stack,
            batch,
            reference,
        })
    }

    pub fn stack(&self) -> &MoeStack {
        &self.stack
    }

    /// Runs the pipelined step (its stages on gangs as `fold` places them, F&B pairs overlapped
    /// with `overlap`); its report and the largest |weight − one-stage step's|.
    pub fn run(
        &self,
        client: &Client,
        mesh: &Mesh,
        fold: Fold,
        overlap: bool,
    ) -> Result<(RunReport, f32)> {
        let report = execute(
            client,
            &self.schedule,
            mesh,
            &self.stack,
            &self.batch,
            LR,
            fold,
            overlap,
        )?;
        let error = max_difference(&report.weights, &self.reference);
        Ok((report, error))
    }
}
