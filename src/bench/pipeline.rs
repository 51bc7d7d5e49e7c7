//! `gangway bench pipeline` (and `gangway pipeline --run`): one pipelined MLP training step per
//! schedule on real devices; step time, throughput, and the bubble measured from the trace beside
//! the simulator's prediction from the same run's op times and the textbook formula.

use crate::pipeline::{
    Microbatch, Mlp, MlpConfig, RunReport, Schedule, ScheduleKind, bubble_formula, execute,
    validate,
};
use crate::trace::Tracer;
use crate::{Device, Error, Result, Rng};
use serde::Serialize;

/// Width of every hidden layer of the benchmark MLP.
pub const WIDTH: usize = 128;
/// Rows (samples) per microbatch.
pub const ROWS: usize = 32;
const LR: f32 = 0.01;

/// The MLP the benchmark trains: `max(8, p·v)` layers of [`WIDTH`], so every virtual stage has one.
pub fn model(stages: usize, chunks: usize, seed: u64) -> Result<Mlp> {
    let layers = (stages * chunks).max(8);
    Mlp::new(&MlpConfig {
        widths: vec![WIDTH; layers + 1],
        seed,
    })
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
    pub bubble_textbook: f64,
    pub peak_activations: Vec<usize>,
    /// Largest |pipelined − single-device reference| weight after the step.
    pub max_weight_error: f32,
}

/// Runs one training step of `kind` on the first `stages` devices and checks it against the
/// single-device reference.
pub fn run_case(
    devices: &[Device],
    kind: ScheduleKind,
    stages: usize,
    microbatches: usize,
    chunks: usize,
    tracer: &Tracer,
) -> Result<(PipelineResult, RunReport)> {
    if devices.len() < stages {
        return Err(Error::InvalidArgument {
            what: "pipeline run",
            reason: format!(
                "{stages} stages need {stages} devices, {} found (try --virtual-devices)",
                devices.len()
            ),
        });
    }
    let chunks = if kind == ScheduleKind::Interleaved {
        chunks
    } else {
        1
    };
    let schedule = Schedule::new(kind, stages, microbatches, chunks)?;
    let validation = validate(&schedule)?;
    let mlp = model(stages, chunks, 7)?;
    let data = batch(&mlp, microbatches, 11);
    let report = execute(&schedule, &devices[..stages], &mlp, &data, LR, tracer)?;
    let reference = mlp.reference_step(&data, LR)?;
    let max_weight_error = report
        .weights
        .iter()
        .flatten()
        .zip(reference.weights.iter().flatten())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    let step_s = report.makespan_ns as f64 / 1e9;
    Ok((
        PipelineResult {
            schedule: kind.name(),
            stages,
            microbatches,
            chunks,
            step_ms: step_s * 1e3,
            samples_per_s: (microbatches * ROWS) as f64 / step_s,
            bubble_measured: report.measured_bubble,
            bubble_simulated: report.simulated.bubble_fraction,
            bubble_textbook: bubble_formula(kind, stages, microbatches, chunks),
            peak_activations: validation.peak_activations,
            max_weight_error,
        },
        report,
    ))
}

/// Every schedule on `stages` devices for each microbatch count, the median step of `reps`.
pub fn run(
    devices: &[Device],
    stages: usize,
    microbatch_counts: &[usize],
    warmup: usize,
    reps: usize,
    mut progress: impl FnMut(&PipelineResult),
) -> Result<Vec<PipelineResult>> {
    let mut out = Vec::new();
    for &m in microbatch_counts {
        for kind in ScheduleKind::ALL {
            if kind == ScheduleKind::Interleaved && !m.is_multiple_of(stages) {
                continue;
            }
            for _ in 0..warmup {
                run_case(devices, kind, stages, m, 2, &Tracer::off())?;
            }
            let mut runs = (0..reps.max(1))
                .map(|_| run_case(devices, kind, stages, m, 2, &Tracer::off()).map(|r| r.0))
                .collect::<Result<Vec<_>>>()?;
            runs.sort_by(|a, b| a.step_ms.total_cmp(&b.step_ms));
            let median = runs.swap_remove(runs.len() / 2);
            progress(&median);
            out.push(median);
        }
    }
    Ok(out)
}

pub fn table(results: &[PipelineResult]) -> String {
    let pct = |x: f64| format!("{:.1}%", x * 100.0);
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.schedule.to_string(),
                r.stages.to_string(),
                r.microbatches.to_string(),
                format!("{:.2}", r.step_ms),
                format!("{:.0}", r.samples_per_s),
                pct(r.bubble_measured),
                pct(r.bubble_simulated),
                pct(r.bubble_textbook),
            ]
        })
        .collect();
    super::markdown_table(
        &[
            "schedule",
            "p",
            "m",
            "step ms",
            "samples/s",
            "bubble measured",
            "bubble simulated (measured op times)",
            "bubble textbook",
        ],
        &rows,
    )
}
