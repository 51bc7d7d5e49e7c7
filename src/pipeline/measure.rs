//! Measuring a pipelined run: the runtime's events turned into the pipeline's view (one
//! compute event per op, sends and receives with their flows, a send starting when the op that
//! made its tensor ended, waits), and the run's report ([`RunReport`]) with its
//! measured op costs and bubble ([`crate::trace::pipeline_bubble`], the one bubble computation
//! the CLI, the bench and the viewer share) beside the simulation under those costs. Lanes are
//! stages, or with a [`super::Fold`] the devices the stages share; an op's event spans its
//! kernels on every device of its stage's gang. For MoE stages, the time devices waited on the
//! all-to-alls and the part no compute hid ([`all_to_all_waits`], from the runtime's events).
//! The measured costs come from the events alone ([`measured_chunk_costs`]), so a run's trace
//! read back gives them too, and [`measured_share`] scales them to a stage's whole model share
//! for `gangway pipeline --costs-from`.

use std::collections::{BTreeSet, HashMap};

use super::lower::{Flowing, Lowered, Plan, Tag};
use super::simulate::{Costs, Simulation, simulate_folded};
use super::stage_model::StageModel;
use crate::Result;
use crate::program::{Op, Program};
use crate::trace::{
    Event, EventKind, EventMeta, FlowRole, Lane, PipelineOp, Track, TrackKind, exposed_wait_ns,
    pipeline_bubble,
};

/// What one pipelined training step did and how long it took.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Weights after the SGD step, per layer (row-major `[in, out]`).
    pub weights: Vec<Vec<f32>>,
    /// Mean over microbatches of each one's mean squared error, before the step.
    pub loss: f32,
    /// Every event of the run, by start time; `device` is the stage index, or its device's when
    /// folded (see the module docs).
    pub events: Vec<Event>,
    /// What each lane is: a stage (`stage s: <device label>`), or folded, a device or a gang of
    /// devices with the stages it holds (`device d (stages …): <label>`), for
    /// [`crate::trace::chrome::to_json`].
    pub tracks: Vec<Track>,
    /// From the first F/B/W start to the last F/B/W end, over all stages.
    pub makespan_ns: u64,
    /// Mean measured F, B and W per op (per chunk); without split backward, `backward_ns` is the
    /// whole B (weight gradient included) and `weight_grad_ns` is 0, as [`Costs`] expects. The
    /// latency is the mean transfer (the send's readback + the receive's upload; waits are
    /// excluded) with infinite bandwidth; `activation_bytes` is the largest stage-boundary
    /// activation.
    pub measured: Costs,
    /// Idle compute time over `devices × makespan`, from the compute-lane F/B/W events
    /// ([`crate::trace::pipeline_bubble`]).
    pub measured_bubble: f64,
    /// [`simulate_folded`] of the same schedule and fold under [`RunReport::measured`].
    pub simulated: Simulation,
    /// Time the devices waited on all-to-alls (an MoE model's), summed over devices, and the
    /// part of it in which the device computed nothing: the communication no compute hid
    /// (0 and 0 for the MLP, which has none).
    pub all_to_all_wait_ns: u64,
    pub all_to_all_exposed_ns: u64,
}

/// Mean costs of a pipelined run's ops, from its events in the pipeline's view (a run's report
/// has them, and so does the trace `gangway --trace FILE pipeline --run` writes): F, B and W per
/// chunk op (a schedule that does not split the backward has no W events: its B is the whole
/// backward and W is 0, as [`Costs`] expects), and the mean transfer (the send's readback and the
/// receive's upload, waits excluded) as the latency, with infinite bandwidth and no activation
/// size. Zero where the events have none of an op.
pub fn measured_chunk_costs(events: &[Event]) -> Costs {
    let mean = |op: PipelineOp| {
        let (n, sum) = events
            .iter()
            .filter(|e| PipelineOp::of(e) == Some(op))
            .fold((0u64, 0u64), |(n, s), e| (n + 1, s + e.duration_ns()));
        sum.checked_div(n).unwrap_or(0)
    };
    let transfers = events.iter().filter(|e| e.lane == Lane::Transfer);
    let (sends, transfer_ns) = transfers.fold((0u64, 0u64), |(n, s), e| {
        let out = e.flow.is_some_and(|f| f.role == FlowRole::Out);
        (n + u64::from(out), s + e.duration_ns())
    });
    Costs {
        latency_ns: transfer_ns.checked_div(sends).unwrap_or(0),
        ..Costs::compute_only(
            mean(PipelineOp::Forward),
            mean(PipelineOp::Backward),
            mean(PipelineOp::WeightGrad),
        )
    }
}

