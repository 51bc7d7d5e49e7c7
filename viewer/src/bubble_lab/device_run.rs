//! Running the lab's schedule on devices: the shape a run is for ([`RunShape`]), the run itself
//! (one pipelined MLP training step, checked against a single-device step, [`run_on_devices`]),
//! and why it cannot run with the devices found ([`run_blocker`]).

use gangway::Device;
use gangway::pipeline::workload::{PipelineResult, PreparedCase};
use gangway::pipeline::{Costs, Fold, Schedule, ScheduleKind};
use gangway::sched::Runtime;
use gangway::trace::TrackKind;

use super::{LabParams, label};
use crate::live::Discovery;
use crate::timeline::{TimelineData, TimelineState};

/// The shape a run on devices is for, and what its schedule is planned for: the sliders' costs
/// (per chunk op) and memory, so the run runs the schedule the lab shows (ZB-V's and zb-auto's
/// depend on them). The measured costs come from the devices.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunShape {
    pub kind: ScheduleKind,
    pub stages: usize,
    pub microbatches: usize,
    /// Effective chunks: `v` for interleaved, 1 for the rest.
    pub chunks: usize,
    /// Where the stages run.
    pub fold: Fold,
    /// What the schedule is planned for: one chunk op's costs, and zb-auto's memory.
    pub planned_for: Costs,
    pub memory: Option<usize>,
}

impl RunShape {
    pub fn of(p: &LabParams) -> Self {
        let chunks = p.effective_chunks();
        Self {
            kind: p.kind,
            stages: p.stages,
            microbatches: p.microbatches,
            chunks,
            fold: p.fold(),
            planned_for: p.share_costs().per_chunk(p.kind.passes(chunks)),
            memory: p.memory,
        }
    }

    /// Devices the run takes.
    pub fn devices(&self) -> usize {
        self.fold.device_count(self.stages)
    }

    /// E.g. "1F1B, p = 2, m = 4" (", v = 2" for interleaved; ", on 2 devices (blocks)" when
    /// folded).
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{}, p = {}, m = {}",
            label(self.kind),
            self.stages,
            self.microbatches
        );
        if self.kind.takes_chunks() {
            s.push_str(&format!(", v = {}", self.chunks));
        }
        if self.fold.shares(self.stages) {
            let d = self.devices();
            let devices = if d == 1 { "device" } else { "devices" };
            s.push_str(&format!(
                ", on {d} {devices} ({})",
                self.fold.placement_name()
            ));
        }
        s
    }
}

/// One pipelined training step measured on devices.
#[derive(Debug)]
pub struct DeviceRun {
    pub result: PipelineResult,
    /// Mean measured op and transfer times (what the simulation was fed).
    pub measured: Costs,
    /// Every event of the run, a lane per device (one per stage unless folded), shifted to start
    /// at 0.
    pub data: TimelineData,
    pub timeline: TimelineState,
}

/// Runs `shape` on the first `shape.devices()` devices of `runtime`, as one of its clients, and
/// checks it against a single-device step (blocking: call it off the UI thread).
pub fn run_on_devices(runtime: &Runtime, shape: RunShape) -> Result<DeviceRun, String> {
    let schedule = Schedule::for_costs_within(
        shape.kind,
        shape.stages,
        shape.microbatches,
        shape.chunks,
        &shape.planned_for,
        shape.memory,
    )
    .map_err(|e| e.to_string())?;
    let (result, report) = PreparedCase::of(schedule)
        .and_then(|case| {
            case.run(
                &runtime.client("viewer: bubble lab", 1),
                &gangway::Mesh::line(runtime.devices()),
                shape.fold,
            )
        })
        .map_err(|e| e.to_string())?;
    // Start at 0, as the simulated timeline does, so the two read on the same axis.
    let t0 = report.events.iter().map(|e| e.start_ns).min().unwrap_or(0);
    let mut data = TimelineData::from_events(report.events.into_iter().map(|mut e| {
        e.start_ns = e.start_ns.saturating_sub(t0);
        e.end_ns = e.end_ns.saturating_sub(t0);
        e
    }));
    let lane = TrackKind::of_pipeline(shape.fold.shares(shape.stages)).word();
    data.device_prefix = Some(lane.into());
    data.lanes = report.tracks.into_iter().map(|t| (t.id, t)).collect();
    Ok(DeviceRun {
        result,
        measured: report.measured,
        data,
        timeline: TimelineState::default(),
    })
}

/// Why "Run on devices" cannot run `shape` with what discovery found, if it cannot.
pub fn run_blocker(shape: &RunShape, discovery: &Discovery) -> Option<String> {
    match discovery {
        Discovery::Pending => Some("looking for adapters...".into()),
        Discovery::Unavailable(why) => Some(format!("real runs are off: {why}")),
        Discovery::Found(devices) => {
            (devices.len() < shape.devices()).then(|| needs_devices(shape, devices))
        }
    }
}

/// "needs d devices, n found", with the `--virtual-devices` that would make enough.
fn needs_devices(shape: &RunShape, devices: &[Device]) -> String {
    let mut adapters: Vec<usize> = devices.iter().map(|d| d.info().adapter).collect();
    adapters.sort_unstable();
    adapters.dedup();
    let need = shape.devices();
    let per_adapter = need.div_ceil(adapters.len().max(1));
    let what = if shape.fold.shares(shape.stages) {
        format!("{need} devices (the stages' fold)")
    } else {
        format!("{need} devices (one per stage)")
    };
    format!(
        "needs {what}, {} found: start the viewer with --virtual-devices {per_adapter} (or \
         GANGWAY_VIRTUAL_DEVICES={per_adapter}) to split each adapter into {per_adapter} \
         devices, fold the stages onto fewer devices, or lower p",
        devices.len()
    )
}
