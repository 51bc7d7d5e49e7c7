//! `gangway bench pipeline`'s MoE cases: DualPipe and DualPipeV training a stack of residual MoE
//! layers ([`MoeStack`]) on 2 stages of 2 devices each, every layer with an all-to-all over its
//! stage's pair, each with its F&B pairs overlapped and compared with itself run as F then B.
//! Whether the overlap hides the all-to-alls shows in the step time and in the all-to-all wait
//! no compute covered (the `exposed` metrics), both measured from the trace. Every step is checked
//! against the same layers at one stage on one pair.

use super::harness::{Blocking, BlockingRun, Extras, Timed, Work, WorkUnit};
use super::report::Timing;
use super::suite::Planned;
use crate::pipeline::{Microbatch, MoeStack, MoeStackConfig, RunReport, Schedule, ScheduleKind};
use crate::sched::{Client, Runtime};
use crate::{Device, Error, Result};

/// Stages, and devices per stage.
const STAGES: usize = 2;
const GANG: usize = 2;
const LR: f32 = 0.01;
/// Largest |pipelined − one-stage| weight a step may show.
const MAX_WEIGHT_ERROR: f32 = 1e-3;

fn config() -> MoeStackConfig {
    MoeStackConfig {
        layers: 4,
        model: 64,
        hidden: 128,
        experts: 4,
        top_k: 2,
        capacity_factor: 1.25,
        gang: GANG,
        rows: 64,
        seed: 21,
    }
}

struct Step {
    client: Client,
    devices: Vec<Device>,
    stack: MoeStack,
    schedule: Schedule,
    batch: Vec<Microbatch>,
    /// The one-stage step's weights.
    reference: Vec<Vec<f32>>,
    overlap: bool,
    runs: Vec<RunReport>,
}

impl BlockingRun for Step {
    fn run(&mut self) -> Result<()> {
        let r = self.stack.step(
            &self.client,
            &self.schedule,
            &self.devices,
            &self.batch,
            LR,
            self.overlap,
        )?;
        let error = r
            .weights
            .iter()
            .flatten()
            .zip(self.reference.iter().flatten())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        // NaN fails too.
        if error.is_nan() || error > MAX_WEIGHT_ERROR {
            return Err(Error::Mismatch {
                what: format!("pipelined MoE {} step", self.schedule.kind),
                detail: format!("max |weight − one-stage step| = {error:e}"),
            });
        }
        self.runs.push(r);
        Ok(())
    }

    fn timed(&mut self) -> Option<Timed> {
        self.runs.last().map(|r| Timed {
            seconds: r.makespan_ns as f64 * 1e-9,
            timing: Timing::Trace,
        })
    }

    fn extras(&mut self) -> Result<Extras> {
        let median = |f: fn(&RunReport) -> f64| {
            let mut v: Vec<f64> = self.runs.iter().map(f).collect();
            crate::kernels::autotune::median(&mut v)
        };
        let mut e = Extras::default();
        for (name, f) in [
            (
                "all-to-all wait ms",
                (|r| r.all_to_all_wait_ns as f64 / 1e6) as fn(&RunReport) -> f64,
            ),
            ("all-to-all exposed ms", |r| {
                r.all_to_all_exposed_ns as f64 / 1e6
            }),
            ("exposed share of wait", |r| {
                r.all_to_all_exposed_ns as f64 / r.all_to_all_wait_ns.max(1) as f64
            }),
            ("bubble measured", |r| r.measured_bubble),
        ] {
            e.metrics.insert(name.into(), median(f));
        }
        e.note = format!(
            "2 stages × 2 devices; F&B pairs {}",
            if self.overlap {
                "overlapped"
            } else {
                "run as F then B"
            }
        );
        Ok(e)
    }
}

fn case_name(kind: ScheduleKind, microbatches: usize, overlap: bool) -> String {
    let mut name = format!("moe {} p={STAGES}×{GANG} m={microbatches}", kind.name());
    if overlap {
        name += " overlapped";
    }
    name
}

/// DualPipe and DualPipeV for each of `microbatches` (at least `2p`), each with F&B overlapped
/// (compared to itself without) and not, on the first 4 devices. The sample is the traced step,
/// first kernel to last.
pub fn plan(runtime: &Runtime, devices: &[Device], microbatches: &[usize]) -> Result<Vec<Planned>> {
    let client = runtime.client("bench pipeline moe", 1);
    let need = STAGES * GANG;
    let c = config();
    let mut out = Vec::new();
    for kind in [ScheduleKind::DualPipe, ScheduleKind::DualPipeV] {
        for &m in microbatches {
            for overlap in [false, true] {
                let name = case_name(kind, m, overlap);
                if devices.len() < need {
                    out.push(Planned::skip(
                        name,
                        format!(
                            "needs {need} devices, the adapter has {} (raise --virtual-devices)",
                            devices.len()
                        ),
                    ));
                    continue;
                }
                let samples = m * c.rows;
                // Per token and layer: the router, and top-k experts' two matmuls.
                let per_token = c.model * c.experts + c.top_k * 2 * c.model * c.hidden;
                let work = Work::new(samples as f64, WorkUnit::Sample)
                    .with_flops(6.0 * (per_token * c.layers * samples) as f64);
                let (client, devices) = (client.clone(), devices[..need].to_vec());
                let bench = Blocking::new(name, work, move || {
                    let stack = MoeStack::new(config())?;
                    let batch = stack.batch(m, 5);
                    let reference = stack
                        .reference_step(&client, &devices[..GANG], &batch, LR)?
                        .weights;
                    Ok(Step {
                        schedule: Schedule::new(kind, STAGES, m, kind.chunks(1))?,
                        client,
                        devices,
                        stack,
                        batch,
                        reference,
                        overlap,
                        runs: Vec::new(),
                    })
                });
                out.push(Planned::Run(Box::new(if overlap {
                    bench.compared_to(case_name(kind, m, false))
                } else {
                    bench
                })));
            }
        }
    }
    Ok(out)
}