/// [`measured_chunk_costs`] as one microbatch through a lane's whole model share, the form
/// `gangway pipeline --costs-us` takes: each chunk op's cost times the chunk ops a microbatch
/// makes on a lane (the F events over lanes × microbatches; 2 for a V, `v` interleaved). `None`
/// where the events hold no F, B and microbatch numbers (not a pipelined run's).
pub fn measured_share(events: &[Event]) -> Option<Costs> {
    let forwards: Vec<&Event> = (events.iter())
        .filter(|e| PipelineOp::of(e) == Some(PipelineOp::Forward))
        .collect();
    let backwards = events
        .iter()
        .any(|e| PipelineOp::of(e) == Some(PipelineOp::Backward));
    let lanes: BTreeSet<usize> = forwards.iter().map(|e| e.device).collect();
    let microbatches: BTreeSet<u32> = forwards.iter().filter_map(|e| e.microbatch).collect();
    let per_lane = lanes.len() * microbatches.len();
    if !backwards || per_lane == 0 {
        return None;
    }
    let passes = (forwards.len() as f64 / per_lane as f64).round().max(1.0) as u64;
    let chunk = measured_chunk_costs(events);
    Some(Costs {
        forward_ns: chunk.forward_ns * passes,
        backward_ns: chunk.backward_ns * passes,
        weight_grad_ns: chunk.weight_grad_ns * passes,
        ..chunk
    })
}

/// The runtime's events of program `program` as the pipeline's view (see the module docs).
pub(super) fn stage_events(lowered: &Lowered, program: u64, raw: Vec<Event>) -> Vec<Event> {
    let lane = |stage: usize| lowered.device_of.get(stage).copied().unwrap_or(stage);
    // One compute event per op (and per stage's update), spanning its kernels.
    // Per (lane, op name, microbatch): the span of its kernels, and the op it is.
    type Span = (u64, u64, Option<PipelineOp>);
    let mut spans: HashMap<(usize, String, Option<usize>), Span> = HashMap::new();
    let mut out = Vec::new();
    // Each send's index in `out`, and the op that makes what it sends.
    let mut sends: Vec<(usize, PipelineOp)> = Vec::new();
    for e in raw {
        if e.program != Some(program) {
            continue;
        }
        let Some(tag) = e
            .node
            .and_then(|n| lowered.tags.get(n as usize))
            .and_then(Option::as_ref)
        else {
            continue;
        };
        match (tag, e.kind) {
            (
                Tag::Compute {
                    stage,
                    name,
                    mb,
                    op,
                },
                EventKind::Kernel,
            ) => {
                let span = spans
                    .entry((lane(*stage), name.clone(), Some(*mb)))
                    .or_insert((u64::MAX, 0, *op));
                *span = (span.0.min(e.start_ns), span.1.max(e.end_ns), *op);
            }
            (Tag::Sgd { stage }, EventKind::Kernel) => {
                let span =
                    spans
                        .entry((lane(*stage), "sgd".into(), None))
                        .or_insert((u64::MAX, 0, None));
                *span = (span.0.min(e.start_ns), span.1.max(e.end_ns), None);
            }
            (
                Tag::Send { stage, what, mb } | Tag::Recv { stage, what, mb },
                EventKind::Transfer,
            ) => {
                // Only the flow ends are the pipeline's transfers (not uploads of arguments).
                let Some(f) = e.flow else { continue };
                let verb = match (f.role, what) {
                    (FlowRole::Out, Flowing::Activation) => {
                        sends.push((out.len(), PipelineOp::Forward));
                        "send"
                    }
                    (FlowRole::Out, Flowing::Gradient) => {
                        sends.push((out.len(), PipelineOp::Backward));
                        "send"
                    }
                    (FlowRole::In, _) => "recv",
                };
                let meta = EventMeta {
                    moved: e.moved,
                    ..EventMeta::transfer(lane(*stage))
                        .microbatch(*mb as u32)
                        .flow(f.id, f.role)
                };
                out.push(meta.event(format!("{verb} {}", what.name()), e.start_ns, e.end_ns));
            }
            (Tag::Recv { stage, what, mb }, EventKind::Wait) => {
                let meta = EventMeta::wait(lane(*stage)).microbatch(*mb as u32);
                out.push(meta.event(format!("wait {}", what.name()), e.start_ns, e.end_ns));
            }
            _ => {}
        }
    }
    let mut compute = Vec::new();
    for ((stage, name, mb), (start, end, op)) in spans {
        let mut meta = EventMeta::kernel(stage);
        if let Some(mb) = mb {
            meta = meta.microbatch(mb as u32);
        }
        if let Some(op) = op {
            meta = meta.op(op);
        }
        compute.push(meta.event(name, start, end));
    }
    start_sends_after_their_producers(&mut out, &sends, &compute);
    out.extend(compute);
    out.sort_by_key(|e| (e.start_ns, e.end_ns));
    out
}

