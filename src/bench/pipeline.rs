//! `gangway bench pipeline`: one pipelined MLP training step per schedule on real devices
//! ([`crate::pipeline::workload`]); step time, throughput, and the bubble measured from the trace
//! beside the simulator's prediction from the same run's op times and the textbook formula. Two
//! schedules also run with their stages folded round robin onto half the devices ([`Fold`]),
//! each compared with itself at a device per stage. Then the MoE cases
//! ([`super::pipeline_moe`]): DualPipe(V) with F&B overlapped or not.

use super::harness::{Blocking, BlockingRun, Extras, Timed};
use super::planned::Planned;
use super::report::Timing;
use super::work::{Work, WorkUnit};
use crate::pipeline::workload::{PipelineResult, PreparedCase, ROWS, WIDTH, layers};
use crate::pipeline::{Fold, Schedule, ScheduleKind};
use crate::sched::{Client, Runtime};
use crate::{Device, Error, Mesh, Result};

/// The suite's sizes: every schedule on `stages` devices for each microbatch count.
#[derive(Debug, Clone)]
pub struct PipelineOptions {
    pub stages: usize,
    pub microbatches: Vec<usize>,
    /// Model chunks per device of the interleaved schedule.
    pub chunks: usize,
    /// Microbatch counts of the MoE cases ([`super::pipeline_moe`]).
    pub moe_microbatches: Vec<usize>,
}

impl PipelineOptions {
    pub fn standard() -> Self {
        Self {
            stages: 4,
            microbatches: vec![4, 8, 16],
            chunks: 2,
            moe_microbatches: vec![4, 8],
        }
    }

    pub fn quick() -> Self {
        Self {
            stages: 2,
            microbatches: vec![4],
            chunks: 2,
            moe_microbatches: vec![4],
        }
    }
}

/// One schedule's training step, checked against the single-device reference every time.
struct Step {
    client: Client,
    mesh: Mesh,
    /// The model, batch and reference step, made once.
    case: PreparedCase,
    fold: Fold,
    /// What each step's trace showed.
    results: Vec<PipelineResult>,
}

impl BlockingRun for Step {
    fn run(&mut self) -> Result<()> {
        let (r, _) = self.case.run(&self.client, &self.mesh, self.fold)?;
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

fn case_name(kind: ScheduleKind, stages: usize, microbatches: usize, fold: Fold) -> String {
    let mut name = format!("{} p={stages} m={microbatches}", kind.name());
    if fold.shares(stages) {
        let d = fold.device_count(stages);
        let devices = if d == 1 { "device" } else { "devices" };
        name += &format!(" on {d} {devices} ({})", fold.placement_name());
    }
    name
}

/// The schedules the suite also runs folded: the plain one, and the one built for chunks that
/// share a device.
const FOLDED: [ScheduleKind; 2] = [ScheduleKind::OneFOneB, ScheduleKind::Interleaved];

/// Every schedule for each microbatch count on the first `o.stages` devices, then [`FOLDED`]'s
/// with the stages round robin on half as many. The host reference step is computed once, in
/// `prepare`. The sample is the traced step, first kernel to last (the
/// executor's per-step set-up, threads, weight uploads and read-back, is not part of it). FLOPs
/// are the model's `6 · weights · samples`.
/// Runs go through one client of `runtime`.
pub fn plan(runtime: &Runtime, devices: &[Device], o: &PipelineOptions) -> Result<Vec<Planned>> {
    let client = runtime.client("bench pipeline", 1);
    let mut out = Vec::new();
    let half = Fold::RoundRobin {
        devices: (o.stages / 2).max(1),
    };
    let folded = FOLDED
        .into_iter()
        .map(|k| (k, half))
        .filter(|_| half.shares(o.stages));
    let every = ScheduleKind::ALL
        .into_iter()
        .map(|k| (k, Fold::OnePerStage))
        .chain(folded)
        .collect::<Vec<_>>();
    for &m in &o.microbatches {
        for &(kind, fold) in &every {
            let name = case_name(kind, o.stages, m, fold);
            let chunks = kind.chunks(o.chunks);
            let need = fold.device_count(o.stages);
            if devices.len() < need {
                out.push(Planned::too_few_devices(name, need, devices.len()));
                continue;
            }
            if let Err(e) = Schedule::new(kind, o.stages, m, chunks) {
                out.push(Planned::skip(name, e.to_string()));
                continue;
            }
            let samples = m * ROWS;
            // Each kind's own model: interleaved may have more layers.
            let weights = layers(o.stages, chunks) * WIDTH * WIDTH;
            let (mesh, stages) = (Mesh::line(&devices[..need]), o.stages);
            let work = Work::new(samples as f64, WorkUnit::Sample)
                .with_flops(6.0 * (weights * samples) as f64);
            let client = client.clone();
            let bench = Blocking::new(name, work, move || {
                Ok(Step {
                    client,
                    mesh,
                    case: PreparedCase::new(kind, stages, m, chunks, None)?,
                    fold,
                    results: Vec::new(),
                })
            });
            let baseline = if fold.shares(stages) {
                Some(case_name(kind, stages, m, Fold::OnePerStage))
            } else if kind != ScheduleKind::GPipe {
                Some(case_name(ScheduleKind::GPipe, stages, m, fold))
            } else {
                None
            };
            out.push(Planned::Run(Box::new(match baseline {
                Some(b) => bench.compared_to(b),
                None => bench,
            })));
        }
    }
    out.extend(super::pipeline_moe::plan(
        runtime,
        devices,
        &o.moe_microbatches,
    )?);
    Ok(out)
}
