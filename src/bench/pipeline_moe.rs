//! `gangway bench pipeline`'s MoE cases: DualPipe and DualPipeV training a stack of residual MoE
//! layers ([`crate::pipeline::MoeStack`], [`moe_config`]) on 2 stages of 2 devices each, every layer with an all-to-all over its
//! stage's pair, each with its F&B pairs overlapped and compared with itself run as F then B.
//! Whether the overlap hides the all-to-alls shows in the step time and in the all-to-all wait
//! no compute covered (the `exposed` metrics), both measured from the trace. Every step is checked
//! against the same layers at one stage on one pair.

use super::harness::{Blocking, BlockingRun, Extras, Timed};
use super::planned::Planned;
use super::report::Timing;
use super::work::{Work, WorkUnit};
use crate::pipeline::workload::{PreparedMoeCase, moe_config};
use crate::pipeline::{Fold, RunReport, Schedule, ScheduleKind};
use crate::sched::{Client, Runtime};
use crate::{Device, Error, Mesh, Result};

const STAGES: usize = 2;
/// Largest |pipelined − one-stage| weight a step may show.
const MAX_WEIGHT_ERROR: f32 = 1e-3;

struct Step {
    client: Client,
    mesh: Mesh,
    case: PreparedMoeCase,
    kind: ScheduleKind,
    overlap: bool,
    runs: Vec<RunReport>,
}

impl BlockingRun for Step {
    fn run(&mut self) -> Result<()> {
        let (r, error) =
            self.case
                .run(&self.client, &self.mesh, Fold::OnePerStage, self.overlap)?;
        // NaN fails too.
        if error.is_nan() || error > MAX_WEIGHT_ERROR {
            return Err(Error::Mismatch {
                what: format!("pipelined MoE {} step", self.kind),
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
            "{STAGES} stages × {} devices; F&B pairs {}",
            self.case.stack().config().gang,
            if self.overlap {
                "overlapped"
            } else {
                "run as F then B"
            }
        );
        Ok(e)
    }
}

fn case_name(kind: ScheduleKind, gang: usize, microbatches: usize, overlap: bool) -> String {
    let mut name = format!("moe {} p={STAGES}×{gang} m={microbatches}", kind.name());
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
    // Devices per stage: the stack's, whatever its depth.
    let gang = moe_config(2 * STAGES).gang;
    let need = STAGES * gang;
    let mut out = Vec::new();
    for kind in [ScheduleKind::DualPipe, ScheduleKind::DualPipeV] {
        for &m in microbatches {
            for overlap in [false, true] {
                let name = case_name(kind, gang, m, overlap);
                if devices.len() < need {
                    out.push(Planned::too_few_devices(name, need, devices.len()));
                    continue;
                }
                let c = match Schedule::new(kind, STAGES, m, kind.chunks(1)) {
                    Ok(s) => moe_config(s.virtual_stages()),
                    Err(e) => {
                        out.push(Planned::skip(name, e.to_string()));
                        continue;
                    }
                };
                let samples = m * c.rows;
                // Per token and layer: the router, and top-k experts' two matmuls.
                let per_token = c.model * c.experts + c.top_k * 2 * c.model * c.hidden;
                let work = Work::new(samples as f64, WorkUnit::Sample)
                    .with_flops(6.0 * (per_token * c.layers * samples) as f64);
                let (client, mesh) = (client.clone(), Mesh::line(&devices[..need]));
                let bench = Blocking::new(name, work, move || {
                    Ok(Step {
                        case: PreparedMoeCase::new(&client, &mesh, kind, STAGES, m, 1)?,
                        client,
                        mesh,
                        kind,
                        overlap,
                        runs: Vec::new(),
                    })
                });
                out.push(Planned::Run(Box::new(if overlap {
                    bench.compared_to(case_name(kind, gang, m, false))
                } else {
                    bench
                })));
            }
        }
    }
    Ok(out)
}