/// A send's readback is queued behind the op that makes its tensor (parallel dispatch submits
/// both at once): it starts, as a transfer, when that op's kernels end. The op is the latest F
/// (for an activation) or B (for a gradient) of the send's microbatch on its lane that ended
/// before the send did; any op of the lane would not do: one that ran after the copy, while
/// the sender's worker was late to record the read-back, would start the send after its
/// receive had.
fn start_sends_after_their_producers(
    out: &mut [Event],
    sends: &[(usize, PipelineOp)],
    compute: &[Event],
) {
    for &(i, producer) in sends {
        let e = &mut out[i];
        let ready = (compute.iter())
            .filter(|c| {
                c.device == e.device
                    && c.microbatch == e.microbatch
                    && c.op == Some(producer)
                    && c.end_ns <= e.end_ns
            })
            .map(|c| c.end_ns)
            .max();
        if let Some(ready) = ready {
            e.start_ns = e.start_ns.max(ready);
        }
    }
}

/// Time devices waited on the run's all-to-alls (MoE stages), summed over devices: `(waited,
/// exposed)`, where exposed is the part in which the device computed nothing
/// ([`crate::trace::exposed_wait_ns`]); the rest was hidden under other work (a paired B's).
pub(super) fn all_to_all_waits(program: &Program, id: u64, raw: &[Event]) -> (u64, u64) {
    let exchange = |e: &Event| {
        e.node
            .and_then(|n| program.nodes().get(n as usize))
            .is_some_and(|n| matches!(n.op, Op::AllToAll(..)))
    };
    let mine: Vec<Event> = raw
        .iter()
        .filter(|e| e.program == Some(id))
        .filter(|e| e.kind == EventKind::Kernel || (e.kind == EventKind::Wait && exchange(e)))
        .cloned()
        .collect();
    let waited = mine
        .iter()
        .filter(|e| e.kind == EventKind::Wait)
        .map(Event::duration_ns)
        .sum();
    let devices: BTreeSet<usize> = mine.iter().map(|e| e.device).collect();
    let exposed = devices
        .into_iter()
        .map(|d| exposed_wait_ns(&mine, d, |_| true))
        .sum();
    (waited, exposed)
}

