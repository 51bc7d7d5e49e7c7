//! Real pipelined training runs: a [`Schedule`] lowered to one [`Program`](crate::program::Program)
//! ([`super::lower`]) and run by the gang-scheduling runtime, as one run of the caller's
//! [`Client`], like every other workload; the run is then measured ([`super::measure`]). One
//! [`execute`] serves every [`StageModel`]: the MLP (a device per stage) and the MoE stack (a
//! gang of devices per stage, whose F&B pairs may run overlapped).
//!
//! Weights are program variables; after the step they are read back: one pipelined step of the
//! MLP equals [`Mlp::reference_step`] over the same microbatches. Dispatch is parallel: every command
//! buffer is recorded before the run starts, and each device's worker submits its stage's work
//! as its inputs arrive.
//!
//! **Trace.** The runtime traces every kernel (GPU-timestamped where the adapter can) and
//! transfer; the report turns them into the pipeline's view, with the *stage index* as `device`
//! (not [`crate::Device::id`]; with a [`Fold`], the index of the stage's device among the run's),
//! so [`super::timeline`] and the simulator's events line up ([`RunReport::tracks`] says what
//! each lane is: a stage, or folded, a device or a gang with its stages). An op is one
//! compute-lane kernel event marked with its [`crate::trace::PipelineOp`] and named `F`, `B`,
//! `W` (with `.c<k>` when its device holds more than one chunk, as the simulator names them)
//! spanning its kernels, with its microbatch. A send is a transfer-lane
//! event (the readback, from when the op that made its tensor ended) carrying the flow's `Out`
//! end; the matching receive is a transfer-lane event on the peer (the upload) carrying its
//! `In` end; time a receive waited for its data is a wait event. The final update is a
//! compute-lane kernel named `sgd`, outside the measured makespan.

use std::sync::Arc;

use super::fold::Fold;
use super::lower::{Plan, lower, weight_var};
use super::measure::{RunReport, all_to_all_waits, report, stage_events};
use super::schedule::Schedule;
use super::stage_model::Microbatch;
use super::stage_model::StageModel;
use crate::Mesh;
use crate::program::{CompileOptions, HostData, Variables};
use crate::sched::{Client, RunOptions};
use crate::trace::shifted_ns;
use crate::{DType, Error, Result, Tensor};

/// Runs one pipelined training step of `model` over `batch` (one [`Microbatch`] per schedule
/// microbatch) with learning rate `lr`, as one run of `client`. The first devices of `mesh` the
/// placement needs are laid out as `{stage, expert}` (a row of `g` = [`StageModel::gang`] devices
/// per gang: one device per stage for the MLP; with [`Fold::OnePerStage`] one gang per stage,
/// else several stages to a gang, see [`super::fold`]); stage `s` runs on row `k = fold(s)`,
/// `mesh.sub("stage", k)`, all its chunks there, its experts split over the row; devices beyond
/// those are left out. With `overlap`, each F&B pair of the schedule runs overlapped (see [`super::lower`]); without, as its F and then its B. The report holds the
/// run's events in the pipeline's view; the runtime's own tracer, when on, also gets them as they
/// happen, in the runtime's view (device ids).
///
/// In a job of several ranks the stages may be on different ranks: every rank calls this with
/// the same arguments, each runs its stages, and every rank's report has every stage's events
/// (gathered, on rank 0's clock).
#[allow(clippy::too_many_arguments)]
pub fn execute<M: StageModel>(
    client: &Client,
    schedule: &Schedule,
    mesh: &Mesh,
    model: &M,
    batch: &[Microbatch],
    lr: f32,
    fold: Fold,
    overlap: bool,
) -> Result<RunReport> {
    // The first devices the placement needs; too few is the plan's error, naming the placement.
    let want = fold.device_count(schedule.stages) * model.gang();
    let devices = &mesh[..want.min(mesh.len())];
    let plan = Plan::new(schedule, devices, model, batch, lr, fold, overlap)?;
    run(client, &plan)
}

