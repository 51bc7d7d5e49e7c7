//! A pipeline trace's bubble, found from its events' [`PipelineOp`]s, never from their names.
//! The bubble is idle compute time over `stages × makespan`, the figure the simulator reports as
//! `pipeline::Simulation::bubble_fraction` and a real run as
//! `pipeline::RunReport::measured_bubble`, measured from any trace that holds pipeline ops. The
//! viewer's Files tab and `gangway trace` both use this one.

use serde::Serialize;

use super::event::{Event, PipelineOp};

/// The bubble of a pipeline trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PipelineBubble {
    /// Devices that ran pipeline ops.
    pub stages: usize,
    /// First pipeline op's start to the last one's end, over all stages.
    pub makespan_ns: u64,
    /// Per stage `(device, ns)`: time its compute lane spent in pipeline ops (the union of their
    /// intervals, so overlapping slices count once).
    pub busy_ns: Vec<(usize, u64)>,
    /// `1 − Σ busy / (stages × makespan)`, in `[0, 1]`.
    pub fraction: f64,
}

/// The bubble of a pipeline run's trace, or `None` when the trace does not look like one.
///
/// A pipeline run is what gangway's pipeline executor and simulator trace: kernels on each
/// device's compute lane marked as `F`, `B` and `W` ops ([`PipelineOp::of`]), both forwards and
/// backwards present. Only those ops count as busy: other kernels, transfers and host work are
/// not pipeline compute.
pub fn pipeline_bubble<'a>(events: impl IntoIterator<Item = &'a Event>) -> Option<PipelineBubble> {
    let (mut forward, mut backward) = (false, false);
    let mut per_device: Vec<(usize, Vec<(u64, u64)>)> = Vec::new();
    for e in events {
        match PipelineOp::of(e) {
            Some(PipelineOp::Forward) => forward = true,
            Some(PipelineOp::Backward) => backward = true,
            Some(PipelineOp::WeightGrad) => {}
            None => continue,
        }
        let at = match per_device.binary_search_by_key(&e.device, |(d, _)| *d) {
            Ok(at) => at,
            Err(at) => {
                per_device.insert(at, (e.device, Vec::new()));
                at
            }
        };
        per_device[at].1.push((e.start_ns, e.clamped_end_ns()));
    }
    if !(forward && backward) {
        return None;
    }
    let first = per_device
        .iter()
        .flat_map(|(_, v)| v.iter().map(|i| i.0))
        .min()?;
    let last = per_device
        .iter()
        .flat_map(|(_, v)| v.iter().map(|i| i.1))
        .max()?;
    let makespan_ns = last.saturating_sub(first);
    if makespan_ns == 0 {
        return None;
    }
    let busy_ns: Vec<(usize, u64)> = per_device
        .into_iter()
        .map(|(device, mut v)| (device, union_ns(&mut v)))
        .collect();
    let stages = busy_ns.len();
    let busy: u64 = busy_ns.iter().map(|(_, b)| b).sum();
    let capacity = stages as f64 * makespan_ns as f64;
    let fraction = (1.0 - busy as f64 / capacity).clamp(0.0, 1.0);
    Some(PipelineBubble {
        stages,
        makespan_ns,
        busy_ns,
        fraction,
    })
}

/// Length of the union of `intervals` (sorted here).
pub fn union_ns(intervals: &mut [(u64, u64)]) -> u64 {
    intervals.sort_unstable();
    let mut total = 0;
    let mut current: Option<(u64, u64)> = None;
    for &(s, e) in intervals.iter() {
        current = match current {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    total + current.map_or(0, |(s, e)| e - s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::EventMeta;

    #[test]
    fn ops_are_what_their_events_say_never_their_names() {
        for op in PipelineOp::ALL {
            assert_eq!(PipelineOp::of_letter(op.letter()), Some(op));
        }
        assert_eq!(PipelineOp::of_letter("Fused"), None);
        // A kernel named like an op is not one; a marked one is, whatever its name.
        let named = EventMeta::kernel(0).event("F3".into(), 0, 1);
        assert_eq!(PipelineOp::of(&named), None);
        let marked = EventMeta::kernel(0)
            .op(PipelineOp::Backward)
            .event("matmul".into(), 0, 1);
        assert_eq!(PipelineOp::of(&marked), Some(PipelineOp::Backward));
        // Only kernels on a compute lane are ops.
        let host = EventMeta::host_encode(0)
            .op(PipelineOp::Forward)
            .event("F".into(), 0, 1);
        assert_eq!(PipelineOp::of(&host), None);
    }

    #[test]
    fn bubble_is_idle_compute_over_stages_times_makespan() {
        // The op is the name's first letter here, as the simulator names its ops.
        let k = |d: usize, name: &str, s: u64, e: u64| {
            let meta = EventMeta::kernel(d);
            let meta = match PipelineOp::of_letter(&name[..1]) {
                Some(op) => meta.op(op),
                None => meta,
            };
            meta.event(name.into(), s, e)
        };
        // Stage 0 busy 0..40 (F0 and an overlapping F1 count once), stage 1 busy 10..30 and
        // 30..50; makespan 0..50.
        let events = [
            k(0, "F0", 0, 20),
            k(0, "F1", 10, 20),
            k(0, "B0", 20, 40),
            k(1, "F0", 10, 30),
            k(1, "B0", 30, 50),
            k(1, "matmul", 50, 500),
            EventMeta::transfer(1).event("send".into(), 0, 1_000),
        ];
        let b = pipeline_bubble(&events).unwrap();
        assert_eq!(b.stages, 2);
        assert_eq!(b.makespan_ns, 50);
        assert_eq!(b.busy_ns, [(0, 40), (1, 40)]);
        assert!((b.fraction - 0.2).abs() < 1e-12);
        // Forwards alone are not a pipeline.
        assert_eq!(pipeline_bubble(&events[..2]), None);
    }
}