/// Measures the run from its pipeline events.
pub(super) fn report<M: StageModel>(
    plan: &Plan<'_, M>,
    weights: Vec<Vec<f32>>,
    losses: Vec<f32>,
    mut events: Vec<Event>,
    (all_to_all_wait_ns, all_to_all_exposed_ns): (u64, u64),
) -> Result<RunReport> {
    let schedule = plan.schedule;
    events.sort_by_key(|e| (e.start_ns, e.end_ns));
    let loss = losses.iter().map(|&l| f64::from(l)).sum::<f64>() / losses.len().max(1) as f64;

    let max_rows = plan.rows.iter().copied().max().unwrap_or(0);
    let activation_bytes = plan.split[..plan.split.len() - 1]
        .iter()
        .map(|r| (max_rows * plan.model.width(r.end) * 4) as u64)
        .max()
        .unwrap_or(0);
    let measured = Costs {
        activation_bytes,
        ..measured_chunk_costs(&events)
    };

    // The bubble every view of a pipeline trace reports (the Files tab, `gangway trace`).
    let (makespan_ns, measured_bubble) =
        pipeline_bubble(&events).map_or((0, 0.0), |b| (b.makespan_ns, b.fraction));
    let simulated = simulate_folded(schedule, &measured, &[], plan.fold)?;
    let folded = plan.fold.shares(schedule.stages);
    let tracks = (0..plan.fold.device_count(schedule.stages))
        .map(|d| {
            let label = plan
                .gang_of(d)
                .iter()
                .filter_map(|&i| plan.mesh.get(i).map(|x| x.label()))
                .collect::<Vec<_>>()
                .join(" + ");
            if !folded {
                return Track::holding(d, TrackKind::Stage, vec![d], format!("stage {d}: {label}"));
            }
            let held: Vec<usize> = (0..schedule.stages).filter(|&s| plan.dev(s) == d).collect();
            // A folded lane is one device, or one gang of devices (MoE stages).
            let kind = if plan.gang > 1 {
                TrackKind::Gang
            } else {
                TrackKind::Device
            };
            let list: Vec<String> = held.iter().map(usize::to_string).collect();
            let label = format!("{} {d} (stages {}): {label}", kind.word(), list.join(", "));
            Track::holding(d, kind, held, label)
        })
        .collect();
    Ok(RunReport {
        weights,
        loss: loss as f32,
        events,
        tracks,
        makespan_ns,
        measured,
        measured_bubble,
        simulated,
        all_to_all_wait_ns,
        all_to_all_exposed_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(op: PipelineOp, lane: usize, mb: u32, start_ns: u64, ns: u64) -> Event {
        let meta = EventMeta::kernel(lane).microbatch(mb).op(op);
        meta.event(op.letter().into(), start_ns, start_ns + ns)
    }

    /// A send starts when the F that made its activation ended, not when a later op of its lane
    /// did: here F of microbatch 4 ends (450) after the copy was read back and received (300),
    /// before the sender recorded the read-back's end (500); so does a W of the same
    /// microbatch.
    #[test]
    fn a_send_starts_after_its_own_producer_only() {
        let send = EventMeta::transfer(0)
            .microbatch(3)
            .flow(1, FlowRole::Out)
            .event("send act".into(), 100, 500);
        let compute = vec![
            op(PipelineOp::Forward, 0, 3, 50, 150),
            op(PipelineOp::WeightGrad, 0, 3, 210, 190),
            op(PipelineOp::Forward, 0, 4, 200, 250),
            op(PipelineOp::Forward, 1, 3, 300, 100),
            op(PipelineOp::Backward, 0, 3, 600, 50),
        ];
        let mut out = vec![send.clone()];
        start_sends_after_their_producers(&mut out, &[(0, PipelineOp::Forward)], &compute);
        assert_eq!((out[0].start_ns, out[0].end_ns), (200, 500));
        // No producer found: the send keeps its own start.
        let mut out = vec![send];
        start_sends_after_their_producers(&mut out, &[(0, PipelineOp::Backward)], &compute);
        assert_eq!(out[0].start_ns, 100);
    }

    /// Two lanes, two microbatches, two chunk ops each (a V): the share is twice each chunk
    /// op's mean; without B ops there is no pipelined run.
    #[test]
    fn measured_share_scales_chunk_ops_to_a_lane_share() {
        let mut events = Vec::new();
        for lane in 0..2 {
            for mb in 0..2 {
                for chunk in 0..2u64 {
                    let t = 100 * chunk;
                    events.push(op(PipelineOp::Forward, lane, mb, t, 10 + chunk * 2));
                    events.push(op(PipelineOp::Backward, lane, mb, t + 20, 20));
                    events.push(op(PipelineOp::WeightGrad, lane, mb, t + 50, 6));
                }
            }
        }
        let chunk = measured_chunk_costs(&events);
        assert_eq!(
            [chunk.forward_ns, chunk.backward_ns, chunk.weight_grad_ns],
            [11, 20, 6]
        );
        let share = measured_share(&events).unwrap();
        assert_eq!(
            [share.forward_ns, share.backward_ns, share.weight_grad_ns],
            [22, 40, 12]
        );
        events.retain(|e| e.op != Some(PipelineOp::Backward));
        assert!(measured_share(&events).is_none());
        assert!(measured_share(&[]).is_none());
    }
}