/// Runs `plan` (any model, gangs of any size): the one way a pipelined step runs.
pub(super) fn run<M: StageModel>(client: &Client, plan: &Plan<'_, M>) -> Result<RunReport> {
    let (schedule, model, devices) = (plan.schedule, plan.model, &plan.mesh);
    let lowered = lower(plan)?;
    let mut variables = Variables::new();
    for l in 0..model.layers() {
        let values = model.initial(l);
        for (copy, stage) in plan.holders_of_layer(l).into_iter().enumerate() {
            // This rank's stages' weights (each copy's); other ranks upload theirs.
            let gang = plan.stage_mesh(plan.dev(stage))?;
            for (param, host) in model.params(l).iter().zip(&values) {
                let shape = param.shard_shape(gang.len());
                let shards = gang
                    .iter()
                    .enumerate()
                    .map(|(i, device)| {
                        let data = param.shard(host, i, gang.len());
                        device
                            .local()
                            .map(|d| Tensor::from_f32(d, &shape, DType::F32, data))
                            .transpose()
                    })
                    .collect::<Result<Vec<_>>>()?;
                variables.insert_shards(weight_var(l, param, copy), shards);
            }
        }
    }
    let exec = Arc::new(lowered.program.compile_with(
        devices,
        CompileOptions {
            in_flight: 1,
            ..CompileOptions::default()
        },
        &variables,
    )?);
    let mut args: Vec<HostData> = Vec::new();
    for mb in plan.batch {
        args.push(mb.input.clone().into());
        args.push(mb.target.clone().into());
    }
    let opts = RunOptions {
        trace: true,
        ..RunOptions::default()
    };
    let (results, events) = client.submit_and_drive(&exec, args, opts)?.wait_traced()?;
    let results: Vec<Vec<f32>> = results
        .iter()
        .map(|b| bytemuck::pod_collect_to_vec::<u8, f32>(b))
        .collect();
    let waits = all_to_all_waits(&lowered.program, exec.id(), &events);
    let mut events = stage_events(&lowered, exec.id(), events);
    let job = client.job();
    if job.size() > 1 {
        // Every rank's stages, on rank 0's clock.
        let offsets = job.clock_offsets(3)?;
        // Not `Job::gather_trace`: the lanes are already the job's stages (not a rank's own
        // devices to renumber), and every rank reports the whole run.
        let shift = offsets.get(job.rank()).map_or(0, |o| o.to_root_ns);
        for e in &mut events {
            (e.start_ns, e.end_ns) = (shifted_ns(e.start_ns, shift), shifted_ns(e.end_ns, shift));
        }
        events = job.all_gather(&events)?.into_iter().flatten().collect();
        events.sort_by_key(|e| (e.start_ns, e.end_ns));
    }
    // Each parameter once: a replicated one comes back once per device of its gang.
    let copies = schedule.kind.parameter_copies();
    let mut by_copy: Vec<Vec<Vec<f32>>> = vec![Vec::new(); copies];
    for ((copy, _, param), got) in lowered.weights.iter().zip(&results) {
        let len: usize = param.shape.iter().product();
        by_copy[*copy].push(got.get(..len).unwrap_or(got).to_vec());
    }
    let weights = by_copy.first().cloned().unwrap_or_default();
    for (copy, other) in by_copy.iter().enumerate().skip(1) {
        if *other != weights {
            return Err(Error::InvalidArgument {
                what: "pipeline run",
                reason: format!("parameter copy {copy} differs from copy 0 after the update"),
            });
        }
    }
    let losses = results
        .get(lowered.weights.len()..)
        .unwrap_or_default()
        .iter()
        .zip(plan.batch)
        .map(|(y, mb)| plan.model.loss(y, &mb.target))
        .collect();
    report(plan, weights, losses, events, waits)
}
