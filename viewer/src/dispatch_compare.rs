//! The chain program with sequential and with parallel dispatch, traced, side by side: with
//! sequential dispatch the host encodes node i+1 only after node i is done, so the devices sit
//! idle between kernels; parallel dispatch encodes everything up front.

use std::time::Instant;

use egui::Ui;
use gangway::sched::{DispatchMode, Runtime};
use gangway::trace::Track;

use crate::background::{self, Job};
use crate::live::{DeviceHub, chain, chain_client, run_chain};
use crate::timeline::{self, TimelineData, TimelineState, format_ns};

/// Runs of the chain per mode.
pub const RUNS: usize = 6;

/// One mode's traced run.
#[derive(Debug)]
pub struct ModeRun {
    pub mode: DispatchMode,
    pub data: TimelineData,
    pub wall_ns: u64,
    pub state: TimelineState,
}

#[derive(Debug, Default)]
pub struct DispatchCompare {
    pending: Option<Job<Result<Vec<ModeRun>, String>>>,
    pub runs: Vec<ModeRun>,
    pub error: Option<String>,
    /// Whether both views were put on one time scale since the last results.
    scaled: bool,
}

fn run_mode(runtime: &Runtime, mode: DispatchMode) -> Result<ModeRun, String> {
    let devices = runtime.devices();
    let exec = chain(devices, 4).map_err(|e| e.to_string())?;
    let client = chain_client(runtime, mode);
    // One untraced warm-up, then the measured runs, each keeping its events.
    run_chain(&client, &exec, mode, 1, false).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let events = run_chain(&client, &exec, mode, RUNS, true).map_err(|e| e.to_string())?;
    let wall_ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut data = TimelineData::from_events(events);
    data.lanes = devices
        .iter()
        .map(|d| (d.id(), Track::device(d.id(), d.info().name.clone())))
        .collect();
    Ok(ModeRun {
        mode,
        data,
        wall_ns,
        state: TimelineState::default(),
    })
}

/// The comparison in one line, from each mode's wall time for the same [`RUNS`] runs:
/// "parallel 2.0× faster than sequential".
pub fn verdict(sequential_ns: u64, parallel_ns: u64) -> String {
    let (seq, par) = (sequential_ns.max(1) as f64, parallel_ns.max(1) as f64);
    let ratio = seq / par;
    let what = if (ratio - 1.0).abs() < 0.005 {
        "as fast as".to_string()
    } else if ratio > 1.0 {
        format!("{ratio:.1}× faster than")
    } else {
        format!("{:.1}× slower than", 1.0 / ratio)
    };
    format!("parallel {what} sequential ({RUNS} runs each, wall time)")
}

/// Both modes, one after the other, as clients of `runtime` (on its first devices, up to 4).
pub fn compare(runtime: &Runtime) -> Result<Vec<ModeRun>, String> {
    [DispatchMode::Sequential, DispatchMode::Parallel]
        .into_iter()
        .map(|m| run_mode(runtime, m))
        .collect()
}

impl DispatchCompare {
    pub fn is_running(&self) -> bool {
        self.pending.is_some()
    }

    /// Starts both runs on a background thread.
    pub fn start(&mut self, runtime: Runtime, ctx: Option<egui::Context>) {
        match background::spawn("gangway-compare", ctx, move || compare(&runtime)) {
            Ok(rx) => {
                self.pending = Some(rx);
                self.error = None;
            }
            Err(e) => self.error = Some(e),
        }
    }

    /// Picks up finished results.
    pub fn poll(&mut self) -> bool {
        let Some(done) = self.pending.as_ref().and_then(|j| j.poll("the comparison")) else {
            return false;
        };
        match done.and_then(|r| r) {
            Ok(runs) => {
                self.runs = runs;
                self.scaled = false;
            }
            Err(e) => self.error = Some(e),
        }
        self.pending = None;
        true
    }

    pub fn ui(&mut self, ui: &mut Ui, hub: &DeviceHub) {
        self.poll();
        ui.horizontal(|ui| {
            let runtime = hub.runtime();
            let enabled = runtime.is_some() && !self.is_running();
            if ui
                .add_enabled(enabled, egui::Button::new("Run comparison"))
                .on_disabled_hover_text("needs devices, and no comparison running")
                .clicked()
                && let Some(runtime) = runtime
            {
                self.start(runtime, Some(ui.ctx().clone()));
            }
            if self.is_running() {
                ui.spinner();
                ui.ctx()
                    .request_repaint_after(std::time::Duration::from_millis(100));
            }
            ui.weak(format!(
                "the chain program (one tiny kernel per device, up to 4), {RUNS} runs per mode"
            ));
        });
        if let Some(e) = &self.error {
            ui.colored_label(ui.visuals().error_fg_color, format!("error: {e}"));
        }
        if self.runs.is_empty() {
            return;
        }
        // One time scale for both, so their lengths compare at a glance.
        if !self.scaled && self.runs.iter().all(|r| r.state.view.is_some()) {
            let widest = self
                .runs
                .iter()
                .filter_map(|r| r.state.view.map(|v| v.ns_per_px))
                .fold(0.0, f64::max);
            for r in &mut self.runs {
                if let (Some(v), Some(span)) = (&mut r.state.view, r.data.span()) {
                    v.ns_per_px = widest;
                    v.start_ns = span.start as f64;
                }
            }
            self.scaled = true;
        }
        let wall = |m: DispatchMode| self.runs.iter().find(|r| r.mode == m).map(|r| r.wall_ns);
        if let (Some(seq), Some(par)) =
            (wall(DispatchMode::Sequential), wall(DispatchMode::Parallel))
        {
            ui.label(egui::RichText::new(verdict(seq, par)).strong());
        }
        ui.weak(
            "both on one time scale, each axis from its own run's first event; double-click a \
             timeline to fit it alone",
        );
        timeline::legend(ui);
        ui.columns(self.runs.len(), |cols| {
            for (col, run) in cols.iter_mut().zip(&mut self.runs) {
                col.heading(run.mode.name());
                col.label(format!(
                    "{RUNS} runs in {} ({:.0} runs/s)",
                    format_ns(run.wall_ns as f64),
                    RUNS as f64 / (run.wall_ns.max(1) as f64 / 1e9)
                ));
                timeline::timeline(col, run.mode.name(), &run.data, &mut run.state);
            }
        });
    }
}
