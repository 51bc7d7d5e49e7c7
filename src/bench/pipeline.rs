//! `gangway bench pipeline` (and `gangway pipeline --run`): one pipelined MLP training step per
//! schedule on real devices; step time, throughput, and the bubble measured from the trace beside
//! the simulator's prediction from the same run's op times and the textbook formula.

use super::harness::{Blocking, BlockingRun, Extras, Timed, Work, WorkUnit};
use super::report::Timing;
use super::suite::Planned;
use crate::device::DeviceList;
use crate::pipeline::{
    Microbatch, Mlp, MlpConfig, RunReport, Schedule, ScheduleKind, bubble_formula, execute,
    validate,
};
use crate::sched::{Client, Runtime};
use crate::{Device, Error, Result, Rng};
use serde::Serialize;

/// Width of every hidden layer of the benchmark MLP.
pub const WIDTH: usize = 128;
/// Rows (samples) per microbatch.
pub const ROWS: usize = 32;
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
    pub microbatches: usize,
    pub chunks: usize,
    pub step_ms: f64,
    pub samples_per_s: f64,
    pub bubble_measured: f64,
    /// The simulator with this run's own mean op and transfer times.
    pub bubble_simulated: f64,
    /// The textbook formula (free transfers; ZB-H1 assumes F = B = W).
    /// The published formula at `F = B = W`; `None` where it has no closed form (ZB-V).
    pub bubble_textbook: Option<f64>,
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
    /// Builds and validates the schedule and computes the reference step (on the host).
    pub fn new(
        kind: ScheduleKind,
        stages: usize,
        microbatches: usize,
        chunks: usize,
    ) -> Result<Self> {
        let chunks = kind.chunks(chunks);
        let schedule = Schedule::new(kind, stages, microbatches, chunks)?;
        let peak_activations = validate(&schedule)?.peak_activations;
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

    /// Runs the step on the first `stages` devices, as a run of `client`; its weights are
    /// compared with the reference.
    pub fn run(
        &self,
        client: &Client,
        devices: &(impl DeviceList + ?Sized),
    ) -> Result<(PipelineResult, RunReport)> {
        let devices = devices.mesh_devices();
        let s = &self.schedule;
        if devices.len() < s.stages {
            return Err(Error::InvalidArgument {
                what: "pipeline run",
                reason: format!(
                    "{} stages need {} devices, {} found (try --virtual-devices)",
                    s.stages,
                    s.stages,
                    devices.len()
                ),
            });
        }
        let report = execute(client, s, &devices[..s.stages], &self.mlp, &self.data, LR)?;
        let max_weight_error = report
            .weights
            .iter()
            .flatten()
            .zip(self.reference.iter().flatten())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        let step_s = report.makespan_ns as f64 / 1e9;
        Ok((
            PipelineResult {
                schedule: s.kind.name(),
                stages: s.stages,
                microbatches: s.microbatches,
                chunks: s.chunks,
                step_ms: step_s * 1e3,
                samples_per_s: (s.microbatches * ROWS) as f64 / step_s,
                bubble_measured: report.measured_bubble,
                bubble_simulated: report.simulated.bubble_fraction,
                bubble_textbook: bubble_formula(s.kind, s.stages, s.microbatches, s.chunks),
                peak_activations: self.peak_activations.clone(),
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

/// Runs one training step of `kind` on the first `stages` devices, as a run of `client`, and
/// checks it against the single-device reference.
pub fn run_case(
    client: &Client,
    devices: &(impl DeviceList + ?Sized),
    kind: ScheduleKind,
    stages: usize,
    microbatches: usize,
    chunks: usize,
) -> Result<(PipelineResult, RunReport)> {
    PreparedCase::new(kind, stages, microbatches, chunks)?.run(client, devices)
}

/// The suite's sizes: every schedule on `stages` devices for each microbatch count.
#[derive(Debug, Clone)]
pub struct PipelineOptions {
    pub stages: usize,
    pub microbatches: Vec<usize>,
    /// Model chunks per device of the interleaved schedule.
    pub chunks: usize,
}

impl PipelineOptions {
    pub fn standard() -> Self {
        Self {
            stages: 4,
            microbatches: vec![4, 8, 16],
            chunks: 2,
        }
    }

    pub fn quick() -> Self {
        Self {
            stages: 2,
            microbatches: vec![4],
            chunks: 2,
        }
    }
}

/// One schedule's training step, checked against the single-device reference every time.
struct Step {
    client: Client,
    devices: Vec<Device>,
    /// The model, batch and reference step, made once.
    case: PreparedCase,
    /// What each step's trace showed.
    results: Vec<PipelineResult>,
}

impl BlockingRun for Step {
    fn run(&mut self) -> Result<()> {
        let (r, _) = self.case.run(&self.client, &self.devices)?;
        // NaN fails too.
        if r.max_weight_error.is_nan() || r.max_weight_error > MAX_WEIGHT_ERROR {
            return Err(Error::Mismatch {
                what: format!("pipelined {} step", r.schedule),
                detail: format!(
                    "max |weight − single-device reference| = {:e}",
                    r.max_weight_error
                ),
            });
        }
        self.results.push(r);
        Ok(())
    }

    fn timed(&mut self) -> Option<Timed> {
        self.results.last().map(|r| Timed {
            seconds: r.step_ms * 1e-3,
            timing: Timing::Trace,
        })
    }

    fn extras(&mut self) -> Result<Extras> {
        let rs = &self.results;
        let median = |f: fn(&PipelineResult) -> f64| {
            let mut v: Vec<f64> = rs.iter().map(f).collect();
            crate::kernels::autotune::median(&mut v)
        };
        let mut e = Extras::default();
        for (name, f) in [
            (
                "bubble measured",
                (|r| r.bubble_measured) as fn(&PipelineResult) -> f64,
            ),
            ("bubble simulated", |r| r.bubble_simulated),
            ("F µs", |r| r.forward_us),
            ("B µs", |r| r.backward_us),
            ("W µs", |r| r.weight_grad_us),
            ("activation bytes", |r| r.activation_bytes as f64),
        ] {
            e.metrics.insert(name.into(), median(f));
        }
        if let Some(x) = rs.last().and_then(|r| r.bubble_textbook) {
            e.metrics.insert("bubble textbook".into(), x);
        }
        e.metrics.insert(
            "max weight error".into(),
            rs.iter()
                .map(|r| f64::from(r.max_weight_error))
                .fold(0.0, f64::max),
        );
        if let Some(r) = rs.last() {
            e.note = format!("peak activations {:?}", r.peak_activations);
        }
        Ok(e)
    }
}

/// Largest |pipelined − reference| weight a step may show.
const MAX_WEIGHT_ERROR: f32 = 1e-3;

fn case_name(kind: ScheduleKind, stages: usize, microbatches: usize) -> String {
    format!("{} p={stages} m={microbatches}", kind.name())
}

/// Every schedule for each microbatch count on the first `o.stages` devices. The host reference
/// step is computed once, in `prepare`. The sample is the traced step, first kernel to last (the
/// executor's per-step set-up, threads, weight uploads and read-back, is not part of it). FLOPs
/// are the model's `6 · weights · samples`.
/// Runs go through one client of `runtime`.
pub fn plan(runtime: &Runtime, devices: &[Device], o: &PipelineOptions) -> Result<Vec<Planned>> {
    let client = runtime.client("bench pipeline", 1);
    let mut out = Vec::new();
    for &m in &o.microbatches {
        for kind in ScheduleKind::ALL {
            let name = case_name(kind, o.stages, m);
            let chunks = kind.chunks(o.chunks);
            if devices.len() < o.stages {
                out.push(Planned::skip(
                    name,
                    format!(
                        "needs {} devices, the adapter has {} (raise --virtual-devices)",
                        o.stages,
                        devices.len()
                    ),
                ));
                continue;
            }
            if let Err(e) = Schedule::new(kind, o.stages, m, chunks) {
                out.push(Planned::skip(name, e.to_string()));
                continue;
            }
            let samples = m * ROWS;
            // Each kind's own model: interleaved may have more layers.
            let weights = layers(o.stages, chunks) * WIDTH * WIDTH;
            let (devices, stages) = (devices[..o.stages].to_vec(), o.stages);
            let work = Work::new(samples as f64, WorkUnit::Sample)
                .with_flops(6.0 * (weights * samples) as f64);
            let client = client.clone();
            let bench = Blocking::new(name, work, move || {
                Ok(Step {
                    client,
                    devices,
                    case: PreparedCase::new(kind, stages, m, chunks)?,
                    results: Vec::new(),
                })
            });
            out.push(Planned::Run(Box::new(if kind == ScheduleKind::GPipe {
                bench
            } else {
                bench.compared_to(case_name(ScheduleKind::GPipe, o.stages, m))
            })));
        }
    }
    Ok(out)
}
